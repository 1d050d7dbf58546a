//! The fp32 matmul on the tensor cores (issue #30): writes `tile_matmul`'s 3xTF32
//! candidates for `examples/matmul_naive.cu` (its spec's atol raised to 1e-3, where they
//! are offered), `matmul_loose` of `tests/fixtures/rewrites/tiles/matmuls.cu` and the
//! kernels of `tests/fixtures/rewrites/tiles/tensor_matmuls.cu` into a folder,
//! as the rewrite writes them, with the draft beside them. `tests/gpu/tensor_matmul.py`
//! then compiles them with NVRTC on a GPU machine, checks them against the f64 product
//! and times them against cuBLAS fp32.
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
}
