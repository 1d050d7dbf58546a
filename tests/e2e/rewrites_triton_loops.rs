//! The Triton loop cures (`triton_online`, `triton_row_tile`, `triton_split_loop`) for
//! real: every candidate they write for the fixtures' kernels verifies against the
//! original through a worker on Triton's CPU interpreter, and a candidate with the
//! rescale or the row mask left out must fail. Missing torch/triton skips (or fails
//! under KERNEL_LSP_REQUIRE_TOOLS=1).

use kernel_lsp::optimize::rewrite::Candidate;

use crate::rewrites_idioms::{triton_apply, verify_on_interpreter};
use crate::tools;

fn read(f: &str) -> String {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(f)).unwrap()
}

#[tokio::test]
async fn triton_loop_cures_verify_on_the_interpreter() {
    let test = "triton_loop_cures_verify_on_the_interpreter";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let passes = read("tests/fixtures/rewrites/triton/passes.py");
    let seq = read("tests/fixtures/rewrites/triton/sequential.py");
    let mut jobs: Vec<(String, &str, Candidate)> = Vec::new();
    for (src, kernel, id, want) in [
        (&passes, "softmax3", "triton_online", 1),
        (&passes, "logsumexp_while", "triton_online", 1),
        (&passes, "xent_rows", "triton_online", 1),
        (&passes, "softmax3", "triton_row_tile", 2),
        (&passes, "logsumexp_while", "triton_row_tile", 2),
        (&passes, "xent_rows", "triton_row_tile", 2),
        (&passes, "spread", "triton_row_tile", 2),
        (&seq, "col_sum", "triton_split_loop", 2),
        (&seq, "matvec_cols", "triton_split_loop", 2),
        (&seq, "col_max_while", "triton_split_loop", 2),
    ] {
        let out = triton_apply(src, kernel, id, serde_json::json!({}));
        assert_eq!(out.len(), want, "{id} on {kernel}");
        jobs.extend(out.into_iter().map(|c| (src.clone(), kernel, c)));
    }
    // Controls: the online sum without its rescale, the split loop without its row mask.
    let control = |kernel: &str, from: &str, to: &str, label: &str| {
        let (src, _, c) = jobs
            .iter()
            .find(|(_, k, c)| *k == kernel && c.text.contains(from))
            .unwrap_or_else(|| panic!("a {kernel} candidate with `{from}`"));
        let text = c.text.replace(from, to);
        assert_ne!(text, c.text);
        (src.clone(), Candidate { label: format!("control: {label}"), text })
    };
    let (s1, c1) = control("softmax3", "s = s * tl.exp(m_prev - m)", "s = s", "no rescale");
    let (s2, c2) = control(
        "col_sum",
        "rs = r + tl.arange(0, 8)",
        "rs = r + 1 + tl.arange(0, 8)",
        "each tile skips a row",
    );
    jobs.push((s1, "softmax3", c1));
    jobs.push((s2, "col_sum", c2));
    verify_on_interpreter(&py, &jobs, 5).await;
}
