use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{labels, not_applicable, run};
use crate::syntax::Lang;

const MATMUL: &str = include_str!("../../../../../examples/matmul.py");
const VECTOR_ADD: &str = include_str!("../../../../../examples/vector_add.py");
const SOFTMAX: &str = include_str!("../../../../../examples/softmax.py");
const MATMULS: &str = include_str!("../../../../../tests/fixtures/rewrites/triton/matmuls.py");

#[test]
fn a_matmul_sweeps_tiles_warps_and_stages_together() {
    let out = run(
        Lang::Triton,
        MATMUL,
        "matmul_kernel",
        "triton_configs",
        json!({"max_candidates": 6}),
    )
    .unwrap();
    expect![[r#"
        [
            "BLOCK_K=64, BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3",
            "BLOCK_K=64, BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=4",
            "BLOCK_K=64, BLOCK_M=256, BLOCK_N=128, num_warps=8, num_stages=3",
            "BLOCK_K=64, BLOCK_M=256, BLOCK_N=128, num_warps=8, num_stages=4",
            "BLOCK_K=128, BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=2",
            "BLOCK_K=128, BLOCK_M=256, BLOCK_N=128, num_warps=8, num_stages=2",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    let spec: Vec<&str> = out[0]
        .text
        .lines()
        .filter(|l| l.starts_with("# @bench"))
        .collect();
    expect![[r##"
        [
            "# @bench M = 4096, 100; N = 4096, 72; K = 4096, 40",
            "# @bench a_ptr: in f16[M, K]; b_ptr: in f16[K, N]; c_ptr: out f32[M, N]",
            "# @bench grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); BLOCK_M = 128; BLOCK_N = 256; BLOCK_K = 64",
            "# @bench atol = 1e-2; rtol = 1e-2",
            "# @bench num_warps = 8; num_stages = 3",
        ]
    "##]].assert_debug_eq(&spec);
}

#[test]
fn other_tiled_products_grow_within_what_the_device_holds() {
    // bf16 tiles already at 128x128x32, pointer increments, `acc = tl.dot(x, y, acc)`.
    let out = run(
        Lang::Triton,
        MATMULS,
        "mm_bf16",
        "triton_configs",
        json!({"max_candidates": 4}),
    )
    .unwrap();
    expect![[r#"
        [
            "BK=64, BM=128, BN=256, num_warps=8, num_stages=3",
            "BK=64, BM=128, BN=256, num_warps=8, num_stages=4",
            "BK=64, BM=256, BN=128, num_warps=8, num_stages=3",
            "BK=64, BM=256, BN=128, num_warps=8, num_stages=4",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    // f32 16x16x16 tiles: each may grow fourfold; f32 tiles fill shared memory twice as fast.
    let out = run(
        Lang::Triton,
        MATMULS,
        "mm_small",
        "triton_configs",
        json!({"max_candidates": 4}),
    )
    .unwrap();
    expect![[r#"
        [
            "BK=64, BM=64, BN=64, num_warps=4, num_stages=3",
            "BK=64, BM=64, BN=64, num_warps=8, num_stages=3",
            "BK=64, BM=64, BN=64, num_warps=8, num_stages=4",
            "BK=32, BM=64, BN=64, num_warps=2, num_stages=3",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
    // Only one warp count and one stage count that cannot hold a 256x256 f32 accumulator:
    // every larger tile is pruned by registers, smaller ones remain.
    let out = run(
        Lang::Triton,
        MATMULS,
        "mm_bf16",
        "triton_configs",
        json!({"num_warps": [2], "num_stages": [4], "max_candidates": 64}),
    )
    .unwrap();
    assert!(
        labels(&out).iter().all(|l| !l.contains("BM=256, BN=256")),
        "{:?}",
        labels(&out)
    );
}

#[test]
fn an_elementwise_kernel_keeps_a_few_elements_per_thread() {
    let untuned = VECTOR_ADD.replace("# @bench tune BLOCK in [64, 256, 1024, 2048]\n", "");
    let out = run(
        Lang::Triton,
        &untuned,
        "add_kernel",
        "triton_configs",
        json!({}),
    )
    .unwrap();
    expect![[r#"
        [
            "BLOCK=256, num_warps=2",
            "BLOCK=128, num_warps=2",
            "BLOCK=256, num_warps=4",
            "BLOCK=64, num_warps=2",
            "BLOCK=128, num_warps=4",
            "BLOCK=256, num_warps=8",
        ]
    "#]]
    .assert_debug_eq(&labels(&out));
}

#[test]
fn tuned_values_are_left_to_the_tunable_sweep() {
    let why =
        |src: &str, k: &str| not_applicable(run(Lang::Triton, src, k, "triton_configs", json!({})));
    expect!["`add_kernel` has no configuration grid to sweep: `BLOCK` has a `tune` line (tunable_sweep covers it)"].assert_eq(&why(VECTOR_ADD, "add_kernel"));
    expect!["`softmax_kernel` has no configuration grid to sweep: the spec tunes `num_warps` or `num_stages` itself; tunable_sweep covers it"].assert_eq(&why(SOFTMAX, "softmax_kernel"));
}

#[test]
fn a_kernel_storing_through_a_descriptor_counts_its_output_tile_in_shared_memory() {
    // The persistent, TMA-fed version of the bundled matmul with an f16 output: its
    // output tile (128x256 halves, 64 KiB) is staged in shared memory beside the stages,
    // so 4 stages of 128x256x64 (192 KiB) no longer fit; 3 do.
    let f16_out = MATMUL.replace("c_ptr: out f32[M, N]", "c_ptr: out f16[M, N]");
    let persistent = run(
        Lang::Triton,
        &f16_out,
        "matmul_kernel",
        "triton_persistent_dot",
        json!({"configs": [[128, 256, 64, 8, 3]]}),
    )
    .unwrap();
    let text = &persistent[0].text;
    let sweep = |src: &str| {
        let out = run(
            Lang::Triton,
            src,
            "matmul_kernel",
            "triton_configs",
            json!({"max_candidates": 64}),
        );
        labels(&out.unwrap())
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
    };
    let big4 = "BLOCK_K=64, BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=4";
    let big3 = "BLOCK_K=64, BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3";
    assert!(
        sweep(&f16_out).iter().any(|l| l == big4),
        "the per-tile kernel keeps `{big4}`"
    );
    let after = sweep(text);
    assert!(!after.iter().any(|l| l == big4), "{after:?}");
    assert!(
        after
            .iter()
            .any(|l| l.starts_with("BLOCK_K=64, BLOCK_M=128, BLOCK_N=128")),
        "{after:?}"
    );
    // The 3-stage 128x256x64 is the candidate's own launch, so it is not swept again.
    assert!(!after.iter().any(|l| l == big3), "{after:?}");
}

#[test]
fn each_block_is_halved_kept_doubled_or_quadrupled_within_its_bounds() {
    let blocks: std::collections::BTreeMap<String, u64> =
        [("BLOCK".to_string(), 16), ("ROWS".to_string(), 4096)].into();
    let grid = super::block_grid(&blocks, &None);
    let values = |name: &str| {
        let mut v: Vec<u64> = grid.iter().map(|c| c[name]).collect();
        v.sort();
        v.dedup();
        v
    };
    // 8 is below the lowest block; 32768 above the highest.
    assert_eq!(values("BLOCK"), [16, 32, 64]);
    assert_eq!(values("ROWS"), [2048, 4096, 8192, 16384]);
    assert_eq!(grid.len(), 3 * 4);
}

const PROBLEM_SIZES: &str =
    include_str!("../../../../../tests/fixtures/rewrites/triton/problem_sizes.py");

/// A constexpr the buffers' shapes read is a problem size: the sweep moves the tiles
/// beside it and never it.
#[test]
fn a_head_dimension_the_buffers_read_is_not_swept() {
    let out = run(
        Lang::Triton,
        PROBLEM_SIZES,
        "scores",
        "triton_configs",
        json!({}),
    )
    .unwrap();
    let swept = labels(&out);
    assert!(!swept.is_empty());
    assert!(swept.iter().all(|l| !l.contains("HD=")), "{swept:?}");
    assert!(
        swept.iter().all(|l| l.contains("BM=") && l.contains("BN=")),
        "{swept:?}"
    );
    expect![[r#"["BM=32, BN=16, num_warps=2", "BM=32, BN=32, num_warps=4", "BM=32, BN=64, num_warps=8", "BM=64, BN=16, num_warps=4", "BM=64, BN=32, num_warps=8", "BM=128, BN=16, num_warps=8", "BM=32, BN=16, num_warps=4", "BM=32, BN=32, num_warps=2", "BM=32, BN=32, num_warps=8", "BM=32, BN=64, num_warps=4", "BM=32, BN=128, num_warps=8", "BM=64, BN=16, num_warps=2"]"#]].assert_eq(&format!("{swept:?}"));
    let why = not_applicable(run(
        Lang::Triton,
        PROBLEM_SIZES,
        "row_copy",
        "triton_configs",
        json!({}),
    ));
    expect!["`row_copy` has no configuration grid to sweep: `W` is a problem size, not a block size: the shape of `x` changes with it"].assert_eq(&why);
    let out = run(
        Lang::Triton,
        PROBLEM_SIZES,
        "copy",
        "triton_configs",
        json!({}),
    )
    .unwrap();
    assert!(labels(&out).iter().any(|l| l.starts_with("BLOCK=")));
}
