use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, show, triton};
use crate::syntax::Lang;

const PASSES: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/passes.py");
const SOFTMAX: &str = include_str!("../../../../../examples/softmax.py");

fn online(k: &str) -> super::super::Candidate {
    let out = triton(PASSES, k, "triton_online", json!({})).unwrap();
    assert_eq!(out.len(), 1, "{:?}", labels(&out));
    out.into_iter().next().unwrap()
}

#[test]
fn a_three_pass_softmax_becomes_two_passes_loading_each_tile_once() {
    let c = online("softmax3");
    assert_eq!(
        c.label,
        "one pass: the loop at line 21 joins the loop at line 16 (online rescaling)"
    );
    expect![[r#"
        # Three passes: the maximum, the sum of exponentials, the write.
        # @bench rows = 37, 5; cols = 300, 1000
        # @bench x_ptr: in f32[rows, cols]; y_ptr: out f32[rows, cols]
        # @bench grid = rows; BLOCK = 128
        @triton.jit
        def softmax3(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            base = x_ptr + row * cols
            m = -float("inf")
            s = 0.0
            for off in range(0, cols, BLOCK):
                m_prev = m
                c = off + tl.arange(0, BLOCK)
                x = tl.load(base + c, mask=c < cols, other=-float("inf"))
                m = tl.maximum(m, tl.max(x, axis=0))
                # online rescaling: the sums below follow the running maximum
                s = s * tl.exp(m_prev - m)
                s += tl.sum(tl.exp(x - m), axis=0)
            for off in range(0, cols, BLOCK):
                c = off + tl.arange(0, BLOCK)
                x = tl.load(base + c, mask=c < cols)
                tl.store(y_ptr + row * cols + c, tl.exp(x - m) / s, mask=c < cols)"#]]
    .assert_eq(&show(Lang::Triton, PASSES, &c, "softmax3"));
}

#[test]
fn while_loops_exp2_and_a_local_difference_merge_with_the_loop_variable_renamed() {
    let c = online("logsumexp_while");
    expect![[r#"
        # Logsumexp per row with while loops, other names, exp2 and the difference in a local.
        # @bench R = 21, 3; N = 777, 64
        # @bench inp: in f32[R, N] ~ normal(0, 4); out: out f32[R]
        # @bench grid = R; BN = 64; num_warps = 2
        @triton.jit
        def logsumexp_while(inp, out, N, BN: tl.constexpr):
            pid = tl.program_id(axis=0)
            mx = float("-inf")
            j = 0
            total = 0.0
            while j < N:
                mx_prev = mx
                idx = j + tl.arange(0, BN)
                v = tl.load(inp + pid * N + idx, idx < N, float("-inf"))
                mx = tl.maximum(tl.max(v, 0), mx)
                # online rescaling: the sums below follow the running maximum
                total = total * tl.exp2((mx_prev - mx) * 1.4426950408889634)
                d = v - mx
                total = total + tl.sum(tl.exp2(d * 1.4426950408889634), 0)
                j += BN
            tl.store(out + pid, mx + tl.log2(total) / 1.4426950408889634)"#]]
    .assert_eq(&show(Lang::Triton, PASSES, &c, "logsumexp_while"));
}

#[test]
fn row_maxima_of_a_2d_tile_rescale_row_sums_under_a_where() {
    let c = online("xent_rows");
    let shown = show(Lang::Triton, PASSES, &c, "xent_rows");
    assert!(
        shown.contains(
            "        row_max = tl.maximum(row_max, tl.max(z, axis=1))\n        # online rescaling: the sums below follow the running maximum\n        denom = denom * tl.exp(row_max_prev - row_max)\n        z = tl.load(logits + rows[:, None] * V + cols[None, :], mask=ok, other=0.0)\n        denom += tl.sum("
        ),
        "{shown}"
    );
    assert!(
        shown.contains("    denom = tl.zeros([ROWS], tl.float32)\n    for c0 in tl.range(0, V, COLS):\n        row_max_prev = row_max\n"),
        "{shown}"
    );
    assert!(
        !shown.contains("c1"),
        "the second loop's variable is renamed: {shown}"
    );
}

#[test]
fn what_online_rescaling_cannot_express_is_refused_with_the_reason() {
    let why = |k: &str| not_applicable(triton(PASSES, k, "triton_online", json!({})));
    expect!["`mixed_terms` has no pair of passes to merge: lines 90 and 94: `tl.exp(x - m) + x` is not linear in exp(-max)"].assert_eq(&why("mixed_terms"));
    expect!["`spread` has no pair of passes to merge: lines 110 and 114: `m` is used outside exp(...); lines 114 and 119: they walk different ranges (0, cols, BLOCK and 0, cols, 2 * BLOCK)"].assert_eq(&why("spread"));
    expect![
        "`softmax_kernel` has 0 loop(s) in its body; merging passes needs two over the same range"
    ]
    .assert_eq(&not_applicable(triton(
        SOFTMAX,
        "softmax_kernel",
        "triton_online",
        json!({}),
    )));
}

#[test]
fn bodies_nested_thousands_deep_are_refused_by_every_triton_loop_cure() {
    let deep = format!("{}c < cols{}", "(".repeat(3000), ")".repeat(3000));
    let src = PASSES.replacen(
        "mask=c < cols, other=-float(\"inf\"))",
        &format!("mask={deep}, other=-float(\"inf\"))"),
        1,
    );
    assert_ne!(src, PASSES);
    for id in [
        "triton_online",
        "triton_row_tile",
        "triton_split_loop",
        "triton_program_tile",
    ] {
        let why = not_applicable(triton(&src, "softmax3", id, json!({})));
        assert_eq!(
            why, "`softmax3` nests expressions more than 200 deep",
            "{id}"
        );
    }
}

#[test]
fn a_store_between_the_passes_stays_where_it_is_and_the_merge_is_refused() {
    let src = PASSES.replacen(
        "    s = 0.0\n",
        "    s = 0.0\n    tl.store(y_ptr + row * cols, m)\n",
        1,
    );
    assert_ne!(src, PASSES);
    expect!["`softmax3` has no pair of passes to merge: lines 16 and 22: `tl.store(y_ptr + row * cols, m)` between the loops touches a value or the memory of the first; lines 22 and 26: the second reads `s`, which the first carries as a sum; only a running maximum rescales"]
        .assert_eq(&not_applicable(triton(&src, "softmax3", "triton_online", json!({}))));
}
