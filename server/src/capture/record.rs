//! What the capture hook (`hook.py`) writes for each launch it watched: one JSON line per
//! distinct launch of a kernel, and one summary line per process with every kernel's
//! launch count. The CUDA shim (`shim.c`) writes its own lines (`"cuda": true`, and a
//! `cuda_summary`), which `cuda::resolve` turns into launches against the project's
//! sources. Plain data, read with serde; `parse_lines` never fails on a bad line, it
//! counts it.

use serde::Deserialize;

use super::cuda::{CudaCount, CudaLaunch};

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
    /// CUDA: the block as launched, three dimensions.
    #[serde(default)]
    pub block: Option<Vec<u64>>,
    /// CUDA: dynamic shared memory in bytes.
    #[serde(default)]
    pub smem: Option<u64>,
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
    /// CUDA launches and counts from the shim, by symbol (not yet resolved).
    pub cuda: Vec<CudaLaunch>,
    pub cuda_counts: Vec<CudaCount>,
    /// Lines that were not records (a process killed mid-line).
    pub bad_lines: usize,
}

#[derive(Deserialize)]
struct Summary {
    summary: Vec<Count>,
}

#[derive(Deserialize)]
struct CudaSummary {
    cuda_summary: Vec<CudaCount>,
}

pub fn parse_lines(text: &str) -> Records {
    let mut out = Records::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            out.bad_lines += 1;
            continue;
        };
        let cuda = v.get("cuda").and_then(|c| c.as_bool()) == Some(true);
        if let Ok(s) = serde_json::from_value::<Summary>(v.clone()) {
            out.counts.extend(s.summary);
        } else if let Ok(s) = serde_json::from_value::<CudaSummary>(v.clone()) {
            out.cuda_counts.extend(s.cuda_summary);
        } else if let (true, Ok(l)) = (cuda, serde_json::from_value::<CudaLaunch>(v.clone())) {
            out.cuda.push(l);
        } else if let (false, Ok(l)) = (cuda, serde_json::from_value::<Launch>(v)) {
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

    #[test]
    fn reads_the_cuda_shims_lines_apart() {
        let text = r#"{"cuda":true,"kernel":"_Z5scalePKfPfi","grid":[4,1,1],"block":[256,1,1],"smem":0,"params":[{"offset":0,"size":4,"hex":"0a000000"}]}
{"cuda_summary":[{"kernel":"_Z5scalePKfPfi","launches":7}],"pid":2}
{"cuda":true,"kernel":"k"}
"#;
        let r = parse_lines(text);
        assert_eq!(r.cuda.len(), 1);
        assert!(r.launches.is_empty());
        assert_eq!(r.cuda[0].block, vec![256, 1, 1]);
        assert_eq!(r.cuda[0].params[0].hex, "0a000000");
        assert_eq!(r.cuda_counts[0].launches, 7);
        assert_eq!(
            r.bad_lines, 1,
            "a CUDA line without grid and block is not read"
        );
    }
}
