//! The tree-sitter queries of kernel discovery, compiled once per process from the
//! `.scm` files in `grammars/` (data, not code). A query that fails to compile is logged
//! and treated as matching nothing, so a broken grammar file degrades discovery instead
//! of crashing the server; `tests::every_query_compiles` keeps that from shipping.

use std::sync::LazyLock;

use tree_sitter::Query;

use super::{ts_language, Lang};

pub(crate) const CUDA_KERNELS_SRC: &str = include_str!("../../../grammars/cuda/kernels.scm");
pub(crate) const CUDA_CALLS_SRC: &str = include_str!("../../../grammars/cuda/calls.scm");
pub(crate) const TRITON_KERNELS_SRC: &str = include_str!("../../../grammars/triton/kernels.scm");
pub(crate) const TRITON_CALLS_SRC: &str = include_str!("../../../grammars/triton/calls.scm");

/// Header allow-list for the device slice (see `device_slice`).
pub(crate) const DEVICE_INCLUDES: &str = include_str!("../../../grammars/cuda/device_includes.txt");
/// Host libraries NVRTC cannot compile, wherever their headers are found.
pub(crate) const HOST_INCLUDES: &str = include_str!("../../../grammars/cuda/host_includes.txt");
/// Execution-space qualifier macros of libraries (`CUTLASS_HOST_DEVICE`).
pub(crate) const DEVICE_MACROS: &str = include_str!("../../../grammars/cuda/device_macros.txt");
/// The `<cmath>` functions NVRTC declares at global scope.
pub(crate) const STD_MATH: &str = include_str!("../../../grammars/cuda/std_math.txt");
/// Host-only namespaces for the device slice.
pub(crate) const HOST_NAMESPACES: &str = include_str!("../../../grammars/cuda/host_namespaces.txt");

fn compile(lang: Lang, name: &str, src: &str) -> Option<Query> {
    match Query::new(&ts_language(lang), src) {
        Ok(q) => Some(q),
        Err(e) => {
            tracing::error!("query grammars/{name} does not compile: {e}");
            None
        }
    }
}

pub(crate) static CUDA_KERNELS: LazyLock<Option<Query>> =
    LazyLock::new(|| compile(Lang::Cuda, "cuda/kernels.scm", CUDA_KERNELS_SRC));
pub(crate) static CUDA_CALLS: LazyLock<Option<Query>> =
    LazyLock::new(|| compile(Lang::Cuda, "cuda/calls.scm", CUDA_CALLS_SRC));
pub(crate) static TRITON_KERNELS: LazyLock<Option<Query>> =
    LazyLock::new(|| compile(Lang::Triton, "triton/kernels.scm", TRITON_KERNELS_SRC));
pub(crate) static TRITON_CALLS: LazyLock<Option<Query>> =
    LazyLock::new(|| compile(Lang::Triton, "triton/calls.scm", TRITON_CALLS_SRC));

/// The non-comment entries of a line-based data file.
pub(crate) fn data_lines(src: &str) -> impl Iterator<Item = &str> {
    src.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The capture index of `name` in `query`, if the query has that capture.
pub(crate) fn capture(query: &Query, name: &str) -> Option<u32> {
    query.capture_index_for_name(name)
}
