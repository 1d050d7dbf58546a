//! What tree-sitter-cuda cannot parse, hidden from it (issue #11, docs/compat.md,
//! "Known grammar gaps"). The parser reads the text with these regions overwritten by
//! spaces (newlines kept, byte length unchanged), so every range in the tree is still a
//! range of the author's text; analyses read the author's text through those ranges.
//!
//! - `__align__(N)` and `__builtin_align__(N)` (`struct __align__(8) Pair { ... }`, `__shared__ __align__(16) float
//!   t[32];`), and `__cluster_dims__(X, Y, Z)` before a kernel's name: the attribute is
//!   hidden.
//! - Conditional groups (`#if`/`#ifdef`/`#ifndef` ... `#endif`) inside a function body:
//!   the directive lines and every branch but the first are hidden, so an `#if` around
//!   the head of an `if` parses as one statement. (`#if 0` keeps its `#else` branch.)
//! - Other directives inside a function body (`#pragma unroll` between a `for (...)` and
//!   its unbraced body, `#define`) are hidden when they stand in the middle of a
//!   statement; between statements they parse, and stay visible (the unroll facts read
//!   `#pragma unroll` there).
//!
//! - Calling-convention macros (`void CUDART_CB callback(...)`, `CUresult CUDAAPI
//!   f(...)`; [`scan::CALLING_CONVENTIONS`]) are hidden wherever they stand.
//!
//! Top-level directives are left alone: the grammar parses them.
//!
//! Python: runs of many comment lines (`py_comments`) are hidden; the grammar's scanner
//! costs the square of a run's length. Pure.
//!
//! One file per concern: [`scan`] (the line-by-line scan of CUDA text, [`mask_ranges`]),
//! [`directives`] (conditional groups and lines), [`macros`] (macro invocations as
//! statements and file-scope items), [`expressions`] (`= {}`, `typename`, `typeid`),
//! [`linkage`] (split `extern "C"` groups), [`python`] (Triton text) and [`lex`] (the
//! words and brackets they share); this file joins them ([`masked`]).

use super::{ByteRange, Lang};

mod directives;
mod expressions;
mod lex;
mod linkage;
mod macros;
mod python;
mod scan;
#[cfg(test)]
mod tests;

pub(crate) use lex::close_bracket;
pub use scan::mask_ranges;

use expressions::{empty_brace_defaults, expression_typenames, typeid_types};
use linkage::split_linkage_groups;
use python::starred_returns;

/// The text the parser should read, or None when nothing needs hiding.
pub fn masked(lang: Lang, text: &str) -> Option<String> {
    let normal = normalized(text);
    let base = normal.as_deref().unwrap_or(text);
    let (ranges, renames) = match lang {
        Lang::Cuda => {
            // The linkage groups' braces are no braces to the other scans either.
            let linkage = split_linkage_groups(base);
            let unlinked = blanked(base, &linkage);
            let mut hide = mask_ranges(&unlinked);
            hide.extend(linkage);
            hide.extend(super::qualifiers::head_macro_ranges(base));
            hide.extend(expression_typenames(base));
            let mut renames = typeid_types(base);
            let (braces, inside) = empty_brace_defaults(base);
            renames.extend(braces);
            hide.extend(inside);
            (hide, renames)
        }
        Lang::Triton => {
            let mut hide = super::py_comments::comment_runs(base, super::py_comments::HIDDEN_RUN);
            hide.extend(starred_returns(base));
            hide.sort_by_key(|r| r.start);
            (hide, Vec::new())
        }
    };
    if ranges.is_empty() && renames.is_empty() {
        return normal;
    }
    let mut bytes = base.as_bytes().to_vec();
    for r in ranges {
        for b in &mut bytes[r] {
            if *b != b'\n' && *b != b'\r' {
                *b = b' ';
            }
        }
    }
    for r in renames {
        for b in &mut bytes[r] {
            *b = b'_';
        }
    }
    // Whole lines and ASCII-delimited attributes are replaced, so no character is cut.
    String::from_utf8(bytes).ok()
}

/// The text as the parsers should read it, when it differs, with every byte offset kept:
/// a UTF-8 byte-order mark at the start becomes three spaces (tree-sitter would take it
/// for code and hide a first `@bench` line), and a lone `\r` line ending (old Mac style)
/// becomes `\n` (the grammars end a `//` comment at `\n` only, so a CR-only file was one
/// long comment with no kernel). The document keeps its text; its line index (`\n`,
/// `\r\n` and a lone `\r`) already counts lines the same way; `check` and the server share
/// this through `parse_text` and `Document`.
pub fn normalized(text: &str) -> Option<String> {
    let bom = text.starts_with('\u{feff}');
    let bytes = text.as_bytes();
    let lone_cr = bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\r' && bytes.get(i + 1) != Some(&b'\n'));
    if !bom && !lone_cr {
        return None;
    }
    let mut out = bytes.to_vec();
    if bom {
        out[..3].copy_from_slice(b"   ");
    }
    if lone_cr {
        for i in 0..out.len() {
            if out[i] == b'\r' && out.get(i + 1) != Some(&b'\n') {
                out[i] = b'\n';
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `text` with `ranges` overwritten by spaces (newlines kept).
fn blanked<'t>(text: &'t str, ranges: &[ByteRange]) -> std::borrow::Cow<'t, str> {
    if ranges.is_empty() {
        return text.into();
    }
    let mut b = text.as_bytes().to_vec();
    for r in ranges {
        for c in &mut b[r.clone()] {
            if *c != b'\n' && *c != b'\r' {
                *c = b' ';
            }
        }
    }
    String::from_utf8(b).map_or(text.into(), Into::into)
}

/// C++ text with its comments and the insides of its string and character literals
/// overwritten by spaces (newlines kept), for scans that must read code only.
pub fn code_only(text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    b[i] = b' ';
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                for c in &mut b[i..end] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = end;
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q && b[i] != b'\n' {
                    let step = if b[i] == b'\\' { 2 } else { 1 };
                    for c in b.iter_mut().skip(i).take(step) {
                        if *c != b'\n' {
                            *c = b' ';
                        }
                    }
                    i += step;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    // Whole comments and literal insides were replaced, every byte of a multi-byte
    // character with it, so the text stays UTF-8.
    String::from_utf8(b).unwrap_or_default()
}
