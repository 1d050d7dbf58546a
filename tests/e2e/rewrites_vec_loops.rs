//! `vector_loops` against the real tools: on the fixtures of
//! `tests/fixtures/rewrites/vec_loops/` (a block per row, a grid-stride loop over a fixed
//! grid, a warp per row; f32, f64, f16), every candidate compiles with NVRTC, and every
//! f32/f64 candidate computes what the original computes on the CPU emulator for every
//! case of its spec: rows whose length no width divides (77, 130) start misaligned on
//! most rows (the author's loop runs there) and leave a tail, and grid-stride ranges of
//! 99991 and 4099 elements leave one; teams of blocks (several blocks per row or channel,
//! combined by one atomic per block; blocks along y) over 77 and 1001 elements. Controls show both paths run. Missing NVRTC or g++
//! skips (or fails under KERNEL_LSP_REQUIRE_TOOLS=1).

use crate::emulate;
use crate::rewrites_vec_rows::{caught, compile_each, run};
use crate::tools;

const ROWS: &str = include_str!("../fixtures/rewrites/vec_loops/rows.cu");
const GRIDS: &str = include_str!("../fixtures/rewrites/vec_loops/grids.cu");
const WARPS: &str = include_str!("../fixtures/rewrites/vec_loops/warps.cu");
const SPELLINGS: &str = include_str!("../fixtures/rewrites/vec_loops/spellings.cu");
const TEAMS: &str = include_str!("../fixtures/rewrites/vec_loops/teams.cu");
const CLUSTER: &str = include_str!("../fixtures/rewrites/vec_loops/cluster.cu");

/// (text, kernel, sizes as written -> small sizes, candidates wanted)
type Case = (
    &'static str,
    &'static str,
    (&'static str, &'static str),
    usize,
);

const CASES: &[Case] = &[
    (
        ROWS,
        "softmax_block",
        (
            "rows = 4096, 33; cols = 4096, 77",
            "rows = 6, 5; cols = 1000, 77",
        ),
        2,
    ),
    (
        ROWS,
        "rms_norm_rows",
        (
            "rows = 4096, 33; dim = 4096, 130",
            "rows = 5, 7; dim = 512, 130",
        ),
        2,
    ),
    (
        ROWS,
        "row_sum_half",
        (
            "rows = 4096, 9; cols = 4096, 77",
            "rows = 4, 3; cols = 600, 77",
        ),
        2,
    ),
    (
        ROWS,
        "center_rows_f64",
        (
            "rows = 2048, 17; cols = 2048, 45",
            "rows = 5, 7; cols = 300, 45",
        ),
        1,
    ),
    (
        GRIDS,
        "huber_total",
        ("n = 1 << 24, 99991", "n = 5000, 4099"),
        2,
    ),
    (
        GRIDS,
        "affine_grid",
        ("n = 1 << 24, 99991", "n = 6000, 4099"),
        2,
    ),
    (
        GRIDS,
        "daxpy_grid",
        ("n = 1 << 23, 4099", "n = 3000, 999"),
        1,
    ),
    (
        WARPS,
        "matvec_warp",
        ("M = 8192, 37; K = 4096, 1001", "M = 20, 9; K = 512, 1001"),
        2,
    ),
    (
        SPELLINGS,
        "spellings",
        ("n = 1 << 16, 4099", "n = 3000, 999"),
        2,
    ),
    (
        TEAMS,
        "channel_sums_team",
        (
            "N = 8, 3; C = 64, 5; HW = 16384, 77",
            "N = 2, 3; C = 3, 5; HW = 1001, 77",
        ),
        2,
    ),
    (
        TEAMS,
        "row_sum_four_blocks",
        (
            "rows = 2048, 7; cols = 8192, 1001",
            "rows = 5, 7; cols = 2000, 1001",
        ),
        2,
    ),
    (
        TEAMS,
        "scale_rows_y",
        (
            "rows = 512, 9; cols = 4096, 77",
            "rows = 4, 9; cols = 1000, 77",
        ),
        2,
    ),
    (
        TEAMS,
        "row_norms_y4",
        (
            "rows = 1024, 5; cols = 8192, 1001",
            "rows = 3, 5; cols = 1200, 1001",
        ),
        2,
    ),
    (
        TEAMS,
        "row_sum_half_pair",
        (
            "rows = 1024, 9; cols = 4096, 77",
            "rows = 4, 9; cols = 600, 77",
        ),
        2,
    ),
];

/// The case's source with small sizes in its kernel's spec.
fn source(c: &Case) -> String {
    let (text, kernel, (from, to), _) = *c;
    let at = text
        .find(&format!("void {kernel}("))
        .unwrap_or_else(|| panic!("no kernel {kernel}"));
    let spec = text[..at]
        .rfind(from)
        .unwrap_or_else(|| panic!("{kernel}: the sizes line `{from}` moved"));
    format!("{}{to}{}", &text[..spec], &text[spec + from.len()..])
}

/// The spec lines of `kernel` (from the blank line before it to its name).
fn own_spec<'s>(src: &'s str, kernel: &str) -> &'s str {
    let at = src.find(&format!("void {kernel}(")).unwrap_or(src.len());
    let from = src[..at].rfind("\n\n").unwrap_or(0);
    &src[from..at]
}

#[test]
fn vector_loops_compile_and_compute_what_the_original_computes() {
    let test = "vector_loops_compile_and_compute_what_the_original_computes";
    let (nvrtc, gxx) = (tools::nvrtc_available(), emulate::gxx());
    let (mut compiled, mut emulated) = (0, 0);
    for c in CASES {
        let (kernel, want) = (c.1, c.3);
        let src = source(c);
        let out = run(&src, kernel, "vector_loops");
        assert_eq!(
            out.len(),
            want,
            "{kernel}: {:?}",
            out.iter().map(|c| &c.label).collect::<Vec<_>>()
        );
        if nvrtc.is_ok() {
            compiled += compile_each(kernel, &out);
        }
        // The emulator has no f16: those candidates are compiled only.
        if gxx.is_ok() && !own_spec(&src, kernel).contains("f16[") {
            let cands: Vec<(String, String)> = out
                .iter()
                .map(|c| (c.label.clone(), c.text.clone()))
                .collect();
            emulate::compare(&src, kernel, &cands, 2).unwrap_or_else(|e| panic!("{kernel}: {e}"));
            emulated += cands.len();
        }
    }
    match (nvrtc, gxx) {
        (Err(why), _) | (_, Err(why)) => tools::skip(test, &why),
        _ => {
            eprintln!("{compiled} vector-loop candidates compiled with NVRTC, {emulated} emulated")
        }
    }
}

/// The cluster form of a team (eight blocks per channel combining through distributed
/// shared memory) takes vectors and compiles; the emulator has no cluster barriers.
#[test]
fn a_cluster_team_takes_vectors_and_compiles() {
    let test = "a_cluster_team_takes_vectors_and_compiles";
    let out = run(CLUSTER, "channel_stats_nchw", "vector_loops");
    assert_eq!(
        out.len(),
        2,
        "{:?}",
        out.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    assert!(
        out[0]
            .text
            .contains("for (int p_vec = lane; p_vec < p_vecs; p_vec += 8 * blockDim.x)"),
        "{}",
        out[0].text
    );
    match tools::nvrtc_available() {
        Ok(()) => {
            compile_each("channel_stats_nchw", &out);
        }
        Err(why) => tools::skip(test, &why),
    }
}

/// A team's vector loop whose lanes start one block late, and a tail that starts one
/// vector late, each make the team's sums differ on the emulator.
#[test]
fn the_emulator_catches_a_team_that_drops_lanes() {
    let test = "the_emulator_catches_a_team_that_drops_lanes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let c = CASES
        .iter()
        .find(|c| c.1 == "row_sum_four_blocks")
        .expect("case");
    let src = source(c);
    let good = run(&src, c.1, "vector_loops").remove(0);
    let mutations = [
        (
            "lanes",
            "for (int j_vec = (blockIdx.x - row * 4) * blockDim.x + threadIdx.x; j_vec < j_vecs; j_vec += blockDim.x * 4)",
            "for (int j_vec = (blockIdx.x - row * 4) * blockDim.x + threadIdx.x + blockDim.x; j_vec < j_vecs; j_vec += blockDim.x * 4)",
            "case 0",
        ),
        (
            "tail",
            "j_rest = j_base + 4 * j_vecs;",
            "j_rest = j_base + 4 * j_vecs + 4;",
            "case 1",
        ),
    ];
    for (what, from, to, case) in mutations {
        let wrong = good.text.replacen(from, to, 1);
        assert_ne!(wrong, good.text, "{what}: `{from}` is not in the candidate");
        let err = emulate::compare(&src, c.1, &[(what.to_string(), wrong)], 2)
            .expect_err(&format!("the emulator missed a wrong {what} path"));
        assert!(
            err.contains(&format!("{what} {case}: out[")),
            "{what}: {err}"
        );
    }
}

/// Both paths and the tail run on the emulator: a wrong lane in the vector loop, a wrong
/// author's loop after it (the misaligned rows and the tail), and a tail that starts one
/// vector late each make `y` differ.
#[test]
fn the_emulator_runs_the_vectors_the_fallback_and_the_tail() {
    let test = "the_emulator_runs_the_vectors_the_fallback_and_the_tail";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let c = &CASES[1];
    let src = source(c);
    let good = run(&src, c.1, "vector_loops").remove(0);
    let mutations = [
        ("vector", "yr4.w = xr4_2.w", "yr4.w = xr4_2.z", "case 0"),
        (
            "fallback",
            "for (int j = j_rest_2 + threadIdx.x; j < dim; j += blockDim.x) yr[j] = xr[j] * inv * w[j];",
            "for (int j = j_rest_2 + threadIdx.x; j < dim; j += blockDim.x) yr[j] = xr[j] * w[j];",
            "case 1",
        ),
        (
            "tail",
            "j_rest_2 = j_base_2 + 4 * j_vecs_2;",
            "j_rest_2 = j_base_2 + 4 * j_vecs_2 + 4;",
            "case 1",
        ),
    ];
    caught(&src, c.1, &good.text, &mutations);
}

/// What the search may do next: `interleave` runs several vectors per trip of the loop
/// over vectors (its step is `blockDim.x`, a run-time value), and stays correct.
#[test]
fn interleaved_vector_loops_compute_what_the_original_computes() {
    let test = "interleaved_vector_loops_compute_what_the_original_computes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    for c in [&CASES[0], &CASES[4]] {
        let src = source(c);
        let vec = run(&src, c.1, "vector_loops").remove(0);
        let out = run(&vec.text, c.1, "interleave");
        let cands: Vec<(String, String)> = out
            .iter()
            .map(|c| (c.label.clone(), c.text.clone()))
            .collect();
        emulate::compare(&src, c.1, &cands, 2).unwrap_or_else(|e| panic!("{}: {e}", c.1));
    }
}

/// On what `block_reduce` writes (a grid-stride sum whose bounds check stays inside the
/// loop, warp shuffles, one atomic per block), the loop takes vectors and still adds up
/// to the original's total.
#[test]
fn block_reduce_then_vector_loops_computes_what_the_original_computes() {
    let test = "block_reduce_then_vector_loops_computes_what_the_original_computes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let original = include_str!("../../examples/sum_squares.cu");
    let src = original.replacen("n = 1 << 22, 100003", "n = 5000, 4099", 1);
    assert_ne!(src, original, "the sizes line of sum_squares moved");
    let reduced = run(&src, "sum_squares", "block_reduce").remove(0);
    let out = run(&reduced.text, "sum_squares", "vector_loops");
    assert_eq!(
        out.len(),
        2,
        "{:?}",
        out.iter().map(|c| &c.label).collect::<Vec<_>>()
    );
    let cands: Vec<(String, String)> = out
        .iter()
        .map(|c| (c.label.clone(), c.text.clone()))
        .collect();
    emulate::compare(&src, "sum_squares", &cands, 2).unwrap_or_else(|e| panic!("{e}"));
}
