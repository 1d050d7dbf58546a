//! The integer constants a file names above a kernel. CUDA: object-like macros
//! (`#define THREADS 256`, `#define TILE (32)`) and file-scope constants (`constexpr int
//! BLOCK = 128;`, `static const unsigned WARPS = 8;`); Python: module-level `BLOCK = 1024`
//! (or annotated `tl.constexpr`). A spec may use them by name in its
//! launch (`grid = cdiv(n, THREADS); block = THREADS`) without repeating the value. Only
//! plain integer literals count: a macro whose value is an expression, a function-like
//! macro or a constant of another type is not one. The scan is textual, line by line
//! (one pass over the file, `#undef` honoured); what the preprocessor would skip under an
//! `#if` is read too, the last definition above the kernel winning. Pure: text in, list
//! out.

/// One constant: where its definition starts, its name, and its value (`None` for an
/// `#undef`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constant {
    pub at: usize,
    pub name: String,
    pub value: Option<i64>,
}

/// Every integer constant definition (and `#undef`) in `src`, in text order.
pub fn integer_constants(src: &str) -> Vec<Constant> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        let t = line.trim();
        if t.starts_with('#') || t.contains("const") {
            if let Some((name, value)) = definition(t) {
                out.push(Constant { at, name, value });
            }
        }
        at += line.len();
    }
    out
}

/// Every module-level integer constant of a Python file, in text order: `NAME = 1024`,
/// `NAME: tl.constexpr = 1024`, `NAME = tl.constexpr(1024)`, at column 0 (an indented
/// line belongs to a function or a class).
pub fn python_constants(src: &str) -> Vec<Constant> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        let starts = line.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if let Some((name, value)) = starts.then(|| python_definition(line)).flatten() {
            out.push(Constant {
                at,
                name,
                value: Some(value),
            });
        }
        at += line.len();
    }
    out
}

fn python_definition(line: &str) -> Option<(String, i64)> {
    let code = line.split('#').next()?.trim();
    let (left, right) = code.split_once('=')?;
    if right.starts_with('=') || left.ends_with(['!', '<', '>']) {
        return None;
    }
    let name = match left.split_once(':') {
        Some((n, ann)) => (ann.trim() == "tl.constexpr").then_some(n.trim())?,
        None => left.trim(),
    };
    let value = right.trim();
    let value = value
        .strip_prefix("tl.constexpr(")
        .and_then(|v| v.strip_suffix(')'))
        .unwrap_or(value);
    let v = value.replace('_', "");
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => v.parse::<i64>().ok(),
    };
    (is_ident(name)).then_some(())?;
    parsed.map(|p| (name.to_string(), p))
}

/// The constants in force at byte `pos`: the last definition of each name before it,
/// `#undef`s dropped, in name order.
pub fn constants_before(all: &[Constant], pos: usize) -> Vec<(String, i64)> {
    let mut m: std::collections::BTreeMap<&str, Option<i64>> = Default::default();
    for c in all.iter().take_while(|c| c.at < pos) {
        m.insert(&c.name, c.value);
    }
    m.into_iter()
        .filter_map(|(n, v)| v.map(|v| (n.to_string(), v)))
        .collect()
}

/// `#define NAME INT`, `#undef NAME`, or `[static] constexpr|const [unsigned] int-type
/// NAME = INT;` on one trimmed line.
fn definition(t: &str) -> Option<(String, Option<i64>)> {
    if let Some(rest) = t.strip_prefix('#') {
        let rest = rest.trim_start();
        if let Some(d) = rest.strip_prefix("define") {
            let mut parts = d.split_whitespace();
            let name = parts.next().filter(|n| is_ident(n))?;
            let value = parts.next().and_then(integer)?;
            let rest: Vec<&str> = parts.collect();
            return (rest.is_empty() || rest[0].starts_with("//"))
                .then(|| (name.to_string(), Some(value)));
        }
        let name = rest.strip_prefix("undef")?.split_whitespace().next()?;
        return is_ident(name).then(|| (name.to_string(), None));
    }
    let (decl, value) = t.split_once('=')?;
    let value = value.trim().strip_suffix(';').or_else(|| {
        let (v, comment) = value.split_once(';')?;
        comment.trim().starts_with("//").then_some(v)
    })?;
    let words: Vec<&str> = decl.split_whitespace().collect();
    let (name, ty) = words.split_last()?;
    let qualifiers_ok = ty.iter().all(|w| {
        matches!(
            *w,
            "static" | "constexpr" | "const" | "__device__" | "__constant__" | "inline"
        ) || INT_WORDS.contains(w)
    });
    let is_const = ty.iter().any(|w| *w == "constexpr" || *w == "const");
    let is_int = ty.iter().any(|w| INT_WORDS.contains(w));
    (qualifiers_ok && is_const && is_int && is_ident(name))
        .then(|| integer(value.trim()).map(|v| (name.to_string(), Some(v))))
        .flatten()
}

const INT_WORDS: &[&str] = &[
    "int", "unsigned", "long", "short", "size_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
];

fn is_ident(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An integer literal (decimal or hex, with `u`/`l` suffixes), possibly in parentheses.
fn integer(s: &str) -> Option<i64> {
    let mut s = s.trim();
    while let Some(inner) = s.strip_prefix('(').and_then(|x| x.strip_suffix(')')) {
        s = inner.trim();
    }
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => s.parse::<i64>().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_macros_and_constants_above_a_position() {
        let src = "#define THREADS 256\n#define TILE (32) // a tile\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#define SCALE 0.5f\n#define N2 (N * 2)\nconstexpr int BLOCK = 128;\nstatic const unsigned WARPS = 0x8u;\nconst float eps = 1e-5f;\nint counter = 3;\n__global__ void k() {}\n#undef THREADS\n#define TILE 64\n__global__ void j() {}\n";
        let all = integer_constants(src);
        let names: Vec<(&str, Option<i64>)> =
            all.iter().map(|c| (c.name.as_str(), c.value)).collect();
        assert_eq!(
            names,
            [
                ("THREADS", Some(256)),
                ("TILE", Some(32)),
                ("BLOCK", Some(128)),
                ("WARPS", Some(8)),
                ("THREADS", None),
                ("TILE", Some(64)),
            ]
        );
        let first = src.find("__global__ void k").unwrap();
        assert_eq!(
            constants_before(&all, first),
            [
                ("BLOCK".to_string(), 128),
                ("THREADS".to_string(), 256),
                ("TILE".to_string(), 32),
                ("WARPS".to_string(), 8)
            ]
        );
        let second = src.find("__global__ void j").unwrap();
        assert_eq!(
            constants_before(&all, second),
            [
                ("BLOCK".to_string(), 128),
                ("TILE".to_string(), 64),
                ("WARPS".to_string(), 8)
            ]
        );
    }
}

#[cfg(test)]
mod python_tests {
    use super::*;

    #[test]
    fn module_level_integer_constants_of_a_python_file() {
        let src = "import triton\nBLOCK = 1024\nWARPS: tl.constexpr = 4\nTILE = tl.constexpr(0x40)  # a tile\nBIG = 1_000_000\nSCALE = 0.5\nNAME = 'x'\nif BLOCK == 2:\n    pass\ndef f():\n    LOCAL = 3\n";
        let got: Vec<(String, Option<i64>)> = python_constants(src)
            .into_iter()
            .map(|c| (c.name, c.value))
            .collect();
        assert_eq!(
            got,
            [
                ("BLOCK".to_string(), Some(1024)),
                ("WARPS".to_string(), Some(4)),
                ("TILE".to_string(), Some(64)),
                ("BIG".to_string(), Some(1_000_000)),
            ]
        );
    }
}

#[cfg(test)]
mod spec_tests {
    use crate::document::Document;
    use crate::spec::{self, EvalEnv, Launch};
    use crate::syntax::{self, Lang};

    const SRC: &str = "#define THREADS 256\nconstexpr int ROWS = 4;\n// @bench n = 1000, 999\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, THREADS * ROWS); block = (THREADS, ROWS)\n__global__ void k(const float* x, float* y, int n) {\n    int i = (blockIdx.x * ROWS + threadIdx.y) * THREADS + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n#undef THREADS\n// @bench n = 1000\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, THREADS); block = 128\n__global__ void after_undef(const float* x, float* y, int n) {\n    int i = blockIdx.x * 128 + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n// @bench n = 1000; ROWS = 2\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 64 * ROWS); block = (64, ROWS)\n__global__ void own_value(const float* x, float* y, int n) {\n    int i = (blockIdx.x * 2 + threadIdx.y) * 64 + threadIdx.x;\n    if (i < n) y[i] = x[i];\n}\n";

    fn report(kernel: &str) -> spec::SpecReport {
        let doc = Document::new(Lang::Cuda, 0, SRC);
        let model = syntax::analyze(Lang::Cuda, SRC, doc.tree().expect("parses"));
        let k = model.kernel(kernel).expect("kernel");
        spec::analyze(k, &model.kernels, &EvalEnv::default())
    }

    fn launch(kernel: &str) -> ([u64; 3], [u64; 3]) {
        let plan = report(kernel).plan.expect("plans");
        match &plan.cases[0].launch {
            Launch::Cuda { grid, block, .. } => (*grid, *block),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_triton_launch_may_name_a_module_constant() {
        let src = "import triton\nimport triton.language as tl\nCHUNK = 512\n\n# @bench n = 4096, 1000\n# @bench x: in f32[n]; y: out f32[n]\n# @bench grid = cdiv(n, CHUNK); BLOCK = CHUNK\n@triton.jit\ndef copy(x, y, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    tl.store(y + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)\n";
        let doc = Document::new(Lang::Triton, 0, src);
        let model = syntax::analyze(Lang::Triton, src, doc.tree().expect("parses"));
        let k = model.kernel("copy").expect("kernel");
        let r = spec::analyze(k, &model.kernels, &EvalEnv::default());
        let plan = r.plan.unwrap_or_else(|| panic!("{:?}", r.diagnostics));
        match &plan.cases[0].launch {
            Launch::Triton { grid, .. } => assert_eq!(grid.as_slice(), &[8]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_launch_may_name_the_files_integer_constants() {
        assert_eq!(launch("k"), ([1, 1, 1], [256, 4, 1]));
        // The spec's own value wins over the file's.
        assert_eq!(launch("own_value"), ([8, 1, 1], [64, 2, 1]));
        // Below `#undef`, the name is not defined.
        let r = report("after_undef");
        assert!(r.plan.is_none());
        assert!(
            r.diagnostics
                .iter()
                .any(|d| d.message.starts_with("`THREADS` is not defined")),
            "{:?}",
            r.diagnostics
        );
    }
}
