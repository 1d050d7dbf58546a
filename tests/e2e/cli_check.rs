//! `kernel-lsp check`: what a kernel author's CI prints; and what `bench` and
//! `optimize` refuse before they start a worker.

use std::process::Command;

use expect_test::expect;

fn check(args: &[&str], files: &[(&str, &[u8])]) -> (i32, String, String) {
    cli("check", args, files)
}

/// `kernel-lsp <command> <args> <files>` in a fresh folder holding the files.
fn cli(command: &str, args: &[&str], files: &[(&str, &[u8])]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-{command}-{}-{}",
        std::process::id(),
        files.first().map_or("x", |f| f.0)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.current_dir(&dir)
        .env("KERNEL_LSP_DATA_DIR", &dir)
        .arg(command)
        .args(args);
    for (name, body) in files {
        std::fs::write(dir.join(name), body).unwrap();
        cmd.arg(name);
    }
    let out = cmd.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const BAD: &[u8] = b"// @bench n = 1 << 20\n// @bench x: in f33[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n";

#[test]
fn errors_print_compiler_style_and_exit_1() {
    let (code, out, _) = check(&["--no-compile"], &[("bad.cu", BAD)]);
    assert_eq!(code, 1);
    expect![[r#"
        bad.cu:2:17: error: `f33` is not an element type; use one of f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool; did you mean `f32`? [@bench]
    "#]].assert_eq(&out);
}

/// Issue #28: a byte-order mark is not a column: line 1's columns are the text's.
#[test]
fn columns_on_line_1_do_not_count_a_byte_order_mark() {
    let first = b"// @bench x: in f33[n]\n// @bench n = 1 << 20\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n";
    let with_bom = [b"\xef\xbb\xbf".as_slice(), first].concat();
    for (name, body) in [("plain.cu", first.as_slice()), ("bom.cu", &with_bom)] {
        let (code, out, _) = check(&["--no-compile"], &[(name, body)]);
        assert_eq!(code, 1);
        assert!(
            out.starts_with(&format!("{name}:1:17: error: `f33`")),
            "{out}"
        );
        let (_, out, _) = check(&["--no-compile", "--json"], &[(name, body)]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v[0]["line"].as_u64(), v[0]["column"].as_u64()),
            (Some(1), Some(17)),
            "{name}: {out}"
        );
        assert_eq!(v[0]["end_column"].as_u64(), Some(20), "{name}: {out}");
    }
}

/// Issue #28: with no usable worker, `optimize` reports the spec's errors (checked
/// before any worker starts, as `bench` does), not the worker's problem.
#[test]
fn optimize_reports_spec_errors_before_starting_a_worker() {
    let (code, out, err) = cli(
        "optimize",
        &["--worker", "/nonexistent/kernel-lsp-worker"],
        &[("bad.cu", BAD)],
    );
    assert_eq!(code, 1, "{out}{err}");
    expect![[r#"
        bad.cu:2:17: error: `f33` is not an element type; use one of f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool; did you mean `f32`? [@bench]
        kernel-lsp optimize: fix the errors above first; nothing was run
    "#]]
    .assert_eq(&err);
}

/// Issue #28: `bench` with no kernel to run exits 1 and says why, before any worker.
#[test]
fn bench_with_nothing_to_run_exits_1() {
    let plain = b"__global__ void k(int n, const float* x) {}\n__global__ void j(float* y) {}\n";
    let worker = ["--worker", "/nonexistent/kernel-lsp-worker"];
    let (code, out, err) = cli("bench", &worker, &[("nospec.cu", plain)]);
    assert_eq!(code, 1, "{out}{err}");
    expect![[r#"
        nospec.cu: error: no kernel has a @bench spec (k, j), so nothing was run; add @bench lines above the one to run (the editor's "Insert @bench spec" code action writes a skeleton)
    "#]]
    .assert_eq(&err);
    // One kernel named, and it has no spec.
    let good = b"// @bench n = 1 << 20, 4099\n// @bench x: in f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n__global__ void j(float* y) {}\n";
    let (code, out, err) = cli(
        "bench",
        &[&worker[..], &["--kernel", "j"]].concat(),
        &[("one.cu", good)],
    );
    assert_eq!(code, 1, "{out}{err}");
    expect![[r#"
        one.cu: error: `j` has no @bench spec, so nothing was run; add @bench lines above it (the editor's "Insert @bench spec" code action writes a skeleton)
    "#]]
    .assert_eq(&err);
    // No kernels at all.
    let (code, _, err) = cli("bench", &worker, &[("empty.cu", b"int x;\n")]);
    assert_eq!(code, 1, "{err}");
    expect![[r#"
        empty.cu: error: no kernels (`__global__` functions) in the file, so nothing was run
    "#]]
    .assert_eq(&err);
}

#[test]
fn json_output_has_positions_and_severity() {
    let (code, out, _) = check(&["--no-compile", "--json"], &[("bad.cu", BAD)]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = &v[0];
    assert_eq!(
        (f["file"].as_str(), f["line"].as_u64(), f["column"].as_u64()),
        (Some("bad.cu"), Some(2), Some(17))
    );
    assert_eq!(f["severity"], "error");
    assert_eq!(f["source"], "@bench");
}

#[test]
fn clean_files_exit_0_and_unreadable_ones_exit_2() {
    let good = b"// @bench n = 1 << 20, 4099\n// @bench x: in f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n";
    let (code, out, _) = check(&["--no-compile"], &[("good.cu", good)]);
    assert_eq!((code, out.as_str()), (0, ""));

    let (code, _, err) = check(
        &["--no-compile"],
        &[("latin1.cu", b"// caf\xe9\n__global__ void k() {}\n")],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("latin1.cu: error: is not UTF-8 text (invalid byte at offset 6)"),
        "{err}"
    );

    let (code, _, err) = check(&["--no-compile"], &[("blob.cu", b"\x7fELF\x00\x00\x01")]);
    assert_eq!(code, 2);
    assert!(err.contains("looks like a binary file"), "{err}");

    let (code, _, err) = check(&[], &[("notes.txt", b"hello")]);
    assert_eq!(code, 0);
    assert!(
        err.contains("notes.txt: skipped: not a CUDA (.cu, .cuh) or Python file"),
        "{err}"
    );
}

#[test]
fn bundled_examples_check_clean() {
    folder_checks_clean(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples"));
}

/// The GPU probe set of first drafts (`tests/gpu/drafts`): every spec still plans as the
/// spec language and the checks evolve, so a GPU session can run them as they are.
#[test]
fn the_gpu_probe_drafts_check_clean() {
    folder_checks_clean(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/gpu/drafts"));
}

/// `check --no-compile` on every CUDA and Triton file of `root`: exit 0, no error.
fn folder_checks_clean(root: &str) {
    let mut files: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu" || x == "py"))
        .collect();
    files.sort();
    assert!(files.len() > 5, "{root}: {files:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .arg("check")
        .arg("--no-compile")
        .args(&files)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{root} has errors:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(": error:"), "{stdout}");
}

/// Issue #11: a file as real projects write it checks clean. Its kernel uses a helper
/// header found through compile_commands.json, a quoted header next to it full of host
/// code, the grammar's gaps (`#pragma unroll` before an unbraced loop body, `#if`
/// around an `if` head, `__align__`), `INFINITY`/`FLT_MAX`, cooperative groups, and host
/// code with `std::vector`, `printf` and cuBLAS. A header nobody has is one warning.
#[test]
fn a_real_project_file_checks_clean_with_its_includes_and_host_code() {
    if let Err(e) = crate::tools::nvrtc_available() {
        return crate::tools::skip(
            "a_real_project_file_checks_clean_with_its_includes_and_host_code",
            &e,
        );
    }
    let dir = fresh_project("project", &["src", "third_party/inc"]);
    std::fs::write(
        dir.join("src/common.h"),
        r#"#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <float.h>
#include "helpers.cuh"
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
inline void cuda_check(cudaError_t e, const char* f, int l) {
    if (e != cudaSuccess) { printf("%s:%d %s\n", f, l, cudaGetErrorString(e)); exit(1); }
}
float* make_host(int n) { std::vector<float> v(n); float* p = (float*)malloc(n * 4); return p; }
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("third_party/inc/helpers.cuh"),
        "#pragma once\n__device__ __forceinline__ float sq(float v) { return v * v; }\n",
    )
    .unwrap();
    let kernel = r#"#include "common.h"
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

struct __align__(8) Pair { float a, b; };

__global__ void row_max(const float* x, float* y, int rows, int cols) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    float m = -INFINITY;
    for (int c = warp.thread_rank(); c < cols; c += 32)
#pragma unroll
        for (int k = 0; k < 1; ++k)
            m = fmaxf(m, sq(x[row * cols + c]));
    m = cg::reduce(warp, m, cg::greater<float>());
#if USE_FAST
    if (warp.thread_rank() == 0 && m < FLT_MAX)
#else
    if (warp.thread_rank() == 0)
#endif
    {
        y[row] = m;
    }
}

int main() {
    cublasHandle_t h;
    cublasCreate(&h);
    std::vector<float> v(CEIL_DIV(10, 3));
    float* p = make_host(4);
    cuda_check(cudaMalloc(&p, 16), __FILE__, __LINE__);
    printf("%zu\n", v.size());
    return 0;
}
"#;
    std::fs::write(dir.join("src/rows.cu"), kernel).unwrap();
    let db = format!(
        r#"[{{"directory": "{d}", "file": "src/rows.cu", "command": "nvcc -Ithird_party/inc -DUSE_FAST=1 -std=c++17 -c src/rows.cu -o rows.o"}}]"#,
        d = dir.display()
    );
    std::fs::write(dir.join("compile_commands.json"), db).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["check", "src/rows.cu"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        (out.status.code(), stdout.as_str()),
        (Some(0), ""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Without compile_commands.json, helpers.cuh is missing: one warning (its include is
    // inside common.h, so it is reported on the file's first line), and the rest of the
    // file is still checked: `sq`, which the header declared, is an error as with nvcc.
    std::fs::remove_file(dir.join("compile_commands.json")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["check", "src/rows.cu"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.starts_with("src/rows.cu:1:1: warning: cannot open `helpers.cuh`"),
        "{stdout}"
    );
    assert!(
        stdout.contains("src/rows.cu:17:26: error: identifier \"sq\" is undefined"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A project in the style of a large inference library: headers full of host classes
/// (`std::vector`, `std::string`, a cuBLAS handle from a header this machine lacks), macro
/// statements the grammar cannot read, templates and a device error planted later. With
/// nvcc (the CUDA 13 wheels) the file is checked as the project builds it: clean but for
/// the missing header, and the planted error is found at its place. With NVRTC alone
/// there is no false error either.
#[test]
fn nvcc_checks_a_project_file_as_the_project_builds_it() {
    let test = "nvcc_checks_a_project_file_as_the_project_builds_it";
    let nvcc = match crate::tools::test_nvcc() {
        Ok(p) => p,
        Err(e) => return crate::tools::skip(test, &e),
    };
    let dir = fresh_project("nvcc-proj", &["src/cuda", "include"]);
    std::fs::write(
        dir.join("include/lib.h"),
        "#pragma once\n#include <stdio.h>\n#include <stdint.h>\nstruct tensor { int64_t ne[4]; void* data; };\nFILE* lib_log_file(void);\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/cuda/common.cuh"),
        r#"#pragma once
#include "lib.h"
#include <cublas_v2.h>
#include <string>
#include <vector>
#include <cuda_fp16.h>
#define TENSOR_LOCALS const int64_t ne0 = t->ne[0]; const int64_t ne1 = t->ne[1];
#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s\n", cudaGetErrorString(e_)); } } while (0)
struct cuda_context {
    std::vector<cudaStream_t> streams;
    std::string name;
    cublasHandle_t handle = nullptr;
    cublasHandle_t cublas() { if (!handle) { cublasCreate(&handle); } return handle; }
};
template <typename T> static __device__ __forceinline__ float to_float(T v) { return (float) v; }
static constexpr __device__ int warp_size() { return 32; }
"#,
    )
    .unwrap();
    let kernel = r#"#include "common.cuh"

template <typename src_t, typename dst_t>
static __global__ void scale(const src_t* x, dst_t* y, const int64_t n, const float s) {
    const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float m = -INFINITY;
    m = fmaxf(m, to_float(x[i]) * s);
    y[i] = (dst_t) m;
}

#define LAUNCH(S, D) scale<S, D><<<(n + 255) / 256, 256, 0, stream>>>((const S*) t->data, (D*) out, n, s)

void scale_cuda(cuda_context& ctx, const tensor* t, void* out, int type, float s) {
    TENSOR_LOCALS
    const int64_t n = ne0 * ne1;
    cudaStream_t stream = ctx.streams.empty() ? nullptr : ctx.streams[0];
    switch (type) {
        case 0: LAUNCH(float, float); break;
        case 1: LAUNCH(half, float); break;
        default: break;
    }
    CUDA_CHECK(cudaGetLastError());
    cublasSetStream(ctx.cublas(), stream);
}
"#;
    std::fs::write(dir.join("src/cuda/scale.cu"), kernel).unwrap();
    let db = format!(
        r#"[{{"directory": "{d}", "file": "src/cuda/scale.cu", "command": "nvcc -Iinclude -Isrc -Isrc/cuda -DNDEBUG -std=c++17 --expt-relaxed-constexpr -O3 -c src/cuda/scale.cu -o scale.o"}}]"#,
        d = dir.display()
    );
    std::fs::write(dir.join("compile_commands.json"), db).unwrap();
    let check = |nvcc_env: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
            .current_dir(&dir)
            .env("KERNEL_LSP_NVCC", nvcc_env)
            .args(["check", "src/cuda/scale.cu"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (code, stdout, stderr) = check(&nvcc);
    assert!(stderr.contains("note: checking with nvcc"), "{stderr}");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // The one message: the header this machine does not have (on the include that
    // brought it in), with the folders searched.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with("src/cuda/scale.cu:1:1: warning: cannot open `cublas_v2.h` (searched: "),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("[nvcc]"), "{stdout}");

    // NVRTC alone: no false error either.
    let (code, stdout, stderr) = check(std::path::Path::new("none"));
    assert!(!stderr.contains("checking with nvcc"), "{stderr}");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.contains(": error:"), "{stdout}");

    // A real device error is found by nvcc, at its line and column.
    let broken = kernel.replace(
        "fmaxf(m, to_float(x[i]) * s)",
        "fmaxf(m, to_float(x[i]) * scale_factor)",
    );
    std::fs::write(dir.join("src/cuda/scale.cu"), &broken).unwrap();
    let (code, stdout, _) = check(&nvcc);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "src/cuda/scale.cu:10:35: error: identifier \"scale_factor\" is undefined [nvcc]"
        ),
        "{stdout}"
    );

    // nvcc refusing the project's flags falls back to NVRTC, and says so.
    std::fs::write(dir.join("src/cuda/scale.cu"), kernel).unwrap();
    let bad = std::fs::read_to_string(dir.join("compile_commands.json"))
        .unwrap()
        .replace("-std=c++17", "-std=c++99");
    std::fs::write(dir.join("compile_commands.json"), bad).unwrap();
    let (code, stdout, stderr) = check(&nvcc);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("note: nvcc could not check the file (nvcc: nvcc fatal"),
        "{stderr}"
    );
    assert!(stderr.contains("checked with NVRTC"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// NVIDIA's samples' shapes (issue #11): headers included with `<...>` from `-I Common`
/// (`helper_math.h`'s device operators), a host-only `helper_cuda.h`, `<cuda.h>` for a
/// driver-API type, `<mma.h>`, a host class calling a host helper, a `CUDART_CB`
/// callback, `uint32_t` after host headers only. Clean with NVRTC alone. Then a CUDA
/// library header this machine lacks: one warning and one note, never a false error.
#[test]
fn a_samples_style_project_checks_clean_and_a_missing_library_header_is_a_note() {
    let test = "a_samples_style_project_checks_clean_and_a_missing_library_header_is_a_note";
    if let Err(e) = crate::tools::nvrtc_available() {
        return crate::tools::skip(test, &e);
    }
    let dir = fresh_project("samples", &["Common", "Samples/demo"]);
    std::fs::write(
        dir.join("Common/helper_math.h"),
        "#pragma once\n#include \"cuda_runtime.h\"\ntypedef unsigned int uint;\ninline __host__ __device__ float3 operator+(float3 a, float3 b) { return make_float3(a.x + b.x, a.y + b.y, a.z + b.z); }\ninline __host__ __device__ float3 operator*(float3 a, float s) { return make_float3(a.x * s, a.y * s, a.z * s); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("Common/helper_cuda.h"),
        "#pragma once\n#include <string>\n#include <stdio.h>\ntemplate <typename T> void check(T r, const char *f) { if (r) { fprintf(stderr, \"%s\\n\", f); exit(1); } }\n#define checkCudaErrors(v) check((v), #v)\ninline bool compareData(const float *a, const float *b, unsigned n) { return true; }\n",
    )
    .unwrap();
    let sample = r#"#include <stdio.h>
#include <cuda.h>
#include <mma.h>
#include <helper_cuda.h>
#include <helper_math.h>
using namespace nvcuda;

class Comparator {
 public:
  bool compare(const float *r, const float *d, unsigned n) { return compareData(r, d, n); }
};

__global__ void advect(float3 *p, const float3 *v, uint n, float dt, CUtexObject tex) {
  uint i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] + v[i] * dt;
}

__global__ void tile(const half *a, float *c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

void CUDART_CB done(cudaStream_t s, cudaError_t e, void *data) { printf("done
"); }

int main() {
  uint32_t n = 1024;
  float3 *p;
  checkCudaErrors(cudaMalloc(&p, n * sizeof(float3)));
  Comparator c;
  return c.compare(nullptr, nullptr, 0) ? 0 : 1;
}
"#;
    std::fs::write(dir.join("Samples/demo/demo.cu"), sample).unwrap();
    // A CUDA library header no folder has here (CUTLASS's CuTe is not installed).
    std::fs::write(
        dir.join("Samples/demo/cute.cu"),
        "#include <cute/tensor.hpp>\n__global__ void k(float *y) {\n  auto t = cute::make_tensor(y, cute::make_shape(4));\n  t(0) = 1.f;\n}\n",
    )
    .unwrap();
    let db = format!(
        r#"[{{"directory": "{d}", "file": "Samples/demo/demo.cu", "command": "nvcc -ICommon -std=c++17 -c Samples/demo/demo.cu"}},
            {{"directory": "{d}", "file": "Samples/demo/cute.cu", "command": "nvcc -ICommon -std=c++17 -c Samples/demo/cute.cu"}}]"#,
        d = dir.display()
    );
    std::fs::write(dir.join("compile_commands.json"), db).unwrap();
    let run = |file: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
            .current_dir(&dir)
            .env("KERNEL_LSP_NVCC", "none")
            .args(["check", file])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run("Samples/demo/demo.cu");
    assert_eq!((code, stdout.as_str()), (Some(0), ""), "{stderr}");
    assert!(stderr.contains("2 kernel(s): advect"), "{stderr}");
    let (code, stdout, stderr) = run("Samples/demo/cute.cu");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("Samples/demo/cute.cu:1:1: warning: cannot open `cute/tensor.hpp`"),
        "{stdout}"
    );
    assert!(
        lines[1].contains("info: not checked: `cute/tensor.hpp` is not installed here"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An empty project folder (a `.git` marks the workspace root) with `folders` made.
fn fresh_project(name: &str, folders: &[&str]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for f in folders.iter().chain(&[".git"]) {
        std::fs::create_dir_all(dir.join(f)).unwrap();
    }
    dir
}

/// A Triton BLOCK that is not a power of two, passed to `tl.arange`, fails `check` on
/// that argument, naming the parameter; `bench` refuses it before a worker starts
/// (instead of Triton's traceback at the first launch).
#[test]
fn a_non_power_of_two_arange_size_fails_check_naming_the_parameter() {
    let src = "import triton\nimport triton.language as tl\n\n\n# @bench n = 4096, 1000\n# @bench x_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 1000\n@triton.jit\ndef copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)\n";
    let (code, out, _) = check(&["--no-compile"], &[("copy.py", src.as_bytes())]);
    assert_eq!(code, 1, "{out}");
    expect![[r#"
        copy.py:10:52: error: `BLOCK` is 1000 (case 1), not a power of two, but `tl.arange` needs a power-of-two range: use 512 or 1024 [@bench]
    "#]]
    .assert_eq(out.lines().find(|l| l.contains("error")).map(|l| format!("{l}\n")).as_deref().unwrap_or(&out));
    let (code, _, err) = cli("bench", &[], &[("copy2.py", src.as_bytes())]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("`BLOCK` is 1000") && err.contains("nothing was run"),
        "{err}"
    );
}

/// Issue #31: `check` reads the settings `optimize` reads: `--config FILE`, else
/// `.kernel-lsp/settings.json` at the workspace root (include folders and defines).
#[test]
fn check_reads_the_settings_file_and_config() {
    if let Err(e) = crate::tools::nvrtc_available() {
        return crate::tools::skip("check_reads_the_settings_file_and_config", &e);
    }
    let dir = fresh_project("check-settings", &["src", "vendor/inc", ".kernel-lsp"]);
    for (path, text) in [
        ("vendor/inc/scale.cuh", "__device__ inline float scale(float x) { return x * SCALE; }\n"),
        ("src/k.cu", "#include <scale.cuh>\n#ifndef USE_SCALE\n#error build with USE_SCALE\n#endif\n__global__ void k(float* x) { x[threadIdx.x] = scale(x[threadIdx.x]); }\n"),
    ] {
        std::fs::write(dir.join(path), text).unwrap();
    }
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
            .current_dir(&dir)
            .env("KERNEL_LSP_DATA_DIR", &dir)
            .env("KERNEL_LSP_NVCC", "none")
            .arg("check")
            .args(args)
            .arg("src/k.cu")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, out) = run(&[]);
    assert_eq!(
        code,
        Some(1),
        "no settings: the #error and SCALE show\n{out}"
    );
    assert!(out.contains("USE_SCALE"), "{out}");
    let settings =
        r#"{"cuda": {"includePaths": ["vendor/inc"], "defines": ["USE_SCALE", "SCALE=2.0f"]}}"#;
    std::fs::write(dir.join(".kernel-lsp/settings.json"), settings).unwrap();
    let (code, out) = run(&[]);
    assert_eq!(code, Some(0), "the workspace's settings.json\n{out}");
    std::fs::remove_file(dir.join(".kernel-lsp/settings.json")).unwrap();
    std::fs::write(dir.join("other.json"), settings).unwrap();
    let (code, out) = run(&["--config", "other.json"]);
    assert_eq!(code, Some(0), "--config\n{out}");
    let (code, out) = run(&["--config", "missing.json"]);
    assert_eq!(code, Some(2), "an unreadable --config\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #31: a syntax error inside an `#if` branch that the project's defines leave out
/// (HIP-only code) is not shown, even when the compile cannot overrule syntax errors
/// (here a header's device code that NVRTC cannot compile gives the "not checked"
/// note); with the define, the branch is compiled and its error shows.
#[test]
fn syntax_errors_in_inactive_branches_are_not_shown() {
    if let Err(e) = crate::tools::nvrtc_available() {
        return crate::tools::skip("syntax_errors_in_inactive_branches_are_not_shown", &e);
    }
    let dir = fresh_project("check-inactive", &["src"]);
    for (path, text) in [
        ("src/common.cuh", "#pragma once\n__device__ inline int count(int x) { return std::vector<int>(x).size(); }\n"),
        ("src/k.cu", "#include \"common.cuh\"\n#if defined(USE_HIP)\n  hipLaunch(k, {{{ dim3( ;\n#else\n#define LAUNCH_OK 1\n#endif\n#ifndef NDEBUG\n#else\nint broken( {;\n#endif\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"),
        ("hip.json", r#"{"cuda": {"defines": ["USE_HIP", "NDEBUG"]}}"#),
    ] {
        std::fs::write(dir.join(path), text).unwrap();
    }
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
            .current_dir(&dir)
            .env("KERNEL_LSP_NVCC", "none")
            .arg("check")
            .args(args)
            .arg("src/k.cu")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(&[]);
    assert!(!out.contains("[syntax]"), "{out}");
    let out = run(&["--config", "hip.json"]);
    // With the defines, the HIP branch is compiled and its error shows (the grammar
    // anchors it at its `#if`).
    let lines: Vec<&str> = out.lines().filter(|l| l.ends_with("[syntax]")).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("src/k.cu:2:") || l.starts_with("src/k.cu:3:")),
        "USE_HIP set: its branch is checked\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #31: `--no-compile` applies the same rule for `#if` branches the project's
/// defines leave out: no syntax error from them, while one in active code still shows,
/// and with the define the branch's error shows.
#[test]
fn no_compile_hides_syntax_errors_in_inactive_branches() {
    let dir = fresh_project("check-inactive-no-compile", &["src"]);
    for (path, text) in [
        ("src/k.cu", "#if defined(USE_HIP)\n  hipDeviceProp_t p q = ;\n#endif\n__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n"),
        ("src/bad.cu", "#ifdef USE_HIP\n  hipDeviceProp_t p q = ;\n#endif\n__device__ int ok(int a) { return a; }\n__global__ void k(float* x) { x[0] = (1.0f; }\n"),
        ("hip.json", r#"{"cuda": {"defines": ["USE_HIP"]}}"#),
    ] {
        std::fs::write(dir.join(path), text).unwrap();
    }
    let run = |args: &[&str], file: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
            .current_dir(&dir)
            .arg("check")
            .arg("--no-compile")
            .args(args)
            .arg(file)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(&[], "src/k.cu");
    assert!(!out.contains("[syntax]"), "{out}");
    let out = run(&[], "src/bad.cu");
    let lines: Vec<&str> = out.lines().filter(|l| l.ends_with("[syntax]")).collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.starts_with("src/bad.cu:5:")),
        "only the active line's error\n{out}"
    );
    let out = run(&["--config", "hip.json"], "src/k.cu");
    assert!(
        out.lines().any(|l| l.ends_with("[syntax]")
            && (l.starts_with("src/k.cu:1:") || l.starts_with("src/k.cu:2:"))),
        "USE_HIP set: its branch is read\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Triton kernel reading a plain module-level global runs on the CPU interpreter but
/// does not compile for a GPU: `check` warns at the read and says how to fix it; a
/// `tl.constexpr(...)` global and a module are not warned.
#[test]
fn a_triton_kernel_reading_a_plain_global_is_warned() {
    let src = b"import math\nimport triton\nimport triton.language as tl\n\nBLOCK = 512\nWARPS = tl.constexpr(4)\n\n# @bench n = 4096, 1000\n# @bench x: in f32[n]\n# @bench y: out f32[n]\n# @bench grid = cdiv(n, 512)\n@triton.jit\ndef scale(x, y, n):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, 512)\n    v = tl.load(x + offs, mask=offs < n) * WARPS * math.pi\n    tl.store(y + offs, v, mask=offs < n)\n";
    let (code, out, _) = check(&["--no-compile"], &[("plain_global.py", src)]);
    assert_eq!(code, 0, "{out}");
    expect![[r#"
        plain_global.py:14:31: warning: `BLOCK` is a plain module-level global (`BLOCK = 512`, line 5): a @triton.jit function may read a global only when it is a constexpr, so this runs on the CPU interpreter but fails to compile for a GPU; annotate as `BLOCK = tl.constexpr(512)` or pass it as a `tl.constexpr` parameter [@bench]
    "#]].assert_eq(&out);
}
