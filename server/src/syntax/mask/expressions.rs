//! Expressions and declarations the grammar misreads though they are C++: `= {}` default
//! arguments, `typename` in an expression, `typeid` of a built-in type. Each is found on
//! the whole text and hidden (or renamed to a `_` name of the same length).

use super::lex::{is_name_byte, starts_word};
use super::ByteRange;

/// A default argument `= {}` (`P p = {}`, `std::array<int, 2> a = { }`): the grammar
/// reads an initializer list there only after a type ("missing type_identifier"). The
/// `{` becomes `_` (a name, which it reads) and the rest up to `}` blanks: as
/// `(renamed, hidden)` ranges. Only where `)` or `,` follows, so `x = {};` statements
/// stay as they are.
pub(super) fn empty_brace_defaults(text: &str) -> (Vec<ByteRange>, Vec<ByteRange>) {
    let (mut renamed, mut hidden) = (Vec::new(), Vec::new());
    let b = text.as_bytes();
    for (i, _) in text.match_indices('=') {
        if i > 0
            && matches!(
                b[i - 1],
                b'=' | b'!' | b'<' | b'>' | b'+' | b'-' | b'*' | b'/'
            )
        {
            continue;
        }
        let after = &text[i + 1..];
        let open = i + 1 + (after.len() - after.trim_start_matches([' ', '\t']).len());
        if b.get(open) != Some(&b'{') {
            continue;
        }
        let inner = &text[open + 1..];
        let close = open + 1 + (inner.len() - inner.trim_start_matches([' ', '\t']).len());
        if b.get(close) != Some(&b'}') {
            continue;
        }
        let rest = text[close + 1..].trim_start();
        if rest.starts_with(')') || rest.starts_with(',') {
            renamed.push(open..open + 1);
            hidden.push(open + 1..close + 1);
        }
    }
    (renamed, hidden)
}

/// `typename` in an expression (`return typename T::Params{a, b};`,
/// `typename Traits::Load(smem).Load(x)`): the grammar reads it only in declarations.
/// Hidden when a qualified name and then `{` or `(` follow, where only an expression
/// can stand; `using A = typename T::X;` and `typename T::X v;` stay.
pub(super) fn expression_typenames(text: &str) -> Vec<ByteRange> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (i, _) in text.match_indices("typename") {
        let end = i + "typename".len();
        let whole_word = starts_word(b, i) && b.get(end).is_some_and(|&c| !is_name_byte(c));
        if whole_word && typename_starts_expression(&text[end..]) {
            out.push(i..end);
        }
    }
    out
}

/// Whether the text after a `typename` keyword makes it an expression's: a qualified
/// name (with `::`, ending in a name or template arguments, its last part one word
/// after an optional `template`) and then `{` or `(` right after it on this line.
pub(super) fn typename_starts_expression(after: &str) -> bool {
    let (len, scoped) = qualified_name_len(after.as_bytes());
    let words = after[..len].trim_end();
    let last_is_name = words
        .bytes()
        .last()
        .is_some_and(|c| is_name_byte(c) || c == b'>');
    let last = words.rsplit("::").next().unwrap_or("").trim();
    let last = last.strip_prefix("template ").unwrap_or(last).trim_start();
    let one_name = !last.split('<').next().unwrap_or("").contains([' ', '\t']);
    scoped && last_is_name && one_name && matches!(after.as_bytes().get(len), Some(b'{' | b'('))
}

/// The length of the qualified name that `b` starts with: words, blanks, `::` and
/// template arguments (anything inside `<>`), up to the line's end; and whether a `::`
/// was among them.
pub(super) fn qualified_name_len(b: &[u8]) -> (usize, bool) {
    let (mut j, mut scoped, mut angle) = (0, false, 0i32);
    while j < b.len() && b[j] != b'\n' {
        match b[j] {
            b'<' => angle += 1,
            b'>' if angle > 0 => angle -= 1,
            b':' if b.get(j + 1) == Some(&b':') => {
                scoped = true;
                j += 1;
            }
            c if is_name_byte(c) || c == b' ' || c == b'\t' || angle > 0 => {}
            _ => break,
        }
        j += 1;
    }
    (j, scoped)
}

/// `typeid(double)`, `typeid(unsigned int)`: the grammar reads `typeid` of an expression
/// only. The built-in type's words (and the spaces between them) become one name made of
/// `_`, which it reads: same length, and nothing else of the text changes.
pub(super) fn typeid_types(text: &str) -> Vec<ByteRange> {
    const BUILTIN: &[&str] = &[
        "double", "float", "int", "long", "short", "char", "unsigned", "signed", "bool", "void",
    ];
    let mut out = Vec::new();
    for (i, _) in text.match_indices("typeid") {
        if !starts_word(text.as_bytes(), i) {
            continue;
        }
        let rest = &text[i + "typeid".len()..];
        let Some(inner) = rest.trim_start().strip_prefix('(') else {
            continue;
        };
        let Some(close) = inner.find(')') else {
            continue;
        };
        let words = &inner[..close];
        let all_builtin =
            !words.trim().is_empty() && words.split_whitespace().all(|w| BUILTIN.contains(&w));
        if all_builtin {
            let start = text.len() - inner.len();
            let lead = words.len() - words.trim_start().len();
            out.push(start + lead..start + words.trim_end().len());
        }
    }
    out
}
