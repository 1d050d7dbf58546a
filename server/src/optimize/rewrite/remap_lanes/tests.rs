use expect_test::expect;
use serde_json::json;

use super::super::check::testing::{cuda, labels, not_applicable, show};
use crate::syntax::Lang;

const REMAPS: &str = include_str!("../../../../../tests/fixtures/rewrites/lanes/remaps.cu");
const BIAS_RELU: &str = include_str!("../../../../../examples/bias_relu_rows.cu");

#[test]
fn lanes_on_rows_trade_places_with_y_and_the_launch_swaps() {
    let out = cuda(BIAS_RELU, "bias_relu_rows", "remap_lanes", json!({})).unwrap();
    assert_eq!(
        labels(&out),
        [
            "threads remapped: x walks what y walked",
            "threads remapped, block (32, 8)",
            "threads remapped, block (64, 4)"
        ]
    );
    expect![[r#"
        // A first draft of bias + ReLU over a row-major matrix, written row-first: the thread x
        // index walks the rows, so neighbouring threads touch addresses a whole row apart.
        // @bench rows = 8192, 1001; cols = 4096, 77
        // @bench x: in f32[rows, cols]; bias: in f32[cols]; y: out f32[rows, cols]
        // @bench grid = (cdiv(cols, 16), cdiv(rows, 16)); block = (16, 16)
        // @bench reference = torch: torch.relu(x + bias)
        __global__ void bias_relu_rows(const float* x, const float* bias, float* y, int rows, int cols) {
            int r = blockIdx.y * blockDim.y + threadIdx.y;
            int c = blockIdx.x * blockDim.x + threadIdx.x;
            if (r < rows && c < cols) {
                float v = x[r * cols + c] + bias[c];
                y[r * cols + c] = v > 0.0f ? v : 0.0f;
            }
        }"#]]
    .assert_eq(&show(Lang::Cuda, BIAS_RELU, &out[0], "bias_relu_rows"));
    let wide = show(Lang::Cuda, BIAS_RELU, &out[1], "bias_relu_rows");
    assert!(
        wide.contains("grid = (cdiv(cols, 32), cdiv(rows, 8)); block = (32, 8)"),
        "{wide}"
    );
}

#[test]
fn helpers_early_returns_and_loops_are_remapped_alike() {
    let out = cuda(REMAPS, "blend_helper", "remap_lanes", json!({})).unwrap();
    let text = show(Lang::Cuda, REMAPS, &out[0], "blend_helper");
    assert!(
        text.contains("grid = (cdiv(n, 8), cdiv(m, 32)); block = (8, 32)"),
        "{text}"
    );
    assert!(
        text.contains("const size_t i = (size_t)blockIdx.y * blockDim.y + threadIdx.y;"),
        "{text}"
    );
    // The block (8, 32) becomes (32, 8) in the wider candidate: the lane covers 32 floats.
    assert!(
        labels(&out).contains(&"threads remapped, block (32, 8)"),
        "{:?}",
        labels(&out)
    );
    let out = cuda(REMAPS, "row_window", "remap_lanes", json!({})).unwrap();
    let text = show(Lang::Cuda, REMAPS, &out[0], "row_window");
    assert!(
        text.contains("int y = blockIdx.y * blockDim.y + threadIdx.y;"),
        "{text}"
    );
    assert!(
        text.contains("grid = (cdiv(w, 8), cdiv(h, 8)); block = (8, 8)"),
        "{text}"
    );
}

#[test]
fn coalesced_warp_level_and_one_dimensional_kernels_are_refused() {
    let why = not_applicable(cuda(REMAPS, "scale_cols", "remap_lanes", json!({})));
    assert!(why.contains("would not coalesce"), "{why}");
    let why = not_applicable(cuda(REMAPS, "neighbour_diff", "remap_lanes", json!({})));
    assert!(why.contains("warp-level code (`__shfl`)"), "{why}");
    let why = not_applicable(cuda(REMAPS, "square", "remap_lanes", json!({})));
    assert!(why.contains("block is 1-D"), "{why}");
    // A 1-D block whose lanes walk a strided read (a pixel shuffle's channel planes):
    // swapped to (1, 256), its warps would be the same threads.
    let shuffle = include_str!("../../../../../tests/gpu/drafts/pixel_shuffle.cu");
    let why = not_applicable(cuda(shuffle, "pixel_shuffle", "remap_lanes", json!({})));
    expect!["`pixel_shuffle`'s block is 1-D: swapped it would be 1 thread wide along x, and a warp would still be 32 consecutive threads walking the same index"].assert_eq(&why);
    // A helper that reads the thread index may serve other kernels: left alone.
    let shared = REMAPS.replace(
        "    return p[i * ld + j];",
        "    return p[i * ld + j] + 0.0f * threadIdx.x;",
    );
    assert_ne!(shared, REMAPS);
    let why = not_applicable(cuda(&shared, "blend_helper", "remap_lanes", json!({})));
    assert!(
        why.contains("a helper `blend_helper` calls reads the thread"),
        "{why}"
    );
}

#[test]
fn the_rule_wants_fewer_strided_and_more_coalesced_accesses() {
    use super::{better, Weights};
    let w = |coalesced, strided| Weights { coalesced, strided };
    assert!(better(w(1, 10), w(10, 1)));
    assert!(!better(w(10, 1), w(1, 10)));
    // Fewer strided, but none coalesced (they became unknown, `x[idx[i]]`): no.
    assert!(!better(w(2, 3), w(2, 0)));
    assert!(!better(w(0, 0), w(0, 0)));
}

#[test]
fn the_bundled_row_first_drafts_are_remapped() {
    for (src, kernel) in [
        (
            include_str!("../../../../../examples/bias_relu_rows.cu"),
            "bias_relu_rows",
        ),
        (
            include_str!("../../../../../examples/norm_apply.cu"),
            "norm_apply",
        ),
    ] {
        let out = cuda(src, kernel, "remap_lanes", json!({})).unwrap();
        assert_eq!(
            out[0].label, "threads remapped: x walks what y walked",
            "{kernel}"
        );
    }
}
