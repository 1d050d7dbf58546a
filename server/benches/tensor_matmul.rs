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
use std::path::{Path, PathBuf};

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
        (TENSOR, "linear_nt"),
        (TENSOR, "matmul_band"),
    ] {
        let one = Rewrite {
            lang: Lang::Cuda,
            src,
            kernel,
            id: "tile_matmul",
        };
        one.write(&dir, kernel, "cu", &params);
    }
    // The Triton drafts (`NAME.py`) and triton_persistent_dot's candidates for them.
    let f16_out = TRITON_MATMUL.replace("c_ptr: out f32[M, N]", "c_ptr: out f16[M, N]");
    for (src, kernel, name) in [
        (TRITON_MATMUL, "matmul_kernel", "matmul_f32out"),
        (f16_out.as_str(), "matmul_kernel", "matmul_f16out"),
        (DOTS, "mm_tutorial", "mm_tutorial"),
        (DOTS, "linear_bt", "linear_bt"),
    ] {
        std::fs::write(dir.join(format!("{name}.py")), src).expect("write");
        let one = Rewrite {
            lang: Lang::Triton,
            src,
            kernel,
            id: "triton_persistent_dot",
        };
        one.write(&dir, name, "py", &BTreeMap::new());
    }
}

/// One rewrite of one kernel.
struct Rewrite<'a> {
    lang: Lang,
    src: &'a str,
    kernel: &'a str,
    id: &'a str,
}

impl Rewrite<'_> {
    /// Writes each candidate as `NAME_I.EXT` with its label in `NAME_I.label`.
    fn write(
        &self,
        dir: &Path,
        name: &str,
        ext: &str,
        params: &BTreeMap<String, serde_json::Value>,
    ) {
        let doc = Document::new(self.lang, 0, self.src);
        let tree = doc.tree().expect("the file parses");
        let model = syntax::analyze(self.lang, self.src, tree);
        let k = model.kernel(self.kernel).expect("the file has the kernel");
        let cx = RewriteContext {
            lang: self.lang,
            text: self.src,
            tree,
            model: &model,
            kernel: k,
            params,
        };
        let out = rewrite::apply(self.id, &cx).unwrap_or_else(|e| panic!("{}: {e}", self.kernel));
        for (i, c) in out.iter().enumerate() {
            std::fs::write(dir.join(format!("{name}_{i}.{ext}")), &c.text).expect("write");
            std::fs::write(dir.join(format!("{name}_{i}.label")), &c.label).expect("write");
            println!("{name}_{i}.{ext}: {}", c.label);
        }
    }
}
