//! The embedded coder: deterministic rewrites of one kernel, each a pure function from
//! the file text (and its tree-sitter tree) to candidate file texts. A rewrite edits only
//! the kernel unit (the kernel and the device helpers it calls) and, where the launch
//! changes, the kernel's `@bench` lines; everything else, formatting and comments of
//! untouched code included, stays byte for byte. A sweep returns several candidates;
//! the step loop verifies and times them as a batch and keeps the best. No I/O here: a
//! candidate is only text until the worker has compiled, verified and timed it.
//!
//! The rewrite ids are what `prompts/strategies.toml` names in `rewrite = "..."`.

mod cuda_code;
mod geometry;
mod triton;

use std::collections::BTreeMap;

use crate::syntax::{FileModel, Kernel, Lang};

/// Everything a rewrite may look at. `params` are the catalog step's parameters.
pub struct RewriteContext<'a> {
    pub lang: Lang,
    /// The whole file.
    pub text: &'a str,
    pub tree: &'a tree_sitter::Tree,
    pub model: &'a FileModel,
    pub kernel: &'a Kernel,
    pub params: &'a BTreeMap<String, serde_json::Value>,
}

/// One candidate: the whole new file text, and a short label for tables ("BLOCK=512",
/// "block=(32, 8)", "__restrict__ on a, b, c").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub label: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// The kernel has nothing this rewrite can change; the message says why, for the
    /// author ("every pointer parameter is already `__restrict__`").
    #[error("{0}")]
    NotApplicable(String),
    #[error("unknown embedded rewrite `{0}`; known: {known}", known = IDS.join(", "))]
    Unknown(String),
    /// A catalog parameter has the wrong type or value.
    #[error("parameter `{name}`: {message}")]
    BadParam { name: String, message: String },
}

/// Every embedded rewrite id.
pub const IDS: &[&str] = &[
    "tunable_sweep",
    "block_size",
    "restrict_const",
    "launch_bounds",
    "unroll",
    "vectorize",
    "grid_stride",
    "fast_math",
    "maxnreg",
    "triton_block",
    "triton_num_warps",
    "triton_num_stages",
];

/// Run one embedded rewrite. `Ok` always holds at least one candidate whose text differs
/// from `cx.text`.
pub fn apply(id: &str, cx: &RewriteContext<'_>) -> Result<Vec<Candidate>, RewriteError> {
    let out = match id {
        "tunable_sweep" => geometry::tunable_sweep(cx),
        "block_size" => geometry::block_size(cx),
        "vectorize" => geometry::vectorize(cx),
        "grid_stride" => geometry::grid_stride(cx),
        "restrict_const" => cuda_code::restrict_const(cx),
        "launch_bounds" => cuda_code::launch_bounds(cx),
        "unroll" => cuda_code::unroll(cx),
        "fast_math" => cuda_code::fast_math(cx),
        "maxnreg" => cuda_code::maxnreg(cx),
        "triton_block" => triton::block(cx),
        "triton_num_warps" => triton::num_warps(cx),
        "triton_num_stages" => triton::num_stages(cx),
        other => return Err(RewriteError::Unknown(other.to_string())),
    }?;
    let out: Vec<Candidate> = out.into_iter().filter(|c| c.text != cx.text).collect();
    if out.is_empty() {
        return Err(RewriteError::NotApplicable(format!(
            "`{id}` would not change `{}`",
            cx.kernel.name
        )));
    }
    Ok(out)
}

/// A catalog parameter that is a list of integers within `range` (a single integer
/// counts as a list of one; repeats are dropped), or `default` when it is absent.
pub(super) fn int_param(
    params: &BTreeMap<String, serde_json::Value>,
    name: &str,
    default: &[i64],
    range: std::ops::RangeInclusive<i64>,
) -> Result<Vec<i64>, RewriteError> {
    let bad = |message: String| RewriteError::BadParam {
        name: name.to_string(),
        message,
    };
    let wanted = if *range.end() == i64::MAX {
        format!("integers >= {}", range.start())
    } else {
        format!("integers from {} to {}", range.start(), range.end())
    };
    let Some(v) = params.get(name) else {
        return Ok(default.to_vec());
    };
    let items = match v {
        serde_json::Value::Array(items) if !items.is_empty() => items.as_slice(),
        serde_json::Value::Number(_) => std::slice::from_ref(v),
        other => {
            return Err(bad(format!(
                "expected a non-empty list of {wanted}, found `{other}`"
            )))
        }
    };
    let mut out: Vec<i64> = Vec::new();
    for item in items {
        let n = item
            .as_i64()
            .filter(|n| range.contains(n))
            .ok_or_else(|| bad(format!("expected a list of {wanted}, found `{item}`")))?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}
