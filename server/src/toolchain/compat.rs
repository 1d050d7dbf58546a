//! nvcc-compatible compiles with NVRTC (issues #10 and #11; the list is docs/compat.md).
//!
//! nvcc compiles a `.cu` file with `cuda_runtime.h` and the host C library already
//! included, so kernels use `INFINITY`, `FLT_MAX` or `M_PI` with no include, and files
//! include host headers (`<vector>`, `<cublas_v2.h>`) for their host code. NVRTC has
//! none of that. Both the editor's checks and the worker's compiles go through
//! [`compile`], which makes up for it:
//! - a prelude ([`PRELUDE`]), pre-included in every compile, defines the math constants
//!   and the `<cfloat>`/`<climits>` limits (each only if not defined yet);
//! - in-memory headers stand in for `<cstdint>`/`<cstddef>` (delegating to CCCL's
//!   `cuda/std` headers when the include folders have CCCL) and for host-only headers
//!   (empty: the device slice blanks host code, so nothing of them is needed);
//! - a header that cannot be found at all is replaced by an empty one and the file is
//!   compiled again, so one missing include costs one warning on its line
//!   ([`MissingInclude`]) instead of hiding every other diagnostic of the file.

use std::path::PathBuf;

use super::nvrtc::{CompileOutput, CompileRequest, Nvrtc};
use super::nvrtc_log::{CompilerMessage, MessageSeverity};

/// The name of the pre-included prelude.
pub const PRELUDE_NAME: &str = "kernel_lsp_prelude.h";

/// What nvcc's implicit includes give a kernel: the `<math.h>` constants and the
/// `<cfloat>`/`<climits>` limits. Every macro is guarded, and the limits are spelled as
/// CCCL spells them, so a later `#include <cuda/std/climits>` redefines them silently.
/// `__extension__` (GNU C, which nvcc's front end reads with a GNU host compiler, as in
/// `__extension__ union { ... };`) is a keyword NVRTC lacks: it marks, and means nothing.
/// The device runtime's programmatic-launch calls (`cudaGridDependencySynchronize()`,
/// sm_90) come with `cuda_runtime.h` under nvcc and not under NVRTC: the same inline PTX.
pub const PRELUDE: &str = r#"#pragma once
/* kernel-lsp: what nvcc's implicit includes define (docs/compat.md). */
#ifndef INFINITY
#define INFINITY __builtin_bit_cast(float, 0x7f800000U)
#endif
#ifndef NAN
#define NAN __builtin_bit_cast(float, 0x7fc00000U)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __builtin_bit_cast(float, 0x7f800000U)
#endif
#ifndef HUGE_VAL
#define HUGE_VAL __builtin_bit_cast(double, 0x7ff0000000000000ULL)
#endif
#ifndef M_E
#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN2 0.69314718055994530942
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#endif
#ifndef FLT_MAX
#define FLT_RADIX 2
#define FLT_MANT_DIG 24
#define DBL_MANT_DIG 53
#define FLT_DIG 6
#define DBL_DIG 15
#define FLT_MIN 1.17549435082228750796873653722224568e-38F
#define FLT_MAX 3.40282346638528859811704183484516925e+38F
#define FLT_EPSILON 1.19209289550781250000000000000000000e-7F
#define FLT_TRUE_MIN 1.40129846432481707092372958328991613e-45F
#define FLT_MIN_EXP (-125)
#define FLT_MAX_EXP 128
#define FLT_MIN_10_EXP (-37)
#define FLT_MAX_10_EXP 38
#define DBL_MIN 2.22507385850720138309023271733240406e-308
#define DBL_MAX 1.79769313486231570814527423731704357e+308
#define DBL_EPSILON 2.22044604925031308084726333618164062e-16
#define DBL_TRUE_MIN 4.94065645841246544176568792868221372e-324
#define DBL_MIN_EXP (-1021)
#define DBL_MAX_EXP 1024
#define DBL_MIN_10_EXP (-307)
#define DBL_MAX_10_EXP 308
#endif
#ifndef __extension__
#define __extension__
#endif
#ifndef cudaGridDependencySynchronize
static __device__ __forceinline__ void kernel_lsp_griddepcontrol_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
static __device__ __forceinline__ void kernel_lsp_griddepcontrol_launch(void) { asm volatile("griddepcontrol.launch_dependents;" :::); }
#define cudaGridDependencySynchronize() kernel_lsp_griddepcontrol_wait()
#define cudaTriggerProgrammaticLaunchCompletion() kernel_lsp_griddepcontrol_launch()
#endif
#ifndef INT_MAX
#define CHAR_BIT 8
#define SCHAR_MIN (-128)
#define SCHAR_MAX 127
#define UCHAR_MAX 255
#define CHAR_MIN SCHAR_MIN
#define CHAR_MAX SCHAR_MAX
#define SHRT_MIN (-SHRT_MAX - 1)
#define SHRT_MAX 0x7fff
#define USHRT_MAX 0xffff
#define INT_MIN (-INT_MAX - 1)
#define INT_MAX 0x7fffffff
#define UINT_MAX 0xffffffff
#define LONG_MIN (-LONG_MAX - 1)
#define LONG_MAX LLONG_MAX
#define ULONG_MAX ULLONG_MAX
#define LLONG_MIN (-LLONG_MAX - 1)
#define LLONG_MAX 0x7fffffffffffffffLL
#define ULLONG_MAX 0xffffffffffffffffUL
#endif
"#;

/// Headers that only host code uses, or whose device-side content NVRTC builds in or the
/// prelude gives (`<math.h>`, `<cfloat>`, `<climits>`): with the host code blanked, an
/// empty stand-in is exact. They stand in even where a folder has the real header (the
/// host C library's would not compile under NVRTC).
pub const HOST_ONLY_HEADERS: &[&str] = &[
    "math.h",
    "cmath",
    "float.h",
    "cfloat",
    "limits.h",
    "climits",
    "iostream",
    "fstream",
    "sstream",
    "iomanip",
    "string",
    "vector",
    "map",
    "unordered_map",
    "set",
    "unordered_set",
    "list",
    "deque",
    "queue",
    "stack",
    "memory",
    "chrono",
    "thread",
    "mutex",
    "atomic",
    "random",
    "functional",
    "numeric",
    "algorithm",
    "iterator",
    "initializer_list",
    "tuple",
    "utility",
    "exception",
    "stdexcept",
    "cstring",
    "string.h",
    "cstdlib",
    "stdlib.h",
    "cstdio",
    "stdio.h",
    "ctime",
    "time.h",
    "cerrno",
    "errno.h",
    "cassert",
    "assert.h",
    "unistd.h",
    "sys/time.h",
    "sys/types.h",
    "getopt.h",
    "omp.h",
    "cublas_v2.h",
    "cublas.h",
    "cublasLt.h",
    "cusparse.h",
    "cufft.h",
    "curand.h",
    "cudnn.h",
    "cusolverDn.h",
    "nccl.h",
    "nvml.h",
    "nvToolsExt.h",
    "nvtx3/nvToolsExt.h",
    "mpi.h",
    "helper_cuda.h",
    "helper_functions.h",
    "helper_string.h",
    "helper_timer.h",
    "helper_image.h",
];

fn has(include_dirs: &[PathBuf], name: &str) -> bool {
    include_dirs.iter().any(|d| d.join(name).is_file())
}

/// The in-memory headers of every compile: the prelude, `<cstdint>`/`<cstddef>` where
/// the include folders lack them, and empty host-only headers where they lack those.
pub fn headers(include_dirs: &[PathBuf]) -> Vec<(String, String)> {
    let cccl = has(include_dirs, "cuda/std/cstdint");
    let mut out = vec![(PRELUDE_NAME.to_string(), PRELUDE.to_string())];
    for (name, text) in super::nvrtc::std_header_shims(include_dirs) {
        let text = if cccl && (name == "cstdint" || name == "stdint.h") {
            // CCCL defines the fixed-width types for NVRTC in its own prelude; a second,
            // different set of typedefs would clash with it.
            CSTDINT_OVER_CCCL.to_string()
        } else {
            text
        };
        out.push((name, text));
    }
    if has(include_dirs, "cub/cub.cuh") {
        out.push(("cub/cub.cuh".to_string(), cub_device_side(include_dirs)));
        for h in CUB_DEVICE_WIDE {
            out.push((
                format!("cub/device/{h}"),
                format!(
                    "#pragma once\n/* kernel-lsp: cub::{h} is a host API; stand-in for NVRTC */\n"
                ),
            ));
        }
    }
    for (name, text) in LIBRARY_HEADERS {
        out.push((name.to_string(), text.to_string()));
    }
    if cccl {
        for (h, parts) in STD_OVER_CCCL {
            let found: Vec<&&str> = parts.iter().filter(|p| has(include_dirs, p)).collect();
            if found.is_empty() {
                continue;
            }
            let includes: String = found.iter().map(|p| format!("#include <{p}>\n")).collect();
            out.push((
                h.to_string(),
                format!("#pragma once\n/* kernel-lsp: <{h}> from CCCL under NVRTC (docs/compat.md) */\n{includes}namespace cuda {{ namespace std {{}} }}\nnamespace std {{ using namespace ::cuda::std; }}\n"),
            ));
        }
    }
    for h in HOST_ONLY_HEADERS {
        if out.iter().any(|(n, _)| n == h) {
            continue;
        }
        // The fixed-width integer types come along, as they do with the host's C and C++
        // libraries (`helper_cuda.h` -> `<string>` -> `<cstdint>`): code that uses
        // `uint32_t` after including only host headers compiles with nvcc.
        out.push((
            (*h).to_string(),
            format!(
                "#pragma once\n/* kernel-lsp: stand-in for `{h}` under NVRTC (docs/compat.md) */\n#include <stdint.h>\n"
            ),
        ));
    }
    out
}

/// CUB's device-wide algorithms: host APIs that NVRTC (JIT mode) refuses.
const CUB_DEVICE_WIDE: &[&str] = &[
    "device_reduce.cuh",
    "device_segmented_reduce.cuh",
    "device_scan.cuh",
    "device_radix_sort.cuh",
    "device_segmented_radix_sort.cuh",
    "device_segmented_sort.cuh",
    "device_select.cuh",
    "device_partition.cuh",
    "device_histogram.cuh",
    "device_run_length_encode.cuh",
    "device_merge_sort.cuh",
    "device_adjacent_difference.cuh",
    "device_copy.cuh",
    "device_memcpy.cuh",
    "device_for.cuh",
    "device_transform.cuh",
    "device_spmv.cuh",
];

/// `<cub/cub.cuh>` for NVRTC: the block-, warp- and thread-level parts (what device
/// code uses); the device-wide algorithms are host code that JIT mode refuses.
fn cub_device_side(include_dirs: &[PathBuf]) -> String {
    const PARTS: &[&str] = &[
        "cub/config.cuh",
        "cub/util_type.cuh",
        "cub/util_ptx.cuh",
        "cub/thread/thread_operators.cuh",
        "cub/block/block_reduce.cuh",
        "cub/block/block_scan.cuh",
        "cub/block/block_load.cuh",
        "cub/block/block_store.cuh",
        "cub/block/block_exchange.cuh",
        "cub/block/block_radix_sort.cuh",
        "cub/block/block_histogram.cuh",
        "cub/block/block_discontinuity.cuh",
        "cub/block/block_adjacent_difference.cuh",
        "cub/block/block_shuffle.cuh",
        "cub/block/block_merge_sort.cuh",
        "cub/warp/warp_reduce.cuh",
        "cub/warp/warp_scan.cuh",
        "cub/warp/warp_load.cuh",
        "cub/warp/warp_store.cuh",
        "cub/warp/warp_exchange.cuh",
        "cub/warp/warp_merge_sort.cuh",
    ];
    let mut s =
        String::from("#pragma once\n/* kernel-lsp: the device-side parts of CUB, for NVRTC */\n");
    for p in PARTS {
        if has(include_dirs, p) {
            s.push_str(&format!("#include <{p}>\n"));
        }
    }
    s
}

const CSTDINT_OVER_CCCL: &str = concat!(
    "#pragma once\n#include <cuda/std/cstdint>\n",
    std_int_usings!()
);

/// Standard headers whose device-usable part CCCL provides, and the CCCL headers that
/// give it (those present are included): with CCCL, `std::numeric_limits`,
/// `std::integral_constant`, `std::min` and the like work in device code as under nvcc
/// (with `--expt-relaxed-constexpr`). `<algorithm>` is the algorithms device code calls
/// (CCCL has no public `cuda/std/algorithm`; older CCCL has none of them, and the header
/// stays an empty stand-in).
const STD_OVER_CCCL: &[(&str, &[&str])] = &[
    ("type_traits", &["cuda/std/type_traits"]),
    ("limits", &["cuda/std/limits"]),
    ("utility", &["cuda/std/utility"]),
    ("tuple", &["cuda/std/tuple"]),
    ("array", &["cuda/std/array"]),
    ("functional", &["cuda/std/functional"]),
    ("numeric", &["cuda/std/numeric"]),
    ("cmath", &["cuda/std/cmath"]),
    ("cstdlib", &["cuda/std/cstdlib"]),
    ("climits", &["cuda/std/climits"]),
    ("cfloat", &["cuda/std/cfloat"]),
    ("cassert", &["cuda/std/cassert"]),
    ("iterator", &["cuda/std/iterator"]),
    ("initializer_list", &["cuda/std/initializer_list"]),
    (
        "algorithm",
        &[
            "cuda/std/__algorithm/min.h",
            "cuda/std/__algorithm/max.h",
            "cuda/std/__algorithm/clamp.h",
            "cuda/std/__algorithm/minmax.h",
            "cuda/std/__algorithm/min_element.h",
            "cuda/std/__algorithm/max_element.h",
            "cuda/std/__algorithm/fill.h",
            "cuda/std/__algorithm/fill_n.h",
            "cuda/std/__algorithm/copy.h",
            "cuda/std/__algorithm/copy_n.h",
            "cuda/std/__algorithm/find.h",
            "cuda/std/__algorithm/find_if.h",
            "cuda/std/__algorithm/count.h",
            "cuda/std/__algorithm/equal.h",
            "cuda/std/__algorithm/all_of.h",
            "cuda/std/__algorithm/any_of.h",
            "cuda/std/__algorithm/none_of.h",
            "cuda/std/__algorithm/for_each.h",
            "cuda/std/__algorithm/lower_bound.h",
            "cuda/std/__algorithm/upper_bound.h",
            "cuda/std/__algorithm/reverse.h",
            "cuda/std/__algorithm/transform.h",
        ],
    ),
];

/// The CUDA libraries' host headers: what a kernel file's top-level declarations may
/// use from them (the fp16/bf16 types their headers pull in, the opaque handle types),
/// and nothing else: their APIs are host code.
const LIBRARY_HEADERS: &[(&str, &str)] = &[
    ("cublas_v2.h", CUBLAS),
    ("cublas.h", CUBLAS),
    ("cublas_api.h", CUBLAS),
    ("cublasLt.h", CUBLAS),
    (
        "nccl.h",
        "#pragma once\ntypedef struct ncclComm* ncclComm_t;\ntypedef struct { char internal[128]; } ncclUniqueId;\ntypedef int ncclResult_t;\ntypedef int ncclDataType_t;\ntypedef int ncclRedOp_t;\n",
    ),
    (
        "cusparse.h",
        "#pragma once\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\ntypedef struct cusparseContext* cusparseHandle_t;\ntypedef int cusparseStatus_t;\n",
    ),
    (
        "cufft.h",
        "#pragma once\ntypedef int cufftHandle;\ntypedef int cufftResult;\ntypedef float cufftReal;\ntypedef float2 cufftComplex;\ntypedef double2 cufftDoubleComplex;\n",
    ),
    (
        "curand.h",
        "#pragma once\ntypedef struct curandGenerator_st* curandGenerator_t;\ntypedef int curandStatus_t;\n",
    ),
    (
        "cudnn.h",
        "#pragma once\n#include <cuda_fp16.h>\ntypedef struct cudnnContext* cudnnHandle_t;\ntypedef int cudnnStatus_t;\n",
    ),
];

const CUBLAS: &str = "#pragma once
/* kernel-lsp: cuBLAS under NVRTC: the types its header brings along (docs/compat.md) */
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <library_types.h>
typedef struct cublasContext* cublasHandle_t;
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;
typedef int cublasStatus_t;
typedef int cublasOperation_t;
typedef int cublasComputeType_t;
";

/// The pre-included C++ library part of nvcc's implicit includes, for sources that name
/// `std::` (with CCCL).
const STD_PRELUDE_NAME: &str = "kernel_lsp_std.h";

/// The option that pre-includes the prelude.
pub fn prelude_option() -> String {
    format!("--pre-include={PRELUDE_NAME}")
}

/// An `#include` that no folder has: it was compiled as an empty header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingInclude {
    pub header: String,
    /// 0-based line of the `#include` in the compiled source (0 when it is in a header).
    pub line: u32,
}

/// Compiles `req` (its options and headers as given, plus the prelude and the stand-ins)
/// and, while NVRTC stops at a header it cannot open, compiles again with that header
/// empty (at most 16 times). Returns the last output and the headers that were missing.
pub fn compile(
    nvrtc: &Nvrtc,
    req: &CompileRequest,
    include_dirs: &[PathBuf],
) -> (CompileOutput, Vec<MissingInclude>) {
    let mut req = req.clone();
    if !req.options.iter().any(|o| o.contains(PRELUDE_NAME)) {
        req.options.push(prelude_option());
    }
    // nvcc's implicit includes pull in the host's <type_traits>, <utility> and <cmath>
    // (and a blanked host library's headers, such as PyTorch's, pull in <algorithm>), so
    // device code uses `std::is_same_v`, `std::forward` or `std::max` with no include of
    // its own. With CCCL, the same names come from `cuda::std` (their stand-ins); only for
    // sources that name `std::`, as they cost NVRTC most of a second.
    let names_std =
        req.source.contains("std::") || req.headers.iter().any(|(_, t)| t.contains("std::"));
    if names_std && has(include_dirs, "cuda/std/type_traits") {
        req.options
            .push(format!("--pre-include={STD_PRELUDE_NAME}"));
        req.headers.push((
            STD_PRELUDE_NAME.to_string(),
            "#pragma once\n/* kernel-lsp: what nvcc's implicit includes give of the C++ library (docs/compat.md) */\n#include <type_traits>\n#include <utility>\n#include <limits>\n#include <initializer_list>\n#include <cmath>\n#include <algorithm>\n".to_string(),
        ));
    }
    if let Some(t) = global_math_usings(&req.source) {
        req.source = t;
    }
    for (_, text) in req.headers.iter_mut() {
        if let Some(t) = global_math_usings(text) {
            *text = t;
        }
    }
    for (name, text) in headers(include_dirs) {
        if !req.headers.iter().any(|(n, _)| *n == name) {
            req.headers.push((name, text));
        }
    }
    let mut missing = Vec::new();
    loop {
        let out = nvrtc.compile(&req);
        let found = (!out.success)
            .then(|| cannot_open(&out.log))
            .flatten()
            .filter(|h| !req.headers.iter().any(|(n, _)| n == h));
        match found {
            Some(header) if missing.len() < 16 => {
                let line = include_line(&req.source, &header).unwrap_or(0);
                req.headers.push((header.clone(), String::new()));
                missing.push(MissingInclude { header, line });
            }
            _ => {
                let mut out = out;
                // Warnings inside the toolkit's and CCCL's headers are not the author's
                // (nvcc treats them as system headers); errors there always show.
                out.messages.retain(|m| !is_noise(m, include_dirs));
                return (out, missing);
            }
        }
    }
}

/// `using std::sqrt;` made `using ::sqrt;` (spaces for `std`, so every offset stays) for
/// the math functions NVRTC declares at global scope ([`crate::syntax::is_global_math`],
/// which the device slice keeps such declarations for). Under NVRTC a using-declaration of a `std`
/// function brings nothing into a namespace that also declares a function of that name
/// (glm: `using std::sqrt;` beside its `sqrt(vec)` templates, then `sqrt(x)` on a
/// float fails), while the same declaration of the global function works, as
/// `std::sqrt` does under nvcc, where the host's `<cmath>` declares it as `::sqrt`.
/// `None` when the text has none.
pub fn global_math_usings(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out: Option<Vec<u8>> = None;
    for (at, _) in text.match_indices("using") {
        if at > 0 && word(b[at - 1]) {
            continue;
        }
        let rest = &text[at + "using".len()..];
        let lead = rest.len() - rest.trim_start().len();
        if lead == 0 {
            continue;
        }
        let std_at = at + "using".len() + lead;
        let t = &text[std_at..];
        let qualifier = if t.starts_with("::std") {
            "::std"
        } else {
            "std"
        };
        let Some(after) = t.strip_prefix(qualifier) else {
            continue;
        };
        let after_ws = after.trim_start();
        let Some(name_part) = after_ws.strip_prefix("::") else {
            continue;
        };
        let name_part = name_part.trim_start();
        let len = name_part.bytes().take_while(|&c| word(c)).count();
        let (name, tail) = name_part.split_at(len);
        if crate::syntax::is_global_math(name) && tail.trim_start().starts_with(';') {
            let bytes = out.get_or_insert_with(|| b.to_vec());
            bytes[std_at..std_at + qualifier.len()].fill(b' ');
        }
    }
    out.and_then(|v| String::from_utf8(v).ok())
}

/// Warnings about kernel-lsp's own stand-ins or from the system headers (the
/// toolkit's, CCCL's): not the author's code.
fn is_noise(m: &CompilerMessage, system_dirs: &[PathBuf]) -> bool {
    m.severity != MessageSeverity::Error
        && (m.message.starts_with(PRELUDE_NAME)
            || m.message.starts_with(STD_PRELUDE_NAME)
            || system_dirs
                .iter()
                .any(|d| m.message.starts_with(&d.display().to_string())))
}

/// `X` from NVRTC's `cannot open source file "X"`.
pub fn cannot_open(log: &str) -> Option<String> {
    let at = log.find("cannot open source file \"")?;
    let rest = &log[at + "cannot open source file \"".len()..];
    let end = rest.find('"')?;
    Some(rest[..end].to_string())
}

/// The 0-based line of `#include "header"` or `#include <header>` in `source`.
pub fn include_line(source: &str, header: &str) -> Option<u32> {
    source
        .lines()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with('#')
                && t[1..].trim_start().starts_with("include")
                && (t.contains(&format!("\"{header}\"")) || t.contains(&format!("<{header}>")))
        })
        .map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_header_is_read_from_the_log_and_found_in_the_source() {
        let log = "t.cu(3): catastrophic error: cannot open source file \"common.h\"\n  #include \"common.h\"\n";
        assert_eq!(cannot_open(log).as_deref(), Some("common.h"));
        assert_eq!(cannot_open("t.cu(1): error: x"), None);
        let src = "// a\n#include <cuda_runtime.h>\n  #  include \"common.h\"\n";
        assert_eq!(include_line(src, "common.h"), Some(2));
        assert_eq!(include_line(src, "cuda_runtime.h"), Some(1));
        assert_eq!(include_line(src, "other.h"), None);
    }

    #[test]
    fn using_declarations_of_std_math_name_the_global_functions() {
        let src = "namespace m {\nusing std::sqrt;\n  using ::std::fabs ;\nusing std::numeric_limits;\nusing std::sqrtx;\nusing namespace std;\nmyusing std::exp;\nusing std::pow\n}\n";
        let out = global_math_usings(src).expect("two rewritten");
        assert_eq!(out.len(), src.len());
        assert_eq!(
            out,
            "namespace m {\nusing    ::sqrt;\n  using      ::fabs ;\nusing std::numeric_limits;\nusing std::sqrtx;\nusing namespace std;\nmyusing std::exp;\nusing std::pow\n}\n"
        );
        assert_eq!(
            global_math_usings("using std::min;\nusing std::size_t;"),
            None
        );
    }

    #[test]
    fn algorithm_and_iterator_stand_ins_take_what_cccl_has() {
        let dir = std::env::temp_dir().join(format!("kl-compat-{}", std::process::id()));
        for f in [
            "cuda/std/cstdint",
            "cuda/std/iterator",
            "cuda/std/__algorithm/min.h",
            "cuda/std/__algorithm/max.h",
        ] {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let hs = headers(std::slice::from_ref(&dir));
        let get = |n: &str| hs.iter().find(|(h, _)| h == n).map(|(_, t)| t.clone());
        let algorithm = get("algorithm").unwrap();
        assert!(algorithm.contains("#include <cuda/std/__algorithm/max.h>"));
        assert!(algorithm.contains("#include <cuda/std/__algorithm/min.h>"));
        assert!(!algorithm.contains("clamp.h"), "only what the folder has");
        assert!(algorithm.contains("using namespace ::cuda::std"));
        assert!(get("iterator")
            .unwrap()
            .contains("#include <cuda/std/iterator>"));
        // Without CCCL they are empty stand-ins, so an include of them costs nothing.
        let plain = headers(&[]);
        for h in ["algorithm", "iterator", "initializer_list"] {
            let t = &plain.iter().find(|(n, _)| n == h).unwrap().1;
            assert!(!t.contains("cuda/std"), "{h}: {t}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_prelude_and_the_host_only_stand_ins_are_always_there() {
        let hs = headers(&[]);
        for h in [PRELUDE_NAME, "cublas_v2.h", "vector", "math.h", "cstdint"] {
            assert!(hs.iter().any(|(n, _)| n == h), "{h}");
        }
        // CUB's stand-ins only where CUB is.
        assert!(!hs.iter().any(|(n, _)| n == "cub/cub.cuh"));
    }
}
