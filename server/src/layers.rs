//! The layering rules of `docs/architecture.md`, checked on the source (issue #16, in the
//! manner of rust-analyzer's tidy tests): which module may name which. A `crate::...`
//! path in a module's code (tests after its first `#[cfg(test)]` excepted, and
//! `tests.rs` files) that its layer may not use fails `layers_hold`. Grouped imports
//! (`use crate::{a, b::{c, d}}`, `use super::{...}`) count as their paths. Within the
//! optimizer, no submodule names an item that `optimize/mod.rs` defines (the arrows
//! point down from the run's set-up to its stages): `optimize_mod_is_imported_by_none`.
//! External crates with one home ([`CONFINED_CRATES`]: `cudarc`, `reqwest`,
//! `tower_lsp`) are named nowhere else: `external_crates_stay_in_their_modules`.

/// The base every layer may use and that uses nothing above it.
const ABOVE_THE_BASE: &[&str] = &[
    "analysis",
    "capture",
    "optimize",
    "worker",
    "lsp",
    "cli",
    "toolchain",
];
/// The worker process's own modules (the server side holds only `pool` and `protocol`).
const WORKER_INSIDE: &[&str] = &[
    "worker::cuda",
    "worker::triton",
    "worker::serve",
    "worker::backend",
];

/// One rule: the module prefixes it holds, the path prefixes they may not use (as
/// lists, concatenated), and why.
pub type Rule = (
    &'static [&'static str],
    &'static [&'static [&'static str]],
    &'static str,
);

/// The rules. The longest matching module prefix wins, so a submodule can be held
/// tighter than its parent.
pub const RULES: &[Rule] = &[
    (
        &["syntax", "spec", "document", "profile"],
        &[ABOVE_THE_BASE],
        "the pure base: text, trees, specs and profiles in, models out",
    ),
    (
        &["toolchain"],
        &[&["analysis", "capture", "optimize", "worker", "lsp", "cli"]],
        "toolchain finds and runs CPU-side tools; it knows no engine above it",
    ),
    (
        &["analysis"],
        &[&["capture", "optimize", "worker", "lsp", "cli"]],
        "analysis is the engine both front-ends share; it runs no kernel",
    ),
    (
        &["capture"],
        &[&["optimize", "worker", "lsp", "cli", "toolchain"]],
        "capture runs the user's command in a child and writes specs; it runs no kernel itself",
    ),
    (
        &["optimize"],
        &[&["lsp", "cli"], WORKER_INSIDE],
        "the optimizer talks to GPUs only through WorkerPool and the protocol",
    ),
    (
        &["optimize::bench"],
        &[
            &["lsp", "cli"],
            WORKER_INSIDE,
            &[
                "optimize::step",
                "optimize::search",
                "optimize::policy",
                "optimize::coder",
                "optimize::llm",
                "optimize::rewrite",
            ],
        ],
        "the one bench engine of every front end: it verifies and times versions and knows no search",
    ),
    (
        &["optimize::facts"],
        &[&["lsp", "cli", "worker"]],
        "facts are pure: the step loop passes measured values in",
    ),
    (
        &["worker::pool"],
        &[WORKER_INSIDE, &["lsp", "cli", "optimize"]],
        "the pool runs in the server: it talks to workers through the protocol only",
    ),
    (
        &["worker"],
        &[&["lsp", "cli", "optimize"]],
        "workers run kernels; they know no editor or optimizer",
    ),
    (
        &["lsp"],
        &[&["cli"], WORKER_INSIDE],
        "the server never loads CUDA: GPU work goes through WorkerPool",
    ),
];

/// External crates with one home: the modules (prefixes) that may name them, and why.
pub const CONFINED_CRATES: &[(&str, &[&str], &str)] = &[
    (
        "cudarc",
        &["worker::cuda"],
        "only the worker process's CUDA backend loads the driver",
    ),
    (
        "reqwest",
        &["optimize::llm", "cli::health"],
        "HTTP is for the LLM client and the health check's reachability probe",
    ),
    (
        "tower_lsp",
        &["lsp"],
        "the LSP library stays in the protocol glue",
    ),
];

/// Whether `code` names the external crate `krate` (`krate::...` or `use krate`), outside
/// line comments.
pub fn names_crate(code: &str, krate: &str) -> bool {
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .any(|l| {
            l.match_indices(krate).any(|(at, _)| {
                let before = l[..at].chars().last();
                let word_start =
                    !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
                let after = &l[at + krate.len()..];
                word_start
                    && (after.starts_with("::")
                        || (l[..at].trim_end().ends_with("use")
                            && (after.starts_with(';') || after.starts_with(' '))))
            })
        })
}

/// The forbidden prefixes for a module path (`optimize::facts::cuda`).
pub fn forbidden(module: &str) -> Option<(&'static str, Vec<&'static str>, &'static str)> {
    RULES
        .iter()
        .flat_map(|(ms, f, why)| ms.iter().map(move |m| (*m, *f, *why)))
        .filter(|(m, _, _)| module == *m || module.starts_with(&format!("{m}::")))
        .max_by_key(|(m, _, _)| m.len())
        .map(|(m, f, why)| (m, f.concat(), why))
}

/// Every path `code` names from the crate root, as `a::b`: `crate::a::b`, and
/// `super::...` resolved against `module` (the file's module path).
pub fn crate_paths_in(code: &str, module: &str) -> Vec<String> {
    let mut out = crate_paths(code);
    let mut from = 0;
    while let Some(k) = code[from..].find("super::") {
        let at = from + k;
        // Only the first `super` of a chain (`super::super::x`), not a later one.
        let before_ok = !code[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let mut after = &code[at..];
        let mut parent: Vec<&str> = module.split("::").collect();
        while let Some(r) = after.strip_prefix("super::") {
            parent.pop();
            after = r;
        }
        let path: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let glob = after[path.len()..].starts_with('*');
        let path = path.trim_end_matches(':');
        if before_ok && !path.is_empty() {
            parent.push(path);
            out.push(parent.join("::"));
        } else if before_ok && glob {
            // `use super::*;`: every item of the parent.
            parent.push("*");
            out.push(parent.join("::"));
        }
        from = at + "super::".len();
    }
    out.extend(grouped_paths(code, module));
    out
}

/// The paths of grouped imports from the crate root or a parent module (`crate::{a,
/// b::c}`, `super::x::{y, z::{w}}`), each as `a::b`: `crate::a::{b, c}` gives `a::b` and
/// `a::c`; `self` in a group is the group's own path, `*` is `path::*`.
pub fn grouped_paths(code: &str, module: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("::{") {
        let at = from + k;
        from = at + 3;
        let start = code[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        let mut path = &code[start..at];
        let mut prefix: Vec<&str> = if let Some(r) = path.strip_prefix("crate") {
            path = r;
            Vec::new()
        } else if path.starts_with("super") {
            let mut parent: Vec<&str> = module.split("::").collect();
            while let Some(r) = path.strip_prefix("super") {
                parent.pop();
                path = r.strip_prefix("::").unwrap_or(r);
            }
            parent
        } else {
            continue;
        };
        prefix.extend(path.split("::").filter(|p| !p.is_empty()));
        if let Some(group) = braced(&code[at + 2..]) {
            expand_group(&prefix.join("::"), group, &mut out);
        }
    }
    out
}

/// The text inside the braces `s` starts with, or None when they do not close.
fn braced(s: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[1..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Each item of `group` (the inside of `{...}`) under `prefix`, nested groups expanded.
fn expand_group(prefix: &str, group: &str, out: &mut Vec<String>) {
    let join = |p: &str| {
        if prefix.is_empty() {
            p.to_string()
        } else {
            format!("{prefix}::{p}")
        }
    };
    let mut depth = 0usize;
    let mut item_start = 0;
    let mut items = Vec::new();
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&group[item_start..i]);
                item_start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[item_start..]);
    for item in items {
        let item = item.trim();
        if let Some(open) = item.find("::{") {
            if let Some(inner) = braced(&item[open + 2..]) {
                expand_group(&join(&item[..open]), inner, out);
            }
            continue;
        }
        let item = item.split(" as ").next().unwrap_or(item).trim();
        if item.is_empty() {
            continue;
        } else if item == "self" {
            out.push(prefix.to_string());
        } else {
            out.push(join(item));
        }
    }
}

/// Every `crate::a::b` path in `code`, as `a::b`.
pub fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let path: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let path = path.trim_end_matches(':').to_string();
        if !path.is_empty() {
            out.push(path);
        }
        rest = after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn module_of(src: &Path, file: &Path) -> String {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().to_string())
            .filter(|p| p != "mod")
            .collect();
        parts.join("::")
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn layers_hold() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        assert!(all.len() > 50, "found {} files", all.len());
        let mut bad = Vec::new();
        for f in &all {
            if f.file_name()
                .is_some_and(|n| n == "tests.rs" || n.to_string_lossy().ends_with("_tests.rs"))
            {
                continue;
            }
            let module = module_of(&src, f);
            let Some((_, forbidden, why)) = forbidden(&module) else {
                continue;
            };
            let text = std::fs::read_to_string(f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            // A `mod.rs` is its folder's module: `super::` there is the folder's parent.
            for p in crate_paths_in(code, &module) {
                if let Some(x) = forbidden
                    .iter()
                    .find(|x| p == **x || p.starts_with(&format!("{x}::")))
                {
                    bad.push(format!("{module} uses crate::{p} (may not use {x}: {why})"));
                }
            }
        }
        bad.sort();
        bad.dedup();
        assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
    }

    #[test]
    fn external_crates_stay_in_their_modules() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut bad = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for f in &all {
            let module = module_of(&src, f);
            let text = std::fs::read_to_string(f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (krate, homes, why) in CONFINED_CRATES {
                if !names_crate(code, krate) {
                    continue;
                }
                seen.insert(*krate);
                let home = homes
                    .iter()
                    .any(|h| module == *h || module.starts_with(&format!("{h}::")));
                if !home {
                    bad.push(format!("{module} names {krate} ({why})"));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "crates outside their modules:\n{}",
            bad.join("\n")
        );
        // Each rule still has something to hold (a renamed crate would pass silently).
        assert_eq!(seen.len(), CONFINED_CRATES.len(), "{seen:?}");
    }

    #[test]
    fn crate_names_are_found_in_code_not_comments() {
        assert!(names_crate("use cudarc::driver::CudaContext;", "cudarc"));
        assert!(names_crate(
            "    let u = reqwest::Url::parse(x);",
            "reqwest"
        ));
        assert!(names_crate("use tower_lsp;", "tower_lsp"));
        assert!(!names_crate(
            "//! CUDA through cudarc, Triton through Python",
            "cudarc"
        ));
        assert!(!names_crate(
            "let x = 1; // reqwest::Client is not used here",
            "reqwest"
        ));
        assert!(!names_crate("my_cudarc::x()", "cudarc"));
        assert!(!names_crate("crate::cudarc_like::x", "cudarc"));
    }

    /// The repository paths a comment line names (`docs/spec.md`, `tests/gpu/run.sh`).
    fn named_paths(line: &str) -> Vec<String> {
        const ROOTS: &[&str] = &[
            "docs/",
            "tests/",
            "examples/",
            "server/src/",
            "grammars/",
            "prompts/",
            "editors/",
        ];
        let mut out = Vec::new();
        for root in ROOTS {
            for (at, _) in line.match_indices(root) {
                if line[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == '.')
                {
                    continue;
                }
                let path: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || "_./-".contains(*c))
                    .collect();
                let path = path.trim_end_matches(['.', '/']);
                let file = path.rsplit('/').next().unwrap_or("");
                if file.contains('.') && !file.contains('*') {
                    out.push(path.to_string());
                }
            }
        }
        out
    }

    #[test]
    fn comments_name_files_that_exist() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let src = root.join("server/src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut bad = Vec::new();
        for f in &all {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let Some(comment) = line.split_once("//").map(|(_, c)| c) else {
                    continue;
                };
                for p in named_paths(comment) {
                    if !root.join(&p).exists() {
                        bad.push(format!("{}:{}: {p}", f.display(), n + 1));
                    }
                }
            }
        }
        assert!(
            bad.is_empty(),
            "comments name missing files:\n{}",
            bad.join("\n")
        );
        assert_eq!(
            named_paths(" see docs/spec.md and tests/gpu/run.sh."),
            ["docs/spec.md", "tests/gpu/run.sh"]
        );
        assert!(named_paths(" the worker's docs/ folder; a.docs/x.md").is_empty());
    }

    /// The backticked names of a table cell, with `a::{b, c}` expanded to `a::b`, `a::c`.
    fn cell_names(cell: &str) -> Vec<String> {
        let mut out = Vec::new();
        for name in cell.split('`').skip(1).step_by(2) {
            match name.split_once("::{") {
                Some((head, rest)) => out.extend(
                    rest.trim_end_matches('}')
                        .split(',')
                        .map(|t| format!("{head}::{}", t.trim())),
                ),
                None => out.push(name.to_string()),
            }
        }
        out
    }

    #[test]
    fn the_architecture_table_states_the_rules() {
        let doc = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md"),
        )
        .unwrap();
        let section = doc
            .split("## Layers (enforced)")
            .nth(1)
            .expect("docs/architecture.md has a Layers (enforced) section");
        let rows: Vec<(Vec<String>, Vec<String>)> = section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').collect();
                (cell_names(cells[1]), cell_names(cells[2]))
            })
            .collect();
        let mut doc_rules: Vec<(String, Vec<String>)> = rows
            .iter()
            .flat_map(|(ms, f)| {
                ms.iter().map(move |m| {
                    let mut f = f.clone();
                    f.sort();
                    (m.clone(), f)
                })
            })
            .collect();
        doc_rules.sort();
        let mut code_rules: Vec<(String, Vec<String>)> = RULES
            .iter()
            .flat_map(|(ms, f, _)| {
                ms.iter().map(move |m| {
                    let mut f: Vec<String> = f.concat().iter().map(|x| x.to_string()).collect();
                    f.sort();
                    (m.to_string(), f)
                })
            })
            .collect();
        code_rules.sort();
        assert_eq!(doc_rules, code_rules);
        assert_eq!(
            cell_names("`lsp`, `worker::{cuda, triton}`"),
            ["lsp", "worker::cuda", "worker::triton"]
        );
    }

    /// The names of the items `code` defines at its top level (structs, enums, traits,
    /// type aliases, functions, constants, statics), not those it re-exports.
    fn defined_items(code: &str) -> Vec<String> {
        const KINDS: &[&str] = &[
            "struct ",
            "enum ",
            "trait ",
            "type ",
            "fn ",
            "async fn ",
            "const ",
            "static ",
        ];
        let mut out = Vec::new();
        for line in code.lines() {
            // Top level only: no indentation.
            let mut rest = line;
            for vis in ["pub(crate) ", "pub(super) ", "pub "] {
                if let Some(r) = rest.strip_prefix(vis) {
                    rest = r;
                    break;
                }
            }
            let Some(after) = KINDS.iter().find_map(|k| rest.strip_prefix(k)) else {
                continue;
            };
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
        out
    }

    /// Where `path` (as `crate_paths_in` gives it) names an item of `optimize/mod.rs`.
    fn names_optimize_mod(path: &str, items: &[String]) -> bool {
        let Some(rest) = path.strip_prefix("optimize::") else {
            return false;
        };
        let first = rest.split("::").next().unwrap_or(rest);
        first == "*" || items.iter().any(|i| i == first)
    }

    #[test]
    fn optimize_mod_is_imported_by_none() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let dir = src.join("optimize");
        let mod_rs = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
        let items = defined_items(mod_rs.split("#[cfg(test)]").next().unwrap_or(""));
        assert!(items.iter().any(|i| i == "optimize"), "found {items:?}");
        let mut all = Vec::new();
        files(&dir, &mut all);
        let mut bad = Vec::new();
        for f in all.iter().filter(|f| **f != dir.join("mod.rs")) {
            let module = module_of(&src, f);
            let text = std::fs::read_to_string(f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for p in crate_paths_in(code, &module) {
                if names_optimize_mod(&p, &items) {
                    bad.push(format!(
                        "{module} uses crate::{p}, defined in optimize/mod.rs"
                    ));
                }
            }
        }
        bad.sort();
        bad.dedup();
        assert!(
            bad.is_empty(),
            "optimize/mod.rs sets a run up; its submodules must not import from it (move the item into a submodule and re-export it):\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn imports_of_optimize_mod_items_are_found() {
        let items = defined_items("pub async fn optimize() {}\npub use record::Outcome;\nstruct Held;\n    fn inner() {}\n");
        assert_eq!(items, ["optimize", "Held"]);
        let paths = crate_paths_in("use super::{Held, record::Outcome};", "optimize::history");
        assert!(
            paths.iter().any(|p| names_optimize_mod(p, &items)),
            "{paths:?}"
        );
        assert!(!paths
            .iter()
            .filter(|p| p.as_str() != "optimize::Held")
            .any(|p| names_optimize_mod(p, &items)));
        let glob = crate_paths_in("use super::*;", "optimize::step");
        assert!(
            glob.iter().any(|p| names_optimize_mod(p, &items)),
            "{glob:?}"
        );
    }

    #[test]
    fn grouped_imports_are_read() {
        assert_eq!(
            grouped_paths(
                "use crate::{lsp::frame, worker::{pool::{self, WorkerPool}, protocol::Op as P}};",
                "cli::bench"
            ),
            [
                "lsp::frame",
                "worker::pool",
                "worker::pool::WorkerPool",
                "worker::protocol::Op"
            ]
        );
        assert_eq!(
            grouped_paths(
                "use super::super::{edit, history::hash};",
                "optimize::rewrite::tree"
            ),
            ["optimize::edit", "optimize::history::hash"]
        );
        assert_eq!(
            grouped_paths("use super::{Outcome, StepRecord};", "optimize::history"),
            ["optimize::Outcome", "optimize::StepRecord"]
        );
        // Not from the crate: std and other crates' groups are not paths of ours.
        assert!(grouped_paths("use std::sync::{Arc, Mutex};", "optimize").is_empty());
        // A forbidden path in a group fails the layer like a plain one would.
        let (_, forbidden, _) = forbidden("optimize::step").unwrap();
        let paths = crate_paths_in("use crate::{cli::x, spec::EvalEnv};", "optimize::step");
        assert!(paths
            .iter()
            .any(|p| forbidden.iter().any(|f| p.starts_with(&format!("{f}::")))));
    }

    #[test]
    fn the_rules_pick_the_longest_module_and_paths_are_found() {
        assert_eq!(
            forbidden("optimize::facts::cuda").unwrap().0,
            "optimize::facts"
        );
        assert_eq!(forbidden("optimize::search").unwrap().0, "optimize");
        assert_eq!(forbidden("worker::pool").unwrap().0, "worker::pool");
        assert!(forbidden("cli::bench").is_none());
        assert_eq!(
            crate_paths_in("use super::serve::op_name;", "worker::pool"),
            ["worker::serve::op_name"]
        );
        assert_eq!(
            crate_paths_in("use super::super::edit;", "optimize::rewrite::tree"),
            ["optimize::edit"]
        );
        assert_eq!(
            crate_paths("use crate::worker::protocol::{A, B};\nlet x = crate::spec::parse(y);"),
            ["worker::protocol::", "spec::parse"].map(|s| s.trim_end_matches(':').to_string())
        );
    }
}
