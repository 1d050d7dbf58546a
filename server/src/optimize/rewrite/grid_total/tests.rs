use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{assert_has, cuda, labels, not_applicable, ranked_steps, show};
use super::{literal_value, Fold};
use crate::syntax::Lang;

const TOTALS: &str = include_str!("../../../../../tests/fixtures/rewrites/totals/one_block.cu");

#[test]
fn a_one_block_tree_total_becomes_a_grid_whose_last_block_combines() {
    let out = cuda(TOTALS, "mse_tree", "grid_total", json!({})).unwrap();
    expect![[r#"
        [
            "grid of min(1 * sms, 1024) blocks, last block combines, 8 iterations per trip",
            "grid of min(1 * sms, 1024) blocks, float4 loads, last block combines, 8 iterations per trip",
            "grid of min(2 * sms, 1024) blocks, last block combines, 8 iterations per trip",
            "grid of min(2 * sms, 1024) blocks, float4 loads, last block combines, 8 iterations per trip",
            "grid of min(4 * sms, 1024) blocks, last block combines, 8 iterations per trip",
            "grid of min(4 * sms, 1024) blocks, float4 loads, last block combines, 8 iterations per trip",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    let shown = show(Lang::Cuda, TOTALS, &out[2], "mse_tree");
    assert_has(
        &shown,
        &[
            "// @bench grid = min(2 * sms, 1024); block = 1024",
            "int i = threadIdx.x + blockIdx.x * blockDim.x;",
            "for (; i < n; i += gridDim.x * blockDim.x) {",
            "static float acc_parts[1 << 20];",
            "acc_parts[slot] = acc;",
            "if (threadIdx.x == 0) last_block = atomicAdd(&blocks_done, 1u) == gridDim.x - 1;",
            "if (!last_block) return;",
            "acc = __ldcg(&acc_parts[threadIdx.x]);",
            "for (; g + 8 <= gridDim.x; g += 8) {",
            "const float w_0_7 = __ldcg(&acc_parts[(g + 7) * blockDim.x + threadIdx.x]);",
            "acc += w_0_6;\n            acc += w_0_7;\n        }",
            "for (; g < gridDim.x; ++g) {",
            "if (threadIdx.x == 0) blocks_done = 0;",
            // The author's tree and epilogue follow, unchanged.
            "    s[threadIdx.x] = acc;\n    __syncthreads();",
            "if (threadIdx.x == 0) out[0] = s[0] / n;",
        ],
    );
    // A sum that starts at zero needs no restart.
    assert!(
        !shown.contains("other threads start from the identity"),
        "{shown}"
    );
    // The vector variant reads a and b 16 bytes at a time where both are aligned, four
    // copies of the body in element order, and the rest through the scalar loop.
    let vec = show(Lang::Cuda, TOTALS, &out[1], "mse_tree");
    assert_has(
        &vec,
        &[
            "int i = blockIdx.x * blockDim.x + threadIdx.x;",
            "if ((((size_t)a | (size_t)b) & 15) == 0) {",
            "< (n) / 4; j += (int)(8 * (gridDim.x * blockDim.x))) {",
            "const float4 a_v = reinterpret_cast<const float4 *>(a)[j];",
            "float d = a_v.x - b_v.x;",
            "float d = a_v.w - b_v.w;",
            "i = (n) / 4 * 4 + blockIdx.x * blockDim.x + threadIdx.x;",
            "for (; i < n; i += gridDim.x * blockDim.x) {",
        ],
    );
    // The body names no `i` once its reads are vectors: no copy declares one.
    assert!(!vec.contains("const int i = "), "{vec}");
    // A body that still names `i` (a table read at another index, `i` itself) gets each
    // copy's own element; only the read at `i` is a vector.
    let out = cuda(
        TOTALS,
        "weighted_sum",
        "grid_total",
        json!({"blocks_per_sm": [2]}),
    )
    .unwrap();
    let vec = show(Lang::Cuda, TOTALS, &out[1], "weighted_sum");
    assert_has(
        &vec,
        &[
            "const float4 x_v = reinterpret_cast<const float4 *>(x)[j];",
            // Each copy declares its own `i` in its own scope.
            "{\n                            const int i = 4 * j + 3;\n                            acc += wt[i % 16] * x_v.w * (float)(i & 3);\n                        }",
        ],
    );
}

#[test]
fn a_serial_total_gets_a_block_and_a_tree_for_thread_zero() {
    let out = cuda(
        TOTALS,
        "norm_serial",
        "grid_total",
        json!({"blocks_per_sm": [2]}),
    )
    .unwrap();
    let shown = show(Lang::Cuda, TOTALS, &out[0], "norm_serial");
    assert_has(
        &shown,
        &[
            "// @bench grid = min(2 * sms, 1024); block = 256",
            // It starts from a value the caller passes: only the original thread keeps it.
            "if (blockIdx.x != 0 || threadIdx.x != 0) acc = 0; // other threads start from the identity",
            "int i = 0 + blockIdx.x * blockDim.x + threadIdx.x;",
            "__shared__ float acc_lanes[1024];",
            "acc_lanes[threadIdx.x] += acc_lanes[threadIdx.x + w];",
            "if (threadIdx.x != 0) return;\n        acc = acc_lanes[0];",
            "*out = sqrtf(acc);",
        ],
    );
}

#[test]
fn maxima_minima_counts_and_several_accumulators_fold_with_their_own_operation() {
    let shown = show(
        Lang::Cuda,
        TOTALS,
        &cuda(TOTALS, "moments", "grid_total", json!({})).unwrap()[0],
        "moments",
    );
    assert_has(
        &shown,
        &[
            "static double sum_parts[1 << 20];",
            "static double sq_parts[1 << 20];",
            "static double mn_parts[1 << 20];",
            "size_t i = threadIdx.x + blockIdx.x * blockDim.x;",
            "const double w_2_0 = __ldcg(&mn_parts[(g + 0) * blockDim.x + threadIdx.x]);",
            // Block by block, each accumulator with its own fold.
            "sum += w_0_0;\n            sq += w_1_0;\n            if (w_2_0 < mn) mn = w_2_0;\n            sum += w_0_1;",
        ],
    );
    let shown = show(
        Lang::Cuda,
        TOTALS,
        &cuda(TOTALS, "count_positive", "grid_total", json!({})).unwrap()[0],
        "count_positive",
    );
    assert_has(
        &shown,
        &["static unsigned c_parts[1 << 20];", "c += w_0_0;"],
    );
    // Shuffles after the loop carry `m` too, but read no memory: the reading loop is one.
    let shown = show(
        Lang::Cuda,
        TOTALS,
        &cuda(TOTALS, "max_abs_shfl", "grid_total", json!({})).unwrap()[0],
        "max_abs_shfl",
    );
    assert_has(
        &shown,
        &[
            "int i = tid + blockIdx.x * blockDim.x;",
            "if (w_0_3 > m) m = w_0_3;",
        ],
    );
}

#[test]
fn what_partials_cannot_reproduce_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(TOTALS, k, "grid_total", json!({})));
    expect![[r#"
        `argmax_serial` cannot spread its total over a grid: its loop carries `best` as a value that is no sum, product, maximum or minimum (an index beside a maximum, a rescaled sum), which partial results cannot reproduce
        `logsumexp_serial` cannot spread its total over a grid: 2 loops read global memory (a total in several passes)
        `sum_atomic` launches 16384 blocks, not one: its blocks already share the work
        `prefix_serial` cannot spread its total over a grid: line 169: it writes `y[i]` inside the loop; only the code after it may write"#]]
    .assert_eq(
        &["argmax_serial", "logsumexp_serial", "sum_atomic", "prefix_serial"]
            .map(why)
            .join("\n"),
    );
    // A block of threads that each walk the whole range, and a kernel that reads blockIdx.
    let every = TOTALS.replace(
        "// @bench base = 0.5\n// @bench grid = 1; block = 1\n",
        "// @bench base = 0.5\n// @bench grid = 1; block = 32\n",
    );
    assert_ne!(every, TOTALS);
    let why = not_applicable(cuda(&every, "norm_serial", "grid_total", json!({})));
    assert!(
        why.contains("every thread of its block (32, 1, 1) walks the range one step at a time"),
        "{why}"
    );
    // A thread that leaves before the loop would never reach the combine.
    let early = TOTALS.replace(
        "    float acc = base;\n",
        "    if (n <= 0) return;\n    float acc = base;\n",
    );
    assert_ne!(early, TOTALS);
    let why = not_applicable(cuda(&early, "norm_serial", "grid_total", json!({})));
    assert!(why.contains("`return;` returns before its loop"), "{why}");
    let blocky = TOTALS.replace("float acc = base;", "float acc = base + blockIdx.x;");
    let why = not_applicable(cuda(&blocky, "norm_serial", "grid_total", json!({})));
    assert!(
        why.contains("it reads `blockIdx`: its work is already split by block"),
        "{why}"
    );
}

#[test]
fn the_one_block_total_ranks_grid_total_first() {
    let ranked = ranked_steps(TOTALS, "mse_tree");
    assert!(ranked.iter().any(|s| s == "grid_total"), "{ranked:?}");
    assert!(!ranked_steps(TOTALS, "sum_atomic")
        .iter()
        .any(|s| s == "grid_total"));
    assert!(!ranked_steps(TOTALS, "logsumexp_serial")
        .iter()
        .any(|s| s == "grid_total"));
}

#[test]
fn folds_and_starting_values() {
    assert_eq!(Fold::Max.statement("t", "o"), "if (o > t) t = o;");
    assert_eq!(Fold::Product.statement("t", "o"), "t *= o;");
    assert_eq!(Fold::of("count"), Some(Fold::Sum));
    assert_eq!(Fold::of("prefix sum"), None);
    assert_eq!(Fold::Min.identity(), None);
    for (t, v) in [
        ("0.0f", Some(0.0)),
        ("0u", Some(0.0)),
        ("1.", Some(1.0)),
        ("base", None),
    ] {
        assert_eq!(literal_value(t), v, "{t}");
    }
}
