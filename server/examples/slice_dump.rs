// scratch: dump NVRTC inputs and raw messages (not committed)
use kernel_lsp::analysis::{self, AnalyzeOptions};
use kernel_lsp::document::Document;
use kernel_lsp::syntax::Lang;
use kernel_lsp::toolchain;

fn main() {
    let settings = kernel_lsp::settings::Settings::default();
    let tc = toolchain::locate(&settings.toolchain());
    let out_dir =
        std::path::PathBuf::from(std::env::var("DUMP").unwrap_or("/tmp/wt31-dump".into()));
    if let Ok(f) = std::env::var("OUTLINE") {
        outline(
            &std::fs::read_to_string(&f).unwrap(),
            std::env::var("DEPTH")
                .map(|d| d.parse().unwrap())
                .unwrap_or(3),
        );
        return;
    }
    if let Ok(f) = std::env::var("SEXP") {
        let t = std::fs::read_to_string(&f).unwrap();
        println!("{}", sexp(&t));
        let m = kernel_lsp::syntax::analyze(Lang::Cuda, &t, &{
            let mut p = tree_sitter::Parser::new();
            p.set_language(&kernel_lsp::syntax::ts_language(Lang::Cuda))
                .unwrap();
            kernel_lsp::syntax::parse_text(&mut p, Lang::Cuda, &t).unwrap()
        });
        println!("---\n{}", m.device_slice);
        return;
    }
    for f in std::env::args().skip(1) {
        let path = std::path::PathBuf::from(&f);
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = Document::new(Lang::Cuda, 0, &text);
        let opts = AnalyzeOptions::default();
        let result = analysis::analyze(Lang::Cuda, &text, doc.tree(), &opts);
        let inputs = analysis::with_project(result.compile_inputs(), &text, &path, &[], &[], &tc);
        let d = out_dir.join(f.replace('/', "_"));
        let _ = std::fs::create_dir_all(&d);
        std::fs::write(d.join("slice.cu"), &inputs.device_slice).unwrap();
        for (n, t) in &inputs.headers {
            std::fs::write(d.join(n.replace('/', "_")), t).unwrap();
        }
        let r = toolchain::check_device_slice_with(
            &tc,
            &inputs.device_slice,
            "k.cu",
            &inputs.defines,
            &inputs.name_expressions,
            &inputs.project,
            &inputs.headers,
        );
        println!("== {f}: {} headers", inputs.headers.len());
        for m in r
            .messages
            .iter()
            .filter(|m| format!("{:?}", m.severity) == "Error")
            .take(4)
        {
            println!(
                "  {:?} {:?} {}:{} {}",
                m.severity,
                m.header,
                m.line + 1,
                m.col_start,
                m.message
            );
        }
        if !r.missing_headers.is_empty() {
            println!("  missing {:?}", r.missing_headers);
        }
    }
}
#[allow(dead_code)]
pub fn sexp(text: &str) -> String {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&kernel_lsp::syntax::ts_language(Lang::Cuda))
        .unwrap();
    let t = kernel_lsp::syntax::parse_text(&mut p, Lang::Cuda, text).unwrap();
    t.root_node().to_sexp()
}
#[allow(dead_code)]
pub fn outline(text: &str, depth: usize) {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&kernel_lsp::syntax::ts_language(Lang::Cuda))
        .unwrap();
    let t = kernel_lsp::syntax::parse_text(&mut p, Lang::Cuda, text).unwrap();
    fn go(n: tree_sitter::Node, d: usize, max: usize) {
        if !n.is_named() {
            return;
        }
        println!(
            "{}{} {}-{}",
            "  ".repeat(d),
            n.kind(),
            n.start_position().row + 1,
            n.end_position().row + 1
        );
        if d < max {
            let mut c = n.walk();
            for ch in n.children(&mut c) {
                go(ch, d + 1, max);
            }
        }
    }
    go(t.root_node(), 0, depth);
}
