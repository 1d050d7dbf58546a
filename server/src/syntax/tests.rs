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
    let tree = parse(Lang::Cuda, src);
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
