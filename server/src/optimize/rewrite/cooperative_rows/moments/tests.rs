use expect_test::expect;
use serde_json::json;

use super::super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const MOMENTS: &str = include_str!("../../../../../../tests/fixtures/rewrites/rows/moments.cu");

fn warp(kernel: &str) -> String {
    let params = json!({ "modes": ["warp"], "block_threads": [256], "walk_tile": [1] });
    let out = cuda(MOMENTS, kernel, "cooperative_rows", params)
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, MOMENTS, &out[0], kernel)
}

#[test]
fn lanes_combine_counts_means_and_squared_deviations_by_chans_formula() {
    let out = warp("welford_var");
    let at = out.find("for (int offset").expect("a shuffle combine");
    expect![[r#"
        for (int offset = 16; offset > 0; offset /= 2) {
                {
                    float mean_other = __shfl_xor_sync(0xffffffff, mean, offset);
                    float n_other = __shfl_xor_sync(0xffffffff, n, offset);
                    float m2_other = __shfl_xor_sync(0xffffffff, m2, offset);
                    if (n_other > 0) { float n_total = n + n_other; float mean_delta = mean_other - mean; mean += mean_delta * n_other / n_total; m2 += m2_other + mean_delta * mean_delta * n * n_other / n_total; n = n_total; }
                }
            }
            if (lane == 0) var[r] = m2 / n;
        }"#]]
    .assert_eq(&out[at..]);
    // An int count and a second deviation in a local keep their own types.
    let stats = warp("welford_stats");
    assert!(
        stats.contains("int count_other = __shfl_xor_sync(0xffffffff, count, offset);"),
        "{stats}"
    );
    assert!(stats.contains("if (count_other > 0) { int count_total = count + count_other; double mean_delta = mean_other - mean;"), "{stats}");
}

#[test]
fn a_count_from_the_column_index_or_an_old_mean_square_is_refused() {
    let why = |k: &str| not_applicable(cuda(MOMENTS, k, "cooperative_rows", json!({})));
    expect!["`welford_index_count` cannot share a row between threads: the column loop `for (int c = 0; c < cols; ++c)` reads the running value of `mean`; each lane only has its own part of it until the loop ends (`v - mean` reads it before this iteration's update)"].assert_eq(&why("welford_index_count"));
    expect!["`welford_old_mean` cannot share a row between threads: the column loop `for (int c = 0; c < cols; ++c)` reads the running value of `mean`; each lane only has its own part of it until the loop ends (`v - mean` reads it before this iteration's update)"].assert_eq(&why("welford_old_mean"));
    // Starting from a nonzero mean: every lane would count it.
    let shifted = MOMENTS.replacen(
        "float n = 0.f, mean = 0.f, m2 = 0.f;",
        "float n = 0.f, mean = 1.f, m2 = 0.f;",
        1,
    );
    assert_ne!(shifted, MOMENTS);
    expect!["`welford_var` cannot share a row between threads: `mean` is carried with a running mean in the column loop `for (int c = 0; c < cols; ++c)` but does not start at zero before it; every lane would count its starting value"].assert_eq(&not_applicable(cuda(&shifted, "welford_var", "cooperative_rows", json!({}))));
}
