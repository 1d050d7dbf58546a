//! Macro invocations the grammar cannot read: a macro used as a statement inside a body
//! ([`macro_statement`]) and a macro call standing as a file-scope item
//! ([`wrapping_macro_call`], [`top_level_macro_call`]). Each rule reads text only and
//! returns where the invocation ends; [`super::scan::Scan`] hides it.

use super::lex::{caps_name, close_paren, name_len};

/// A macro used as a statement in a way the grammar cannot read, as `(start, end, bare)`
/// byte offsets in `line`: an all-caps name alone on its line (`GGML_TENSOR_LOCALS`,
/// bare: it expands to statements), or an all-caps call at the start of its line (or
/// after `case X:`) that [`macro_call_statement`] finds unreadable. Ordinary calls
/// (`CUDA_CHECK(cudaMalloc(&p, n));`) parse and stay.
pub(super) fn macro_statement(line: &str) -> Option<(usize, usize, bool)> {
    let from = statement_start(line)?;
    let rest = &line[from..];
    let (name_len, after_name) = caps_name(rest);
    if name_len == 0 {
        return None;
    }
    let tail = after_name.trim_start();
    if ends_code(tail) {
        return Some((from, from + name_len, true));
    }
    if !tail.starts_with('(') {
        return None;
    }
    let open = line.len() - tail.len();
    let (end, bare) = macro_call_statement(line, open)?;
    Some((from, end, bare))
}

/// Where the statement on `line` starts: after its indent and, on a `case X:` or
/// `default:` line, after the label and the blanks that follow it. None when such a line
/// has no label `:` (a `::` is no label's).
pub(super) fn statement_start(line: &str) -> Option<usize> {
    let lead = line.len() - line.trim_start().len();
    let rest = &line[lead..];
    if !(rest.starts_with("case ") || rest.starts_with("default")) {
        return Some(lead);
    }
    let colon = label_colon(rest)?;
    let after = &rest[colon + 1..];
    Some(lead + colon + 1 + (after.len() - after.trim_start().len()))
}

/// The byte index of the first `:` in `t` that is not part of a `::`.
fn label_colon(t: &str) -> Option<usize> {
    let b = t.as_bytes();
    let mut k = 0;
    while k < b.len() {
        if b[k] == b':' {
            if b.get(k + 1) == Some(&b':') {
                k += 2;
                continue;
            }
            return Some(k);
        }
        k += 1;
    }
    None
}

/// Whether `t` holds no more code: it is empty or a comment starts it.
fn ends_code(t: &str) -> bool {
    t.is_empty() || t.starts_with("//") || t.starts_with("/*")
}

/// The call whose `(` is at byte `open` of `line` (after an all-caps name) as a
/// statement the grammar cannot read: its arguments include a type (`LAUNCH(float,
/// half);`), no `;` follows it (`DISPATCH(x)`, which is then `bare`: it stands for whole
/// statements), or a block does (`CUDA_KERNEL_LOOP(i, n) {`, a loop macro whose block
/// stays). As `(end, bare)`, `end` one past its `)`; None for an ordinary call or one
/// that does not close on the line.
fn macro_call_statement(line: &str, open: usize) -> Option<(usize, bool)> {
    let close = close_paren(line, open)?;
    let args = &line[open + 1..close];
    let after = line[close + 1..].trim_start();
    let typed = args.split(',').any(|a| is_type_arg(a.trim()));
    let no_semicolon = ends_code(after);
    let loop_head = after.starts_with('{');
    (typed || no_semicolon || loop_head).then_some((close + 1, no_semicolon))
}

/// At file scope, an all-caps macro wrapping a declaration and ending its statement:
/// `GGML_DEPRECATED(GGML_API T * f(int a), "use g");` (the arguments hold a parenthesis
/// of their own, which a plain invocation such as `MAKE_OP(add, float);` does not). The
/// grammar read it, and every item after it up to some `{`, as one function. Returns the
/// end of the statement (after its `;`, the rest of that line included).
pub(super) fn wrapping_macro_call(text: &str, at: usize) -> Option<usize> {
    let t = &text[at..];
    let (n, rest) = caps_name(t);
    if n == 0 || !rest.starts_with('(') {
        return None;
    }
    let b = text.as_bytes();
    let (close, nested) = call_close(text, at + n, b"#")?;
    let after = &text[close + 1..];
    let semi = close + 1 + (after.len() - after.trim_start().len());
    if !nested || b.get(semi) != Some(&b';') {
        return None;
    }
    let line_end = text[semi..].find('\n').map_or(text.len(), |e| semi + e);
    Some(line_end)
}

/// The `)` closing the call whose `(` is at `open`, over lines, skipping string and
/// character literals, and whether the arguments hold parentheses of their own. `None`
/// at a `;`, `{` or `}` (or a byte of `stop`) before it: no call of a macro at file scope.
pub(super) fn call_close(text: &str, open: usize, stop: &[u8]) -> Option<(usize, bool)> {
    let b = text.as_bytes();
    let (mut depth, mut nested) = (0usize, false);
    let mut i = open;
    loop {
        match b.get(i)? {
            b'(' => {
                depth += 1;
                nested |= depth > 1;
            }
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some((i, nested));
                }
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != *q && b[i] != b'\n' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b';' | b'{' | b'}' => return None,
            c if stop.contains(c) => return None,
            _ => {}
        }
        i += 1;
    }
}

/// A top-level macro call at byte `at` of `text` (`COUNT_NONZERO_OP(float,
/// f32)`, arguments possibly over several lines) followed by no `;`, `{` or operator:
/// by a new item, a directive, a comment or the end. The byte index of its `)`.
pub(super) fn top_level_macro_call(text: &str, at: usize) -> Option<usize> {
    // Any name: at file scope, `name(...)` followed by a new item can only be a macro
    // invocation (`MAKE_KERNEL(add, half)`, `Make_Op(mul, float)`).
    let t = &text[at..];
    let n = name_len(t);
    let rest = &t[n..];
    if n == 0 || !rest.starts_with('(') {
        return None;
    }
    let (close, _) = call_close(text, at + n, b"")?;
    let after = text[close + 1..].trim_start();
    match after.bytes().next() {
        None | Some(b'#' | b'/') => Some(close),
        Some(c) if c.is_ascii_alphabetic() || c == b'_' => Some(close),
        _ => None,
    }
}

/// `float`, `const half`, `unsigned int`, `T*`: an argument only a type can be.
pub(super) fn is_type_arg(a: &str) -> bool {
    const TYPES: &[&str] = &[
        "float",
        "double",
        "int",
        "unsigned",
        "signed",
        "char",
        "short",
        "long",
        "bool",
        "void",
        "half",
        "__half",
        "nv_bfloat16",
        "__nv_bfloat16",
        "half2",
        "__half2",
        "nv_bfloat162",
        "__nv_bfloat162",
        "size_t",
        "int8_t",
        "uint8_t",
        "int16_t",
        "uint16_t",
        "int32_t",
        "uint32_t",
        "int64_t",
        "uint64_t",
        "float2",
        "float4",
        "int2",
        "int4",
        "const",
        "struct",
        "typename",
    ];
    let words: Vec<&str> = a.split_whitespace().collect();
    !words.is_empty()
        && (words
            .iter()
            .all(|w| TYPES.contains(&w.trim_end_matches(['*', '&'])))
            || (a.ends_with('*') && !a.contains(['(', '+', '-', '/', '['])))
}
