//! What the capture hook (`hook.py`) writes for each launch it watched: one JSON line per
//! distinct launch of a kernel, and one summary line per process with every kernel's
//! launch count. Plain data, read with serde; `parse_lines` never fails on a bad line,
//! it counts it.

use serde::Deserialize;

/// One argument of a launch, as the hook saw it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Arg {
    pub name: String,
    /// `tensor`, `none`, `bool`, `int`, `float`, `str`, `pointer` (an object with a
    /// `data_ptr` that is no tensor), `tuple`, `other`.
    pub kind: String,
    #[serde(default)]
    pub constexpr: bool,
    /// Given at the launch (not left to the signature's default).
    #[serde(default = "yes")]
    pub passed: bool,
    #[serde(default)]
    pub has_default: bool,
    #[serde(default)]
    pub default: Option<serde_json::Value>,
    /// `heuristics` or `autotune`: a wrapper computed or chose this value.
    #[serde(default)]
    pub set_by: Option<String>,
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    /// The Python type, for `pointer` and `other`.
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
    #[serde(default)]
    pub shape: Vec<u64>,
    #[serde(default)]
    pub strides: Vec<i64>,
    #[serde(default)]
    pub dtype: Option<String>,
    /// Smallest and largest finite value before the launch (tensors).
    #[serde(default)]
    pub lo: Option<f64>,
    #[serde(default)]
    pub hi: Option<f64>,
    /// `in`, `out` or `inout`, from what the launch wrote (tensors).
    #[serde(default)]
    pub role: Option<String>,
}

fn yes() -> bool {
    true
}

/// One launch of a kernel.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Launch {
    pub kernel: String,
    /// The kernel's source file, absolute.
    pub file: String,
    #[serde(default)]
    pub line: u32,
    pub args: Vec<Arg>,
    /// The grid as launched, three dimensions; `None` when the grid could not be read.
    #[serde(default)]
    pub grid: Option<Vec<u64>>,
    #[serde(default)]
    pub num_warps: Option<u32>,
    #[serde(default)]
    pub num_stages: Option<u32>,
    /// Why the hook could not capture this launch.
    #[serde(default)]
    pub refused: Option<String>,
}

/// Launch counts of one process, per kernel.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Count {
    pub file: String,
    pub kernel: String,
    pub launches: u64,
}

/// Everything one capture run wrote.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Records {
    pub launches: Vec<Launch>,
    pub counts: Vec<Count>,
    /// Lines that were not records (a process killed mid-line).
    pub bad_lines: usize,
}

#[derive(Deserialize)]
struct Summary {
    summary: Vec<Count>,
}

pub fn parse_lines(text: &str) -> Records {
    let mut out = Records::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Ok(s) = serde_json::from_str::<Summary>(line) {
            out.counts.extend(s.summary);
        } else if let Ok(l) = serde_json::from_str::<Launch>(line) {
            out.launches.push(l);
        } else {
            out.bad_lines += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_launches_summaries_and_counts_bad_lines() {
        let text = r#"{"kernel":"k","file":"/a.py","args":[{"name":"x","kind":"tensor","shape":[4],"strides":[1],"dtype":"float32","role":"in"}],"grid":[1,1,1]}
{"summary":[{"file":"/a.py","kernel":"k","launches":3}],"pid":1}
{"kernel":"k","file":
"#;
        let r = parse_lines(text);
        assert_eq!(r.launches.len(), 1);
        assert_eq!(r.launches[0].args[0].shape, vec![4]);
        assert!(r.launches[0].args[0].passed);
        assert_eq!(r.counts[0].launches, 3);
        assert_eq!(r.bad_lines, 1);
    }
}
