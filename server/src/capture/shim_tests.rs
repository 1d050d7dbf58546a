//! The CUDA shim on the CPU: it compiles with the system `cc`, and, preloaded into a small
//! C program linked against a stand-in `libcudart.so` (launches run on the host, device
//! memory is host memory), it intercepts `cudaLaunchKernel`, records each distinct launch
//! with its parameters and what it did to each buffer, and leaves memory as one launch
//! would. The records then go through `resolve` and the inference like a GPU run's.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::capture::infer::infer;

/// The stand-in runtime and driver: allocations are host memory in a table, a launch calls
/// the "kernel" (a host function) with the argument array and the thread count.
const FAKE_RT: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
typedef struct { unsigned x, y, z; } dim3;
typedef void (*kfn)(void **, unsigned);
static struct { const void *f; const char *name; int n; size_t off[8], size[8]; } ks[8];
static int nk;
static struct { char *p; size_t n; } al[64];
static int na;
void fake_register(const void *f, const char *name, int n, const size_t *off, const size_t *size) {
  ks[nk].f = f; ks[nk].name = name; ks[nk].n = n;
  memcpy(ks[nk].off, off, n * sizeof(size_t)); memcpy(ks[nk].size, size, n * sizeof(size_t));
  nk++;
}
static int find(const void *f) { for (int i = 0; i < nk; i++) if (ks[i].f == f) return i; return -1; }
int cudaMalloc(void **p, size_t n) { *p = malloc(n); al[na].p = *p; al[na].n = n; na++; return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int kind) { (void)kind; memcpy(d, s, n); return 0; }
int cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return 0; }
int cudaDeviceSynchronize(void) { return 0; }
int cudaGetFuncBySymbol(void **f, const void *sym) { *f = (void *)sym; return 0; }
int cudaFuncGetName(const char **name, const void *f) { int i = find(f); if (i < 0) return 1; *name = ks[i].name; return 0; }
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, void *s) {
  (void)smem; (void)s; ((kfn)f)(args, g.x * b.x); return 0;
}
int cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) {
  int k = find(f); if (k < 0 || (int)i >= ks[k].n) return 1;
  *off = ks[k].off[i]; *size = ks[k].size[i]; return 0;
}
int cuMemGetAddressRange_v2(size_t *base, size_t *size, size_t p) {
  for (int i = 0; i < na; i++)
    if (p >= (size_t)al[i].p && p < (size_t)al[i].p + al[i].n) { *base = (size_t)al[i].p; *size = al[i].n; return 0; }
  return 1;
}
"#;

/// saxpy (y = a*x + y, inout) three times (twice the same), `fill` (out) and one kernel
/// the project does not have; prints a checksum of the results.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stddef.h>
typedef struct { unsigned x, y, z; } dim3;
int cudaMalloc(void **, size_t);
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
void fake_register(const void *, const char *, int, const size_t *, const size_t *);
static void saxpy(void **a, unsigned t) {
  int n = *(int *)a[0]; float k = *(float *)a[1]; const float *x = *(float **)a[2]; float *y = *(float **)a[3];
  for (int i = 0; i < n && i < (int)t; i++) y[i] = k * x[i] + y[i];
}
static void fill(void **a, unsigned t) {
  float *out = *(float **)a[0]; int rows = *(int *)a[1], cols = *(int *)a[2];
  for (int i = 0; i < rows * cols && i < (int)t; i++) out[i] = (float)i;
}
static void other(void **a, unsigned t) { (void)a; (void)t; }
int main(void) {
  size_t o4[] = {0, 4, 8, 16}, s4[] = {4, 4, 8, 8}, o3[] = {0, 8, 12}, s3[] = {8, 4, 4};
  fake_register((void *)saxpy, "saxpy", 4, o4, s4);
  fake_register((void *)fill, "_Z4fillPfii", 3, o3, s3);
  fake_register((void *)other, "_Z5otherv", 0, o4, s4);
  float *x, *y, *out;
  cudaMalloc((void **)&x, 1000 * 4); cudaMalloc((void **)&y, 1000 * 4); cudaMalloc((void **)&out, 37 * 100 * 4);
  for (int i = 0; i < 1000; i++) { x[i] = 1.0f; y[i] = (float)i; }
  int n = 1000; float k = 2.0f;
  void *args[] = {&n, &k, &x, &y};
  dim3 g = {8, 1, 1}, b = {128, 1, 1};
  cudaLaunchKernel((void *)saxpy, g, b, args, 0, 0);
  cudaLaunchKernel((void *)saxpy, g, b, args, 0, 0);
  float *x2, *y2;
  cudaMalloc((void **)&x2, 600 * 4); cudaMalloc((void **)&y2, 600 * 4);
  for (int i = 0; i < 600; i++) { x2[i] = 3.0f; y2[i] = (float)-i; }
  int n2 = 600; g.x = 5;
  void *args2[] = {&n2, &k, &x2, &y2};
  cudaLaunchKernel((void *)saxpy, g, b, args2, 0, 0);
  int rows = 37, cols = 100;
  void *fargs[] = {&out, &rows, &cols};
  dim3 fg = {29, 1, 1}, fb = {128, 1, 1};
  cudaLaunchKernel((void *)fill, fg, fb, fargs, 0, 0);
  cudaLaunchKernel((void *)other, fg, fb, NULL, 0, 0);
  double sum = 0;
  for (int i = 0; i < 1000; i++) sum += y[i];
  for (int i = 0; i < 3700; i++) sum += out[i];
  for (int i = 0; i < 600; i++) sum += y2[i];
  printf("%.1f\n", sum);
  return 0;
}
"#;

const SOURCES: &str = r#"
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void fill(float* out, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) out[i] = (float)i;
}
"#;

fn cc_available() -> bool {
    Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kernel-lsp-shim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch folder");
    d
}

fn cc(args: &[&str], dir: &Path) {
    let o = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cc runs");
    assert!(
        o.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_shim_compiles_with_the_system_cc() {
    if !cc_available() {
        eprintln!("SKIPPED: no C compiler (`cc`) on this machine; the shim was not compiled");
        return;
    }
    let d = scratch("cc");
    let lib = compile_shim(&d).unwrap_or_else(|e| panic!("{e}"));
    assert!(lib.is_file());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_shim_intercepts_launches_of_a_stand_in_runtime() {
    if !cc_available() {
        eprintln!("SKIPPED: no C compiler (`cc`) on this machine; the interception was not run");
        return;
    }
    let d = scratch("fake");
    std::fs::write(d.join("fake.c"), FAKE_RT).expect("write");
    std::fs::write(d.join("prog.c"), PROGRAM).expect("write");
    cc(&["-shared", "-fPIC", "-o", "libcudart.so", "fake.c"], &d);
    cc(
        &[
            "-o",
            "prog",
            "prog.c",
            "-L.",
            "-lcudart",
            "-Wl,-rpath,$ORIGIN",
        ],
        &d,
    );
    let plain = Command::new(d.join("prog")).output().expect("prog runs");
    let lib = compile_shim(&d).unwrap_or_else(|e| panic!("{e}"));
    let out_file = d.join("records.jsonl");
    let seen = Command::new(d.join("prog"))
        .env("LD_PRELOAD", &lib)
        .env("KERNEL_LSP_CAPTURE_OUT", &out_file)
        .env("KERNEL_LSP_CAPTURE_CUDA_NAMES", "saxpy,fill")
        .output()
        .expect("prog runs");
    assert_eq!(
        String::from_utf8_lossy(&seen.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the program's results are those of a run without the shim (each launch took effect once)"
    );
    let text = std::fs::read_to_string(&out_file).expect("records written");
    let r = record::parse_lines(&text);
    assert_eq!(
        r.cuda.len(),
        3,
        "two distinct saxpy launches and one fill: {text}"
    );
    let sources = cuda::kernels_of("/p/k.cu", SOURCES);
    let (launches, counts) = cuda::resolve(&r.cuda, &r.cuda_counts, &sources);
    let saxpy: Vec<&record::Launch> = launches.iter().filter(|l| l.kernel == "saxpy").collect();
    let lines = infer(&saxpy, 4, true)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines;
    assert_eq!(
        lines,
        vec![
            "n = 1000, 600, 999",
            "a = 2.0",
            "x: in f32[n]",
            "y: inout f32[n]",
            "grid = cdiv(n, 128)",
            "block = 128",
        ]
    );
    let fill: Vec<&record::Launch> = launches.iter().filter(|l| l.kernel == "fill").collect();
    let lines = infer(&fill, 4, true)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines;
    assert!(
        lines.contains(&"out: out f32[rows, cols]".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"grid = cdiv(rows * cols, 128)".to_string()),
        "{lines:?}"
    );
    let n = |k: &str| counts.iter().find(|c| c.kernel == k).map(|c| c.launches);
    assert_eq!((n("saxpy"), n("fill")), (Some(3), Some(1)));
    let _ = std::fs::remove_dir_all(&d);
}
