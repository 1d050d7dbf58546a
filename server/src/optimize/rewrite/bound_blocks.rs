//! The bound every large-block CUDA candidate carries: [`bound_blocks`] gives the kernel
//! of a candidate whose launch has more than [`BOUND_ABOVE`] threads a block a
//! `__launch_bounds__(B)` covering that launch, so the compiler caps its registers at what
//! B threads can hold (65536 / B a thread). Without it a kernel compiled for up to 255
//! registers a thread fails to launch with 1024-thread blocks ("too many resources
//! requested for launch": a `cooperative_rows` candidate took 136 registers on an H100),
//! and a kernel whose bound is lower than its new block fails every launch (an H200 with
//! NVRTC: `__launch_bounds__(256)` launched with 512 or 1024 threads gives
//! `CUDA_ERROR_INVALID_VALUE`). Blocks of 256 threads or fewer never run out of registers
//! (255 · 256 < 65536), so they are left as written. [`super::apply`] runs this on every
//! CUDA rewrite's candidates, so no rewrite has to.
//!
//! B is the largest block the candidate's spec launches over every case and tunable
//! value, written as the tunable's name when the block always equals one (the placing and
//! the evaluation are `launch_bounds`'s). A kernel with no bound gets one before its
//! declarator; a literal bound lower than B is raised to B (its minimum-blocks argument
//! kept where B times it still fits 2048 threads a multiprocessor, dropped otherwise); a
//! bound written as an expression, or a register cap (`maxnreg`, which NVRTC rejects
//! beside a bound), is left as the author wrote it.

use std::collections::BTreeMap;

use super::edits::Edit;
use super::launch_bounds::threads_per_block;
use super::maxnreg::has_maxnreg;
use super::unit::*;
use super::{with_text, RewriteContext};
use crate::syntax::Lang;

/// Blocks of more threads than this get a bound.
pub(super) const BOUND_ABOVE: u64 = 256;

/// Threads a multiprocessor holds: a minimum-blocks argument M is kept only while
/// B · M fits.
const THREADS_PER_SM: u64 = 2048;

/// `text` with the kernel `kernel` bounded for its launch (see the module doc); `text`
/// itself when it needs no bound, is not CUDA, or could not be read or edited.
pub(super) fn bound_blocks(
    lang: Lang,
    text: &str,
    kernel: &str,
    params: &BTreeMap<String, serde_json::Value>,
) -> String {
    if lang != Lang::Cuda {
        return text.to_string();
    }
    with_text(lang, text, kernel, params, bounded)
        .flatten()
        .unwrap_or_else(|| text.to_string())
}

/// The bounded text, or None when the kernel needs no new bound.
fn bounded(cx: &RewriteContext<'_>) -> Option<String> {
    let unit = Unit::of(cx, "launch_bounds").ok()?;
    if has_maxnreg(cx, unit.kernel).is_some() {
        return None;
    }
    let threads = threads_per_block(cx).ok()?;
    if threads.max <= BOUND_ABOVE {
        return None;
    }
    let existing = named_children(unit.kernel)
        .into_iter()
        .find(|c| c.kind() == "launch_bounds");
    let edit = match existing {
        None => {
            let at = unit.attribute_point(cx).ok()?;
            Edit::insert(at, format!("__launch_bounds__({}) ", threads.expr()))
        }
        Some(lb) => {
            let args = named_children(lb);
            let written = int_literal(text(cx, *args.first()?))?;
            if written >= threads.max {
                return None;
            }
            Edit::replace(lb.byte_range(), raised(threads.max, &args, cx))
        }
    };
    let label = "bound".to_string();
    finish(cx, "launch_bounds", label, vec![edit])
        .ok()
        .map(|c| c.text)
}

/// `__launch_bounds__(max[, M])`: the existing minimum-blocks argument M kept while
/// `max · M` threads fit a multiprocessor.
fn raised(max: u64, args: &[tree_sitter::Node<'_>], cx: &RewriteContext<'_>) -> String {
    let min_blocks = args
        .get(1)
        .map(|m| text(cx, *m))
        .filter(|m| int_literal(m).is_some_and(|m| max.saturating_mul(m) <= THREADS_PER_SM));
    match min_blocks {
        Some(m) => format!("__launch_bounds__({max}, {m})"),
        None => format!("__launch_bounds__({max})"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::check;
    use super::super::unit::testing::*;
    use super::bound_blocks;
    use crate::syntax::Lang;

    /// The kernel `k` of a spec and a header, bounded.
    fn bound(spec: &str, header: &str) -> String {
        let src = format!("{spec}{header}(int n, float* x) {{ x[threadIdx.x] = 0.0f; }}\n");
        let out = bound_blocks(Lang::Cuda, &src, "k", &BTreeMap::new());
        let body = out.find("(int n").unwrap_or(out.len());
        out[spec.len()..body].to_string()
    }

    const B1024: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench grid = cdiv(n, 1024); block = 1024\n";
    const B2D: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench grid = (4, 4); block = (32, 16)\n";
    const B256: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench grid = cdiv(n, 256); block = (256, 1)\n";
    const TUNED: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench tune BLOCK in [128, 512]\n// @bench grid = cdiv(n, BLOCK); block = BLOCK\n";
    const MIXED: &str = "// @bench n = 4096\n// @bench x: inout f32[n]\n// @bench tune BX in [32, 64]\n// @bench grid = cdiv(n, BX * 8); block = (BX, 8)\n";

    #[test]
    fn a_large_block_gets_a_bound_that_covers_it() {
        assert_eq!(
            bound(B1024, "extern \"C\" __global__ void k"),
            "extern \"C\" __global__ void __launch_bounds__(1024) k"
        );
        // x·y·z of a 2-D block; the largest over a tunable when the block is not it.
        assert_eq!(
            bound(B2D, "__global__ void k"),
            "__global__ void __launch_bounds__(512) k"
        );
        assert_eq!(
            bound(MIXED, "__global__ void k"),
            "__global__ void __launch_bounds__(512) k"
        );
        // A block that is always the tunable is bounded by its name, which a template
        // kernel has as a parameter.
        assert_eq!(
            bound(TUNED, "template <int BLOCK>\n__global__ void\nk"),
            "template <int BLOCK>\n__global__ void\n__launch_bounds__(BLOCK) k"
        );
        assert_eq!(
            bound(B1024, "__global__ void __cluster_dims__(4, 1, 1) k"),
            "__global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(1024) k"
        );
    }

    #[test]
    fn a_lower_literal_bound_is_raised_keeping_min_blocks_that_fit() {
        assert_eq!(
            bound(B1024, "__global__ void __launch_bounds__(256) k"),
            "__global__ void __launch_bounds__(1024) k"
        );
        assert_eq!(
            bound(B1024, "__global__ void __launch_bounds__(256, 2) k"),
            "__global__ void __launch_bounds__(1024, 2) k"
        );
        assert_eq!(
            bound(B1024, "__global__ void __launch_bounds__(0x100, 4) k"),
            "__global__ void __launch_bounds__(1024) k"
        );
    }

    #[test]
    fn small_blocks_covering_bounds_caps_and_expressions_are_left_alone() {
        for (spec, header) in [
            (B256, "__global__ void k"),
            (B1024, "__global__ void __launch_bounds__(1024, 2) k"),
            (B1024, "__global__ void __launch_bounds__(MAXT) k"),
            (B1024, "__global__ void __attribute__((maxnreg(64))) k"),
            ("", "__global__ void k"),
        ] {
            assert_eq!(bound(spec, header), header, "{spec}{header}");
        }
        let triton = "import triton\n";
        let out = bound_blocks(Lang::Triton, triton, "k", &BTreeMap::new());
        assert_eq!(out, triton);
    }

    /// Through `apply`: a rewrite that relaunches SAXPY with 512- and 1024-thread blocks
    /// gives candidates bounded for them; its 128-thread candidate stays unbounded.
    #[test]
    fn every_large_block_candidate_of_a_rewrite_is_bounded() {
        let sizes = params(r#"{"sizes_1d": [128, 512, 1024]}"#);
        let out = check::testing::run(Lang::Cuda, SAXPY, "saxpy", "block_size", sizes)
            .expect("block_size takes saxpy");
        let headers: Vec<(String, bool, bool)> = out
            .iter()
            .map(|c| {
                (
                    c.label.clone(),
                    c.text.contains("__launch_bounds__(512)"),
                    c.text.contains("__launch_bounds__(1024)"),
                )
            })
            .collect();
        assert_eq!(headers.len(), 3, "{headers:?}");
        for (label, b512, b1024) in headers {
            assert_eq!(
                (b512, b1024),
                (label.contains("512"), label.contains("1024")),
                "{label}"
            );
        }
    }
}
