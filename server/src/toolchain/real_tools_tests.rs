//! Tests against the real NVRTC and ptxas found on this machine (the pip wheels in CI).
//!
//! Without the tools they print `SKIP <test>: ...` and pass, unless
//! `KERNEL_LSP_REQUIRE_TOOLS=1`, where a missing tool fails the test so nothing hides.

use std::path::PathBuf;
use std::time::Duration;

use expect_test::{expect, Expect};

use super::*;

fn require_tools() -> bool {
    std::env::var("KERNEL_LSP_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

fn skip(test: &str, why: &str) {
    assert!(
        !require_tools(),
        "{test}: {why} (KERNEL_LSP_REQUIRE_TOOLS=1 forbids skipping)"
    );
    say(&format!("SKIP {test}: {why}"));
}

/// Straight to the process's stderr: libtest captures `eprintln!` of passing tests,
/// and a skip must be seen.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The toolchain, or `None` after printing why the test is skipped.
fn toolchain(test: &str) -> Option<Toolchain> {
    let tc = locate(&ToolchainSettings::default());
    match &tc.nvrtc {
        Ok(_) => Some(tc),
        Err(e) => {
            skip(test, &e.to_string());
            None
        }
    }
}

fn toolchain_with_ptxas(test: &str) -> Option<(Toolchain, PathBuf)> {
    let tc = toolchain(test)?;
    match tc.ptxas.clone() {
        Some(p) => Some((tc, p)),
        None => {
            skip(test, &format!("ptxas not found ({})", tc.notes.join("; ")));
            None
        }
    }
}

fn render(source: &str, msgs: &[CompilerMessage]) -> String {
    let lines: Vec<&str> = source.split('\n').collect();
    msgs.iter()
        .map(|m| {
            let text = lines.get(m.line as usize).copied().unwrap_or("");
            let span = text
                .get(m.col_start as usize..m.col_end as usize)
                .unwrap_or("<bad span>");
            format!(
                "{:?} {}:{}-{} `{span}`: {}\n",
                m.severity, m.line, m.col_start, m.col_end, m.message
            )
        })
        .collect()
}

fn check_messages(test: &str, source: &str, expect: Expect) {
    let Some(tc) = toolchain(test) else { return };
    let r = check_device_slice(&tc, source, "kernel.cu", &[], &[]);
    expect.assert_eq(&render(source, &r.messages));
}

const SAXPY: &str = r#"extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

#[test]
fn saxpy_compiles_and_ptxas_counts_registers() {
    let Some((tc, _)) = toolchain_with_ptxas("saxpy_compiles_and_ptxas_counts_registers") else {
        return;
    };
    let r = check_device_slice(&tc, SAXPY, "kernel.cu", &[], &[]);
    assert!(r.messages.is_empty(), "{:?}", r.messages);
    assert!(r.ptx_ok);
    assert_eq!(r.note, None);
    assert_eq!(r.resources.len(), 1, "{:?}", r.resources);
    let k = &r.resources[0];
    assert!(symbol_matches(&k.symbol, "saxpy"));
    assert!(k.registers > 0 && k.registers < 64, "{k:?}");
    assert_eq!((k.spill_stores, k.spill_loads, k.shared_bytes), (0, 0, 0));
}

#[test]
fn undefined_identifier_lands_on_its_line_and_column() {
    check_messages(
        "undefined_identifier_lands_on_its_line_and_column",
        "extern \"C\" __global__ void k(float* x, int n) {\n\tint i = threadIdx.x;\n    x[i] = scale * x[i];\n    x[0] = tw(x[1]);\n}\n",
        expect![[r#"
            Error 2:11-16 `scale`: identifier "scale" is undefined
            Error 3:11-13 `tw`: identifier "tw" is undefined
        "#]],
    );
}

#[test]
fn unused_variable_is_a_warning() {
    check_messages(
        "unused_variable_is_a_warning",
        "extern \"C\" __global__ void k(float* x) {\n    int unused = 3;\n    x[0] = 1.0f;\n}\n",
        expect![[r#"
            Warning 1:8-14 `unused`: variable "unused" was declared but never referenced [#177-D]
        "#]],
    );
}

#[test]
fn template_error_points_at_the_instantiation() {
    check_messages(
        "template_error_points_at_the_instantiation",
        "template <typename T>\n__device__ T twice(T a) { return a.twice(); }\nextern \"C\" __global__ void k(float* x) {\n    x[0] = twice(x[0]);\n}\n",
        expect![[r#"
            Error 1:33-34 `a`: expression must have class type but it has type "float"
            detected during instantiation of "T twice(T) [with T=float]" at line 4
            Note 3:4-23 `x[0] = twice(x[0]);`: error in instantiation of "T twice(T) [with T=float]": expression must have class type but it has type "float"
        "#]],
    );
}

#[test]
fn half_bf16_and_cstdint_compile_with_discovered_headers() {
    let test = "half_bf16_and_cstdint_compile_with_discovered_headers";
    let Some(tc) = toolchain(test) else { return };
    if tc.include_dirs.is_empty() {
        return skip(test, &tc.notes.join("; "));
    }
    let src = r#"#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <stdint.h>
#include <cstddef>
extern "C" __global__ void hadd(__half* x, const __nv_bfloat16* y, std::uint64_t n, int32_t m) {
    std::size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && m > INT32_MIN) x[i] = __hadd(x[i], __float2half(__bfloat162float(y[i])));
}
"#;
    let r = check_device_slice(&tc, src, "kernel.cu", &[], &[]);
    assert!(r.messages.is_empty(), "{}", render(src, &r.messages));
    assert!(r.ptx_ok);
}

#[test]
fn cooperative_groups_needs_cccl() {
    let test = "cooperative_groups_needs_cccl";
    let Some(tc) = toolchain(test) else { return };
    let src = r#"#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(float* x) {
    cg::thread_block b = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(b);
    x[b.thread_rank()] = warp.thread_rank();
    b.sync();
}
"#;
    let r = check_device_slice(&tc, src, "kernel.cu", &[], &[]);
    let has_cccl = tc
        .include_dirs
        .iter()
        .any(|d| d.join("nv/target").is_file());
    if has_cccl {
        assert!(r.messages.is_empty(), "{}", render(src, &r.messages));
    } else {
        // Without CCCL the error must still point at the #include the author wrote.
        say(&format!(
            "SKIP {test} (compile part): no CCCL headers (nv/target) found"
        ));
        assert!(!r.ptx_ok);
        assert_eq!(
            r.messages.first().map(|m| m.line),
            Some(0),
            "{:?}",
            r.messages
        );
        assert!(
            r.messages[0].message.contains("nv/target"),
            "{:?}",
            r.messages
        );
    }
}

#[test]
fn cpp_and_template_kernels_have_lowered_names_ptxas_symbols_match() {
    let test = "cpp_and_template_kernels_have_lowered_names_ptxas_symbols_match";
    let Some((tc, _)) = toolchain_with_ptxas(test) else {
        return;
    };
    let src = r#"__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }
namespace ops {
template <typename T, int N>
__global__ void rotate(T* x) {
    __shared__ T buf[N];
    buf[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = buf[(threadIdx.x + 1) % N];
}
}
"#;
    let exprs = vec!["scale".to_string(), "ops::rotate<float, 128>".to_string()];
    let r = check_device_slice(&tc, src, "kernel.cu", &[], &exprs);
    assert!(r.messages.is_empty(), "{}", render(src, &r.messages));
    expect![[r#"
        [
            (
                "scale",
                "_Z5scalePff",
            ),
            (
                "ops::rotate<float, 128>",
                "_ZN3ops6rotateIfLi128EEEvPT_",
            ),
        ]
    "#]]
    .assert_debug_eq(&r.lowered_names);
    let find = |name: &str| r.resources.iter().find(|k| symbol_matches(&k.symbol, name));
    let scale = find("scale").map(|k| k.symbol.clone());
    let rotate = find("ops::rotate<float, 128>");
    assert_eq!(scale.as_deref(), Some("_Z5scalePff"));
    let rotate = rotate.map(|k| (k.symbol.clone(), k.shared_bytes));
    assert_eq!(
        rotate,
        Some(("_ZN3ops6rotateIfLi128EEEvPT_".to_string(), 512))
    );
    assert!(find("rotate").is_some());
    assert!(find("other").is_none());
}

#[test]
fn ptxas_reports_spills_and_shared_memory() {
    let test = "ptxas_reports_spills_and_shared_memory";
    let Some((tc, ptxas)) = toolchain_with_ptxas(test) else {
        return;
    };
    let Ok(nvrtc) = &tc.nvrtc else { return };
    let src = r#"extern "C" __global__ void spill(float* out, const int* idx, int n) {
    float local[256];
    for (int i = 0; i < 256; i++) local[i] = out[i] * i;
    float acc = 0;
    for (int i = 0; i < n; i++) acc += local[idx[i] & 255];
    out[0] = acc;
}
extern "C" __global__ void tile(float* x) {
    __shared__ float t[32][33];
    t[threadIdx.y][threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = t[threadIdx.x][threadIdx.y];
}
"#;
    let out = nvrtc.compile(&CompileRequest {
        source: src.into(),
        program_name: "kernel.cu".into(),
        options: default_options(&tc.arch, &[], &[]).unwrap_or_default(),
        ..Default::default()
    });
    let Some(ptx) = out.ptx else {
        panic!("no PTX: {}", out.log);
    };
    let res = ptxas_resources_with_args(
        &ptxas,
        &ptx,
        "sm_90",
        &["-maxrregcount=24".to_string()],
        Duration::from_secs(30),
    );
    let res = match res {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let spill = res.iter().find(|k| k.symbol == "spill");
    let tile = res.iter().find(|k| k.symbol == "tile");
    let (Some(spill), Some(tile)) = (spill, tile) else {
        panic!("{res:?}");
    };
    assert!(spill.spill_stores > 0 && spill.spill_loads > 0, "{spill:?}");
    assert!(spill.stack_bytes >= 1024, "{spill:?}");
    assert!(spill.registers <= 24, "{spill:?}");
    assert_eq!(tile.shared_bytes, 32 * 33 * 4, "{tile:?}");
}

#[test]
fn ptxas_errors_and_timeouts_are_values() {
    let test = "ptxas_errors_and_timeouts_are_values";
    let Some((_, ptxas)) = toolchain_with_ptxas(test) else {
        return;
    };
    let e = ptxas_resources(&ptxas, "garbage", "sm_90", Duration::from_secs(30));
    assert!(matches!(e, Err(ToolError::PtxasFailed { .. })), "{e:?}");
    let e = ptxas_resources(&ptxas, "garbage", "sm_90", Duration::ZERO);
    assert!(matches!(e, Err(ToolError::Timeout { .. })), "{e:?}");
    let e = ptxas_resources(&ptxas, "", "sm_90; rm -rf /", Duration::from_secs(1));
    assert!(matches!(e, Err(ToolError::InvalidArch { .. })), "{e:?}");
}

#[test]
fn defines_reach_the_compiler_and_spaces_are_rejected() {
    let test = "defines_reach_the_compiler_and_spaces_are_rejected";
    let Some(tc) = toolchain(test) else { return };
    let src = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = BLOCK; }\n";
    let ok = check_device_slice(
        &tc,
        src,
        "kernel.cu",
        &[("BLOCK".into(), "256".into())],
        &[],
    );
    assert!(ok.ptx_ok, "{:?}", ok.messages);
    let bad = check_device_slice(
        &tc,
        src,
        "kernel.cu",
        &[("BLOCK".into(), "256 -I/etc".into())],
        &[],
    );
    assert!(!bad.ptx_ok);
    expect![[r#"
        Error 0:0-66 `extern "C" __global__ void k(float* x) { x[threadIdx.x] = BLOCK; }`: define BLOCK=256 -I/etc: the value must not contain spaces, tabs or newlines; each define is one compiler option
    "#]].assert_eq(&render(src, &bad.messages));
}

#[test]
fn concurrent_compiles_do_not_interfere() {
    let test = "concurrent_compiles_do_not_interfere";
    let Some(tc) = toolchain(test) else { return };
    let tc = std::sync::Arc::new(tc);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let tc = tc.clone();
            std::thread::spawn(move || {
                let src = format!(
                    "extern \"C\" __global__ void k{i}(float* x) {{ x[0] = {i}.0f + missing{i}; }}\n"
                );
                let r = check_device_slice(&tc, &src, "kernel.cu", &[], &[]);
                r.messages.iter().map(|m| m.message.clone()).collect::<Vec<_>>()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let msgs = h.join().unwrap_or_default();
        assert_eq!(
            msgs,
            vec![format!("identifier \"missing{i}\" is undefined")]
        );
    }
}

#[test]
fn version_and_path_are_reported() {
    let Some(tc) = toolchain("version_and_path_are_reported") else {
        return;
    };
    let Ok(n) = &tc.nvrtc else { return };
    let (major, _) = n.version();
    assert!(major >= 11, "{:?}", n.version());
    assert!(!n.path().as_os_str().is_empty());
    eprintln!(
        "NVRTC {:?} at {}; ptxas {:?}; includes {:?}",
        n.version(),
        n.path().display(),
        tc.ptxas,
        tc.include_dirs
    );
}

#[test]
fn a_folder_setting_finds_the_library_without_any_environment() {
    let test = "a_folder_setting_finds_the_library_without_any_environment";
    let Some(tc) = toolchain(test) else { return };
    let Ok(found) = &tc.nvrtc else { return };
    let Some(dir) = found.path().parent().filter(|d| d.is_dir()) else {
        return skip(test, "NVRTC came from the system loader, not a folder");
    };
    let settings = ToolchainSettings {
        nvrtc_path: Some(dir.to_path_buf()),
        ..Default::default()
    };
    let env = SearchEnv {
        python_sys_path: Some(Vec::new()),
        ..Default::default()
    };
    let again = locate_in(&settings, &env);
    let path = again.nvrtc.as_ref().map(|n| n.path().to_path_buf());
    assert_eq!(path.ok().as_deref(), Some(found.path()));
    // Headers and ptxas are found next to it, from the same release.
    assert_eq!(again.include_dirs.first(), tc.include_dirs.first());
    assert_eq!(again.ptxas, tc.ptxas);
}

/// Issue #10, item 3: what nvcc accepts compiles the same way here (docs/compat.md):
/// the math constants and limits with no include, the standard and CUDA headers, the
/// cooperative groups and CUB's block-level primitives (CCCL from the pip wheel).
#[test]
fn nvcc_compatible_names_and_headers_compile() {
    let Some(tc) = toolchain("nvcc_compatible_names_and_headers_compile") else {
        return;
    };
    let cccl = tc
        .include_dirs
        .iter()
        .any(|d| d.join("cub/cub.cuh").is_file());
    let src = format!(
        r#"#include <cstdint>
#include <cfloat>
#include <climits>
#include <math.h>
#include <cmath>
#include <cassert>
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
{cub}
namespace cg = cooperative_groups;
extern "C" __global__ void k(int n, const float* x, float* y) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float m = -INFINITY;
    float lim = FLT_MAX + FLT_MIN * 0 + FLT_EPSILON * 0;
    double d = DBL_MAX * 0 + DBL_MIN * 0 + DBL_EPSILON;
    float pi = (float)M_PI + (float)M_SQRT2 * 0 + (float)M_E * 0 + (float)M_LN2 * 0;
    int big = INT_MAX + INT_MIN * 0 + (int)(UINT_MAX * 0u) + (int)(LLONG_MAX * 0) + CHAR_BIT * 0;
    int64_t w = INT64_MAX * 0; uint32_t u = UINT32_MAX * 0u; std::int8_t s8 = 0;
    __half h = __float2half(1.0f); __nv_bfloat16 bf = __float2bfloat16(2.0f);
    cg::thread_block tb = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(tb);
    float r = cg::reduce(warp, 1.0f, cg::plus<float>());
    assert(n >= 0);
    if (isnan(NAN) && i == 0) printf("%f\n", (double)HUGE_VALF);
    constexpr float ninf = -INFINITY;
    {cub_use}
    if (i < n) y[i] = fmaxf(fmaxf(m, ninf), x[i]) + lim * 0 + (float)d * 0 + pi * 0 + big * 0 + w + u + s8
        + __half2float(h) * 0 + __bfloat162float(bf) * 0 + r * 0;
}}
"#,
        cub = if cccl {
            "#include <cub/cub.cuh>\n#include <cub/block/block_reduce.cuh>"
        } else {
            ""
        },
        cub_use = if cccl {
            "typedef cub::BlockReduce<float, 256> R; __shared__ typename R::TempStorage tmp; float t = R(tmp).Sum(1.0f); (void)t;"
        } else {
            ""
        },
    );
    let r = check_device_slice(&tc, &src, "kernel.cu", &[], &[]);
    let errors: Vec<String> = r
        .messages
        .iter()
        .filter(|m| m.severity == MessageSeverity::Error || m.severity == MessageSeverity::Warning)
        .filter(|m| !m.message.contains("declared but never referenced"))
        .map(|m| format!("{}: {}", m.line + 1, m.message))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(r.ptx_ok);
    if !cccl {
        skip(
            "nvcc_compatible_names_and_headers_compile (CUB part)",
            "no CCCL headers",
        );
    }
}

/// A header no folder has costs one warning on its line; the rest of the file is still
/// checked (here: a real error further down is reported).
#[test]
fn a_missing_include_is_one_warning_and_the_rest_is_checked() {
    let Some(tc) = toolchain("a_missing_include_is_one_warning_and_the_rest_is_checked") else {
        return;
    };
    let src = "#include \"nowhere/common.h\"\nextern \"C\" __global__ void k(float* y) {\n    y[0] = undefined_thing;\n}\n";
    let r = check_device_slice(&tc, src, "kernel.cu", &[], &[]);
    let shown: Vec<String> = r
        .messages
        .iter()
        .map(|m| {
            format!(
                "{}:{:?}: {}",
                m.line + 1,
                m.severity,
                m.message.lines().next().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(shown.len(), 2, "{shown:#?}");
    assert!(
        shown[0]
            .starts_with("1:Warning: cannot open `nowhere/common.h` (searched: the CUDA headers)"),
        "{shown:#?}"
    );
    assert!(
        shown[1].starts_with("3:Error: identifier \"undefined_thing\" is undefined"),
        "{shown:#?}"
    );
}

/// Issue #31: what a project's device code takes from the C++ library under nvcc,
/// compiled by NVRTC with CCCL. A math library's `using std::sqrt;` beside its own
/// `sqrt` templates (glm), `std::max` of an initializer list in a constexpr helper that
/// includes nothing (its `<algorithm>` came with PyTorch's headers), `<algorithm>` and
/// `<iterator>` included, GNU's `__extension__` on an anonymous union and the device
/// runtime's programmatic-launch calls (ggml).
#[test]
fn library_names_device_code_uses_compile() {
    let test = "library_names_device_code_uses_compile";
    let Some(tc) = toolchain(test) else { return };
    if !tc
        .include_dirs
        .iter()
        .any(|d| d.join("cuda/std/type_traits").is_file())
    {
        return skip(test, "no CCCL headers");
    }
    let src = r#"#include <algorithm>
#include <iterator>
#include <cmath>
namespace vecmath {
using std::sqrt;
using ::std::fabs;
template <int L> struct vec { float v[L]; };
template <int L> __device__ vec<L> sqrt(vec<L> x) { for (int i = 0; i < L; ++i) x.v[i] = sqrt(x.v[i]); return x; }
template <int L> __device__ vec<L> fabs(vec<L> x) { for (int i = 0; i < L; ++i) x.v[i] = fabs(x.v[i]); return x; }
__device__ inline float length(float x, float y) { return sqrt(x * x + y * y) + fabs(x); }
}
constexpr size_t custom_max(std::initializer_list<size_t> l) { return std::max(l); }
template <typename T> constexpr T constexpr_min(T a, T b) { return std::min(a, b); }
template <typename T> struct counter : std::iterator<std::input_iterator_tag, T> { T at; };
typedef struct {
    __extension__ union { struct { short d; short m; } s; int dm; } u;
    unsigned char qs[16];
} block_q;
extern "C" __global__ void k(float* y, const block_q* b) {
#if __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
#endif
    constexpr int smem = custom_max({sizeof(float) * 4, sizeof(block_q)});
    __shared__ float tile[smem];
    counter<int> c; c.at = threadIdx.x;
    vecmath::vec<2> v{{y[0], y[1]}};
    tile[c.at % smem] = vecmath::length(y[0], y[1]) + vecmath::sqrt(v).v[0] + b->u.dm;
    y[threadIdx.x] = tile[constexpr_min<int>(threadIdx.x, smem - 1)] + std::clamp(y[2], 0.f, 1.f);
}
"#;
    let r = check_device_slice(&tc, src, "kernel.cu", &[], &[]);
    let errors: Vec<String> = r
        .messages
        .iter()
        .filter(|m| m.severity == MessageSeverity::Error)
        .map(|m| format!("{}: {}", m.line + 1, m.message))
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // A real error in the same code is still one.
    let broken = src.replace("fabs(x); }\n}", "fabs(x) + undefined_v; }\n}");
    let r = check_device_slice(&tc, &broken, "kernel.cu", &[], &[]);
    assert!(
        r.messages
            .iter()
            .any(|m| m.severity == MessageSeverity::Error && m.message.contains("undefined_v")),
        "{:?}",
        r.messages
    );
}
