//! `vectorize_rows` against the real tools: on the two row-first examples as
//! `remap_lanes` leaves them and on the 2-D fixtures (several styles, f32, i8, f16,
//! bf16), every candidate compiles with NVRTC, and every f32/i8 candidate computes what
//! the original computes on the CPU emulator for every case of its spec, row lengths
//! that no width divides (77, 130, 999) included, and flat indices split by divisions
//! the width divides in one case and not in the other. Controls show that the vector path and
//! the scalar path both run there. Missing NVRTC or g++ skips (or fails under
//! KERNEL_LSP_REQUIRE_TOOLS=1).

use std::collections::BTreeMap;

use kernel_lsp::analysis::{self, AnalyzeOptions, Severity};
use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::Candidate;
use kernel_lsp::syntax::Lang;

use crate::emulate;
use crate::rewrites_idioms::apply_with;
use crate::tools;

const BIAS_RELU: &str = include_str!("../../examples/bias_relu_rows.cu");
const NORM_APPLY: &str = include_str!("../../examples/norm_apply.cu");
const GELU_HALF: &str = include_str!("../../examples/gelu_bias_half.cu");
const SCALE_SHIFT: &str = include_str!("../../examples/scale_shift_batched.cu");
const ROWS: &str = include_str!("../fixtures/rewrites/vec_rows/rows.cu");
const HALVES: &str = include_str!("../fixtures/rewrites/vec_rows/halves.cu");
const SPLITS: &str = include_str!("../fixtures/rewrites/vec_rows/splits.cu");
const REPEAT: &str = include_str!("../fixtures/rewrites/vec_rows/repeat.cu");
const GATHER: &str = include_str!("../gpu/drafts/gather_dim1.cu");

/// (text, kernel, sizes as written -> small sizes, remap first, candidates wanted)
type Case = (
    &'static str,
    &'static str,
    (&'static str, &'static str),
    bool,
    usize,
);

const CASES: &[Case] = &[
    (
        BIAS_RELU,
        "bias_relu_rows",
        (
            "rows = 8192, 1001; cols = 4096, 77",
            "rows = 37, 33; cols = 256, 77",
        ),
        true,
        2,
    ),
    (
        NORM_APPLY,
        "norm_apply",
        ("m = 16384, 999; n = 2048, 130", "m = 20, 9; n = 128, 130"),
        true,
        2,
    ),
    (
        SCALE_SHIFT,
        "scale_shift_batched",
        (
            "batch = 8, 3; rows = 1024, 33; cols = 2048, 999",
            "batch = 2, 3; rows = 5, 3; cols = 64, 999",
        ),
        false,
        2,
    ),
    (
        GELU_HALF,
        "gelu_bias_half",
        (
            "rows = 8192, 3; cols = 4096, 130",
            "rows = 4, 3; cols = 256, 130",
        ),
        false,
        3,
    ),
    (ROWS, "scale_rows", ("", ""), false, 2),
    (ROWS, "add_bias_batched", ("", ""), false, 2),
    (ROWS, "flat_affine", ("", ""), false, 2),
    (ROWS, "axpy_rows", ("", ""), false, 2),
    (ROWS, "square_rows", ("", ""), false, 2),
    (ROWS, "quantize_rows", ("", ""), false, 2),
    (HALVES, "half_gate", ("", ""), false, 3),
    (HALVES, "bf16_residual", ("", ""), false, 3),
    (SPLITS, "upsample2", ("", ""), false, 2),
    (SPLITS, "avg_pool2", ("", ""), false, 2),
    (SPLITS, "ramp_mix", ("", ""), false, 2),
    (REPEAT, "upsample_planes", ("", ""), false, 2),
    (REPEAT, "scale_batch", ("", ""), false, 2),
    (REPEAT, "add_slices", ("", ""), false, 2),
    // 64-bit indices: four a lane as two `uint4` beside the float4 they gather into.
    (
        GATHER,
        "gather_dim1",
        (
            "M = 8192, 45; N = 2048, 301; K = 1024, 99",
            "M = 9, 45; N = 40, 301; K = 128, 99",
        ),
        false,
        2,
    ),
];

pub(crate) fn run(src: &str, kernel: &str, id: &str) -> Vec<Candidate> {
    apply_with(src, kernel, id, BTreeMap::new()).unwrap_or_else(|e| panic!("{id} on {kernel}: {e}"))
}

/// The case's source with small sizes, as the search reaches it (remapped when asked).
fn source(c: &Case) -> String {
    let (text, kernel, (from, to), remap, _) = *c;
    let small = text.replacen(from, to, 1);
    assert!(
        from.is_empty() || small != text,
        "{kernel}: the sizes line moved"
    );
    match remap {
        true => run(&small, kernel, "remap_lanes").remove(0).text,
        false => small,
    }
}

/// Every candidate compiles with NVRTC with no error; how many were compiled.
pub(crate) fn compile_each(kernel: &str, out: &[Candidate]) -> usize {
    for cand in out {
        let errors = nvrtc_errors(&cand.text);
        assert!(
            errors.is_empty(),
            "{kernel} [{}]: {errors:?}\n{}",
            cand.label,
            cand.text
        );
    }
    out.len()
}

fn nvrtc_errors(text: &str) -> Vec<String> {
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let doc = Document::new(Lang::Cuda, 0, text);
    let file = analysis::analyze(Lang::Cuda, text, doc.tree(), &AnalyzeOptions::default());
    analysis::compile(&tc, text, &file.compile_inputs(), "candidate.cu")
        .findings
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message)
        .collect()
}

#[test]
fn vectorized_rows_compile_and_compute_what_the_original_computes() {
    let test = "vectorized_rows_compile_and_compute_what_the_original_computes";
    let (nvrtc, gxx) = (tools::nvrtc_available(), emulate::gxx());
    let (mut compiled, mut emulated) = (0, 0);
    for c in CASES {
        let (kernel, want) = (c.1, c.4);
        let src = source(c);
        let out = run(&src, kernel, "vectorize_rows");
        assert_eq!(out.len(), want, "{kernel}");
        if nvrtc.is_ok() {
            compiled += compile_each(kernel, &out);
        }
        // The emulator has no f16 or bf16: those candidates are compiled only.
        let halves = |c: &Candidate| c.label.contains("half") || c.label.contains("bfloat16");
        if gxx.is_ok() && !out.iter().any(halves) {
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
        _ => eprintln!("{compiled} row-vector candidates compiled with NVRTC, {emulated} emulated"),
    }
}

/// Both paths run on the emulator: a wrong lane in the vector path is caught on the
/// aligned case (cols = 256), a wrong scalar path on the odd one (cols = 77).
#[test]
fn the_emulator_runs_both_the_vector_and_the_scalar_path() {
    let test = "the_emulator_runs_both_the_vector_and_the_scalar_path";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let src = source(&CASES[0]);
    let good = run(&src, "bias_relu_rows", "vectorize_rows").remove(0);
    let mutations = [
        ("vector", "x4.w + bias4.w", "x4.z + bias4.w", "case 0"),
        (
            "scalar",
            "x[r * cols + j] + bias[j]",
            "x[r * cols + j] + 1.0f",
            "case 1",
        ),
    ];
    caught(&src, "bias_relu_rows", &good.text, &mutations);
}

/// The four 64-bit indices a lane loads as two `uint4` reach the emulator's vector
/// path: reading the third index for the fourth column is caught on the aligned case.
#[test]
fn four_64_bit_indices_a_lane_run_on_the_emulator() {
    let test = "four_64_bit_indices_a_lane_run_on_the_emulator";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let case = CASES.iter().find(|c| c.1 == "gather_dim1").unwrap();
    let src = source(case);
    let good = run(&src, "gather_dim1", "vectorize_rows").remove(0);
    assert_eq!(
        good.label,
        "VEC=4 along rows (4×int64_t as 2×uint4, float4)"
    );
    assert!(good
        .text
        .contains("reinterpret_cast<uint4*>(idx4)[1] = reinterpret_cast<const uint4*>(idx + ((int64_t)r * K))[2 * (k) + 1];"));
    let wrong = good
        .text
        .replacen("int64_t c = idx4[3];", "int64_t c = idx4[2];", 1);
    assert_ne!(wrong, good.text);
    let err = emulate::compare(&src, "gather_dim1", &[("vector".into(), wrong)], 2)
        .expect_err("the emulator missed a wrong lane of the wide index load");
    assert!(err.contains("vector case 0: out["), "{err}");
}

/// Each mutation (`what`, `from` -> `to`) of the candidate `good` makes the emulator
/// report a difference in `y` on the spec case named (`case 0`).
pub(crate) fn caught(src: &str, kernel: &str, good: &str, mutations: &[(&str, &str, &str, &str)]) {
    for (what, from, to, case) in mutations {
        let wrong = good.replacen(from, to, 1);
        assert_ne!(wrong, good, "{what}: `{from}` is not in the candidate");
        let err = emulate::compare(src, kernel, &[(what.to_string(), wrong)], 2)
            .expect_err(&format!("the emulator missed a wrong {what} path"));
        assert!(err.contains(&format!("{what} {case}: y[")), "{what}: {err}");
    }
}

/// What the search does next on the vectorized rows: `block_coarsen` (each block the work
/// of several along x) keeps them correct on both paths.
#[test]
fn coarsened_vector_rows_compute_what_the_original_computes() {
    let test = "coarsened_vector_rows_compute_what_the_original_computes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    for c in [&CASES[0], &CASES[1]] {
        let src = source(c);
        let vec4 = run(&src, c.1, "vectorize_rows").remove(0);
        let cands: Vec<(String, String)> = run(&vec4.text, c.1, "block_coarsen")
            .into_iter()
            .map(|b| (format!("{} then {}", vec4.label, b.label), b.text))
            .collect();
        assert!(!cands.is_empty(), "{}", c.1);
        emulate::compare(&src, c.1, &cands, 2).unwrap_or_else(|e| panic!("{}: {e}", c.1));
    }
}

/// The shared splits are checked on both paths: a wrong remainder lane in the vector
/// path is caught where the width divides the divisors (W = 8), a wrong split in the
/// scalar path where it does not (W = 7, which the divisibility condition sends there).
#[test]
fn the_emulator_checks_shared_splits_on_the_vector_path_and_odd_sizes_on_the_scalar_one() {
    let test =
        "the_emulator_checks_shared_splits_on_the_vector_path_and_odd_sizes_on_the_scalar_one";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let good = run(SPLITS, "upsample2", "vectorize_rows").remove(0);
    assert!(good.label.starts_with("VEC=4"), "{}", good.label);
    let mutations = [
        (
            "vector",
            "int ox = ((4 * idx) % (2 * W) + 3);",
            "int ox = ((4 * idx) % (2 * W) + 1);",
            "case 0",
        ),
        (
            "scalar",
            "int ox = j % (2 * W);",
            "int ox = (j + 1) % (2 * W);",
            "case 1",
        ),
    ];
    caught(SPLITS, "upsample2", &good.text, &mutations);
}
