//! The layering rules of `docs/architecture.md`, checked on the source (issue #16, in the
//! manner of rust-analyzer's tidy tests): which module may name which. A `crate::...`
//! path in a module's code (tests after its first `#[cfg(test)]` excepted, and
//! `tests.rs` files) that its layer may not use fails `layers_hold`.

/// The base every layer may use and that uses nothing above it.
const ABOVE_THE_BASE: &[&str] = &["analysis", "optimize", "worker", "lsp", "cli", "toolchain"];
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
        &[&["analysis", "optimize", "worker", "lsp", "cli"]],
        "toolchain finds and runs CPU-side tools; it knows no engine above it",
    ),
    (
        &["analysis"],
        &[&["optimize", "worker", "lsp", "cli"]],
        "analysis is the engine both front-ends share; it runs no kernel",
    ),
    (
        &["optimize"],
        &[&["lsp", "cli"], WORKER_INSIDE],
        "the optimizer talks to GPUs only through WorkerPool and the protocol",
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
        let path = path.trim_end_matches(':');
        if before_ok && !path.is_empty() {
            parent.push(path);
            out.push(parent.join("::"));
        }
        from = at + "super::".len();
    }
    out
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
