use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const TRANSPOSE: &str = include_str!("../../../../../examples/transpose.cu");
const FIXTURES: &str = include_str!("../../../../../tests/fixtures/rewrites/tiles/transposes.cu");
const MATMUL: &str = include_str!("../../../../../examples/matmul_naive.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");

fn one(src: &str, kernel: &str) -> String {
    let out = rows8(src, kernel);
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, src, &out[0], kernel)
}

/// The candidates with `rows_per_pass` 8 alone.
fn rows8(src: &str, kernel: &str) -> Vec<crate::optimize::rewrite::Candidate> {
    cuda(
        src,
        kernel,
        "transpose_tile",
        json!({ "rows_per_pass": [8] }),
    )
    .unwrap_or_else(|e| panic!("{kernel}: {e}"))
}

/// The first candidate (block (32, 8)) of a kernel that also keeps its own block.
fn first(src: &str, kernel: &str) -> String {
    show(Lang::Cuda, src, &rows8(src, kernel)[0], kernel)
}

#[test]
fn a_transpose_is_staged_through_a_padded_tile() {
    let out = cuda(TRANSPOSE, "transpose", "transpose_tile", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "32x32 tile through shared memory, block (32, 8)",
            "32x32 tile through shared memory, block (32, 16)",
            "32x32 tile through shared memory, block (32, 4)"
        ]
    );
    expect![[r#"
        // @bench rows = 8192, 1000; cols = 4096, 333
        // @bench src: in f32[rows, cols]; dst: out f32[cols, rows]
        // @bench grid = (cdiv(cols, 32), cdiv(rows, 32)); block = (32, 8)
        extern "C" __global__ void transpose(const float* src, float* dst, int rows, int cols) {
            __shared__ float tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int col = blockIdx.x * 32 + threadIdx.x;
                int row = blockIdx.y * 32 + tile_row;
                if (row < rows && col < cols) {
                    tile[tile_row][threadIdx.x] = src[row * cols + col];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int col = blockIdx.x * 32 + tile_row;
                int row = blockIdx.y * 32 + threadIdx.x;
                if (row < rows && col < cols) dst[col * rows + row] = tile[threadIdx.x][tile_row];
            }
        }"#]]
    .assert_eq(&one(TRANSPOSE, "transpose"));
}

#[test]
fn an_early_return_and_locals_run_in_the_read_phase() {
    expect![[r#"
        // Doubles, an early return, the row index declared first, a scale and a bias per row.
        // @bench n = 1000, 77; m = 900, 130
        // @bench a: in f64[n, m]; bias: in f64[n]; at: out f64[m, n]
        // @bench alpha = 0.5
        // @bench grid = (cdiv(m, 32), cdiv(n, 32)); block = (32, 8)
        extern "C" __global__ void scaled_transpose(int n, int m, double alpha, const double* __restrict__ a,
                                                    const double* __restrict__ bias, double* __restrict__ at) {
            __shared__ double tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                const int j = blockIdx.x * 32 + threadIdx.x;
                const int i = blockIdx.y * 32 + tile_row;
                if (!(i >= n || j >= m)) {
                    double v = alpha * a[(size_t)i * m + j];
                    tile[tile_row][threadIdx.x] = v + bias[i];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                const int j = blockIdx.x * 32 + tile_row;
                const int i = blockIdx.y * 32 + threadIdx.x;
                if (!(i >= n || j >= m)) at[(size_t)j * n + i] = tile[threadIdx.x][tile_row];
            }
        }"#]].assert_eq(&one(FIXTURES, "scaled_transpose"));
}

#[test]
fn a_batch_index_and_a_plane_size_declared_before_the_check_stay_before_the_tiles() {
    expect![[r#"
        // A batch of transposes, the batch on grid z: its index and the plane's size declared
        // between the thread indices and the bounds check.
        // @bench batch = 3, 2; rows = 300, 33; cols = 200, 65
        // @bench a: in f32[batch, rows, cols]; b: out f32[batch, cols, rows]
        // @bench grid = (cdiv(cols, 32), cdiv(rows, 32), batch); block = (32, 8)
        extern "C" __global__ void batched_transpose(const float* a, float* b, int rows, int cols) {
            int z = blockIdx.z;
            const size_t plane = (size_t)rows * cols;
            __shared__ float tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int c = blockIdx.x * 32 + threadIdx.x;
                int r = blockIdx.y * 32 + tile_row;
                if (r < rows && c < cols) {
                    tile[tile_row][threadIdx.x] = a[z * plane + (size_t)r * cols + c];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int c = blockIdx.x * 32 + tile_row;
                int r = blockIdx.y * 32 + threadIdx.x;
                if (r < rows && c < cols) b[z * plane + (size_t)c * rows + r] = tile[threadIdx.x][tile_row];
            }
        }"#]].assert_eq(&one(FIXTURES, "batched_transpose"));
}

#[test]
fn indices_cast_to_a_wide_type_are_thread_indices() {
    let src = FIXTURES
        .replace(
            "int c = blockIdx.x * blockDim.x + threadIdx.x;",
            "const size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;",
        )
        .replace(
            "int r = blockIdx.y * blockDim.y + threadIdx.y;",
            "const size_t r = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y;",
        );
    assert_ne!(
        src, FIXTURES,
        "batched_transpose's indices moved; update this test"
    );
    let out = one(&src, "batched_transpose");
    assert!(
        out.contains("const size_t c = blockIdx.x * 32 + threadIdx.x;"),
        "{out}"
    );
}

#[test]
fn reads_down_columns_swap_the_phases() {
    expect![[r#"
        // The other way round: reads walk down a column, the write is coalesced; a sum of two
        // transposed inputs accumulated into the output.
        // @bench rows = 700, 33; cols = 500, 65
        // @bench p: in f32[cols, rows]; q: in f32[cols, rows]; out: inout f32[rows, cols]
        // @bench grid = (cdiv(cols, 32), cdiv(rows, 32)); block = (32, 8)
        extern "C" __global__ void add_transposed(const float* p, const float* q, float* out, int rows, int cols) {
            __shared__ float tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int x = blockIdx.x * 32 + tile_row;
                int y = blockIdx.y * 32 + threadIdx.x;
                if (x < cols && y < rows) {
                    tile[tile_row][threadIdx.x] = p[x * rows + y] + q[x * rows + y];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int x = blockIdx.x * 32 + threadIdx.x;
                int y = blockIdx.y * 32 + tile_row;
                if (x < cols && y < rows) out[y * cols + x] += tile[threadIdx.x][tile_row];
            }
        }"#]].assert_eq(&one(FIXTURES, "add_transposed"));
}

#[test]
fn what_a_tile_cannot_help_is_refused_with_the_reason() {
    let why = |src: &str, k: &str| not_applicable(cuda(src, k, "transpose_tile", json!({})));
    expect!["`permute_transpose` cannot be staged through a tile: the write `b[perm[c] * rows + r]` goes to an address that is not linear in the thread indices; that each element has its own cannot be told"].assert_eq(&why(FIXTURES, "permute_transpose"));
    expect!["`copy2d` cannot be staged through a tile: the read `a[r * cols + c]` and the write `b[r * cols + c]` are both coalesced along x; there is nothing to transpose"].assert_eq(&why(FIXTURES, "copy2d"));
    expect!["`symmetrize` cannot be staged through a tile: the body reads `a`, the buffer it writes; staged, it would read another element's old value"].assert_eq(&why(FIXTURES, "symmetrize"));
    expect!["`matmul` cannot be staged through a tile: `for (int i = 0; i < k; ++i)` loops inside the element's body"].assert_eq(&why(MATMUL, "matmul"));
    expect!["`saxpy` is not a 2-D one-thread-per-element kernel: `if (i < n) y[i] = a * x[i] + y[i];` comes before the thread indices; transpose_tile needs `int col = blockIdx.x * blockDim.x + threadIdx.x; int row = blockIdx.y * blockDim.y + threadIdx.y; if (row < m && col < n) { ... }` (or `if (row >= m || col >= n) return;`)"].assert_eq(&why(SAXPY, "saxpy"));
    let local = TRANSPOSE.replace(
        "dst[col * rows + row] = src[row * cols + col];",
        "int at = col * rows + row;\n        dst[at] = src[row * cols + col];",
    );
    assert_ne!(local, TRANSPOSE);
    // Arithmetic the second pass can repeat is staged (`a_write_through_locals_...`);
    // a local read from memory is not.
    let gathered = local.replace(
        "int at = col * rows + row;",
        "int at = col * rows + (int)src[row];",
    );
    assert_ne!(gathered, local);
    expect!["`transpose` cannot be staged through a tile: the write `dst[at]` names `at`, which the body computes from memory or changes; the second pass writes without the body"].assert_eq(&why(&gathered, "transpose"));
    let two = TRANSPOSE.replace(
        "dst[col * rows + row] = src[row * cols + col];",
        "dst[col * rows + row] = src[row * cols + col];\n        dst[0] = 1.0f;",
    );
    expect!["`transpose` cannot be staged through a tile: the body has 2 global stores; a tile stages exactly one"].assert_eq(&why(&two, "transpose"));
    let tunable = TRANSPOSE
        .replace(
            "block = (16, 16)",
            "block = (B, B)\n// @bench tune B in [16, 32]",
        )
        .replace(
            "cdiv(cols, 16), cdiv(rows, 16)",
            "cdiv(cols, B), cdiv(rows, B)",
        );
    expect!["`transpose` cannot be staged through a tile: `block = (B, B)` is not a 2-D block of literals"].assert_eq(&why(&tunable, "transpose"));
}

const READS: &str =
    include_str!("../../../../../tests/fixtures/rewrites/tiles/transposed_reads.cu");

#[test]
fn a_transposed_read_beside_coalesced_accesses_is_staged_alone() {
    let out = cuda(READS, "add_transpose", "transpose_tile", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "32x32 tiles of the transposed reads `x[j * N + i]` through shared memory, block (32, 8)",
            "32x32 tiles of the transposed reads `x[j * N + i]` through shared memory, block (32, 16)",
            "32x32 tiles of the transposed reads `x[j * N + i]` through shared memory, block (32, 4)",
            "16x16 tiles of the transposed reads `x[j * N + i]` through shared memory, block (16, 16), the kernel's own block"
        ]
    );
    expect![[r#"
        // x + x^T, as a first draft writes it: no extern "C", a 16x16 block.
        // @bench N = 4096, 333
        // @bench x: in f32[N, N]; y: out f32[N, N]
        // @bench grid = (cdiv(N, 32), cdiv(N, 32)); block = (32, 8)
        // @bench reference = torch: x + x.T
        __global__ void add_transpose(const float* x, float* y, int N) {
            __shared__ float x_tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks; `x[j * N + i]` of the block's elements
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int j = blockIdx.x * 32 + tile_row;
                int i = blockIdx.y * 32 + threadIdx.x;
                if (i < N && j < N) {
                    x_tile[tile_row][threadIdx.x] = x[j * N + i];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                int j = blockIdx.x * 32 + threadIdx.x;
                int i = blockIdx.y * 32 + tile_row;
                if (i < N && j < N) {
                    y[i * N + j] = x[i * N + j] + x_tile[threadIdx.x][tile_row];
                }
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, READS, &out[0], "add_transpose"));
    // The kernel's own block keeps its grid.
    assert!(out[3]
        .text
        .contains("grid = (cdiv(N, 16), cdiv(N, 16)); block = (16, 16)"));
    assert!(out[3].text.contains("__shared__ float x_tile[16][16 + 1];"));
    // Fewer rows a pass: each thread moves 8 elements of the tile.
    assert!(
        out[2].text.contains("tile_pass < 32; tile_pass += 4)"),
        "{}",
        out[2].text
    );
}

#[test]
fn locals_a_transposed_index_needs_are_declared_in_the_load_pass() {
    expect![[r#"
        // Another buffer transposed, its index computed in locals first (one through another).
        // @bench n = 1024, 333
        // @bench p: in f32[n, n]; q: in f32[n, n]; out: out f32[n, n]
        // @bench grid = (cdiv(n, 32), cdiv(n, 32)); block = (32, 8)
        extern "C" __global__ void sub_transposed(const float* p, const float* q, float* out, int n) {
            __shared__ float q_tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks; `q[t]` of the block's elements
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                unsigned j = blockIdx.x * 32 + tile_row;
                unsigned i = blockIdx.y * 32 + threadIdx.x;
                if (i < n && j < n) {
                    const size_t base = (size_t)j * n;
                    const size_t t = base + i;
                    q_tile[tile_row][threadIdx.x] = q[t];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                unsigned j = blockIdx.x * 32 + threadIdx.x;
                unsigned i = blockIdx.y * 32 + tile_row;
                if (i < n && j < n) {
                    const size_t base = (size_t)j * n;
                    const size_t t = base + i;
                    // q[j][i]
                    float d = p[(size_t)i * n + j] - q_tile[threadIdx.x][tile_row];
                    out[(size_t)i * n + j] = d;
                }
            }
        }"#]]
    .assert_eq(&first(READS, "sub_transposed"));
    let assigned = READS.replace(
        "const size_t t = base + i;  // q[j][i]",
        "size_t t = base + i - 1;\n        ++t;",
    );
    assert_ne!(assigned, READS);
    let why = not_applicable(cuda(
        &assigned,
        "sub_transposed",
        "transpose_tile",
        json!({}),
    ));
    expect!["`sub_transposed` cannot be staged through a tile: `++t;` assigns `t`, which a transposed read's index needs; the tile is loaded before the body runs"].assert_eq(&why);
}

#[test]
fn shifted_transposed_reads_are_tiles_of_their_own_and_a_batch_stays_before_them() {
    let diff = first(READS, "diff_transposed");
    assert!(
        diff.contains("x_tile[tile_row][threadIdx.x] = x[j * L + i + 1];"),
        "{diff}"
    );
    assert!(
        diff.contains("x_tile_2[tile_row][threadIdx.x] = x[j * L + i];"),
        "{diff}"
    );
    assert!(diff.contains(
        "d[i * W + j] = g[i * W + j] * (x_tile[threadIdx.x][tile_row] - x_tile_2[threadIdx.x][tile_row]);"
    ));
    let permute = first(READS, "nhwc_to_nchw_residual");
    assert!(permute.contains(
        "    int n = blockIdx.z;\n    const size_t plane = (size_t)C * P;\n    __shared__ float in_tile"
    ), "{permute}");
    assert!(permute.contains("grid = (cdiv(P, 32), cdiv(C, 32), batch); block = (32, 8)"));
    // All of a body's reads transposed: the whole body is staged, one tile.
    assert!(!one(FIXTURES, "add_transposed").contains("p_tile"));
}

#[test]
fn what_staging_transposed_reads_cannot_help_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(READS, k, "transpose_tile", json!({})));
    expect!["`symmetrize_in_place` cannot be staged through a tile: the transposed read `a[j * n + i]` reads `a`, which the kernel writes: another block may already have written that element (a race across blocks)"].assert_eq(&why("symmetrize_in_place"));
    expect!["`scale_by_batch_column` cannot be staged through a tile: the read `s[c * batch + b]` is a stride apart along x and the same element along y: the block does not tile the axis it walks, so no tile loads it coalesced"].assert_eq(&why("scale_by_batch_column"));
    expect!["`from_upper` cannot be staged through a tile: the transposed read `a[j * n + i]` is under a condition; a tile would read it where the body does not"].assert_eq(&why("from_upper"));
    expect!["`sum_transposes` cannot be staged through a tile: `for (int m = 0; m < k; ++m) acc += x[(m * n + j) * n + i];` loops inside the element's body"].assert_eq(&why("sum_transposes"));
    let gathered = READS.replace(
        "const size_t t = base + i;  // q[j][i]",
        "const size_t t = base + (size_t)p[i];",
    );
    let why = not_applicable(cuda(
        &gathered,
        "sub_transposed",
        "transpose_tile",
        json!({}),
    ));
    assert!(
        why.contains("`q[t]` is a stride apart along x and not linear along y"),
        "{why}"
    );
}

const FLAT: &str = include_str!("../../../../../tests/fixtures/rewrites/tiles/flat_transposes.cu");

#[test]
fn a_write_through_locals_of_the_body_repeats_them_in_the_second_pass() {
    let local = TRANSPOSE.replace(
        "dst[col * rows + row] = src[row * cols + col];",
        "int at = col * rows + row;\n        dst[at] = src[row * cols + col];",
    );
    let out = one(&local, "transpose");
    assert!(
        out.contains(
            "        if (row < rows && col < cols) {\n            int at = col * rows + row;\n            dst[at] = tile[threadIdx.x][tile_row];\n        }"
        ),
        "{out}"
    );
}

#[test]
fn a_flat_transpose_or_permute_is_tiled_after_a_2d_launch() {
    let labels_of = |k: &str| -> Vec<String> {
        labels(&rows8(FLAT, k))
            .into_iter()
            .map(String::from)
            .collect()
    };
    for k in [
        "transpose_flat",
        "permute_021_flat",
        "gather_transpose_flat",
    ] {
        assert_eq!(
            labels_of(k),
            ["2-D launch, block (128, 2), 2 rows per block, then 32x32 tile through shared memory, block (32, 8)"],
            "{k}"
        );
    }
    // The batch folded into the row: the second pass splits each element's row again,
    // so a tile of rows that crosses a batch writes each row to its own batch.
    expect![[r#"
        // x.permute(0, 2, 1) of a [B, M, N] tensor with size_t indices and the batch folded into
        // the flat index; M odd in the second case, so a tile of rows crosses a batch.
        // @bench B = 4, 3; M = 512, 301; N = 256, 77
        // @bench x: in f32[B, M, N]; y: out f32[B, N, M]
        // @bench grid = (cdiv(N, 32), cdiv(B * M, 32)); block = (32, 8)
        __global__ void permute_021_flat(const float* __restrict__ x, float* __restrict__ y, size_t B,
                                         size_t M, size_t N) {
            __shared__ float tile[32][32 + 1];  // + 1: the column-wise reads below hit 32 banks
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                size_t n = blockIdx.x * 32 + threadIdx.x;
                size_t row = blockIdx.y * 32 + tile_row;
                if (n < N && row < B * M) {
                    size_t m = (row) % M;
                    size_t b = (row) / ((size_t)M);
                    tile[tile_row][threadIdx.x] = x[row * N + n];
                }
            }
            __syncthreads();
            #pragma unroll
            for (int tile_pass = 0; tile_pass < 32; tile_pass += 8) {
                const int tile_row = threadIdx.y + tile_pass;
                size_t n = blockIdx.x * 32 + tile_row;
                size_t row = blockIdx.y * 32 + threadIdx.x;
                if (n < N && row < B * M) {
                    size_t m = (row) % M;
                    size_t b = (row) / ((size_t)M);
                    y[(b * N + n) * M + m] = tile[threadIdx.x][tile_row];
                }
            }
        }"#]]
    .assert_eq(&first(FLAT, "permute_021_flat"));
    // Only the transposed read is staged where the write is the thread's own element.
    assert!(labels_of("nchw_to_nhwc_flat")[0]
        .contains("tiles of the transposed reads `x[(n * C + c) * HW + p]`"));
}

#[test]
fn a_flat_kernel_with_nothing_to_transpose_is_refused_with_the_2d_reason() {
    let why = |k: &str| not_applicable(cuda(FLAT, k, "transpose_tile", json!({})));
    let cat = why("cat_dim1_flat");
    assert!(cat.ends_with("as a 2-D launch (`delinearize`) it is refused too: `cat_dim1_flat` cannot be staged through a tile: the read `a[r * A + c]` and the write `y[row * ((A + Bc)) + col]` are both coalesced along x; there is nothing to transpose"), "{cat}");
    let scatter = why("scatter_transpose_flat");
    assert!(scatter.ends_with("the write `dst[to]` names `to`, which the body computes from memory or changes; the second pass writes without the body"), "{scatter}");
}
