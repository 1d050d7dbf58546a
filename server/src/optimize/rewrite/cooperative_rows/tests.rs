use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{assert_has, cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const SOFTMAX: &str = include_str!("../../../../../examples/softmax_rows.cu");
const ROWS: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/row_stats.cu");
const REFUSALS: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/refusals.cu");
const MATMUL: &str = include_str!("../../../../../examples/matmul_naive.cu");
const SAXPY: &str = include_str!("../../../../../examples/saxpy.cu");

fn one(src: &str, kernel: &str, mode: &str) -> String {
    let params = json!({ "modes": [mode], "block_threads": [256], "walk_tile": [1] });
    let out =
        cuda(src, kernel, "cooperative_rows", params).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, src, &out[0], kernel)
}

#[test]
fn softmax_becomes_a_warp_per_row_with_lane_strided_passes() {
    let out = cuda(SOFTMAX, "softmax_rows", "cooperative_rows", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "warp per row (block 128)",
            "warp per row, 4 columns a lane (block 128)",
            "warp per row, 8 columns a lane (block 128)",
            "2 rows per warp (block 128)",
            "4 rows per warp (block 128)",
            "block per row (128 threads)",
            "block per row (256 threads)",
            "warp per row, `x`, `y` in registers (32 per lane; block 128)",
            "block per row, `x`, `y` in registers (8 per lane; 128 threads)",
            "block per row, `x`, `y` in registers (4 per lane; 256 threads)"
        ]
    );
    expect![[r#"
        // @bench rows = 8192, 37; cols = 1024, 100
        // @bench x: in f32[rows, cols]; y: out f32[rows, cols]
        // @bench grid = cdiv(rows, 4); block = 128
        // @bench atol = 1e-6; rtol = 1e-4
        extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
            int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
            int lane = threadIdx.x % 32;
            if (row < rows) {
                const float* in = x + (size_t)row * cols;
                float* out = y + (size_t)row * cols;
                float m = in[0];
                for (int c = 1 + lane; c < cols; c += 32)
                    m = fmaxf(m, in[c]);
                for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
                float sum = 0.0f;
                for (int c = lane; c < cols; c += 32) {
                    float e = expf(in[c] - m);
                    out[c] = e;
                    sum += e;
                }
                for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
                for (int c = lane; c < cols; c += 32)
                    out[c] /= sum;
            }
        }"#]].assert_eq(&one(SOFTMAX, "softmax_rows", "warp"));
}

#[test]
fn short_rows_share_a_warp_and_name_only_active_rows_in_the_shuffle_mask() {
    expect![[r#"
        // Layer norm in three passes: mean, variance, normalize; per-column writes through a
        // dereferenced pointer, per-column parameters gamma and beta.
        // @bench rows = 2048, 7; cols = 768, 45
        // @bench x: in f32[rows, cols]; gamma: in f32[cols]; beta: in f32[cols]; y: out f32[rows, cols]
        // @bench eps = 1e-5
        // @bench grid = cdiv(rows, 8); block = 64
        // @bench atol = 1e-4; rtol = 1e-3
        extern "C" __global__ void layer_norm(int rows, int cols, float eps, const float* x,
                                              const float* gamma, const float* beta, float* y) {
            int row = (blockIdx.x * blockDim.x + threadIdx.x) / 8;
            int lane = threadIdx.x % 8;
            // each 8 lanes share a row; the shuffles name only lanes whose row exists
            unsigned mask = __ballot_sync(0xffffffff, row < rows);
            if (row < rows) {
                float mean = 0.0f;
                for (int c = lane; c < cols; c += 8) mean += x[row * cols + c];
                for (int offset = 4; offset > 0; offset /= 2) mean += __shfl_xor_sync(mask, mean, offset);
                mean /= cols;
                float var = 0.0f;
                for (int c = lane; c < cols; c += 8) {
                    float d = x[row * cols + c] - mean;
                    var += d * d;
                }
                for (int offset = 4; offset > 0; offset /= 2) var += __shfl_xor_sync(mask, var, offset);
                var /= cols;
                float rstd = rsqrtf(var + eps);
                for (int c = lane; c < cols; c += 8)
                    *(y + row * cols + c) = (x[row * cols + c] - mean) * rstd * gamma[c] + beta[c];
            }
        }"#]].assert_eq(&one(ROWS, "layer_norm", "rows4"));
}

#[test]
fn a_while_loop_over_a_nonzero_start_gets_a_block_per_row() {
    expect![[r#"
        // A `while` loop, doubles, an early return, and a running sum that starts from a
        // bias (not zero: every lane but the first restarts it at zero).
        // @bench rows = 4096, 19; cols = 512, 33
        // @bench x: in f64[rows, cols]; bias: in f64[rows]; out: out f64[rows]
        // @bench grid = rows; block = 256
        extern "C" __global__ void row_sum_while(int rows, int cols, const double* __restrict__ x,
                                                 const double* __restrict__ bias, double* __restrict__ out) {
            const int r = blockIdx.x;
            int lane = threadIdx.x;
            if (r >= rows) return;
            double s = bias[r];
            if (lane != 0) s = 0;
            int j = lane;
            while (j < cols) {
                s += x[(size_t)r * cols + j];
                j += blockDim.x;
            }
            for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffff, s, offset);
            { // one partial per warp, combined by every thread
                __shared__ double s_part[32];
                if (lane % 32 == 0) s_part[lane / 32] = s;
                __syncthreads();
                s = s_part[0];
                for (int w = 1; w < blockDim.x / 32; ++w) s += s_part[w];
                __syncthreads();
            }
            if (lane == 0) out[r] = s;
        }"#]].assert_eq(&one(ROWS, "row_sum_while", "block"));
}

#[test]
fn an_if_max_and_a_counter_replay_the_authors_update() {
    expect![[r#"
        // The largest value with `if (v > m) m = v;`, and a count of positives with `++`.
        // @bench rows = 1000, 3; cols = 96, 17
        // @bench x: in f32[rows, cols] ~ normal(0, 1); mx: out f32[rows]; npos: out i32[rows]
        // @bench grid = cdiv(rows, 4); block = 128
        extern "C" __global__ void row_max_count(const float* x, float* mx, int* npos, int rows, int cols) {
            int i = (blockDim.x * blockIdx.x + threadIdx.x) / 32;
            int lane = threadIdx.x % 32;
            if (i < rows) {
                const float* p = &x[i * cols];
                float m = -3.402823466e38f;  // -FLT_MAX
                int n = 0;
                for (int k = lane; k < cols; k += 32) {
                    float v = p[k];
                    if (v > m) m = v;
                    if (v > 0.0f) n++;
                }
                for (int offset = 16; offset > 0; offset /= 2) {
                    {
                        float m_other = __shfl_xor_sync(0xffffffff, m, offset);
                        if (m_other > m) m = m_other;
                    }
                    n += __shfl_xor_sync(0xffffffff, n, offset);
                }
                if (lane == 0) mx[i] = m;
                if (lane == 0) npos[i] = n;
            }
        }"#]].assert_eq(&one(ROWS, "row_max_count", "warp"));
}

#[test]
fn csr_rows_read_their_range_from_memory() {
    expect![[r#"
        // Sparse matrix-vector product, CSR: the row's range comes from memory (the same for
        // every lane of the row) and `x` is gathered through column indices.
        // @bench rows = 8192, 50; cols = 4096, 20
        // @bench rowptr: in i32[rows + 1] ~ arange; colidx: in i32[rows] ~ randint(0, cols)
        // @bench val: in f32[rows]; x: in f32[cols]; y: out f32[rows]
        // @bench grid = cdiv(rows, 8); block = 256
        extern "C" __global__ void spmv_csr(int rows, const int* rowptr, const int* colidx,
                                            const float* val, const float* x, float* y) {
            int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
            int lane = threadIdx.x % 32;
            if (row < rows) {
                float dot = 0;
                for (int jj = rowptr[row] + lane; jj < rowptr[row + 1]; jj += 32)
                    dot += val[jj] * x[colidx[jj]];
                for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffff, dot, offset);
                if (lane == 0) y[row] = dot;
            }
        }"#]].assert_eq(&one(ROWS, "spmv_csr", "warp"));
}

#[test]
fn what_cannot_be_shared_between_lanes_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(REFUSALS, k, "cooperative_rows", json!({})));
    expect!["`prefix_rows` cannot share a row between threads: the column loop `for (int c = 0; c < cols; ++c)` reads the running value of `acc`; each lane only has its own part of it until the loop ends (`y[row * cols + c] = acc` reads it before this iteration's update)"].assert_eq(&why("prefix_rows"));
    expect!["`smooth_rows` cannot share a row between threads: `y[row * cols + c - 1]` and `y[row * cols + c]` touch `y` at different elements in one column loop; another lane may own one of them"].assert_eq(&why("smooth_rows"));
    expect!["`permute_rows` cannot share a row between threads: `y[row * cols + perm[c]]` uses a value that differs between the lanes of a row; which lane owns the element cannot be told"].assert_eq(&why("permute_rows"));
    expect!["`sum_until_negative` cannot share a row between threads: `break` leaves the column loop `for (int c = 0; c < cols; ++c)` early; lanes cannot know where another lane stopped"].assert_eq(&why("sum_until_negative"));
}

#[test]
fn other_shapes_and_launches_are_refused() {
    let why = |src: &str, k: &str| not_applicable(cuda(src, k, "cooperative_rows", json!({})));
    expect!["`matmul` does not give one row to each thread: `int row = blockIdx.y * blockDim.y + threadIdx.y;` is a 2-D or 3-D index; only 1-D kernels are handled; cooperative_rows needs `int row = blockIdx.x * blockDim.x + threadIdx.x; if (row < rows) { ... }` (or `if (row >= rows) return;`) with loops over the row's columns"].assert_eq(&why(MATMUL, "matmul"));
    expect!["`saxpy` cannot share a row between threads: no loop in the row body indexes global memory with its variable"].assert_eq(&why(SAXPY, "saxpy"));
    let odd_grid = SOFTMAX.replace("grid = cdiv(rows, 128)", "grid = rows");
    expect!["`softmax_rows`'s grid = rows does not count blocks of `block = 128` threads (`cdiv(rows, 128)`)"].assert_eq(&why(&odd_grid, "softmax_rows"));
    let shared = SOFTMAX.replace(
        "        float m = in[0];\n",
        "        __shared__ float t[4];\n        float m = in[0];\n",
    );
    expect!["`softmax_rows` cannot share a row between threads: `__shared__ float t[4];` declares shared memory"].assert_eq(&why(&shared, "softmax_rows"));
    let tid = SOFTMAX.replace("out[c] /= sum;", "out[c] /= sum + threadIdx.x;");
    expect!["`softmax_rows` cannot share a row between threads: the row body reads `threadIdx.x`; once a team shares the row it no longer means what it did"].assert_eq(&why(&tid, "softmax_rows"));
    let helper = ROWS.replace(
        "float v = a[c * rows + row];",
        "float v = a[c * rows + row] + tid;",
    );
    assert_ne!(helper, ROWS);
    expect!["`col_major_row_max` cannot share a row between threads: the row body reads `tid` (`threadIdx.x`); once a team shares the row it no longer means what it did"].assert_eq(&why(&helper, "col_major_row_max"));
    let bad = cuda(
        SOFTMAX,
        "softmax_rows",
        "cooperative_rows",
        json!({"modes": ["team"]}),
    );
    expect![[r#"parameter `modes`: expected a non-empty list of warp, rows2, rows4, block, warp_regs, block_regs, cluster, found `"team"`"#]].assert_eq(&bad.unwrap_err().to_string());
    let bad = cuda(
        SOFTMAX,
        "softmax_rows",
        "cooperative_rows",
        json!({"block_threads": [100]}),
    );
    expect!["parameter `block_threads`: 100 is not a multiple of 32"]
        .assert_eq(&bad.unwrap_err().to_string());
}

#[test]
fn a_softmax_row_is_read_once_into_registers_and_written_once_from_them() {
    expect![[r#"
        // @bench rows = 8192, 37; cols = 1024, 100
        // @bench x: in f32[rows, cols]; y: out f32[rows, cols]
        // @bench grid = cdiv(rows, 4); block = 128
        // @bench atol = 1e-6; rtol = 1e-4
        extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
            int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
            int lane = threadIdx.x % 32;
            if (row < rows) {
                const float* in = x + (size_t)row * cols;
                float* out = y + (size_t)row * cols;
                float m = in[0];
                float x_r[32];
                #pragma unroll
                for (int j = 0; j < 32; ++j) {
                    int c = lane + 32 * j;
                    if (c < cols) x_r[j] = in[c];
                }
                #pragma unroll
                for (int j = 0; j < 32; ++j) {
                    int c = lane + 32 * j;
                    if (c >= 1 && c < cols) m = fmaxf(m, x_r[j]);
                }
                for (int c = lane + 32 * 32; c < cols; c += 32)
                    if (c >= 1) m = fmaxf(m, in[c]);
                for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
                float sum = 0.0f;
                float y_r[32];
                #pragma unroll
                for (int j = 0; j < 32; ++j) {
                    int c = lane + 32 * j;
                    if (c < cols) {
                        float e = expf(x_r[j] - m);
                        y_r[j] = e;
                        sum += e;
                    }
                }
                for (int c = lane + 32 * 32; c < cols; c += 32) {
                    float e = expf(in[c] - m);
                    out[c] = e;
                    sum += e;
                }
                for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
                #pragma unroll
                for (int j = 0; j < 32; ++j) {
                    int c = lane + 32 * j;
                    if (c < cols) y_r[j] /= sum;
                }
                for (int c = lane + 32 * 32; c < cols; c += 32)
                    out[c] /= sum;
                #pragma unroll
                for (int j = 0; j < 32; ++j) {
                    int c = lane + 32 * j;
                    if (c < cols) out[c] = y_r[j];
                }
            }
        }"#]].assert_eq(&one(SOFTMAX, "softmax_rows", "warp_regs"));
}

#[test]
fn layer_norm_stages_its_row_and_per_column_parameters_in_a_block() {
    expect![[r#"
        // Layer norm in three passes: mean, variance, normalize; per-column writes through a
        // dereferenced pointer, per-column parameters gamma and beta.
        // @bench rows = 2048, 7; cols = 768, 45
        // @bench x: in f32[rows, cols]; gamma: in f32[cols]; beta: in f32[cols]; y: out f32[rows, cols]
        // @bench eps = 1e-5
        // @bench grid = rows; block = 256
        // @bench atol = 1e-4; rtol = 1e-3
        extern "C" __global__ void layer_norm(int rows, int cols, float eps, const float* x,
                                              const float* gamma, const float* beta, float* y) {
            int row = blockIdx.x;
            int lane = threadIdx.x;
            if (row < rows) {
                float mean = 0.0f;
                float x_r[3];
                #pragma unroll
                for (int j_2 = 0; j_2 < 3; ++j_2) {
                    int c = lane + blockDim.x * j_2;
                    if (c < cols) x_r[j_2] = x[row * cols + c];
                }
                #pragma unroll
                for (int j_2 = 0; j_2 < 3; ++j_2) {
                    int c = lane + blockDim.x * j_2;
                    if (c < cols) mean += x_r[j_2];
                }
                for (int c = lane + blockDim.x * 3; c < cols; c += blockDim.x)
                    mean += x[row * cols + c];
                for (int offset = 16; offset > 0; offset /= 2) mean += __shfl_xor_sync(0xffffffff, mean, offset);
                { // one partial per warp, combined by every thread
                    __shared__ float mean_part[32];
                    if (lane % 32 == 0) mean_part[lane / 32] = mean;
                    __syncthreads();
                    mean = mean_part[0];
                    for (int w = 1; w < blockDim.x / 32; ++w) mean += mean_part[w];
                    __syncthreads();
                }
                mean /= cols;
                float var = 0.0f;
                #pragma unroll
                for (int j_2 = 0; j_2 < 3; ++j_2) {
                    int c = lane + blockDim.x * j_2;
                    if (c < cols) {
                        float d = x_r[j_2] - mean;
                        var += d * d;
                    }
                }
                for (int c = lane + blockDim.x * 3; c < cols; c += blockDim.x) {
                    float d = x[row * cols + c] - mean;
                    var += d * d;
                }
                for (int offset = 16; offset > 0; offset /= 2) var += __shfl_xor_sync(0xffffffff, var, offset);
                { // one partial per warp, combined by every thread
                    __shared__ float var_part[32];
                    if (lane % 32 == 0) var_part[lane / 32] = var;
                    __syncthreads();
                    var = var_part[0];
                    for (int w = 1; w < blockDim.x / 32; ++w) var += var_part[w];
                    __syncthreads();
                }
                var /= cols;
                float rstd = rsqrtf(var + eps);
                #pragma unroll
                for (int j_2 = 0; j_2 < 3; ++j_2) {
                    int c = lane + blockDim.x * j_2;
                    if (c < cols) *(y + row * cols + c) = (x_r[j_2] - mean) * rstd * gamma[c] + beta[c];
                }
                for (int c = lane + blockDim.x * 3; c < cols; c += blockDim.x)
                    *(y + row * cols + c) = (x[row * cols + c] - mean) * rstd * gamma[c] + beta[c];
            }
        }"#]].assert_eq(&one(ROWS, "layer_norm", "block_regs"));
}

#[test]
fn a_row_longer_than_the_registers_finishes_in_a_tail_loop() {
    // Two slots per lane: columns past 64 take the tail loops (the whole text is the
    // 32-slot one above with 2 for 32 in the slot counts).
    let out = cuda(
        SOFTMAX,
        "softmax_rows",
        "cooperative_rows",
        json!({"modes": ["warp_regs"], "stage_registers": 2}),
    )
    .unwrap();
    let text = show(Lang::Cuda, SOFTMAX, &out[0], "softmax_rows");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("_r[2]") || l.contains("j < 2") || l.contains("32 * 2"))
        .collect();
    expect![[r#"
        [
            "float x_r[2];",
            "for (int j = 0; j < 2; ++j) {",
            "for (int j = 0; j < 2; ++j) {",
            "for (int c = lane + 32 * 2; c < cols; c += 32)",
            "float y_r[2];",
            "for (int j = 0; j < 2; ++j) {",
            "for (int c = lane + 32 * 2; c < cols; c += 32) {",
            "for (int j = 0; j < 2; ++j) {",
            "for (int c = lane + 32 * 2; c < cols; c += 32)",
            "for (int j = 0; j < 2; ++j) {",
        ]
    "#]]
    .assert_debug_eq(&lines);
}

#[test]
fn staging_is_refused_with_the_reason_and_the_other_modes_stay() {
    let why = |src: &str, k: &str| {
        not_applicable(cuda(
            src,
            k,
            "cooperative_rows",
            json!({"modes": ["warp_regs"]}),
        ))
    };
    // One pass over the row: nothing to keep between passes.
    expect!["no usable candidate for `row_max_count`: warp per row (block 128), row in registers: no buffer is touched in two or more column loops"].assert_eq(&why(ROWS, "row_max_count"));
    // A while loop (the block-per-row fixture).
    expect!["no usable candidate for `row_sum_while`: warp per row (block 256), row in registers: `while (j < cols)` does not declare its variable in a `for` header"].assert_eq(&why(ROWS, "row_sum_while"));
    // A written buffer read before its first write, or written under a condition, stays
    // in global memory; the row that is only read is still staged.
    let only_x = |src: &str| {
        let out = cuda(
            src,
            "softmax_rows",
            "cooperative_rows",
            json!({"modes": ["warp_regs"]}),
        )
        .unwrap();
        labels(&out).join("; ")
    };
    let rmw = SOFTMAX.replace("out[c] = e;", "out[c] = out[c] * 0.0f + e;");
    expect!["warp per row, `x` in registers (32 per lane; block 128)"].assert_eq(&only_x(&rmw));
    let cond = SOFTMAX.replace("out[c] = e;", "if (e > 0.0f) out[c] = e;");
    expect!["warp per row, `x` in registers (32 per lane; block 128)"].assert_eq(&only_x(&cond));
    // Loops with different bounds.
    let bounds = SOFTMAX.replace(
        "for (int c = 0; c < cols; ++c)\n            out[c] /= sum;",
        "for (int c = 0; c < cols - 0; ++c)\n            out[c] /= sum;",
    );
    assert_ne!(bounds, SOFTMAX);
    expect!["no usable candidate for `softmax_rows`: warp per row (block 128), row in registers: column loops end at `cols` and at `cols - 0`"].assert_eq(&why(&bounds, "softmax_rows"));
    // The other modes do not depend on staging.
    let out = cuda(&bounds, "softmax_rows", "cooperative_rows", json!({})).unwrap();
    assert_eq!(out.len(), 7, "{:?}", labels(&out));
}

const CUMSUM: &str = include_str!("../../../../../examples/row_cumsum.cu");

#[test]
fn a_running_sum_read_mid_row_becomes_a_warp_scan() {
    let out = cuda(CUMSUM, "row_cumsum", "cooperative_rows", json!({})).unwrap();
    expect![[r#"
        [
            "warp per row (block 128)",
            "warp per row, 4 columns a lane scanned in registers (block 128)",
            "warp per row, 8 columns a lane scanned in registers (block 128)",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    expect![[r#"
        // A first draft of a row-wise prefix sum (`torch.cumsum(x, 1)`): each thread owns a
        // row and carries a running total across it. One thread walks each row, and
        // neighbouring threads read addresses a whole row apart.
        // @bench rows = 8192, 37; cols = 2048, 300
        // @bench x: in f32[rows, cols]; y: out f32[rows, cols]
        // @bench grid = cdiv(rows, 4); block = 128
        // @bench reference = torch: torch.cumsum(x, 1)
        // @bench atol = 1e-3; rtol = 1e-3
        extern "C" __global__ void row_cumsum(const float* x, float* y, int rows, int cols) {
            int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
            int lane = threadIdx.x % 32;
            if (row < rows) {
                float running = 0.0f;
                for (int c = lane; (c - lane) < cols; c += 32) {
                    unsigned active = __ballot_sync(0xffffffff, c < cols);
                    if (c < cols) {
                        { // `running` over the warp: each lane's term after every lower lane's
                            float running_add = x[row * cols + c];
                            for (int offset_2 = 1; offset_2 < 32; offset_2 *= 2) {
                                float up = __shfl_up_sync(active, running_add, offset_2);
                                if (lane >= offset_2) running_add += up;
                            }
                            running += running_add;
                        }
                        y[row * cols + c] = running;
                    }
                    running = __shfl_sync(0xffffffff, running, 31 - __clz(active));
                }
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, CUMSUM, &out[0], "row_cumsum"));
}

const PICKS: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/arg_picks.cu");

#[test]
fn an_arg_pick_is_combined_as_one_with_the_author_s_tie_rule() {
    // `m >= v` keeps the last of equal minima: the larger column wins a tie.
    expect![[r#"
        // `<=` keeps the last of equal minima; integers, a `while` loop, the value and its
        // column both written, the comparison with the accumulator on the left.
        // @bench rows = 2048, 17; cols = 1000, 99
        // @bench x: in i32[rows, cols] ~ randint(0, 5); lo: out i32[rows]; where: out i32[rows]
        // @bench grid = cdiv(rows, 4); block = 128
        extern "C" __global__ void row_argmin_last(const int* __restrict__ x, int* __restrict__ lo,
                                                   int* __restrict__ where, int rows, int cols) {
            int r = (threadIdx.x + blockIdx.x * blockDim.x) / 32;
            int lane = threadIdx.x % 32;
            if (r < rows) {
                int m = 1 << 30;
                int w = -1;
                int c = lane;
                while (c < cols) {
                    int v = x[r * cols + c];
                    if (m >= v) {
                        m = v;
                        w = c;
                    }
                    c += 32;
                }
                for (int offset = 16; offset > 0; offset /= 2) {
                    {
                        int m_other = __shfl_xor_sync(0xffffffff, m, offset);
                        int w_other = __shfl_xor_sync(0xffffffff, w, offset);
                        if (m_other < m || (m_other == m && w_other > w)) { m = m_other; w = w_other; }
                    }
                }
                if (lane == 0) lo[r] = m;
                if (lane == 0) where[r] = w;
            }
        }"#]]
    .assert_eq(&one(PICKS, "row_argmin_last", "warp"));
    // A block team combines the warps' picks through shared memory, each with its column.
    let out = cuda(PICKS, "row_argmax", "cooperative_rows", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "warp per row (block 256)",
            "warp per row, 4 columns a lane (block 256)",
            "warp per row, 8 columns a lane (block 256)",
            "2 rows per warp (block 256)",
            "4 rows per warp (block 256)",
            "block per row (128 threads)",
            "block per row (256 threads)"
        ]
    );
    let block = &out[5].text;
    for want in [
        "__shared__ float best_part[32];",
        "__shared__ long long at_part[32];",
        "if (lane % 32 == 0) at_part[lane / 32] = at;",
        "long long at_other_2 = at_part[w_2];",
        "if (best_other_2 > best || (best_other_2 == best && at_other_2 < at)) { best = best_other_2; at = at_other_2; }",
    ] {
        assert!(block.contains(want), "{want}:\n{block}");
    }
}

#[test]
fn an_arg_pick_read_mid_loop_or_without_its_column_is_refused() {
    let why = |k: &str| not_applicable(cuda(PICKS, k, "cooperative_rows", json!({})));
    expect!["`running_argmax` cannot share a row between threads: the column loop `for (int c = 0; c < cols; c++)` reads `at`, which is picked with a maximum or minimum; each lane only has its own pick until the loop ends"].assert_eq(&why("running_argmax"));
    expect!["`max_tag` cannot share a row between threads: `if (x[r * cols + c] > best) { best = x[r * cols + c]; t = tag[r * cols + c]; }` picks values with `best`, but none of them is the column `c`, so equal values in two lanes could not be told apart in the loop's order"].assert_eq(&why("max_tag"));
}

const SCANS: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/scans.cu");

fn contains_all(text: &str, wants: &[&str]) {
    for want in wants {
        assert!(text.contains(want), "{want}\n{text}");
    }
}

fn tiled(src: &str, kernel: &str, k: u64) -> String {
    let params = json!({ "modes": ["warp"], "scan_tile": [k], "walk_tile": [k] });
    let out = cuda(src, kernel, "cooperative_rows", params).unwrap_or_else(|e| panic!("{e}"));
    let labels = labels(&out);
    let at = labels
        .iter()
        .position(|l| l.contains("columns a lane"))
        .unwrap_or_else(|| panic!("{kernel}: no register tile among {labels:?}"));
    show(Lang::Cuda, src, &out[at], kernel)
}

#[test]
fn every_running_sum_style_gets_register_tiles_unless_the_body_forbids_them() {
    let got: Vec<String> = [
        "cumsum_f64",
        "count_positive",
        "weighted_cumsum_inplace",
        "relu_cumsum_delta",
        "even_cumsum",
        "two_running_sums",
        "copy_then_cumsum",
    ]
    .iter()
    .map(|k| {
        let out = cuda(SCANS, k, "cooperative_rows", json!({})).unwrap();
        format!("{k}: {}", labels(&out).join(" | "))
    })
    .collect();
    expect![[r#"
        cumsum_f64: warp per row (block 96) | warp per row, 4 columns a lane scanned in registers (block 96) | warp per row, 8 columns a lane scanned in registers (block 96)
        count_positive: warp per row (block 128) | warp per row, 4 columns a lane scanned in registers (block 128) | warp per row, 8 columns a lane scanned in registers (block 128)
        weighted_cumsum_inplace: warp per row (block 256) | warp per row, 4 columns a lane scanned in registers (block 256) | warp per row, 8 columns a lane scanned in registers (block 256)
        relu_cumsum_delta: warp per row (block 64) | warp per row, 4 columns a lane scanned in registers (block 64) | warp per row, 8 columns a lane scanned in registers (block 64)
        even_cumsum: warp per row (block 128) | warp per row, 4 columns a lane scanned in registers (block 128) | warp per row, 8 columns a lane scanned in registers (block 128)
        two_running_sums: warp per row (block 128)
        copy_then_cumsum: warp per row (block 128)"#]]
    .assert_eq(&got.join("\n"));
}

#[test]
fn register_tiles_are_refused_with_the_reason_when_nothing_else_is_left() {
    let why = |k: &str| {
        let params = json!({ "modes": ["warp"], "scan_tile": [4] });
        not_applicable(cuda(SCANS, k, "cooperative_rows", params))
    };
    expect![[r#"
        no usable candidate for `two_running_sums`: warp per row, 4 columns a lane scanned in registers (block 128): the loop carries more than one running sum"#]]
    .assert_eq(&why("two_running_sums"));
    expect![[r#"
        no usable candidate for `copy_then_cumsum`: warp per row, 4 columns a lane scanned in registers (block 128): `z[row * cols + c] = 2.0f * x[row * cols + c];` comes before the running sum's update and is not a declaration"#]]
    .assert_eq(&why("copy_then_cumsum"));
    // The warp scan of one column a lane still takes both.
    for k in ["two_running_sums", "copy_then_cumsum"] {
        let out = cuda(SCANS, k, "cooperative_rows", json!({ "scan_tile": [1] })).unwrap();
        assert_eq!(labels(&out), ["warp per row (block 128)"]);
    }
}

#[test]
fn a_running_sum_scanned_over_tiles_of_four_columns_a_lane() {
    expect![[r#"
        // A first draft of a row-wise prefix sum (`torch.cumsum(x, 1)`): each thread owns a
        // row and carries a running total across it. One thread walks each row, and
        // neighbouring threads read addresses a whole row apart.
        // @bench rows = 8192, 37; cols = 2048, 300
        // @bench x: in f32[rows, cols]; y: out f32[rows, cols]
        // @bench grid = cdiv(rows, 4); block = 128
        // @bench reference = torch: torch.cumsum(x, 1)
        // @bench atol = 1e-3; rtol = 1e-3
        extern "C" __global__ void row_cumsum(const float* x, float* y, int rows, int cols) {
            int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
            int lane = threadIdx.x % 32;
            if (row < rows) {
                float running = 0.0f;
                for (int c = 4 * lane; (c - 4 * lane) < cols; c += 128) {
                    // this lane's 4 columns from `c`: `running`'s terms scanned in registers,
                    // then the lanes' totals over the warp
                    auto c_first = c;
                    bool full = (c + 3) < cols;
                    alignas(16) float x_in[4];
                    bool x_in_whole = full && reinterpret_cast<size_t>(&x[row * cols + c]) % 16 == 0;
                    if (x_in_whole) {
                        reinterpret_cast<uint4*>(x_in)[0] = reinterpret_cast<const uint4*>(&x[row * cols + c])[0];
                    } else {
                        #pragma unroll
                        for (int j = 0; j < 4; j++) {
                            auto c = c_first + j;
                            if (c < cols) x_in[j] = x[row * cols + c];
                        }
                    }
                    alignas(16) float y_out[4];
                    bool y_out_whole = full && reinterpret_cast<size_t>(&y[row * cols + c]) % 16 == 0;
                    float running_tile[4];
                    #pragma unroll
                    for (int j = 0; j < 4; j++) {
                        auto c = c_first + j;
                        running_tile[j] = 0;
                        if (c < cols) {
                            running_tile[j] = x_in[j];
                        }
                    }
                    #pragma unroll
                    for (int j = 1; j < 4; j++) running_tile[j] += running_tile[j - 1];
                    float running_lanes = running_tile[3];
                    for (int offset_2 = 1; offset_2 < 32; offset_2 *= 2) {
                        float up = __shfl_up_sync(0xffffffff, running_lanes, offset_2);
                        if (lane >= offset_2) running_lanes += up;
                    }
                    float running_before = __shfl_up_sync(0xffffffff, running_lanes, 1);
                    if (lane == 0) running_before = 0;
                    running_before += running;
                    float running_after = running + __shfl_sync(0xffffffff, running_lanes, 31);
                    #pragma unroll
                    for (int j = 0; j < 4; j++) {
                        auto c = c_first + j;
                        if (c < cols) {
                            running = running_before + running_tile[j];
                            y_out[j] = running;
                        }
                    }
                    if (y_out_whole) {
                        reinterpret_cast<uint4*>(&y[row * cols + c])[0] = reinterpret_cast<const uint4*>(y_out)[0];
                    } else {
                        #pragma unroll
                        for (int j = 0; j < 4; j++) {
                            auto c = c_first + j;
                            if (c < cols) y[row * cols + c] = y_out[j];
                        }
                    }
                    running = running_after;
                }
            }
        }"#]].assert_eq(&tiled(CUMSUM, "row_cumsum", 4));
}

#[test]
fn a_tile_loads_and_stores_in_16_byte_units_only_where_the_run_time_check_allows() {
    // Unit step: the read before the update and the store after it move as whole tiles,
    // behind a test of the lane's first element's alignment and of the tile's last column.
    let f32 = tiled(CUMSUM, "row_cumsum", 4);
    contains_all(
        &f32,
        &[
            "bool full = (c + 3) < cols;",
            "bool x_in_whole = full && reinterpret_cast<size_t>(&x[row * cols + c]) % 16 == 0;",
            "reinterpret_cast<uint4*>(x_in)[0] = reinterpret_cast<const uint4*>(&x[row * cols + c])[0];",
            "if (c < cols) x_in[j] = x[row * cols + c];",
            "reinterpret_cast<uint4*>(&y[row * cols + c])[0] = reinterpret_cast<const uint4*>(y_out)[0];",
            "if (c < cols) y[row * cols + c] = y_out[j];",
            "running_tile[j] = x_in[j];",
            "y_out[j] = running;",
        ],
    );
    // f64: eight columns a lane are four 16-byte units each way.
    let f64 = tiled(SCANS, "cumsum_f64", 8);
    assert!(
        f64.contains(
            "reinterpret_cast<uint4*>(x_in)[3] = reinterpret_cast<const uint4*>(&in[c])[3];"
        ),
        "{f64}"
    );
    assert!(
        f64.contains("reinterpret_cast<uint4*>(&out[c])[3]"),
        "{f64}"
    );
    // A term read under `?:` stays as written; a store whose buffer is read back after the
    // update stays in place, while the other output is collected.
    let relu = tiled(SCANS, "relu_cumsum_delta", 4);
    assert!(
        relu.contains("s_tile[j] = x[row * cols + c] > 0.0f ? x[row * cols + c] : 0.0f;"),
        "{relu}"
    );
    assert!(relu.contains("y[row * cols + c] = s;\n"), "{relu}");
    assert!(
        relu.contains("d_out[j] = y[row * cols + c] - x_in[j];"),
        "{relu}"
    );
    // A loop of step 2: the lane's columns are two apart, nothing is vectorized.
    let even = tiled(SCANS, "even_cumsum", 4);
    assert!(
        even.contains("for (int c = 8 * lane; (c - 8 * lane) < cols; c += 256)"),
        "{even}"
    );
    assert!(even.contains("auto c = c_first + j * 2;"), "{even}");
    assert!(!even.contains("uint4"), "{even}");
    // In place: the term's read of `y` is buffered before the update, the store after it.
    let inplace = tiled(SCANS, "weighted_cumsum_inplace", 4);
    assert!(
        inplace.contains("s_tile[j] = y_in[j] * w_in[j];"),
        "{inplace}"
    );
    assert!(
        inplace.contains("for (int c = 1 + 4 * lane; (c - 4 * lane) < cols; c += 128)"),
        "{inplace}"
    );
}

const WALKS: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/walks.cu");
const MATVEC: &str = include_str!("../../../../../examples/matvec.cu");

#[test]
fn a_row_walked_one_element_at_a_time_gets_register_tiles_in_warp_mode() {
    let got: Vec<String> = [
        (WALKS, "row_dot_f64"),
        (WALKS, "row_l1_int"),
        (WALKS, "scale_shift_rows"),
        (WALKS, "even_columns_sum"),
        (MATVEC, "matvec"),
    ]
    .iter()
    .map(|(src, k)| {
        let params = json!({ "modes": ["warp", "rows2"] });
        let out = cuda(src, k, "cooperative_rows", params).unwrap();
        format!("{k}: {}", labels(&out).join(" | "))
    })
    .collect();
    expect![[r#"
        row_dot_f64: warp per row (block 128) | warp per row, 4 columns a lane (block 128) | warp per row, 8 columns a lane (block 128) | 2 rows per warp (block 128)
        row_l1_int: warp per row (block 256) | warp per row, 4 columns a lane (block 256) | warp per row, 8 columns a lane (block 256) | 2 rows per warp (block 256)
        scale_shift_rows: warp per row (block 64) | warp per row, 4 columns a lane (block 64) | warp per row, 8 columns a lane (block 64) | 2 rows per warp (block 64)
        even_columns_sum: warp per row (block 128) | 2 rows per warp (block 128)
        matvec: warp per row (block 64) | warp per row, 4 columns a lane (block 64) | warp per row, 8 columns a lane (block 64) | 2 rows per warp (block 64)"#]].assert_eq(&got.join("\n"));
}

#[test]
fn a_walk_tile_reads_every_contiguous_operand_and_collects_the_store() {
    // f64 rows through row pointers: two 16-byte units per operand and lane.
    let dot = tiled(WALKS, "row_dot_f64", 4);
    contains_all(
        &dot,
        &[
            "for (int k = 4 * lane; (k - 4 * lane) < n; k += 128) {",
            "reinterpret_cast<uint4*>(b_in)[1] = reinterpret_cast<const uint4*>(&pb[k])[1];",
            "s += a_in[j] * b_in[j];",
            "for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffff, s, offset);",
        ],
    );
    // An unbraced body gets braces on the loop's line.
    let l1 = tiled(WALKS, "row_l1_int", 4);
    assert!(l1.contains("c += 128) {\n"), "{l1}");
    assert!(l1.contains("s += abs(x_in[j]);"), "{l1}");
    // No accumulator: the per-row factor stays as written, the per-column bias is a tile,
    // and the output is stored as one unit where aligned.
    let shift = tiled(WALKS, "scale_shift_rows", 4);
    assert!(
        shift.contains("y_out[j] = x_in[j] * f + bias_in[j];"),
        "{shift}"
    );
    assert!(shift.contains("reinterpret_cast<uint4*>(&y[row * cols + c])[0] = reinterpret_cast<const uint4*>(y_out)[0];"), "{shift}");
}

#[test]
fn lanes_share_the_loop_whose_elements_lie_side_by_side() {
    // The images lie C * HW apart, a plane is contiguous: the plane loop is shared and
    // the loop over images stays in every lane, each plane's partials combined after it.
    let planes = one(WALKS, "plane_sums", "warp");
    contains_all(
        &planes,
        &[
            "for (int n = 0; n < N; ++n) {",
            "for (int p = lane; p < HW; p += 32) {",
            "if (lane != 0) s = 0;",
        ],
    );
    // A column loop three elements a step around a three-step loop keeps the lanes.
    let triples = one(WALKS, "triple_sums", "warp");
    assert!(
        triples.contains("for (int c = lane; c < cols; c += 32)"),
        "{triples}"
    );
    assert!(triples.contains("for (int k = 0; k < 3; k++)"), "{triples}");
}

#[test]
fn a_loop_that_only_strides_leaves_the_team_the_loop_inside_it_that_walks_the_row() {
    // NCHW channel statistics: the image loop strides by a plane, the plane loop walks
    // it; the team shares the plane loop, and since nothing else in the image loop touches
    // the sums, the lanes' partials run on over every image and meet once after it.
    expect![[r#"
        // Per-channel statistics of NCHW planes: the channel's elements are N runs of HW
        // contiguous ones, so the loop over images only strides and the loop over a plane walks
        // it; the team shares the plane loop, every lane runs the image loop.
        // @bench N = 8, 3; C = 64, 5; HW = 1024, 77
        // @bench x: in f32[N, C, HW]; mean: out f32[C]; sq: out f32[C]
        // @bench grid = C; block = 256
        // @bench atol = 1e-3; rtol = 1e-3
        extern "C" __global__ void channel_moments(const float* x, float* mean, float* sq, int N, int C, int HW) {
            int ch = blockIdx.x;
            int lane = threadIdx.x;
            if (ch < C) {
                float s = 0.0f, s2 = 0.0f;
                if (lane != 0) s = 0;
                if (lane != 0) s2 = 0;
                for (int b = 0; b < N; ++b) {
                    for (int p = lane; p < HW; p += blockDim.x) {
                        float v = x[((size_t)b * C + ch) * HW + p];
                        s += v;
                        s2 += v * v;
                    }
                }
                for (int offset = 16; offset > 0; offset /= 2) {
                    s += __shfl_xor_sync(0xffffffff, s, offset);
                    s2 += __shfl_xor_sync(0xffffffff, s2, offset);
                }
                { // one partial per warp, combined by every thread
                    __shared__ float s_part[32];
                    __shared__ float s2_part[32];
                    if (lane % 32 == 0) s_part[lane / 32] = s;
                    if (lane % 32 == 0) s2_part[lane / 32] = s2;
                    __syncthreads();
                    s = s_part[0];
                    s2 = s2_part[0];
                    for (int w = 1; w < blockDim.x / 32; ++w) {
                        s += s_part[w];
                        s2 += s2_part[w];
                    }
                    __syncthreads();
                }
                if (lane == 0) mean[ch] = s / (N * HW);
                if (lane == 0) sq[ch] = s2 / (N * HW);
            }
        }"#]]
    .assert_eq(&one(ROWS, "channel_moments", "block"));
    let max = one(ROWS, "channel_max", "warp");
    assert!(
        max.contains("        for (int p = lane; p < HW; p += 32) m = fmaxf(m, plane[p]);"),
        "{max}"
    );
    // An inner loop of 4 literal steps is a group, not the row: the outer loop stays the
    // team's.
    let groups = one(ROWS, "row_group_sum", "warp");
    assert!(
        groups.contains("        for (int c = lane; c < cols; c += 32) {\n            for (int k = 0; k < 4; k++)"),
        "{groups}"
    );
}

#[test]
fn few_rows_also_get_a_block_of_1024_threads_per_row() {
    use super::block_teams;
    assert_eq!(block_teams(&[128, 256], Some(64)), [128, 256, 1024]);
    assert_eq!(block_teams(&[128, 256], Some(511)), [128, 256, 1024]);
    assert_eq!(block_teams(&[128, 256], Some(512)), [128, 256]);
    assert_eq!(block_teams(&[128, 1024], Some(64)), [128, 1024]);
    assert_eq!(block_teams(&[128, 256], None), [128, 256]);
    // 64 channels: the timed case launches 64 threads along x.
    let out = cuda(ROWS, "channel_moments", "cooperative_rows", json!({})).unwrap();
    assert!(
        labels(&out).contains(&"block per row (1024 threads)"),
        "{:?}",
        labels(&out)
    );
    // Asked for explicitly, the sizes are the ones given.
    let out = cuda(
        ROWS,
        "channel_moments",
        "cooperative_rows",
        json!({ "modes": ["block"], "block_threads": [256] }),
    )
    .unwrap();
    assert_eq!(labels(&out), ["block per row (256 threads)"]);
}

#[test]
fn few_rows_get_a_cluster_per_row_only_where_it_gives_a_row_more_threads_than_a_block() {
    use super::{cluster_teams, Team};
    let shown = |r: Result<Vec<Team>, String>| match r {
        Ok(teams) => teams
            .iter()
            .map(|t| match t {
                Team::Cluster { threads, blocks } => format!("{blocks}x{threads}"),
                _ => "other".into(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Err(why) => why,
    };
    expect!["8x256 4x1024 8x1024"].assert_eq(&shown(cluster_teams(
        &[128, 256, 1024],
        &[4, 8],
        Some(64),
        132,
    )));
    expect!["2x128 4x128 8x128"].assert_eq(&shown(cluster_teams(
        &[128],
        &[2, 4, 8],
        Some(263),
        132,
    )));
    expect!["the timed case launches 264 threads along x, so up to 264 rows: not fewer than 264 (2 per multiprocessor), where blocks per row already fill the GPU"]
        .assert_eq(&shown(cluster_teams(&[128], &[4], Some(264), 132)));
    expect!["the timed case's launch is not known"].assert_eq(&shown(cluster_teams(
        &[128],
        &[4],
        None,
        132,
    )));
}

fn clustered(src: &str, kernel: &str) -> String {
    let params = json!({ "modes": ["cluster"], "block_threads": [256], "clusters": [4] });
    let out =
        cuda(src, kernel, "cooperative_rows", params).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    let [label] = labels(&out)[..] else {
        panic!("{kernel}: {:?}", labels(&out))
    };
    assert!(label.starts_with("cluster of 4 blocks per row"), "{label}");
    assert!(label.ends_with("(256 threads a block)"), "{label}");
    show(Lang::Cuda, src, &out[0], kernel)
}

#[test]
fn a_few_long_rows_are_each_shared_by_a_cluster_of_blocks_pass_after_pass() {
    // 128 channels of a nest of 4 planes of 2048: the cluster's 4 blocks take a plane each,
    // the plane loop is shared by a block's 256 threads (8 columns a thread, where the
    // cluster's 1024 lanes would take 2 each), the blocks' maxima meet through distributed
    // shared memory after the image loop.
    expect![[r#"
        // The same nest through a plane pointer, a maximum, an int index and an early return.
        // @bench N = 4, 3; C = 128, 9; HW = 2048, 101
        // @bench x: in f32[N, C, HW]; mx: out f32[C]
        // @bench grid = C * 4; block = 256
        extern "C" __global__ void __cluster_dims__(4, 1, 1) channel_max(const float* __restrict__ x, float* __restrict__ mx, int N, int C, int HW) {
            int c = blockIdx.x / 4;
            int lane = (blockIdx.x % 4) * blockDim.x + threadIdx.x;
            if (c >= C) return;
            float m = -INFINITY;
            for (int n = blockIdx.x % 4; n < N; n += 4) {
                const float* plane = x + ((size_t)n * C + c) * HW;
                for (int p = threadIdx.x; p < HW; p += blockDim.x) m = fmaxf(m, plane[p]);
            }
            for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
            { // one partial per warp, combined by every thread
                __shared__ float m_part[32];
                if (threadIdx.x % 32 == 0) m_part[threadIdx.x / 32] = m;
                __syncthreads();
                m = m_part[0];
                for (int w = 1; w < blockDim.x / 32; ++w) m = fmaxf(m, m_part[w]);
                __syncthreads();
                // the blocks of the cluster share their partials through distributed shared memory
                if (threadIdx.x == 0) m_part[0] = m;
                asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
                const unsigned m_at = (unsigned)__cvta_generic_to_shared(&m_part[0]);
                for (unsigned rank = 0; rank < 4; ++rank) {
                    float m_other;
                    unsigned m_remote;
                    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(m_remote) : "r"(m_at), "r"(rank));
                    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(m_other) : "r"(m_remote) : "memory");
                    if (rank == 0) m = m_other;
                    else m = fmaxf(m, m_other);
                }
                asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
            }
            if (lane == 0) mx[c] = m;
        }"#]]
    .assert_eq(&clustered(ROWS, "channel_max"));
    // Three passes over each of 24 groups: each pass's total is combined over the cluster
    // before the next pass reads it; the writes stay with the column's lane.
    let norm = clustered(ROWS, "group_norm_long");
    assert_has(
        &norm,
        &[
            "// @bench grid = G * 4; block = 256",
            "int g = blockIdx.x / 4;\n    int lane = (blockIdx.x % 4) * blockDim.x + threadIdx.x;",
            "for (int i = lane; i < L; i += 4 * blockDim.x) s += in[i];",
            "if (threadIdx.x == 0) v_part[0] = v;",
            "for (int i = lane; i < L; i += 4 * blockDim.x) y[(size_t)g * L + i] = (in[i] - mean) * r;\n    if (lane == 0) rstd[g] = r;",
        ],
    );
    assert_eq!(norm.matches("barrier.cluster.arrive").count(), 4, "{norm}");
}

#[test]
fn a_cluster_per_row_is_refused_with_the_reason() {
    let why = |src: &str, k: &str| {
        not_applicable(cuda(
            src,
            k,
            "cooperative_rows",
            json!({ "modes": ["cluster"] }),
        ))
    };
    // 8192 rows: blocks per row fill the GPU already.
    expect!["no usable candidate for `softmax_rows`: cluster: the timed case launches 8192 threads along x, so up to 8192 rows: not fewer than 264 (2 per multiprocessor), where blocks per row already fill the GPU"].assert_eq(&why(SOFTMAX, "softmax_rows"));
    // An arg pick keeps an index beside its value: the cluster combines one value a row.
    let few = PICKS.replace("rows = 4096, 33", "rows = 40, 33");
    assert_ne!(few, PICKS);
    expect!["no usable candidate for `row_argmax`: cluster of 8 blocks per row (256 threads a block): `best` is picked with other values (an arg-max or arg-min); the cluster combines one value per result; cluster of 4 blocks per row (1024 threads a block): `best` is picked with other values (an arg-max or arg-min); the cluster combines one value per result; cluster of 8 blocks per row (1024 threads a block): `best` is picked with other values (an arg-max or arg-min); the cluster combines one value per result"].assert_eq(&why(&few, "row_argmax"));
}

#[test]
fn sums_read_between_the_inner_loops_are_combined_after_each_of_them() {
    // The running total is written after each image: the lanes' partials must meet per
    // image, so the combine (and the reset) stay around the plane loop.
    let src = r#"
// @bench N = 4, 3; C = 64, 5; HW = 1024, 77
// @bench x: in f32[N, C, HW]; run: out f32[N, C]
// @bench grid = cdiv(C, 64); block = 64
extern "C" __global__ void running_plane_sums(const float* x, float* run, int N, int C, int HW) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) {
        float s = 0.0f;
        for (int n = 0; n < N; n++) {
            for (int p = 0; p < HW; p++) s += x[((size_t)n * C + c) * HW + p];
            run[n * C + c] = s;
        }
    }
}
"#;
    let out = one(src, "running_plane_sums", "warp");
    assert_has(
        &out,
        &["        for (int n = 0; n < N; n++) {\n            if (lane != 0) s = 0;\n            for (int p = lane; p < HW; p += 32) s += x[((size_t)n * C + c) * HW + p];\n            for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffff, s, offset);\n            if (lane == 0) run[n * C + c] = s;"],
    );
}

#[test]
fn a_staged_row_is_offered_only_in_blocks_whose_registers_can_hold_it() {
    use super::staging_fits;
    assert!(staging_fits(64, 256));
    assert!(staging_fits(64, 512));
    assert!(!staging_fits(64, 1024));
    assert!(!staging_fits(1, 1024));
    assert!(staging_fits(192, 256));
    assert!(!staging_fits(193, 256));
}

const NESTS: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/nests.cu");

/// The cluster candidates of `kernel` (blocks of 1024 threads, clusters of 4 and 8): label
/// and text of each.
fn cluster_nests(kernel: &str) -> Vec<(String, String)> {
    let params = json!({ "modes": ["cluster"], "block_threads": [1024], "clusters": [4, 8] });
    let out =
        cuda(NESTS, kernel, "cooperative_rows", params).unwrap_or_else(|e| panic!("{kernel}: {e}"));
    out.iter()
        .map(|c| (c.label.clone(), show(Lang::Cuda, NESTS, c, kernel)))
        .collect()
}

#[test]
fn a_cluster_gives_the_image_loop_to_its_blocks_where_its_lanes_would_take_few_columns() {
    // 24 images of 8192: the 8 x 1024 lanes would take one column an image each; the 8
    // blocks take 3 images each, a block's threads 8 columns an image. 4 x 1024 lanes
    // would take 2 columns: the split too. The weight read per image stays in the image
    // loop; the sums' bias stays with the cluster's first lane.
    let out = cluster_nests("weighted_moments");
    let labels: Vec<&str> = out.iter().map(|(l, _)| l.as_str()).collect();
    expect![[r#"
        [
            "cluster of 4 blocks per row, the loop around the columns shared by its blocks (1024 threads a block)",
            "cluster of 8 blocks per row, the loop around the columns shared by its blocks (1024 threads a block)",
        ]
    "#]]
    .assert_debug_eq(&labels);
    assert_has(
        &out[1].1,
        &[
            "    if (lane != 0) a = 0;\n    if (lane != 0) b = 0;\n    for (int n = blockIdx.x % 8; n < N; n += 8) {\n        const float wn = w[n];",
            "        for (int p = threadIdx.x; p < HW; p += blockDim.x) {",
            "    if (lane == 0) s1[c] = a;",
        ],
    );
    // A step of 2 from the second image: rank r starts at image 1 + 2r, steps 2 x 8.
    let odd = cluster_nests("odd_image_max");
    assert_has(
        &odd[1].1,
        &[
            "for (int n = 1 + 2 * (blockIdx.x % 8); n < N; n += 16) {",
            "for (int p = threadIdx.x; p < HW; p += blockDim.x) m = fmaxf(m, x[(n * C + c) * HW + p]);",
        ],
    );
}

#[test]
fn the_image_loop_stays_with_every_lane_where_a_block_would_miss_its_work() {
    // A count kept across images (a block skipping one would miss its count), and two
    // images for four or eight blocks: the cluster's lanes share the plane loop.
    for kernel in ["counted_mean", "two_image_sum"] {
        for (label, text) in cluster_nests(kernel) {
            assert!(
                !label.contains("loop around the columns"),
                "{kernel}: {label}"
            );
            assert_has(
                &text,
                &[
                    "    for (int n = 0; n < N; n++) {",
                    "for (int p = lane; p < HW; p += ",
                ],
            );
        }
    }
}

#[test]
fn blocks_take_the_outer_trips_only_when_each_gets_one_and_lanes_would_take_few_columns() {
    use super::nest::across_blocks;
    // NCHW statistics, 32 images of 16384: 8 blocks of 1024 (2 columns a lane otherwise),
    // 4 of 1024 and 8 of 256 (4 and 8 columns a lane, as evenly busy either way).
    assert!(across_blocks(32, 16384, 8, 1024));
    assert!(across_blocks(32, 16384, 4, 1024));
    assert!(across_blocks(32, 16384, 8, 256));
    // Fewer images than blocks leave blocks idle.
    assert!(!across_blocks(7, 16384, 8, 1024));
    // 10 images on 8 blocks keep them 62% busy; 16384 columns over 8192 lanes, 100%.
    assert!(!across_blocks(10, 16384, 8, 1024));
    // Short planes: 100 columns leave most of 2048 lanes idle, 8 images one a block.
    assert!(across_blocks(8, 100, 8, 256));
    // 9 images on 8 blocks (56% busy) against 1 column a lane (12000 of 16384 lanes).
    assert!(!across_blocks(9, 12000, 8, 2048));
}

#[test]
fn a_column_walk_beside_a_vector_of_the_loop_is_left_to_split_loop() {
    // dy[r * N + j] is what neighbouring threads read side by side; mean[r] is
    // contiguous along the loop but the same for every output, so it does not make the
    // loop worth sharing across lanes (they would read dy a row apart).
    let dgamma = include_str!("../../../../../tests/gpu/drafts/layernorm_bwd_dgamma_dbeta.cu");
    let why = not_applicable(cuda(
        dgamma,
        "layernorm_bwd_dgamma_dbeta",
        "cooperative_rows",
        json!({}),
    ));
    assert!(
        why.contains("(`dy_row[j]` moves one element with `j`)"),
        "{why}"
    );
    // A CSR row's range is its own (`jj` from `rowptr[row]`): `val[jj]` is the row's
    // data, contiguous along the loop, so a warp still shares it.
    let csr = cuda(ROWS, "spmv_csr", "cooperative_rows", json!({})).unwrap();
    assert!(
        labels(&csr).contains(&"warp per row (block 256)"),
        "{:?}",
        labels(&csr)
    );
}
