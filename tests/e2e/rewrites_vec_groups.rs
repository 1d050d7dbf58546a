//! `vectorize_groups` against the real tools: on the rope example and the group
//! fixtures (rotary pairs split into row and pair, complex numbers, float quads through
//! a pointer, f16 pairs and packed quads, bf16 pairs), every candidate compiles with
//! NVRTC, and every f32 candidate computes what the original computes on the CPU
//! emulator for every case of its spec (odd sizes included), one group or several per
//! thread, groups at the thread's `k * i` or anywhere proved aligned (pooling windows, a
//! stencil over pairs, complex numbers in rows: pools.cu), on the vector path (aligned
//! buffers) and, with its alignment check forced
//! false, on the scalar path. A control shows that the vector path runs there. Missing
//! NVRTC or g++ skips (or fails under KERNEL_LSP_REQUIRE_TOOLS=1).

use std::collections::BTreeMap;

use kernel_lsp::optimize::rewrite::Candidate;

use crate::emulate;
use crate::rewrites_idioms::apply_with;
use crate::rewrites_vec_rows::compile_each;
use crate::tools;

const ROPE: &str = include_str!("../../examples/rope_pairs.cu");
const GROUPS: &str = include_str!("../fixtures/rewrites/vec_groups/groups.cu");
const HALVES: &str = include_str!("../fixtures/rewrites/vec_groups/halves.cu");
const POOLS: &str = include_str!("../fixtures/rewrites/vec_groups/pools.cu");
const MAXPOOL: &str = include_str!("../gpu/drafts/maxpool2x2.cu");
/// The max pool draft's sizes, and small ones (an odd output row among them).
const MAXPOOL_SIZES: (&str, &str) = (
    "NC = 128, 3; OH = 256, 39; OW = 256, 101",
    "NC = 3, 2; OH = 5, 3; OW = 6, 7",
);

/// (text, kernel, sizes as written -> small sizes, candidates wanted)
const CASES: &[(&str, &str, (&str, &str), usize)] = &[
    (
        ROPE,
        "rope_pairs",
        (
            "rows = 65536, 5; half = 64, 63",
            "rows = 40, 5; half = 64, 63",
        ),
        2,
    ),
    (GROUPS, "cmul", ("", ""), 2),
    (GROUPS, "gain_rgba", ("", ""), 1),
    (HALVES, "rope_half", ("", ""), 3),
    (HALVES, "quad_scale", ("", ""), 2),
    (HALVES, "conj_scale", ("", ""), 3),
    (MAXPOOL, "maxpool2x2", MAXPOOL_SIZES, 1),
    (POOLS, "maxpool_2d", ("", ""), 1),
    (POOLS, "avgpool", ("", ""), 1),
    (POOLS, "pair_diff", ("", ""), 1),
    (POOLS, "cplx_rows", ("", ""), 1),
];

fn run(src: &str, kernel: &str) -> Vec<Candidate> {
    apply_with(src, kernel, "vectorize_groups", BTreeMap::new())
        .unwrap_or_else(|e| panic!("vectorize_groups on {kernel}: {e}"))
}

fn source(text: &str, kernel: &str, (from, to): (&str, &str)) -> String {
    let small = text.replacen(from, to, 1);
    assert!(
        from.is_empty() || small != text,
        "{kernel}: the sizes line moved"
    );
    small
}

/// The candidate with every alignment check false: the scalar path only.
fn scalar_only(text: &str) -> String {
    let forced = text
        .replace(") % 8 == 0", ") % 8 == 99")
        .replace(") % 16 == 0", ") % 16 == 99");
    assert_ne!(forced, text, "no alignment check to force");
    forced
}

#[test]
fn vectorized_groups_compile_and_compute_what_the_original_computes() {
    let test = "vectorized_groups_compile_and_compute_what_the_original_computes";
    let (nvrtc, gxx) = (tools::nvrtc_available(), emulate::gxx());
    let (mut compiled, mut emulated) = (0, 0);
    for &(text, kernel, sizes, want) in CASES {
        let src = source(text, kernel, sizes);
        let out = run(&src, kernel);
        assert_eq!(out.len(), want, "{kernel}");
        if nvrtc.is_ok() {
            compiled += compile_each(kernel, &out);
        }
        // The emulator has no f16 or bf16: those candidates are compiled only.
        if gxx.is_ok()
            && !out
                .iter()
                .any(|c| c.label.contains("half") || c.label.contains("bfloat16"))
        {
            let mut cands: Vec<(String, String)> = Vec::new();
            for c in &out {
                cands.push((c.label.clone(), c.text.clone()));
                cands.push((format!("{} (scalar path)", c.label), scalar_only(&c.text)));
            }
            emulate::compare(&src, kernel, &cands, 2).unwrap_or_else(|e| panic!("{kernel}: {e}"));
            emulated += cands.len();
        }
    }
    match (nvrtc, gxx) {
        (Err(why), _) | (_, Err(why)) => tools::skip(test, &why),
        _ => {
            eprintln!("{compiled} group-vector candidates compiled with NVRTC, {emulated} emulated")
        }
    }
}

/// The vector path runs on the emulator: swapping a pair's lanes is caught, with one
/// group per thread and with two.
#[test]
fn the_emulator_runs_the_vector_path_of_groups() {
    let test = "the_emulator_runs_the_vector_path_of_groups";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let (text, kernel, sizes, _) = CASES[0];
    let src = source(text, kernel, sizes);
    let out = run(&src, "rope_pairs");
    for (good, lane, swapped) in [
        (&out[0], "float x1 = x2.y;", "float x1 = x2.x;"),
        (&out[1], "float x1 = x4.w;", "float x1 = x4.z;"),
    ] {
        let wrong = good.text.replacen(lane, swapped, 1);
        assert_ne!(wrong, good.text, "`{lane}` is not in [{}]", good.label);
        let err = emulate::compare(&src, "rope_pairs", &[("vector".into(), wrong)], 2)
            .expect_err("the emulator missed a wrong vector path");
        assert!(err.contains("vector case 0: y["), "{err}");
    }
}

/// A group loaded at its own address (a pooling window's lower row) runs on the
/// emulator: reading the upper row twice is caught.
#[test]
fn the_emulator_runs_the_vector_path_of_windows() {
    let test = "the_emulator_runs_the_vector_path_of_windows";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let maxpool = source(MAXPOOL, "maxpool2x2", MAXPOOL_SIZES);
    for (src, kernel, lower, upper) in [
        (maxpool.as_str(), "maxpool2x2", "(&src[W])", "(&src[0])"),
        (POOLS, "maxpool_2d", "(&x[bottom])", "(&x[top])"),
    ] {
        let out = run(src, kernel);
        let wrong = out[0].text.replacen(lower, upper, 1);
        assert_ne!(
            wrong, out[0].text,
            "`{lower}` is not in {kernel}'s candidate"
        );
        let err = emulate::compare(src, kernel, &[("vector".into(), wrong)], 2)
            .expect_err("the emulator missed a wrong vector path");
        assert!(err.contains("vector case 0: y["), "{err}");
    }
}

/// Pointers built from several offsets (`x + a * W + b`) are followed for every rewrite:
/// `vectorize_rows` takes the max pool draft's outputs four or two to a thread, and its
/// candidates compute what the original computes.
#[test]
fn rows_of_the_flat_max_pool_compute_what_the_original_computes() {
    let test = "rows_of_the_flat_max_pool_compute_what_the_original_computes";
    if let Err(why) = emulate::gxx() {
        return tools::skip(test, &why);
    }
    let src = source(MAXPOOL, "maxpool2x2", MAXPOOL_SIZES);
    let out = apply_with(&src, "maxpool2x2", "vectorize_rows", BTreeMap::new())
        .unwrap_or_else(|e| panic!("vectorize_rows on maxpool2x2: {e}"));
    assert_eq!(out.len(), 2, "VEC = 4 and 2");
    let cands: Vec<(String, String)> = out
        .iter()
        .map(|c| (c.label.clone(), c.text.clone()))
        .collect();
    emulate::compare(&src, "maxpool2x2", &cands, 2).unwrap_or_else(|e| panic!("{e}"));
}
