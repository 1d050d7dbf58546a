//! Fixture tests for kernel discovery: each renders what the layers above see.

use std::fmt::Write;

use expect_test::{expect, Expect};

use super::*;

fn parse(lang: Lang, src: &str) -> tree_sitter::Tree {
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&ts_language(lang))
        .expect("the grammar loads");
    parser
        .parse(src, None)
        .expect("parsing without a timeout or cancellation returns a tree")
}

fn pos(src: &str, at: usize) -> String {
    let before = &src.as_bytes()[..at.min(src.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count();
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count();
    format!("{line}:{col}")
}

fn span(src: &str, r: &ByteRange) -> String {
    format!("{}-{}", pos(src, r.start), pos(src, r.end))
}

/// Kernels, spec lines, units and errors as a reviewer reads them.
fn render(lang: Lang, src: &str) -> String {
    let tree = parse(lang, src);
    let model = analyze(lang, src, &tree);
    let mut out = String::new();
    for k in &model.kernels {
        let _ = write!(
            out,
            "kernel {} name {} def {}",
            k.name,
            pos(src, k.name_range.start),
            span(src, &k.def_range)
        );
        if k.extern_c {
            out.push_str(" extern_c");
        }
        out.push('\n');
        if !k.template_params.is_empty() {
            let _ = writeln!(out, "  template {}", k.template_params.join(", "));
        }
        for p in &k.params {
            let kind = match &p.kind {
                ParamKind::Pointer { pointee, is_const } => {
                    format!("Pointer {}{pointee}", if *is_const { "const " } else { "" })
                }
                ParamKind::Scalar { ty } => format!("Scalar {ty}"),
                ParamKind::TritonArg { annotation } => {
                    format!(
                        "TritonArg{}",
                        annotation
                            .as_ref()
                            .map(|a| format!(" {a}"))
                            .unwrap_or_default()
                    )
                }
                ParamKind::Constexpr => "Constexpr".to_string(),
                ParamKind::Other { ty } => format!("Other `{ty}`"),
            };
            let _ = writeln!(
                out,
                "  param {} {}: {kind}  `{}`",
                p.index,
                p.name,
                &src[p.range.clone()]
            );
        }
        if let Some(r) = &k.spec.range {
            let _ = writeln!(out, "  spec {}", span(src, r));
        }
        for l in &k.spec.lines {
            assert_eq!(
                src.get(l.offset..l.offset + l.text.len()),
                Some(l.text.as_str()),
                "offset points at text"
            );
            let _ = writeln!(out, "    @{} {}|{}|", l.line, pos(src, l.offset), l.text);
        }
        if !k.callees.is_empty() {
            let _ = writeln!(out, "  callees {}", k.callees.join(", "));
        }
        let units: Vec<String> = k.unit_ranges.iter().map(|r| span(src, r)).collect();
        let _ = writeln!(out, "  unit {}", units.join(" "));
    }
    for e in &model.syntax_errors {
        let _ = writeln!(out, "error {}: {}", span(src, &e.range), e.message);
    }
    out
}

fn check(lang: Lang, src: &str, expect: Expect) {
    expect.assert_eq(&render(lang, src));
}

/// The device slice with dropped bytes shown as `░` and trailing blanks trimmed.
fn render_slice(src: &str) -> String {
    // As the product parses: with the grammar's gaps masked (syntax/mask/).
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&ts_language(Lang::Cuda)).unwrap();
    let tree = crate::syntax::parse_text(&mut parser, Lang::Cuda, src).unwrap();
    let model = analyze(Lang::Cuda, src, &tree);
    assert_eq!(model.device_slice.len(), src.len(), "same length");
    let mut bytes = Vec::new();
    for (a, b) in src.bytes().zip(model.device_slice.bytes()) {
        assert_eq!(a == b'\n', b == b'\n', "newlines kept");
        if a == b {
            bytes.push(a);
        } else {
            bytes.extend("░".as_bytes());
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    text.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn every_query_compiles() {
    for (lang, name, src) in [
        (Lang::Cuda, "cuda/kernels.scm", queries::CUDA_KERNELS_SRC),
        (Lang::Cuda, "cuda/calls.scm", queries::CUDA_CALLS_SRC),
        (
            Lang::Triton,
            "triton/kernels.scm",
            queries::TRITON_KERNELS_SRC,
        ),
        (Lang::Triton, "triton/calls.scm", queries::TRITON_CALLS_SRC),
    ] {
        if let Err(e) = tree_sitter::Query::new(&ts_language(lang), src) {
            panic!("grammars/{name}: {e}");
        }
    }
    assert!(queries::CUDA_KERNELS.is_some() && queries::CUDA_CALLS.is_some());
    assert!(queries::TRITON_KERNELS.is_some() && queries::TRITON_CALLS.is_some());
}

#[test]
fn spec_md_saxpy() {
    check(
        Lang::Cuda,
        r#"#include <cuda_fp16.h>
// @bench n = 1 << 24, 4099            sizes: the first case is timed, every case is verified
// @bench x: in f32[n]                 a buffer: role, element type, shape
// @bench y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5                      a scalar argument (a kernel parameter)
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#,
        expect![[r#"
            kernel saxpy name 6:27 def 6:0-9:1 extern_c
              param 0 n: Scalar int  `int n`
              param 1 a: Scalar float  `float a`
              param 2 x: Pointer const float  `const float* x`
              param 3 y: Pointer float  `float* y`
              spec 1:0-5:42
                @1 1:9| n = 1 << 24, 4099            sizes: the first case is timed, every case is verified|
                @2 2:9| x: in f32[n]                 a buffer: role, element type, shape|
                @3 3:9| y: inout f32[n] ~ normal(0, 1)|
                @4 4:9| a = 2.5                      a scalar argument (a kernel parameter)|
                @5 5:9| grid = cdiv(n, 256); block = 256|
              unit 6:0-9:1
        "#]],
    );
}

#[test]
fn spec_md_add_kernel() {
    check(
        Lang::Triton,
        r#"import triton
import triton.language as tl

# @bench n = 1 << 24, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 1024; num_warps = 4
# @bench tune BLOCK in [256, 512, 1024, 2048]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
"#,
        expect![[r#"
            kernel add_kernel name 8:4 def 7:0-12:108
              param 0 x_ptr: TritonArg  `x_ptr`
              param 1 y_ptr: TritonArg  `y_ptr`
              param 2 out_ptr: TritonArg  `out_ptr`
              param 3 n: TritonArg  `n`
              param 4 BLOCK: Constexpr  `BLOCK: tl.constexpr`
              spec 3:0-6:45
                @3 3:8| n = 1 << 24, 1000|
                @4 4:8| x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]|
                @5 5:8| grid = cdiv(n, BLOCK); BLOCK = 1024; num_warps = 4|
                @6 6:8| tune BLOCK in [256, 512, 1024, 2048]|
              unit 7:0-12:108
        "#]],
    );
}

#[test]
fn extern_c_block_and_param_kinds() {
    check(
        Lang::Cuda,
        r#"struct Params { int n; };
typedef struct { float s; } Scale;
extern "C" {
// @bench n = 4
__global__ void k(float const* __restrict__ a, float* const b, volatile unsigned   int *c,
                  int& r, float** pp, float arr[4], Params p, Scale s, size_t n, const long long m,
                  __half* h, const float4 *__restrict__ v4, void (*fp)(int), float*) {}
}
"#,
        expect![[r#"
            kernel k name 4:16 def 4:0-6:87 extern_c
              param 0 a: Pointer const float  `float const* __restrict__ a`
              param 1 b: Pointer float  `float* const b`
              param 2 c: Pointer unsigned int  `volatile unsigned   int *c`
              param 3 r: Other `int& r`  `int& r`
              param 4 pp: Other `float** pp`  `float** pp`
              param 5 arr: Other `float arr[4]`  `float arr[4]`
              param 6 p: Other `Params p`  `Params p`
              param 7 s: Other `Scale s`  `Scale s`
              param 8 n: Scalar size_t  `size_t n`
              param 9 m: Scalar long long  `const long long m`
              param 10 h: Pointer __half  `__half* h`
              param 11 v4: Pointer const float4  `const float4 *__restrict__ v4`
              param 12 fp: Other `void (*fp)(int)`  `void (*fp)(int)`
              param 13 : Pointer float  `float*`
              spec 3:0-3:15
                @3 3:9| n = 4|
              unit 4:0-6:87
        "#]],
    );
}

#[test]
fn template_launch_bounds_static_attributes() {
    check(
        Lang::Cuda,
        r#"// @bench tune BLOCK in [128, 256]
template <int BLOCK, typename T>
__global__ void __launch_bounds__(BLOCK) tiled(T* __restrict__ out, const T* in, int n) {}

// @bench n = 1
static __global__ void local_kernel(int n) {}

[[maybe_unused]] __global__ void attributed(int n) {}

namespace ops {
template <>
__global__ void tiled<64, float>(float* out, const float* in, int n) {}
}
__global__ void declared_only(int n);
"#,
        expect![[r#"
            kernel tiled name 2:41 def 1:0-2:90
              template BLOCK, T
              param 0 out: Pointer T  `T* __restrict__ out`
              param 1 in: Pointer const T  `const T* in`
              param 2 n: Scalar int  `int n`
              spec 0:0-0:34
                @0 0:9| tune BLOCK in [128, 256]|
              unit 1:0-2:90
            kernel local_kernel name 5:23 def 5:0-5:45
              param 0 n: Scalar int  `int n`
              spec 4:0-4:15
                @4 4:9| n = 1|
              unit 5:0-5:45
            kernel attributed name 7:33 def 7:0-7:53
              param 0 n: Scalar int  `int n`
              unit 7:0-7:53
            kernel tiled name 11:16 def 10:0-11:71
              param 0 out: Pointer float  `float* out`
              param 1 in: Pointer const float  `const float* in`
              param 2 n: Scalar int  `int n`
              unit 10:0-11:71
        "#]],
    );
}

#[test]
fn device_helper_chains_recursion_overloads() {
    check(
        Lang::Cuda,
        r#"__device__ float c(float x) { return x; }
__device__ float b(float x) { return c(x) + b(x - 1); }
__host__ __device__ inline float a(float x) { return b(x); }
__device__ float a(int x) { return x; }
template <typename T> __device__ T twice(T x) { return ns::d(x) * 2; }
namespace ns { __device__ float d(float x) { return c(x); } }
__device__ float even(int n);
__device__ float odd(int n) { return n == 0 ? 0 : even(n - 1); }
__device__ float even(int n) { return n == 0 ? 1 : odd(n - 1); }
float host_only(float x) { return x; }
__global__ void k(float* y) {
    y[0] = a(1.0f) + twice<float>(2.0f) + host_only(1) + a(3);
    y[1] = even(4) + k2(y);
}
"#,
        expect![[r#"
            kernel k name 10:16 def 10:0-13:1
              param 0 y: Pointer float  `float* y`
              callees a, b, c, twice, d, even, odd
              unit 0:0-0:41 1:0-1:55 2:0-2:60 3:0-3:39 4:0-4:70 5:15-5:59 7:0-7:64 8:0-8:64 10:0-13:1
        "#]],
    );
}

#[test]
fn spec_block_shapes() {
    check(
        Lang::Cuda,
        r#"int before = 1; // @bench not part of any block
// @bench n = 1   // a trailing note stays in the text
// an ordinary comment in the middle
/// @bench x: in f32[n]
//@bench y: out f32[n]
// @benchmark is not a marker, and neither is this: x @bench
__global__ void mixed(int n, const float* x, float* y) {}

// @bench separated by a blank line

__global__ void blank_breaks(int n) {}

/* @bench n = 1 << 10
 * @bench x: in f32[n]
 *   not a statement
   @bench grid = 4 */
/* @bench block = 128 */ // @bench tune B in [1, 2]
__global__ void block_comments(int n, const float* x) {}
int after; // @bench code ends the block
__global__ void after_code(int n) {}
"#,
        expect![[r#"
            kernel mixed name 6:16 def 6:0-6:57
              param 0 n: Scalar int  `int n`
              param 1 x: Pointer const float  `const float* x`
              param 2 y: Pointer float  `float* y`
              spec 1:0-5:60
                @1 1:9| n = 1   // a trailing note stays in the text|
                @3 3:10| x: in f32[n]|
                @4 4:8| y: out f32[n]|
              unit 6:0-6:57
            kernel blank_breaks name 10:16 def 10:0-10:38
              param 0 n: Scalar int  `int n`
              unit 10:0-10:38
            kernel block_comments name 17:16 def 17:0-17:56
              param 0 n: Scalar int  `int n`
              param 1 x: Pointer const float  `const float* x`
              spec 12:0-16:51
                @12 12:9| n = 1 << 10|
                @13 13:9| x: in f32[n]|
                @15 15:9| grid = 4 |
                @16 16:9| block = 128 |
                @16 16:34| tune B in [1, 2]|
              unit 17:0-17:56
            kernel after_code name 19:16 def 19:0-19:36
              param 0 n: Scalar int  `int n`
              unit 19:0-19:36
        "#]],
    );
}

#[test]
fn triton_decorators_helpers_and_kernels() {
    check(
        Lang::Triton,
        r#"import triton
import triton.language as tl
from triton import jit as tjit

@triton.jit
def leaf(x):
    return x * 2

@triton.jit
def helper(x):
    return leaf(x) + 1

# @bench n = 16
@triton.jit
def called_but_specced(x_ptr, n):
    pass

# @bench n = 1024
# @bench grid = cdiv(n, BLOCK)
@triton.autotune(configs=[triton.Config({'BLOCK': 128})], key=['n'])
@triton.heuristics({'EVEN': lambda a: a['n'] % a['BLOCK'] == 0})
@triton.jit(do_not_specialize=["n"])
def tuned(x_ptr, n: int, scale: "float" = 1.0, BLOCK: tl.constexpr = 128, EVEN: triton.language.constexpr = False):
    y = helper(tl.load(x_ptr))
    called_but_specced(x_ptr, n)

@tjit
def aliased(a, *, B: tl.constexpr):
    tuned(a, 1)

def plain_python(a):
    return helper(a)

@staticmethod
def not_jit(a):
    pass
"#,
        expect![[r#"
            kernel called_but_specced name 14:4 def 13:0-15:8
              param 0 x_ptr: TritonArg  `x_ptr`
              param 1 n: TritonArg  `n`
              spec 12:0-12:15
                @12 12:8| n = 16|
              unit 13:0-15:8
            kernel tuned name 22:4 def 19:0-24:32
              param 0 x_ptr: TritonArg  `x_ptr`
              param 1 n: TritonArg int  `n: int`
              param 2 scale: TritonArg "float"  `scale: "float" = 1.0`
              param 3 BLOCK: Constexpr  `BLOCK: tl.constexpr = 128`
              param 4 EVEN: Constexpr  `EVEN: triton.language.constexpr = False`
              spec 17:0-18:30
                @17 17:8| n = 1024|
                @18 18:8| grid = cdiv(n, BLOCK)|
              callees helper, leaf, called_but_specced
              unit 4:0-6:16 8:0-10:22 13:0-15:8 19:0-24:32
            kernel aliased name 27:4 def 26:0-28:15
              param 0 a: TritonArg  `a`
              param 1 B: Constexpr  `B: tl.constexpr`
              callees tuned, helper, leaf, called_but_specced
              unit 4:0-6:16 8:0-10:22 13:0-15:8 19:0-24:32 26:0-28:15
        "#]],
    );
}

#[test]
fn device_slice_drops_host_parts() {
    let src = r#"#include <torch/extension.h>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cooperative_groups/reduce.h>
#include <cuda/std/cstdint>
#include "common.cuh"
#pragma once
#define BLOCK 256
using namespace std;
using namespace nvcuda;
namespace py = pybind11;
using torch::Tensor;
torch::Tensor forward(torch::Tensor x);
static std::vector<int> cache;
const int kTile = 32;
__constant__ float coeffs[4];
struct Pair { float a, b; };
template <typename T> struct Box { T v; };
template <typename T> T host_tpl(T x) { return x; }
constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ float both(float x) { return x; }
__host__ float host_attr(float x) { return x; }
namespace ops {
int host_in_ns() { return 1; }
__device__ float dev_in_ns(float x) { return x; }
}
extern "C" {
__global__ void k(float* y, int n) { y[0] = both(coeffs[0]) + dev_in_ns(1.f); }
void launch(float* y, int n) { k<<<cdiv(n, BLOCK), BLOCK>>>(y, n); }
}
extern "C" void c_host_proto(int n);
#ifdef WITH_HOST
#include <cstdio>
void debug_print() { printf("é ✓\n"); }
#endif
torch::Tensor forward(torch::Tensor x) {
    k<<<1, 1>>>(x.data_ptr<float>(), x.numel());
    return x;
}
int main() { return 0; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
TORCH_LIBRARY(my_ops, m) {
    m.def("forward", forward);
}
"#;
    expect![[r#"
        ░░░░░░░░ ░░░░░░░░░░░░░░░░░░░
        ░░░░░░░░ ░░░░░░░░
        ░░░░░░░░ ░░░░░░░░░░░░░░░░
        #include <cuda_fp16.h>
        #include <cooperative_groups/reduce.h>
        #include <cuda/std/cstdint>
        #include "common.cuh"
        #pragma once
        #define BLOCK 256
        ░░░░░ ░░░░░░░░░ ░░░░
        using namespace nvcuda;
        ░░░░░░░░░ ░░ ░ ░░░░░░░░░
        ░░░░░ ░░░░░░░░░░░░░░
        ░░░░░░░░░░░░░ ░░░░░░░░░░░░░░░░░░░░░ ░░░
        ░░░░░░ ░░░░░░░░░░░░░░░░ ░░░░░░
        const int kTile = 32;
        __constant__ float coeffs[4];
        struct Pair { float a, b; };
        template <typename T> struct Box { T v; };
        ░░░░░░░░ ░░░░░░░░░ ░░ ░ ░░░░░░░░░░ ░░ ░ ░░░░░░ ░░ ░
        constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
        __host__ __device__ float both(float x) { return x; }
        ░░░░░░░░ ░░░░░ ░░░░░░░░░░░░░░░ ░░ ░ ░░░░░░ ░░ ░
        namespace ops {
        ░░░ ░░░░░░░░░░░░ ░ ░░░░░░ ░░ ░
        __device__ float dev_in_ns(float x) { return x; }
        }
        extern "C" {
        __global__ void k(float* y, int n) { y[0] = both(coeffs[0]) + dev_in_ns(1.f); }
        ░░░░ ░░░░░░░░░░░░░ ░░ ░░░ ░░ ░ ░░░░░░░░░░░ ░░░░░░░ ░░░░░░░░░░░ ░░░ ░
        }
        ░░░░░░ ░░░ ░░░░ ░░░░░░░░░░░░░░░░ ░░░
        #ifdef WITH_HOST
        ░░░░░░░░ ░░░░░░░░
        ░░░░ ░░░░░░░░░░░░░ ░ ░░░░░░░░░░ ░░░░░░░░ ░
        #endif
        ░░░░░░░░░░░░░ ░░░░░░░░░░░░░░░░░░░░░ ░░ ░
            ░░░░░░ ░░░░░░░░░░░░░░░░░░░░░░░░░ ░░░░░░░░░░░
            ░░░░░░ ░░
        ░
        ░░░ ░░░░░░ ░ ░░░░░░ ░░ ░
        ░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░ ░░ ░ ░░░░░░░░░░░░░░░░ ░░░░░░░░░░ ░
        ░░░░░░░░░░░░░░░░░░░░░ ░░ ░
            ░░░░░░░░░░░░░░░░ ░░░░░░░░░
        ░
    "#]]
    .assert_eq(&render_slice(src));
    // The kernel's unit is all device code.
    check(
        Lang::Cuda,
        src,
        expect![[r#"
            kernel k name 28:16 def 28:0-28:79 extern_c
              param 0 y: Pointer float  `float* y`
              param 1 n: Scalar int  `int n`
              callees both, dev_in_ns
              unit 21:0-21:53 25:0-25:49 28:0-28:79
        "#]],
    );
}

#[test]
fn device_slice_drops_host_member_functions() {
    // As the CUDA samples write them: a host comparator class calling a host-only
    // helper, next to a struct whose members device code uses.
    let src = r#"template <class T>
class Comparator {
 public:
  bool compare(const T *ref, T *data, unsigned len) { return compareData(ref, data, len); }
  Comparator() = default;
  int declared_only(int x);
};
struct Vec2 {
  float x, y;
  __host__ __device__ Vec2 operator+(Vec2 o) const { return {x + o.x, y + o.y}; }
  constexpr float dot() const { return x * x + y * y; }
  template <class U> void host_tpl(U u) { puts("host"); }
  void host_only() { printf("%f\n", x); }
};
__global__ void k(Vec2 *v) { v[0] = v[0] + v[1]; }
"#;
    expect![[r#"
        template <class T>
        class Comparator {
         public:
          ░░░░ ░░░░░░░░░░░░░ ░ ░░░░░ ░ ░░░░░░ ░░░░░░░░ ░░░░ ░ ░░░░░░ ░░░░░░░░░░░░░░░░ ░░░░░ ░░░░░ ░
          Comparator() = default;
          int declared_only(int x);
        };
        struct Vec2 {
          float x, y;
          __host__ __device__ Vec2 operator+(Vec2 o) const { return {x + o.x, y + o.y}; }
          constexpr float dot() const { return x * x + y * y; }
          ░░░░░░░░ ░░░░░░ ░░ ░░░░ ░░░░░░░░░░ ░░ ░ ░░░░░░░░░░░░░ ░
          ░░░░ ░░░░░░░░░░░ ░ ░░░░░░░░░░░░░░ ░░░ ░
        };
        __global__ void k(Vec2 *v) { v[0] = v[0] + v[1]; }
    "#]]
    .assert_eq(&render_slice(src));
}

#[test]
fn one_error_region_per_broken_place() {
    check(
        Lang::Cuda,
        r#"__global__ void broken(float* y, int n) {
    int i = blockIdx.x * ;
    if (i < n { y[i] = 0; }
}
__global__ void fine(float* y) { y[0] = 1 }
__global__ void half_typed(
"#,
        expect![[r#"
            kernel broken name 0:16 def 0:0-3:1
              param 0 y: Pointer float  `float* y`
              param 1 n: Scalar int  `int n`
              unit 0:0-3:1
            error 1:23-1:24: syntax error: unexpected `*`
            error 2:4-2:27: syntax error
            error 4:42-4:43: missing `;`
            error 5:0-5:27: syntax error
        "#]],
    );
    check(
        Lang::Triton,
        r#"@triton.jit
def k(x_ptr, n:
    pass
"#,
        expect![[r#"
            error 0:0-1:15: syntax error
        "#]],
    );
}

#[test]
fn error_count_is_capped() {
    let src = "__global__ void k() { int x = ; }\n".repeat(150);
    let tree = parse(Lang::Cuda, &src);
    let model = analyze(Lang::Cuda, &src, &tree);
    assert_eq!(model.syntax_errors.len(), 101);
    expect!["… and 50 more syntax errors"].assert_eq(&model.syntax_errors[100].message);
}

#[test]
fn lookups_and_language_detection() {
    let src = "// @bench n = 1\n__global__ void a(int n) {}\n\n__global__ void b() {}\n";
    let tree = parse(Lang::Cuda, src);
    let model = analyze(Lang::Cuda, src, &tree);
    let at = |o: usize| model.kernel_at(o).map(|k| k.name.as_str());
    assert_eq!(at(3), Some("a"), "inside the spec block");
    assert_eq!(at(src.find("int n").unwrap_or(0)), Some("a"));
    assert_eq!(
        at(src.find("\n\n").unwrap_or(0) + 1),
        None,
        "the blank line between kernels"
    );
    assert_eq!(at(src.len() - 2), Some("b"));
    assert_eq!(model.kernel("b").map(|k| k.params.len()), Some(0));
    assert!(model.kernel("c").is_none());

    let crlf = "// @bench n = 1\r\n/* @bench m = 2\r\n */\r\n__global__ void a(int n) {}\r\n";
    let tree = parse(Lang::Cuda, crlf);
    let texts: Vec<String> = analyze(Lang::Cuda, crlf, &tree).kernels[0]
        .spec
        .lines
        .iter()
        .map(|l| l.text.clone())
        .collect();
    assert_eq!(texts, [" n = 1", " m = 2"]);

    assert_eq!(lang_for("file:///w/k.cu", None), Some(Lang::Cuda));
    assert_eq!(lang_for("/w/include/k.CUH", None), Some(Lang::Cuda));
    assert_eq!(
        lang_for("untitled:Untitled-1", Some("cuda-cpp")),
        Some(Lang::Cuda)
    );
    assert_eq!(lang_for("file:///w/k.txt", Some("cuda")), Some(Lang::Cuda));
    assert_eq!(lang_for("file:///w/add.py", None), Some(Lang::Triton));
    assert_eq!(
        lang_for("file:///w/add", Some("python")),
        Some(Lang::Triton)
    );
    assert_eq!(lang_for("file:///w/k.cpp", Some("cpp")), None);
    assert_eq!(lang_for("file:///w.cu/readme", None), None);

    assert!(is_triton_source(
        "import triton\n@triton.jit\ndef k(x): pass\n"
    ));
    assert!(is_triton_source(
        "from triton import jit\n@jit\ndef k(x): pass\n"
    ));
    assert!(!is_triton_source(
        "import numpy as np\n@jit\ndef k(x): pass\n"
    ));
    assert!(!is_triton_source("def f():\n    return 'triton'\n"));
}

/// Fixtures for the no-panic tests.
const FIXTURES: [(Lang, &str); 3] = [
    (
        Lang::Cuda,
        "#include <vector>\n/* @bench n = 1\n * @bench x: in f32[n] */\ntemplate <int B>\n__global__ void __launch_bounds__(B) k(const float* __restrict__ x, int n) { d(x[0]); }\n__device__ float d(float v) { return d(v); }\nextern \"C\" { __global__ void é(int ü) {} }\nint main() { k<256><<<1, 1>>>(0, 1); }\n",
    ),
    (
        Lang::Triton,
        "import triton\nimport triton.language as tl\n# @bench n = 1\n@triton.autotune(configs=[], key=['n'])\n@triton.jit\ndef k(x_ptr, n, B: tl.constexpr):\n    h(x_ptr)\n\n@triton.jit\ndef h(p):\n    return p # ✓\n",
    ),
    (Lang::Cuda, "__global__ void k(\n"),
];

fn analyze_str(lang: Lang, src: &str) -> FileModel {
    let tree = parse(lang, src);
    let model = analyze(lang, src, &tree);
    if lang == Lang::Cuda {
        assert_eq!(model.device_slice.len(), src.len());
    }
    model
}

#[test]
fn every_prefix_of_the_fixtures_is_analyzed() {
    for (lang, src) in FIXTURES {
        for end in (0..=src.len()).filter(|&i| src.is_char_boundary(i)) {
            analyze_str(lang, &src[..end]);
        }
    }
}

#[test]
fn byte_soup_and_extreme_shapes_do_not_panic() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    const PIECES: [&str; 24] = [
        "__global__",
        "__device__",
        " void ",
        "k",
        "(",
        ")",
        "{",
        "}",
        "*",
        ";",
        "\n",
        "//",
        "@bench",
        "/*",
        "*/",
        "#",
        "@triton.jit\n",
        "def ",
        ":",
        "    ",
        "template<",
        ">",
        "é",
        "\"",
    ];
    for _ in 0..300 {
        let len = (next() % 200) as usize;
        let soup: String = (0..len)
            .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
            .collect();
        analyze_str(Lang::Cuda, &soup);
        analyze_str(Lang::Triton, &soup);
        let bytes: Vec<u8> = (0..len).map(|_| (next() % 256) as u8).collect();
        let lossy = String::from_utf8_lossy(&bytes);
        analyze_str(Lang::Cuda, &lossy);
        analyze_str(Lang::Triton, &lossy);
    }
    analyze_str(Lang::Cuda, "");
    analyze_str(Lang::Triton, "");
    // A stale tree (from other text) gives a wrong model, not a panic.
    for (lang, src) in FIXTURES {
        let tree = parse(lang, src);
        for other in [
            "",
            "é",
            &src[..src.len() / 2],
            "\u{1F600}\u{1F600}\u{1F600}",
        ] {
            analyze(lang, other, &tree);
        }
    }
    let many: Vec<String> = (0..200)
        .map(|i| format!("const float* __restrict__ p{i}"))
        .collect();
    let wide = format!("__global__ void wide({}) {{}}\n", many.join(", "));
    assert_eq!(analyze_str(Lang::Cuda, &wide).kernels[0].params.len(), 200);
    const NEST: usize = 2000;
    let deep = format!(
        "{}__global__ void k() {{ {}{} }}{}",
        "namespace a { ".repeat(NEST),
        "{ ;".repeat(NEST),
        "}".repeat(NEST),
        "}".repeat(NEST)
    );
    assert_eq!(analyze_str(Lang::Cuda, &deep).kernels.len(), 1);
    let deep_expr = format!(
        "__device__ int d() {{ return {}1{}; }}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    analyze_str(Lang::Cuda, &deep_expr);
    let deep_py = format!(
        "@triton.jit\ndef k(x):\n    return {}x{}\n",
        "[".repeat(3000),
        "]".repeat(3000)
    );
    analyze_str(Lang::Triton, &deep_py);
}

/// A CUDA file of about 50 lines per kernel: spec block, kernel, two device helpers,
/// a host launcher.
pub(crate) fn generated_cuda(kernels: usize) -> String {
    let mut s =
        String::from("#include <cuda_fp16.h>\n#include <torch/extension.h>\n#define BLOCK 256\n\n");
    for i in 0..kernels {
        let _ = write!(
            s,
            r#"__device__ __forceinline__ float scale_{i}(float v, float a) {{
    float r = v * a;
    if (r > 1.0f) {{
        r = 1.0f;
    }}
    return r;
}}

__device__ float combine_{i}(float x, float y, float a) {{
    float s = scale_{i}(x, a) + scale_{i}(y, a);
    return s * 0.5f;
}}

// Kernel number {i}.
// Generated for the timing test.
// @bench n = 1 << 20
// @bench x: in f32[n]; y: in f32[n]
// @bench out: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
__global__ void __launch_bounds__(256) kernel_{i}(int n, float a, const float* __restrict__ x,
                                                 const float* __restrict__ y, float* __restrict__ out) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = gridDim.x * blockDim.x;
    for (; i < n; i += stride) {{
        float xv = x[i];
        float yv = y[i];
        float r = combine_{i}(xv, yv, a);
        if (r < 0.0f) {{
            r = -r;
        }}
        out[i] = r;
    }}
    // Tail handled above; nothing else to do.
    __syncthreads();
}}

void launch_{i}(int n, float a, const float* x, const float* y, float* out) {{
    int grid = (n + BLOCK - 1) / BLOCK;
    kernel_{i}<<<grid, BLOCK>>>(n, a, x, y, out);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {{
        printf("launch failed: %s\n", cudaGetErrorString(err));
        return;
    }}
    // Synchronise only in debug builds.
#ifdef DEBUG_SYNC
    cudaDeviceSynchronize();
#endif
}}

"#
        );
    }
    s
}

/// Timing for the per-keystroke budget: `cargo test --release --lib syntax::tests::timing
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing() {
    let src = generated_cuda(200);
    let tree = parse(Lang::Cuda, &src);
    let lines = src.lines().count();
    let model = analyze(Lang::Cuda, &src, &tree);
    assert_eq!(model.kernels.len(), 200);
    assert_eq!(model.kernels[7].callees, vec!["combine_7", "scale_7"]);
    let runs = 50;
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = std::time::Instant::now();
            std::hint::black_box(analyze(Lang::Cuda, &src, &tree));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    // For scale: what merely visiting every node costs (analyze must not).
    let time = |what: &str, f: &dyn Fn()| {
        let t = std::time::Instant::now();
        for _ in 0..10 {
            f();
        }
        println!("  {what}: {:.2} ms", t.elapsed().as_secs_f64() * 1e2);
    };
    time("tree cursor walk, whole tree", &|| {
        let mut c = tree.walk();
        let mut n = 0usize;
        'outer: loop {
            n += 1;
            if c.goto_first_child() || c.goto_next_sibling() {
                continue;
            }
            loop {
                if !c.goto_parent() {
                    break 'outer;
                }
                if c.goto_next_sibling() {
                    break;
                }
            }
        }
        std::hint::black_box(n);
    });
    time("syntax errors", &|| {
        std::hint::black_box(errors::syntax_errors(&src, &tree));
    });
    time("line index", &|| {
        std::hint::black_box(spec_block::LineIndex::new(&src));
    });
    let t = std::time::Instant::now();
    let _ = parse(Lang::Cuda, &src);
    let parse_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "analyze: {lines} lines, {} kernels: median {:.2} ms, min {:.2} ms, max {:.2} ms (full parse {parse_ms:.1} ms)",
        model.kernels.len(),
        times[runs / 2],
        times[0],
        times[runs - 1]
    );
}

/// A byte-order mark, CRLF and old-Mac CR-only line endings are read like LF text (issue
/// #16): the same kernels, the same spec lines on the same line numbers, and the same
/// analysis findings, through `Document` and `analysis::analyze` as `check` and the server
/// both use them.
#[test]
fn bom_crlf_and_cr_only_files_read_like_lf() {
    let cuda = include_str!("../../../examples/reduce_sum.cu");
    // Start the file with a spec line, where a BOM used to hide it.
    read_like_lf(
        Lang::Cuda,
        &cuda[cuda.find("// @bench").unwrap()..],
        "reduce_tree",
    );
    // A CR-only Triton file found no kernel at all (issue #28): the check for
    // `@triton.jit` read it as one line.
    read_like_lf(
        Lang::Triton,
        include_str!("../../../examples/vector_add.py"),
        "add_kernel",
    );
}

fn read_like_lf(lang: Lang, lf: &str, kernel: &str) {
    use crate::analysis::{self, AnalyzeOptions};
    let render = |src: &str| {
        let doc = crate::document::Document::new(lang, 0, src);
        let a = analysis::analyze(lang, src, doc.tree(), &AnalyzeOptions::default());
        let mut out = format!("triton source: {}\n", super::is_triton_source(src));
        for k in &a.model.kernels {
            let lines: Vec<String> = k
                .spec
                .lines
                .iter()
                .map(|l| format!("{}:{}", l.line, l.text.trim()))
                .collect();
            writeln!(out, "{} {:?}", k.name, lines).unwrap();
        }
        for f in &a.findings() {
            writeln!(out, "{:?} {}", f.severity, f.message).unwrap();
        }
        out
    };
    let want = render(lf);
    assert!(want.contains(kernel), "{want}");
    assert!(!want.contains("Error"), "{want}");
    for (what, src) in [
        ("BOM", format!("\u{feff}{lf}")),
        ("CRLF", lf.replace('\n', "\r\n")),
        ("CR only", lf.replace('\n', "\r")),
        (
            "BOM + CR only",
            format!("\u{feff}{}", lf.replace('\n', "\r")),
        ),
    ] {
        assert_eq!(render(&src), want, "{what}");
    }
}

#[test]
fn device_slice_drops_macro_invocations_that_define_host_functions() {
    // As Rust bindings' kernel files write their `extern "C"` launchers.
    let src = r#"template <typename T>
void count_nonzero(const T *d_in, uint32_t n, uint32_t *out) { cub_sum(d_in, n, out); }
#define COUNT_NONZERO_OP(TYPENAME, RUST_NAME)                                  \
  extern "C" uint32_t count_nonzero_##RUST_NAME(                               \
      const TYPENAME *d_in, uint32_t N) {                                      \
    uint32_t result; /* one */                                                 \
    count_nonzero(d_in, N, &result);                                           \
    return result;                                                             \
  }
#define LAUNCH(bits, T, name)                                                  \
  extern "C" void launch_##bits##_##name(const T *x, int n) {                  \
    kern<T, bits><<<cdiv(n, 256), 256>>>(x, n);                                \
  }
#define VEC(T, N) struct T##x##N { T v[N]; };
#define INST(T) template __global__ void kern<T, 4>(const T *, int);
#if __CUDA_ARCH__ >= 800
COUNT_NONZERO_OP(__nv_bfloat16, bf16)
#endif
COUNT_NONZERO_OP(float, f32)
COUNT_NONZERO_OP(int16_t, i16);
LAUNCH(4, float,
       f32)
VEC(float, 4)
INST(float)

__global__ void transform(const uint32_t *t, uint32_t *out) { out[0] = t[0]; }
"#;
    let shown = render_slice(src);
    let lines: Vec<&str> = shown.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let original = src.lines().nth(i).unwrap_or("");
        let blank = *l != original;
        let want_blank = [0, 1, 16, 18, 19, 20, 21].contains(&i);
        assert_eq!(
            blank,
            want_blank,
            "line {}: {original:?} became {l:?}\n{shown}",
            i + 1
        );
    }
}

#[test]
fn autotune_configs_are_read_from_the_decorator_in_the_spellings_authors_use() {
    let src = r#"import triton
import triton.language as tl
from triton import autotune, Config, jit

@triton.autotune(
    configs=[
        triton.Config({'BLOCK_M': 128, "BLOCK_N": 64, 'EVEN': True}, num_warps=8, num_stages=3),
        triton.Config(kwargs={'BLOCK_M': 0x40, 'BLOCK_N': 32}, num_warps=4),
    ],
    key=['M', 'N'],
)
@triton.jit
def keyword_style(a, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr):
    pass

@autotune([Config({"BLOCK": 1_024})], key=["n"])
@jit
def positional_style(x, n, BLOCK: tl.constexpr):
    pass

CONFIGS = [triton.Config({'BLOCK': b}) for b in (128, 256)]

@triton.autotune(configs=CONFIGS, key=['n'])
@triton.jit
def named_list(x, n, BLOCK: tl.constexpr):
    pass

@triton.autotune(configs=[triton.Config({'BLOCK': 128}), triton.Config({'BLOCK': BIG})], key=['n'])
@triton.jit
def a_value_that_is_not_a_number(x, n, BLOCK: "tl.constexpr"):
    pass

@triton.jit
def not_autotuned(x, n, BLOCK: tl.constexpr):
    pass
"#;
    let tree = parse(Lang::Triton, src);
    let model = analyze(Lang::Triton, src, &tree);
    // A string annotation, as torch's test kernels write it, is a constexpr too.
    let quoted = &model.kernels[3].params[2];
    assert_eq!(
        (quoted.name.as_str(), &quoted.kind),
        ("BLOCK", &ParamKind::Constexpr)
    );
    let mut out = String::new();
    for k in &model.kernels {
        match &k.autotune {
            None => {
                let _ = writeln!(out, "{}: not autotuned", k.name);
            }
            Some(a) => {
                let _ = writeln!(
                    out,
                    "{}: decorator {} configs {:?}",
                    k.name,
                    span(src, &a.range),
                    a.configs
                );
            }
        }
    }
    expect![[r#"
        keyword_style: decorator 4:0-10:1 configs [[("BLOCK_M", 128), ("BLOCK_N", 64), ("EVEN", 1), ("num_warps", 8), ("num_stages", 3)], [("BLOCK_M", 64), ("BLOCK_N", 32), ("num_warps", 4)]]
        positional_style: decorator 15:0-15:48 configs [[("BLOCK", 1024)]]
        named_list: decorator 22:0-22:44 configs []
        a_value_that_is_not_a_number: decorator 27:0-27:99 configs []
        not_autotuned: not autotuned
    "#]]
    .assert_eq(&out);
}

#[test]
fn heuristics_names_are_read_from_the_decorator() {
    let src = r#"import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({'BLOCK': 128})], key=['n'])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0, 'HAS_BIAS': lambda a: a['b'] is not None})
@triton.jit
def k(x, b, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, HAS_BIAS: tl.constexpr):
    pass

@triton.heuristics(values=HEURISTICS)
@triton.jit
def named(x, n, EVEN: tl.constexpr):
    pass
"#;
    let tree = parse(Lang::Triton, src);
    let model = analyze(Lang::Triton, src, &tree);
    let got: Vec<(String, Vec<String>)> = model
        .kernels
        .iter()
        .map(|k| (k.name.clone(), k.heuristics.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "k".to_string(),
                vec!["EVEN".to_string(), "HAS_BIAS".to_string()]
            ),
            ("named".to_string(), vec![]),
        ]
    );
}

/// Issue #31: a `.h`/`.hpp` header with kernels or device functions is CUDA when the
/// editor sends it (as C or C++); one with only host code, or device words only in
/// comments and strings, is not.
#[test]
fn headers_with_device_code_are_cuda() {
    use super::lang_for_text;
    let kernel = "#pragma once\ntemplate <int N>\n__global__ void fill(float* x) { x[0] = N; }\n";
    let helper = "struct V { float x; };\nstatic __device__ __forceinline__ V add(V a, V b) { return {a.x + b.x}; }\n";
    for (path, id, text) in [
        ("file:///w/include/fill.h", Some("cpp"), kernel),
        ("file:///w/include/fill.h", Some("c"), kernel),
        ("/w/ops/vec.hpp", None, helper),
        ("file:///w/impl/ops.inl", Some("cpp"), helper),
    ] {
        assert_eq!(
            lang_for_text(path, id, text),
            Some(Lang::Cuda),
            "{path} {id:?}"
        );
    }
    let host = "#include <vector>\nint count(const std::vector<int>& v);\n";
    let commented = "// __global__ kernels live in k.cu\nconst char* s = \"__device__\";\n/* __device__ */ int f();\n";
    let named = "#define MY__device__x 1\nint __device__count = 0;\n";
    for text in [host, commented, named] {
        assert_eq!(
            lang_for_text("file:///w/a.h", Some("cpp"), text),
            None,
            "{text}"
        );
    }
    // Not a header, or another language: the path and id decide as before.
    assert_eq!(lang_for_text("file:///w/a.cpp", Some("cpp"), kernel), None);
    assert_eq!(lang_for_text("file:///w/a.h", Some("rust"), kernel), None);
    assert_eq!(
        lang_for_text("file:///w/a.cu", Some("cpp"), "int x;"),
        Some(Lang::Cuda)
    );
}
