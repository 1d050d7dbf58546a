//! Turning an NVRTC program log into messages at the author's lines and byte columns.
//!
//! Pure: log text and the compiled source in, [`CompilerMessage`]s out. It knows the
//! EDG front end's log shape that NVRTC prints (see the fixtures in the tests, all taken
//! from a real NVRTC 12.9):
//!
//! ```text
//! kernel.cu(4): error: identifier "foo" is undefined
//!       float é = 1.0f; x[i] = foo + é;
//!                               ^
//! ```
//!
//! The echoed source line carries a two-space prefix; the caret line copies the echo's
//! tabs and counts bytes, so the caret's byte offset minus two is a byte column in the
//! source line. It does not know about LSP positions (UTF-16); the document layer converts.

use serde::{Deserialize, Serialize};

/// How bad a compiler message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageSeverity {
    Error,
    Warning,
    /// EDG `note`/`remark`, and the "detected during instantiation" sites.
    Note,
}

/// One compiler message placed in the compiled source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompilerMessage {
    /// 0-based line in the compiled source.
    pub line: u32,
    /// 0-based byte column where the span starts in that line.
    pub col_start: u32,
    /// 0-based byte column where the span ends (exclusive). When the column is unknown
    /// the span covers the line's content without its leading and trailing blanks.
    pub col_end: u32,
    pub severity: MessageSeverity,
    pub message: String,
    /// The header the message is about, when it is not the compiled source itself (the
    /// message then sits on the `#include` that brought the header in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

/// A diagnostic header as EDG prints it: `file(line): severity: text`.
struct Header<'a> {
    file: &'a str,
    line: u32,
    severity: MessageSeverity,
    /// `#177-D` and the like, kept so the author can `-diag-suppress` it.
    code: Option<&'a str>,
    text: &'a str,
}

/// Parses NVRTC's log for `program_name` compiled from `source` into messages.
///
/// Messages for other files (headers) land on the `#include` line that brought them in
/// when it can be found, else on line 0, with the file name in the text. Messages with no
/// location at all (`nvrtc: error: ...` for a bad option) land on line 0.
/// The 0-based line inside its header of a message about a header (`header` set; its
/// text starts `name(line): `, as [`parse_nvrtc_log`] writes it).
pub fn header_line(m: &CompilerMessage) -> Option<u32> {
    let header = m.header.as_deref()?;
    let rest = m.message.strip_prefix(header)?.strip_prefix('(')?;
    let (n, _) = rest.split_once("): ")?;
    n.parse::<u32>().ok()?.checked_sub(1)
}

pub fn parse_nvrtc_log(log: &str, program_name: &str, source: &str) -> Vec<CompilerMessage> {
    let src_lines: Vec<&str> = source
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let lines: Vec<&str> = log.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(h) = parse_header(line) {
            // The block is everything up to the next header or a blank line.
            let mut j = i + 1;
            while j < lines.len() && !lines[j].trim().is_empty() && parse_header(lines[j]).is_none()
            {
                j += 1;
            }
            place_block(&h, &lines[i + 1..j], program_name, &src_lines, &mut out);
            i = j;
            continue;
        }
        let trimmed = line.trim();
        if let Some(msg) = locationless_message(trimmed) {
            out.push(whole_line_message(&src_lines, 0, msg.0, msg.1));
        }
        i += 1;
    }
    out
}

/// Lines that are not headers but still say something: `nvrtc: error: ...` and friends.
/// Summaries ("3 errors detected ...", "Compilation terminated.") and the suppression hint
/// are noise for an editor.
fn locationless_message(trimmed: &str) -> Option<(MessageSeverity, String)> {
    if trimmed.is_empty()
        || trimmed.starts_with("Remark: The warnings can be suppressed")
        || trimmed == "Compilation terminated."
        || (trimmed.contains(" detected in the compilation of ")
            && trimmed.starts_with(|c: char| c.is_ascii_digit()))
    {
        return None;
    }
    let lower = trimmed.to_ascii_lowercase();
    let severity = if lower.contains("error") {
        MessageSeverity::Error
    } else if lower.contains("warning") {
        MessageSeverity::Warning
    } else {
        MessageSeverity::Note
    };
    Some((severity, trimmed.to_string()))
}

fn parse_header(line: &str) -> Option<Header<'_>> {
    // Find `(<digits>): ` and take the longest file name before it, so file names with
    // parentheses still parse.
    let mut search_from = 0;
    while let Some(rel) = line[search_from..].find("): ") {
        let close = search_from + rel;
        search_from = close + 1;
        let Some(open) = line[..close].rfind('(') else {
            continue;
        };
        let digits = &line[open + 1..close];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || open == 0 {
            continue;
        }
        let Ok(line_no) = digits.parse::<u32>() else {
            continue;
        };
        let rest = &line[close + 3..];
        let (kind, text) = rest.split_once(": ")?;
        let (sev_word, code) = match kind.split_once(" #") {
            Some((w, c)) => (w, Some(c)),
            None => (kind, None),
        };
        let severity = match sev_word {
            "error" | "catastrophic error" | "internal error" | "fatal error"
            | "command-line error" => MessageSeverity::Error,
            "warning" => MessageSeverity::Warning,
            "remark" | "note" | "info" => MessageSeverity::Note,
            _ => continue,
        };
        return Some(Header {
            file: &line[..open],
            line: line_no,
            severity,
            code,
            text,
        });
    }
    None
}

fn place_block(
    h: &Header<'_>,
    block: &[&str],
    program_name: &str,
    src_lines: &[&str],
    out: &mut Vec<CompilerMessage>,
) {
    let caret_idx = block.iter().position(|l| l.trim() == "^");
    // The echo is the line just above the caret; everything else is extra text.
    let echo_idx = caret_idx.and_then(|c| c.checked_sub(1));
    let extra: Vec<&str> = block
        .iter()
        .enumerate()
        .filter(|(k, _)| Some(*k) != caret_idx && Some(*k) != echo_idx)
        .map(|(_, l)| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    let mut message = h.text.to_string();
    if let Some(code) = h.code {
        message.push_str(&format!(" [#{code}]"));
    }
    for e in &extra {
        message.push('\n');
        message.push_str(e);
    }

    if !is_our_file(h.file, program_name) {
        let line = include_line_for(h.file, src_lines).unwrap_or(0);
        let text = format!("{}({}): {}", h.file, h.line, message);
        let mut m = whole_line_message(src_lines, line, h.severity, text);
        m.header = Some(h.file.to_string());
        out.push(m);
        return;
    }

    let line = clamp_line(h.line.saturating_sub(1), src_lines);
    let real = src_lines.get(line as usize).copied().unwrap_or("");
    let mut msg = match (echo_idx, caret_idx) {
        (Some(e), Some(c)) => {
            let echo = block[e].strip_prefix("  ").unwrap_or(block[e]);
            let caret_col = block[c].find('^').unwrap_or(0).saturating_sub(2);
            match map_column(echo, caret_col, real) {
                Some(col) => {
                    let (start, end) = token_span(real, col);
                    CompilerMessage {
                        line,
                        col_start: start as u32,
                        col_end: end as u32,
                        severity: h.severity,
                        message: message.clone(),
                        header: None,
                    }
                }
                None => whole_line_message(src_lines, line, h.severity, message.clone()),
            }
        }
        _ => whole_line_message(src_lines, line, h.severity, message.clone()),
    };
    move_missing_semicolon(&mut msg, src_lines);
    out.push(msg);

    // Instantiation sites: the author usually needs the call that instantiated the
    // template more than the template line itself.
    for e in &extra {
        let Some((what, site)) = instantiation_site(e) else {
            continue;
        };
        let site_line = clamp_line(site.saturating_sub(1), src_lines);
        let sev = match h.severity {
            MessageSeverity::Error => "error",
            MessageSeverity::Warning => "warning",
            MessageSeverity::Note => "note",
        };
        let text = format!("{sev} in {what}: {}", h.text);
        out.push(whole_line_message(
            src_lines,
            site_line,
            MessageSeverity::Note,
            text,
        ));
    }
}

/// `instantiation of "T g(T) [with T=float]" at line 2` → (`instantiation of "..."`, 2).
/// Sites in other files (`at line 5 of foo.h`) are skipped: we cannot place them.
fn instantiation_site(extra: &str) -> Option<(&str, u32)> {
    let body = extra.strip_prefix("detected during ").unwrap_or(extra);
    let at = body.rfind(" at line ")?;
    let tail = &body[at + " at line ".len()..];
    let digits: &str = &tail[..tail
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tail.len())];
    if digits.is_empty() || tail[digits.len()..].trim_start().starts_with("of ") {
        return None;
    }
    Some((&body[..at], digits.parse().ok()?))
}

/// EDG reports a missing `;` at the next token, often on the next line; the author
/// looks for it at the end of the previous one.
fn move_missing_semicolon(msg: &mut CompilerMessage, src_lines: &[&str]) {
    if msg.message != "expected a \";\"" || msg.line == 0 {
        return;
    }
    let real = src_lines.get(msg.line as usize).copied().unwrap_or("");
    let first_non_ws = real.len() - real.trim_start().len();
    if msg.col_start as usize != first_non_ws {
        return;
    }
    let mut prev = msg.line as usize;
    while prev > 0 {
        prev -= 1;
        let p = src_lines[prev].trim_end();
        if p.trim().is_empty() {
            continue;
        }
        if p.ends_with(';') || p.ends_with('{') || p.ends_with('}') {
            return;
        }
        let end = p.len();
        let start = p[..end]
            .char_indices()
            .next_back()
            .map(|(i, _)| i)
            .unwrap_or(0);
        msg.line = prev as u32;
        msg.col_start = start as u32;
        msg.col_end = end as u32;
        return;
    }
}

fn is_our_file(file: &str, program_name: &str) -> bool {
    file == program_name
        || file.strip_prefix("./").is_some_and(|f| f == program_name)
        || program_name.strip_prefix("./").is_some_and(|p| p == file)
}

/// The `#include` line that brought `file` in: the include's target names the file, or
/// (for nested headers such as `cooperative_groups/details/info.h`) a folder on its path.
fn include_line_for(file: &str, src_lines: &[&str]) -> Option<u32> {
    let norm = file.replace('\\', "/");
    let components: Vec<&str> = norm.split('/').filter(|c| !c.is_empty()).collect();
    let mut fallback = None;
    for (n, l) in src_lines.iter().enumerate() {
        let Some(target) = include_target(l) else {
            continue;
        };
        let target = target.replace('\\', "/");
        if norm.ends_with(&format!("/{target}")) || norm == target {
            return Some(n as u32);
        }
        let stem = target.rsplit('/').next().unwrap_or(&target);
        let stem = stem.split('.').next().unwrap_or(stem);
        if fallback.is_none() && components.iter().rev().skip(1).any(|c| *c == stem) {
            fallback = Some(n as u32);
        }
    }
    fallback
}

fn include_target(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest.strip_prefix("include")?.trim_start();
    let (open, close) = match rest.chars().next()? {
        '"' => ('"', '"'),
        '<' => ('<', '>'),
        _ => return None,
    };
    let inner = rest.strip_prefix(open)?;
    Some(&inner[..inner.find(close)?])
}

/// A line past the end (a stale log) goes to the last line that has content.
fn clamp_line(line: u32, src_lines: &[&str]) -> u32 {
    if (line as usize) < src_lines.len() {
        return line;
    }
    src_lines
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .unwrap_or(0) as u32
}

fn whole_line_message(
    src_lines: &[&str],
    line: u32,
    severity: MessageSeverity,
    message: String,
) -> CompilerMessage {
    let line = clamp_line(line, src_lines);
    let text = src_lines.get(line as usize).copied().unwrap_or("");
    let start = text.len() - text.trim_start().len();
    let end = text.trim_end().len().max(start);
    CompilerMessage {
        line,
        col_start: start as u32,
        col_end: end as u32,
        severity,
        message,
        header: None,
    }
}

/// Maps the caret's byte column in the echoed line to a byte column in the real line.
/// They are the same text in practice; when they are not (a stale buffer, an echo that
/// NVRTC rewrote) the token under the caret is looked up in the real line instead.
fn map_column(echo: &str, col: usize, real: &str) -> Option<usize> {
    if echo == real {
        return Some(col.min(real.len()));
    }
    let col = floor_char_boundary(echo, col.min(echo.len()));
    let (s, e) = token_span(echo, col);
    let token = &echo[s..e];
    if token.trim().is_empty() {
        return None;
    }
    // The occurrence nearest to the caret's column.
    real.match_indices(token)
        .map(|(i, _)| i + (col - s))
        .min_by_key(|i| i.abs_diff(col))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || !c.is_ascii()
}

/// The span of the token at `col`: a whole identifier or number, else one character.
/// A column past the end gives an empty span at the end of the line.
fn token_span(line: &str, col: usize) -> (usize, usize) {
    let col = floor_char_boundary(line, col.min(line.len()));
    let Some(c) = line[col..].chars().next() else {
        return (line.len(), line.len());
    };
    if is_ident_char(c) && c.is_ascii() {
        let start = line[..col]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii() && is_ident_char(*c))
            .last()
            .map(|(i, _)| i)
            .unwrap_or(col);
        let end = line[col..]
            .char_indices()
            .find(|(_, c)| !(c.is_ascii() && is_ident_char(*c)))
            .map(|(i, _)| col + i)
            .unwrap_or(line.len());
        (start, end)
    } else {
        // Non-ASCII characters are tokens of their own: NVRTC calls each byte an
        // "unrecognized token", and one character is what the author sees.
        (col, col + c.len_utf8())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{expect, Expect};

    /// Renders messages the way a reader checks them: the line, the underlined span, the text.
    fn render(source: &str, msgs: &[CompilerMessage]) -> String {
        let lines: Vec<&str> = source.split('\n').collect();
        let mut out = String::new();
        for m in msgs {
            let text = lines.get(m.line as usize).copied().unwrap_or("");
            let span = text
                .get(m.col_start as usize..m.col_end as usize)
                .unwrap_or("<bad span>");
            out.push_str(&format!(
                "{:?} {}:{}-{} `{}`: {}\n",
                m.severity,
                m.line,
                m.col_start,
                m.col_end,
                span,
                m.message.replace('\n', "\n    ")
            ));
        }
        out
    }

    fn check(log: &str, source: &str, expect: Expect) {
        let msgs = parse_nvrtc_log(log, "kernel.cu", source);
        expect.assert_eq(&render(source, &msgs));
    }

    // Source and log from NVRTC 12.9 (pip wheel), compute_90, -std=c++17.
    const E1_SRC: &str = "extern \"C\" __global__ void k(float* x, int n) {\n\tint i = blockIdx.x * blockDim.x + threadIdx.x;\n    int unused = 3;\n    float é = 1.0f; x[i] = foo + é;\n    x[i] = undefined_thing(i);\n    return 5;\n}\ntemplate <typename T> __device__ T tw(T a) { return a.bar; }\nextern \"C\" __global__ void k2(float* x) { x[0] = tw(x[0]); }\n";
    const E1_LOG: &str = "kernel.cu(4): error: unrecognized token\n      float é = 1.0f; x[i] = foo + é;\n            ^\n\nkernel.cu(4): error: expected an identifier\n      float é = 1.0f; x[i] = foo + é;\n            ^\n\nkernel.cu(4): error: unrecognized token\n      float é = 1.0f; x[i] = foo + é;\n             ^\n\nkernel.cu(4): error: identifier \"foo\" is undefined\n      float é = 1.0f; x[i] = foo + é;\n                              ^\n\nkernel.cu(4): error: unrecognized token\n      float é = 1.0f; x[i] = foo + é;\n                                    ^\n\nkernel.cu(4): error: expected an expression\n      float é = 1.0f; x[i] = foo + é;\n                                    ^\n\nkernel.cu(4): error: unrecognized token\n      float é = 1.0f; x[i] = foo + é;\n                                     ^\n\nkernel.cu(5): error: identifier \"undefined_thing\" is undefined\n      x[i] = undefined_thing(i);\n             ^\n\nkernel.cu(6): error: return value type does not match the function type\n      return 5;\n             ^\n\nkernel.cu(3): warning #177-D: variable \"unused\" was declared but never referenced\n      int unused = 3;\n          ^\n\nRemark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n\nkernel.cu(8): error: expression must have class type but it has type \"float\"\n  template <typename T> __device__ T tw(T a) { return a.bar; }\n                                                      ^\n          detected during instantiation of \"T tw(T) [with T=float]\" at line 9\n\n10 errors detected in the compilation of \"kernel.cu\".\n";

    #[test]
    fn errors_warnings_non_ascii_and_instantiation() {
        check(
            E1_LOG,
            E1_SRC,
            expect![[r#"
                Error 3:10-12 `é`: unrecognized token
                Error 3:10-12 `é`: expected an identifier
                Error 3:10-12 `é`: unrecognized token
                Error 3:28-31 `foo`: identifier "foo" is undefined
                Error 3:34-36 `é`: unrecognized token
                Error 3:34-36 `é`: expected an expression
                Error 3:34-36 `é`: unrecognized token
                Error 4:11-26 `undefined_thing`: identifier "undefined_thing" is undefined
                Error 5:11-12 `5`: return value type does not match the function type
                Warning 2:8-14 `unused`: variable "unused" was declared but never referenced [#177-D]
                Error 7:52-53 `a`: expression must have class type but it has type "float"
                    detected during instantiation of "T tw(T) [with T=float]" at line 9
                Note 8:0-60 `extern "C" __global__ void k2(float* x) { x[0] = tw(x[0]); }`: error in instantiation of "T tw(T) [with T=float]": expression must have class type but it has type "float"
            "#]],
        );
    }

    #[test]
    fn tabs_keep_byte_columns() {
        let src =
            "extern \"C\" __global__ void k(float* x) {\n\tx[0] = \tbad_a;\n\t\tx[1] = 1;\n}\n";
        let log = "kernel.cu(2): error: identifier \"bad_a\" is undefined\n  \tx[0] = \tbad_a;\n  \t       \t^\n\n1 error detected in the compilation of \"kernel.cu\".\n";
        check(
            log,
            src,
            expect![[r#"
                Error 1:9-14 `bad_a`: identifier "bad_a" is undefined
            "#]],
        );
    }

    #[test]
    fn headers_notes_overloads_and_missing_semicolon() {
        let src = "#include \"myh.h\"\n__device__ float f(int* a, int b) { return 0; }\ntemplate <typename T> __device__ T g(T a) { return a.bar; }\ntemplate <typename T> __device__ T h2(T a) { return g(a); }\n#pragma nv_diag_warning 550\nextern \"C\" __global__ void k(float* x) {\n  f(x);\n  int y = 3\n  x[0] = h2(x[0]);\n  int set_only; set_only = 2;\n  #warning \"custom warning here\"\n  static_assert(sizeof(int) == 8, \"ints are not 8 bytes\");\n}\n";
        let log = "/tmp/tc/inc/myh.h(2): error: identifier \"nope\" is undefined\n  inline __device__ int h() { return nope; }\n                                     ^\n\nkernel.cu(7): error: argument of type \"float *\" is incompatible with parameter of type \"int *\"\n    f(x);\n      ^\n\nkernel.cu(7): error: too few arguments in function call\n    f(x);\n       ^\n\nkernel.cu(9): error: expected a \";\"\n    x[0] = h2(x[0]);\n    ^\n\nkernel.cu(11): warning #1105-D: #warning directive: \"custom warning here\"\n    #warning \"custom warning here\"\n     ^\n\nRemark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n\nkernel.cu(12): error: static assertion failed with \"ints are not 8 bytes\"\n    static_assert(sizeof(int) == 8, \"ints are not 8 bytes\");\n    ^\n\nkernel.cu(8): warning #177-D: variable \"y\" was declared but never referenced\n    int y = 3\n        ^\n\nkernel.cu(10): warning #550-D: variable \"set_only\" was set but never used\n    int set_only; set_only = 2;\n        ^\n\n5 errors detected in the compilation of \"kernel.cu\".\n";
        check(
            log,
            src,
            expect![[r#"
                Error 0:0-16 `#include "myh.h"`: /tmp/tc/inc/myh.h(2): identifier "nope" is undefined
                Error 6:4-5 `x`: argument of type "float *" is incompatible with parameter of type "int *"
                Error 6:5-6 `)`: too few arguments in function call
                Error 7:10-11 `3`: expected a ";"
                Warning 10:3-10 `warning`: #warning directive: "custom warning here" [#1105-D]
                Error 11:2-15 `static_assert`: static assertion failed with "ints are not 8 bytes"
                Warning 7:6-7 `y`: variable "y" was declared but never referenced [#177-D]
                Warning 9:6-14 `set_only`: variable "set_only" was set but never used [#550-D]
            "#]],
        );
    }

    #[test]
    fn nested_instantiation_and_overload_notes() {
        let src = "template <typename T> __device__ T g(T a) { return a.bar; }\ntemplate <typename T> __device__ T h2(T a) { return g(a); }\n__device__ void ov(int a, int b) {}\n__device__ void ov(float* a) {}\n#pragma nv_diag_remark 177\nextern \"C\" __global__ void k(float* x) {\n  x[0] = h2(x[0]);\n  ov(x[0]);\n  int rem;\n}\n";
        let log = "kernel.cu(8): error: no instance of overloaded function \"ov\" matches the argument list\n            argument types are: (float)\n    ov(x[0]);\n    ^\nkernel.cu(4): note #3326-D: function \"ov(float *)\" does not match because argument #1 does not match parameter\n  __device__ void ov(float* a) {}\n                  ^\nkernel.cu(3): note #3322-D: number of parameters of function \"ov(int, int)\" does not match the call\n  __device__ void ov(int a, int b) {}\n                  ^\n\nkernel.cu(1): error: expression must have class type but it has type \"float\"\n  template <typename T> __device__ T g(T a) { return a.bar; }\n                                                     ^\n          detected during:\n            instantiation of \"T g(T) [with T=float]\" at line 2\n            instantiation of \"T h2(T) [with T=float]\" at line 7\n\n2 errors detected in the compilation of \"kernel.cu\".\n";
        check(
            log,
            src,
            expect![[r#"
                Error 7:2-4 `ov`: no instance of overloaded function "ov" matches the argument list
                    argument types are: (float)
                Note 3:16-18 `ov`: function "ov(float *)" does not match because argument #1 does not match parameter [#3326-D]
                Note 2:16-18 `ov`: number of parameters of function "ov(int, int)" does not match the call [#3322-D]
                Error 0:51-52 `a`: expression must have class type but it has type "float"
                    detected during:
                    instantiation of "T g(T) [with T=float]" at line 2
                    instantiation of "T h2(T) [with T=float]" at line 7
                Note 1:0-59 `template <typename T> __device__ T h2(T a) { return g(a); }`: error in instantiation of "T g(T) [with T=float]": expression must have class type but it has type "float"
                Note 6:2-18 `x[0] = h2(x[0]);`: error in instantiation of "T h2(T) [with T=float]": expression must have class type but it has type "float"
            "#]],
        );
    }

    #[test]
    fn nested_header_lands_on_the_include_that_pulled_it_in() {
        let src = "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\nextern \"C\" __global__ void k() {}\n";
        let log = "/opt/cuda/include/cooperative_groups/details/info.h(50): catastrophic error: cannot open source file \"nv/target\"\n  #include <nv/target>\n                      ^\n\n1 catastrophic error detected in the compilation of \"kernel.cu\".\nCompilation terminated.\n";
        check(
            log,
            src,
            expect![[r#"
                Error 1:0-31 `#include <cooperative_groups.h>`: /opt/cuda/include/cooperative_groups/details/info.h(50): cannot open source file "nv/target"
            "#]],
        );
    }

    #[test]
    fn a_header_message_knows_its_line_in_the_header() {
        let src = "#include \"common.cuh\"\nextern \"C\" __global__ void k() {}\n";
        let log = "common.cuh(1296): error: qualified name is not allowed\n      std::vector<int> v;\n      ^\n\nkernel.cu(2): error: expected a \";\"\n  extern \"C\" __global__ void k() {}\n  ^\n";
        let msgs = parse_nvrtc_log(log, "kernel.cu", src);
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].header.as_deref(), Some("common.cuh"));
        assert_eq!(header_line(&msgs[0]), Some(1295));
        assert_eq!(header_line(&msgs[1]), None);
    }

    #[test]
    fn messages_without_a_location_land_on_line_zero() {
        let src = "  extern \"C\" __global__ void k() {}\n";
        check(
            "nvrtc: error: unrecognized option --bogus-opt found\n",
            src,
            expect![[r#"
                Error 0:2-35 `extern "C" __global__ void k() {}`: nvrtc: error: unrecognized option --bogus-opt found
            "#]],
        );
        check("", src, expect![[r#""#]]);
    }

    #[test]
    fn stale_echo_is_matched_by_token() {
        // The buffer moved on since the compile: the token is found in the real line.
        let src = "  int a = 1; y = foo(a);\n";
        let log = "kernel.cu(1): error: identifier \"foo\" is undefined\n    int a = 1; foo(a);\n               ^\n";
        check(
            log,
            src,
            expect![[r#"
                Error 0:17-20 `foo`: identifier "foo" is undefined
            "#]],
        );
        // A line number past the end clamps to the last line.
        let log = "kernel.cu(40): error: oops\n";
        check(
            log,
            src,
            expect![[r#"
                Error 0:2-24 `int a = 1; y = foo(a);`: oops
            "#]],
        );
    }
}
