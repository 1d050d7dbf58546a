use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{assert_has, cuda, labels, not_applicable, ranked_steps, show};
use crate::syntax::Lang;

const SPLITS: &str = include_str!("../../../../../tests/fixtures/rewrites/delin/flat_splits.cu");
const DRAFT: &str = include_str!("../../../../../tests/gpu/drafts/embedding_gather.cu");

#[test]
fn an_embedding_gather_becomes_a_row_per_block_y() {
    let out = cuda(DRAFT, "embedding_gather", "delinearize", json!({})).unwrap();
    // D = 1024 in the timed case: blocks of 128 and 256. Each launch also comes
    // vectorized along the rows (it is what the launch is for).
    assert_eq!(
        labels(&out),
        [
            "2-D launch, block 128, a row per blockIdx.y",
            "2-D launch, block (128, 2), 2 rows per block",
            "2-D launch, block 256, a row per blockIdx.y",
            "2-D launch, block 128, a row per blockIdx.y, then VEC=4 along rows (float4)",
            "2-D launch, block 128, a row per blockIdx.y, then VEC=2 along rows (float2)",
            "2-D launch, block (128, 2), 2 rows per block, then VEC=4 along rows (float4)",
            "2-D launch, block (128, 2), 2 rows per block, then VEC=2 along rows (float2)",
            "2-D launch, block 256, a row per blockIdx.y, then VEC=4 along rows (float4)",
            "2-D launch, block 256, a row per blockIdx.y, then VEC=2 along rows (float2)",
        ]
    );
    expect![[r#"
        // @bench T = 16384, 77; D = 1024, 99; V = 32000, 1001
        // @bench idx: in i64[T] ~ randint(0, V); table: in f32[V, D]; out: out f32[T, D]
        // @bench grid = (cdiv(D, 128), T); block = 128
        // @bench reference = torch: F.embedding(idx, table)
        __global__ void embedding_gather(const long long* idx, const float* table, float* out, int T, int D, int V) {
            size_t d = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
            size_t t = blockIdx.y;
            if (d < D) {
                out[t * D + d] = table[idx[t] * D + d];
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, DRAFT, &out[0], "embedding_gather"));
}

#[test]
fn a_broadcast_over_a_flat_n_takes_its_rows_from_the_spec() {
    let out = cuda(SPLITS, "bias_add", "delinearize", json!({})).unwrap();
    let shown = show(Lang::Cuda, SPLITS, &out[0], "bias_add");
    assert_has(
        &shown,
        &[
            "// @bench grid = (cdiv(C, 128), n / C); block = 128",
            "int col = blockIdx.x * blockDim.x + threadIdx.x;",
            "int row = blockIdx.y;",
            "if (col < C) {",
            "y[row * C + col] = x[row * C + col] + b[col];",
        ],
    );
    // Spec lines other than the launch stay as they were.
    assert_has(&shown, &["// @bench R = 300, 77; C = 512, 99; n = R * C"]);
}

#[test]
fn a_column_by_subtraction_is_the_column() {
    let shown = show(
        Lang::Cuda,
        SPLITS,
        &cuda(SPLITS, "scale_shift", "delinearize", json!({})).unwrap()[0],
        "scale_shift",
    );
    assert_has(
        &shown,
        &[
            "grid = (cdiv(cols, 128), rows); block = 128",
            // The author's row and column become the coordinates themselves.
            "int col = threadIdx.x + blockIdx.x * blockDim.x;\n    int row = blockIdx.y;\n    if (col < cols) {\n        out[row * cols + col] = x[row * cols + col] * scale[row] + shift[col];\n    }",
        ],
    );
}

#[test]
fn more_rows_than_a_grid_holds_stride_over_y() {
    let out = cuda(SPLITS, "tall_rows", "delinearize", json!({})).unwrap();
    assert_eq!(
        labels(&out)[0],
        "2-D launch, block (64, 4), rows strided over grid y <= 65535"
    );
    let shown = show(Lang::Cuda, SPLITS, &out[0], "tall_rows");
    assert_has(
        &shown,
        &[
            "grid = (cdiv(D, 64), min(cdiv(T, 4), 65535)); block = (64, 4)",
            "for (size_t row = blockIdx.y * blockDim.y + threadIdx.y; row < T; row += gridDim.y * blockDim.y) {",
            "y[row * D + col] = x[row * D + col] * w[row];",
        ],
    );
}

#[test]
fn a_literal_divisor_under_an_atomic_is_split() {
    let shown = show(
        Lang::Cuda,
        SPLITS,
        &cuda(SPLITS, "scatter_rows", "delinearize", json!({})).unwrap()[0],
        "scatter_rows",
    );
    assert_has(
        &shown,
        &[
            "grid = (cdiv(99, 128), T); block = 128",
            "if (col < 99) {",
            "atomicAdd(&acc[idx[row] * 99 + col], src[row * 99 + col]);",
        ],
    );
}

#[test]
fn a_defined_divisor_is_sized_from_the_spec() {
    let out = cuda(SPLITS, "gate_rows", "delinearize", json!({})).unwrap();
    // COLS = 96: one block width, 96 threads; float4 and float2 also from blocks of 32
    // and 64, which 96 columns fill.
    assert_eq!(
        labels(&out)[0],
        "2-D launch, block (96, 2), 2 rows per block"
    );
    assert_eq!(out.len(), 5, "{:?}", labels(&out));
    let shown = show(Lang::Cuda, SPLITS, &out[0], "gate_rows");
    assert_has(
        &shown,
        &[
            "grid = (cdiv(COLS, 96), cdiv(R, 2)); block = (96, 2)",
            "unsigned col = blockIdx.x * blockDim.x + threadIdx.x;",
            "unsigned r = blockIdx.y * blockDim.y + threadIdx.y;",
            "if (col < COLS && r < R) {\n        y[r * COLS + col] = x[r * COLS + col] * g[r];\n    }",
        ],
    );
}

#[test]
fn splits_it_cannot_remap_are_refused_with_the_reason() {
    let why = |k: &str| not_applicable(cuda(SPLITS, k, "delinearize", json!({})));
    // A 3-D split is taken once `i / (H * W)` is read as `(i / W) / H`; divisors that
    // share no factors are not.
    assert_eq!(
        labels(&cuda(SPLITS, "chw_bias", "delinearize", json!({})).unwrap())[0],
        "2-D launch, block (32, 8), 8 rows per block"
    );
    let two = SPLITS.replace("b[c] * h + i % W", "b[c] * h + i % 7");
    let why_two = not_applicable(cuda(&two, "chw_bias", "delinearize", json!({})));
    assert!(why_two.contains("split by both"), "{why_two}");
    assert!(
        why("first_flagged").contains("uses `i` other than as `i / D`"),
        "{}",
        why("first_flagged")
    );
    assert!(
        why("ragged_bias").contains("a case has n = 1001, D = 64"),
        "{}",
        why("ragged_bias")
    );
    assert!(why("staged").contains("shared memory"), "{}", why("staged"));
    assert!(
        why("block_tagged").contains("the body reads `blockDim.x`, which the 2-D launch changes"),
        "{}",
        why("block_tagged")
    );
    assert!(
        why("loaded_divisor").contains("reads `w`, which may differ between threads"),
        "{}",
        why("loaded_divisor")
    );
}

#[test]
fn a_kernel_without_a_split_is_left_to_the_1d_rewrites() {
    let saxpy = include_str!("../../../../../examples/saxpy.cu");
    let why = not_applicable(cuda(saxpy, "saxpy", "delinearize", json!({})));
    assert!(why.contains("never splits `i`"), "{why}");
}

#[test]
fn the_policy_offers_it_where_the_flat_index_is_divided_at_run_time() {
    // The diagnosis names the division first.
    let steps = ranked_steps(DRAFT, "embedding_gather");
    assert_eq!(
        steps.first().map(String::as_str),
        Some("delinearize"),
        "{steps:?}"
    );
    // Its output divides nothing: not proposed again.
    let out = cuda(DRAFT, "embedding_gather", "delinearize", json!({})).unwrap();
    let again = ranked_steps(&out[0].text, "embedding_gather");
    assert!(!again.iter().any(|s| s == "delinearize"), "{again:?}");
    // A power-of-two literal is a shift and a mask: nothing to cure.
    let pow2 = SPLITS
        .replace("i < T * 99", "i < T * 64")
        .replace("[T, 99]", "[T, 64]")
        .replace("[10, 99]", "[10, 64]")
        .replace("cdiv(T * 99, 256)", "cdiv(T * 64, 256)")
        .replace("idx[i / 99] * 99 + i % 99", "idx[i / 64] * 64 + i % 64");
    assert_ne!(pow2, SPLITS, "the fixture moved");
    let steps = ranked_steps(&pow2, "scatter_rows");
    assert!(!steps.iter().any(|s| s == "delinearize"), "{steps:?}");
}

#[test]
fn a_narrower_row_local_keeps_its_type_and_the_address_stays_64_bit() {
    let narrow = DRAFT.replace("size_t t = i / D;", "int t = i / D;");
    assert_ne!(narrow, DRAFT, "the draft moved");
    let out = cuda(&narrow, "embedding_gather", "delinearize", json!({})).unwrap();
    let shown = show(Lang::Cuda, &narrow, &out[0], "embedding_gather");
    assert_has(
        &shown,
        &[
            "size_t d = (size_t)blockIdx.x * blockDim.x + threadIdx.x;",
            "size_t row = blockIdx.y;",
            "int t = row;",
            "out[row * D + d] = table[idx[t] * D + d];",
        ],
    );
}

#[test]
fn the_row_vectorizer_takes_what_it_writes() {
    for (src, k) in [
        (DRAFT, "embedding_gather"),
        (SPLITS, "bias_add"),
        (SPLITS, "scale_shift"),
        (SPLITS, "gate_rows"),
    ] {
        let out = cuda(src, k, "delinearize", json!({})).unwrap();
        let vec = cuda(&out[0].text, k, "vectorize_rows", json!({}))
            .unwrap_or_else(|e| panic!("{k}: {e}"));
        assert_eq!(
            labels(&vec),
            ["VEC=4 along rows (float4)", "VEC=2 along rows (float2)"],
            "{k}"
        );
    }
}

#[test]
fn a_vector_width_too_wide_for_the_blocks_also_gets_a_narrower_block() {
    use super::narrower_blocks;
    // Rows of 256 in blocks of 128: VEC=4 also from blocks of 64; VEC=2 fits 128.
    assert_eq!(narrower_blocks(Some(256), &[128]), [(4, 64)]);
    // Rows of 1024 in blocks of 128 and 256: both widths fit.
    assert_eq!(narrower_blocks(Some(1024), &[128, 256]), []);
    // Rows of 40 in blocks of 64: VEC=4 and VEC=2 each get a warp.
    assert_eq!(narrower_blocks(Some(40), &[64]), [(4, 32), (2, 32)]);
    assert_eq!(narrower_blocks(None, &[128]), []);
}

#[test]
fn narrow_rows_get_several_rows_a_block() {
    use super::{block_shapes, rows_per_block};
    // 256 threads a block: a row of 64 lanes takes 4 rows, a row of 96 takes 2.
    assert_eq!(rows_per_block(64), 4);
    assert_eq!(rows_per_block(96), 2);
    assert_eq!(rows_per_block(256), 1);
    assert_eq!(rows_per_block(1024), 1);
    // 128 keeps its one-row block too; narrower widths only come with rows per block.
    assert_eq!(block_shapes(&[128, 256]), [(128, 1), (128, 2), (256, 1)]);
    assert_eq!(block_shapes(&[64]), [(64, 4)]);
    assert_eq!(block_shapes(&[32]), [(32, 8)]);
}

#[test]
fn a_pixel_shuffle_takes_four_rows_of_64_lanes_a_block() {
    let src = include_str!("../../../../../tests/gpu/drafts/pixel_shuffle.cu");
    let out = cuda(src, "pixel_shuffle", "delinearize", json!({})).unwrap();
    // Rows of 256 outputs: float4 from 64 lanes, 4 rows a block (blocks of 64 threads a
    // row each cost the launch of 4 times as many blocks).
    let last = labels(&out).last().cloned().unwrap();
    assert_eq!(
        last,
        "2-D launch, block (64, 4), 4 rows per block, then VEC=4 along rows (float4)"
    );
    let shown = show(Lang::Cuda, src, out.last().unwrap(), "pixel_shuffle");
    assert_has(
        &shown,
        &[
            "// @bench grid = (cdiv(W*R, 4 * 64), cdiv(C * H * N * R, 4)); block = (64, 4)",
            "long long row = blockIdx.y * blockDim.y + threadIdx.y;",
            "if ((4 * (col - threadIdx.x + blockDim.x) - 1) < (W * R) && row < C * H * N * R &&",
            "if (k < (W * R) && row < C * H * N * R) {",
        ],
    );
}
