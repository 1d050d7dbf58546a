use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{assert_has, cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const REMAPS: &str = include_str!("../../../../../tests/fixtures/rewrites/lanes/remaps.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");

#[test]
fn a_block_does_the_work_of_v_blocks_along_x() {
    let out = cuda(REMAPS, "scale_cols", "block_coarsen", json!({"parts": [4]})).unwrap();
    assert_eq!(labels(&out), ["4 blocks' work per block along x"]);
    expect![[r#"
        // Already coalesced: the lane walks columns. Must be refused.
        // @bench rows = 2048, 33; cols = 2048, 65
        // @bench x: in f32[rows, cols]; y: out f32[rows, cols]
        // @bench grid = (cdiv(cols, 4 * 32), cdiv(rows, 8)); block = (32, 8)
        __global__ void scale_cols(const float* x, float* y, int rows, int cols) {
            #pragma unroll
            for (unsigned part = 0; part < 4; ++part) {
                const unsigned block_x = blockIdx.x * 4 + part;
                int c = block_x * blockDim.x + threadIdx.x;
                int r = blockIdx.y * blockDim.y + threadIdx.y;
                if (r < rows && c < cols) y[r * cols + c] = 2.0f * x[r * cols + c];
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, REMAPS, &out[0], "scale_cols"));
}

#[test]
fn early_returns_end_only_their_part() {
    let out = cuda(
        REMAPS,
        "blend_helper",
        "block_coarsen",
        json!({"parts": [2]}),
    )
    .unwrap();
    let text = show(Lang::Cuda, REMAPS, &out[0], "blend_helper");
    assert!(
        text.contains("if (i >= (size_t)m || j >= (size_t)n) continue;"),
        "{text}"
    );
    assert!(
        text.contains("grid = (cdiv(m, 2 * 32), cdiv(n, 8))"),
        "{text}"
    );
    let out = cuda(SAXPY, "saxpy", "block_coarsen", json!({})).unwrap();
    assert_eq!(out.len(), 3, "{:?}", labels(&out));
}

#[test]
fn shared_memory_warp_code_grid_strides_and_nested_returns_are_refused() {
    let why = not_applicable(cuda(REMAPS, "neighbour_diff", "block_coarsen", json!({})));
    assert!(why.contains("warp-level code"), "{why}");
    let reduce = include_str!("../../../../../examples/reduce_sum.cu");
    let why = not_applicable(cuda(reduce, "reduce_tree", "block_coarsen", json!({})));
    assert!(why.contains("shared memory"), "{why}");
    // A grid of 80 blocks takes several trips over the data (a grid that covers it is
    // read as a bounds check; `grid_covers`).
    let strided = SAXPY
        .replace(
            "int i = blockIdx.x * blockDim.x + threadIdx.x;",
            "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)",
        )
        .replace("grid = cdiv(n, 256)", "grid = cdiv(80 * 256, 256)");
    if strided != SAXPY {
        let why = not_applicable(cuda(&strided, "saxpy", "block_coarsen", json!({})));
        assert!(why.contains("gridDim.x"), "{why}");
    }
    let nested = REMAPS.replace(
        "        s += img[y * w + xx];",
        "        if (xx < 0) return;\n        s += img[y * w + xx];",
    );
    let why = not_applicable(cuda(&nested, "row_window", "block_coarsen", json!({})));
    assert!(why.contains("`return` inside a loop"), "{why}");
}

const ROWS: &str = include_str!("../../../../../tests/fixtures/rewrites/coarsen/rows.cu");

#[test]
fn few_blocks_along_x_and_a_row_a_block_along_y_coarsen_the_rows() {
    let out = cuda(ROWS, "outer_scaled", "block_coarsen", json!({"parts": [4]})).unwrap();
    assert_eq!(labels(&out), ["4 blocks' work per block along y"]);
    expect![[r#"
        // An outer product scaled: 4 blocks of 256 along a row, a row a block along y.
        // @bench M = 4096, 77; N = 1024, 999
        // @bench a: in f32[M]; b: in f32[N]; out: out f32[M, N]
        // @bench alpha = 0.5
        // @bench grid = (cdiv(N, 256), cdiv(M, 4)); block = 256
        __global__ void outer_scaled(const float* a, const float* b, float* out, int M, int N,
                                     float alpha) {
            #pragma unroll
            for (unsigned part = 0; part < 4; ++part) {
                const unsigned block_y = blockIdx.y * 4 + part;
                if (block_y >= (unsigned)(M)) break; // past the grid's last block
                int j = blockIdx.x * blockDim.x + threadIdx.x;
                int i = block_y;
                if (j >= N) continue;
                out[(size_t)i * N + j] = alpha * a[i] * b[j];
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, ROWS, &out[0], "outer_scaled"));
    // Two blocks along x, 4096 rows: y, bounded by the product of two parameters.
    let out = cuda(ROWS, "add_row_bias", "block_coarsen", json!({})).unwrap();
    assert_has(
        &show(Lang::Cuda, ROWS, &out[2], "add_row_bias"),
        &[
            "grid = (cdiv(D, 512), cdiv(B * H, 8))",
            "if (block_y >= (unsigned)(B * H)) break;",
            "size_t row = block_y;",
        ],
    );
}

#[test]
fn a_row_count_the_kernel_cannot_read_is_not_coarsened() {
    let why = not_applicable(cuda(ROWS, "copy_rows", "block_coarsen", json!({})));
    expect!["`copy_rows`'s blocks cannot be coarsened: grid y `rows` has no division (`cdiv(X, B)`) to make 2 times coarser, nor is it made of the kernel's integer parameters"].assert_eq(&why);
}

#[test]
fn the_axis_is_x_unless_it_has_a_handful_of_blocks_and_y_has_more() {
    use super::{axis_for, Axis};
    assert_eq!(axis_for([4, 8192, 1], 8), Axis::Y);
    assert_eq!(axis_for([16, 256, 1], 8), Axis::X);
    assert_eq!(axis_for([4, 2, 1], 8), Axis::X);
    assert_eq!(axis_for([65536, 1, 1], 8), Axis::X);
}
