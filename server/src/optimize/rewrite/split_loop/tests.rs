use expect_test::expect;
use serde_json::json;

use super::super::check::current_plan;
use super::super::check::testing::{
    assert_has, cuda, find, in_context, labels, not_applicable, show,
};
use super::super::cooperative_rows::{analyze, row_launch};
use super::super::elementwise::match_elementwise;
use super::super::tree::{code_names, kernel_function};
use super::{spread_draft, Across, ID};
use crate::syntax::Lang;

const COL_SUM: &str = include_str!("../../../../../examples/col_sum.cu");

#[test]
fn a_column_sum_is_split_along_y_and_combined_in_shared_memory() {
    let out = cuda(COL_SUM, "col_sum", "split_loop", json!({})).unwrap();
    expect![[r#"
        [
            "`r` loop split over 8 threads per output, block (32, 8), 8 iterations per trip",
            "`r` loop split over 16 threads per output, block (32, 16), 8 iterations per trip",
            "`r` loop split over 16 threads per output, block (16, 16), 8 iterations per trip",
            "`r` loop split over 32 threads per output, block (16, 32), 8 iterations per trip",
            "`r` loop split over 32 threads per output, block (8, 32), 8 iterations per trip",
            "`r` loop split over 64 threads per output, block (8, 64), 8 iterations per trip",
            "`r` loop split over 8 threads per output in each of 4 blocks of a cluster, block (32, 8), 8 iterations per trip",
            "`r` loop split over 16 threads per output in each of 4 blocks of a cluster, block (32, 16), 8 iterations per trip",
            "`r` loop split over 8 threads per output in each of 8 blocks of a cluster, block (32, 8), 8 iterations per trip",
            "`r` loop split over 16 threads per output in each of 8 blocks of a cluster, block (32, 16), 8 iterations per trip",
            "`r` loop split over 8 threads per output in each of 16 blocks, block (32, 8), partials combined by the last block, 8 iterations per trip",
            "`r` loop split over 16 threads per output in each of 16 blocks, block (32, 16), partials combined by the last block, 8 iterations per trip",
            "`r` loop split over 8 threads per output in each of 32 blocks, block (32, 8), partials combined by the last block, 8 iterations per trip",
            "`r` loop split over 16 threads per output in each of 32 blocks, block (32, 16), partials combined by the last block, 8 iterations per trip",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    expect![[r#"
        // A first draft of a column sum (`x.sum(0)`): each thread owns one column and walks
        // down the rows. The loads are coalesced, but with a few thousand columns the grid is a
        // handful of blocks: most of the GPU sits idle while each thread loops over every row.
        // @bench rows = 16384, 1001; cols = 2048, 77
        // @bench x: in f32[rows, cols]; out: out f32[cols]
        // @bench grid = cdiv(cols, 32); block = (32, 8)
        // @bench reference = torch: x.sum(0)
        // @bench atol = 1e-3; rtol = 1e-4
        __global__ void col_sum(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = ((int)(blockIdx.x * blockDim.x + threadIdx.x)) < cols;
            int col = live ? (blockIdx.x * blockDim.x + threadIdx.x) : 0;
            const bool lead = live && threadIdx.y == 0;
            {
                float acc = 0.0f;
                { // 8 iterations per trip, then the rest
                    int r = threadIdx.y;
                    for (; r + (int)(7 * blockDim.y) < rows; r += (int)(8 * blockDim.y)) {
                        {
                            acc += x[(size_t)r * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(blockDim.y)) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(2 * blockDim.y)) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(3 * blockDim.y)) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(4 * blockDim.y)) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(5 * blockDim.y)) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(6 * blockDim.y)) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(7 * blockDim.y)) * cols + col];
                        }
                    }
                    for (; r < rows; r += blockDim.y) {
                        acc += x[(size_t)r * cols + col];
                    }
                }
                { // the partials of the threads that share an output, combined by each of them
                    __shared__ float acc_part[1024];
                    acc_part[threadIdx.y * blockDim.x + threadIdx.x] = acc;
                    __syncthreads();
                    acc = acc_part[threadIdx.x];
                    for (unsigned w = 1; w < blockDim.y; ++w) {
                        acc += acc_part[w * blockDim.x + threadIdx.x];
                    }
                    __syncthreads();
                }
                if (lead) out[col] = acc;
            }
        }"#]].assert_eq(&show(Lang::Cuda, COL_SUM, &out[0], "col_sum"));
}

const MATVEC_T: &str = include_str!("../../../../../examples/matvec_t.cu");
const COL_MAX: &str = include_str!("../../../../../examples/col_max.cu");

#[test]
fn an_early_return_a_while_loop_and_a_pointer_alias_split_alike() {
    let out = cuda(
        MATVEC_T,
        "matvec_t",
        "split_loop",
        json!({"owners": [32], "threads": [256]}),
    )
    .unwrap();
    expect![[r#"
        // A first draft of a transposed matrix-vector product, y = A^T v (the backward of a
        // linear layer's input): one thread per output, an early return, a `while` loop down the
        // column with a pointer that steps one row at a time, and a scale applied at the end.
        // @bench m = 8192, 333; n = 4096, 65
        // @bench a: in f32[m, n]; v: in f32[m]; y: out f32[n]
        // @bench alpha = 0.5
        // @bench grid = cdiv(n, 32); block = (32, 8)
        // @bench reference = torch: alpha * (a.t() @ v)
        // @bench atol = 1e-3; rtol = 1e-3
        extern "C" __global__ void matvec_t(int m, int n, float alpha, const float* a, const float* v,
                                            float* y) {
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = !(((int)(threadIdx.x + blockDim.x * blockIdx.x)) >= n);
            const int j = live ? (threadIdx.x + blockDim.x * blockIdx.x) : 0;
            const bool lead = live && threadIdx.y == 0;
            const float* p = a + j;
            float s = 0.f;
            int i = threadIdx.y;
            while (i + (decltype(i))(7 * blockDim.y) < m) {
                {
                    s += p[(long long)i * n] * v[i];
                }
                {
                    s += p[(long long)(i + (decltype(i))(blockDim.y)) * n] * v[(i + (decltype(i))(blockDim.y))];
                }
                {
                    s += p[(long long)(i + (decltype(i))(2 * blockDim.y)) * n] * v[(i + (decltype(i))(2 * blockDim.y))];
                }
                {
                    s += p[(long long)(i + (decltype(i))(3 * blockDim.y)) * n] * v[(i + (decltype(i))(3 * blockDim.y))];
                }
                {
                    s += p[(long long)(i + (decltype(i))(4 * blockDim.y)) * n] * v[(i + (decltype(i))(4 * blockDim.y))];
                }
                {
                    s += p[(long long)(i + (decltype(i))(5 * blockDim.y)) * n] * v[(i + (decltype(i))(5 * blockDim.y))];
                }
                {
                    s += p[(long long)(i + (decltype(i))(6 * blockDim.y)) * n] * v[(i + (decltype(i))(6 * blockDim.y))];
                }
                {
                    s += p[(long long)(i + (decltype(i))(7 * blockDim.y)) * n] * v[(i + (decltype(i))(7 * blockDim.y))];
                }
                i += (decltype(i))(8 * blockDim.y);
            }
            while (i < m) {
                s += p[(long long)i * n] * v[i];
                i += blockDim.y;
            }
            { // the partials of the threads that share an output, combined by each of them
                __shared__ float s_part[1024];
                s_part[threadIdx.y * blockDim.x + threadIdx.x] = s;
                __syncthreads();
                s = s_part[threadIdx.x];
                for (unsigned w = 1; w < blockDim.y; ++w) {
                    s += s_part[w * blockDim.x + threadIdx.x];
                }
                __syncthreads();
            }
            if (lead) y[j] = alpha * s;
        }"#]].assert_eq(&show(Lang::Cuda, MATVEC_T, &out[0], "matvec_t"));
}

#[test]
fn a_max_kept_with_an_if_is_combined_with_the_authors_update() {
    let out = cuda(
        COL_MAX,
        "col_max",
        "split_loop",
        json!({"owners": [16], "threads": [256]}),
    )
    .unwrap();
    expect![[r#"
        // @bench batch = 8192, 513; feat = 4096, 100
        // @bench x: in f32[batch, feat] ~ normal(0, 1); out: out f32[feat]
        // @bench grid = cdiv(feat, 16); block = (16, 16)
        // @bench reference = torch: x.amax(0)
        __global__ void col_max(const float* x, float* out, int batch, int feat) {
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = !(((unsigned)(blockIdx.x * blockDim.x + threadIdx.x)) >= feat);
            unsigned f = live ? (blockIdx.x * blockDim.x + threadIdx.x) : 0;
            const bool lead = live && threadIdx.y == 0;
            float best = NEG_INF;
            { // 8 iterations per trip, then the rest
                int b = threadIdx.y;
                for (; b + (int)(7 * blockDim.y) < batch; b += (int)(8 * blockDim.y)) {
                    {
                        float v = x[b * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(2 * blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(3 * blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(4 * blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(5 * blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(6 * blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                    {
                        float v = x[(b + (int)(7 * blockDim.y)) * feat + f];
                        if (v > best) best = v;
                    }
                }
                for (; b < batch; b += blockDim.y) {
                    float v = x[b * feat + f];
                    if (v > best) best = v;
                }
            }
            { // the partials of the threads that share an output, combined by each of them
                __shared__ float best_part[1024];
                best_part[threadIdx.y * blockDim.x + threadIdx.x] = best;
                __syncthreads();
                best = best_part[threadIdx.x];
                for (unsigned w = 1; w < blockDim.y; ++w) {
                    if (best_part[w * blockDim.x + threadIdx.x] > best) best = best_part[w * blockDim.x + threadIdx.x];
                }
                __syncthreads();
            }
            if (lead) out[f] = best;
        }"#]].assert_eq(&show(Lang::Cuda, COL_MAX, &out[0], "col_max"));
}

const COLUMNS: &str = include_str!("../../../../../tests/fixtures/rewrites/split/columns.cu");

#[test]
fn every_carried_loop_gets_its_combine_and_writes_go_to_one_thread() {
    let out = cuda(
        COLUMNS,
        "col_normalize",
        "split_loop",
        json!({"owners": [32], "threads": [256]}),
    )
    .unwrap();
    expect![[r#"
        // A column mean and variance in two loops, then every element of the column normalized:
        // two carried sums, a loop that writes its own column, and a per-column write.
        // @bench rows = 4096, 37; cols = 1024, 45
        // @bench x: in f32[rows, cols]; y: out f32[rows, cols]; stats: out f32[cols, 2]
        // @bench grid = cdiv(cols, 32); block = (32, 8)
        // @bench atol = 1e-4; rtol = 1e-3
        extern "C" __global__ void col_normalize(const float* x, float* y, float* stats, int rows, int cols) {
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = ((int)(blockIdx.x * blockDim.x + threadIdx.x)) < cols;
            int c = live ? (blockIdx.x * blockDim.x + threadIdx.x) : 0;
            const bool lead = live && threadIdx.y == 0;
            {
                float mean = 0.0f;
                { // 8 iterations per trip, then the rest
                    int r = threadIdx.y;
                    for (; r + (int)(7 * blockDim.y) < rows; r += (int)(8 * blockDim.y)) {
                        { mean += x[r * cols + c]; }
                        { mean += x[(r + (int)(blockDim.y)) * cols + c]; }
                        { mean += x[(r + (int)(2 * blockDim.y)) * cols + c]; }
                        { mean += x[(r + (int)(3 * blockDim.y)) * cols + c]; }
                        { mean += x[(r + (int)(4 * blockDim.y)) * cols + c]; }
                        { mean += x[(r + (int)(5 * blockDim.y)) * cols + c]; }
                        { mean += x[(r + (int)(6 * blockDim.y)) * cols + c]; }
                        { mean += x[(r + (int)(7 * blockDim.y)) * cols + c]; }
                    }
                    for (; r < rows; r += blockDim.y) mean += x[r * cols + c];
                }
                { // the partials of the threads that share an output, combined by each of them
                    __shared__ float mean_part[1024];
                    mean_part[threadIdx.y * blockDim.x + threadIdx.x] = mean;
                    __syncthreads();
                    mean = mean_part[threadIdx.x];
                    for (unsigned w = 1; w < blockDim.y; ++w) {
                        mean += mean_part[w * blockDim.x + threadIdx.x];
                    }
                    __syncthreads();
                }
                mean /= rows;
                float var = 0.0f;
                { // 8 iterations per trip, then the rest
                    int r = threadIdx.y;
                    for (; r + (int)(7 * blockDim.y) < rows; r += (int)(8 * blockDim.y)) {
                        {
                            float d = x[r * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(2 * blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(3 * blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(4 * blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(5 * blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(6 * blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                        {
                            float d = x[(r + (int)(7 * blockDim.y)) * cols + c] - mean;
                            var += d * d;
                        }
                    }
                    for (; r < rows; r += blockDim.y) {
                        float d = x[r * cols + c] - mean;
                        var += d * d;
                    }
                }
                { // the partials of the threads that share an output, combined by each of them
                    __shared__ float var_part[1024];
                    var_part[threadIdx.y * blockDim.x + threadIdx.x] = var;
                    __syncthreads();
                    var = var_part[threadIdx.x];
                    for (unsigned w_2 = 1; w_2 < blockDim.y; ++w_2) {
                        var += var_part[w_2 * blockDim.x + threadIdx.x];
                    }
                    __syncthreads();
                }
                float inv = rsqrtf(var / rows + 1e-5f);
                if (live) for (int r = threadIdx.y; r < rows; r += blockDim.y) y[r * cols + c] = (x[r * cols + c] - mean) * inv;
                if (lead) stats[2 * c] = mean;
                if (lead) stats[2 * c + 1] = inv;
            }
        }"#]].assert_eq(&show(Lang::Cuda, COLUMNS, &out[0], "col_normalize"));
}

#[test]
fn a_nonzero_start_an_aliased_index_and_a_step_of_two() {
    let out = cuda(
        COLUMNS,
        "even_sum",
        "split_loop",
        json!({"owners": [32], "threads": [256]}),
    )
    .unwrap();
    expect![[r#"
        // Doubles, a sum that starts from a bias (the other threads restart at zero), an index
        // built from aliases of the thread and block, and a loop that steps by two.
        // @bench pairs = 2048, 9; n = 512, 33
        // @bench x: in f64[pairs, 2, n]; bias: in f64[n]; out: out f64[n]
        // @bench grid = cdiv(n, 32); block = (32, 8)
        extern "C" __global__ void even_sum(const double* __restrict__ x, const double* __restrict__ bias,
                                            double* __restrict__ out, int pairs, int n) {
            const int t = threadIdx.x;
            const int b = blockIdx.x;
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = !(((int)(b * blockDim.x + t)) >= n);
            int j = live ? (b * blockDim.x + t) : 0;
            const bool lead = live && threadIdx.y == 0;
            double s = bias[j];
            if (!(threadIdx.y == 0)) s = 0;
            { // 8 iterations per trip, then the rest
                int k = 2 * threadIdx.y;
                for (; k + (int)(7 * (2 * blockDim.y)) < 2 * pairs; k += (int)(8 * (2 * blockDim.y))) {
                    { s += x[(size_t)k * n + j]; }
                    { s += x[(size_t)(k + (int)(2 * blockDim.y)) * n + j]; }
                    { s += x[(size_t)(k + (int)(2 * (2 * blockDim.y))) * n + j]; }
                    { s += x[(size_t)(k + (int)(3 * (2 * blockDim.y))) * n + j]; }
                    { s += x[(size_t)(k + (int)(4 * (2 * blockDim.y))) * n + j]; }
                    { s += x[(size_t)(k + (int)(5 * (2 * blockDim.y))) * n + j]; }
                    { s += x[(size_t)(k + (int)(6 * (2 * blockDim.y))) * n + j]; }
                    { s += x[(size_t)(k + (int)(7 * (2 * blockDim.y))) * n + j]; }
                }
                for (; k < 2 * pairs; k += 2 * blockDim.y) s += x[(size_t)k * n + j];
            }
            { // the partials of the threads that share an output, combined by each of them
                __shared__ double s_part[1024];
                s_part[threadIdx.y * blockDim.x + threadIdx.x] = s;
                __syncthreads();
                s = s_part[threadIdx.x];
                for (unsigned w = 1; w < blockDim.y; ++w) {
                    s += s_part[w * blockDim.x + threadIdx.x];
                }
                __syncthreads();
            }
            if (lead) out[j] = s;
        }"#]].assert_eq(&show(Lang::Cuda, COLUMNS, &out[0], "even_sum"));
}

#[test]
fn what_split_loop_cannot_share_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(COLUMNS, k, "split_loop", json!({})));
    expect!["`row_sum`: `x[r * cols + c]` does not move one element with `r`: neighbouring threads read apart, which sharing the loop would not fix (remap_lanes or cooperative_rows fit it)"].assert_eq(&why("row_sum"));
    expect!["`ragged_sum`: the loop `for (int k = start[c]; k < end; k++) s += vals[k * cols + c];` reads `c` in its start or bound, so its trip count may differ between outputs; the threads of a block would not all meet the barrier after it"].assert_eq(&why("ragged_sum"));
    expect!["`col_cumsum`: the loop reads the running value of `run` after each update (a prefix sum); threads that each hold part of it cannot give every iteration its value"].assert_eq(&why("col_cumsum"));
    expect!["`maybe_sum`: the loop `for (int r = 0; r < rows; r++) s += x[r * cols + c];` sits under a condition or another loop; the threads of a block would not all meet the barrier after it"].assert_eq(&why("maybe_sum"));
}

#[test]
fn cooperative_rows_leaves_coalesced_column_loops_to_split_loop() {
    let why = not_applicable(cuda(COL_SUM, "col_sum", "cooperative_rows", json!({})));
    expect!["`col_sum`'s neighbouring threads already read neighbouring elements (`x[(size_t)r * cols + col]` moves one element with `col`), and nothing in that loop is contiguous along its variable: lanes sharing the loop would read a stride apart (split_loop splits such a loop across threads instead)"].assert_eq(&why);
}

#[test]
fn the_split_also_spans_a_cluster_of_blocks_that_read_each_others_partials() {
    let out = cuda(
        COL_SUM,
        "col_sum",
        "split_loop",
        json!({"owners": [32], "threads": [256], "clusters": [4], "grid_rows": []}),
    )
    .unwrap();
    expect![[r#"
        [
            "`r` loop split over 8 threads per output, block (32, 8), 8 iterations per trip",
            "`r` loop split over 8 threads per output in each of 4 blocks of a cluster, block (32, 8), 8 iterations per trip",
        ]
    "#]].assert_debug_eq(&labels(&out));
    expect![[r#"
        // A first draft of a column sum (`x.sum(0)`): each thread owns one column and walks
        // down the rows. The loads are coalesced, but with a few thousand columns the grid is a
        // handful of blocks: most of the GPU sits idle while each thread loops over every row.
        // @bench rows = 16384, 1001; cols = 2048, 77
        // @bench x: in f32[rows, cols]; out: out f32[cols]
        // @bench grid = (cdiv(cols, 32), 4); block = (32, 8)
        // @bench reference = torch: x.sum(0)
        // @bench atol = 1e-3; rtol = 1e-4
        __global__ void __cluster_dims__(1, 4, 1) col_sum(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = ((int)(blockIdx.x * blockDim.x + threadIdx.x)) < cols;
            int col = live ? (blockIdx.x * blockDim.x + threadIdx.x) : 0;
            const bool lead = live && threadIdx.y == 0 && blockIdx.y == 0;
            {
                float acc = 0.0f;
                { // 8 iterations per trip, then the rest
                    int r = (blockIdx.y * blockDim.y + threadIdx.y);
                    for (; r + (int)(7 * ((gridDim.y * blockDim.y))) < rows; r += (int)(8 * ((gridDim.y * blockDim.y)))) {
                        {
                            acc += x[(size_t)r * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)((gridDim.y * blockDim.y))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(2 * ((gridDim.y * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(3 * ((gridDim.y * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(4 * ((gridDim.y * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(5 * ((gridDim.y * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(6 * ((gridDim.y * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(7 * ((gridDim.y * blockDim.y)))) * cols + col];
                        }
                    }
                    for (; r < rows; r += (gridDim.y * blockDim.y)) {
                        acc += x[(size_t)r * cols + col];
                    }
                }
                { // the partials of the threads that share an output, combined by each of them
                    __shared__ float acc_part[1024];
                    acc_part[threadIdx.y * blockDim.x + threadIdx.x] = acc;
                    __syncthreads();
                    acc = acc_part[threadIdx.x];
                    for (unsigned w = 1; w < blockDim.y; ++w) {
                        acc += acc_part[w * blockDim.x + threadIdx.x];
                    }
                    __syncthreads();
                    // the blocks of the cluster share their partials through distributed shared memory
                    if (threadIdx.y == 0) acc_part[threadIdx.x] = acc;
                    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
                    const unsigned acc_at = (unsigned)__cvta_generic_to_shared(&acc_part[threadIdx.x]);
                    for (unsigned rank = 0; rank < 4; ++rank) {
                        float acc_other;
                        unsigned acc_remote;
                        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(acc_remote) : "r"(acc_at), "r"(rank));
                        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(acc_other) : "r"(acc_remote) : "memory");
                        if (rank == 0) acc = acc_other;
                        else acc += acc_other;
                    }
                    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
                }
                if (lead) out[col] = acc;
            }
        }"#]].assert_eq(&show(Lang::Cuda, COL_SUM, &out[1], "col_sum"));
}

#[test]
fn a_bound_held_in_a_local_made_of_parameters_is_the_same_for_every_output() {
    let src = "// @bench rows = 4096, 33; cols = 2048, 45\n// @bench x: in f32[rows, cols]; out: out f32[cols]\n// @bench grid = cdiv(cols, 256); block = 256\n__global__ void k(const float* x, float* out, long rows, int cols) {\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    if (c >= cols) return;\n    int m = rows;\n    const int half = m / 2;\n    int tail = rows - c;\n    float s = 0.0f;\n    for (int r = 0; r < half; r++) s += x[(size_t)r * cols + c];\n    for (int r = half; r < m; r++) s += 2.0f * x[(size_t)r * cols + c];\n    out[c] = s;\n}\n";
    let out = cuda(src, "k", "split_loop", json!({})).unwrap();
    assert_eq!(out.len(), 10, "{:?}", labels(&out));
    let ragged = src.replace("r < m; r++)", "r < tail; r++)");
    expect!["`k`: the loop `for (int r = half; r < tail; r++) s += 2.0f * x[(size_t)r * cols + c];` reads `tail` in its start or bound, so its trip count may differ between outputs; the threads of a block would not all meet the barrier after it"]
        .assert_eq(&not_applicable(cuda(&ragged, "k", "split_loop", json!({}))));
}

const GRID: &str = include_str!("../../../../../tests/fixtures/rewrites/split/grid.cu");
const BATCHED: &str = include_str!("../../../../../tests/fixtures/rewrites/rows/batched.cu");

#[test]
fn the_split_also_spans_a_grid_of_blocks_whose_last_combines_their_partials() {
    let out = cuda(
        COL_SUM,
        "col_sum",
        "split_loop",
        json!({"owners": [32], "threads": [512], "clusters": [8], "grid_rows": [16]}),
    )
    .unwrap();
    expect![[r#"
        [
            "`r` loop split over 16 threads per output, block (32, 16), 8 iterations per trip",
            "`r` loop split over 16 threads per output in each of 8 blocks of a cluster, block (32, 16), 8 iterations per trip",
            "`r` loop split over 16 threads per output in each of 16 blocks, block (32, 16), partials combined by the last block, 8 iterations per trip",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    let grid = find(&out, "`r` loop split over 16 threads per output in each of 16 blocks, block (32, 16), partials combined by the last block, 8 iterations per trip");
    expect![[r#"
        // A first draft of a column sum (`x.sum(0)`): each thread owns one column and walks
        // down the rows. The loads are coalesced, but with a few thousand columns the grid is a
        // handful of blocks: most of the GPU sits idle while each thread loops over every row.
        // @bench rows = 16384, 1001; cols = 2048, 77
        // @bench x: in f32[rows, cols]; out: out f32[cols]
        // @bench grid = (cdiv(cols, 32), 16); block = (32, 16)
        // @bench reference = torch: x.sum(0)
        // @bench atol = 1e-3; rtol = 1e-4
        __global__ void __launch_bounds__(512) col_sum(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
            // blocks along y that share each output's loop: all of them while their partials fit the scratch arrays
            const unsigned P = (gridDim.x <= 65536 && (unsigned long long)gridDim.x * blockDim.x * gridDim.y <= (1 << 20)) ? gridDim.y : 1;
            if (blockIdx.y >= P) return;
            // threads past the bound compute on output 0 and write nothing: every thread meets the barriers
            const bool live = ((int)(blockIdx.x * blockDim.x + threadIdx.x)) < cols;
            int col = live ? (blockIdx.x * blockDim.x + threadIdx.x) : 0;
            const bool lead = live && threadIdx.y == 0;
            {
                float acc = 0.0f;
                { // 8 iterations per trip, then the rest
                    int r = (blockIdx.y * blockDim.y + threadIdx.y);
                    for (; r + (int)(7 * ((P * blockDim.y))) < rows; r += (int)(8 * ((P * blockDim.y)))) {
                        {
                            acc += x[(size_t)r * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)((P * blockDim.y))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(2 * ((P * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(3 * ((P * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(4 * ((P * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(5 * ((P * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(6 * ((P * blockDim.y)))) * cols + col];
                        }
                        {
                            acc += x[(size_t)(r + (int)(7 * ((P * blockDim.y)))) * cols + col];
                        }
                    }
                    for (; r < rows; r += (P * blockDim.y)) {
                        acc += x[(size_t)r * cols + col];
                    }
                }
                { // the partials of the threads that share an output, combined by each of them
                    __shared__ float acc_part[1024];
                    acc_part[threadIdx.y * blockDim.x + threadIdx.x] = acc;
                    __syncthreads();
                    acc = acc_part[threadIdx.x];
                    for (unsigned w = 1; w < blockDim.y; ++w) {
                        acc += acc_part[w * blockDim.x + threadIdx.x];
                    }
                    __syncthreads();
                    // the blocks that share these outputs leave their partials in global memory; the last to finish combines them in block order
                    if (P > 1) {
                        static __device__ float acc_blocks[1 << 20]; // global memory, one per output of each block
                        static __device__ unsigned blocks_done[65536]; // blocks done per group; the last one sets it back to 0
                        __shared__ unsigned ticket;
                        if (threadIdx.y == 0) acc_blocks[(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
                        __threadfence();
                        __syncthreads();
                        if (threadIdx.x == 0 && threadIdx.y == 0) ticket = atomicAdd(&blocks_done[blockIdx.x], 1u);
                        __syncthreads();
                        if (ticket != P - 1) return;
                        if (threadIdx.x == 0 && threadIdx.y == 0) blocks_done[blockIdx.x] = 0;
                        __threadfence();
                        for (unsigned b = 0; b < P; ++b) {
                            float acc_other;
                            acc_other = __ldcg(&acc_blocks[(b * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x]);
                            if (b == 0) acc = acc_other;
                            else acc += acc_other;
                        }
                    }
                }
                if (lead) out[col] = acc;
            }
        }"#]].assert_eq(&show(Lang::Cuda, COL_SUM, grid, "col_sum"));
}

#[test]
fn grid_partials_keep_every_arithmetic_type_and_fold_and_the_code_after_the_loop() {
    let out = cuda(
        GRID,
        "col_dsum_min_prod",
        "split_loop",
        json!({"owners": [32], "threads": [256], "clusters": [4], "grid_rows": [32]}),
    )
    .unwrap();
    let grid = find(&out, "`i` loop split over 8 threads per output in each of 32 blocks, block (32, 8), partials combined by the last block, 8 iterations per trip");
    assert_has(
        &grid.text,
        &[
            "@bench grid = (cdiv(N, 32), 32); block = (32, 8)",
            "if (!(threadIdx.y == 0 && blockIdx.y == 0)) s = 0;",
            "static __device__ double s_blocks[1 << 20];",
            "static __device__ float m_blocks[1 << 20];",
            "static __device__ float p_blocks[1 << 20];",
            "s_other = __ldcg(&s_blocks[(b * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x]);",
            "else s += s_other;",
            "else m = fminf(m, m_other);",
            "else p *= p_other;",
            "if (lead) sum[j] = s;",
        ],
    );
    let norm = cuda(GRID, "col_norm", "split_loop", json!({"grid_rows": [16]})).unwrap();
    let count = cuda(GRID, "col_count", "split_loop", json!({"grid_rows": [16]})).unwrap();
    let last = |out: &[crate::optimize::rewrite::Candidate]| {
        out.last().map(|c| c.text.clone()).unwrap_or_default()
    };
    assert_has(&last(&norm), &["if (lead) norm[c] = sqrtf(ss);"]);
    assert_has(
        &last(&count),
        &[
            "static __device__ int n_blocks[1 << 20];",
            "else n += n_other;",
        ],
    );
}

/// Why the grid form leaves a kernel out, from its inner steps (the one-block and cluster
/// candidates still come, so the rewrite as a whole is not refused).
fn grid_refusal(src: &str, kernel: &str) -> String {
    in_context(Lang::Cuda, src, kernel, json!({}), |cx| {
        let plan = current_plan(cx).unwrap();
        let func = kernel_function(cx).unwrap();
        let shape = match_elementwise(cx.text, func).unwrap();
        let rows = analyze(cx, &plan, &shape).unwrap();
        let launch = row_launch(cx, &plan, ID, &shape).unwrap();
        let shape_of = (32, 8, Across::Grid(16));
        match spread_draft(cx, func, &shape, &rows, &launch, shape_of, &code_names(cx)) {
            Ok(d) => format!("takes it: {}", d.label),
            Err(why) => why,
        }
    })
}

#[test]
fn the_grid_form_refuses_a_later_loop_a_second_pass_and_a_batch_index() {
    expect!["`r` loop split over 8 threads per output in each of 16 blocks, block (32, 8), partials combined by the last block: the loop `for (int r = 0; r < rows; ++r) y[r * cols + c] = x[r * cols + c] * inv;` follows `for (int r = 0; r < rows; ++r) s += x[r * cols + c];`: after the grid combine only the last block of each group goes on, so that loop would run in one block"].assert_eq(&grid_refusal(GRID, "col_share"));
    expect!["`r` loop split over 8 threads per output in each of 16 blocks, block (32, 8), partials combined by the last block: the loop `for (int r = 0; r < rows; ++r) mean += x[r * cols + c];` carries values before `for (int r = 0; r < rows; ++r)`: split over blocks, each would hold only its share of them, and after a grid combine one block goes on; only the last carrying loop is combined across blocks"].assert_eq(&grid_refusal(GRID, "col_var"));
    expect!["`i` loop split over 8 threads per output in each of 16 blocks, block (32, 8), partials combined by the last block: the grid's y is the kernel's batch index (`blockIdx.y`/`.z`), which a grid of blocks along y would take"].assert_eq(&grid_refusal(BATCHED, "batched_col_max"));
    expect!["takes it: `r` loop split over 8 threads per output in each of 16 blocks, block (32, 8), partials combined by the last block"].assert_eq(&grid_refusal(GRID, "col_norm"));
    for k in ["col_share", "col_var"] {
        let out = cuda(GRID, k, "split_loop", json!({})).unwrap();
        assert!(
            labels(&out)
                .iter()
                .all(|l| !l.contains("combined by the last block")),
            "{k}: {:?}",
            labels(&out)
        );
    }
}
