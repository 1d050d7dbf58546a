//! Reply parsing and splicing, one fixture per way a reply can be wrong.

use expect_test::{expect, Expect};

use super::*;
use crate::optimize::catalog::Strategy;

const SAXPY: &str = r#"// y = a * x + y
#include <cstdio>

// @bench n = 1 << 24, 4099
// @bench x: in f32[n]
// @bench y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
    return 0;
}
"#;

fn saxpy_params() -> Vec<String> {
    ["n", "a", "x", "y"].map(String::from).to_vec()
}

fn code(reply: &str) -> Result<String, ReplyError> {
    parse_code_reply(reply, Lang::Cuda, "saxpy", &saxpy_params())
}

fn code_err(reply: &str, want: Expect) {
    want.assert_eq(&code(reply).unwrap_err().to_string());
}

#[test]
fn a_good_cuda_reply_gives_the_block_without_spec_lines() {
    let reply = "Adding `__restrict__` lets the compiler use the read-only path.\n\n```cuda\n// @bench n = 1 << 24, 4099\nextern \"C\" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];\n}\n```\nThis keeps the launch unchanged.";
    expect![[r#"
        extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i] + y[i];
        }"#]]
    .assert_eq(&code(reply).unwrap());
}

#[test]
fn a_good_triton_reply_with_helpers_and_imports() {
    let reply = "```python\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef _add(a, b):\n    return a + b\n\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    tl.store(out_ptr + offs, _add(tl.load(x_ptr + offs, mask=m), tl.load(y_ptr + offs, mask=m)), mask=m)\n```";
    let params = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"].map(String::from);
    let unit = parse_code_reply(reply, Lang::Triton, "add_kernel", &params).unwrap();
    assert!(
        unit.starts_with("import triton\n") && unit.ends_with("mask=m)"),
        "{unit}"
    );
    // `@jit` kernels are found as in a file that imports it.
    let jit = "```py\n@jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pass\n```";
    assert!(parse_code_reply(jit, Lang::Triton, "add_kernel", &params).is_ok());
}

#[test]
fn every_bad_code_reply_has_its_own_message() {
    code_err(
        "I would add __restrict__ to the pointers, which lets the compiler\nuse the read-only data cache.",
        expect![[r#"the reply has no fenced code block; it starts: "I would add __restrict__ to the pointers, which lets the compiler\nuse the read-only data cache.""#]],
    );
    code_err(
        "",
        expect![[r#"the reply has no fenced code block; it starts: (an empty reply)"#]],
    );
    code_err(
        "```cuda\n```",
        expect!["the code block is empty; it must hold the complete kernel unit"],
    );
    code_err(
        "```cuda\n// @bench n = 4\n```",
        expect!["the code block is empty; it must hold the complete kernel unit"],
    );
    code_err(
        "First:\n```cuda\n__device__ float f(float v) { return v; }\n```\nThen:\n```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {}\n```",
        expect!["the reply has 2 fenced code blocks (at reply lines 2, 6); answer with exactly one"],
    );
    code_err(
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n    int i = blockIdx.x",
        expect!["the code block opened at reply line 1 is never closed (was the reply cut off at maxTokens?)"],
    );
    code_err(
        "```python\ndef saxpy(n, a, x, y): pass\n```",
        expect!["the code block is tagged `python`, but the answer must be CUDA code; open the block with ```cuda"],
    );
    code_err(
        "```cuda\n/* @bench n = 1 << 20 */\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {}\n```",
        expect!["line 1 of the code block holds `@bench` outside a line comment; the spec is the author's: leave it out"],
    );
    code_err(
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n    int i = blockIdx.x * ;\n}\n```",
        expect!["the code does not parse: line 2, column 24 of the block: syntax error: unexpected `*`"],
    );
    code_err(
        "```cuda\n__global__ void daxpy(int n, double a, const double* x, double* y) {}\n```",
        expect!["the code block does not define the kernel `saxpy`; it defines `daxpy`"],
    );
    code_err(
        "```cuda\n__device__ float twice(float v) { return 2 * v; }\n```",
        expect!["the code block does not define the kernel `saxpy` (it defines no kernel at all)"],
    );
    code_err(
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {}\n__global__ void saxpy_tail(int n) {}\n```",
        expect!["the code block also defines the kernel(s) `saxpy_tail`; only `saxpy` and the helpers it calls belong in it"],
    );
    code_err(
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {}\nint main() { return 0; }\n```",
        expect!["line 2 of the code block defines `main`, which is host code (neither `__global__` nor `__device__`); write only the kernel and its device helpers"],
    );
    code_err(
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, float* y, const float* x) {}\n```",
        expect!["the kernel `saxpy` takes (n, a, y, x) but must take (n, a, x, y), the same names in the same order"],
    );
    code_err(
        "```cuda\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {}\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) { }\n```",
        expect!["the code block defines the kernel `saxpy` 2 times; define it once"],
    );
    let params = ["x_ptr", "n"].map(String::from);
    expect!["line 5 of the code block defines `launch`, which is host code (not a `@triton.jit` function); write only the kernel and its device helpers"]
        .assert_eq(
            &parse_code_reply(
                "```python\n@triton.jit\ndef k(x_ptr, n):\n    pass\n\ndef launch(x):\n    k[(1,)](x, 1)\n```",
                Lang::Triton,
                "k",
                &params,
            )
            .unwrap_err()
            .to_string(),
        );
}

fn analyze_file(lang: Lang, text: &str) -> FileModel {
    Analyzed::file(lang, text).model
}

fn splice(text: &str, lang: Lang, kernel: &str, unit: &str) -> Result<String, ReplyError> {
    let model = analyze_file(lang, text);
    let k = model.kernel(kernel).expect("fixture kernel").clone();
    splice_unit(text, &model, &k, unit)
}

#[test]
fn splice_replaces_the_kernel_under_its_spec_and_puts_helpers_above_it() {
    let unit = "#include <cstdio>\n#include <cuda_fp16.h>\n\n__device__ __forceinline__ float fma_(float a, float x, float y) { return fmaf(a, x, y); }\n\nextern \"C\" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = fma_(a, x[i], y[i]);\n}";
    expect![[r#"
        // y = a * x + y
        #include <cstdio>

        #include <cuda_fp16.h>

        __device__ __forceinline__ float fma_(float a, float x, float y) { return fmaf(a, x, y); }

        // @bench n = 1 << 24, 4099
        // @bench x: in f32[n]
        // @bench y: inout f32[n] ~ normal(0, 1)
        // @bench a = 2.5
        // @bench grid = cdiv(n, 256); block = 256
        extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = fma_(a, x[i], y[i]);
        }

        int main() {
            return 0;
        }
    "#]]
    .assert_eq(&splice(SAXPY, Lang::Cuda, "saxpy", unit).unwrap());
}

const TWO_KERNELS: &str = r#"__device__ float shared_h(float v) { return v * 2.0f; }

__device__ float only_a(float v) { return shared_h(v) + 1.0f; }

// @bench n = 1024
// @bench x: inout f32[n]
// @bench grid = cdiv(n, 128); block = 128
__global__ void a(int n, float* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = only_a(x[i]);
}

// @bench n = 1024
// @bench x: inout f32[n]
// @bench grid = cdiv(n, 128); block = 128
__global__ void b(int n, float* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = shared_h(x[i]);
}
"#;

#[test]
fn splice_removes_own_helpers_keeps_shared_ones_and_drops_identical_copies() {
    let unit = "__device__ float shared_h(float v) {\n    return v * 2.0f;\n}\n\n__device__ float only_a2(float v) { return shared_h(v) + 1.0f; }\n\n__global__ void a(int n, float* x) {\n    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = only_a2(x[i]);\n}";
    expect![[r#"
        __device__ float shared_h(float v) { return v * 2.0f; }

        __device__ float only_a2(float v) { return shared_h(v) + 1.0f; }

        // @bench n = 1024
        // @bench x: inout f32[n]
        // @bench grid = cdiv(n, 128); block = 128
        __global__ void a(int n, float* x) {
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = only_a2(x[i]);
        }

        // @bench n = 1024
        // @bench x: inout f32[n]
        // @bench grid = cdiv(n, 128); block = 128
        __global__ void b(int n, float* x) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) x[i] = shared_h(x[i]);
        }
    "#]]
    .assert_eq(&splice(TWO_KERNELS, Lang::Cuda, "a", unit).unwrap());
}

#[test]
fn splice_refuses_to_change_a_helper_another_kernel_uses() {
    let unit = "__device__ float shared_h(float v) { return v + v; }\n__global__ void a(int n, float* x) { if (n) x[0] = shared_h(x[0]); }";
    expect!["the new code defines `shared_h`, which the file already defines outside this kernel unit (kernel `b` uses it too); give the new function another name"]
        .assert_eq(&splice(TWO_KERNELS, Lang::Cuda, "a", unit).unwrap_err().to_string());
    let unit = "__device__ float b2(float v) { return v; }\n__global__ void b(int n, float* x) {}\n__global__ void a(int n, float* x) {}";
    expect!["the code block also defines the kernel(s) `b`; only `a` and the helpers it calls belong in it"]
        .assert_eq(&splice(TWO_KERNELS, Lang::Cuda, "a", unit).unwrap_err().to_string());
}

#[test]
fn splice_checks_the_signature_and_spec_survive() {
    let unit = "__global__ void saxpy(int n, float a, const float* x, float* y) {}";
    expect![[
        r#"the new code changes the kernel's linkage: it had `extern "C"`; keep it as it was"#
    ]]
    .assert_eq(
        &splice(SAXPY, Lang::Cuda, "saxpy", unit)
            .unwrap_err()
            .to_string(),
    );
    let unit = "template <int B>\n__global__ void a(int n, float* x) {}";
    expect![
        "the new code changes the kernel's template parameters from <> to <B>; keep it as it was"
    ]
    .assert_eq(
        &splice(TWO_KERNELS, Lang::Cuda, "a", unit)
            .unwrap_err()
            .to_string(),
    );
}

const VECTOR_ADD: &str = r#"import triton
import triton.language as tl


# @bench n = 1 << 24, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 64; num_warps = 4
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, x.numel(), BLOCK=64)
    return out
"#;

#[test]
fn splice_a_triton_kernel() {
    let reply = "```python\nimport triton.language as tl\n\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n    x = tl.load(x_ptr + offs, mask=mask, eviction_policy=\"evict_first\")\n    y = tl.load(y_ptr + offs, mask=mask, eviction_policy=\"evict_first\")\n    tl.store(out_ptr + offs, x + y, mask=mask)\n```";
    let params = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"].map(String::from);
    let unit = parse_code_reply(reply, Lang::Triton, "add_kernel", &params).unwrap();
    expect![[r#"
        import triton
        import triton.language as tl


        # @bench n = 1 << 24, 1000
        # @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
        # @bench grid = cdiv(n, BLOCK); BLOCK = 64; num_warps = 4
        @triton.jit
        def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first")
            y = tl.load(y_ptr + offs, mask=mask, eviction_policy="evict_first")
            tl.store(out_ptr + offs, x + y, mask=mask)


        def add(x, y):
            out = torch.empty_like(x)
            add_kernel[(1,)](x, y, out, x.numel(), BLOCK=64)
            return out
    "#]]
    .assert_eq(&splice(VECTOR_ADD, Lang::Triton, "add_kernel", &unit).unwrap());
    // A new function named like the file's host code clashes.
    let unit = "@triton.jit\ndef add(a, b):\n    return a + b\n\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    z = add(1, 2)";
    expect!["the new code defines `add`, which the file already defines outside this kernel unit; give the new function another name"]
        .assert_eq(&splice(VECTOR_ADD, Lang::Triton, "add_kernel", unit).unwrap_err().to_string());
}

fn catalog() -> Catalog {
    let step = |id: &str, params: &[(&str, Value)]| Strategy {
        id: id.into(),
        title: id.into(),
        description: String::new(),
        lang: vec![Lang::Cuda],
        requires: Vec::new(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        rewrite: None,
        prior: 0.0,
        sweep: false,
    };
    Catalog {
        strategies: vec![
            step("restrict_const", &[]),
            step("launch_bounds", &[("max_threads", serde_json::json!(256))]),
        ],
    }
}

fn strategy_err(reply: &str, want: Expect) {
    want.assert_eq(
        &parse_strategy_reply(reply, &catalog())
            .unwrap_err()
            .to_string(),
    );
}

#[test]
fn strategy_replies_parse() {
    let p = parse_strategy_reply(
        "The kernel is memory bound.\n```json\n{\"id\": \"launch_bounds\", \"params\": {\"max_threads\": 128}, \"rationale\": \"fewer registers,\\nmore blocks\"}\n```",
        &catalog(),
    )
    .unwrap();
    assert_eq!(p.id, "launch_bounds");
    assert_eq!(p.params.get("max_threads"), Some(&serde_json::json!(128)));
    assert_eq!(
        (p.rationale.as_str(), p.free_form),
        ("fewer registers,", None)
    );
    let bare = parse_strategy_reply("{\"id\": \"restrict_const\"}", &catalog()).unwrap();
    assert_eq!((bare.id.as_str(), bare.params.len()), ("restrict_const", 0));
    let free = parse_strategy_reply(
        "```\n{\"id\": \"free\", \"params\": {}, \"rationale\": \"r\", \"description\": \"Process two elements per thread with float2 loads.\"}\n```",
        &catalog(),
    )
    .unwrap();
    assert_eq!(
        free.free_form.as_deref(),
        Some("Process two elements per thread with float2 loads.")
    );
    assert_eq!((free.touches, free.launch), (None, None));
    // A grounded instruction: the code it touches and the launch change it implies.
    let grounded = parse_strategy_reply(
        "```json\n{\"id\": \"free\", \"rationale\": \"r\", \"description\": \"one warp per row\", \"code\": \" the loop over `j` \", \"launch\": \"block = 32; grid = rows\"}\n```",
        &catalog(),
    )
    .unwrap();
    assert_eq!(grounded.touches.as_deref(), Some("the loop over `j`"));
    assert_eq!(grounded.launch.as_deref(), Some("block = 32; grid = rows"));
    let empty = parse_strategy_reply(
        "{\"id\": \"restrict_const\", \"code\": \"  \", \"launch\": 3}",
        &catalog(),
    )
    .unwrap();
    assert_eq!(
        (empty.touches, empty.launch),
        (None, None),
        "blank or not text: left out"
    );
}

#[test]
fn bad_strategy_replies() {
    strategy_err(
        "I suggest restrict_const.",
        expect![[
            r#"the reply has no JSON object (no fenced json block, and the reply is not JSON); it starts: "I suggest restrict_const.""#
        ]],
    );
    strategy_err(
        "```json\n{\"id\": \"restrict_const\", \"params\": {,}}\n```",
        expect!["the strategy reply is not valid JSON: key must be a string at line 1 column 37"],
    );
    strategy_err(
        "```json\n[\"restrict_const\"]\n```",
        expect![[
            r#"the strategy reply is not valid JSON: it is not an object `{"id": ..., ...}`"#
        ]],
    );
    strategy_err(
        "```json\n{\"params\": {}}\n```",
        expect!["the strategy reply has no `id`"],
    );
    strategy_err(
        "```json\n{\"id\": \"vectorize\"}\n```",
        expect!["`vectorize` is not a step of the catalog; use one of `restrict_const`, `launch_bounds`, or `free`"],
    );
    strategy_err(
        "```json\n{\"id\": \"launch_bounds\", \"params\": {\"min_blocks\": 2}}\n```",
        expect![
            "`min_blocks` is not a parameter of `launch_bounds`; its parameters are `max_threads`"
        ],
    );
    strategy_err(
        "```json\n{\"id\": \"restrict_const\", \"params\": {\"x\": 1}}\n```",
        expect!["`x` is not a parameter of `restrict_const`; it takes no parameters"],
    );
    strategy_err(
        "```json\n{\"id\": \"free\", \"rationale\": \"r\"}\n```",
        expect!["a `free` step needs a `description` that tells the coder what to do"],
    );
    strategy_err(
        "```json\n{\"id\": \"free\"}\n```\n```json\n{\"id\": \"restrict_const\"}\n```",
        expect![
            "the reply has 2 fenced code blocks (at reply lines 1, 4); answer with exactly one"
        ],
    );
    strategy_err(
        "```yaml\nid: restrict_const\n```",
        expect!["the code block is tagged `yaml`, but the answer must be JSON; open the block with ```json"],
    );
}

/// A Triton reply runs in the worker when its file is imported: only imports the kernel
/// needs, `@jit` functions and constants may stand at the top level (issue #10).
#[test]
fn triton_replies_with_top_level_code_are_refused_before_anything_runs() {
    let params: Vec<String> = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let kernel = "@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)\n";
    let reply = |top: &str| {
        format!("```python\nimport triton\nimport triton.language as tl\n{top}\n{kernel}```")
    };
    let err = |top: &str| {
        parse_code_reply(&reply(top), Lang::Triton, "add_kernel", &params)
            .unwrap_err()
            .to_string()
    };
    // Allowed: constants, tl.constexpr constants, a docstring, math and torch imports.
    for ok in [
        "SCALE = 2.0",
        "LIMIT = -1",
        "BLOCK_DEFAULT = tl.constexpr(1024)",
        "\"\"\"A faster add.\"\"\"",
        "import math\nfrom torch import float32",
        "# a comment",
    ] {
        assert!(
            parse_code_reply(&reply(ok), Lang::Triton, "add_kernel", &params).is_ok(),
            "{ok}"
        );
    }
    expect![[r#"line 3 of the code block is top-level code (`os.system("rm -rf /tmp/x")`); a Triton reply holds only imports, `@triton.jit` functions and constants, because everything else would run when the worker loads the file"#]]
        .assert_eq(&err("os.system(\"rm -rf /tmp/x\")"));
    expect![[r#"line 3 of the code block is top-level code (an import of `subprocess`; allowed are triton, torch, math, numpy, typing); a Triton reply holds only imports, `@triton.jit` functions and constants, because everything else would run when the worker loads the file"#]]
        .assert_eq(&err("import subprocess"));
    expect![[r#"line 3 of the code block is top-level code (`x = torch.randn(4)`); a Triton reply holds only imports, `@triton.jit` functions and constants, because everything else would run when the worker loads the file"#]]
        .assert_eq(&err("x = torch.randn(4)"));
    expect![[r#"line 3 of the code block is top-level code (`if True:`); a Triton reply holds only imports, `@triton.jit` functions and constants, because everything else would run when the worker loads the file"#]]
        .assert_eq(&err("if True:\n    print('hi')"));
    expect![[r#"line 3 of the code block is top-level code (`class Helper:`); a Triton reply holds only imports, `@triton.jit` functions and constants, because everything else would run when the worker loads the file"#]]
        .assert_eq(&err("class Helper:\n    pass"));
}
