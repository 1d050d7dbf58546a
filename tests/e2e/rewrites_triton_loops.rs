//! The Triton loop cures (`triton_online`, `triton_row_tile`, `triton_split_loop`,
//! `triton_hoist_reduce`) and `triton_program_tile` for real: every candidate they write
//! for the fixtures' kernels verifies against the original through a worker on Triton's
//! CPU interpreter, and a candidate with the rescale, the row mask (the budgeted split
//! tile's too) or the squares left out must fail. Missing torch/triton skips (or fails
//! under KERNEL_LSP_REQUIRE_TOOLS=1).

use kernel_lsp::optimize::rewrite::Candidate;

use crate::rewrites_idioms::{triton_apply, verify_on_interpreter};
use crate::tools;

/// `text` with each sizes line `from` replaced by `to` (each must be there).
fn shrink_sizes(text: &str, sizes: &[(&str, &str)]) -> String {
    sizes.iter().fold(text.to_string(), |t, (from, to)| {
        assert!(t.contains(from), "the sizes line `{from}` moved");
        t.replace(from, to)
    })
}

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
    let cols = read("tests/fixtures/rewrites/triton/columns.py");
    let in_loop = read("tests/fixtures/rewrites/triton/reduce_in_loop.py");
    let chunks = read("tests/fixtures/rewrites/triton/chunks.py");
    // The odd column softmax at 101 columns, not 1001: 126 programs of its budgeted
    // tile outrun the interpreter's time limit.
    let online = read("tests/fixtures/rewrites/triton/online_tiles.py")
        .replace("M = 99, 13; N = 1001, 40", "M = 99, 13; N = 101, 40");
    assert!(
        online.contains("N = 101, 40"),
        "the sizes line of col_softmax_odd moved"
    );
    let module_blocks = read("tests/fixtures/rewrites/triton/module_blocks.py");
    let layernorm = read("examples/layernorm_3pass.py").replace(
        "rows = 8192, 31; N = 4096, 1111",
        "rows = 6, 3; N = 700, 111",
    );
    assert!(
        layernorm.contains("N = 700, 111"),
        "the example's sizes line moved"
    );
    // The column and row reductions of other styles, shrunk for the interpreter.
    let shrink = |f: &str, from: &str, to: &str| {
        let src = read(f);
        assert!(src.contains(from), "the sizes line of {f} moved");
        src.replace(from, to)
    };
    let col_min = shrink(
        "examples/col_min.py",
        "M = 12289, 1001; N = 1531, 77",
        "M = 301, 17; N = 90, 7",
    );
    let col_sumsq = shrink(
        "examples/col_sumsq.py",
        "M = 20000, 513; N = 768, 100",
        "M = 150, 13; N = 70, 9",
    );
    let row_absmax = shrink(
        "examples/row_absmax.py",
        "R = 6000, 97; C = 2500, 333",
        "R = 70, 5; C = 1300, 33",
    );
    let mut jobs: Vec<(String, &str, Candidate)> = Vec::new();
    for (src, kernel, id, want) in [
        (&passes, "softmax3", "triton_online", 1),
        (&passes, "logsumexp_while", "triton_online", 1),
        (&passes, "xent_rows", "triton_online", 1),
        (&passes, "softmax3", "triton_row_tile", 2),
        (&passes, "logsumexp_while", "triton_row_tile", 2),
        (&passes, "xent_rows", "triton_row_tile", 2),
        (&passes, "spread", "triton_row_tile", 2),
        (&layernorm, "layernorm_3pass", "triton_row_tile", 1),
        (&seq, "col_sum", "triton_split_loop", 3),
        (&seq, "matvec_cols", "triton_split_loop", 3),
        (&seq, "col_max_while", "triton_split_loop", 3),
        (&seq, "col_softmax_passes", "triton_split_loop", 8),
        (&online, "col_softmax_odd", "triton_split_loop", 8),
        (&online, "col_logsumexp2", "triton_split_loop", 8),
        (&online, "row_log_softmax_f16", "triton_split_loop", 8),
        (&seq, "col_scale_rows", "triton_split_loop", 3),
        (&col_min, "col_min", "triton_split_loop", 3),
        (&col_sumsq, "col_sumsq", "triton_split_loop", 3),
        (&row_absmax, "row_absmax", "triton_split_loop", 3),
        (&in_loop, "col_norm_blocks", "triton_hoist_reduce", 1),
        (&in_loop, "row_sum_while", "triton_hoist_reduce", 1),
        (&in_loop, "row_max_tiles", "triton_hoist_reduce", 1),
        (&in_loop, "two_pass_stats", "triton_hoist_reduce", 1),
        (&chunks, "row_norm_chunks", "triton_row_tile", 2),
        (&chunks, "softmax_chunks", "triton_online", 1),
        (&chunks, "softmax_chunks", "triton_row_tile", 2),
        (&chunks, "softmax_chunks", "triton_hoist_reduce", 1),
        (&chunks, "matvec_chunks", "triton_row_tile", 2),
        (&chunks, "matvec_chunks", "triton_hoist_reduce", 1),
        (&module_blocks, "scale_by_absmax", "triton_row_tile", 2),
        (&module_blocks, "scale_by_absmax", "triton_hoist_reduce", 1),
        (&module_blocks, "row_sumsq_chunks", "triton_row_tile", 2),
        (&cols, "col_sum_by_program", "triton_program_tile", 2),
        (&cols, "col_softmax", "triton_program_tile", 2),
        (&cols, "bias_relu_cols", "triton_program_tile", 2),
        (&cols, "col_sum_lanes", "triton_program_tile", 2),
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
        (
            src.clone(),
            Candidate {
                label: format!("control: {label}"),
                text,
            },
        )
    };
    let (s1, c1) = control(
        "softmax3",
        "s = s * tl.exp(m_prev - m)",
        "s = s",
        "no rescale",
    );
    let (s2, c2) = control(
        "col_sum",
        "rs = r + tl.arange(0, 8)",
        "rs = r + 1 + tl.arange(0, 8)",
        "each tile skips a row",
    );
    let (s3, c3) = control(
        "bias_relu_cols",
        "in_grid = (tl.program_id(0) * 8 + tl.arange(0, 8)) < N",
        "in_grid = (tl.program_id(0) * 8 + tl.arange(0, 8)) < N - 1",
        "the last column left unwritten",
    );
    let (s4, c4) = control(
        "col_sumsq",
        "ms = m + tl.arange(0, M_STEPS)",
        "ms = m + 1 + tl.arange(0, M_STEPS)",
        "each budgeted tile skips a row",
    );
    let (s5, c5) = control(
        "col_norm_blocks",
        "acc_part += block * block",
        "acc_part += block",
        "the partials add the values, not their squares",
    );
    let (s6, c6) = control(
        "col_softmax_odd",
        "s = s * tl.where(m_prev == m, 1.0, tl.exp(m_prev - m))",
        "s = s",
        "the tiled online sum without its rescale",
    );
    jobs.push((s6, "col_softmax_odd", c6));
    jobs.push((s4, "col_sumsq", c4));
    jobs.push((s5, "col_norm_blocks", c5));
    jobs.push((s3, "bias_relu_cols", c3));
    jobs.push((s1, "softmax3", c1));
    jobs.push((s2, "col_sum", c2));
    verify_on_interpreter(&py, &jobs, 5).await;
}

/// `triton_program_tile` packing many short-row programs (`narrow_programs`): applied at
/// the fixture's full sizes (the fact counts the programs), then every candidate and its
/// original shrunk alike verify on the interpreter; one whose grid mask drops the last
/// row must fail.
#[tokio::test]
async fn packed_short_row_programs_verify_on_the_interpreter() {
    let test = "packed_short_row_programs_verify_on_the_interpreter";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let full = read("tests/fixtures/rewrites/triton/short_rows.py");
    let sizes = [
        ("B = 4, 3; S = 4096, 77", "B = 2, 3; S = 21, 77"),
        ("R = 2048, 45; D = 128, 100", "R = 19, 45; D = 128, 100"),
        ("R = 1500, 33; C = 96, 31", "R = 23, 33; C = 96, 31"),
    ];
    let shrink = |text: &str| shrink_sizes(text, &sizes);
    let small = shrink(&full);
    let mut jobs: Vec<(String, &str, Candidate)> = Vec::new();
    for kernel in ["mean_short_rows", "rms_short_rows", "softmax_short_rows"] {
        let out = triton_apply(&full, kernel, "triton_program_tile", serde_json::json!({}));
        assert_eq!(out.len(), 2, "{kernel}");
        jobs.extend(out.into_iter().map(|c| {
            let text = shrink(&c.text);
            (small.clone(), kernel, Candidate { text, ..c })
        }));
    }
    let (src, _, c) = jobs
        .iter()
        .find(|(_, k, _)| *k == "mean_short_rows")
        .expect("a mean_short_rows candidate");
    let text = c.text.replace("< S\n", "< S - 1\n");
    assert_ne!(text, c.text, "the grid mask moved");
    let control = Candidate {
        label: "control: the last row left unwritten".into(),
        text,
    };
    jobs.push((src.clone(), "mean_short_rows", control));
    verify_on_interpreter(&py, &jobs, 9).await;
}

/// `triton_row_tile`'s budgeted tile (a 2-D tile of rows too long for one tile keeps its
/// loop, its lanes narrowed, its steps widened, the loop pipelined): applied at the
/// drafts' and fixtures' full sizes (the budget reads case 0's programs and trip count),
/// then every candidate and its original shrunk alike to odd sizes with a partial last
/// step verify on the interpreter; one whose row mask drops the last row must fail.
#[tokio::test]
async fn budgeted_row_tiles_verify_on_the_interpreter() {
    let test = "budgeted_row_tiles_verify_on_the_interpreter";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let tiled: &[(&str, &str)] = &[
        ("M = 16384, 45; N = 4096, 333", "M = 300, 45; N = 70, 33"),
        ("M = 8192, 77; N = 1024, 100", "M = 1100, 77; N = 20, 9"),
        ("M = 8192, 33; N = 2048, 70", "M = 600, 33; N = 35, 7"),
        ("M = 8192, 77; N = 4096, 301", "M = 500, 77; N = 90, 31"),
    ];
    /// A file, its sizes lines shrunk (full, small), its kernels.
    type Shrunk<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let files: [Shrunk; 3] = [
        (
            "tests/gpu/drafts/logsumexp_dim0.py",
            &[("M = 8192, 333; N = 2048, 77", "M = 600, 33; N = 50, 77")],
            &["logsumexp_dim0"],
        ),
        (
            "tests/gpu/drafts/col_sum_tiles.py",
            &[("M = 8192, 77; N = 2048, 301", "M = 700, 77; N = 40, 31")],
            &["col_sum_tiles"],
        ),
        (
            "tests/fixtures/rewrites/triton/tiled_columns.py",
            tiled,
            &[
                "col_max_while",
                "col_meansq_f16",
                "col_normalize_2pass",
                "col_min_chunks",
            ],
        ),
    ];
    let mut jobs: Vec<(String, &str, Candidate)> = Vec::new();
    for (file, sizes, kernels) in files {
        let full = read(file);
        let small = shrink_sizes(&full, sizes);
        for kernel in kernels {
            let out = triton_apply(&full, kernel, "triton_row_tile", serde_json::json!({}));
            assert_eq!(out.len(), 1, "{kernel}");
            assert!(out[0].label.contains("budgeted tile"), "{}", out[0].label);
            jobs.extend(out.into_iter().map(|c| {
                let text = shrink_sizes(&c.text, sizes);
                (small.clone(), *kernel, Candidate { text, ..c })
            }));
        }
    }
    let (src, _, c) = jobs
        .iter()
        .find(|(_, k, _)| *k == "col_sum_tiles")
        .expect("a col_sum_tiles candidate");
    let text = c
        .text
        .replace("mask=(rows[:, None] < M)", "mask=(rows[:, None] < M - 1)");
    assert_ne!(text, c.text, "the row mask moved");
    let control = Candidate {
        label: "control: the last row left out".into(),
        text,
    };
    jobs.push((src.clone(), "col_sum_tiles", control));
    verify_on_interpreter(&py, &jobs, 13).await;
}

/// `triton_persistent_dot`'s candidates (persistent programs, tensor descriptors) for
/// the bundled matmul and three other styles, at sizes with partial tiles on every edge,
/// verify against their originals on the interpreter (which exercises the descriptors'
/// zero fill and clipped stores); one whose grouped order skips rows of tiles must fail.
#[tokio::test]
async fn persistent_tma_matmuls_verify_on_the_interpreter() {
    let test = "persistent_tma_matmuls_verify_on_the_interpreter";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let shrink = |src: String, from: &str, to: &str| {
        let s = src.replace(from, to);
        assert_ne!(s, src, "the sizes line `{from}` moved; update this test");
        s
    };
    let matmul = shrink(
        read("examples/matmul.py"),
        "M = 4096, 100; N = 4096, 72; K = 4096, 40",
        "M = 200, 72; N = 136, 264; K = 96, 40",
    );
    let dots = read("tests/fixtures/rewrites/triton/persistent_dots.py");
    let dots = shrink(
        dots,
        "M = 4000, 264; N = 3968, 136; K = 4096, 72",
        "M = 264, 40; N = 136, 72; K = 72, 104",
    );
    let dots = shrink(
        dots,
        "m = 2048, 40; n = 1536, 24; k = 1024, 56",
        "m = 150, 40; n = 264, 24; k = 56, 136",
    );
    let dots = shrink(
        dots,
        "M = 1024, 48; N = 1024, 64; K = 512, 40\n# @bench at:",
        "M = 136, 48; N = 72, 264; K = 40, 88\n# @bench at:",
    );
    let config = serde_json::json!({"configs": [[128, 256, 64, 8, 3], [128, 128, 64, 4, 4]]});
    let mut jobs: Vec<(String, &str, Candidate)> = Vec::new();
    for (src, kernel, want) in [
        (&matmul, "matmul_kernel", 1),
        (&dots, "mm_tutorial", 2),
        (&dots, "linear_bt", 2),
        (&dots, "mm_at", 1),
    ] {
        let out = triton_apply(src, kernel, "triton_persistent_dot", config.clone());
        assert_eq!(out.len(), want, "{kernel}");
        jobs.extend(out.into_iter().map(|c| (src.clone(), kernel, c)));
    }
    let (src, _, c) = jobs
        .iter()
        .find(|(_, k, _)| *k == "mm_tutorial")
        .expect("a mm_tutorial candidate");
    let wrong = c.text.replace("% group_size_m\n", "% 1\n");
    assert_ne!(wrong, c.text);
    jobs.push((
        src.clone(),
        "mm_tutorial",
        Candidate {
            label: "control: every program of a group on its first row of tiles".into(),
            text: wrong,
        },
    ));
    verify_on_interpreter(&py, &jobs, 7).await;
}

/// The first step of `kernel-lsp optimize FILE` with its defaults (no LLM; the policy's
/// first pick, which a step limit does not change) on a bundled first draft (a path from
/// the repository root: an example or a GPU probe draft), its sizes
/// shrunk for the CPU interpreter. Returns the run's JSON. (A whole default run on the
/// interpreter takes minutes; `optimize_llm::each_run_budget_stops_the_run_and_says_which`
/// tests that a run ends by its budgets.)
fn default_optimize(py: &str, path: &str, from: &str, to: &str) -> serde_json::Value {
    let example = path.rsplit('/').next().unwrap_or(path);
    let dir =
        std::env::temp_dir().join(format!("kernel-lsp-cure-{}-{example}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = read(path);
    let small = src.replace(from, to);
    assert_ne!(
        small, src,
        "the sizes line `{from}` of {example} moved; update this test"
    );
    std::fs::write(dir.join(example), &small).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(&dir)
        .args(["optimize", example, "--json", "--steps", "1"])
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .env("KERNEL_LSP_PYTHON", py)
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{example}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{example}: {e}: {stdout}"))
}

/// The run's first step is the diagnosed `cure` and it cures: a candidate of it verified
/// against the original on the interpreter and, timed beside the original, ran faster
/// (the medians' ratio is over 1). Whether that gain also clears the timing noise, so
/// that the step is accepted and offered, is the acceptance rule's call on this run's
/// spread (unit-tested in `optimize::accept`): on Triton's CPU interpreter under a
/// loaded machine the spread reaches tens of percent, and a 1.35x cure has been judged
/// "no gain". So either outcome passes, but an accepted step's text must carry the
/// cure's `mark`, and a failed or inapplicable step fails.
fn assert_cures(run: &serde_json::Value, cure: &str, mark: &str) {
    let step = &run["steps"][0];
    assert_eq!(step["strategy_id"], cure, "the diagnosed cure first: {run}");
    let timed_and_verified = step["candidates"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["verified"] == true && c["median_ms"].as_f64().is_some())
    });
    assert!(
        timed_and_verified,
        "no candidate of {cure} verified and was timed: {step}"
    );
    let speedup = step["speedup"].as_f64().unwrap_or(0.0);
    assert!(
        speedup > 1.0,
        "{cure}'s best candidate is not faster than the original ({speedup}x): {step}"
    );
    match step["outcome"].as_str() {
        Some("accepted") => {
            let text = step["kernel_after"].as_str().unwrap_or("");
            assert!(
                text.contains(mark),
                "{cure} was accepted with a text that lacks `{mark}`: {text}"
            );
        }
        Some("no_gain") => eprintln!(
            "note: {cure} verified and ran {speedup:.2}x faster, within this run's timing noise (not accepted)"
        ),
        other => panic!("{cure}'s step ended {other:?}: {step}"),
    }
}

#[test]
fn the_default_optimize_first_cures_a_logsumexp_a_column_mean_a_column_norm_and_a_tiled_column_logsumexp_on_the_interpreter(
) {
    let test =
        "the_default_optimize_first_cures_a_logsumexp_a_column_mean_a_column_norm_and_a_tiled_column_logsumexp_on_the_interpreter";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let run = default_optimize(
        &py,
        "examples/logsumexp_rows.py",
        "R = 16384, 33; C = 2048, 1500",
        "R = 40, 9; C = 700, 130",
    );
    // The rescale of the running sum by the change of the maximum.
    assert_cures(&run, "triton_online", "hi_prev = hi");
    let run = default_optimize(
        &py,
        "examples/col_mean.py",
        "M = 16384, 1001; N = 1024, 300",
        "M = 300, 101; N = 200, 30",
    );
    // The row mask of the R rows a step now takes.
    assert_cures(&run, "triton_split_loop", "r_ok = ");
    let run = default_optimize(
        &py,
        "examples/col_norm.py",
        "M = 8192, 1000; N = 2048, 333",
        "M = 300, 100; N = 70, 33",
    );
    // The mask of the columns a program now owns.
    assert_cures(&run, "triton_program_tile", "in_grid");
    let run = default_optimize(
        &py,
        "tests/gpu/drafts/logsumexp_dim0.py",
        "M = 8192, 333; N = 2048, 77",
        "M = 600, 33; N = 50, 77",
    );
    // 1 program of 128 columns becomes 16 of 8, 1024 rows a step, the loop pipelined.
    assert_cures(&run, "triton_row_tile", "num_stages=BLOCK_M_STAGES");
}
