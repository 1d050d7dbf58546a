//! Fixture tests: a fixture is the source text of a file (CUDA or Triton) with @bench
//! comment lines; a tiny signature reader turns it into `Kernel`s the way `syntax` would,
//! and snapshots show what the author sees: `line:col-col severity `text`: message`.

use std::collections::BTreeMap;

use expect_test::{expect, Expect};

use super::*;
use crate::syntax::{Lang, Param, ParamKind, SpecBlock, SpecLine};

/// Reads kernels out of a fixture. CUDA: a line containing `__global__` with the whole
/// signature on it, optionally preceded by `template <int A, int B>`. Triton: a `def` line
/// preceded by `@triton.jit`. The @bench lines since the previous kernel form its spec.
fn kernels(src: &str, lang: Lang) -> Vec<Kernel> {
    let mut out = Vec::new();
    let mut spec: Vec<SpecLine> = Vec::new();
    let mut def_start: Option<usize> = None;
    let mut templates: Vec<String> = Vec::new();
    let mut pos = 0;
    for (i, line) in src.split_inclusive('\n').enumerate() {
        let start = pos;
        pos += line.len();
        let body = line.trim_end_matches('\n');
        let t = body.trim_start();
        if let Some(at) = body.find("@bench") {
            if t.starts_with("//") || t.starts_with('#') {
                let off = at + "@bench".len();
                spec.push(SpecLine {
                    line: i as u32,
                    offset: start + off,
                    text: body[off..].to_string(),
                });
                continue;
            }
        }
        if t.starts_with("template") {
            def_start.get_or_insert(start);
            let inner = &t[t.find('<').unwrap() + 1..t.rfind('>').unwrap()];
            templates = inner
                .split(',')
                .map(|p| p.split_whitespace().last().unwrap().to_string())
                .collect();
            continue;
        }
        if t.starts_with("@triton") {
            def_start.get_or_insert(start);
            continue;
        }
        if !(body.contains("__global__") || t.starts_with("def ")) {
            continue;
        }
        let open = body.find('(').unwrap();
        let close = body.rfind(')').unwrap();
        let name_start = body[..open]
            .trim_end()
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = body[name_start..open].trim_end().to_string();
        let mut params = Vec::new();
        let mut p_off = open + 1;
        for piece in body[open + 1..close].split(',') {
            let lead = piece.len() - piece.trim_start().len();
            let text = piece.trim();
            let range = start + p_off + lead..start + p_off + lead + text.len();
            p_off += piece.len() + 1;
            if text.is_empty() {
                continue;
            }
            let (pname, kind) = match lang {
                Lang::Triton => match text.split_once(':') {
                    Some((n, ann)) if ann.trim() == "tl.constexpr" => {
                        (n.trim(), ParamKind::Constexpr)
                    }
                    Some((n, ann)) => (
                        n.trim(),
                        ParamKind::TritonArg {
                            annotation: Some(ann.trim().to_string()),
                        },
                    ),
                    None => (text, ParamKind::TritonArg { annotation: None }),
                },
                Lang::Cuda => {
                    let pname = text
                        .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap();
                    let words = |s: &str| {
                        s.split_whitespace()
                            .filter(|w| !matches!(*w, "const" | "__restrict__" | "volatile"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    let kind = if text.contains('&') {
                        ParamKind::Other {
                            ty: text[..text.len() - pname.len()].trim().to_string(),
                        }
                    } else if let Some(star) = text.rfind('*') {
                        ParamKind::Pointer {
                            pointee: words(&text[..star]),
                            is_const: text[..star].contains("const"),
                        }
                    } else {
                        ParamKind::Scalar {
                            ty: words(&text[..text.len() - pname.len()]),
                        }
                    };
                    (pname, kind)
                }
            };
            params.push(Param {
                name: pname.to_string(),
                index: params.len(),
                range,
                kind,
                default: None,
            });
        }
        let ds = def_start.take().unwrap_or(start);
        let lines = std::mem::take(&mut spec);
        let range = match (lines.first(), lines.last()) {
            (Some(a), Some(b)) => Some(a.offset..b.offset + b.text.len()),
            _ => None,
        };
        out.push(Kernel {
            name: name.clone(),
            lang,
            name_range: start + name_start..start + name_start + name.len(),
            def_range: ds..start + body.len(),
            params,
            template_params: std::mem::take(&mut templates),
            extern_c: body.contains("extern"),
            spec: SpecBlock { lines, range },
            callees: Vec::new(),
            unit_ranges: Vec::new(),
            autotune: None,
            heuristics: Vec::new(),
            constants: Vec::new(),
        });
    }
    out
}

fn line_col(src: &str, off: usize) -> (usize, usize) {
    let before = &src[..off.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let col = off - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

fn render_diags(src: &str, diags: &[SpecDiagnostic]) -> String {
    let mut s = String::new();
    for d in diags {
        let (l1, c1) = line_col(src, d.range.start);
        let (l2, c2) = line_col(src, d.range.end);
        let end = if l1 == l2 {
            format!("{c2}")
        } else {
            format!("{l2}:{c2}")
        };
        let sev = match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let text = src.get(d.range.clone()).unwrap_or("<bad range>");
        s.push_str(&format!("{l1}:{c1}-{end} {sev} `{text}`: {}\n", d.message));
    }
    s
}

fn render_plan(p: &BenchPlan) -> String {
    let mut s = String::new();
    for (i, c) in p.cases.iter().enumerate() {
        let sizes: Vec<String> = c.sizes.iter().map(|(n, v)| format!("{n}={v}")).collect();
        s.push_str(&format!("case {i}: sizes [{}]\n", sizes.join(" ")));
        for a in c.args.iter().chain(&c.template_args) {
            match a {
                Arg::Buffer {
                    name,
                    role,
                    dtype,
                    shape,
                    elems,
                    bytes,
                    dist,
                } => s.push_str(&format!(
                    "  {name}: {role} {dtype}{shape:?} elems={elems} bytes={bytes} ~ {dist}\n"
                )),
                Arg::Scalar { name, value, ty } => {
                    s.push_str(&format!("  {name} = {value} ({ty:?})\n"))
                }
                Arg::Constexpr { name, value } => {
                    s.push_str(&format!("  {name} = {value} (constexpr)\n"))
                }
                Arg::None { name } => s.push_str(&format!("  {name} = None\n")),
            }
        }
        s.push_str(&format!(
            "  launch {:?}\n  bytes={} flops={:?}\n",
            c.launch, c.bytes, c.flops
        ));
    }
    for t in &p.tunables {
        s.push_str(&format!(
            "tune {} {:?} current={} {:?}\n",
            t.name,
            t.values.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            t.current,
            t.kind
        ));
    }
    if !p.defines.is_empty() {
        s.push_str(&format!("defines {:?}\n", p.defines));
    }
    s.push_str(&format!(
        "atol={:?} rtol={:?} reference={:?} trials={}\n",
        p.atol, p.rtol, p.reference, p.trials
    ));
    if let Some(t) = &p.torch_reference {
        s.push_str(&format!("torch_reference={t:?}\n"));
    }
    s
}

fn run_lang(fixture: &str, lang: Lang, overrides: &BTreeMap<String, Value>) -> String {
    let src = fixture.trim_start_matches('\n');
    render_last(src, &kernels(src, lang), overrides)
}

/// The diagnostics and plan of the last of `ks`, as the fixture tests read them.
fn render_last(src: &str, ks: &[Kernel], overrides: &BTreeMap<String, Value>) -> String {
    let k = ks.last().expect("fixture has a kernel");
    let r = analyze_with(k, ks, &EvalEnv::default(), overrides);
    let mut s = render_diags(src, &r.diagnostics);
    if let Some(p) = &r.plan {
        s.push_str(&render_plan(p));
    }
    s
}

/// Analyzes the LAST kernel of a CUDA fixture.
fn check_cuda(fixture: &str, expect: Expect) {
    expect.assert_eq(&run_lang(fixture, Lang::Cuda, &BTreeMap::new()));
}

fn check_triton(fixture: &str, expect: Expect) {
    expect.assert_eq(&run_lang(fixture, Lang::Triton, &BTreeMap::new()));
}

// ---- docs/spec.md's examples --------------------------------------------------------------------

#[test]
fn spec_example_saxpy() {
    check_cuda(
        r#"
// @bench n = 1 << 24, 4099
// @bench x: in f32[n]
// @bench y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }
"#,
        expect![[r#"
            case 0: sizes []
              n = 16777216 (I32)
              a = 2.5 (F32)
              x: in f32[16777216] elems=16777216 bytes=67108864 ~ uniform(-1.0, 1.0)
              y: inout f32[16777216] elems=16777216 bytes=67108864 ~ normal(0.0, 1.0)
              launch Cuda { grid: [65536, 1, 1], block: [256, 1, 1], smem: 0 }
              bytes=201326592 flops=None
            case 1: sizes []
              n = 4099 (I32)
              a = 2.5 (F32)
              x: in f32[4099] elems=4099 bytes=16396 ~ uniform(-1.0, 1.0)
              y: inout f32[4099] elems=4099 bytes=16396 ~ normal(0.0, 1.0)
              launch Cuda { grid: [17, 1, 1], block: [256, 1, 1], smem: 0 }
              bytes=49188 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn spec_example_add_kernel() {
    check_triton(
        r#"
# @bench n = 1 << 24, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 1024; num_warps = 4
# @bench tune BLOCK in [256, 512, 1024, 2048]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
"#,
        expect![[r#"
            case 0: sizes []
              x_ptr: in f32[16777216] elems=16777216 bytes=67108864 ~ uniform(-1.0, 1.0)
              y_ptr: in f32[16777216] elems=16777216 bytes=67108864 ~ uniform(-1.0, 1.0)
              out_ptr: out f32[16777216] elems=16777216 bytes=67108864 ~ uniform(-1.0, 1.0)
              n = 16777216 (I64)
              BLOCK = 1024 (constexpr)
              launch Triton { grid: [16384], num_warps: Some(4), num_stages: None }
              bytes=201326592 flops=None
            case 1: sizes []
              x_ptr: in f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              y_ptr: in f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              out_ptr: out f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              n = 1000 (I64)
              BLOCK = 1024 (constexpr)
              launch Triton { grid: [1], num_warps: Some(4), num_stages: None }
              bytes=12000 flops=None
            tune BLOCK ["256", "512", "1024", "2048"] current=1024 Constexpr
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn spec_example_with_its_margin_remarks_is_an_error() {
    // docs/spec.md's saxpy block carries explanatory text after the statements; as written in a
    // real file that text is not part of a statement, so it must be reported.
    check_cuda(
        r#"
// @bench n = 1 << 24, 4099            sizes: the first case is timed, every case is verified
// @bench x: in f32[n]                 a buffer: role, element type, shape
// @bench y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5                      a scalar argument (a kernel parameter)
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }
"#,
        expect![[r#"
            1:40-94 error `sizes: the first case is timed, every case is verified`: unexpected `sizes: the first case is timed, every ca…` after the statement; separate statements with `;` and put remarks on a comment line without @bench
            2:40-75 error `a buffer: role, element type, shape`: unexpected `a buffer: role, element type, shape` after the statement; separate statements with `;` and put remarks on a comment line without @bench
            4:40-78 error `a scalar argument (a kernel parameter)`: unexpected `a scalar argument (a kernel parameter)` after the statement; separate statements with `;` and put remarks on a comment line without @bench
        "#]],
    );
}

// ---- Statements and expressions ------------------------------------------------------------

const SAXPY: &str =
    r#"extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }"#;

/// A saxpy fixture whose spec is `spec` (lines without the `// @bench` prefix).
fn saxpy(spec: &str) -> String {
    let mut s = String::new();
    for l in spec.lines() {
        s.push_str(&format!("// @bench {l}\n"));
    }
    s.push_str(SAXPY);
    s.push('\n');
    s
}

#[test]
fn multi_statement_lines_in_any_order_and_blank_statements() {
    check_cuda(
        &saxpy("grid = cdiv(n, B); block = B; B = 128;; n = m * 2; m = 0x100\nx: in f32[n]; y: out f32[n]; a = -2 ** 2;"),
        expect![[r#"
            case 0: sizes [B=128 m=256]
              n = 512 (I32)
              a = -4.0 (F32)
              x: in f32[512] elems=512 bytes=2048 ~ uniform(-1.0, 1.0)
              y: out f32[512] elems=512 bytes=2048 ~ uniform(-1.0, 1.0)
              launch Cuda { grid: [4, 1, 1], block: [128, 1, 1], smem: 0 }
              bytes=4096 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn expression_precedence_and_functions() {
    check_cuda(
        &saxpy("n = 2 + 3 * 4 << 1, -2 ** 2 + 100, 7 % 3 + max(1, 2, 9) * min(4_096, 5) + next_pow2(1000) - cdiv(-7, 2)\nx: in f32[n]; y: out f32[n]; a = 1e-3\ngrid = 1; block = 32"),
        expect![[r#"
            case 0: sizes []
              n = 28 (I32)
              a = 0.001 (F32)
              x: in f32[28] elems=28 bytes=112 ~ uniform(-1.0, 1.0)
              y: out f32[28] elems=28 bytes=112 ~ uniform(-1.0, 1.0)
              launch Cuda { grid: [1, 1, 1], block: [32, 1, 1], smem: 0 }
              bytes=224 flops=None
            case 1: sizes []
              n = 96 (I32)
              a = 0.001 (F32)
              x: in f32[96] elems=96 bytes=384 ~ uniform(-1.0, 1.0)
              y: out f32[96] elems=96 bytes=384 ~ uniform(-1.0, 1.0)
              launch Cuda { grid: [1, 1, 1], block: [32, 1, 1], smem: 0 }
              bytes=768 flops=None
            case 2: sizes []
              n = 1073 (I32)
              a = 0.001 (F32)
              x: in f32[1073] elems=1073 bytes=4292 ~ uniform(-1.0, 1.0)
              y: out f32[1073] elems=1073 bytes=4292 ~ uniform(-1.0, 1.0)
              launch Cuda { grid: [1, 1, 1], block: [32, 1, 1], smem: 0 }
              bytes=8584 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn trailing_garbage_and_bad_tokens() {
    check_cuda(
        &saxpy("n = 1024 x: in f32[n]\nblock = 256 × 2\ngrid = cdiv(n, 256) )\na = 2.5f\ny: out f32[n]"),
        expect![[r#"
            1:20-32 error `x: in f32[n]`: unexpected `x: in f32[n]` after the statement; separate statements with `;` and put remarks on a comment line without @bench
            2:23-27 error `× 2`: unexpected `× 2` after the statement; separate statements with `;` and put remarks on a comment line without @bench
            3:31-32 error `)`: unexpected `)` after the statement; separate statements with `;` and put remarks on a comment line without @bench
            4:15-19 error `2.5f`: `2.5f` is not a number here; write it without the C suffix: `2.5`
            6:50-64 error `const float* x`: parameter `x` has no value in the @bench spec; add a line like `// @bench x: in f32[n]`
        "#]],
    );
}

#[test]
fn syntax_errors_say_what_to_write() {
    check_cuda(
        &saxpy("n = \nx in f32[n]\ny: output f32[n]\na = n // 2\ngrid = ceil(n); block = (256,\ntune B [1, 2]\n42\nk = 99999999999999999999"),
        expect![[r#"
            1:13-14 error `=`: expected an expression, but the statement ends here
            2:13-15 error `in`: missing `:` after `x`; write `x: in ...`
            3:14-20 error `output`: `output` is not a role; use in, out or inout; did you mean `out`?
            4:17-19 error `//`: `//` is not an operator here: `/` already divides integers exactly (an error if it does not); use cdiv(a, b) to round up
            5:18-22 error `ceil`: `ceil` is not a function; use cdiv, min, max or next_pow2
            5:39-40 error `,`: expected an expression, but the statement ends here
            6:18-19 error `[`: expected `in` after `tune B`; write `tune B in [256, 512, 1024]`
            7:11-13 error `42`: expected a statement (`NAME = ...`, `NAME: in f32[n]` or `tune NAME in [...]`), found `42`
            8:15-35 error `99999999999999999999`: `99999999999999999999` does not fit in a 64-bit signed integer (the largest is 9223372036854775807)
            9:50-64 error `const float* x`: parameter `x` has no value in the @bench spec; add a line like `// @bench x: in f32[n]`
        "#]],
    );
}

#[test]
fn bad_element_type_with_suggestion() {
    check_cuda(
        &saxpy("n = 1024; a = 1.0\nx: in f33[n]\ny: inout float[n]\ngrid = 4; block = 256"),
        expect![[r#"
            2:17-20 error `f33`: `f33` is not an element type; use one of f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool; did you mean `f32`?
            3:20-25 error `float`: `float` is not an element type; use one of f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool; did you mean `f32`?
        "#]],
    );
}

#[test]
fn undefined_names_with_suggestions() {
    check_cuda(&saxpy("n = 1024; a = 1.0\nx: in f32[m]\ny: inout f32[nn + 1]\ngrid = cdiv(n, blk); block = 256"), expect![[r#"
        2:21-22 error `m`: `m` is not defined; define it with `// @bench m = ...`; did you mean `n`?
        3:24-26 error `nn`: `nn` is not defined; define it with `// @bench nn = ...`; did you mean `n`?
        4:26-29 error `blk`: `blk` is not defined; define it with `// @bench blk = ...`
    "#]]);
}

#[test]
fn cycles_are_named() {
    check_cuda(&saxpy("n = m + 1; m = k * 2; k = n; a = 1.0\nx: in f32[n]; y: inout f32[n]\ngrid = g; g = g + 1; block = 256"), expect![[r#"
        1:11-12 error `n`: `n` depends on itself: n → m → k → n; give one of them a value directly
        3:21-22 error `g`: `g` is defined in terms of itself; give `g` a value that does not use it
    "#]]);
}

#[test]
fn builtins_cannot_be_redefined_but_can_be_used() {
    check_cuda(&saxpy("sms = 4; warp = 64\nn = sms * warp; a = 1.0\nx: in f32[n]; y: inout f32[n]\ngrid = sms; block = warp"), expect![[r#"
        1:11-14 error `sms`: `sms` is built in (the device's multiprocessor count) and cannot be redefined; pick another name
        1:20-24 error `warp`: `warp` is built in (32, the warp size) and cannot be redefined; pick another name
    "#]]);
}

#[test]
fn inexact_division_names_the_values() {
    check_cuda(&saxpy("n = 1 << 20, 4099; a = 1.0\nx: in f32[n]; y: inout f32[n / 3]\ngrid = n / 256; block = 256"), expect![[r#"
        2:38-43 error `n / 3`: `n / 3` does not divide evenly (n = 1048576); use cdiv(n, 3) or make n a multiple of 3
        3:18-25 error `n / 256`: `n / 256` does not divide evenly (n = 4099); use cdiv(n, 256) or make n a multiple of 256
    "#]]);
}

#[test]
fn division_by_zero_overflow_and_bad_sizes() {
    check_cuda(
        &saxpy("n = 4, 0; z = n - n; a = 1.0\nx: in f32[n]; y: inout f32[8 / z]\nbig = 1 << 63; huge = 9223372036854775807 + 1; p = 2 ** 64; s = 1 >> 64\ngrid = big + huge + p + s; block = 256"),
        expect![[r#"
            2:21-22 error `n`: shape dimension `n` is 0; sizes must be positive
            2:42-43 error `z`: division by zero: `z` is 0
            3:17-24 error `1 << 63`: `1 << 63` overflows a 64-bit integer
            3:33-56 error `9223372036854775807 + 1`: `9223372036854775807 + 1` overflows a 64-bit integer
            3:62-69 error `2 ** 64`: `2 ** 64` overflows a 64-bit integer
            3:80-82 error `64`: shift amount `64` is 64; it must be between 0 and 63
        "#]],
    );
}

#[test]
fn case_lists_must_have_equal_lengths() {
    check_cuda(&saxpy("n = 1, 2, 3; m = 4, 5; a = 1.0, 2.0, 3.0\nx: in f32[n]; y: inout f32[m]\ngrid = 1; block = 256"), expect![[r#"
        1:28-32 error `4, 5`: `m` has 2 values but `n` has 3; give 1 value (used in every case) or 3
    "#]]);
}

#[test]
fn broadcast_values_and_derived_per_case() {
    check_cuda(&saxpy("n = 1024, 2048, 33; a = 0.5\nx: in f32[n]; y: inout f32[n]\ngrid = cdiv(n, 256); block = 256\nflops = 2 * n; bytes = 12 * n"), expect![[r#"
        case 0: sizes []
          n = 1024 (I32)
          a = 0.5 (F32)
          x: in f32[1024] elems=1024 bytes=4096 ~ uniform(-1.0, 1.0)
          y: inout f32[1024] elems=1024 bytes=4096 ~ uniform(-1.0, 1.0)
          launch Cuda { grid: [4, 1, 1], block: [256, 1, 1], smem: 0 }
          bytes=12288 flops=Some(2048.0)
        case 1: sizes []
          n = 2048 (I32)
          a = 0.5 (F32)
          x: in f32[2048] elems=2048 bytes=8192 ~ uniform(-1.0, 1.0)
          y: inout f32[2048] elems=2048 bytes=8192 ~ uniform(-1.0, 1.0)
          launch Cuda { grid: [8, 1, 1], block: [256, 1, 1], smem: 0 }
          bytes=24576 flops=Some(4096.0)
        case 2: sizes []
          n = 33 (I32)
          a = 0.5 (F32)
          x: in f32[33] elems=33 bytes=132 ~ uniform(-1.0, 1.0)
          y: inout f32[33] elems=33 bytes=132 ~ uniform(-1.0, 1.0)
          launch Cuda { grid: [1, 1, 1], block: [256, 1, 1], smem: 0 }
          bytes=396 flops=Some(66.0)
        atol=None rtol=None reference=None trials=3
    "#]]);
}

#[test]
fn buffer_above_4_gib() {
    check_cuda(&saxpy("n = 1 << 30, 1 << 31; a = 1.0\nx: in f32[n]; y: inout f32[n, 3]\ngrid = 1; block = 256"), expect![[r#"
        1:24-31 error `1 << 31`: `n` is `int`, but 2147483648 does not fit (the range is -2147483648..=2147483647)
        2:20-23 error `[n]`: `x` is 8.0 GiB (2147483648 elements of f32) in case 1; a buffer may be at most 4 GiB
        2:37-43 error `[n, 3]`: `y` is 12.0 GiB (3221225472 elements of f32) in case 0; a buffer may be at most 4 GiB
    "#]]);
}

#[test]
fn negative_and_zero_shapes_and_launch() {
    check_cuda(&saxpy("n = 16, -4; a = 1.0\nx: in f32[n]; y: inout f32[n - 16 + 1]\ngrid = (n, 0); block = (32, 64)"), expect![[r#"
        2:21-22 error `n`: shape dimension `n` is -4; sizes must be positive
        2:38-48 error `n - 16 + 1`: shape dimension `n - 16 + 1` is -19 (n = -4); sizes must be positive
        3:19-20 error `n`: `grid` dimension `n` is -4; launch dimensions must be positive integers
        3:22-23 error `0`: `grid` dimension `0` is 0; launch dimensions must be positive integers
        3:34-42 error `(32, 64)`: `block` is (32, 64, 1) = 2048 threads; CUDA allows at most 1024 per block (and z <= 64)
    "#]]);
}

#[test]
fn nesting_limit_and_long_lines_do_not_panic() {
    let deep = format!("n = {}1{}", "(".repeat(500), ")".repeat(500));
    let long = format!("m = {}", vec!["1"; 5000].join(" + "));
    let unary = format!("k = {}1", "-".repeat(300));
    let r = run_lang(
        &saxpy(&format!("{deep}\n{long}\n{unary}")),
        Lang::Cuda,
        &BTreeMap::new(),
    );
    let firsts: Vec<&str> = r
        .lines()
        .map(|l| l.split(": ").nth(1).unwrap_or(""))
        .collect();
    expect![[r#"
        [
            "the spec has no `grid`; add `// @bench grid = cdiv(n, 256)`",
            "expression is nested too deeply (over 64 levels); split it into named size variables",
            "expression is too long (over 256 levels of operations); split it into named size variables",
            "expression is nested too deeply (over 64 levels); split it into named size variables",
            "parameter `a` has no value in the @bench spec; add a line like `// @bench a = ...`",
            "parameter `x` has no value in the @bench spec; add a line like `// @bench x",
            "parameter `y` has no value in the @bench spec; add a line like `// @bench y",
        ]
    "#]].assert_debug_eq(&firsts);
}

// ---- Against the signature -----------------------------------------------------------------

#[test]
fn missing_parameters_block_and_grid() {
    check_cuda(
        &saxpy("n = 1024\nx: in f32[n]"),
        expect![[r#"
        1:11-19 error `n = 1024`: the spec has no `grid`; add `// @bench grid = cdiv(n, 256)`
        3:41-48 error `float a`: parameter `a` has no value in the @bench spec; add a line like `// @bench a = ...`
        3:66-74 error `float* y`: parameter `y` has no value in the @bench spec; add a line like `// @bench y: out f32[n]`
    "#]],
    );
}

#[test]
fn wrong_kinds_for_parameters() {
    check_cuda(
        &saxpy("n: in i32[4]; a = 1.0\nx = 3; y: inout f32[8]\nz: in f32[8]\ngrid = 1; block = 32"),
        expect![[r#"
            1:11-12 error `n`: `n` is `int`, a scalar, not a pointer; give it a value: `n = ...`
            2:11-12 error `x`: `x` is a pointer (`float*`); describe it as a buffer: `x: in f32[n]`
            3:11-12 error `z`: `z` is not a parameter of `saxpy`; a buffer line describes a pointer parameter; did you mean `n`?
        "#]],
    );
}

#[test]
fn pointer_types_against_element_types() {
    check_cuda(
        r#"
// @bench n = 1024, 1030
// @bench a: in i32[n]; b: in f16[n]; c: inout bf16[n]; d: in u8[n]; e: in i64[n]; f: out f32[n]; g: in i32[n]; h: in u32[n]
// @bench grid = 1; block = 1
__global__ void k(int n, const int* a, const __half* __restrict__ b, __nv_bfloat16* c, const uint8_t* d, const long long* e, float* f, const float* g, unsigned int* h) { }
"#,
        expect![[r#"
            2:105-108 error `i32`: `g` is `float*` in the signature but the spec says i32; write f32
        "#]],
    );
}

#[test]
fn vector_types_need_divisible_counts() {
    check_cuda(
        r#"
// @bench n = 4096, 4098
// @bench x: in f32[n]; y: out f32[n]; h: in f16[n]
// @bench grid = 1; block = 1
__global__ void vec(int n, const float4* x, float2* y, const __half2* h) { }
"#,
        expect![[r#"
            2:20-23 error `[n]`: `x` is `float4*`, so its element count must be a multiple of 4, but it is 4098 in case 1
        "#]],
    );
}

#[test]
fn scalar_values_must_fit_the_c_type() {
    check_cuda(
        r#"
// @bench n = 1 << 32; u = -1; f = 7; b = 2; h = 0.5; s = 2.5
// @bench grid = 1; block = 1
__global__ void scalars(int n, unsigned u, double f, bool b, __half h, size_t s) { }
"#,
        expect![[r#"
            1:15-22 error `1 << 32`: `n` is `int`, but 4294967296 does not fit (the range is -2147483648..=2147483647)
            1:28-30 error `-1`: `u` is `unsigned`, but -1 does not fit (the range is 0..=4294967295)
            1:43-44 error `2`: `b` is `bool`, but 2 does not fit (the range is 0..=1)
            1:59-62 error `2.5`: `s` is `size_t`, but 2.5 is not an integer
        "#]],
    );
}

#[test]
fn unsupported_parameter_types() {
    check_cuda(
        r#"
// @bench grid = 1; block = 1; q = 1
__global__ void odd(Params& p, my_t q, const uint64_t* r) { }
"#,
        expect![[r#"
            2:21-30 error `Params& p`: parameter `p` has type `Params&`, which @bench cannot pass; only pointers and plain numbers can be benchmarked
            2:32-38 error `my_t q`: parameter `q` has type `my_t`, which @bench cannot pass yet; pass a pointer or a plain C number type
            2:40-57 error `const uint64_t* r`: parameter `r` is `uint64_t*`, which matches no @bench element type (f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool); this kernel cannot be benchmarked as written
        "#]],
    );
}

#[test]
fn template_params_and_define_tunables() {
    check_cuda(
        r#"
// @bench n = 1 << 20; a = 1.0
// @bench x: in f32[n]; y: inout f32[n]
// @bench tune BLOCK in [128, 256, 512]; BLOCK = 256
// @bench tune UNROLL in [1, 2, 4]
// @bench grid = cdiv(n, BLOCK * UNROLL); block = BLOCK
template <int BLOCK, int ITEMS>
__global__ void saxpy_t(int n, float a, const float* x, float* y) { }
"#,
        expect![[r#"
            7:17-24 error `saxpy_t`: template parameter `ITEMS` has no value in the @bench spec; add `// @bench ITEMS = 256` or `// @bench tune ITEMS in [...]`
        "#]],
    );
}

#[test]
fn template_params_with_values_and_tunable_overrides() {
    let src = r#"
// @bench n = 1 << 20; a = 1.0; ITEMS = 4
// @bench x: in f32[n]; y: inout f32[n]
// @bench tune BLOCK in [128, 256, 512]
// @bench tune UNROLL in [1, 2, 4]
// @bench grid = cdiv(n, BLOCK * UNROLL * ITEMS); block = BLOCK
template <int BLOCK, int ITEMS>
__global__ void saxpy_t(int n, float a, const float* x, float* y) { }
"#;
    let overrides = BTreeMap::from([
        ("BLOCK".to_string(), Value::Int(512)),
        ("UNROLL".to_string(), Value::Int(2)),
    ]);
    expect![[r#"
        case 0: sizes [UNROLL=2]
          n = 1048576 (I32)
          a = 1.0 (F32)
          x: in f32[1048576] elems=1048576 bytes=4194304 ~ uniform(-1.0, 1.0)
          y: inout f32[1048576] elems=1048576 bytes=4194304 ~ uniform(-1.0, 1.0)
          BLOCK = 512 (constexpr)
          ITEMS = 4 (constexpr)
          launch Cuda { grid: [256, 1, 1], block: [512, 1, 1], smem: 0 }
          bytes=12582912 flops=None
        tune BLOCK ["128", "256", "512"] current=512 TemplateParam
        tune UNROLL ["1", "2", "4"] current=2 Define
        defines [("UNROLL", "2")]
        atol=None rtol=None reference=None trials=3
    "#]]
    .assert_eq(&run_lang(src, Lang::Cuda, &overrides));
    let bad = BTreeMap::from([("NOPE".to_string(), Value::Int(1))]);
    expect![[r#"
        1:11-42 error `n = 1 << 20; a = 1.0; ITEMS = 4`: override `NOPE` does not name a size variable, tunable or scalar parameter of `saxpy_t`
    "#]].assert_eq(&run_lang(src, Lang::Cuda, &bad));
}

#[test]
fn bad_tunables_cuda() {
    check_cuda(
        &saxpy("n = 1024; a = 1.0\nx: in f32[n]; y: inout f32[n]\ngrid = 4; block = 256\ntune n in [1, 2]; tune num_warps in [4]; tune T in [n, 2]; tune B in []\ntune U in [1]; tune U in [2]; tune block in [1]; V = 1, 2; tune V in [1]"),
        expect![[r#"
            4:16-17 error `n`: `n` is a runtime parameter of `saxpy`; tune compile-time values: a template parameter or a `-D` macro name
            4:34-43 error `num_warps`: `num_warps` cannot be tuned directly; tune a name and use it: `tune BLOCK in [128, 256]; block = BLOCK`
            4:63-64 error `n`: tune values must be constants (numbers, `sms`, `warp`); `n` is not
            4:80-82 error `[]`: `tune B` lists no values; write e.g. `tune B in [256, 512, 1024]`
            5:31-32 error `U`: `U` is already tuned on line 5; merge the lists
            5:46-51 error `block`: `block` cannot be tuned directly; tune a name and use it: `tune BLOCK in [128, 256]; block = BLOCK`
            5:64-68 error `1, 2`: `V` is tuned, so it takes one value for all cases; list alternatives in `tune V in [...]`
        "#]],
    );
}

#[test]
fn triton_tunes_num_warps_and_stages() {
    check_triton(
        r#"
# @bench n = 1 << 20; x_ptr: in f16[n]; out_ptr: out f16[n]
# @bench tune BLOCK in [256, 512]; tune num_warps in [2, 4, 8]; tune num_stages in [1, 2]
# @bench grid = cdiv(n, BLOCK); num_warps = 8
@triton.jit
def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
"#,
        expect![[r#"
            case 0: sizes []
              x_ptr: in f16[1048576] elems=1048576 bytes=2097152 ~ uniform(-1.0, 1.0)
              out_ptr: out f16[1048576] elems=1048576 bytes=2097152 ~ uniform(-1.0, 1.0)
              n = 1048576 (I64)
              BLOCK = 256 (constexpr)
              launch Triton { grid: [4096], num_warps: Some(8), num_stages: Some(1) }
              bytes=4194304 flops=None
            tune BLOCK ["256", "512"] current=256 Constexpr
            tune num_warps ["2", "4", "8"] current=8 NumWarps
            tune num_stages ["1", "2"] current=1 NumStages
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn triton_errors() {
    check_triton(
        r#"
# @bench n = 1000; x_ptr: in f32[n]; eps = 1e-5
# @bench tune BLOK in [1]; tune n in [1]; block = 128; smem = 0; num_warps = 3
# @bench grid = (cdiv(n, 64), 2, 1, 1)
@triton.jit
def norm(x_ptr, out_ptr, n, eps, BLOCK: tl.constexpr, flag: int):
"#,
        expect![[r#"
            2:15-19 error `BLOK`: `BLOK` cannot be tuned: a Triton tunable is a tl.constexpr parameter of `norm`, num_warps or num_stages; did you mean `BLOCK`?
            2:33-34 error `n`: `n` cannot be tuned: a Triton tunable is a tl.constexpr parameter of `norm`, num_warps or num_stages
            2:43-48 error `block`: `block` is a CUDA launch setting; a Triton kernel takes `num_warps = ...`
            2:56-60 error `smem`: `smem` is a CUDA launch setting; Triton sizes shared memory itself
            2:78-79 error `3`: `num_warps` is 3; it must be a power of two from 1 to 64
            3:17-39 error `(cdiv(n, 64), 2, 1, 1)`: `grid` has at most 3 dimensions (x, y, z), but 4 are given
            5:17-24 error `out_ptr`: parameter `out_ptr` has no value in the @bench spec; add a line like `# @bench out_ptr: out f32[n]`
            5:34-53 error `BLOCK: tl.constexpr`: parameter `BLOCK` has no value in the @bench spec; add `# @bench BLOCK = 1024` or `# @bench tune BLOCK in [...]`
            5:55-64 error `flag: int`: parameter `flag` has no value in the @bench spec; add `# @bench flag = ...` for a number or `# @bench flag: in f32[n]` for a tensor
        "#]],
    );
}

#[test]
fn triton_scalars_are_int_or_float_by_value() {
    check_triton(
        r#"
# @bench n = 64; x_ptr: inout f32[n, n]; scale = 2; eps = 1e-5; BLOCK = next_pow2(n)
# @bench grid = (n, cdiv(n, BLOCK)); num_stages = 3
@triton.jit
def k(x_ptr, n: int, scale: float, eps, BLOCK: tl.constexpr):
"#,
        expect![[r#"
            case 0: sizes []
              x_ptr: inout f32[64, 64] elems=4096 bytes=16384 ~ uniform(-1.0, 1.0)
              n = 64 (I64)
              scale = 2.0 (F64)
              eps = 1e-5 (F64)
              BLOCK = 64 (constexpr)
              launch Triton { grid: [64, 1], num_warps: None, num_stages: Some(3) }
              bytes=32768 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn distributions() {
    check_cuda(
        r#"
// @bench n = 100; a: in f32[n] ~ uniform(0, 1); b: in f32[n] ~ normal(1, 0.5); i: in i32[n] ~ randint(0, n)
// @bench c: in bool[n]; d: in u8[n] ~ arange; e: in f64[n] ~ zeros; f: in i64[n] ~ ones; g: out f32[n] ~ ones
// @bench grid = 1; block = 1
__global__ void dists(const float* a, const float* b, const int* i, const bool* c, const uint8_t* d, const double* e, const long long* f, float* g) { }
"#,
        expect![[r#"
            2:107-111 warning `ones`: `g` is `out`, so it is poisoned before every launch and `~ ones` is unused; write `inout` if the kernel reads it
            case 0: sizes [n=100]
              a: in f32[100] elems=100 bytes=400 ~ uniform(0.0, 1.0)
              b: in f32[100] elems=100 bytes=400 ~ normal(1.0, 0.5)
              i: in i32[100] elems=100 bytes=400 ~ randint(0, 100)
              c: in bool[100] elems=100 bytes=100 ~ randint(0, 2)
              d: in u8[100] elems=100 bytes=100 ~ arange
              e: in f64[100] elems=100 bytes=800 ~ zeros
              f: in i64[100] elems=100 bytes=800 ~ ones
              g: out f32[100] elems=100 bytes=400 ~ ones
              launch Cuda { grid: [1, 1, 1], block: [1, 1, 1], smem: 0 }
              bytes=3400 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn distribution_errors() {
    check_cuda(
        r#"
// @bench n = 100; a: in f32[n] ~ gaussian(0, 1); b: in f32[n] ~ normal(1); i: in i32[n] ~ uniform(0, n)
// @bench c: in bool[n] ~ arange; d: in u8[n] ~ randint(0, 1000); e: in f64[n] ~ zeros(1); f: in i64[n] ~ randint(5, 5)
// @bench g: in f32[n] ~ normal(0, -1); h: in f32[n] ~ uniform(2, 1); j: in f32[n] ~
// @bench grid = 1; block = 1
__global__ void dists(const float* a, const float* b, const int* i, const bool* c, const uint8_t* d, const double* e, const long long* f, const float* g, const float* h, const float* j) { }
"#,
        expect![[r#"
            1:35-43 error `gaussian`: `gaussian` is not a distribution; use uniform(lo, hi), normal(mean, std), randint(lo, hi), zeros, ones or arange
            1:66-75 error `normal(1)`: `normal` takes 2 arguments: `normal(mean, std)`
            1:92-99 error `uniform`: `uniform` gives fractional values, but `i` is i32; use randint(lo, hi), zeros, ones or arange
            2:27-33 error `arange`: `arange` does not fit bool; use randint(0, 2), zeros or ones for `c`
            2:49-65 error `randint(0, 1000)`: `randint(0, 1000)` gives values outside what u8 holds (0..=255)
            2:82-90 error `zeros(1)`: `zeros` takes no arguments; write `~ zeros`
            2:107-120 error `randint(5, 5)`: `randint(5, 5)` is half-open, so hi must be greater than lo (lo is 5, hi is 5)
            3:36-38 error `-1`: the standard deviation in `normal(0, -1)` is -1; it must be zero or more
            3:56-69 error `uniform(2, 1)`: `uniform(2, 1)` needs lo <= hi, but lo is 2 and hi is 1
            3:84-85 error `~`: expected a distribution after `~`; use uniform(lo, hi), normal(mean, std), randint(lo, hi), zeros, ones or arange
        "#]],
    );
}

#[test]
fn settings_tolerance_reference_trials() {
    let src = r#"
// @bench n = 1024; a = 1.0; x: in f32[n]; y: inout f32[n]; grid = 4; block = 256
__global__ void naive(int n, float a, const float* x, float* y) { }
// @bench n = 1024; a = 1.0; x: in f32[n]; y: inout f32[n]; grid = 4; block = 256
// @bench atol = 1e-3; trials = 5; reference = naive; smem = 48 * 1024
__global__ void fast(int n, float a, const float* __restrict__ x, float* __restrict__ y) { }
"#;
    let src = src.trim_start_matches('\n');
    let ks = kernels(src, Lang::Cuda);
    let r = analyze(&ks[1], &ks, &EvalEnv::default());
    let plan = r.plan.expect("plan");
    assert!(r.diagnostics.is_empty());
    assert_eq!(plan.tolerance(DType::F32), (1e-3, 1e-4));
    assert_eq!(plan.tolerance(DType::F16), (1e-3, 1e-2));
    assert_eq!(plan.tolerance(DType::I32), (1e-3, 0.0));
    expect![[r#"
        case 0: sizes []
          n = 1024 (I32)
          a = 1.0 (F32)
          x: in f32[1024] elems=1024 bytes=4096 ~ uniform(-1.0, 1.0)
          y: inout f32[1024] elems=1024 bytes=4096 ~ uniform(-1.0, 1.0)
          launch Cuda { grid: [4, 1, 1], block: [256, 1, 1], smem: 49152 }
          bytes=12288 flops=None
        atol=Some(0.001) rtol=None reference=Some("naive") trials=5
    "#]]
    .assert_eq(&render_plan(&plan));
    expect![[r#"
        **@bench `fast`**: 1 case (case 0 is timed), 5 trials per case

        | case | n | a |
        |---|---|---|
        | 0 (timed) | 1024 | 1.0 |

        | buffer (case 0) | role | dtype | shape | bytes | init |
        |---|---|---|---|---|---|
        | `x` | in | f32 | [1024] | 4.0 KiB | uniform(-1.0, 1.0) |
        | `y` | inout | f32 | [1024] | 4.0 KiB | uniform(-1.0, 1.0) |

        **Launch** (case 0): grid (4, 1, 1) × block (256, 1, 1), 48.0 KiB dynamic shared memory

        **Moves** (case 0): 12.0 KiB

        **Tolerance**: f32 atol 0.001 rtol 0.0001

        **Reference**: kernel `naive`
    "#]]
    .assert_eq(&plan.hover_markdown());
}

#[test]
fn default_tolerances() {
    let plan = BenchPlan {
        kernel: "k".into(),
        lang: Lang::Cuda,
        cases: Vec::new(),
        tunables: Vec::new(),
        defines: Vec::new(),
        atol: None,
        rtol: None,
        reference: None,
        torch_reference: None,
        trials: 3,
    };
    let all: Vec<String> = DType::ALL
        .iter()
        .map(|d| format!("{d} {:?}", plan.tolerance(*d)))
        .collect();
    expect![[r#"
        [
            "f16 (0.01, 0.01)",
            "bf16 (0.01, 0.01)",
            "f32 (1e-5, 0.0001)",
            "f64 (1e-9, 1e-9)",
            "i8 (0.0, 0.0)",
            "i16 (0.0, 0.0)",
            "i32 (0.0, 0.0)",
            "i64 (0.0, 0.0)",
            "u8 (0.0, 0.0)",
            "u32 (0.0, 0.0)",
            "bool (0.0, 0.0)",
        ]
    "#]]
    .assert_debug_eq(&all);
}

#[test]
fn reference_errors() {
    check_cuda(
        r#"
// @bench n = 4; grid = 1; block = 1
__global__ void other(int n, const float* x) { }
// @bench n = 4; grid = 1; block = 1; a = 1; x: in f32[n]; y: out f32[n]
__global__ void naiv(int n, float a, const double* x, float* y) { }
// @bench n = 4; grid = 1; block = 1; a = 1; x: in f32[n]; y: out f32[n]; reference = naive
// @bench atol = -1; rtol = 1, 2; trials = 0
__global__ void saxpy(int n, float a, const float* x, float* y) { }
"#,
        expect![[r#"
            5:87-92 error `naive`: `naive` is not a kernel in this file; kernels here: other, naiv; did you mean `naiv`?
            6:18-20 error `-1`: `atol` is -1.0; a tolerance must be zero or positive
            6:29-33 error `1, 2`: `rtol` takes one value for all cases
            6:44-45 error `0`: `trials` is 0; write a whole number from 1 to 1000
        "#]],
    );
    let mut seen = String::new();
    for target in ["saxpy", "other", "naiv", "n + 1"] {
        let src = format!(
            "__global__ void other(int n, const float* x) {{ }}\n__global__ void naiv(int n, float a, const double* x, float* y) {{ }}\n// @bench n = 4; grid = 1; block = 1; a = 1; x: in f32[n]; y: out f32[n]; reference = {target}\n{SAXPY}\n"
        );
        let ks = kernels(&src, Lang::Cuda);
        let r = analyze(&ks[2], &ks, &EvalEnv::default());
        assert!(r.plan.is_none(), "{target}");
        seen.push_str(&render_diags(&src, &r.diagnostics));
    }
    expect![[r#"
        3:87-92 error `saxpy`: a kernel cannot be its own reference; name another kernel, or remove the line to compare against the recorded baseline
        3:87-92 error `other`: `other` cannot be the reference: its parameters (n, x) differ from `saxpy`'s (n, a, x, y)
        3:87-91 error `naiv`: `naiv` cannot be the reference: parameter `x` is `float*` here but `double*` in `naiv`
        3:87-92 error `n + 1`: write `reference = KERNEL`, the name of another kernel in this file
    "#]].assert_eq(&seen);
}

#[test]
fn settings_with_bad_values() {
    check_cuda(&saxpy("n = 4; a = 1.0; x: in f32[n]; y: inout f32[n]; grid = 1; block = 1\natol = -1; trials = 0; flops = -n; bytes = 1.5"), expect![[r#"
        2:18-20 error `-1`: `atol` is -1.0; a tolerance must be zero or positive
        2:31-32 error `0`: `trials` is 0; write a whole number from 1 to 1000
        2:42-44 error `-n`: `flops` is -4; it must be zero or more
    "#]]);
}

#[test]
fn distribution_values_per_case() {
    check_cuda(
        r#"
// @bench n = 100, 3; d: in u8[n] ~ randint(0, 1000); f: in i64[n] ~ randint(5, 5); g: in f32[n] ~ normal(0, n - 50)
// @bench h: in f32[n] ~ uniform(2, 1); i: in i32[n] ~ randint(0, n / 2)
// @bench grid = 1; block = 1
__global__ void dists(const uint8_t* d, const long long* f, const float* g, const float* h, const int* i) { }
"#,
        expect![[r#"
            1:37-53 error `randint(0, 1000)`: `randint(0, 1000)` gives values outside what u8 holds (0..=255)
            1:70-83 error `randint(5, 5)`: `randint(5, 5)` is half-open, so hi must be greater than lo (lo is 5, hi is 5)
            1:110-116 error `n - 50`: the standard deviation in `normal(0, n - 50)` is -47; it must be zero or more
            2:26-39 error `uniform(2, 1)`: `uniform(2, 1)` needs lo <= hi, but lo is 2 and hi is 1
            2:67-72 error `n / 2`: `n / 2` does not divide evenly (n = 3); use cdiv(n, 2) or make n a multiple of 2
        "#]],
    );
}

#[test]
fn triton_launch_values() {
    check_triton(
        r#"
# @bench n = 1000; x_ptr: in f32[n]; out_ptr: out f32[n]; BLOCK = 128
# @bench grid = (cdiv(n, 64), 2, 1, 1); num_warps = 3; num_stages = 0
@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
"#,
        expect![[r#"
            2:17-39 error `(cdiv(n, 64), 2, 1, 1)`: `grid` has at most 3 dimensions (x, y, z), but 4 are given
            2:53-54 error `3`: `num_warps` is 3; it must be a power of two from 1 to 64
            2:69-70 error `0`: `num_stages` is 0; it must be a whole number from 1 to 16
        "#]],
    );
}

#[test]
fn tuples_only_for_grid_and_block() {
    check_cuda(&saxpy("n = (4, 2); a = 1.0; x: in f32[n]; y: inout f32[n]\nblock = (8, 8); grid = cdiv(n, block)"), expect![[r#"
        1:15-21 error `(4, 2)`: a tuple `(x, y, z)` is only allowed as the whole value of `grid` or `block`
        2:42-47 error `block`: `block` is a tuple `(x, y, z)`; to use one part here, name it: `bx = 256; block = (bx, 1)`
    "#]]);
}

#[test]
fn kernel_params_win_over_setting_keywords() {
    check_cuda(
        r#"
// @bench bytes = 1 << 10; flops = 3; x: in u8[bytes]; grid = 1; block = 1
__global__ void count(int bytes, float flops, const unsigned char* x) { }
"#,
        expect![[r#"
            case 0: sizes []
              bytes = 1024 (I32)
              flops = 3.0 (F32)
              x: in u8[1024] elems=1024 bytes=1024 ~ randint(0, 100)
              launch Cuda { grid: [1, 1, 1], block: [1, 1, 1], smem: 0 }
              bytes=1024 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn duplicates_and_unused() {
    check_cuda(&saxpy("n = 8; n = 16; a = 1.0; unused = 3\nx: in f32[n]; x: in f32[n]; y: inout f32[n]\ngrid = 1; block = 32; grid = 2"), expect![[r#"
        1:18-19 error `n`: `n` is already given on line 1; give each name one statement (several cases: `n = 1024, 4099`)
        1:35-41 warning `unused`: `unused` is never used; use it in a shape or launch expression, or remove it
        2:25-26 error `x`: `x` is already given on line 2; remove one of the two
        3:33-37 error `grid`: `grid` is already given on line 3; remove one of the two
    "#]]);
}

#[test]
fn launch_limits() {
    check_cuda(&saxpy("n = 8; a = 1.0; x: in f32[n]; y: inout f32[n]\ngrid = (1 << 31, 70000); block = (64, 32); smem = -1"), expect![[r#"
        2:18-34 error `(1 << 31, 70000)`: `grid` is (2147483648, 70000, 1); CUDA allows x <= 2147483647 and y, z <= 65535
        2:44-52 error `(64, 32)`: `block` is (64, 32, 1) = 2048 threads; CUDA allows at most 1024 per block (and z <= 64)
        2:61-63 error `-1`: `smem` is -1; it is a byte count, zero or more
    "#]]);
}

#[test]
fn empty_spec_gives_nothing() {
    let src = format!("{SAXPY}\n");
    let ks = kernels(&src, Lang::Cuda);
    let r = analyze(&ks[0], &ks, &EvalEnv::default());
    assert_eq!(
        r,
        SpecReport {
            plan: None,
            diagnostics: Vec::new()
        }
    );
}

#[test]
fn sms_comes_from_the_env() {
    let src =
        saxpy("n = sms * 1024; a = 1.0; x: in f32[n]; y: inout f32[n]\ngrid = sms; block = 1024");
    let ks = kernels(&src, Lang::Cuda);
    let r = analyze(&ks[0], &ks, &EvalEnv { sms: 78 });
    let plan = r.plan.expect("plan");
    assert_eq!(
        plan.cases[0].launch,
        Launch::Cuda {
            grid: [78, 1, 1],
            block: [1024, 1, 1],
            smem: 0
        }
    );
    let json = serde_json::to_string(&plan).expect("serializes");
    let back: BenchPlan = serde_json::from_str(&json).expect("round-trips");
    assert_eq!(back, plan);
    expect![[r#"{"kernel":"saxpy","lang":"cuda","cases":[{"sizes":[],"args":[{"kind":"scalar","name":"n","value":79872,"ty":"i32"},{"kind":"scalar","name":"a","value":1.0,"ty":"f32"},{"kind":"buffer","name":"x","role":"in","dtype":"f32","shape":[79872],"elems":79872,"bytes":319488,"dist":{"kind":"uniform","lo":-1.0,"hi":1.0}},{"kind":"buffer","name":"y","role":"inout","dtype":"f32","shape":[79872],"elems":79872,"bytes":319488,"dist":{"kind":"uniform","lo":-1.0,"hi":1.0}}],"template_args":[],"launch":{"kind":"cuda","grid":[78,1,1],"block":[1024,1,1],"smem":0},"bytes":958464.0,"flops":null}],"tunables":[],"defines":[],"atol":null,"rtol":null,"reference":null,"trials":3}"#]].assert_eq(&json);
}

// ---- Skeleton ------------------------------------------------------------------------------

fn skeleton_roundtrip(src: &str, lang: Lang) -> String {
    let src = src.trim_start_matches('\n');
    let ks = kernels(src, lang);
    let sk = skeleton(&ks[0], src);
    let mut with = src.to_string();
    with.insert_str(sk.insert_at, &sk.text);
    let ks2 = kernels(&with, lang);
    let r = analyze(&ks2[0], &ks2, &EvalEnv::default());
    assert_eq!(
        render_diags(&with, &r.diagnostics),
        "",
        "skeleton must analyze cleanly:\n{with}"
    );
    assert!(r.plan.is_some());
    with
}

#[test]
fn skeleton_cuda_saxpy() {
    let out = skeleton_roundtrip("#include <cuda.h>\n\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) { }\n", Lang::Cuda);
    expect![[r##"
        #include <cuda.h>

        // @bench n = 1 << 20, 4099
        // @bench a = 1.0
        // @bench x: in f32[n]
        // @bench y: out f32[n]
        // @bench grid = cdiv(n, 256); block = 256
        extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }
    "##]]
    .assert_eq(&out);
}

#[test]
fn skeleton_cuda_template_and_no_size_param() {
    let out = skeleton_roundtrip("namespace {\n    template <int BLOCK>\n    __global__ void fill(float4* out, const __half* in) { }\n}\n", Lang::Cuda);
    expect![[r#"
        namespace {
            // @bench n = 1 << 20, 4100
            // @bench BLOCK = 256
            // @bench out: out f32[n]
            // @bench in: in f16[n]
            // @bench grid = cdiv(n, 256); block = 256
            template <int BLOCK>
            __global__ void fill(float4* out, const __half* in) { }
        }
    "#]]
    .assert_eq(&out);
}

#[test]
fn skeleton_triton() {
    let out = skeleton_roundtrip(
        "import triton\n\nclass K:\n    @triton.jit\n    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, alpha, BLOCK_M: tl.constexpr, GROUP: tl.constexpr):\n        pass\n",
        Lang::Triton,
    );
    expect![[r#"
        import triton

        class K:
            # @bench a_ptr: in f32[M]
            # @bench b_ptr: in f32[M]
            # @bench c_ptr: out f32[M]
            # @bench M = 1 << 20, 4099
            # @bench N = 1024
            # @bench K = 1024
            # @bench stride_am = 1
            # @bench alpha = 1.0
            # @bench BLOCK_M = 1024
            # @bench GROUP = 1024
            # @bench grid = cdiv(M, BLOCK_M)
            @triton.jit
            def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, alpha, BLOCK_M: tl.constexpr, GROUP: tl.constexpr):
                pass
    "#]].assert_eq(&out);
}

// ---- Robustness ----------------------------------------------------------------------------

/// Deterministic xorshift so the garbage test is reproducible without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

#[test]
fn garbage_never_panics() {
    const PIECES: &[&str] = &[
        "n",
        "x",
        "y",
        "a",
        "BLOCK",
        "grid",
        "block",
        "smem",
        "tune",
        "in",
        "out",
        "inout",
        "f32",
        "i32",
        "bool",
        "=",
        ":",
        ";",
        ",",
        "(",
        ")",
        "[",
        "]",
        "~",
        "+",
        "-",
        "*",
        "/",
        "//",
        "%",
        "<<",
        ">>",
        "**",
        "0",
        "1",
        "4099",
        "1e-3",
        "0x",
        "0xffffffffffffffffff",
        "9223372036854775807",
        "-9223372036854775808",
        "1e999",
        ".5",
        "2.",
        "cdiv",
        "min",
        "max",
        "next_pow2",
        "uniform",
        "randint",
        "normal",
        "zeros",
        "reference",
        "saxpy",
        "sms",
        "warp",
        "é",
        "∑",
        "🚀",
        "\u{0}",
        "\t",
        " ",
        "  ",
        "\"",
        "'",
        "#",
        "@bench",
        "num_warps",
        "atol",
        "trials",
        "flops",
        "bytes",
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..3000 {
        let lines = 1 + rng.next() % 4;
        let mut spec = String::new();
        for _ in 0..lines {
            let len = rng.next() % 24;
            let mut line = String::new();
            for _ in 0..len {
                line.push_str(rng.pick(PIECES));
                if rng.next() % 3 == 0 {
                    line.push(' ');
                }
            }
            spec.push_str(&line);
            spec.push('\n');
        }
        let lang = if round % 2 == 0 {
            Lang::Cuda
        } else {
            Lang::Triton
        };
        let src = match lang {
            Lang::Cuda => saxpy(&spec),
            Lang::Triton => {
                let mut s = String::new();
                for l in spec.lines() {
                    s.push_str(&format!("# @bench {l}\n"));
                }
                s.push_str("@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n");
                s
            }
        };
        let ks = kernels(&src, lang);
        let r = analyze(&ks[0], &ks, &EvalEnv::default());
        for d in &r.diagnostics {
            assert!(
                src.get(d.range.clone()).is_some(),
                "bad range {:?} in {src:?}",
                d.range
            );
        }
        let _ = skeleton(&ks[0], &src);
    }
}

#[test]
fn hostile_sizes_do_not_panic() {
    // 200 parameters, a 10,000-character line, and a chain of 2,000 names.
    let params: Vec<String> = (0..200).map(|i| format!("const float* p{i}")).collect();
    let mut spec: Vec<String> = (0..200).map(|i| format!("p{i}: in f32[n]")).collect();
    spec.push("n = 1024; grid = 1; block = 1".to_string());
    let src = format!(
        "// @bench {}\n__global__ void wide({}) {{ }}\n",
        spec.join("; "),
        params.join(", ")
    );
    let ks = kernels(&src, Lang::Cuda);
    let r = analyze(&ks[0], &ks, &EvalEnv::default());
    assert!(r.diagnostics.is_empty(), "{:?}", r.diagnostics);
    assert_eq!(r.plan.expect("plan").cases[0].args.len(), 200);

    let chain: Vec<String> = (0..2000)
        .map(|i| format!("v{i} = v{} + 1", i + 1))
        .collect();
    let src = saxpy(&format!(
        "{}; v2000 = v0\nn = 1; a = 1.0; x: in f32[n]; y: inout f32[n]; grid = 1; block = 1",
        chain.join("; ")
    ));
    let ks = kernels(&src, Lang::Cuda);
    let r = analyze(&ks[0], &ks, &EvalEnv::default());
    assert!(r
        .diagnostics
        .iter()
        .any(|d| d.message.contains("depends on itself")));

    let src = saxpy(&format!("n = {}", "9".repeat(10_000)));
    let ks = kernels(&src, Lang::Cuda);
    let _ = analyze(&ks[0], &ks, &EvalEnv::default());
}

#[test]
fn launch_settings_belong_to_their_language() {
    check_cuda(
        &saxpy("n = 8; a = 1.0; x: in f32[n]; y: inout f32[n]; grid = 1; block = 1; num_warps = 4"),
        expect![[r#"
            1:79-88 error `num_warps`: `num_warps` is a Triton launch setting; a CUDA kernel takes `block = ...`
        "#]],
    );
}

#[test]
fn overriding_a_size_variable_makes_one_case() {
    let src = saxpy("n = 1 << 20, 4099; a = 1.0; x: in f32[n]; y: inout f32[n]; grid = cdiv(n, 256); block = 256");
    let overrides = BTreeMap::from([
        ("n".to_string(), Value::Int(512)),
        ("a".to_string(), Value::Float(0.25)),
    ]);
    expect![[r#"
        case 0: sizes []
          n = 512 (I32)
          a = 0.25 (F32)
          x: in f32[512] elems=512 bytes=2048 ~ uniform(-1.0, 1.0)
          y: inout f32[512] elems=512 bytes=2048 ~ uniform(-1.0, 1.0)
          launch Cuda { grid: [2, 1, 1], block: [256, 1, 1], smem: 0 }
          bytes=6144 flops=None
        atol=None rtol=None reference=None trials=3
    "#]]
    .assert_eq(&run_lang(&src, Lang::Cuda, &overrides));
}

#[test]
fn hover_for_a_tuned_triton_kernel() {
    let src = r#"# @bench n = 1 << 24, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 1024; num_warps = 4; flops = n
# @bench tune BLOCK in [256, 512, 1024, 2048]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
"#;
    let ks = kernels(src, Lang::Triton);
    let plan = analyze(&ks[0], &ks, &EvalEnv::default())
        .plan
        .expect("plan");
    expect![[r#"
        **@bench `add_kernel`**: 2 cases (case 0 is timed), 3 trials per case

        | case | n | BLOCK |
        |---|---|---|
        | 0 (timed) | 16777216 | 1024 |
        | 1 | 1000 | 1024 |

        | buffer (case 0) | role | dtype | shape | bytes | init |
        |---|---|---|---|---|---|
        | `x_ptr` | in | f32 | [16777216] | 64.0 MiB | uniform(-1.0, 1.0) |
        | `y_ptr` | in | f32 | [16777216] | 64.0 MiB | uniform(-1.0, 1.0) |
        | `out_ptr` | out | f32 | [16777216] | 64.0 MiB | poisoned |

        **Launch** (case 0): grid (16384), num_warps 4

        **Moves** (case 0): 192.0 MiB, 16.8 M FLOP

        **Tunables**:
        - `BLOCK` = 1024 of [256, 512, 1024, 2048] (tl.constexpr)

        **Tolerance**: f32 atol 1e-5 rtol 0.0001

        **Reference**: the recorded baseline of this kernel
    "#]]
    .assert_eq(&plan.hover_markdown());
}

#[test]
fn skeleton_of_a_kernel_at_the_start_of_the_file() {
    let src = "__global__ void k(const double* a, double* out, long long count) { }\n";
    let ks = kernels(src, Lang::Cuda);
    let sk = skeleton(&ks[0], src);
    assert_eq!(sk.insert_at, 0);
    expect![[r#"
        // @bench a: in f64[count]
        // @bench out: out f64[count]
        // @bench count = 1 << 20, 4099
        // @bench grid = cdiv(count, 256); block = 256
    "#]]
    .assert_eq(&sk.text);
    skeleton_roundtrip(src, Lang::Cuda);
}

/// Every independent error is reported at once, as a compiler does (issue #16): an
/// undefined size in one buffer does not hide a division by zero in the launch.
#[test]
fn independent_errors_are_all_reported() {
    check_cuda(
        r#"
// @bench n = 1 << 20, 1000
// @bench x: in f32[n]; y: out f32[m]
// @bench grid = cdiv(n, 0); block = 256
__global__ void k(int n, const float* x, float* y) { }
"#,
        expect![[r#"
            2:36-37 error `m`: `m` is not defined; define it with `// @bench m = ...`; did you mean `n`?
            3:26-27 error `0`: division by zero: `0` is 0
        "#]],
    );
}

/// The checker's work (items visited, counted by every pass) on a spec of `n` statements
/// of one shape, and its diagnostics.
fn work_on(shape: &str, n: usize) -> (u64, usize) {
    let mut src = String::new();
    let mut params = String::from("int n, const float* x, float* y");
    for i in 0..n {
        let line = match shape {
            "unused" => format!("v{i} = {i}"),
            "chain" => format!(
                "v{i} = {}",
                if i == 0 {
                    "n".into()
                } else {
                    format!("v{} + 1", i - 1)
                }
            ),
            "duplicates" => format!("w = {i}"),
            "undefined" => format!("v{i} = u{i}"),
            "one undefined name" => format!("v{i} = m"),
            "errors" => format!("v{i} = cdiv(n, 0)"),
            "tunes" => format!("tune T{i} in [1, 2]"),
            "duplicate tunes" => "tune T in [1, 2]".into(),
            // A cycle through all names, and every name also reading the first.
            "cycle" => format!("v{i} = v{} + v0", (i + 1) % n),
            "syntax errors" => format!("v{i} = (1 +"),
            "missing parameters" => {
                params.push_str(&format!(", int p{i}"));
                continue;
            }
            "buffers" => {
                params.push_str(&format!(", float* b{i}"));
                format!("b{i}: in f32[n]")
            }
            "cases" => format!("v{i} = {}", vec!["1"; 8.min(i + 1)].join(", ")),
            other => panic!("no shape {other}"),
        };
        src.push_str(&format!("// @bench {line}\n"));
    }
    src.push_str("// @bench n = 1024; x: in f32[n]; y: out f32[n]\n");
    src.push_str("// @bench grid = cdiv(n, 256); block = 256\n");
    src.push_str(&format!("extern \"C\" __global__ void k({params}) {{ }}\n"));
    let ks = kernels(&src, Lang::Cuda);
    let (report, work) =
        check::analyze_measured(&ks[0], &ks, &EvalEnv::default(), &BTreeMap::new());
    (work, report.diagnostics.len())
}

/// Issue #16: spec checking is linear in the number of statements, whatever they say (a
/// spec of 10,000 lines used to take 8 s). Doubling the statements at most doubles the
/// work, for every shape that was once quadratic (duplicates, unused or undefined names,
/// errors, cycles) and the ordinary ones. Work is counted, not timed.
#[test]
fn linear_work() {
    let shapes = [
        "unused",
        "chain",
        "duplicates",
        "undefined",
        "one undefined name",
        "errors",
        "tunes",
        "duplicate tunes",
        "cycle",
        "syntax errors",
        "missing parameters",
        "buffers",
        "cases",
    ];
    for shape in shapes {
        let (w1, d1) = work_on(shape, 1000);
        let (w2, d2) = work_on(shape, 2000);
        let (w4, _) = work_on(shape, 4000);
        assert!(
            w1 > 1000,
            "{shape}: the checker charged only {w1} for 1000 statements"
        );
        for (small, big) in [(w1, w2), (w2, w4)] {
            assert!(
                big as f64 <= 2.1 * small as f64,
                "{shape}: work grew from {small} to {big} when the statements doubled ({d1} then {d2} diagnostics)"
            );
        }
    }
}

/// What the linear checker still says in the shapes `linear_work` measures: every cause
/// once, suggestions for the first undefined names, one error per cycle.
#[test]
fn big_specs_still_report_every_cause() {
    assert_eq!(work_on("undefined", 100).1, 100 + 100); // each undefined name, each unused one
    assert_eq!(work_on("duplicates", 100).1, 99 + 1); // 99 duplicates, `w` unused
    assert_eq!(work_on("errors", 100).1, 100 + 100); // each division, each unused name
    let fixture = (0..50)
        .map(|i| format!("// @bench v{i} = v{} + 1\n", (i + 1) % 50))
        .collect::<String>()
        + "// @bench n = v0; x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void k(int n, const float* x, float* y) { }\n";
    let ks = kernels(&fixture, Lang::Cuda);
    let r = analyze(&ks[0], &ks, &EvalEnv::default());
    let cycles: Vec<&str> = r
        .diagnostics
        .iter()
        .map(|d| d.message.as_str())
        .filter(|m| m.contains("depends on itself"))
        .collect();
    assert_eq!(
        cycles,
        ["`v0` depends on itself: v0 → v1 → v2 → v3 → v4 → v5 → … → v45 → v46 → v47 → v48 → v49 → v0; give one of them a value directly"]
    );
}

/// More than `MAX_CASES` values is an error naming the limit.
#[test]
fn too_many_cases() {
    let sizes = vec!["1024"; 65].join(", ");
    check_cuda(
        &format!("// @bench n = {sizes}; x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void k(int n, const float* x, float* y) {{ }}\n"),
        expect![[r#"
            1:15-403 error `1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024`: `n` has 65 values; a spec has at most 64 cases (every case is verified on every run)
        "#]],
    );
}

// ---- reference = torch: ... (issue #17) ----------------------------------------------------

/// A Triton softmax whose spec ends with `reference = torch: {torch}` and has one more
/// statement line `{extra}` (for a second output or a size), showing only the diagnostics
/// and the reference.
fn torch_ref(torch: &str, extra: &str) -> String {
    let fixture = format!(
        r#"
# @bench rows = 64, 5; cols = 128
# @bench x_ptr: in f32[rows, cols]; out_ptr: out f32[rows, cols]
# @bench grid = rows; BLOCK = 128{extra}
# @bench reference = torch: {torch}
@triton.jit
def softmax(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr, m_ptr):
"#
    );
    let extra_buf = if extra.contains("m_ptr") {
        ""
    } else {
        "; m_ptr: in f32[rows]"
    };
    let fixture = fixture.replace("BLOCK = 128", &format!("BLOCK = 128{extra_buf}"));
    let src = fixture.trim_start_matches('\n');
    let mut ks = kernels(src, Lang::Triton);
    // A second kernel in the file, for `reference = torch: other`.
    let mut other = ks[0].clone();
    other.name = "other".into();
    ks.insert(0, other);
    let k = ks.last().expect("fixture has a kernel");
    let r = analyze(k, &ks, &EvalEnv::default());
    let mut s = render_diags(src, &r.diagnostics);
    if let Some(p) = &r.plan {
        s.push_str(&format!("torch_reference={:?}\n", p.torch_reference));
    }
    s
}

#[test]
fn torch_reference_expression_and_function() {
    expect![[r#"
        torch_reference=Some(Expr { expr: "torch.softmax(x_ptr * scale, dim=-1)" })
    "#]]
    .assert_eq(&torch_ref(
        "torch.softmax(x_ptr * scale, dim=-1)",
        "; scale = 2.0",
    ));
    expect![[r#"
        torch_reference=Some(Function { module: "refs.nn", function: "softmax" })
    "#]]
    .assert_eq(&torch_ref("refs.nn.softmax", ""));
    // Comprehension variables, lambdas, keyword arguments and attributes are not names
    // of the spec.
    expect![[r#"
        torch_reference=Some(Expr { expr: "torch.stack([F.softmax(r, dim=0) for r in x_ptr]) + 0 * (lambda q: q)(m_ptr).sum()" })
    "#]]
    .assert_eq(&torch_ref(
        "torch.stack([F.softmax(r, dim=0) for r in x_ptr]) + 0 * (lambda q: q)(m_ptr).sum()",
        "",
    ));
}

#[test]
fn torch_reference_errors_are_on_their_columns_with_the_fix() {
    let cases = [
        ("torch.softmax(xx_ptr, dim=-1)", ""),
        ("torch.softmax(out_ptr, dim=-1)", ""),
        ("torch.softmax", ""),
        ("other", ""),
        ("y = torch.relu(x_ptr)", ""),
        ("import torch", ""),
        ("torch.softmax(x_ptr, dim=-1", ""),
        ("torch.softmax(x_ptr, dim=-1)); n = 3", ""),
        ("torch.ones(rows, cols)", ""),
        ("", ""),
        ("torch.softmax(x_ptr, dim=-1)", "; m_ptr: out f32[rows]"),
        ("x_ptr $ 2", ""),
        ("(x_ptr.exp(), x_ptr.max(1).values)", ""),
        (
            "x_ptr.exp(), x_ptr.amax(1), x_ptr.sum(1)",
            "; m_ptr: out f32[rows]",
        ),
    ];
    let got: Vec<String> = cases.iter().map(|(t, e)| torch_ref(t, e)).collect();
    expect![[r#"
        4:43-49 error `xx_ptr`: unknown name `xx_ptr` in the torch reference; it can use the input buffers (x_ptr, m_ptr), the sizes and scalars (rows, cols, BLOCK), `torch`, `F` (torch.nn.functional) and `math`; did you mean `x_ptr`?
        ---
        4:43-50 error `out_ptr`: `out_ptr` is an `out` buffer: the torch reference computes it and cannot read it; use the inputs (x_ptr, m_ptr)
        ---
        4:29-42 error `torch.softmax`: `torch.softmax` is not a torch expression but a function or attribute; call it on the inputs, e.g. `reference = torch: torch.softmax(x_ptr, m_ptr)`, or name a function of a file next to the kernel (`my_ref.fn`)
        ---
        4:29-34 error `other`: `other` is a kernel of this file, not a torch expression; write `reference = other` (without `torch:`)
        ---
        4:31-32 error `=`: `=` assigns, and the torch reference is one expression whose value is the output; write only the value, e.g. `reference = torch: x + y`
        ---
        4:29-35 error `import`: `import` starts a statement, not a torch expression; write one expression, or put the code in a function of a file next to the kernel and write `reference = torch: module.fn`
        ---
        4:42-43 error `(`: `(` is never closed; the torch reference must end on its line
        ---
        4:58-59 error `;`: `reference = torch:` takes the rest of its line as one Python expression; put other statements before it or on their own line
        ---
        4:29-51 error `torch.ones(rows, cols)`: the torch reference reads no input buffer, so it cannot check `softmax`; compute the output from the inputs (x_ptr, m_ptr)
        ---
        4:10-28 error `reference = torch:`: `torch:` needs a torch expression or a `module.function`; e.g. `reference = torch: torch.softmax(x, dim=-1)` or `reference = torch: my_ref.softmax` (a function in my_ref.py next to the kernel)
        ---
        4:29-57 error `torch.softmax(x_ptr, dim=-1)`: a torch expression gives one output, but `softmax` has 2 (`out_ptr`, `m_ptr`); write a tuple of 2 expressions in that order, or `reference = torch: module.fn` with a function in a file next to the kernel that returns them
        ---
        4:35-36 error `$`: `$` cannot appear in a Python expression; write one torch expression, e.g. `reference = torch: torch.softmax(x, dim=-1)`
        ---
        4:29-63 error `(x_ptr.exp(), x_ptr.max(1).values)`: this tuple gives 2 outputs, but `softmax` has 1 (`out_ptr`); give one expression per output, in that order
        ---
        4:29-69 error `x_ptr.exp(), x_ptr.amax(1), x_ptr.sum(1)`: this tuple gives 3 outputs, but `softmax` has 2 (`out_ptr`, `m_ptr`); give one expression per output, in that order
    "#]].assert_eq(&got.join("---\n"));
}

#[test]
fn a_trailing_comma_makes_a_one_element_tuple_as_in_python() {
    // `grid = (cdiv(n, BLOCK),)` is how Triton authors write a 1-D grid; a call may end
    // with a comma too.
    check_triton(
        r#"
# @bench n = 1000
# @bench x_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = (cdiv(n, BLOCK,),); BLOCK = 256
@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
"#,
        expect![[r#"
            case 0: sizes []
              x_ptr: in f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              out_ptr: out f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              n = 1000 (I64)
              BLOCK = 256 (constexpr)
              launch Triton { grid: [4], num_warps: None, num_stages: None }
              bytes=8000 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
    // Elsewhere `(e,)` is a tuple, refused as any tuple is; `(e)` stays a group.
    check_cuda(
        &saxpy("n = (4,); a = (1.0); x: in f32[n]; y: inout f32[n]\nblock = (256,); grid = 1"),
        expect![[r#"
        1:15-19 error `(4,)`: a tuple `(x, y, z)` is only allowed as the whole value of `grid` or `block`
    "#]],
    );
}

/// Analyzes the LAST kernel of a Triton fixture found by the real kernel discovery (its
/// decorators read, unlike `kernels`).
fn check_discovered(fixture: &str, expect: Expect) {
    let src = fixture.trim_start_matches('\n');
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&crate::syntax::ts_language(Lang::Triton))
        .expect("the grammar loads");
    let tree = crate::syntax::parse_text(&mut parser, Lang::Triton, src).expect("parsed");
    let ks = crate::syntax::analyze(Lang::Triton, src, &tree).kernels;
    expect.assert_eq(&render_last(src, &ks, &BTreeMap::new()));
}

#[test]
fn an_autotuned_kernel_runs_its_first_config_where_the_spec_is_silent() {
    // BLOCK_M, num_warps and num_stages from the first config; BLOCK_N from the spec,
    // which wins; `EVEN` is no parameter of the kernel and is left out.
    check_discovered(
        r#"
import triton
import triton.language as tl

# @bench M = 256; N = 512
# @bench a: in f32[M, N]; out: out f32[M, N]
# @bench grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); BLOCK_N = 32
@triton.autotune(
    configs=[
        triton.Config({'BLOCK_M': 128, 'BLOCK_N': 64, 'EVEN': 1}, num_warps=8, num_stages=3),
        triton.Config({'BLOCK_M': 64, 'BLOCK_N': 32}, num_warps=4),
    ],
    key=['M', 'N'],
)
@triton.jit
def k(a, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pass
"#,
        expect![[r#"
            case 0: sizes []
              a: in f32[256, 512] elems=131072 bytes=524288 ~ uniform(-1.0, 1.0)
              out: out f32[256, 512] elems=131072 bytes=524288 ~ uniform(-1.0, 1.0)
              M = 256 (I64)
              N = 512 (I64)
              BLOCK_M = 128 (constexpr)
              BLOCK_N = 32 (constexpr)
              launch Triton { grid: [2, 16], num_warps: Some(8), num_stages: Some(3) }
              bytes=1048576 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
    // Configs the decorator does not spell out: the missing value is an error that
    // says why the configs could not give it.
    check_discovered(
        r#"
import triton
import triton.language as tl

CONFIGS = [triton.Config({'BLOCK': b}) for b in (128, 256)]

# @bench n = 1000
# @bench x: in f32[n]
# @bench grid = cdiv(n, BLOCK)
@triton.autotune(configs=CONFIGS, key=['n'])
@triton.jit
def k(x, n, BLOCK: tl.constexpr):
    pass
"#,
        expect![[r#"
            8:25-30 error `BLOCK`: `BLOCK` is not defined; define it with `# @bench BLOCK = ...`
            11:13-32 error `BLOCK: tl.constexpr`: parameter `BLOCK` has no value in the @bench spec; add `# @bench BLOCK = 1024` or `# @bench tune BLOCK in [...]`; the @triton.autotune configs are not a list of `triton.Config({...})` written in the decorator, so they cannot give it
        "#]],
    );
}

#[test]
fn a_triton_parameters_default_is_its_value_where_the_spec_is_silent() {
    // `BLOCK` and `alpha` from their defaults (the spec's grid reads BLOCK), `eps` is a
    // runtime scalar with a float default; `n` from the spec.
    check_discovered(
        r#"
import triton
import triton.language as tl

# @bench n = 1000
# @bench x: in f32[n]; y: out f32[n]
# @bench grid = cdiv(n, BLOCK)
@triton.jit
def k(x, y, n, eps: float = 1e-5, alpha: tl.constexpr = 2.0, BLOCK: tl.constexpr = 0x200):
    pass
"#,
        expect![[r#"
            case 0: sizes []
              x: in f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              y: out f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              n = 1000 (I64)
              eps = 1e-5 (F64)
              alpha = 2.0 (constexpr)
              BLOCK = 512 (constexpr)
              launch Triton { grid: [2], num_warps: None, num_stages: None }
              bytes=8000 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
    // The first autotune config wins over a default (as Triton's autotuner passes it);
    // a parameter whose default is no number is left out of the launch, no error.
    check_discovered(
        r#"
import triton
import triton.language as tl

# @bench n = 1000
# @bench x: in f32[n]
# @bench grid = cdiv(n, BLOCK)
@triton.autotune(configs=[triton.Config({'BLOCK': 128})], key=['n'])
@triton.jit
def k(x, n, BLOCK: tl.constexpr = 512, ACT: tl.constexpr = None):
    pass
"#,
        expect![[r#"
            case 0: sizes []
              x: in f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              n = 1000 (I64)
              BLOCK = 128 (constexpr)
              launch Triton { grid: [8], num_warps: None, num_stages: None }
              bytes=4000 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn a_constexpr_that_triton_heuristics_computes_needs_no_value() {
    // `EVEN` is computed at launch and left out of it.
    check_discovered(
        r#"
import triton
import triton.language as tl

# @bench n = 1000
# @bench x: in f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 256
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def k(x, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    pass
"#,
        expect![[r#"
            case 0: sizes []
              x: in f32[1000] elems=1000 bytes=4000 ~ uniform(-1.0, 1.0)
              n = 1000 (I64)
              BLOCK = 256 (constexpr)
              launch Triton { grid: [4], num_warps: None, num_stages: None }
              bytes=4000 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn an_optional_triton_pointer_is_passed_as_none() {
    check_triton(
        r#"
# @bench n = 8
# @bench x_ptr: in f32[n]; b_ptr = None; HAS_B = 0
# @bench grid = 1
@triton.jit
def k(x_ptr, b_ptr, n, HAS_B: tl.constexpr):
"#,
        expect![[r#"
            case 0: sizes []
              x_ptr: in f32[8] elems=8 bytes=32 ~ uniform(-1.0, 1.0)
              b_ptr = None
              n = 8 (I64)
              HAS_B = 0 (constexpr)
              launch Triton { grid: [1], num_warps: None, num_stages: None }
              bytes=32 flops=None
            atol=None rtol=None reference=None trials=3
        "#]],
    );
}

#[test]
fn none_is_only_for_triton_parameters() {
    check_triton(
        r#"
# @bench n = 8
# @bench x_ptr: in f32[n]; m = None
# @bench grid = 1
@triton.jit
def k(x_ptr, n):
"#,
        expect![[r#"
            2:28-29 error `m`: `m = None` passes None to a Triton kernel parameter; `m` is not one
        "#]],
    );
}

#[test]
fn a_torch_tuple_gives_one_value_per_output_in_order() {
    // Two outputs, a tuple of two (with or without its parentheses, a trailing comma).
    for text in [
        "(torch.softmax(x_ptr, dim=-1), x_ptr.amax(1))",
        "torch.softmax(x_ptr, dim=-1), x_ptr.amax(1)",
        "(torch.softmax(x_ptr, dim=-1), torch.max(x_ptr, 1)[0],)",
    ] {
        let got = torch_ref(text, "; m_ptr: out f32[rows]");
        assert!(
            got.starts_with("torch_reference=Some(Expr"),
            "{text}: {got}"
        );
    }
    // A parenthesized single value, or a call whose arguments have commas, is one.
    assert!(torch_ref("(torch.softmax(x_ptr, dim=-1))", "").starts_with("torch_reference=Some"));
}

#[test]
fn a_type_template_parameter_is_named_a_type_not_given_a_number() {
    check_cuda(
        r#"
// @bench n = 1000
// @bench x: in f32[n]; y: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
template <typename T>
__global__ void relu_t(const T* x, T* y, int n) { }
"#,
        expect![[r#"
            2:17-20 error `f32`: `x` is `T*`, which matches no @bench element type (f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool)
            2:32-35 error `f32`: `y` is `T*`, which matches no @bench element type (f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool)
            5:17-23 error `relu_t`: template parameter `T` is a type (the element type of a parameter), and @bench gives template arguments as numbers only; benchmark the kernel written for one type (`float` for `T`), or an `extern "C"` kernel that calls this one with the types written out
        "#]],
    );
}
