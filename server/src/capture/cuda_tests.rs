//! CUDA capture fixtures: the shim's records (as it writes them) against kernels parsed from
//! CUDA sources in several styles, through `resolve` and the one inference to statements.

use super::*;
use crate::capture::infer::infer;
use crate::capture::record::parse_lines;

const SRC: &str = r#"#include <torch/extension.h>

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void row_scale(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) y[r * cols + c] = x[r * cols + c] * 2.0f;
}

template <int BLOCK>
__global__ void block_sum(const double* x, double* out, long long n) {
    extern __shared__ double s[];
    s[threadIdx.x] = blockIdx.x * BLOCK + threadIdx.x < n ? x[blockIdx.x * BLOCK + threadIdx.x] : 0.0;
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

template <typename T>
__global__ void add(const T* a, T* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] += a[i];
}

__global__ void gather(const float* src, const int* idx, float* out, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m) out[i] = src[idx[i]];
}

torch::Tensor run(torch::Tensor x) { return x; }
"#;

fn sources() -> Vec<SourceKernel> {
    kernels_of("/p/ext.cu", SRC)
}

fn hex_i32(v: i32) -> String {
    v.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_f32(v: f32) -> String {
    v.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn ptr(id: u32, size: u64, offset: u64, written: bool, read: bool) -> String {
    format!(
        r#"{{"offset":0,"size":8,"hex":"0000a0b0c0000000","alloc":{{"id":{id},"size":{size},"range_size":{size},"offset":{offset},"written":{written},"read":{read}}}}}"#
    )
}

/// A pointer whose allocation had `ranges` (JSON members) before the launch.
fn ptr_ranged(id: u32, size: u64, written: bool, ranges: &str) -> String {
    format!(
        r#"{{"offset":0,"size":8,"hex":"0000a0b0c0000000","alloc":{{"id":{id},"size":{size},"range_size":{size},"offset":0,"written":{written},"read":false,"ranges":{{{ranges}}}}}}}"#
    )
}

fn scalar(hex: &str) -> String {
    format!(r#"{{"offset":0,"size":{},"hex":"{hex}"}}"#, hex.len() / 2)
}

fn record(symbol: &str, grid: [u64; 3], block: [u64; 3], smem: u64, params: &[String]) -> String {
    format!(
        r#"{{"cuda":true,"kernel":"{symbol}","grid":{grid:?},"block":{block:?},"smem":{smem},"params":[{}]}}"#,
        params.join(",")
    )
}

/// Statements for every kernel the records name, or the refusal.
fn specs(lines: &[String]) -> Vec<(String, Result<Vec<String>, String>)> {
    let r = parse_lines(&lines.join("\n"));
    assert_eq!(r.bad_lines, 0, "fixture lines parse");
    let (launches, _) = resolve(&r.cuda, &r.cuda_counts, &sources());
    let mut names: Vec<String> = launches.iter().map(|l| l.kernel.clone()).collect();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            let of: Vec<&Launch> = launches.iter().filter(|l| l.kernel == n).collect();
            (n, infer(&of, 4, true).map(|i| i.lines))
        })
        .collect()
}

fn one(lines: &[String]) -> Result<Vec<String>, String> {
    let mut all = specs(lines);
    assert_eq!(all.len(), 1, "one kernel: {all:?}");
    all.remove(0).1
}

#[test]
fn extern_c_elementwise_sizes_from_n_and_a_cdiv_grid_by_the_block() {
    let rec = record(
        "saxpy",
        [17, 1, 1],
        [256, 1, 1],
        0,
        &[
            scalar(&hex_i32(4099)),
            scalar(&hex_f32(2.5)),
            ptr(0, 4099 * 4, 0, false, false),
            ptr(1, 4099 * 4, 0, true, true),
        ],
    );
    let lines = one(&[rec]).expect("a spec");
    assert_eq!(
        lines,
        vec![
            "n = 4099, 4097",
            "a = 2.5",
            "x: in f32[n]",
            "y: inout f32[n]",
            "grid = cdiv(n, 256)",
            "block = 256",
        ]
    );
}

#[test]
fn mangled_2d_kernel_gets_rows_and_cols_shapes_and_an_out_role() {
    let (rows, cols) = (37u64, 100u64);
    let rec = record(
        "_Z9row_scalePKfPfii",
        [7, 3, 1],
        [16, 16, 1],
        0,
        &[
            ptr(0, rows * cols * 4, 0, false, false),
            ptr(1, rows * cols * 4, 0, true, false),
            scalar(&hex_i32(rows as i32)),
            scalar(&hex_i32(cols as i32)),
        ],
    );
    let lines = one(&[rec]).expect("a spec");
    assert_eq!(
        lines,
        vec![
            "rows = 37, 35",
            "cols = 100, 99",
            "x: in f32[rows, cols]",
            "y: out f32[rows, cols]",
            "grid = (cdiv(cols, 16), cdiv(rows, 16))",
            "block = (16, 16)",
        ]
    );
}

#[test]
fn integer_template_argument_names_the_block_and_smem_is_kept() {
    let n = 10_000i64;
    let rec = record(
        "_Z9block_sumILi256EEvPKdPdx",
        [40, 1, 1],
        [256, 1, 1],
        2048,
        &[
            ptr(0, n as u64 * 8, 0, false, false),
            ptr(1, 40 * 8, 0, true, false),
            scalar(
                &n.to_le_bytes()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
            ),
        ],
    );
    let lines = one(&[rec]).expect("a spec");
    assert!(lines.contains(&"BLOCK = 256".to_string()), "{lines:?}");
    assert!(lines.contains(&"x: in f64[n]".to_string()), "{lines:?}");
    assert!(
        lines.contains(&"grid = cdiv(n, BLOCK)".to_string()),
        "{lines:?}"
    );
    assert!(lines.contains(&"block = BLOCK".to_string()), "{lines:?}");
    assert!(lines.contains(&"smem = 2048".to_string()), "{lines:?}");
}

#[test]
fn a_pointer_into_the_middle_of_an_allocation_reaches_its_end() {
    let rec = record(
        "saxpy",
        [1, 1, 1],
        [128, 1, 1],
        0,
        &[
            scalar(&hex_i32(100)),
            scalar(&hex_f32(1.0)),
            ptr(0, 200 * 4, 100 * 4, false, false),
            ptr(1, 100 * 4, 0, true, false),
        ],
    );
    let lines = one(&[rec]).expect("a spec");
    assert!(lines.contains(&"x: in f32[n]".to_string()), "{lines:?}");
    assert!(lines.contains(&"y: out f32[n]".to_string()), "{lines:?}");
}

#[test]
fn refusals_name_the_reason() {
    let add = record(
        "_Z3addIfEvPKT_PS0_i",
        [1, 1, 1],
        [256, 1, 1],
        0,
        &[
            ptr(0, 64, 0, false, false),
            ptr(1, 64, 0, true, true),
            scalar(&hex_i32(16)),
        ],
    );
    let err = one(&[add]).expect_err("a type template is refused");
    assert!(
        err.contains("template parameter `T` is the type `float`"),
        "{err}"
    );

    let alias = record(
        "saxpy",
        [1, 1, 1],
        [256, 1, 1],
        0,
        &[
            scalar(&hex_i32(16)),
            scalar(&hex_f32(1.0)),
            ptr(3, 128, 0, true, true),
            ptr(3, 128, 64, true, true),
        ],
    );
    let err = one(&[alias]).expect_err("aliasing is refused");
    assert!(
        err.contains("`x` and `y` point into the same allocation"),
        "{err}"
    );

    let null = record(
        "saxpy",
        [1, 1, 1],
        [256, 1, 1],
        0,
        &[
            scalar(&hex_i32(16)),
            scalar(&hex_f32(1.0)),
            scalar("0000000000000000"),
            ptr(1, 64, 0, true, true),
        ],
    );
    let err = one(&[null]).expect_err("a null pointer is refused");
    assert!(err.contains("`x` is a null pointer"), "{err}");

    let stranger = record(
        "_Z7unknownPf",
        [1, 1, 1],
        [32, 1, 1],
        0,
        &[ptr(0, 4, 0, true, false)],
    );
    let err = one(&[stranger]).expect_err("a kernel outside the sources is refused");
    assert!(err.contains("no __global__ kernel `unknown`"), "{err}");

    let other_build = record("saxpy", [1, 1, 1], [32, 1, 1], 0, &[scalar(&hex_i32(3))]);
    let err = one(&[other_build]).expect_err("a parameter count mismatch is refused");
    assert!(
        err.contains("has 1 parameters; the source's has 4"),
        "{err}"
    );
}

#[test]
fn shim_refusals_and_counts_carry_through() {
    let text = format!(
        "{}\n{}\n",
        r#"{"cuda":true,"kernel":"saxpy","grid":[1,1,1],"block":[32,1,1],"smem":0,"refused":"its buffers are larger than the capture's byte cap","params":[]}"#,
        r#"{"cuda_summary":[{"kernel":"saxpy","launches":9},{"kernel":"_Z7unknownPf","launches":2}],"pid":1}"#
    );
    let r = parse_lines(&text);
    let (launches, counts) = resolve(&r.cuda, &r.cuda_counts, &sources());
    assert_eq!(
        launches[0].refused.as_deref(),
        Some("its buffers are larger than the capture's byte cap")
    );
    assert_eq!(launches[0].file, "/p/ext.cu");
    assert_eq!(
        counts.len(),
        1,
        "only the project's kernels are counted: {counts:?}"
    );
    assert_eq!(
        (counts[0].kernel.as_str(), counts[0].launches),
        ("saxpy", 9)
    );
}

#[test]
fn shapes_from_integer_arguments() {
    let ints = |v: &[u64]| -> Vec<(String, u64)> {
        v.iter()
            .enumerate()
            .map(|(i, x)| (format!("a{i}"), *x))
            .collect()
    };
    assert_eq!(shape_for(12, &ints(&[12, 3])), vec![12]);
    assert_eq!(shape_for(12, &ints(&[3, 4])), vec![3, 4]);
    assert_eq!(shape_for(60, &ints(&[3, 4, 5])), vec![3, 4, 5]);
    assert_eq!(shape_for(61, &ints(&[3, 4, 5])), vec![61]);
    assert_eq!(
        shape_for(4, &ints(&[1, 4])),
        vec![4],
        "1 never makes a dimension"
    );
}

#[test]
fn input_distributions_come_from_the_range_read_as_the_signatures_type() {
    let rec = record(
        "_Z6gatherPKfPKiPfi",
        [1, 1, 1],
        [64, 1, 1],
        0,
        &[
            ptr_ranged(
                0,
                100 * 4,
                false,
                r#""f32":[-2.5,3.0],"i32":[-1075838976,1077936128]"#,
            ),
            ptr_ranged(1, 37 * 4, false, r#""f32":[0.0,1.3e-43],"i32":[0,99]"#),
            ptr_ranged(2, 37 * 4, true, r#""f32":[0.0,0.0]"#),
            scalar(&hex_i32(37)),
        ],
    );
    let lines = one(&[rec]).expect("a spec");
    assert!(
        lines.contains(&"src: in f32[src_d0] ~ uniform(-2.500, 3.000)".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"idx: in i32[m] ~ randint(0, 100)".to_string()),
        "an index buffer keeps its captured range: {lines:?}"
    );
    assert!(
        lines.contains(&"out: out f32[m]".to_string()),
        "an output gets no distribution: {lines:?}"
    );
}
