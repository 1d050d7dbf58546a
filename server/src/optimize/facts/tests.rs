//! Tests of the static facts: strides, loops, qualifiers, the boolean facts and the
//! features, on the examples, the rewrite fixtures and hostile input.

use expect_test::{expect, Expect};

use super::*;
use crate::document::Document;
use crate::syntax;

/// The facts of kernel `name` (or the last kernel) in a source text.
fn facts_of(lang: Lang, src: &str, name: Option<&str>) -> Facts {
    let doc = Document::new(lang, 0, src);
    let tree = doc.tree().expect("the test source parses");
    let model = syntax::analyze(lang, src, tree);
    let kernel = match name {
        Some(n) => model.kernel(n).expect("the named kernel exists"),
        None => model.kernels.last().expect("the source has a kernel"),
    };
    static_facts(lang, src, tree, &model, kernel)
}

/// The buffers of the loads one thread of the launch reads alone.
fn read_once(f: &Facts) -> Vec<&str> {
    f.read_once_loads()
        .iter()
        .map(|a| a.buffer.as_str())
        .collect()
}

fn check_describe(lang: Lang, src: &str, name: Option<&str>, expect: Expect) {
    expect.assert_eq(&facts_of(lang, src, name).describe());
}

/// `buffer index: kind stride` per access, one a line.
fn check_accesses(lang: Lang, src: &str, expect: Expect) {
    let f = facts_of(lang, src, None);
    let lines: Vec<String> = f
        .accesses
        .iter()
        .map(|a| {
            format!(
                "{} [{}]: {:?} {:?}{}{}",
                a.buffer,
                a.index,
                a.kind,
                a.stride,
                if a.in_loop { " in-loop" } else { "" },
                a.via
                    .as_ref()
                    .map_or(String::new(), |v| format!(" via {v}"))
            )
        })
        .collect();
    expect.assert_eq(&lines.join("\n"));
}

#[test]
fn matmul_naive() {
    check_describe(
        Lang::Cuda,
        include_str!("../../../../examples/matmul_naive.cu"),
        None,
        expect![[r#"
            - kernel `matmul` (CUDA), block (16, 16, 1)
            - loop at line 14: counted over `i`, trip count known at run time, no unroll pragma, 2 global loads and 0 stores inside, carries sum `acc`
            - line 15: load `a` via `row * k + i`, same address for every lane (broadcast), in a loop
            - line 15: load `b` via `i * n + col`, unit-stride, in a loop
            - line 17: store `c` via `row * n + col`, unit-stride
            - pointers without `__restrict__`: a, b, c; read-only without `const`: none
            - shared memory: none; barriers 0; atomics 0; shuffles 0
            - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: yes
            - fast-math-able calls: none
            - arithmetic intensity 170.7 FLOP/byte (ridge 20.0)
            - facts: block_2d, block_resizable, has_counted_loop, loop_without_unroll_pragma, loop_over_global_memory, pointer_without_restrict, unit_stride_access, compute_bound, matmul_like_loop"#]],
    );
}

#[test]
fn saxpy() {
    check_describe(
        Lang::Cuda,
        include_str!("../../../../examples/saxpy.cu"),
        None,
        expect![[r#"
            - kernel `saxpy` (CUDA), block (256, 1, 1)
            - loops: none
            - line 12: store `y` via `i`, unit-stride
            - line 12: load `x` via `i`, unit-stride
            - line 12: load `y` via `i`, unit-stride
            - pointers without `__restrict__`: x, y; read-only without `const`: none
            - shared memory: none; barriers 0; atomics 0; shuffles 0
            - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: yes
            - fast-math-able calls: none
            - moves 192 MiB per run; no `flops` in the spec
            - facts: block_1d, block_resizable, pointer_without_restrict, unit_stride_access, one_thread_per_element_1d, memory_bound, read_once_loads"#]],
    );
}

#[test]
fn reduce_sum_both_kernels() {
    let src = include_str!("../../../../examples/reduce_sum.cu");
    check_describe(
        Lang::Cuda,
        src,
        Some("reduce_naive"),
        expect![[r#"
            - kernel `reduce_naive` (CUDA), block (256, 1, 1)
            - loops: none
            - line 15: atomic `out` via `0`, same address for every lane (broadcast)
            - line 6: load `x` via `i`, unit-stride (in `load_as_float`)
            - pointers without `__restrict__`: x, out; read-only without `const`: none
            - shared memory: none; barriers 0; atomics 1; shuffles 0
            - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: yes
            - fast-math-able calls: none
            - moves 8.0 MiB per run; no `flops` in the spec
            - facts: block_1d, block_resizable, pointer_without_restrict, unit_stride_access, one_thread_per_element_1d, has_atomics, reduction_pattern, memory_bound"#]],
    );
    check_describe(
        Lang::Cuda,
        src,
        Some("reduce_tree"),
        expect![[r#"
            - kernel `reduce_tree` (CUDA), block (128, 1, 1)
            - tunables: BLOCK in [128, 256, 512]
            - loop at line 29: counted over `s`, trip count known at run time, no unroll pragma, 0 global loads and 0 stores inside
            - line 6: load `x` via `i`, unit-stride (in `load_as_float`)
            - line 33: atomic `out` via `0`, same address for every lane (broadcast)
            - pointers without `__restrict__`: x, out; read-only without `const`: none
            - shared memory: dynamic (512 B in the spec); barriers 2; atomics 1; shuffles 0
            - `__launch_bounds__`: no; `__maxnreg__`: no; reads blockDim: no
            - fast-math-able calls: none
            - moves 8.0 MiB per run; no `flops` in the spec
            - facts: has_tunables, block_1d, has_counted_loop, loop_without_unroll_pragma, pointer_without_restrict, unit_stride_access, one_thread_per_element_1d, uses_shared_memory, has_atomics, reduction_pattern, memory_bound"#]],
    );
}

#[test]
fn vector_add() {
    check_describe(
        Lang::Triton,
        include_str!("../../../../examples/vector_add.py"),
        None,
        expect![[r#"
            - kernel `add_kernel` (Triton), num_warps 4
            - tunables: BLOCK in [64, 256, 1024, 2048]
            - constexpr params: BLOCK
            - loops: none
            - line 15: load `x_ptr` via `x_ptr + offs`, unit-stride
            - line 16: load `y_ptr` via `y_ptr + offs`, unit-stride
            - line 17: store `out_ptr` via `out_ptr + offs`, unit-stride
            - atomics 0; reductions 0; tl.dot 0
            - moves 192 MiB per run; no `flops` in the spec
            - facts: has_tunables, has_constexpr_params, unit_stride_access, memory_bound, read_once_loads"#]],
    );
}

#[test]
fn softmax() {
    check_describe(
        Lang::Triton,
        include_str!("../../../../examples/softmax.py"),
        None,
        expect![[r#"
            - kernel `softmax_kernel` (Triton), num_warps 4
            - tunables: num_warps in [2, 4, 8]
            - constexpr params: BLOCK
            - loops: none
            - line 16: load `x_ptr` via `x_ptr + row * stride + offs`, unit-stride
            - line 19: store `out_ptr` via `out_ptr + row * stride + offs`, unit-stride
            - atomics 0; reductions 2; tl.dot 0
            - moves 32 MiB per run; no `flops` in the spec
            - facts: has_tunables, has_constexpr_params, unit_stride_access, reduction_pattern, memory_bound, read_once_loads"#]],
    );
}

#[test]
fn cuda_strides() {
    check_accesses(
        Lang::Cuda,
        r#"
__device__ float get(const float* p, int j) { return p[j]; }
__global__ void k(int n, int s, float* x, const float* y, const int* idx, float* out) {
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    x[2 * threadIdx.x] = 1.0f;
    x[threadIdx.x << 2] = 1.0f;
    x[threadIdx.x * s] = y[tid % 32];
    x[idx[i]] += y[(int)i - 1];
    x[blockIdx.x] = y[threadIdx.y * n];
    const float* row = y + blockIdx.x * n;
    out[i] = row[tid] + get(y, i + 1) + get(row, 7) + *(y + i);
    for (int g = i; g < n; g += blockDim.x * gridDim.x) out[g] = y[g];
    atomicAdd(out, 1.0f);
    atomicAdd(&out[i], 1.0f);
    // Quotients by a run-time or warp-wide value change once every many lanes.
    out[i] = y[i / n] + y[i / 2] + y[(i / 64) * n + i % 64];
}
"#,
        expect![[r#"
            x [2 * threadIdx.x]: Store Strided(2)
            x [threadIdx.x << 2]: Store Strided(4)
            x [threadIdx.x * s]: Store Symbolic
            y [tid % 32]: Load Unit
            x [idx[i]]: LoadStore Unknown
            idx [i]: Load Unit
            y [(int)i - 1]: Load Unit
            x [blockIdx.x]: Store Uniform
            y [threadIdx.y * n]: Load Uniform
            out [i]: Store Unit
            y [tid]: Load Unit
            y [j]: Load Unit via get
            y [j]: Load Uniform via get
            y [y + i]: Load Unit
            out [g]: Store Unit in-loop
            y [g]: Load Unit in-loop
            out [0]: Atomic Uniform
            out [i]: Atomic Unit
            out [i]: Store Unit
            y [i / n]: Load Uniform
            y [i / 2]: Load Unknown
            y [(i / 64) * n + i % 64]: Load Unit"#]],
    );
}

#[test]
fn triton_strides() {
    check_accesses(
        Lang::Triton,
        r#"
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, y_ptr, stride, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs)
    b = tl.load(x_ptr + offs * 2)
    c = tl.load(x_ptr + offs * stride)
    d = tl.load(x_ptr + offs[:, None])
    e = tl.load(y_ptr + pid)
    ptrs = y_ptr + offs
    for i in range(0, 4):
        tl.store(ptrs, a + b)
        ptrs += BLOCK
    tl.atomic_add(y_ptr, 1.0)
"#,
        expect![[r#"
                x_ptr [x_ptr + offs]: Load Unit
                x_ptr [x_ptr + offs * 2]: Load Strided(2)
                x_ptr [x_ptr + offs * stride]: Load Symbolic
                x_ptr [x_ptr + offs[:, None]]: Load Unknown
                y_ptr [y_ptr + pid]: Load Uniform
                y_ptr [ptrs]: Store Unit in-loop
                y_ptr [y_ptr]: Atomic Uniform"#]],
    );
}

/// The strides only, one a line.
fn strides(lang: Lang, src: &str) -> Vec<String> {
    facts_of(lang, src, None)
        .accesses
        .iter()
        .map(|a| format!("{:?} {:?}", a.kind, a.stride))
        .collect()
}

/// One lane walker serves both languages: the same index shapes (shifts by a literal,
/// redefinitions, negation, conditionals with equal branches, parentheses) give the
/// same strides in CUDA and in Triton.
#[test]
fn the_same_index_shapes_have_the_same_strides_in_both_languages() {
    let cuda = r#"
__global__ void k(int n, int s, float* x) {
    int l = threadIdx.x;
    int a = l << 2;
    int b = l;
    b *= 3;
    int c = n > 4 ? l : l;
    int d = -(l) + n;
    int e = l * s;
    x[a] = 1.0f;
    x[b] = 1.0f;
    x[c] = 1.0f;
    x[d] = 1.0f;
    x[e] = 1.0f;
    x[a + b] = 1.0f;
}
"#;
    let triton = r#"
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, s, BLOCK: tl.constexpr):
    l = tl.arange(0, BLOCK)
    a = l << 2
    b = l
    b *= 3
    c = l if n > 4 else l
    d = -(l) + n
    e = l * s
    tl.store(x_ptr + a, 1.0)
    tl.store(x_ptr + b, 1.0)
    tl.store(x_ptr + c, 1.0)
    tl.store(x_ptr + d, 1.0)
    tl.store(x_ptr + e, 1.0)
    tl.store(x_ptr + (a + b), 1.0)
"#;
    // `b` is defined twice with different strides: unknown, in both (the names are
    // settled over all their definitions, not flow by flow).
    let expected = [
        "Store Strided(4)",
        "Store Unknown",
        "Store Unit",
        "Store Strided(-1)",
        "Store Symbolic",
        "Store Unknown",
    ];
    assert_eq!(strides(Lang::Cuda, cuda), expected);
    assert_eq!(strides(Lang::Triton, triton), expected);
}

#[test]
fn loops_and_unroll_pragmas() {
    let f = facts_of(
        Lang::Cuda,
        r#"
#define N 64
__global__ void k(float* x, int n) {
    #pragma unroll 4
    for (int i = 0; i < 16; ++i) x[i] = 0;
    for (int s = 128; s > 0; s >>= 1) x[s] = 1;
    for (int j = n; j >= 0; j -= 2) {}
    for (int q = 0; q < N; q++) {}
    while (n > 0) { n--; }
}
"#,
        None,
    );
    let got: Vec<String> = f
        .loops
        .iter()
        .map(|l| {
            format!(
                "{} {:?} {:?} {:?} unroll={}",
                l.line, l.counted, l.var, l.trip_count, l.unroll_pragma
            )
        })
        .collect();
    expect![[r#"
            5 true Some("i") Some(16) unroll=true
            6 true Some("s") Some(8) unroll=false
            7 true Some("j") None unroll=false
            8 true Some("q") None unroll=false
            9 false None None unroll=false"#]]
    .assert_eq(&got.join("\n"));
    assert_eq!(f.holds("loop_without_unroll_pragma"), Some(true));

    let t = facts_of(
        Lang::Triton,
        r#"
import triton.language as tl
@triton.jit
def k(x_ptr, K: tl.constexpr):
    for k in range(0, 64, 16):
        pass
    for j in tl.static_range(3):
        pass
    for m in tl.range(0, K):
        pass
"#,
        None,
    );
    let got: Vec<String> = t
        .loops
        .iter()
        .map(|l| {
            format!(
                "{} {:?} {:?} unroll={}",
                l.line, l.var, l.trip_count, l.unroll_pragma
            )
        })
        .collect();
    expect![[r#"
            5 Some("k") Some(4) unroll=false
            7 Some("j") Some(3) unroll=true
            9 Some("m") None unroll=false"#]]
    .assert_eq(&got.join("\n"));
    assert_eq!(t.holds("loop_without_unroll_pragma"), Some(false));
}

#[test]
fn shared_memory_and_qualifiers() {
    let f = facts_of(
        Lang::Cuda,
        r#"
#define TILE 32
__global__ void __launch_bounds__(256) k(const float* __restrict__ a, float* b, float* c, float* d) {
    __shared__ float t[16][17];
    __shared__ double u[4];
    __shared__ float w[TILE];
    c[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
    foo(d);
}
"#,
        None,
    );
    assert_eq!(f.static_smem_bytes, 16 * 17 * 4 + 4 * 8);
    assert!(f.static_smem_unsized, "TILE is a macro: size unknown");
    assert!(!f.dynamic_smem);
    assert!(f.launch_bounds);
    assert!(!f.maxnreg);
    assert_eq!(f.pointers_without_restrict, ["b", "c", "d"]);
    // c is stored to, d escapes into unknown code: only b is provably read-only.
    assert_eq!(f.read_only_pointers_without_const, ["b"]);

    let g = facts_of(
            Lang::Cuda,
            "__global__ void g(float* o) { extern __shared__ float buf[]; buf[threadIdx.x] = 0; o[0] = buf[1]; }",
            None,
        );
    assert!(g.dynamic_smem);
    assert_eq!(g.holds("uses_shared_memory"), Some(true));
    assert_eq!(
        g.accesses.len(),
        1,
        "shared memory accesses are not global: {:?}",
        g.accesses
    );
}

#[test]
fn every_fact_has_a_phrase_and_a_value() {
    let f = Facts::default();
    for name in FACT_NAMES {
        assert!(f.holds(name).is_some(), "{name} is not computed");
        assert!(
            fact_phrase(name, true).is_some() && fact_phrase(name, false).is_some(),
            "{name}"
        );
    }
    assert_eq!(f.holds("no_such_fact"), None);
    assert_eq!(fact_phrase("no_such_fact", true), None);
}

#[test]
fn features_are_bounded_with_bias_first() {
    let mut f = facts_of(
        Lang::Cuda,
        include_str!("../../../../examples/matmul_naive.cu"),
        None,
    );
    f.set_resources(400, 16);
    f.set_timing(2.0, Some(3.0), Some(0.25));
    let x = f.features();
    assert_eq!(x.len(), FEATURE_DIM);
    assert_eq!(x[0], 1.0);
    assert!(x.iter().all(|v| (0.0..=1.0).contains(v)), "{x:?}");
    let named: Vec<String> = FEATURE_NAMES
        .iter()
        .zip(&x)
        .filter(|(_, v)| **v != 0.0)
        .map(|(n, v)| format!("{n}={v:.2}"))
        .collect();
    expect!["bias=1.00 block_2d=1.00 has_counted_loop=1.00 loop_over_global_memory=1.00 unit_stride_access=1.00 pointer_without_restrict=1.00 compute_bound=1.00 log_intensity=0.74 registers=1.00 has_spills=1.00 bw_fraction=1.00 flop_fraction=0.25"].assert_eq(&named.join(" "));
}

#[test]
fn measured_slots_move_the_roofline_facts() {
    let mut f = facts_of(
        Lang::Cuda,
        include_str!("../../../../examples/saxpy.cu"),
        None,
    );
    // No `flops` and no loop over global memory: a streaming kernel.
    assert_eq!(f.holds("memory_bound"), Some(true));
    assert_eq!(f.holds("far_from_roofline"), Some(false));
    f.set_timing(0.1, Some(0.3), None);
    assert_eq!(f.holds("far_from_roofline"), Some(true));
    f.set_resources(40, 0);
    assert_eq!(f.holds("register_limited_occupancy"), Some(true));
    assert_eq!(f.holds("has_spills"), Some(false));

    // matmul: 2*m*n*k FLOPs over 12 MiB is far above the ridge; a slow device
    // (tiny FMA rate) moves the ridge below it... and a huge one above it.
    let mut m = facts_of(
        Lang::Cuda,
        include_str!("../../../../examples/matmul_naive.cu"),
        None,
    );
    assert_eq!(m.holds("compute_bound"), Some(true));
    let dev = |copy_gbps: f64, fma_tflops: f64| DeviceFacts {
        name: "Test GPU".into(),
        sms: 132,
        smem_per_block: 48 * 1024,
        l2_bytes: 50 * 1024 * 1024,
        copy_gbps: Some(copy_gbps),
        fma_tflops: Some(fma_tflops),
    };
    m.set_device(dev(3000.0, 60.0));
    assert_eq!(m.holds("compute_bound"), Some(true));
    m.set_device(dev(1.0, 1000.0));
    assert_eq!(m.holds("memory_bound"), Some(true));
    assert!(m.describe().contains("- device: Test GPU (132 SMs, 48 KiB shared memory per block, 50 MiB L2, 1 GB/s copy, 1000.0 TFLOP/s FP32)"), "{}", m.describe());
}

#[test]
fn hostile_input_does_not_panic() {
    let deep = format!(
        "__global__ void k(float* x) {{ x[{}threadIdx.x{}] = 1; }}",
        "(".repeat(3000),
        ")".repeat(3000)
    );
    let f = facts_of(Lang::Cuda, &deep, None);
    assert_eq!(f.kernel, "k");
    let self_ref = "__global__ void k(float* x) { int a = b; int b = a; x[a] = 0; for (;;) {} }";
    let f = facts_of(Lang::Cuda, self_ref, None);
    assert_eq!(f.accesses.len(), 1);
    let recursive = "__device__ void h(float* p, int i) { h(p, i + 1); p[i] = 0; }\n__global__ void k(float* x) { h(x, threadIdx.x); }";
    let f = facts_of(Lang::Cuda, recursive, None);
    assert_eq!(f.accesses.len(), 1, "{:?}", f.accesses);
    // Doubling chains: linear, not 2^40 (pointer aliases, constants, Triton pointers).
    let mut chain = String::from("__global__ void k(float* x) { float* p0 = x; int c0 = 1;");
    let mut py = String::from("import triton\n@triton.jit\ndef k(x_ptr):\n    p0 = x_ptr\n");
    for i in 1..=40 {
        chain.push_str(&format!(
            " float* p{i} = p{j} + p{j}; int c{i} = c{j} + c{j};",
            j = i - 1
        ));
        py.push_str(&format!("    p{i} = p{j} + p{j}\n", j = i - 1));
    }
    chain.push_str(" p40[c40 + threadIdx.x] = 0; for (int i = 0; i < c40; i++) {} }");
    py.push_str("    tl.store(p40, 1)\n");
    let f = facts_of(Lang::Cuda, &chain, None);
    assert_eq!(f.accesses.len(), 1);
    let t = facts_of(Lang::Triton, &py, None);
    assert_eq!(t.accesses.len(), 1);
    let overflow = "__global__ void k(float* x) { for (long long i = -9223372036854775807 - 1; i < 0; i /= -1) {} }";
    let f = facts_of(Lang::Cuda, overflow, None);
    assert_eq!(f.loops.len(), 1);
}

/// Which kernels of the examples and fixtures each idiom fact picks out, one line per
/// kernel with the idiom facts that hold.
#[test]
fn idiom_facts_pick_out_their_shapes() {
    const IDIOMS: &[&str] = &[
        "thread_walks_a_row",
        "thread_walks_a_column",
        "scatter_atomics",
        "transposed_access",
        "matmul_like_loop",
        "program_grid_2d",
    ];
    const FILES: &[&str] = &[
        "examples/softmax_rows.cu",
        "examples/saxpy.cu",
        "examples/matmul_naive.cu",
        "examples/reduce_sum.cu",
        "examples/histogram.cu",
        "tests/fixtures/rewrites/rows/row_stats.cu",
        "tests/fixtures/rewrites/rows/refusals.cu",
        "tests/fixtures/rewrites/split/columns.cu",
        "examples/col_sum.cu",
        "examples/matvec_t.cu",
        "examples/col_max.cu",
        "examples/row_cumsum.cu",
        "examples/cross_entropy.cu",
        "examples/matvec.cu",
        "examples/sum_squares.cu",
        "examples/rms_norm.cu",
        "tests/fixtures/rewrites/cuda/stencil.cu",
        "tests/fixtures/rewrites/atomics/scatter.cu",
        "examples/transpose.cu",
        "tests/fixtures/rewrites/tiles/transposes.cu",
        "tests/fixtures/rewrites/tiles/flat_transposes.cu",
        "tests/fixtures/rewrites/tiles/matmuls.cu",
        "tests/fixtures/rewrites/tiles/batched_matmuls.cu",
        "examples/matmul.py",
        "examples/vector_add.py",
        "examples/softmax.py",
        "tests/fixtures/rewrites/triton/grid2d.py",
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = String::new();
    for file in FILES {
        let text = std::fs::read_to_string(root.join(file)).expect("fixture");
        let src = text.as_str();
        let lang = if file.ends_with(".py") {
            Lang::Triton
        } else {
            Lang::Cuda
        };
        let file = file.rsplit('/').next().unwrap_or(file);
        let doc = Document::new(lang, 0, src);
        let tree = doc.tree().expect("parses");
        let model = syntax::analyze(lang, src, tree);
        for k in &model.kernels {
            let f = static_facts(lang, src, tree, &model, k);
            let holding: Vec<&str> = IDIOMS
                .iter()
                .copied()
                .filter(|n| f.holds(n) == Some(true))
                .collect();
            out.push_str(&format!("{file} {}: {}\n", k.name, holding.join(", ")));
        }
    }
    expect![[r#"
        softmax_rows.cu softmax_rows: thread_walks_a_row
        saxpy.cu saxpy: 
        matmul_naive.cu matmul: matmul_like_loop
        reduce_sum.cu reduce_naive: 
        reduce_sum.cu reduce_tree: 
        histogram.cu histogram: scatter_atomics
        row_stats.cu row_sum_while: thread_walks_a_row
        row_stats.cu layer_norm: thread_walks_a_row
        row_stats.cu row_max_count: thread_walks_a_row
        row_stats.cu spmv_csr: thread_walks_a_row
        row_stats.cu spmv_ell_accumulate: thread_walks_a_row
        row_stats.cu col_major_row_max: thread_walks_a_column
        row_stats.cu offset_cumsum: thread_walks_a_row
        row_stats.cu layernorm_ldg: thread_walks_a_row
        row_stats.cu channel_moments: thread_walks_a_row
        row_stats.cu channel_max: thread_walks_a_row
        row_stats.cu row_group_sum: thread_walks_a_row
        row_stats.cu group_norm_long: thread_walks_a_row
        row_stats.cu row_sumsq_in_place: thread_walks_a_row
        refusals.cu prefix_rows: thread_walks_a_row
        refusals.cu smooth_rows: thread_walks_a_row
        refusals.cu permute_rows: thread_walks_a_row
        refusals.cu sum_until_negative: thread_walks_a_row
        columns.cu col_normalize: thread_walks_a_column
        columns.cu even_sum: thread_walks_a_column
        columns.cu col_count_prod: thread_walks_a_column
        columns.cu row_sum: thread_walks_a_row
        columns.cu ragged_sum: thread_walks_a_row
        columns.cu col_cumsum: thread_walks_a_column
        columns.cu maybe_sum: thread_walks_a_column
        col_sum.cu col_sum: thread_walks_a_column
        matvec_t.cu matvec_t: thread_walks_a_column
        col_max.cu col_max: thread_walks_a_column
        row_cumsum.cu row_cumsum: thread_walks_a_row
        cross_entropy.cu cross_entropy: thread_walks_a_row
        matvec.cu matvec: thread_walks_a_row
        sum_squares.cu sum_squares: 
        rms_norm.cu rms_norm: thread_walks_a_row
        stencil.cu stencil: thread_walks_a_row
        scatter.cu histogram_range: scatter_atomics
        scatter.cu segment_sum: scatter_atomics
        scatter.cu capped_histogram: scatter_atomics
        scatter.cu bucket_max: scatter_atomics
        scatter.cu wide_histogram: scatter_atomics
        scatter.cu bucket_append: scatter_atomics
        transpose.cu transpose: transposed_access
        transposes.cu scaled_transpose: transposed_access
        transposes.cu add_transposed: transposed_access
        transposes.cu batched_transpose: transposed_access
        transposes.cu copy2d: 
        transposes.cu permute_transpose: transposed_access
        transposes.cu symmetrize: transposed_access
        flat_transposes.cu transpose_flat: transposed_access
        flat_transposes.cu permute_021_flat: transposed_access
        flat_transposes.cu gather_transpose_flat: transposed_access
        flat_transposes.cu nchw_to_nhwc_flat: transposed_access
        flat_transposes.cu cat_dim1_flat: 
        flat_transposes.cu scatter_transpose_flat: transposed_access
        matmuls.cu gemm_nt: matmul_like_loop
        matmuls.cu min_plus: matmul_like_loop
        matmuls.cu gemm_tn_bias: matmul_like_loop
        matmuls.cu conv_rows: matmul_like_loop
        matmuls.cu ragged_rows: matmul_like_loop
        matmuls.cu matmul_loose: matmul_like_loop
        matmuls.cu linear_bias_relu: matmul_like_loop
        matmuls.cu gemm_accumulate: matmul_like_loop
        matmuls.cu gemm_row_pointer: matmul_like_loop
        matmuls.cu matmul_flat: thread_walks_a_column, matmul_like_loop
        matmuls.cu matmul_in_place: matmul_like_loop
        batched_matmuls.cu bmm_aliases: matmul_like_loop
        batched_matmuls.cu bmm_prelude: matmul_like_loop
        batched_matmuls.cu bmm_indexed: matmul_like_loop
        batched_matmuls.cu batched_linear: matmul_like_loop
        batched_matmuls.cu attention_scores: matmul_like_loop
        batched_matmuls.cu bmm_tn: matmul_like_loop
        batched_matmuls.cu bmm_thread_batch: 
        batched_matmuls.cu bmm_stacked_rows: matmul_like_loop
        batched_matmuls.cu summed_batches: matmul_like_loop
        matmul.py matmul_kernel: program_grid_2d
        vector_add.py add_kernel: 
        softmax.py softmax_kernel: 
        grid2d.py add_bias_2d: program_grid_2d
        grid2d.py uses_num_programs: program_grid_2d
        grid2d.py grid_from_sizes: program_grid_2d
        grid2d.py bmm_tiles: program_grid_2d
    "#]]
    .assert_eq(&out);
}

/// A profile decides the bound, spill and occupancy facts over the estimates, and its
/// diagnosis reaches the text the strategist and the coder see; the policy's context
/// vector follows the facts.
#[test]
fn a_profile_overrides_the_estimates_and_reaches_the_description() {
    let parse = |csv: &str| {
        let all = crate::profile::parse_raw_csv(csv).expect("the recorded profile parses");
        crate::profile::pick(&all).expect("a launch").clone()
    };
    let saxpy_profile = parse(include_str!("../../../../tests/fixtures/ncu/saxpy.csv"));
    let mut f = facts_of(
        Lang::Cuda,
        include_str!("../../../../examples/saxpy.cu"),
        None,
    );
    f.set_resources(40, 0);
    assert_eq!(
        f.holds("register_limited_occupancy"),
        Some(true),
        "estimated from 40 registers"
    );
    f.set_profile(saxpy_profile);
    assert_eq!(f.holds("memory_bound"), Some(true), "79% of DRAM peak");
    assert_eq!(
        f.holds("register_limited_occupancy"),
        Some(false),
        "the profile says warps limit the blocks, at 100% theoretical occupancy"
    );
    let d = f.describe();
    assert!(
        d.contains("- profile (Nsight Compute): memory-bound at 79% of DRAM peak"),
        "{d}"
    );
    assert!(
        d.contains("- profile numbers: DRAM 79% · SM 29% · occ 76% (warps)"),
        "{d}"
    );

    // The row softmax draft: a few blocks on a big GPU is not memory-bound, whatever the
    // roofline estimates say about its bytes.
    let softmax_profile = parse(include_str!(
        "../../../../tests/fixtures/ncu/softmax_rows.csv"
    ));
    let mut s = facts_of(
        Lang::Cuda,
        include_str!("../../../../examples/softmax_rows.cu"),
        None,
    );
    s.set_profile(softmax_profile.clone());
    assert_eq!(
        s.holds("memory_bound"),
        Some(false),
        "5% of DRAM, 36% of L2"
    );
    assert_eq!(s.holds("compute_bound"), Some(false), "1% of SM");
    assert!(
        s.describe()
            .contains("latency-bound: the grid fills 3% of one wave"),
        "{}",
        s.describe()
    );

    // The policy's context follows: saxpy's features with a latency-bound profile lose
    // the roofline's `memory_bound`.
    let mut g = facts_of(
        Lang::Cuda,
        include_str!("../../../../examples/saxpy.cu"),
        None,
    );
    let before = g.features();
    g.set_profile(softmax_profile);
    assert_ne!(g.features(), before, "the policy's context moved");
}

#[test]
fn reads_of_a_read_only_buffer_at_a_computed_element_keep_an_access_unit_stride() {
    let src = include_str!("../../../../tests/fixtures/rewrites/geometry/broadcasts.cu");
    let unit = |k: &str| facts_of(Lang::Cuda, src, Some(k)).holds("unit_stride_access");
    // A per-row scale, a per-channel bias, a table indexed by data: gathers that read.
    assert_eq!(unit("dequant_rows"), Some(true));
    assert_eq!(unit("bias_relu_nchw"), Some(true));
    assert_eq!(unit("lut_add"), Some(true));
    // The other element is of the buffer the kernel writes.
    assert_eq!(unit("halve_from_half"), Some(false));
}

/// `live ? col : 0` parks the threads past the end on element 0; the others move with
/// the lane, so the access is unit-stride (a lane-dependent choice between two moving
/// values stays unknown). Which launch axes each address depends on follows every
/// definition of its locals.
#[test]
fn a_clamped_index_moves_as_its_live_branch_and_addresses_know_their_axes() {
    let src = r#"// @bench rows = 64, 3; cols = 300, 7
// @bench x: in f32[rows, cols]; y: in f32[cols]; out: out f32[cols]
// @bench grid = (cdiv(cols, 32), 4); block = (32, 8)
__global__ void clamp_cols(const float* x, const float* y, float* out, int rows, int cols) {
    const bool live = (int)(blockIdx.x * blockDim.x + threadIdx.x) < cols;
    int col = live ? (blockIdx.x * blockDim.x + threadIdx.x) : 0;
    int odd = threadIdx.x % 2 ? col : 2 * col;
    float acc = 0.f;
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += gridDim.y * blockDim.y)
        acc += x[(size_t)r * cols + col] + y[odd];
    if (live) out[col] = acc;
}
"#;
    check_accesses(
        Lang::Cuda,
        src,
        expect![[r#"
            x [(size_t)r * cols + col]: Load Unit in-loop
            y [odd]: Load Unknown in-loop
            out [col]: Store Unit"#]],
    );
    let f = facts_of(Lang::Cuda, src, None);
    let axes: Vec<u8> = f.accesses.iter().map(|a| a.axes).collect();
    // x: the threads along x and y, the blocks along x and y; y and out: along x only.
    assert_eq!(axes, [1 | 2 | 8 | 16, 1 | 8, 1 | 8]);
    assert_eq!(
        read_once(&f),
        ["x"],
        "y is read by every row of threads and blocks"
    );
}

/// The stride along `threadIdx.y` is the same walk along the other thread axis: a
/// transposed read is a row apart along x and unit-stride along y, through locals,
/// casts and helpers alike; a Triton access has none.
#[test]
fn strides_along_y_tell_a_transposed_read_from_a_coalesced_one() {
    let src = r#"
__device__ float at(const float* p, int k) { return p[k]; }
__global__ void k(const float* x, const float* b, float* y, int n, int m) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    const size_t t = (size_t)j * n + i;
    y[i * n + j] = x[i * n + j] + x[t] + at(x, j * n + i + 1) + b[j * m + blockIdx.z] + x[j * n + 2 * i] + b[i];
}
"#;
    let f = facts_of(Lang::Cuda, src, None);
    let got: Vec<String> = f
        .accesses
        .iter()
        .map(|a| {
            format!(
                "{} [{}]: {:?} {:?}",
                a.buffer, a.index, a.stride, a.stride_y
            )
        })
        .collect();
    expect![[r#"
        y [i * n + j]: Unit Symbolic
        x [i * n + j]: Unit Symbolic
        x [t]: Symbolic Unit
        x [k]: Symbolic Unit
        b [j * m + blockIdx.z]: Symbolic Uniform
        x [j * n + 2 * i]: Symbolic Strided(2)
        b [i]: Uniform Unit"#]]
    .assert_eq(&got.join("\n"));
    let tri = facts_of(
        Lang::Triton,
        include_str!("../../../../examples/vector_add.py"),
        None,
    );
    assert!(tri.accesses.iter().all(|a| a.stride_y == Stride::Unknown));
}

#[test]
fn narrow_tiles_are_short_for_their_threads_on_many_programs() {
    // 64 floats on 4 warps: half a float a thread.
    assert!(narrow_tile(64, 4, 131072));
    // 256 on 4 warps is 2 a thread; 512 is 4: one 16-byte load each.
    assert!(narrow_tile(256, 4, 4096));
    assert!(!narrow_tile(512, 4, 4096));
    // One warp holds 64 at 2 a thread: still narrow.
    assert!(narrow_tile(64, 1, 4096));
    // Few programs: packing them would idle multiprocessors.
    assert!(!narrow_tile(64, 4, 1023));
    assert!(narrow_tile(64, 4, 1024));
}

#[test]
fn a_short_row_a_program_is_narrow_and_its_lane_extent_is_the_cases() {
    let src = "import triton\nimport triton.language as tl\n# @bench B = 16; S = 8192; D = 64\n# @bench x: in f32[B, S, D]; out: out f32[B, S]\n# @bench grid = (B, S); BLOCK_D = next_pow2(D)\n@triton.jit\ndef k(x, out, S, D, BLOCK_D: tl.constexpr):\n    b = tl.program_id(0)\n    s = tl.program_id(1)\n    offs = tl.arange(0, BLOCK_D)\n    v = tl.load(x + (b * S + s) * D + offs, mask=offs < D, other=0.0)\n    tl.store(out + b * S + s, tl.sum(v, axis=0) / D)\n";
    let f = facts_of(Lang::Triton, src, None);
    assert_eq!(f.lane_extent, Some(64));
    assert_eq!(f.holds("narrow_programs"), Some(true));
    // A loop over the row: the block is the loop's to size, not the programs'.
    let looped = src.replace(
        "    offs = tl.arange(0, BLOCK_D)\n    v = tl.load(x + (b * S + s) * D + offs, mask=offs < D, other=0.0)\n",
        "    v = tl.zeros([BLOCK_D], dtype=tl.float32)\n    for o in range(0, D, BLOCK_D):\n        offs = o + tl.arange(0, BLOCK_D)\n        v += tl.load(x + (b * S + s) * D + offs, mask=offs < D, other=0.0)\n",
    );
    assert_eq!(
        facts_of(Lang::Triton, &looped, None).holds("narrow_programs"),
        Some(false)
    );
    // A block the grid reads too: a wider block is fewer programs (the block knob's).
    let vector_add = include_str!("../../../../examples/vector_add.py");
    assert_eq!(
        facts_of(Lang::Triton, vector_add, None).lane_extent,
        Some(u64::MAX)
    );
    // An extent the case does not set is not known to be short.
    let unknown = src.replace("tl.arange(0, BLOCK_D)", "tl.arange(0, D)");
    assert_eq!(
        facts_of(Lang::Triton, &unknown, None).lane_extent,
        Some(u64::MAX)
    );
}

#[test]
fn a_team_of_blocks_per_row_steps_over_its_lanes() {
    let teams = include_str!("../../../../tests/fixtures/rewrites/vec_loops/teams.cu");
    let refusals = include_str!("../../../../tests/fixtures/rewrites/vec_loops/refusals.cu");
    for (src, kernel, want) in [
        (teams, "channel_sums_team", true),
        (teams, "row_sum_four_blocks", true),
        (teams, "scale_rows_y", true),
        (teams, "row_sum_half_pair", true),
        (refusals, "half_step", false),
        (refusals, "team_of_k", false),
    ] {
        let f = facts_of(Lang::Cuda, src, Some(kernel));
        assert_eq!(f.holds("loop_steps_over_lanes"), Some(want), "{kernel}");
    }
}

#[test]
fn a_block_loop_stepping_by_the_named_block_width_steps_over_its_lanes() {
    let src = "#define W 100\n// @bench rows = 64, 3; cols = 1000, 77\n// @bench x: in f32[rows, cols]; out: out f32[rows]\n// @bench grid = rows; block = W\n__global__ void k(const float* x, float* out, int rows, int cols) {\n    float acc = 0.0f;\n    for (int j = threadIdx.x; j < cols; j += W) acc += x[blockIdx.x * cols + j];\n    atomicAdd(&out[blockIdx.x], acc);\n}\n";
    let named = facts_of(Lang::Cuda, src, None);
    assert_eq!(named.holds("loop_steps_over_lanes"), Some(true));
    // W is not the width of a block of 128: its step is not the lanes'.
    let other = src.replace("block = W", "block = 128");
    let f = facts_of(Lang::Cuda, &other, None);
    assert_eq!(f.holds("loop_steps_over_lanes"), Some(false));
}

/// Locals declared again in a sibling block (`n` and `m` of a tile's load pass and its
/// store pass, each loop's own `k`) are different variables: each access reads the
/// declaration in scope, so the load pass is coalesced along x as written and the store
/// pass too, and a name shadowed in an inner block reads the inner one.
#[test]
fn a_name_declared_again_in_a_sibling_block_is_its_own_variable() {
    let src = r#"// @bench B = 4; M = 96; N = 64
// @bench x: in f32[B, M, N]; y: out f32[B, N, M]
// @bench grid = (cdiv(N, 32), cdiv(M, 32), B); block = (32, 8)
__global__ void tile_pass(const float* x, float* y, int M, int N) {
    __shared__ float tile[32][33];
    int b = blockIdx.z;
    for (int r = threadIdx.y; r < 32; r += 8) {
        int n = blockIdx.x * 32 + threadIdx.x;
        int m = blockIdx.y * 32 + r;
        if (m < M && n < N) tile[r][threadIdx.x] = x[(b * M + m) * N + n];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8) {
        int n = blockIdx.x * 32 + r;
        int m = blockIdx.y * 32 + threadIdx.x;
        {
            int r = 0;
            if (m < M && n < N) y[(b * N + n) * M + m + r] = tile[threadIdx.x][n % 32];
        }
    }
}
"#;
    check_accesses(
        Lang::Cuda,
        src,
        expect![[r#"
            x [(b * M + m) * N + n]: Load Unit in-loop
            y [(b * N + n) * M + m + r]: Store Unit in-loop"#]],
    );
    let f = facts_of(Lang::Cuda, src, None);
    assert_eq!(
        read_once(&f),
        ["x"],
        "each element of x is read by one thread"
    );
}
