//! The lexical pieces the mask's scans share: identifier bytes and words, all-caps
//! macro names, and brackets matched on one line.

/// A byte of a C++ identifier.
pub(super) fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether byte `i` of `b` starts a word: no identifier byte stands before it.
pub(super) fn starts_word(b: &[u8], i: usize) -> bool {
    i == 0 || !is_name_byte(b[i - 1])
}

/// The length of the C identifier at the start of `t` (0 if none).
pub(super) fn name_len(t: &str) -> usize {
    if t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        t.bytes().take_while(|&c| is_name_byte(c)).count()
    } else {
        0
    }
}

/// The byte index of the `)` that closes the `(` at `open` in `line`, if on the line.
pub(super) fn close_paren(line: &str, open: usize) -> Option<usize> {
    close_bracket(line, open, b'(', b')')
}

/// The byte index of the `close` that closes the `open_c` at `open` in `line`, if on
/// the line (no literal or comment awareness: for one line of a declaration's head).
pub(crate) fn close_bracket(line: &str, open: usize, open_c: u8, close_c: u8) -> Option<usize> {
    let mut depth = 0i32;
    for (j, c) in line.bytes().enumerate().skip(open) {
        match c {
            c if c == open_c => depth += 1,
            c if c == close_c => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The length of an all-caps macro-like name at the start of `t` (two or more of
/// `A-Z 0-9 _`, at least one letter, not followed by a name character) and the rest.
pub(super) fn caps_name(t: &str) -> (usize, &str) {
    let n = t
        .bytes()
        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
        .count();
    let next_is_name = t[n..].bytes().next().is_some_and(is_name_byte);
    if n < 2
        || next_is_name
        || !t[..n].bytes().any(|c| c.is_ascii_uppercase())
        || t.starts_with(|c: char| c.is_ascii_digit())
    {
        return (0, t);
    }
    (n, &t[n..])
}
