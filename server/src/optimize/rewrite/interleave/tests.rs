use expect_test::expect;

use super::super::unit::testing::{check, params, render, run};

const LOOPS: &str = include_str!("../../../../../tests/fixtures/rewrites/interleave/loops.cu");
const COL_SUM: &str = include_str!("../../../../../examples/col_sum.cu");

#[test]
fn a_loop_stepped_by_block_dim_runs_four_iterations_per_trip_then_the_rest() {
    check(
        "interleave",
        LOOPS,
        "col_sum_split",
        params(r#"{"factors": [4]}"#),
        expect![[r#"
            ## 4 iterations per trip of `for (int r = threadIdx.y; r < rows; r += blockDim.y)`, their loads in flight together
            __global__ void col_sum_split(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
                const bool live = (int)(blockIdx.x * blockDim.x + threadIdx.x) < cols;
                int col = live ? (int)(blockIdx.x * blockDim.x + threadIdx.x) : 0;
                float acc = 0.0f;
                { // 4 iterations per trip, then the rest
                    int r = threadIdx.y;
                    for (; r + (int)(3 * blockDim.y) < rows; r += (int)(4 * blockDim.y)) {
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
                    }
                    for (; r < rows; r += blockDim.y) {
                        acc += x[(size_t)r * cols + col];
                    }
                }
                __shared__ float part[1024];
                part[threadIdx.y * blockDim.x + threadIdx.x] = acc;
                __syncthreads();
                if (live && threadIdx.y == 0) {
                    float s = 0.0f;
                    for (unsigned w = 0; w < blockDim.y; ++w) s += part[w * blockDim.x + threadIdx.x];
                    out[col] = s;
                }
            }
        "#]],
    );
}

#[test]
fn a_grid_stride_loop_that_writes_keeps_its_order_of_statements() {
    check(
        "interleave",
        LOOPS,
        "grid_stride_axpy",
        params(r#"{"factors": [2]}"#),
        expect![[r###"
            ## 2 iterations per trip of `for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)blockDim.x * gridDim.x)`, their loads in flight together
            extern "C" __global__ void grid_stride_axpy(int n, float a, const float* x, float* y)
            {
              { // 2 iterations per trip, then the rest
                long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
                for (; i + (long)((long)blockDim.x * gridDim.x) < n; i += (long)(2 * ((long)blockDim.x * gridDim.x))) {
                  {
                    float v = x[i];
                    y[i] = a * v + y[i];
                  }
                  {
                    float v = x[(i + (long)((long)blockDim.x * gridDim.x))];
                    y[(i + (long)((long)blockDim.x * gridDim.x))] = a * v + y[(i + (long)((long)blockDim.x * gridDim.x))];
                  }
                }
                for (; i < n; i += (long)blockDim.x * gridDim.x) {
                  float v = x[i];
                  y[i] = a * v + y[i];
                }
              }
            }
        "###]],
    );
}

#[test]
fn a_while_loop_stepped_by_its_last_statement_is_interleaved_before_it() {
    check(
        "interleave",
        LOOPS,
        "row_dot",
        params(r#"{"factors": [4]}"#),
        expect![[r#"
            ## 4 iterations per trip of `while (j < n)`, their loads in flight together
            __global__ void row_dot(const float *w, const float *x, float *y, int m, int n) {
                int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
                int lane = threadIdx.x % 32;
                if (row >= m) return;
                const float *p = w + (size_t)row * n;
                float s = 0.f;
                int j = lane;
                while (j + (decltype(j))(3 * warpSize) < n) {
                    {
                        float t = p[j] * x[j];
                        s += t;
                    }
                    {
                        float t = p[(j + (decltype(j))(warpSize))] * x[(j + (decltype(j))(warpSize))];
                        s += t;
                    }
                    {
                        float t = p[(j + (decltype(j))(2 * warpSize))] * x[(j + (decltype(j))(2 * warpSize))];
                        s += t;
                    }
                    {
                        float t = p[(j + (decltype(j))(3 * warpSize))] * x[(j + (decltype(j))(3 * warpSize))];
                        s += t;
                    }
                    j += (decltype(j))(4 * warpSize);
                }
                while (j < n) {
                    float t = p[j] * x[j];
                    s += t;
                    j += warpSize;
                }
                for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffff, s, o);
                if (lane == 0) y[row] = s;
            }
        "#]],
    );
}

#[test]
fn an_unsigned_variable_a_le_bound_and_a_parameter_step() {
    check(
        "interleave",
        LOOPS,
        "strided_max",
        params(r#"{"factors": [2]}"#),
        expect![[r#"
            ## 2 iterations per trip of `for (unsigned k = threadIdx.x; k <= last; k += stride)`, their loads in flight together
            __global__ void strided_max(const double* v, double* out, int n, unsigned stride) {
                double best = -1e300;
                unsigned last = (unsigned)n - 1;
                { // 2 iterations per trip, then the rest
                    unsigned k = threadIdx.x;
                    for (; k + (unsigned)(stride) <= last; k += (unsigned)(2 * stride)) {
                        {
                            double e = v[k];
                            if (e > best) best = e;
                        }
                        {
                            double e = v[(k + (unsigned)(stride))];
                            if (e > best) best = e;
                        }
                    }
                    for (; k <= last; k += stride) {
                        double e = v[k];
                        if (e > best) best = e;
                    }
                }
                out[threadIdx.x] = best;
            }
        "#]],
    );
}

#[test]
fn a_loop_with_a_constant_step_is_left_to_the_compiler() {
    check(
        "interleave",
        COL_SUM,
        "col_sum",
        params("{}"),
        expect![[r#"
        error: no loop of `col_sum` can run several iterations per trip: `for (int r = 0; r < rows; ++r)`: its step is the constant 1: the compiler unrolls such a loop (`unroll` sets the factor)
    "#]],
    );
}

#[test]
fn loops_that_leave_early_meet_a_barrier_read_nothing_or_move_their_bound_are_refused() {
    for (kernel, want) in [
        (
            "first_negative",
            expect![[r#"
            error: no loop of `first_negative` can run several iterations per trip: `for (int i = threadIdx.x; i < n; i += blockDim.x)`: its body has `break`
        "#]],
        ),
        (
            "staged_and_pure",
            expect![[r#"
                error: no loop of `staged_and_pure` can run several iterations per trip: `for (unsigned t = 0; t < 4 * blockDim.x; t += blockDim.x)`: its body calls `__syncthreads` (a barrier or warp collective); `for (unsigned k = 0; k < 8 * blockDim.x; k += blockDim.x)`: its body reads no memory (nothing to have in flight); `for (unsigned k = 1; k < blockDim.x; k += k)`: the step `k += k` reads `k` (its steps differ); `for (unsigned k = threadIdx.x; k < 256; k += blockDim.x)`: its body reads only shared memory (no long load to overlap)
            "#]],
        ),
        (
            "shrinking",
            expect![[r#"
            error: no loop of `shrinking` can run several iterations per trip: `for (int i = 0; i < end; i += gridDim.x)`: its body writes `end`, which the bound or the step reads
        "#]],
        ),
    ] {
        check("interleave", LOOPS, kernel, params("{}"), want);
    }
}

#[test]
fn an_interleaved_loop_is_not_interleaved_again() {
    let once = run(
        "interleave",
        LOOPS,
        "col_sum_split",
        params(r#"{"factors": [4]}"#),
    )
    .expect("interleaves");
    let again = render(
        "col_sum_split",
        run("interleave", &once[0].text, "col_sum_split", params("{}")),
    );
    assert!(
        again.starts_with("error: ") && again.contains("is beside it (it is interleaved already"),
        "{again}"
    );
}

const NESTS: &str = include_str!("../../../../../tests/fixtures/rewrites/interleave/nests.cu");

/// The jam candidates alone (the single-loop ones come first, one per factor).
fn jams(kernel: &str, factor: u64) -> String {
    let out = run(
        "interleave",
        NESTS,
        kernel,
        params(&format!(r#"{{"factors": [{factor}]}}"#)),
    );
    let out = out.map(|c| {
        c.into_iter()
            .filter(|c| c.label.contains("fused"))
            .collect()
    });
    render(kernel, out)
}

#[test]
fn a_block_per_channel_mean_runs_four_images_per_trip_with_their_inner_loops_fused() {
    expect![[r#"
        ## 4 iterations of `for (int n = 0; n < N; ++n)` per trip, their inner loops fused
        __global__ void block_mean_nchw(const float* __restrict__ x, float* __restrict__ mean, int N, int C, int HW)
        {
          __shared__ float acc[256];
          float t = 0.0f;
          { // 4 outer iterations per trip, their inner loops fused, then the rest
            int n = 0;
            for (; n + 3 < N; n += 4) {
              for (int p = threadIdx.x; p < HW; p += blockDim.x) {
                { t += x[((size_t)n * C + blockIdx.x) * HW + p]; }
                { t += x[((size_t)(n + 1) * C + blockIdx.x) * HW + p]; }
                { t += x[((size_t)(n + 2) * C + blockIdx.x) * HW + p]; }
                { t += x[((size_t)(n + 3) * C + blockIdx.x) * HW + p]; }
              }
            }
            for (; n < N; ++n) {
              for (int p = threadIdx.x; p < HW; p += blockDim.x)
                t += x[((size_t)n * C + blockIdx.x) * HW + p];
            }
          }
          acc[threadIdx.x] = t;
          __syncthreads();
          if (threadIdx.x == 0) {
            float total = 0.0f;
            for (unsigned i = 0; i < blockDim.x; ++i) total += acc[i];
            mean[blockIdx.x] = total / ((float)N * HW);
          }
        }
    "#]].assert_eq(&jams("block_mean_nchw", 4));
}

#[test]
fn a_batched_max_renames_the_locals_before_the_inner_loop_per_copy() {
    expect![[r#"
        ## 2 iterations of `for (unsigned b = blockIdx.y; b < B; b += gridDim.y)` per trip, their inner loops fused
        __global__ void batched_dot_max(const float* a, const float* w, float* out, unsigned B, int R, int K) {
            float best = -3.0e38f;
            { // 2 outer iterations per trip, their inner loops fused, then the rest
                unsigned b = blockIdx.y;
                for (; b + (unsigned)(gridDim.y) < B; b += (unsigned)(2 * gridDim.y)) {
                    const float* row = a + ((size_t)b * R + blockIdx.x) * K;
                    const float* wb = w + (size_t)b * K;
                    const float* row_1 = a + ((size_t)(b + (unsigned)(gridDim.y)) * R + blockIdx.x) * K;
                    const float* wb_1 = w + (size_t)(b + (unsigned)(gridDim.y)) * K;
                    for (int k = threadIdx.x; k < K; k += blockDim.x) {
                        {
                            best = fmaxf(best, row[k] * wb[k]);
                        }
                        {
                            best = fmaxf(best, row_1[k] * wb_1[k]);
                        }
                    }
                }
                for (; b < B; b += gridDim.y) {
                    const float* row = a + ((size_t)b * R + blockIdx.x) * K;
                    const float* wb = w + (size_t)b * K;
                    for (int k = threadIdx.x; k < K; k += blockDim.x) {
                        best = fmaxf(best, row[k] * wb[k]);
                    }
                }
            }
            out[blockIdx.x * 64 + blockIdx.y * 32 + threadIdx.x] = best;
        }
    "#]].assert_eq(&jams("batched_dot_max", 2));
}

#[test]
fn an_assigned_outer_variable_and_a_body_without_braces_are_jammed() {
    expect![[r#"
        ## 2 outer iterations per trip in each of 2 nests, their inner loops fused
        __global__ void odd_rows(const float* x, float* out, int M, int L) {
            float s = 0.0f;
            float prod = 1.0f;
            int i;
            for (i = 1; i + 3 <= M; i += 6) {
                int base = i * L;
                base += 0;
                int base_1 = (i + 3) * L;
                base_1 += 0;
                for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < L; j += gridDim.x * blockDim.x) {
                    { s -= x[base + j]; }
                    { s -= x[base_1 + j]; }
                }
            }
            for (; i <= M; i += 3) {
                int base = i * L;
                base += 0;
                for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < L; j += gridDim.x * blockDim.x) s -= x[base + j];
                // nothing after the inner loop
            }
            { // 2 outer iterations per trip, their inner loops fused, then the rest
                int r = 0;
                for (; r + 1 < 2; r += 2) {
                    for (int j = threadIdx.x; j < 64; j += blockDim.x * 64) {
                        { prod *= x[r * L + j + blockIdx.x]; }
                        { prod *= x[(r + 1) * L + j + blockIdx.x]; }
                    }
                }
                for (; r < 2; r++) {
                    for (int j = threadIdx.x; j < 64; j += blockDim.x * 64) prod *= x[r * L + j + blockIdx.x];
                }
            }
            out[blockIdx.x * 32 + threadIdx.x] = s;
            out[64 + blockIdx.x * 32 + threadIdx.x] = prod;
        }
    "#]].assert_eq(&jams("odd_rows", 2));
}

/// Why the nests of `kernel` are not jammed, one line per nest.
fn nest_refusals(kernel: &str) -> String {
    let params = std::collections::BTreeMap::new();
    super::super::with_text(crate::syntax::Lang::Cuda, NESTS, kernel, &params, |cx| {
        let unit = super::Unit::of(cx, "interleave").expect("a unit");
        let mut out = String::new();
        for f in &unit.funcs {
            let body = f.child_by_field_name("body").expect("a body");
            for l in super::descendants(body) {
                if super::is_loop(l) && super::jam::holds_loop(l) {
                    let why = super::jam::nest(cx, *f, l, &[]).err().unwrap_or_default();
                    out.push_str(&format!("{}: {why}\n", super::loop_header(cx, l)));
                }
            }
        }
        out
    })
    .expect("the kernel")
}

#[test]
fn nests_with_differing_trips_a_store_an_order_sensitive_update_or_a_barrier_are_not_jammed() {
    let got: String = [
        "lower_sums",
        "scale_rows",
        "arg_best",
        "staged_rows",
        "running_peak",
        "last_sincos",
        "counted_rows",
    ]
    .iter()
    .map(|k| nest_refusals(k))
    .collect();
    expect![[r#"
        for (int i = 0; i < n; i++): its inner loop's header reads `i` (its trips differ per outer iteration)
        for (int r = 0; r < rows; r++): its inner loop has a store to `y[r * cols + c]`, which the jam would reorder
        for (int r = 0; r < rows; r++): its inner loop's `best = v` is not an associative, commutative update of `best` (order-sensitive)
        for (int r = 0; r < rows; r++): its inner loop: its body calls `__syncthreads` (a barrier or warp collective)
        for (int r = 0; r < rows; r++): its inner loop reads `s` besides updating it (a running value, order-sensitive)
        for (int r = 0; r < rows; r++): its inner loop has a call `sincosf(x[r * cols + c], &sn, &cs)` for its effect, which the jam would reorder
        for (int r = 0; r < rows; r++): before its inner loop, a call `weight_and_count` that makes a store to `counts[r]`
    "#]].assert_eq(&got);
}

/// A call of the file's own function is followed: one that stores is not reordered, one
/// that only computes is jammed.
#[test]
fn a_helper_that_stores_keeps_its_nest_and_one_that_computes_is_jammed() {
    let refused = nest_refusals("counted_rows");
    assert!(
        refused.contains("a call `weight_and_count` that makes a store to `counts[r]`"),
        "{refused}"
    );
    let jammed = jams("squared_rows", 4);
    assert!(jammed.contains("their inner loops fused"), "{jammed}");
    assert!(jammed.contains("squared(xr_1[c])"), "{jammed}");
}
