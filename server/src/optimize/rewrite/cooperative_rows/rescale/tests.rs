use expect_test::expect;
use serde_json::json;

use super::super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const ONLINE: &str = include_str!("../../../../../../tests/fixtures/rewrites/rows/online.cu");

fn warp(kernel: &str) -> String {
    let params = json!({ "modes": ["warp"], "block_threads": [256], "walk_tile": [1] });
    let out = cuda(ONLINE, kernel, "cooperative_rows", params)
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    show(Lang::Cuda, ONLINE, &out[0], kernel)
}

/// The lines of `out` from the first that contains `from`.
fn from(out: &str, from: &str) -> String {
    let at = out
        .find(from)
        .unwrap_or_else(|| panic!("no `{from}` in {out}"));
    out[at..].to_string()
}

#[test]
fn lanes_combine_a_running_maximum_and_its_sum_with_the_authors_factor() {
    expect![[r#"
        for (int offset = 16; offset > 0; offset /= 2) {
                {
                    float m_other = __shfl_xor_sync(0xffffffff, m, offset);
                    float s_other = __shfl_xor_sync(0xffffffff, s, offset);
                    float m_new = m_other > m ? m_other : m;
                    s = (m == m_new ? s : s * expf(m - m_new)) + (m_other == m_new ? s_other : s_other * expf(m_other - m_new));
                    m = m_new;
                }
            }
            if (lane == 0) out[r] = m + logf(s);
        }"#]]
    .assert_eq(&from(&warp("online_lse"), "for (int offset"));
}

#[test]
fn a_saved_old_maximum_a_factor_in_a_local_and_two_sums_are_one_group() {
    // The factor's own call (`__expf`) is the one the combine uses.
    let saved = warp("online_lse_inf");
    assert!(saved.contains("total = (best == best_new ? total : total * __expf(best - best_new)) + (best_other == best_new ? total_other : total_other * __expf(best_other - best_new));"), "{saved}");
    let two = warp("softmax_weighted_mean");
    for line in [
        "double m_new = m_other > m ? m_other : m;",
        "den = (m == m_new ? den : den * exp(m - m_new)) + (m_other == m_new ? den_other : den_other * exp(m_other - m_new));",
        "num = (m == m_new ? num : num * exp(m - m_new)) + (m_other == m_new ? num_other : num_other * exp(m_other - m_new));",
    ] {
        assert!(two.contains(line), "{line}\n{two}");
    }
}

#[test]
fn sums_that_only_look_rescaled_are_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(ONLINE, k, "cooperative_rows", json!({})));
    expect!["`rescaled_raw_sum` cannot share a row between threads: `s = s * expf(m - mn) + v` assigns `s` in the column loop `for (int c = 0; c < cols; ++c)`, and it is not a sum, product, max or min of `s`; kernel-lsp cannot split it between lanes"].assert_eq(&why("rescaled_raw_sum"));
    expect!["`rescaled_backwards` cannot share a row between threads: `s = s * expf(mn - m) + expf(v - mn)` assigns `s` in the column loop `for (int c = 0; c < cols; ++c)`, and it is not a sum, product, max or min of `s`; kernel-lsp cannot split it between lanes"].assert_eq(&why("rescaled_backwards"));
    expect!["`rescaled_from_one` cannot share a row between threads: `s` is rescaled by a running maximum in the column loop `for (int c = 0; c < cols; ++c)` but does not start at zero before it; every lane would count its starting value"].assert_eq(&why("rescaled_from_one"));
}

#[test]
fn a_cluster_or_grid_of_blocks_per_row_is_not_offered_for_a_rescaled_group() {
    let clusters = |src: &str| {
        let out = cuda(src, "online_lse", "cooperative_rows", json!({})).unwrap();
        labels(&out)
            .iter()
            .filter(|l| l.contains("cluster"))
            .count()
    };
    // Rows long and few enough that a plain sum's rows get clusters of blocks.
    let online = ONLINE.replacen(
        "rows = 300, 37; cols = 1000, 7",
        "rows = 64, 37; cols = 65536, 7",
        1,
    );
    assert_eq!(clusters(&online), 0);
    // The control: the same loop with a plain sum (and a maximum) gets clusters.
    let plain = online.replacen(
        "float mn = fmaxf(m, v);\n        s = s * expf(m - mn) + expf(v - mn);\n        m = mn;",
        "s += v;\n        m = fmaxf(m, v);",
        1,
    );
    assert_ne!(plain, online);
    assert!(clusters(&plain) > 0);
}
