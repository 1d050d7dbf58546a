use serde_json::json;

use super::super::check::testing::{assert_has, cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const PASSES: &str = include_str!("../../../../../tests/fixtures/rewrites/passes/passes.cu");
const SOFTMAX_BWD: &str = include_str!("../../../../../tests/gpu/drafts/softmax_backward_rows.cu");
const MINMAX: &str = include_str!("../../../../../tests/gpu/drafts/minmax_norm_rows.cu");

#[test]
fn a_warp_keeps_both_rows_of_a_softmax_backward_for_its_second_pass() {
    let out = cuda(
        SOFTMAX_BWD,
        "softmax_backward_rows",
        "stage_rows",
        json!({}),
    )
    .unwrap();
    assert_eq!(
        labels(&out),
        [
            "dy, y kept in registers over 4 trips of `c` across 2 loops",
            "dy, y kept in registers over 8 trips of `c` across 2 loops",
            "dy, y kept in registers over 16 trips of `c` across 2 loops",
            "dy, y kept in registers over 32 trips of `c` across 2 loops",
        ]
    );
    let shown = show(Lang::Cuda, SOFTMAX_BWD, &out[1], "softmax_backward_rows");
    assert_has(
        &shown,
        &[
            "    float dy_st[8];\n    float y_st[8];\n    #pragma unroll\n    for (int j = 0; j < 8; ++j) {\n        int c = lane + j * (32);\n        if (c < cols) {\n            dy_st[j] = dy[base + c];\n            y_st[j] = y[base + c];\n            dot += dy_st[j] * y_st[j];\n        }\n    }",
            "    for (int c = lane + 8 * (32); c < cols; c += 32) dot += dy[base + c] * y[base + c];",
            // The second pass reads the slots, and the trips past them memory as written.
            "            dx[base + c] = y_st[j] * (dy_st[j] - dot);",
            "    for (int c = lane + 8 * (32); c < cols; c += 32) dx[base + c] = y[base + c] * (dy[base + c] - dot);",
        ],
    );
}

#[test]
fn a_block_keeps_its_row_through_a_local_pointer_across_a_shared_memory_tree() {
    let out = cuda(
        MINMAX,
        "minmax_norm_rows",
        "stage_rows",
        json!({ "slots": [8] }),
    )
    .unwrap();
    let shown = show(Lang::Cuda, MINMAX, &out[0], "minmax_norm_rows");
    assert_has(
        &shown,
        &[
            "    float row_st[8];",
            "        int c = threadIdx.x + j * (THREADS);\n        if (c < cols) {\n            row_st[j] = row[c];\n            float v = row_st[j];",
            "            out[c] = (row_st[j] - mn) * scale;",
            "    for (int c = threadIdx.x + 8 * (THREADS); c < cols; c += THREADS) {\n        out[c] = (row[c] - mn) * scale;",
        ],
    );
    // Three passes share the row; `g` is read by one pass only and stays as written.
    let ln = cuda(
        PASSES,
        "layernorm_block",
        "stage_rows",
        json!({ "slots": [8] }),
    )
    .unwrap();
    assert_eq!(
        labels(&ln),
        ["xr kept in registers over 8 trips of `c` across 3 loops"]
    );
    let shown = show(Lang::Cuda, PASSES, &ln[0], "layernorm_block");
    assert_has(&shown, &["(xr_st[j] - mean) * rstd * g[c];"]);
}

#[test]
fn the_slots_stay_within_64_registers() {
    let src = PASSES.replace(
        "for (unsigned c = lane; c < cols; c += 32) ss += x[base + c] * x[base + c];",
        "for (unsigned c = lane; c < cols; c += 32) ss += x[base + c] * x[base + c] + y[base + c] + x[base + cols + c];",
    )
    .replace(
        "y[base + c] = x[base + c] * r;",
        "y[base + c] = x[base + c] * r + x[base + cols + c];",
    );
    // x at two indices staged (y is written: never): 2 buffers, so 32 slots still fit.
    let two = cuda(&src, "rms_warp", "stage_rows", json!({})).unwrap();
    assert_eq!(labels(&two).len(), 4, "{:?}", labels(&two));
    let three = src.replace(
        "float r = rsqrtf(ss / cols + 1e-6f);",
        "float r = rsqrtf(ss / cols + 1e-6f);\n    for (unsigned c = lane; c < cols; c += 32) ss += x[base + 2 * cols + c];",
    )
    .replace("y[base + c] = x[base + c] * r + x[base + cols + c];", "y[base + c] = x[base + c] * r + x[base + cols + c] + x[base + 2 * cols + c];");
    let out3 = cuda(&three, "rms_warp", "stage_rows", json!({})).unwrap();
    let labels3 = labels(&out3);
    assert_eq!(labels3.len(), 3, "{labels3:?}");
    assert!(
        labels3.iter().all(|l| !l.contains("32 trips")),
        "{labels3:?}"
    );
}

#[test]
fn passes_it_cannot_keep_are_refused_with_the_reason() {
    let why = |src: &str, k: &str| not_applicable(cuda(src, k, "stage_rows", json!({})));
    let w = why(PASSES, "center_in_place");
    assert!(
        w.contains("no buffer is read at the same element by two of its 2 loops"),
        "{w}"
    );
    let w = why(PASSES, "masked_two_pass");
    assert!(w.contains("on every trip of the first"), "{w}");
    let saxpy = include_str!("../../../../../examples/saxpy.cu");
    let w = why(saxpy, "saxpy");
    assert!(
        w.contains("no two loops of one block share a header"),
        "{w}"
    );
    let broken = PASSES.replace(
        "for (unsigned c = lane; c < cols; c += 32) ss += x[base + c] * x[base + c];",
        "for (unsigned c = lane; c < cols; c += 32) { if (x[base + c] < 0.f) break; ss += x[base + c]; }",
    );
    let w = why(&broken, "rms_warp");
    assert!(w.contains("leaves the loop early (`break;`)"), "{w}");
    let per_thread = PASSES.replace("c += 32", "c += 1");
    let w = why(&per_thread, "rms_warp");
    assert!(w.contains("steps by a small literal"), "{w}");
}

#[test]
fn an_element_passed_to_a_call_is_a_read_and_the_pointer_passed_on_is_not_frozen() {
    let src = include_str!("../../../../../tests/gpu/drafts/softmax_block.cu");
    let out = cuda(src, "softmax_block", "stage_rows", json!({ "slots": [16] })).unwrap();
    assert_eq!(
        labels(&out),
        ["xr kept in registers over 16 trips of `j` across 3 loops"]
    );
    let passed = src.replace(
        "float inv = 1.0f / red[0];",
        "float inv = 1.0f / red[0];\n    touch(xr + 1);",
    );
    let why = not_applicable(cuda(&passed, "softmax_block", "stage_rows", json!({})));
    assert!(
        why.contains("through a pointer the kernel never writes"),
        "{why}"
    );
}

#[test]
fn a_staged_kernel_is_not_staged_again() {
    let out = cuda(
        MINMAX,
        "minmax_norm_rows",
        "stage_rows",
        json!({ "slots": [8] }),
    )
    .unwrap();
    let staged = out[0].text.clone();
    let why = not_applicable(cuda(&staged, "minmax_norm_rows", "stage_rows", json!({})));
    assert!(
        why.contains("runs the trips past slots already kept in registers"),
        "{why}"
    );
}
