//! A file's compile flags as nvcc would get them (issue #11, docs/project-setup.md):
//! quoted includes are searched in the including file's folder first; then come the
//! folders and defines of the file's entry in `compile_commands.json` (found as clangd
//! finds it: in the file's folder or a parent up to the workspace root, or their
//! `build/`), then the `cuda.includePaths` and `cuda.defines` settings.
//!
//! Also [`collect_headers`]: the project headers a source includes, read from disk, so
//! that a worker on another machine compiles with the same headers (requests carry
//! text, never paths).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a file's flags came from, and what they are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProjectFlags {
    /// In search order: the file's folder, then compile_commands.json's, then settings'.
    pub include_dirs: Vec<PathBuf>,
    pub defines: Vec<(String, String)>,
    /// `c++17` from `-std=c++17`, when the entry gives one.
    pub std: Option<String>,
    /// The compile_commands.json that gave flags, for messages and `health`.
    pub compile_commands: Option<PathBuf>,
    /// Flags of the entry that cannot be used (a define whose value has spaces).
    pub notes: Vec<String>,
    /// The entry's nvcc flags that change what its front end accepts
    /// (`--expt-relaxed-constexpr`, `--extended-lambda`, `-Xcudafe …`, `-U…`, …), for a
    /// check with nvcc ([`super::nvcc`]); NVRTC has no use for them.
    pub nvcc_flags: Vec<String>,
}

/// The flags of `file`. `root` bounds the search for compile_commands.json (the
/// workspace root; None: the file's folder and its parents). `setting_dirs` relative to
/// `root`; `setting_defines` as `NAME` or `NAME=VALUE`.
pub fn flags_for(
    file: &Path,
    root: Option<&Path>,
    setting_dirs: &[PathBuf],
    setting_defines: &[String],
) -> ProjectFlags {
    let mut flags = ProjectFlags::default();
    let file = absolute(file);
    if let Some(dir) = file.parent() {
        flags.include_dirs.push(dir.to_path_buf());
    }
    if let Some(db) = find_compile_commands(&file, root) {
        if let Some(entry) = entry_for(&db, &file) {
            apply_entry(&mut flags, &entry);
        }
        flags.compile_commands = Some(db);
    }
    for d in setting_dirs {
        let d = match root {
            Some(r) if d.is_relative() => r.join(d),
            _ => d.clone(),
        };
        if !flags.include_dirs.contains(&d) {
            flags.include_dirs.push(d);
        }
    }
    for d in setting_defines {
        push_define(&mut flags, d);
    }
    flags
}

/// The workspace root of a file: the nearest folder above it with a `.git`, else its
/// own folder.
pub fn workspace_root(file: &Path) -> PathBuf {
    let dir = file
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    let abs = dir.canonicalize().unwrap_or(dir.clone());
    abs.ancestors()
        .find(|a| a.join(".git").exists())
        .map_or(abs.clone(), Path::to_path_buf)
}

/// [`flags_for`] with the file's workspace root and the `cuda` settings.
pub fn flags_for_file(
    file: &Path,
    settings_dirs: &[PathBuf],
    settings_defines: &[String],
) -> ProjectFlags {
    let root = workspace_root(file);
    flags_for(file, Some(&root), settings_dirs, settings_defines)
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| p.to_path_buf(), |c| c.join(p))
    }
}

/// compile_commands.json in the file's folder or a parent (up to `root`), or in their
/// `build/` folder.
pub fn find_compile_commands(file: &Path, root: Option<&Path>) -> Option<PathBuf> {
    let mut dir = file.parent();
    while let Some(d) = dir {
        for cand in [
            d.join("compile_commands.json"),
            d.join("build").join("compile_commands.json"),
        ] {
            if cand.is_file() {
                return Some(cand);
            }
        }
        if root.is_some_and(|r| d == r) {
            break;
        }
        dir = d.parent();
    }
    None
}

/// One entry's arguments and folder.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub directory: PathBuf,
    pub arguments: Vec<String>,
}

/// The entry for `file` in the database: its own, else one in the same folder (as
/// clangd infers flags for headers and new files), else none.
pub fn entry_for(db: &Path, file: &Path) -> Option<Entry> {
    let text = std::fs::read_to_string(db).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let entries = v.as_array()?;
    let mut same_dir = None;
    for e in entries {
        let directory = PathBuf::from(e["directory"].as_str().unwrap_or("."));
        let Some(f) = e["file"].as_str() else {
            continue;
        };
        let f = directory.join(f);
        let arguments: Vec<String> = match (e["arguments"].as_array(), e["command"].as_str()) {
            (Some(a), _) => a
                .iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect(),
            (None, Some(c)) => split_command(c),
            _ => continue,
        };
        let entry = Entry {
            directory,
            arguments,
        };
        if normalize(&f) == normalize(file) {
            return Some(entry);
        }
        if same_dir.is_none() && normalize(&f).parent() == normalize(file).parent() {
            same_dir = Some(entry);
        }
    }
    same_dir
}

/// `a/./b/../c` → `a/c`, without touching the disk.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// A shell command line split into words (quotes and backslashes as a POSIX shell reads
/// them; no expansions).
pub fn split_command(c: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut have = false;
    let mut chars = c.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(ch) = chars.next() {
        match (quote, ch) {
            (None, ' ' | '\t' | '\n') => {
                if have {
                    out.push(std::mem::take(&mut cur));
                    have = false;
                }
            }
            (None, '\'' | '"') => {
                quote = Some(ch);
                have = true;
            }
            (Some(q), c2) if c2 == q => quote = None,
            (Some('\''), c2) => cur.push(c2),
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    have = true;
                }
            }
            (_, c2) => {
                cur.push(c2);
                have = true;
            }
        }
    }
    if have {
        out.push(cur);
    }
    out
}

fn apply_entry(flags: &mut ProjectFlags, e: &Entry) {
    let dir = |p: &str| {
        let p = PathBuf::from(p);
        if p.is_relative() {
            e.directory.join(p)
        } else {
            p
        }
    };
    let mut it = e.arguments.iter().peekable();
    while let Some(a) = it.next() {
        let a = a.as_str();
        let mut take = |flag: &str| -> Option<String> {
            if a == flag {
                it.next().cloned()
            } else {
                a.strip_prefix(flag)
                    .map(|v| v.trim_start_matches('=').to_string())
            }
        };
        if let Some(v) = take("-isystem")
            .or_else(|| take("--include-path"))
            .or_else(|| take("-I"))
        {
            let d = dir(&v);
            if !flags.include_dirs.contains(&d) {
                flags.include_dirs.push(d);
            }
        } else if let Some(v) = take("--define-macro").or_else(|| take("-D")) {
            push_define(flags, &v);
        } else if let Some(v) = a.strip_prefix("-std=").or_else(|| a.strip_prefix("--std=")) {
            flags.std = Some(v.to_string());
        } else if let Some(n) = nvcc_flag_arity(a) {
            flags.nvcc_flags.push(a.to_string());
            for _ in 0..n {
                if let Some(v) = it.next() {
                    flags.nvcc_flags.push(v.clone());
                }
            }
        }
    }
}

/// Whether `a` is an nvcc flag that changes what the front end accepts (kept for a check
/// with nvcc), and how many arguments follow it. Output, optimisation and code-generation
/// flags are left out: the check chooses its own.
fn nvcc_flag_arity(a: &str) -> Option<usize> {
    let bare = a.trim_start_matches('-');
    let name = bare.split('=').next().unwrap_or(bare);
    match name {
        "expt-relaxed-constexpr"
        | "expt-extended-lambda"
        | "extended-lambda"
        | "use_fast_math"
        | "use-fast-math"
        | "relocatable-device-code"
        | "rdc"
        | "allow-unsupported-compiler"
        | "diag-suppress"
        | "Werror"
        | "w"
        | "Wno-deprecated-gpu-targets"
        | "Wno-deprecated-declarations"
        | "ftz"
        | "prec-div"
        | "prec-sqrt"
        | "fmad"
        | "restrict"
        | "default-stream"
        | "static-global-template-stub" => Some(0),
        "Xcudafe" | "Xcompiler" | "include" | "ccbin" | "compiler-bindir" if !a.contains('=') => {
            Some(1)
        }
        "Xcudafe" | "Xcompiler" | "ccbin" | "compiler-bindir" => Some(0),
        _ if a.starts_with("-U") && a.len() > 2 => Some(0),
        _ => None,
    }
}

fn push_define(flags: &mut ProjectFlags, d: &str) {
    let (name, value) = d.split_once('=').unwrap_or((d, ""));
    if name.is_empty() {
        return;
    }
    if value.chars().any(char::is_whitespace) {
        flags.notes.push(format!(
            "define `{d}` left out: NVRTC takes each define as one option, without spaces"
        ));
        return;
    }
    flags.defines.retain(|(n, _)| n != name);
    flags.defines.push((name.to_string(), value.to_string()));
}

/// Headers a source includes that live in the project (not in `system_dirs`), read
/// from disk, transitively: `(name as written in the #include, transform(contents))`.
/// Quoted includes are searched in the including file's folder, then in
/// `include_dirs`; angle includes only in `include_dirs`. At most `budget` bytes in all.
/// `transform` sees the header's own text (the analysis layer blanks its host code, as
/// for the file itself).
pub fn collect_headers(
    source: &str,
    file_dir: &Path,
    include_dirs: &[PathBuf],
    system_dirs: &[PathBuf],
    budget: usize,
    transform: &dyn Fn(&str) -> String,
) -> Vec<(String, String)> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    // One file reached under two names (`"qualifier.hpp"` from its folder,
    // `"detail/qualifier.hpp"` from above): the second name includes the first, so
    // `#pragma once` sees one header and its types are declared once.
    let mut by_path: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut used = 0usize;
    let mut queue: Vec<((String, bool), PathBuf)> = includes(source)
        .into_iter()
        .map(|i| (i, file_dir.to_path_buf()))
        .collect();
    while let Some(((name, quoted), from)) = queue.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let mut cands: Vec<PathBuf> = Vec::new();
        if quoted {
            cands.push(from.join(&name));
        }
        cands.extend(include_dirs.iter().map(|d| d.join(&name)));
        let Some(path) = cands.into_iter().find(|p| p.is_file()) else {
            continue;
        };
        if system_dirs.iter().any(|s| path.starts_with(s)) {
            continue;
        }
        let canonical = path.canonicalize().unwrap_or_else(|_| path.clone());
        if let Some(first) = by_path.get(&canonical) {
            out.insert(name, format!("#include \"{first}\"\n"));
            continue;
        }
        by_path.insert(canonical, name.clone());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if used + text.len() > budget {
            break;
        }
        used += text.len();
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for inc in includes(&text) {
            queue.push((inc, dir.clone()));
        }
        out.insert(name, transform(&text));
    }
    out.into_iter().collect()
}

/// `(name, quoted)` of every `#include` line.
fn includes(source: &str) -> Vec<(String, bool)> {
    source
        .lines()
        .filter_map(|l| {
            let t = l.trim_start().strip_prefix('#')?.trim_start();
            let rest = t.strip_prefix("include")?.trim_start();
            if let Some(r) = rest.strip_prefix('"') {
                return Some((r.split('"').next()?.to_string(), true));
            }
            let r = rest.strip_prefix('<')?;
            Some((r.split('>').next()?.to_string(), false))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("klsp-project-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn commands_split_as_a_shell_reads_them() {
        assert_eq!(
            split_command(r#"nvcc -I"my dir" -DX='a b' -DY=1 src\ file.cu"#),
            ["nvcc", "-Imy dir", "-DX=a b", "-DY=1", "src file.cu"]
        );
    }

    #[test]
    fn the_files_folder_then_compile_commands_then_settings() {
        let root = tmp("cc");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        let file = root.join("src/kern.cu");
        std::fs::write(&file, "").unwrap();
        let db = format!(
            r#"[{{"directory": "{b}", "file": "../src/kern.cu", "command": "nvcc -I../include -isystem /opt/x -DUSE_FAST -DBLOCK=256 -DMSG='two words' -std=c++20 -c ../src/kern.cu"}},
                {{"directory": "{b}", "file": "../src/other.cu", "arguments": ["nvcc", "-I", "../other", "-c", "../src/other.cu"]}}]"#,
            b = root.join("build").display()
        );
        std::fs::write(root.join("build/compile_commands.json"), db).unwrap();
        let f = flags_for(
            &file,
            Some(&root),
            &[PathBuf::from("third_party")],
            &["EXTRA=1".into()],
        );
        assert_eq!(
            f.include_dirs,
            [
                root.join("src"),
                root.join("build/../include"),
                PathBuf::from("/opt/x"),
                root.join("third_party")
            ]
        );
        assert_eq!(
            f.defines,
            [
                ("USE_FAST".to_string(), String::new()),
                ("BLOCK".into(), "256".into()),
                ("EXTRA".into(), "1".into())
            ]
        );
        assert_eq!(f.std.as_deref(), Some("c++20"));
        assert_eq!(
            f.compile_commands,
            Some(root.join("build/compile_commands.json"))
        );
        assert_eq!(f.notes.len(), 1, "{:?}", f.notes);
        // A file with no entry of its own takes one from its folder.
        let new = root.join("src/new.cu");
        let g = flags_for(&new, Some(&root), &[], &[]);
        assert!(
            g.include_dirs.contains(&root.join("build/../include")),
            "{:?}",
            g.include_dirs
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn project_headers_are_collected_transitively_and_system_ones_are_not() {
        let root = tmp("hdr");
        std::fs::create_dir_all(root.join("inc/util")).unwrap();
        std::fs::create_dir_all(root.join("sys")).unwrap();
        std::fs::write(
            root.join("common.h"),
            "#include \"util/math.h\"\n#define A 1\n",
        )
        .unwrap();
        std::fs::write(
            root.join("inc/util/math.h"),
            "#pragma once\n#include <sys.h>\n",
        )
        .unwrap();
        std::fs::write(root.join("sys/sys.h"), "// toolkit\n").unwrap();
        let src = "#include \"common.h\"\n#include <cuda_fp16.h>\n#include \"missing.h\"\n";
        let hs = collect_headers(
            src,
            &root,
            &[root.join("inc"), root.join("sys")],
            &[root.join("sys")],
            1 << 20,
            &|t: &str| t.to_uppercase(),
        );
        let names: Vec<&str> = hs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["common.h", "util/math.h"]);
        assert!(hs[0].1.contains("#DEFINE A 1"), "{:?}", hs[0]);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Issue #31: glm includes `detail/qualifier.hpp` from its top folder and
    /// `qualifier.hpp` from `detail/`; NVRTC gets both names, the second as an include of
    /// the first, so the header's types are declared once.
    #[test]
    fn one_header_under_two_names_is_read_once() {
        let root = tmp("hdr-twice");
        std::fs::create_dir_all(root.join("lib/detail")).unwrap();
        std::fs::write(
            root.join("lib/all.h"),
            "#include \"detail/q.h\"\n#include \"detail/v.h\"\n",
        )
        .unwrap();
        std::fs::write(root.join("lib/detail/q.h"), "#pragma once\nenum Q { A };\n").unwrap();
        std::fs::write(
            root.join("lib/detail/v.h"),
            "#pragma once\n#include \"q.h\"\n",
        )
        .unwrap();
        let hs = collect_headers(
            "#include <all.h>\n",
            &root,
            &[root.join("lib")],
            &[],
            1 << 20,
            &|t: &str| t.to_string(),
        );
        let get = |n: &str| {
            hs.iter()
                .find(|(name, _)| name == n)
                .map(|(_, t)| t.as_str())
        };
        // Whichever name was read first holds the text; the other includes it.
        let (a, b) = (get("detail/q.h"), get("q.h"));
        let text = Some("#pragma once\nenum Q { A };\n");
        assert!(
            (a == text && b == Some("#include \"detail/q.h\"\n"))
                || (b == text && a == Some("#include \"q.h\"\n")),
            "{hs:?}"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
