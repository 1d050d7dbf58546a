//! The analysis-driven CUDA cures on kernels nobody wrote for them: every kernel of the
//! real projects in `tests/corpus` (fetched by `tests/corpus/fetch.sh`), given the spec
//! skeleton the editor would insert, must get an answer from each cure: candidates that
//! still parse and plan, or a refusal with a reason. Prints how many each cure took, and
//! how many candidates came from the kernel with its helper calls written out. The
//! first `interleave` candidates (a code rewrite of loops in any style; with the first
//! nest's unroll-and-jam where one is offered too) and every
//! `vectorize_groups`, `stream_loads`, `vector_loops`, `delinearize` and `stage_rows` candidate must also compile with
//! NVRTC wherever the original does. `grid_total` is tried with the skeleton's launch made one block, and
//! its candidates must compile too.

use kernel_lsp::document::Document;
use kernel_lsp::optimize::rewrite::{self, RewriteContext, RewriteError};
use kernel_lsp::syntax::Lang;

const CURES: &[&str] = &[
    "split_loop",
    "cooperative_rows",
    "remap_lanes",
    "block_reduce",
    "interleave",
    "vectorize_groups",
    "stream_loads",
    "vector_loops",
    "delinearize",
    "block_coarsen",
    "stage_rows",
];

/// How many kernels' `interleave` candidates are compiled with NVRTC, from files under
/// `SMALL` bytes (a large file with heavy headers takes tens of seconds per compile).
const COMPILED: usize = 12;
const SMALL: usize = 24_000;

/// The candidate compiles with no error where the original compiles with none.
fn compiles_like_the_original(original: &str, candidate: &str, kernel: &str) {
    if crate::tools::nvrtc_available().is_err() {
        return;
    }
    let tc = kernel_lsp::toolchain::locate(&Default::default());
    let errors = |text: &str| {
        let doc = Document::new(Lang::Cuda, 0, text);
        let file = kernel_lsp::analysis::analyze(
            Lang::Cuda,
            text,
            doc.tree(),
            &kernel_lsp::analysis::AnalyzeOptions::default(),
        );
        kernel_lsp::analysis::compile(&tc, text, &file.compile_inputs(), "candidate.cu")
            .findings
            .into_iter()
            .filter(|f| f.severity == kernel_lsp::analysis::Severity::Error)
            .map(|f| f.message)
            .collect::<Vec<_>>()
    };
    if errors(original).is_empty() {
        let new = errors(candidate);
        assert!(new.is_empty(), "{kernel}: {new:?}\n{candidate}");
    }
}

fn cuda_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            cuda_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "cu" || x == "cuh") {
            out.push(p);
        }
    }
}

/// `grid_total` on the kernel as if its skeleton launched one block (`grid = 1`): on real
/// code it must take a kernel (every candidate compiling wherever the original does, for
/// files under [`SMALL`]) or refuse it with a reason.
fn one_block_total(
    text: &str,
    sk: &kernel_lsp::spec::Skeleton,
    kernel: &str,
    hits: &mut Vec<String>,
) {
    let Some(g) = sk.text.find("grid = ") else {
        return;
    };
    let end = sk.text[g..]
        .find([';', '\n'])
        .map_or(sk.text.len(), |e| g + e);
    let spec = format!("{}grid = 1{}", &sk.text[..g], &sk.text[end..]);
    let mut one = text.to_string();
    one.insert_str(sk.insert_at, &spec);
    let doc = Document::new(Lang::Cuda, 0, &one);
    let Some(tree) = doc.tree() else { return };
    let model = kernel_lsp::syntax::analyze(Lang::Cuda, &one, tree);
    let Some(k) = model.kernel(kernel) else {
        return;
    };
    let params = Default::default();
    let cx = RewriteContext {
        lang: Lang::Cuda,
        text: &one,
        tree,
        model: &model,
        kernel: k,
        params: &params,
    };
    match rewrite::apply("grid_total", &cx) {
        Ok(c) => {
            if one.len() < SMALL {
                for cand in &c {
                    compiles_like_the_original(&one, &cand.text, kernel);
                }
            }
            hits.push(format!("{kernel} ({} candidates)", c.len()));
        }
        Err(RewriteError::NotApplicable(why)) => assert!(!why.is_empty()),
        Err(e) => panic!("grid_total on {kernel}: {e}"),
    }
}

#[test]
fn analysis_cures_answer_every_corpus_kernel_with_a_skeleton_spec() {
    let test = "analysis_cures_answer_every_corpus_kernel_with_a_skeleton_spec";
    let cache = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/cache");
    let mut files = Vec::new();
    cuda_files(&cache, &mut files);
    if files.is_empty() {
        return crate::tools::skip(test, "no corpus (run tests/corpus/fetch.sh)");
    }
    files.sort();
    let mut kernels = 0;
    let mut compiled = 0;
    let mut one_block: Vec<String> = Vec::new();
    let mut took: Vec<(String, Vec<String>)> =
        CURES.iter().map(|c| (c.to_string(), Vec::new())).collect();
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let doc = Document::new(Lang::Cuda, 0, &text);
        let Some(tree) = doc.tree() else { continue };
        let model = kernel_lsp::syntax::analyze(Lang::Cuda, &text, tree);
        for k in model.kernels.iter().filter(|k| k.spec.lines.is_empty()) {
            let sk = kernel_lsp::spec::skeleton(k, &text);
            let mut with = text.clone();
            with.insert_str(sk.insert_at, &sk.text);
            let doc2 = Document::new(Lang::Cuda, 0, &with);
            let Some(tree2) = doc2.tree() else { continue };
            let model2 = kernel_lsp::syntax::analyze(Lang::Cuda, &with, tree2);
            let Some(k2) = model2.kernel(&k.name) else {
                continue;
            };
            kernels += 1;
            one_block_total(&text, &sk, &k.name, &mut one_block);
            for (id, hits) in &mut took {
                let params = Default::default();
                let cx = RewriteContext {
                    lang: Lang::Cuda,
                    text: &with,
                    tree: tree2,
                    model: &model2,
                    kernel: k2,
                    params: &params,
                };
                match rewrite::apply(id, &cx) {
                    Ok(c) => {
                        if *id == "interleave" && compiled < COMPILED && with.len() < SMALL {
                            compiles_like_the_original(&with, &c[0].text, &k.name);
                            // and the first nest's jam (unroll-and-jam), where there is one
                            let jam = c[1..].iter().find(|c| c.label.contains("fused"));
                            if let Some(jam) = jam {
                                compiles_like_the_original(&with, &jam.text, &k.name);
                            }
                            compiled += 1;
                        }
                        // Few kernels take these: every candidate compiles.
                        if matches!(
                            id.as_str(),
                            "vectorize_groups"
                                | "stream_loads"
                                | "vector_loops"
                                | "delinearize"
                                | "stage_rows"
                        ) && with.len() < SMALL
                        {
                            for cand in &c {
                                compiles_like_the_original(&with, &cand.text, &k.name);
                            }
                        }
                        assert!(
                            !c.is_empty(),
                            "{id} on {}:{} gave Ok with nothing",
                            f.display(),
                            k.name
                        );
                        let written_out = c
                            .iter()
                            .filter(|x| x.label.contains("helper calls written out"))
                            .count();
                        hits.push(format!(
                            "{}:{} ({} candidates, {written_out} with helper calls written out)",
                            f.strip_prefix(&cache).unwrap_or(f).display(),
                            k.name,
                            c.len()
                        ));
                    }
                    Err(RewriteError::NotApplicable(why)) => assert!(!why.is_empty()),
                    Err(e) => panic!("{id} on {}:{}: {e}", f.display(), k.name),
                }
            }
        }
    }
    eprintln!("{kernels} corpus kernels with skeleton specs");
    eprintln!(
        "grid_total (the skeleton's launch made one block): {} kernels",
        one_block.len()
    );
    for h in one_block.iter().take(12) {
        eprintln!("  {h}");
    }
    for (id, hits) in &took {
        eprintln!("{id}: {} kernels", hits.len());
        for h in hits.iter().take(12) {
            eprintln!("  {h}");
        }
    }
}
