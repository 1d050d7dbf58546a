//! A document parsed by regions must give exactly the model a whole parse gives, after
//! any edit (module doc, "The parse: a forest of regions"). Random edits, typed and
//! deleted, on CUDA files in many styles: after each, the model from the regions (with
//! the facts cache carried across edits, as the server does) is compared with a fresh
//! whole parse's: kernels, specs, parameters, units, device slice and syntax errors.

use std::path::{Path, PathBuf};

use super::*;
use crate::syntax::{self, SyntaxCache};

/// A small deterministic generator (no test depends on a seed it cannot print).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Edits that keep a file parseable as it was (mostly), then ones that break it.
const BENIGN: &[&str] = &[
    " ",
    "x",
    "\n",
    "i",
    "// note\n",
    "int y = 3;",
    "__global__ void added(float* p) { p[0] = 1; }\n",
    "__device__ float h2(float a) { return a; }\n",
];
const SNIPPETS: &[&str] = &[
    " ",
    "x",
    ";",
    "{",
    "}",
    "(",
    ")",
    "\n",
    "/*",
    "*/",
    "//",
    "\"",
    "#if 0\n",
    "#endif\n",
    "__device__ ",
    "__forceinline__ ",
    "int y = 3;",
    "\\\n",
    "// @bench n = 5\n",
    "template <int N>\n",
    "__global__ void added(float* p) { p[0] = 1; }\n",
    "__device__ float h2(float a) { return a; }\n",
    "struct P { float v; };\n",
];

fn files() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    let mut push_dir = |dir: &Path, every: usize| {
        let mut paths: Vec<PathBuf> = walk(dir)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "cu" || e == "cuh"))
            .collect();
        paths.sort();
        for p in paths.into_iter().step_by(every) {
            if let Ok(t) = std::fs::read_to_string(&p) {
                out.push((p, t));
            }
        }
    };
    push_dir(&root.join("examples"), 1);
    push_dir(&root.join("tests/fixtures"), 1);
    // The real projects of the corpus (tests/corpus/fetch.sh; CI fetches them), sampled.
    push_dir(&root.join("tests/corpus/cache"), 12);
    out.push((PathBuf::from("generated"), generated(40, 12)));
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[path = "../../benches/shared/generated_cuda.rs"]
mod generated_cuda;
use generated_cuda::generated_file as generated;

fn whole_model(text: &str) -> syntax::FileModel {
    let mut parser = parser_for(Lang::Cuda);
    let tree = syntax::parse_text(&mut parser, Lang::Cuda, text).expect("parses");
    syntax::analyze(Lang::Cuda, text, &tree)
}

#[test]
fn region_parses_match_whole_parses_under_random_edits() {
    let files = files();
    let (mut edits, mut by_region, mut whole) = (0usize, 0usize, 0usize);
    // Edits on documents of several regions: the ones a region parse can serve.
    let mut several = 0usize;
    for (n, (path, text)) in files.iter().enumerate() {
        let mut rng = Lcg(0x5eed + n as u64);
        let mut doc = Document::new(Lang::Cuda, 0, text);
        let mut cache = SyntaxCache::default();
        let mut undo: Option<(usize, usize, String)> = None;
        let rounds = if text.len() > 200_000 { 8 } else { 25 };
        for round in 0..rounds {
            // An edit at a character boundary: insert a snippet, delete a few bytes, or
            // replace a few bytes with a snippet; every other round undoes the last edit
            // (a broken file mended, as an author does).
            let len = doc.text().len();
            let (at, to, insert) = match undo.take() {
                Some((at, inserted_len, removed)) if round % 2 == 1 => {
                    (at, at + inserted_len, removed)
                }
                _ => {
                    let mut at = rng.below(len + 1);
                    while !doc.text().is_char_boundary(at) {
                        at -= 1;
                    }
                    let mut to = (at + rng.below(6)).min(len);
                    while !doc.text().is_char_boundary(to) {
                        to -= 1;
                    }
                    let insert = match rng.below(4) {
                        0 => "",
                        1 => SNIPPETS[rng.below(SNIPPETS.len())],
                        _ => BENIGN[rng.below(BENIGN.len())],
                    };
                    let to = if !insert.is_empty() && rng.below(2) == 0 {
                        at
                    } else {
                        to
                    };
                    (at, to, insert.to_string())
                }
            };
            undo = Some((at, insert.len(), doc.text()[at..to].to_string()));
            let (a, b) = (
                doc.position(at, PositionEncoding::Utf8),
                doc.position(to, PositionEncoding::Utf8),
            );
            doc.apply_change(a, b, &insert, PositionEncoding::Utf8)
                .unwrap();
            let parsed = doc.parse_job().run(&mut || false);
            let how = parsed.regions_parsed;
            if parsed.regions_parsed > 0 {
                by_region += 1;
            } else {
                whole += 1;
            }
            doc.install_parse(parsed);
            edits += 1;
            let text = doc.text().to_string();
            let regions = doc.forest().and_then(Forest::regions).expect("parsed");
            several += usize::from(regions.len() > 1);
            assert_eq!(
                regions.first().map(|r| r.range.start),
                Some(0),
                "regions start at 0"
            );
            for w in regions.windows(2) {
                assert_eq!(w[0].range.end, w[1].range.start, "regions are contiguous");
            }
            assert_eq!(regions.last().map(|r| r.range.end), Some(text.len()));
            let by_regions = syntax::analyze_regions(Lang::Cuda, &text, &regions, &mut cache);
            let fresh = whole_model(&text);
            if by_regions != fresh {
                for e in fresh.syntax_errors.iter().chain(&by_regions.syntax_errors) {
                    let from = e.range.start.saturating_sub(200);
                    eprintln!(
                        "--- error {:?}: {:?}",
                        e.range,
                        text.get(from..(e.range.end + 80).min(text.len()))
                    );
                }
                eprintln!(
                    "regions parsed {how}; regions {:?}",
                    regions
                        .iter()
                        .map(|r| (r.range.clone(), r.id, r.root.byte_range()))
                        .collect::<Vec<_>>()
                );
                eprintln!(
                    "edit at {at}..{to}: {:?}",
                    text.get(at.saturating_sub(300)..(at + 200).min(text.len()))
                );
                let first_kernel_diff = by_regions
                    .kernels
                    .iter()
                    .zip(&fresh.kernels)
                    .find(|(x, y)| x != y);
                panic!(
                    "{} after edit {round} ({a:?}..{b:?} <- {insert:?}): region model differs from a whole parse\n\
                     kernels {} vs {}; first differing kernel: {first_kernel_diff:#?}\n\
                     slices equal: {}; errors {:?} vs {:?}",
                    path.display(),
                    by_regions.kernels.len(),
                    fresh.kernels.len(),
                    by_regions.device_slice == fresh.device_slice,
                    by_regions.syntax_errors,
                    fresh.syntax_errors,
                );
            }
        }
    }
    println!(
        "{} files, {edits} edits ({several} on documents of several regions): {by_region} \
         parsed by region, {whole} whole",
        files.len()
    );
    // Both paths ran: most edits on documents of several regions were parsed by region,
    // and some edits needed a whole parse (small files are one region; files with a
    // syntax error, as some corpus files have under tree-sitter, are parsed whole). The
    // share is of the multi-region edits, so adding small fixture files cannot tip it.
    assert!(
        by_region * 2 > several && whole > 0,
        "by region {by_region}, whole {whole} of {edits} edits ({several} on documents of \
         several regions)"
    );
}

#[test]
fn typing_in_a_big_file_parses_one_small_region() {
    let text = generated(200, 30);
    let mut doc = Document::new(Lang::Cuda, 0, &text);
    let regions = doc.forest().unwrap().region_count();
    assert!(regions > 100, "{regions} regions");
    let line = text
        .lines()
        .position(|l| l.contains("int base = "))
        .unwrap() as u32
        + 4000;
    let line = text
        .lines()
        .enumerate()
        .skip(line as usize)
        .find(|(_, l)| l.contains("int base = "))
        .unwrap()
        .0 as u32;
    doc.apply_change(
        LinePos { line, col: 4 },
        LinePos { line, col: 4 },
        " ",
        PositionEncoding::Utf16,
    )
    .unwrap();
    let parsed = doc.parse_job().run(&mut || false);
    assert_eq!(parsed.regions_parsed, 1);
    let forest = parsed.forest.as_ref().unwrap();
    // The new tree covers one region of about REGION_BYTES, not the file.
    let small = forest.trees.iter().any(|t| {
        let r = t.included_ranges();
        r.len() == 1 && r[0].end_byte - r[0].start_byte < 4 * REGION_BYTES
    });
    assert!(small, "the edited region was parsed on its own");
    // An unclosed brace in a body takes in what follows: the whole text is parsed.
    doc.install_parse(parsed);
    doc.apply_change(
        LinePos { line, col: 4 },
        LinePos { line, col: 4 },
        "if (n) {",
        PositionEncoding::Utf16,
    )
    .unwrap();
    let parsed = doc.parse_job().run(&mut || false);
    assert_eq!(parsed.regions_parsed, 0, "parsed whole");
}
