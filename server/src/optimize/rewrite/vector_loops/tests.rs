use expect_test::expect;

use super::super::unit::testing::{check, params, render, run};

const ROWS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_loops/rows.cu");
const GRIDS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_loops/grids.cu");
const WARPS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_loops/warps.cu");
const SPELLINGS: &str =
    include_str!("../../../../../tests/fixtures/rewrites/vec_loops/spellings.cu");
const REFUSALS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_loops/refusals.cu");
const TEAMS: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_loops/teams.cu");
const CLUSTER: &str = include_str!("../../../../../tests/fixtures/rewrites/vec_loops/cluster.cu");

#[test]
fn four_blocks_per_row_take_vectors_as_a_team_and_keep_their_atomic() {
    check(
        "vector_loops",
        TEAMS,
        "row_sum_four_blocks",
        params(r#"{"widths": [4]}"#),
        expect![[r#"
            ## VEC=4 (float4) in 1 loop (`j` over a team of 4 blocks' threads (`blockIdx.x`))
            __global__ void row_sum_four_blocks(const float* __restrict__ x, float* out, int rows,
                                                int cols) {
                __shared__ float part[128];
                const int row = blockIdx.x / 4;
                const float* xr = x + (size_t)row * cols;
                float acc = 0.0f;
                { // `j` over a team of 4 blocks' threads (`blockIdx.x`): 4 elements a lane per access (float4) where aligned, then the rest
                    const int j_base = 0;
                    const int j_vecs = cols > j_base ? (cols - j_base) / 4 : 0;
                    int j_rest = j_base;
                    if (reinterpret_cast<unsigned long long>(&xr[j_base]) % 16 == 0) {
                        for (int j_vec = (blockIdx.x - row * 4) * blockDim.x + threadIdx.x; j_vec < j_vecs; j_vec += blockDim.x * 4) {
                            const float4 xr4 = reinterpret_cast<const float4*>(&xr[j_base])[j_vec];
                            {
                                acc += xr4.x;
                            }
                            {
                                acc += xr4.y;
                            }
                            {
                                acc += xr4.z;
                            }
                            {
                                acc += xr4.w;
                            }
                        }
                        j_rest = j_base + 4 * j_vecs;
                    }
                    for (int j = j_rest + (blockIdx.x - row * 4) * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * 4) acc += xr[j];
                }
                part[threadIdx.x] = acc;
                __syncthreads();
                for (int h = 64; h > 0; h >>= 1) {
                    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
                    __syncthreads();
                }
                if (threadIdx.x == 0) atomicAdd(&out[row], part[0]);
            }
        "#]],
    );
}

#[test]
fn every_team_spelling_takes_vectors_with_the_authors_lanes_and_step() {
    for (kernel, loop_head, label) in [
        (
            "channel_sums_team",
            "for (int p_vec = lane; p_vec < p_vecs; p_vec += 8 * blockDim.x)",
            "## 16-byte accesses (float4) in 1 loop (`p` over a team of 8 blocks' threads (`blockIdx.x`))",
        ),
        (
            "scale_rows_y",
            "for (int j_vec = blockIdx.y * blockDim.x + threadIdx.x; j_vec < j_vecs; j_vec += gridDim.y * blockDim.x)",
            "## 16-byte accesses (float4) in 1 loop (`j` over the threads of the blocks along y)",
        ),
        (
            "row_norms_y4",
            "for (int j_vec = threadIdx.x + blockIdx.y * blockDim.x; j_vec < j_vecs; j_vec += 4 * blockDim.x)",
            "## 16-byte accesses (float4) in 1 loop (`j` over a team of 4 blocks' threads (`blockIdx.y`))",
        ),
        (
            "row_sum_half_pair",
            "for (int c_vec = lane; c_vec < c_vecs; c_vec += TEAM * blockDim.x)",
            "## 16-byte accesses (8×__half as uint4) in 1 loop (`c` over a team of 2 blocks' threads (`blockIdx.x`))",
        ),
    ] {
        let out = render(kernel, run("vector_loops", TEAMS, kernel, params("{}")));
        assert_eq!(out.lines().next(), Some(label), "{out}");
        assert!(out.contains(loop_head), "{out}");
    }
    let cluster = render(
        "channel_stats_nchw",
        run("vector_loops", CLUSTER, "channel_stats_nchw", params("{}")),
    );
    assert!(
        cluster.contains("for (int p = p_rest + lane; p < HW; p += 8 * blockDim.x)"),
        "the author's loop finishes the rest: {cluster}"
    );
}

#[test]
fn a_warp_per_row_reads_a_float4_of_the_row_and_of_the_vector_per_lane() {
    check(
        "vector_loops",
        WARPS,
        "matvec_warp",
        params(r#"{"widths": [4]}"#),
        expect![[r#"
            ## VEC=4 (float4) in 1 loop (`k` over a warp's lanes)
            __global__ void matvec_warp(const float* A, const float* x, float* y, int M, int K) {
                int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
                int lane = threadIdx.x & 31;
                if (warp >= M) return;
                float acc = 0.0f;
                { // `k` over a warp's lanes: 4 elements a lane per access (float4) where aligned, then the rest
                    const int k_base = 0;
                    const int k_vecs = K > k_base ? (K - k_base) / 4 : 0;
                    int k_rest = k_base;
                    if (reinterpret_cast<unsigned long long>(&A[(size_t)warp * K + k_base]) % 16 == 0 && reinterpret_cast<unsigned long long>(&x[k_base]) % 16 == 0) {
                        for (int k_vec = lane; k_vec < k_vecs; k_vec += 32) {
                            const float4 A4 = reinterpret_cast<const float4*>(&A[(size_t)warp * K + k_base])[k_vec];
                            const float4 x4 = reinterpret_cast<const float4*>(&x[k_base])[k_vec];
                            {
                                acc += A4.x * x4.x;
                            }
                            {
                                acc += A4.y * x4.y;
                            }
                            {
                                acc += A4.z * x4.z;
                            }
                            {
                                acc += A4.w * x4.w;
                            }
                        }
                        k_rest = k_base + 4 * k_vecs;
                    }
                    for (int k = k_rest + lane; k < K; k += 32) acc += A[(size_t)warp * K + k] * x[k];
                }
                for (int off = 16; off > 0; off >>= 1)
                    acc += __shfl_down_sync(0xffffffff, acc, off);
                if (lane == 0) y[warp] = acc;
            }
        "#]],
    );
}

#[test]
fn a_grid_stride_total_keeps_its_block_tree_and_atomic() {
    check(
        "vector_loops",
        GRIDS,
        "huber_total",
        params(r#"{"widths": [2]}"#),
        expect![[r#"
            ## VEC=2 (float2) in 1 loop (`i` over the grid's threads)
            __global__ void huber_total(const float* pred, const float* target, float* out, int n,
                                        float delta) {
                __shared__ float part[256];
                float acc = 0.0f;
                { // `i` over the grid's threads: 2 elements a lane per access (float2) where aligned, then the rest
                    const int i_base = 0;
                    const int i_vecs = n > i_base ? (n - i_base) / 2 : 0;
                    int i_rest = i_base;
                    if (reinterpret_cast<unsigned long long>(&pred[i_base]) % 8 == 0 && reinterpret_cast<unsigned long long>(&target[i_base]) % 8 == 0) {
                        for (int i_vec = blockIdx.x * blockDim.x + threadIdx.x; i_vec < i_vecs; i_vec += blockDim.x * gridDim.x) {
                            const float2 pred2 = reinterpret_cast<const float2*>(&pred[i_base])[i_vec];
                            const float2 target2 = reinterpret_cast<const float2*>(&target[i_base])[i_vec];
                            {
                                float d = fabsf(pred2.x - target2.x);
                                acc += d < delta ? 0.5f * d * d : delta * (d - 0.5f * delta);
                            }
                            {
                                float d = fabsf(pred2.y - target2.y);
                                acc += d < delta ? 0.5f * d * d : delta * (d - 0.5f * delta);
                            }
                        }
                        i_rest = i_base + 2 * i_vecs;
                    }
                    for (int i = i_rest + blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
                        float d = fabsf(pred[i] - target[i]);
                        acc += d < delta ? 0.5f * d * d : delta * (d - 0.5f * delta);
                    }
                }
                part[threadIdx.x] = acc;
                __syncthreads();
                for (int s = 128; s > 0; s >>= 1) {
                    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
                    __syncthreads();
                }
                if (threadIdx.x == 0) atomicAdd(out, part[0]);
            }
        "#]],
    );
}

#[test]
fn halves_are_packed_eight_to_a_uint4_and_doubles_two_to_a_double2() {
    let halves = render(
        "row_sum_half",
        run("vector_loops", ROWS, "row_sum_half", params("{}")),
    );
    assert!(
        halves.contains("## 16-byte accesses (8×__half as uint4) in 1 loop"),
        "{halves}"
    );
    assert!(
        halves.contains("## 8-byte accesses (4×__half as uint2) in 1 loop"),
        "{halves}"
    );
    assert!(
        halves.contains("*reinterpret_cast<uint4*>(x8) = reinterpret_cast<const uint4*>(&x[(size_t)blockIdx.x * cols + c_base])[c_vec];"),
        "{halves}"
    );
    let doubles = render(
        "center_rows_f64",
        run("vector_loops", ROWS, "center_rows_f64", params("{}")),
    );
    // The 8-byte candidate would be one double: only the 16-byte one is offered.
    assert!(
        doubles.starts_with("## 16-byte accesses (double2) in 2 loops")
            && !doubles.contains("## 8-byte"),
        "{doubles}"
    );
    assert!(doubles.contains("const long i_base = start;"), "{doubles}");
}

/// Each spelling of the lanes and their step that authors write is read as one of the
/// three forms; the label says which.
#[test]
fn the_lanes_are_read_through_casts_aliases_and_literals() {
    let src = SPELLINGS;
    let out = render(
        "spellings",
        run("vector_loops", src, "spellings", params("{}")),
    );
    let first = out.lines().next().unwrap_or("");
    assert_eq!(
        first,
        "## 16-byte accesses (float4) in 3 loops (`i` over the grid's threads, `j` over the block's threads, `k` over a warp's lanes)",
        "{out}"
    );
    assert!(out.contains("const int k_base = wrow * n;"), "{out}");
    assert!(
        out.contains("for (int k_vec = lane; k_vec < k_vecs; k_vec += warpSize)"),
        "{out}"
    );
}

#[test]
fn loops_the_lanes_would_change_are_refused_with_the_reason() {
    for (kernel, want) in [
        (
            "smooth_in_place",
            expect![[r#"
                error: no loop of `smooth_in_place` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = threadIdx.x; j < n - 1; j += blockDim.x)`: the loop writes `x` and reaches it at 2 offsets from `j` (`x[j]`, `x[j + 1]`): a copy would read what another writes
            "#]],
        ),
        (
            "staged_reverse",
            expect![[r#"
            error: no loop of `staged_reverse` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = threadIdx.x; j < n; j += blockDim.x)`: its body calls `__syncthreads` (a barrier or warp collective)
        "#]],
        ),
        (
            "half_step",
            expect![[r#"
            error: no loop of `half_step` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = threadIdx.x; j < n; j += blockDim.x / 2)`: its step `blockDim.x / 2` is not the number of lanes its start ranges over, `blockDim.x` or the block's width: the threads would skip or repeat elements
        "#]],
        ),
        (
            "even_copy",
            expect![[r#"
                error: no loop of `even_copy` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = 2 * threadIdx.x; j < n; j += blockDim.x)`: the lane part of its start (`2 * threadIdx.x`) is not `threadIdx.x`, `blockIdx.x * blockDim.x + threadIdx.x`, a lane of a warp (`threadIdx.x % 32`) or a team of blocks (`(blockIdx.x % K) * blockDim.x + threadIdx.x` with step `K * blockDim.x`): the threads would not take neighbouring elements
            "#]],
        ),
        (
            "lane_maxima",
            expect![[r#"
            error: no loop of `lane_maxima` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int k = threadIdx.x; k < n; k += blockDim.x)`: a thread's partial (`best`) reaches the store to `out[threadIdx.x]` before the lanes combine it: the lanes would fold other elements, so the values stored would change
        "#]],
        ),
        (
            "stage_without_barrier",
            expect![[r#"
            error: no loop of `stage_without_barrier` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = threadIdx.x; j < n; j += blockDim.x)`: its body writes `sh[j]` and `sh` is read after the loop before a barrier (another lane would hold the element)
        "#]],
        ),
        (
            "tag_lanes",
            expect![[r#"
            error: no loop of `tag_lanes` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = tid; j < n; j += blockDim.x)`: its body reads `tid`, which differs from lane to lane (a lane would compute other elements with it)
        "#]],
        ),
        (
            "ragged_teams",
            expect![[r#"
            error: no loop of `ragged_teams` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = (blockIdx.x % 4) * blockDim.x + threadIdx.x; j < cols; j += 4 * blockDim.x)`: its lanes are teams of 4 blocks (`(blockIdx.x % 4) * blockDim.x + threadIdx.x`), but a case launches 258 blocks along x, not a multiple of 4: the last team would miss lanes of the step
        "#]],
        ),
        (
            "team_from_threads",
            expect![[r#"
            error: no loop of `team_from_threads` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = lane; j < cols; j += 4 * blockDim.x)`: the lane part of its start (`lane`) is not `U * blockDim.x + threadIdx.x` with U the same in every thread of a block (a block's index within its team): the threads would not take neighbouring elements
        "#]],
        ),
        (
            "team_short_step",
            expect![[r#"
            error: no loop of `team_short_step` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = (blockIdx.x % 4) * blockDim.x + threadIdx.x; j < cols; j += 2 * blockDim.x)`: its step `2 * blockDim.x` is not the number of lanes of its team (`4 * blockDim.x`): the threads would skip or repeat elements
        "#]],
        ),
        (
            "team_rows_by_block",
            expect![[r#"
            error: no loop of `team_rows_by_block` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = (blockIdx.x % 4) * blockDim.x + threadIdx.x; j < cols - 1; j += 4 * blockDim.x)`: its body reads `xr`, which differs from lane to lane (a lane would compute other elements with it)
        "#]],
        ),
        (
            "team_block_partials",
            expect![[r#"
            error: no loop of `team_block_partials` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = (blockIdx.x % 4) * blockDim.x + threadIdx.x; j < cols; j += 4 * blockDim.x)`: a thread's partial (`acc`) reaches the store to `partial[blockIdx.x]` before the lanes combine it: the lanes would fold other elements, so the values stored would change; `for (int h = 64; h > 0; h >>= 1)`: the condition `h > 0` is not `v < bound` or `v <= bound`
        "#]],
        ),
        (
            "short_y_team",
            expect![[r#"
            error: no loop of `short_y_team` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < cols; j += 4 * blockDim.x)`: its step `4 * blockDim.x` counts 4 blocks along y, but a case launches [3, 3] blocks there: the team would not hold every lane of the step
        "#]],
        ),
        (
            "team_of_k",
            expect![[r#"
            error: no loop of `team_of_k` strides through memory with all its lanes in a form `vector_loops` can vectorize: `for (int j = (blockIdx.x % k) * blockDim.x + threadIdx.x; j < cols; j += k * blockDim.x)`: the block part of its lanes (`(blockIdx.x % k) * blockDim.x + threadIdx.x`) is not `blockIdx.x % K` with K a number, `blockIdx.x - (blockIdx.x / K) * K` or `blockIdx.y` times `blockDim.x`: kernel-lsp cannot prove the team's blocks take every lane of the step once
        "#]],
        ),
    ] {
        check("vector_loops", REFUSALS, kernel, params("{}"), want);
    }
}

#[test]
fn a_vectorized_loop_is_not_vectorized_again() {
    let once = run("vector_loops", ROWS, "softmax_block", params("{}")).expect("vectorizes");
    let again = render(
        "softmax_block",
        run("vector_loops", &once[0].text, "softmax_block", params("{}")),
    );
    assert!(again.starts_with("error: "), "{again}");
    assert!(again.contains("its body already uses `float4`"), "{again}");
    assert!(
        again.contains("it finishes the vector loop before it"),
        "{again}"
    );
}

#[test]
fn a_width_that_is_not_a_power_of_two_is_a_bad_parameter() {
    let out = render(
        "affine_grid",
        run(
            "vector_loops",
            GRIDS,
            "affine_grid",
            params(r#"{"widths": [3]}"#),
        ),
    );
    assert_eq!(
        out,
        "error: parameter `widths`: 3 is not a vector width; use 2, 4, 8 or 16\n"
    );
}
