//! The NVRTC check of a file whose device slice, or whose project headers' slices, still
//! hold host code the slice rules did not catch: a struct with a `std::vector` or
//! `std::string` member, `typedef pthread_t Thread;`, a `const` table of host function
//! pointers. nvcc compiles them (it has the host's headers); NVRTC stops there, and the
//! file used to get the "not checked" note, or errors that are not the author's.
//!
//! [`check`] compiles, then blanks the items NVRTC reported errors in that are not
//! device code (`syntax::header_items`) and compiles again, at most [`ROUNDS`] times.
//! In a header, an error in device code, in a system header or where no item is found
//! stops it (the caller's "not checked" note stands); in the file itself such an error
//! is the author's and stays. What the blanks cause (`identifier "Params" is
//! undefined`, where a kernel names a blanked type) is dropped by [`drop_caused`]; the
//! other errors are the file's own. Host items hold no device code, so NVRTC checks the
//! same device side as before. The blanks learned for a header's text are remembered
//! for the process, so an editor's next check compiles once for them.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

use crate::syntax::header_items::{item_at_line, HeaderItem};
use crate::toolchain::{self, CheckResult, MessageSeverity};

/// Compiles after blanking, at most this many times.
const ROUNDS: usize = 4;

/// `(include name, device slice)` of each project header.
type Headers = Vec<(String, String)>;

/// Where an item to blank is: the file's own slice or a header (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Source,
    Header(usize),
}

/// Compiles `source` (the file's device slice) with `headers` through `compile`,
/// blanking host items NVRTC stops at (see the module doc). Returns the last result and
/// the names the blanked items declared.
pub(super) fn check(
    mut compile: impl FnMut(&str, &[(String, String)]) -> CheckResult,
    mut source: String,
    mut headers: Headers,
) -> (CheckResult, Vec<String>) {
    let originals: Vec<String> = headers.iter().map(|(_, t)| t.clone()).collect();
    let mut names = Vec::new();
    for (name, text) in headers.iter_mut() {
        for item in learned(name, text) {
            blank(text, &item.range);
            names.extend(item.names);
        }
    }
    let mut result = compile(&source, &headers);
    for _ in 0..ROUNDS {
        let items = failing_items(&result, &source, &headers);
        if items.is_empty() {
            break;
        }
        for (place, item) in items {
            match place {
                Place::Source => blank(&mut source, &item.range),
                Place::Header(i) => {
                    let (name, text) = &mut headers[i];
                    remember(name, &originals[i], &item);
                    blank(text, &item.range);
                }
            }
            names.extend(item.names);
        }
        result = compile(&source, &headers);
    }
    (result, names)
}

/// The host items holding the errors of `result`, where they are; empty when there is
/// none, or when a header's error is not in one (its note then stands).
fn failing_items(
    result: &CheckResult,
    source: &str,
    headers: &Headers,
) -> Vec<(Place, HeaderItem)> {
    let mut items: Vec<(Place, HeaderItem)> = Vec::new();
    for m in result
        .messages
        .iter()
        .filter(|m| m.severity == MessageSeverity::Error)
    {
        let found = match &m.header {
            Some(file) => {
                let at = header_index(headers, file).and_then(|i| {
                    let line = toolchain::header_line(m)? as usize;
                    Some((Place::Header(i), item_at_line(&headers[i].1, line)?))
                });
                match at {
                    Some((Place::Header(i), item)) if blankable(&headers[i].1, &item) => {
                        (Place::Header(i), item)
                    }
                    _ => return Vec::new(),
                }
            }
            None => match item_at_line(source, m.line as usize) {
                Some(item) if blankable(source, &item) => (Place::Source, item),
                _ => continue,
            },
        };
        if !items
            .iter()
            .any(|(p, x)| *p == found.0 && x.range == found.1.range)
        {
            items.push(found);
        }
    }
    items
}

/// Host code whose blank leaves whole statements: it ends in `;` or `}`, and each
/// conditional group it opens it also closes.
fn blankable(text: &str, item: &HeaderItem) -> bool {
    let Some(t) = text.get(item.range.clone()) else {
        return false;
    };
    let mut depth = 0i32;
    for l in t.lines() {
        let d = l
            .trim_start()
            .strip_prefix('#')
            .map(str::trim_start)
            .unwrap_or("");
        if d.starts_with("if") {
            depth += 1;
        } else if d.starts_with("endif") {
            depth -= 1;
            if depth < 0 {
                return false;
            }
        }
    }
    !item.device && depth == 0 && t.trim_end().ends_with([';', '}'])
}

/// The header NVRTC names `file`: the include name, maybe with a folder before or after.
/// A header reached under a second name is a one-line `#include` of the first
/// (`toolchain::project::collect_headers`): that one is meant.
fn header_index(headers: &Headers, file: &str) -> Option<usize> {
    let i = headers.iter().position(|(n, _)| {
        n == file || n.ends_with(&format!("/{file}")) || file.ends_with(&format!("/{n}"))
    })?;
    let first = headers[i]
        .1
        .trim()
        .strip_prefix("#include \"")
        .and_then(|r| r.strip_suffix('"'))
        .filter(|n| !n.contains('\n'));
    match first {
        Some(name) => headers.iter().position(|(n, _)| n == name).or(Some(i)),
        None => Some(i),
    }
}

/// Spaces over `range` (newlines kept), so the header's lines stay where they were.
fn blank(text: &mut String, range: &std::ops::Range<usize>) {
    let mut bytes = std::mem::take(text).into_bytes();
    let end = range.end.min(bytes.len());
    for b in &mut bytes[range.start.min(end)..end] {
        if *b != b'\n' && *b != b'\r' {
            *b = b' ';
        }
    }
    *text = String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
}

/// Errors in the file itself that name what a blank took away are the blank's, not the
/// author's: dropped. Other messages stay.
pub(super) fn drop_caused(result: &mut CheckResult, names: &[String]) {
    if names.is_empty() {
        return;
    }
    result.messages.retain(|m| {
        m.severity != MessageSeverity::Error
            || m.header.is_some()
            || !m
                .message
                .split('"')
                .skip(1)
                .step_by(2)
                .any(|quoted| names.iter().any(|n| quoted_names(quoted, n)))
    });
}

/// Device code that names a library whose include the slice blanked
/// (`thrust::count_if(thrust::device, ...)` in a kernel, with `#include
/// <thrust/count.h>`, a header NVRTC cannot compile): NVRTC says `name followed by "::"
/// must be a class or namespace name` there, which is not the author's error. Those
/// errors (their span is the library's folder name) become one note on the first.
/// `text` is the author's, `slice` the device slice NVRTC compiled (same lines).
pub(super) fn note_blanked_libraries(result: &mut CheckResult, text: &str, slice: &str) {
    let slice_lines: Vec<&str> = slice.split('\n').collect();
    let roots: Vec<&str> = text
        .split('\n')
        .zip(&slice_lines)
        .filter(|(_, s)| s.trim().is_empty())
        .filter_map(|(l, _)| {
            let t = l.trim_start().strip_prefix('#')?.trim_start();
            let name = t.strip_prefix("include")?.trim_start().strip_prefix('<')?;
            let (root, _) = name.split_once('/')?;
            Some(root.trim())
        })
        .collect();
    if roots.is_empty() {
        return;
    }
    let token = |m: &toolchain::CompilerMessage| {
        slice_lines
            .get(m.line as usize)
            .and_then(|l| l.get(m.col_start as usize..m.col_end as usize))
            .unwrap_or("")
    };
    let mut first: Option<(toolchain::CompilerMessage, String)> = None;
    result.messages.retain(|m| {
        let t = token(m);
        let hit = m.severity == MessageSeverity::Error && m.header.is_none() && roots.contains(&t);
        if hit && first.is_none() {
            first = Some((m.clone(), t.to_string()));
        }
        !hit
    });
    if let Some((mut note, lib)) = first {
        note.severity = MessageSeverity::Note;
        note.message = format!(
            "`{lib}` is a host library to NVRTC (its headers are not compiled here), so device code that uses it is not checked; nvcc checks it (docs/project-setup.md)"
        );
        result.messages.push(note);
        result.messages.sort_by_key(|m| (m.line, m.col_start));
    }
}

/// Whether a quoted name in a message (`"Params"`, `"ns::Params"`, `"Params<float>"`)
/// is `name`.
fn quoted_names(quoted: &str, name: &str) -> bool {
    let base = quoted.split('<').next().unwrap_or(quoted).trim();
    base == name || base.rsplit("::").next() == Some(name)
}

type Learned = HashMap<u64, Vec<HeaderItem>>;

fn store() -> &'static Mutex<Learned> {
    static STORE: OnceLock<Mutex<Learned>> = OnceLock::new();
    STORE.get_or_init(Default::default)
}

fn key(name: &str, text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (name, text).hash(&mut h);
    h.finish()
}

/// The items blanked before in a header with exactly this name and text.
fn learned(name: &str, text: &str) -> Vec<HeaderItem> {
    store()
        .lock()
        .ok()
        .and_then(|s| s.get(&key(name, text)).cloned())
        .unwrap_or_default()
}

/// Remembers `item` for the header's text before the blank (the text a later check
/// starts from). Bounded: past 512 headers the store starts over.
fn remember(name: &str, text: &str, item: &HeaderItem) {
    let Ok(mut s) = store().lock() else {
        return;
    };
    if s.len() > 512 {
        s.clear();
    }
    s.entry(key(name, text)).or_default().push(item.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::CompilerMessage;

    fn error(header: Option<&str>, line: u32, text: &str) -> CompilerMessage {
        CompilerMessage {
            line: if header.is_some() { 0 } else { line },
            col_start: 0,
            col_end: 1,
            severity: MessageSeverity::Error,
            message: match header {
                Some(h) => format!("{h}({}): {text}", line + 1),
                None => text.to_string(),
            },
            header: header.map(String::from),
        }
    }

    /// NVRTC as far as these tests need it: an error on each line naming a host library
    /// type, in the file and its headers; `"State" is undefined` where a kernel uses it
    /// and no header declares it; the file's own error on a `typo` line.
    fn fake_nvrtc(source: &str, headers: &[(String, String)]) -> CheckResult {
        let host = |l: &str| l.contains("std::vector") || l.contains("pthread_t");
        let mut messages = Vec::new();
        for (name, text) in headers {
            for (i, _) in text.lines().enumerate().filter(|(_, l)| host(l)) {
                messages.push(error(Some(name), i as u32, "qualified name is not allowed"));
            }
        }
        for (i, l) in source.lines().enumerate() {
            if host(l) {
                messages.push(error(None, i as u32, "qualified name is not allowed"));
            }
            if l.contains("State s;") && !headers.iter().any(|(_, t)| t.contains("struct State")) {
                messages.push(error(None, i as u32, "identifier \"State\" is undefined"));
            }
            if l.contains("typo") {
                messages.push(error(None, i as u32, "identifier \"typo\" is undefined"));
            }
        }
        CheckResult {
            messages,
            ..CheckResult::default()
        }
    }

    const SOURCE: &str = "#include \"util/common.h\"\nstruct HostOnly {\n  std::vector<float> buf;\n};\n__global__ void k(int* p) {\n  State s;\n  p[0] = typo;\n}\n";

    fn shown(r: &CheckResult) -> Vec<String> {
        r.messages
            .iter()
            .map(|m| format!("{}: {}", m.line + 1, m.message))
            .collect()
    }

    #[test]
    fn host_items_are_blanked_and_what_they_cause_is_dropped() {
        let header = "#pragma once\ntypedef pthread_t Thread;\nstruct State {\n  std::vector<int> v;\n  int n;\n};\n__device__ inline int twice(int x) { return 2 * x; }\n";
        let headers = vec![("util/common.h".to_string(), header.to_string())];
        let mut calls = 0;
        let compile = |s: &str, hs: &[(String, String)]| {
            calls += 1;
            fake_nvrtc(s, hs)
        };
        let (mut result, names) = check(compile, SOURCE.to_string(), headers.clone());
        assert_eq!(calls, 2, "one compile, one after the blanks");
        assert_eq!(names, ["Thread", "State", "HostOnly"]);
        drop_caused(&mut result, &names);
        // The kernel's own error stays; the one the blank of `State` caused goes.
        assert_eq!(shown(&result), ["7: identifier \"typo\" is undefined"]);
        // The next check of the same header text starts from its learned blanks (the
        // file's own host items are found again).
        let mut again = 0;
        let compile = |s: &str, hs: &[(String, String)]| {
            again += 1;
            fake_nvrtc(s, hs)
        };
        let (result, _) = check(compile, SOURCE.to_string(), headers);
        assert_eq!(again, 2);
        assert!(result.messages.iter().all(|m| m.header.is_none()));
    }

    #[test]
    fn an_error_in_a_header_s_device_code_or_a_system_header_stops_the_retries() {
        let device = "template <typename T> struct Acc {\n  __device__ T get(std::vector<T>& v) { return v[0]; }\n};\n";
        let (result, names) = check(
            fake_nvrtc,
            "int x;\n".to_string(),
            vec![("acc.cuh".into(), device.into())],
        );
        assert!(names.is_empty());
        assert!(result.messages.iter().any(|m| m.header.is_some()));
        let mut r = fake_nvrtc("", &[]);
        r.messages
            .push(error(Some("/usr/include/thrust/pointer.h"), 3, "x"));
        let hs = vec![("acc.cuh".to_string(), String::new())];
        assert!(failing_items(&r, "", &hs).is_empty());
    }

    #[test]
    fn errors_in_the_file_s_device_code_are_never_blanked() {
        let src = "__global__ void k(std::vector<int>* v) {}\n";
        let (result, names) = check(fake_nvrtc, src.to_string(), Vec::new());
        assert!(names.is_empty());
        assert_eq!(shown(&result), ["1: qualified name is not allowed"]);
    }

    #[test]
    fn a_header_reached_under_two_names_is_found_by_either() {
        let hs: Headers = vec![
            (
                "ggml-cuda/common.cuh".into(),
                "#include \"common.cuh\"\n".into(),
            ),
            ("common.cuh".into(), "struct A {};\n".into()),
            ("vendors/cuda.h".into(), String::new()),
        ];
        assert_eq!(header_index(&hs, "ggml-cuda/common.cuh"), Some(1));
        assert_eq!(header_index(&hs, "common.cuh"), Some(1));
        assert_eq!(header_index(&hs, "/src/vendors/cuda.h"), Some(2));
        assert_eq!(header_index(&hs, "other.h"), None);
    }

    #[test]
    fn half_a_conditional_group_is_never_blanked() {
        let item = |range| HeaderItem {
            range,
            device: false,
            names: Vec::new(),
        };
        let text =
            "struct A {\n#if X\n  int a;\n#endif\n};\nstruct B {\n#if Y\n  int b;\n};\n#endif\n";
        assert!(blankable(text, &item(0..text.find("\nstruct B").unwrap())));
        let b = text.find("struct B").unwrap();
        assert!(!blankable(
            text,
            &item(b..text.find("};\n#endif").unwrap() + 2)
        ));
        assert!(!blankable(text, &item(0..8)), "not a whole statement");
    }

    #[test]
    fn device_uses_of_a_blanked_library_become_one_note() {
        let text = "#include <thrust/count.h>\n__global__ void k(int* c, char* t) {\n  *c = thrust::count_if(thrust::device, t, t + 4, 1);\n  *c += typo;\n}\n";
        let slice = text.replacen("#include <thrust/count.h>", "                         ", 1);
        let at = |col: u32, len: u32, msg: &str| CompilerMessage {
            line: 2,
            col_start: col,
            col_end: col + len,
            severity: MessageSeverity::Error,
            message: msg.to_string(),
            header: None,
        };
        let mut r = CheckResult {
            messages: vec![
                at(
                    7,
                    6,
                    "name followed by \"::\" must be a class or namespace name",
                ),
                at(
                    24,
                    6,
                    "name followed by \"::\" must be a class or namespace name",
                ),
                error(None, 3, "identifier \"typo\" is undefined"),
            ],
            ..CheckResult::default()
        };
        note_blanked_libraries(&mut r, text, &slice);
        let shown: Vec<String> = r
            .messages
            .iter()
            .map(|m| format!("{}:{:?}: {}", m.line + 1, m.severity, m.message))
            .collect();
        assert_eq!(shown.len(), 2, "{shown:#?}");
        assert!(
            shown[0].starts_with("3:Note: `thrust` is a host library to NVRTC"),
            "{shown:#?}"
        );
        assert_eq!(shown[1], "4:Error: identifier \"typo\" is undefined");
    }

    #[test]
    fn quoted_names_match_qualified_and_template_spellings() {
        assert!(quoted_names("ns::State", "State"));
        assert!(quoted_names("State<float>", "State"));
        assert!(!quoted_names("StateX", "State"));
    }
}
