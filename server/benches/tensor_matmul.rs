//! The fp32 matmul on the tensor cores (issue #30): writes `tile_matmul`'s 3xTF32
//! candidates for `examples/matmul_naive.cu` (its spec's atol raised to 1e-3, where they
//! are offered), `matmul_loose` of `tests/fixtures/rewrites/tiles/matmuls.cu` and the
//! kernels of `tests/fixtures/rewrites/tiles/tensor_matmuls.cu` into a folder,
//! as the rewrite writes them, with the draft beside them. `tests/gpu/tensor_matmul.py`
//! then compiles them with NVRTC on a GPU machine, checks them against the f64 product
//! and times them against cuBLAS fp32.
//!
//! It also writes `triton_persistent_dot`'s candidates (persistent, TMA-fed) for
//! `examples/matmul.py` (as it is, f32 out, and with an f16 output) and two styles of
//! `tests/fixtures/rewrites/triton/persistent_dots.py`, with their drafts, as `*.py`;
//! `tests/gpu/f16_matmul.py` times those against cuBLAS f16/bf16.
//!
//! Run with `cargo bench --bench tensor_matmul -- DIR`; record results in
//! docs/benchmarks.md.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::{self, RewriteContext};
use kernel_lsp::syntax::{self, Lang};
use serde_json::json;

const MATMUL: &str = include_str!("../../examples/matmul_naive.cu");
const TENSOR: &str = include_str!("../../tests/fixtures/rewrites/tiles/tensor_matmuls.cu");
const MATMULS: &str = include_str!("../../tests/fixtures/rewrites/tiles/matmuls.cu");
const TRITON_MATMUL: &str = include_str!("../../examples/matmul.py");
const DOTS: &str = include_str!("../../tests/fixtures/rewrites/triton/persistent_dots.py");

fn main() {
    // `cargo bench` passes `--bench`; the folder is the first other argument.
    let Some(dir) = std::env::args().skip(1).find(|a| !a.starts_with("--")) else {
        eprintln!("usage: cargo bench --bench tensor_matmul -- DIR");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let loose = MATMUL.replace("rtol = 1e-3", "atol = 1e-3; rtol = 1e-3");
    std::fs::write(dir.join("draft_matmul.cu"), MATMUL).expect("write the draft");
    let params: BTreeMap<String, serde_json::Value> = [
        ("tiles", json!([])),
        ("register_blocks", json!([])),
        ("adjacent_blocks", json!([])),
        ("staged_blocks", json!([])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (src, kernel) in [
        (loose.as_str(), "matmul"),
        (MATMULS, "matmul_loose"),
        (TENSOR, "gemm_tn"),
        (TENSOR, "gemm_ld"),
    ] {
        let doc = Document::new(Lang::Cuda, 0, src);
        let tree = doc.tree().expect("the file parses");
        let model = syntax::analyze(Lang::Cuda, src, tree);
        let k = model.kernel(kernel).expect("the file has the kernel");
        let cx = RewriteContext {
            lang: Lang::Cuda,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        };
        let out = rewrite::apply("tile_matmul", &cx).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        for (i, c) in out.iter().enumerate() {
            std::fs::write(dir.join(format!("{kernel}_{i}.cu")), &c.text).expect("write");
            std::fs::write(dir.join(format!("{kernel}_{i}.label")), &c.label).expect("write");
            println!("{kernel}_{i}.cu: {}", c.label);
        }
    }
    write_triton(&dir);
}

/// The Triton drafts and `triton_persistent_dot`'s candidates for them, `NAME.py` (the
/// draft) and `NAME_I.py` with `NAME_I.label`.
fn write_triton(dir: &std::path::Path) {
    let f16_out = TRITON_MATMUL.replace("c_ptr: out f32[M, N]", "c_ptr: out f16[M, N]");
    let params = BTreeMap::new();
    for (src, kernel, name) in [
        (TRITON_MATMUL, "matmul_kernel", "matmul_f32out"),
        (f16_out.as_str(), "matmul_kernel", "matmul_f16out"),
        (DOTS, "mm_tutorial", "mm_tutorial"),
        (DOTS, "linear_bt", "linear_bt"),
    ] {
        let doc = Document::new(Lang::Triton, 0, src);
        let tree = doc.tree().expect("the file parses");
        let model = syntax::analyze(Lang::Triton, src, tree);
        let k = model.kernel(kernel).expect("the file has the kernel");
        let cx = RewriteContext {
            lang: Lang::Triton,
            text: src,
            tree,
            model: &model,
            kernel: k,
            params: &params,
        };
        std::fs::write(dir.join(format!("{name}.py")), src).expect("write");
        let out = rewrite::apply("triton_persistent_dot", &cx)
            .unwrap_or_else(|e| panic!("{kernel}: {e}"));
        for (i, c) in out.iter().enumerate() {
            std::fs::write(dir.join(format!("{name}_{i}.py")), &c.text).expect("write");
            std::fs::write(dir.join(format!("{name}_{i}.label")), &c.label).expect("write");
            println!("{name}_{i}.py: {}", c.label);
        }
    }
}
