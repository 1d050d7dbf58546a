//! `kernel-lsp check`: what a kernel author's CI prints.

use std::process::Command;

use expect_test::expect;

fn check(args: &[&str], files: &[(&str, &[u8])]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-check-{}-{}",
        std::process::id(),
        files.first().map_or("x", |f| f.0)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.current_dir(&dir).arg("check").args(args);
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
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut files: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .arg("check")
        .arg("--no-compile")
        .args(&files)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "examples have errors:\n{stdout}\n{}",
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
    let dir = std::env::temp_dir().join(format!("kernel-lsp-project-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("third_party/inc")).unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
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
