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
//!   f(...)`; [`CALLING_CONVENTIONS`]) are hidden wherever they stand.
//!
//! Top-level directives are left alone: the grammar parses them.
//!
//! Python: runs of many comment lines (`py_comments`) are hidden; the grammar's scanner
//! costs the square of a run's length. Pure.

use super::{ByteRange, Lang};

/// Attributes with a parenthesized argument list that the grammar does not know.
const HIDDEN_ATTRIBUTES: &[&str] = &["__align__", "__builtin_align__", "__cluster_dims__"];

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

/// A default argument `= {}` (`P p = {}`, `std::array<int, 2> a = { }`): the grammar
/// reads an initializer list there only after a type ("missing type_identifier"). The
/// `{` becomes `_` (a name, which it reads) and the rest up to `}` blanks: as
/// `(renamed, hidden)` ranges. Only where `)` or `,` follows, so `x = {};` statements
/// stay as they are.
fn empty_brace_defaults(text: &str) -> (Vec<ByteRange>, Vec<ByteRange>) {
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

/// C headers open a linkage block in one conditional group and close it in another:
/// `#ifdef __cplusplus` / `extern "C" {` / `#endif`, declarations, then `#ifdef
/// __cplusplus` / `}` / `#endif`. The grammar cannot pair them: everything after the
/// opening group became one ERROR region, whose host prototypes the device slice then
/// kept. Each such pair of groups (a group whose one line of code opens `extern "..." {`,
/// and a later one whose one line is `}`) is hidden, directives and all; the
/// declarations between them parse as top-level items. Only the parser's view changes:
/// the device slice keeps the groups, so NVRTC reads the block as written.
fn split_linkage_groups(text: &str) -> Vec<ByteRange> {
    // (range, opens) of each one-line group, in text order.
    let mut groups: Vec<(ByteRange, bool)> = Vec::new();
    let lines: Vec<(usize, &str)> = text
        .split_inclusive('\n')
        .scan(0usize, |at, l| {
            let start = *at;
            *at += l.len();
            Some((start, l))
        })
        .collect();
    let code = |l: &str| -> String {
        let l = l.split("//").next().unwrap_or("");
        l.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let directive = |l: &str, names: &[&str]| {
        let t = l.trim_start();
        t.strip_prefix('#').is_some_and(|d| {
            let word = d
                .trim_start()
                .split(|c: char| !c.is_ascii_alphabetic())
                .next();
            word.is_some_and(|w| names.contains(&w))
        })
    };
    let mut i = 0;
    while i < lines.len() {
        let (start, line) = lines[i];
        if !directive(line, &["if", "ifdef", "ifndef"]) {
            i += 1;
            continue;
        }
        // The group's code lines up to its `#endif`, at most one.
        let mut j = i + 1;
        while j < lines.len() && code(lines[j].1).is_empty() {
            j += 1;
        }
        let body = lines.get(j).map(|(_, l)| code(l)).unwrap_or_default();
        let mut k = j + 1;
        while k < lines.len() && code(lines[k].1).is_empty() {
            k += 1;
        }
        let closes_group = lines.get(k).is_some_and(|(_, l)| directive(l, &["endif"]));
        let opens = body.starts_with("extern \"") && body.ends_with('{') && !body.contains('}');
        if closes_group && (opens || body == "}") {
            let end = lines[k].0 + lines[k].1.len();
            groups.push((start..end, opens));
            i = k + 1;
        } else {
            i += 1;
        }
    }
    let mut out = Vec::new();
    let mut open: Vec<ByteRange> = Vec::new();
    for (range, opens) in groups {
        if opens {
            open.push(range);
        } else if let Some(o) = open.pop() {
            out.push(o);
            out.push(range);
        }
    }
    out
}

/// `typename` in an expression (`return typename T::Params{a, b};`,
/// `typename Traits::Load(smem).Load(x)`): the grammar reads it only in declarations.
/// Hidden when a qualified name and then `{` or `(` follow, where only an expression
/// can stand; `using A = typename T::X;` and `typename T::X v;` stay.
fn expression_typenames(text: &str) -> Vec<ByteRange> {
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

/// A byte of a C++ identifier.
fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether byte `i` of `b` starts a word: no identifier byte stands before it.
fn starts_word(b: &[u8], i: usize) -> bool {
    i == 0 || !is_name_byte(b[i - 1])
}

/// Whether the text after a `typename` keyword makes it an expression's: a qualified
/// name (with `::`, ending in a name or template arguments, its last part one word
/// after an optional `template`) and then `{` or `(` right after it on this line.
fn typename_starts_expression(after: &str) -> bool {
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
fn qualified_name_len(b: &[u8]) -> (usize, bool) {
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
fn typeid_types(text: &str) -> Vec<ByteRange> {
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

/// The `*` of each starred item at the top level of a `return` or `yield` list
/// (`return dy, *[None] * 3`, valid since Python 3.8): tree-sitter-python reads a
/// starred item only in a parenthesised tuple or a call. Without the `*` the list is an
/// ordinary tuple, so the rest of the statement parses as the author wrote it.
fn starred_returns(text: &str) -> Vec<ByteRange> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let lead = line.len() - line.trim_start().len();
        let t = &line[lead..];
        let Some(kw) = ["return", "yield"].into_iter().find(|k| {
            t.strip_prefix(k)
                .is_some_and(|r| r.starts_with([' ', '\t']))
        }) else {
            continue;
        };
        let b = line.as_bytes();
        let mut i = lead + kw.len();
        let (mut depth, mut after_sep) = (0i32, true);
        while i < b.len() {
            match b[i] {
                b'#' | b'\n' | b'\r' => break,
                b' ' | b'\t' => {}
                q @ (b'"' | b'\'') => {
                    i += 1;
                    while i < b.len() && b[i] != q && b[i] != b'\n' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    after_sep = false;
                }
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    after_sep = false;
                }
                b')' | b']' | b'}' => {
                    depth -= 1;
                    after_sep = false;
                }
                b',' if depth == 0 => after_sep = true,
                b'*' if depth == 0 && after_sep && b.get(i + 1) != Some(&b'*') => {
                    out.push(start + i..start + i + 1);
                    after_sep = false;
                }
                _ => after_sep = false,
            }
            i += 1;
        }
    }
    out
}

/// One `#if` group inside a body: whether its current branch is the one kept.
struct Group {
    keeping: bool,
    /// A branch has been kept already (later `#elif`/`#else` branches are hidden).
    kept_one: bool,
}

/// The conditional groups open inside function bodies.
#[derive(Default)]
struct Conditionals {
    groups: Vec<Group>,
    /// Nesting of conditional groups inside a hidden branch.
    hidden_nesting: usize,
}

impl Conditionals {
    /// Whether the current line stands in a branch that is not kept.
    fn hiding(&self) -> bool {
        self.groups.iter().any(|g| !g.keeping)
    }

    /// Follows the directive `line` (trimmed, from its `#`) inside a body, `last` being
    /// the last significant byte of code before it: whether the directive is hidden.
    /// Conditional directives always are (a group's first branch is kept, or its
    /// `#else` after `#if 0`); others where they stand in a hidden branch or in the
    /// middle of a statement.
    fn hides_directive(&mut self, line: &str, last: u8) -> bool {
        let directive = line[1..].trim_start();
        let n = directive
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let (word, cond) = (&directive[..n], directive[n..].trim());
        let hiding = self.hiding();
        match word {
            "if" | "ifdef" | "ifndef" => {
                if hiding {
                    self.hidden_nesting += 1;
                } else {
                    let first = !(word == "if" && cond == "0");
                    self.groups.push(Group {
                        keeping: first,
                        kept_one: first,
                    });
                }
            }
            "elif" | "else" if self.hidden_nesting == 0 => {
                if let Some(g) = self.groups.last_mut() {
                    g.keeping = !g.kept_one;
                    g.kept_one = true;
                }
            }
            "endif" => {
                if self.hidden_nesting > 0 {
                    self.hidden_nesting -= 1;
                } else {
                    self.groups.pop();
                }
            }
            _ => return hiding || !matches!(last, b';' | b'{' | b'}' | b':'),
        }
        true
    }
}

/// The lines of a text, each with the byte offset where it starts.
struct LineCursor<'t> {
    lines: std::str::SplitInclusive<'t, char>,
    /// Where the next line starts.
    offset: usize,
}

impl<'t> LineCursor<'t> {
    /// The cursor before the first line of `text`.
    fn new(text: &'t str) -> Self {
        LineCursor {
            lines: text.split_inclusive('\n'),
            offset: 0,
        }
    }

    /// The next line (its line break included) and where it starts.
    fn next_line(&mut self) -> Option<(usize, &'t str)> {
        let line = self.lines.next()?;
        let start = self.offset;
        self.offset += line.len();
        Some((start, line))
    }

    /// Passes over the lines that start before byte `end`.
    fn skip_to(&mut self, end: usize) {
        while self.offset < end && self.next_line().is_some() {}
    }

    /// The end of the directive whose first line, without its line break, is `body`
    /// at byte `start`: its continuation lines (after a line ending in `\`) are
    /// passed over with it.
    fn directive_end(&mut self, start: usize, body: &str) -> usize {
        let mut end = start + body.len();
        let mut cont = body.ends_with('\\');
        while cont {
            let Some((at, line)) = self.next_line() else {
                break;
            };
            let b = line.trim_end_matches(['\n', '\r']);
            end = at + b.len();
            cont = b.ends_with('\\');
        }
        end
    }
}

/// The byte ranges to hide (see the module doc): line by line, directives go to the
/// open conditional groups, lines of hidden branches are hidden whole, and code lines
/// to `Scan::code_line`. Directives outside function bodies and groups are left alone.
pub fn mask_ranges(text: &str) -> Vec<ByteRange> {
    let mut scan = Scan::new();
    let mut conditionals = Conditionals::default();
    let mut lines = LineCursor::new(text);
    while let Some((start, line)) = lines.next_line() {
        let body = line.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start();
        if !scan.in_block_comment && trimmed.starts_with('#') {
            let end = lines.directive_end(start, body);
            let in_body = scan.depth > 0 || !conditionals.groups.is_empty();
            if in_body && conditionals.hides_directive(trimmed, scan.last) {
                scan.out.push(start..end);
            }
        } else if conditionals.hiding() {
            scan.out.push(start..start + body.len());
        } else {
            scan.code_line(text, &mut lines, start, body);
        }
    }
    scan.out
}

/// A macro used as a statement in a way the grammar cannot read, as `(start, end, bare)`
/// byte offsets in `line`: an all-caps name alone on its line (`GGML_TENSOR_LOCALS`,
/// bare: it expands to statements), or an all-caps call at the start of its line (or
/// after `case X:`) whose arguments include a type (`LAUNCH(float, half);`), or with no
/// `;` after it. Ordinary calls (`CUDA_CHECK(cudaMalloc(&p, n));`) parse and stay.
fn macro_statement(line: &str) -> Option<(usize, usize, bool)> {
    let lead = line.len() - line.trim_start().len();
    let mut from = lead;
    let rest = &line[from..];
    if rest.starts_with("case ") || rest.starts_with("default") {
        // After the label's own `:` (not a `::`).
        let b = rest.as_bytes();
        let mut k = 0;
        while k < b.len() {
            if b[k] == b':' {
                if b.get(k + 1) == Some(&b':') {
                    k += 2;
                    continue;
                }
                break;
            }
            k += 1;
        }
        if k >= b.len() {
            return None;
        }
        let after = &rest[k + 1..];
        from += k + 1 + (after.len() - after.trim_start().len());
    }
    let rest = &line[from..];
    let (name_len, _) = caps_name(rest);
    if name_len == 0 {
        return None;
    }
    let tail = rest[name_len..].trim_start();
    let code_end = |t: &str| t.is_empty() || t.starts_with("//") || t.starts_with("/*");
    if code_end(tail) {
        return Some((from, from + name_len, true));
    }
    if !tail.starts_with('(') {
        return None;
    }
    let open = from + name_len + (rest[name_len..].len() - tail.len());
    let j = close_paren(line, open)?;
    let args = &line[open + 1..j];
    let after = line[j + 1..].trim_start();
    let typed = args.split(',').any(|a| is_type_arg(a.trim()));
    let no_semicolon = code_end(after);
    // `CUDA_KERNEL_LOOP(i, n) {`: a loop macro; its block stays.
    let loop_head = after.starts_with('{');
    (typed || no_semicolon || loop_head).then_some((from, j + 1, no_semicolon))
}

/// A top-level macro call at byte `at` of `text` (`COUNT_NONZERO_OP(float,
/// f32)`, arguments possibly over several lines) followed by no `;`, `{` or operator:
/// by a new item, a directive, a comment or the end. The byte index of its `)`.
/// At file scope, an all-caps macro wrapping a declaration and ending its statement:
/// `GGML_DEPRECATED(GGML_API T * f(int a), "use g");` (the arguments hold a parenthesis
/// of their own, which a plain invocation such as `MAKE_OP(add, float);` does not). The
/// grammar read it, and every item after it up to some `{`, as one function. Returns the
/// end of the statement (after its `;`, the rest of that line included).
fn wrapping_macro_call(text: &str, at: usize) -> Option<usize> {
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
fn call_close(text: &str, open: usize, stop: &[u8]) -> Option<(usize, bool)> {
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

fn top_level_macro_call(text: &str, at: usize) -> Option<usize> {
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

/// The length of the C identifier at the start of `t` (0 if none).
fn name_len(t: &str) -> usize {
    if t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        t.bytes().take_while(|&c| is_name_byte(c)).count()
    } else {
        0
    }
}

/// The byte index of the `)` that closes the `(` at `open` in `line`, if on the line.
fn close_paren(line: &str, open: usize) -> Option<usize> {
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
fn caps_name(t: &str) -> (usize, &str) {
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

/// `float`, `const half`, `unsigned int`, `T*`: an argument only a type can be.
fn is_type_arg(a: &str) -> bool {
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

/// Calling-convention macros of the CUDA and Windows APIs, between a declaration's type
/// and its name (`void CUDART_CB callback(...)`, `CUresult CUDAAPI cuInit(...)`). They
/// expand to nothing on Linux; the grammar reads them as a second type.
const CALLING_CONVENTIONS: &[&str] = &[
    "CUDART_CB",
    "CUDARTAPI",
    "CUDAAPI",
    "CUBLASAPI",
    "CUBLASWINAPI",
    "CUFFTAPI",
    "CURANDAPI",
    "CUSPARSEAPI",
    "CUSOLVERAPI",
    "CUDNNWINAPI",
    "CUDNNAPI",
    "NVRTC_API",
    "WINAPI",
    "CALLBACK",
    "APIENTRY",
    "__stdcall",
    "__cdecl",
];

/// The state of the lexical scan over code lines, carried from line to line, and the
/// ranges it hides.
struct Scan {
    /// Brace depth (0 at file scope).
    depth: i64,
    in_block_comment: bool,
    /// The last significant character of code (not comment, not directive).
    last: u8,
    out: Vec<ByteRange>,
}

/// The last significant bytes after which `unsigned(` starts a functional cast: an
/// expression may stand there.
const BEFORE_EXPRESSION: &[u8] = b"(,=+-*/%?:<>&|![{";

impl Scan {
    /// The scan at the start of a text: at file scope, as after a statement.
    fn new() -> Self {
        Scan {
            depth: 0,
            in_block_comment: false,
            last: b';',
            out: Vec::new(),
        }
    }

    /// One code line (`body`, without its line break, at byte `start` of `text`):
    /// first the forms that hide a whole statement (an explicit class instantiation, a
    /// file-scope macro call, a macro used as a statement), which only a line starting
    /// outside a comment can begin; else the line is lexed.
    fn code_line(&mut self, text: &str, lines: &mut LineCursor, start: usize, body: &str) {
        if !self.in_block_comment {
            let at = start + (body.len() - body.trim_start().len());
            if self.class_instantiation(start, at, body)
                || self.file_scope_macro(text, lines, at)
                || self.statement_macro(start, body)
            {
                return;
            }
        }
        self.code(body, start);
    }

    /// `template class PiEstimator<float>;`: an explicit instantiation of a class
    /// template, which the grammar cannot read ("missing identifier"). At file scope
    /// or in a namespace (explicit instantiations stand nowhere else), after a `;` or
    /// a brace. Hidden from its first word (at byte `at`) to its `;`; whether it was.
    fn class_instantiation(&mut self, start: usize, at: usize, body: &str) -> bool {
        if !matches!(self.last, b';' | b'}' | b'{') {
            return false;
        }
        let words: Vec<&str> = body.split_whitespace().take(3).collect();
        let instantiation = matches!(
            words.as_slice(),
            ["template", "class" | "struct" | "union", ..]
                | ["extern", "template", "class" | "struct" | "union"]
        );
        let hidden = instantiation && body.trim_end().ends_with(';');
        if hidden {
            self.out.push(at..start + body.trim_end().len());
        }
        hidden
    }

    /// A macro call starting a file-scope item at byte `at` (after a `;` or `}`):
    /// `GGML_DEPRECATED(...)` wrapping a declaration ([`wrapping_macro_call`]), hidden
    /// to its line's end, or `LAUNCH(4, float, f32)` with no `;`
    /// ([`top_level_macro_call`]), which the grammar would read with the items after
    /// it as one broken definition (hiding a kernel): hidden, the rest of its last line
    /// lexed. The lines the call spans are passed over. Whether there was one.
    fn file_scope_macro(&mut self, text: &str, lines: &mut LineCursor, at: usize) -> bool {
        if self.depth != 0 || !matches!(self.last, b';' | b'}') {
            return false;
        }
        if let Some(end) = wrapping_macro_call(text, at) {
            self.out.push(at..end);
            lines.skip_to(end);
            return true;
        }
        let Some(close) = top_level_macro_call(text, at) else {
            return false;
        };
        self.out.push(at..close + 1);
        lines.skip_to(close + 1);
        let rest_end = text[..lines.offset].trim_end_matches(['\n', '\r']).len();
        if close + 1 < rest_end {
            self.code(&text[close + 1..rest_end], close + 1);
        }
        true
    }

    /// A macro used as a statement inside a body, at the start of a statement
    /// ([`macro_statement`]): hidden, the rest of the line lexed. A bare name stands
    /// for whole statements, so a statement ends with it. Whether there was one.
    fn statement_macro(&mut self, start: usize, body: &str) -> bool {
        if self.depth <= 0 || !matches!(self.last, b';' | b'{' | b'}' | b':') {
            return false;
        }
        let Some((a, b, bare)) = macro_statement(body) else {
            return false;
        };
        self.out.push(start + a..start + b);
        if bare {
            // The macro stands for whole statements (`GGML_TENSOR_LOCALS`).
            self.last = b';';
        }
        self.code(&body[b..], start + b);
        true
    }

    /// Lexes one piece of a code line (`line`, at byte `base` of the text): comments,
    /// literals, braces and the last significant character, and the tokens hidden
    /// inside a line, each decided by [`Scan::token`].
    fn code(&mut self, line: &str, base: usize) {
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if self.in_block_comment {
                if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    self.in_block_comment = false;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            match self.token(line, base, i) {
                Some(next) => i = next,
                None => return,
            }
        }
    }

    /// The token at byte `i` of `line`, outside comments: where the scan goes on, or
    /// None at a `//` comment (the rest of the line).
    fn token(&mut self, line: &str, base: usize, i: usize) -> Option<usize> {
        let b = line.as_bytes();
        let next = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => return None,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                self.in_block_comment = true;
                i + 2
            }
            b'"' | b'\'' => self.literal(line, base, i),
            b'*' | b'&' => self.qualifier_macro(line, base, i),
            b'{' => {
                self.depth += 1;
                self.last = b'{';
                i + 1
            }
            b'}' => {
                self.depth -= 1;
                self.last = b'}';
                i + 1
            }
            b'_' if hidden_attribute(&line[i..]).is_some() => self.attribute(line, base, i),
            c if (c.is_ascii_uppercase() || c == b'_') && starts_word(b, i) => {
                self.caps_word(line, base, i)
            }
            b'u' if self.unsigned_cast(line, i) => {
                // `unsigned(x)`, a functional cast the grammar cannot read: hidden, it
                // leaves the parenthesized `(x)`.
                self.out.push(base + i..base + i + "unsigned".len());
                i + "unsigned".len()
            }
            c => {
                if !c.is_ascii_whitespace() {
                    self.last = c;
                }
                i + 1
            }
        };
        Some(next)
    }

    /// The string or character literal opening at byte `i` (the line's end closes it
    /// if its quote does not), which becomes the last significant character. After a
    /// string literal, a name and another string literal (`"%" PRId64 "\n"`,
    /// concatenation): the name is hidden, as only a macro fits there. Where the scan
    /// goes on.
    fn literal(&mut self, line: &str, base: usize, i: usize) -> usize {
        let b = line.as_bytes();
        let q = b[i];
        let mut j = i + 1;
        while j < b.len() && b[j] != q {
            j += if b[j] == b'\\' { 2 } else { 1 };
        }
        self.last = q;
        if q == b'"' && j < b.len() {
            let after = j + 1;
            let ws = line[after..].len() - line[after..].trim_start().len();
            // Any name will do here: between two literals only a macro fits.
            let t = &line[after + ws..];
            let n = name_len(t);
            if ws > 0 && n > 0 && t[n..].trim_start().starts_with('"') {
                self.out.push(base + after + ws..base + after + ws + n);
                return after + ws + n;
            }
        }
        j + 1
    }

    /// `const T * GGML_RESTRICT p`: after the `*` or `&` at byte `i`, an all-caps
    /// macro standing for a qualifier, followed by a name: hidden. The `*` or `&` is
    /// the last significant character either way. Where the scan goes on.
    fn qualifier_macro(&mut self, line: &str, base: usize, i: usize) -> usize {
        self.last = line.as_bytes()[i];
        let after = i + 1;
        let ws = line[after..].len() - line[after..].trim_start().len();
        let (n, rest) = caps_name(&line[after + ws..]);
        let rest_ws = rest.len() - rest.trim_start().len();
        let name_follows = rest
            .trim_start()
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if n > 0 && rest_ws > 0 && name_follows {
            self.out.push(base + after + ws..base + after + ws + n);
            return after + ws + n;
        }
        i + 1
    }

    /// A [`HIDDEN_ATTRIBUTES`] word at byte `i`: with its parenthesized arguments on
    /// this line, hidden whole; else its `_` is the last significant character. Where
    /// the scan goes on.
    fn attribute(&mut self, line: &str, base: usize, i: usize) -> usize {
        let word = hidden_attribute(&line[i..]).expect("an attribute at i");
        let after = i + word.len();
        let open = after + (line[after..].len() - line[after..].trim_start().len());
        if line.as_bytes().get(open) == Some(&b'(') {
            if let Some(j) = close_paren(line, open) {
                self.out.push(base + i..base + j + 1);
                return j + 1;
            }
        }
        self.last = b'_';
        i + 1
    }

    /// The word starting at byte `i` with a capital or `_`: hidden if it is one of the
    /// [`CALLING_CONVENTIONS`] (`void CUDART_CB callback(...)`, empty on Linux), else
    /// its last byte is the last significant character. The byte after it.
    fn caps_word(&mut self, line: &str, base: usize, i: usize) -> usize {
        let n = line.as_bytes()[i..]
            .iter()
            .take_while(|&&c| is_name_byte(c))
            .count();
        if CALLING_CONVENTIONS.contains(&&line[i..i + n]) {
            self.out.push(base + i..base + i + n);
        } else {
            self.last = line.as_bytes()[i + n - 1];
        }
        i + n
    }

    /// Whether the word `unsigned` at byte `i` is a functional cast (`unsigned(x)`):
    /// a whole word, where an expression may stand, followed by `(`.
    fn unsigned_cast(&self, line: &str, i: usize) -> bool {
        line[i..].starts_with("unsigned")
            && BEFORE_EXPRESSION.contains(&self.last)
            && starts_word(line.as_bytes(), i)
            && line[i + "unsigned".len()..].trim_start().starts_with('(')
    }
}

/// The [`HIDDEN_ATTRIBUTES`] word that `t` starts with, if any.
fn hidden_attribute(t: &str) -> Option<&'static str> {
    HIDDEN_ATTRIBUTES.iter().copied().find(|w| t.starts_with(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paired_one_line_linkage_groups_are_hidden() {
        let open = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n";
        let close = "#ifdef __cplusplus\n}\n#endif\n";
        let decl = "int f(void);\n";
        let both = format!("{open}{decl}{close}");
        let hidden = split_linkage_groups(&both);
        assert_eq!(hidden, [0..open.len(), open.len() + decl.len()..both.len()]);
        // An opening group with no closing one, or groups holding more than the brace.
        assert!(split_linkage_groups(&format!("{open}{decl}")).is_empty());
        let busy =
            format!("#ifdef __cplusplus\nextern \"C\" {{\nint g(void);\n#endif\n{decl}{close}");
        assert!(split_linkage_groups(&busy).is_empty());
        let other = "#ifdef USE_FAST\nstatic int fast = 1;\n#endif\n";
        assert!(split_linkage_groups(other).is_empty());
    }

    #[test]
    fn a_typename_before_a_qualified_name_and_a_brace_or_paren_is_an_expression() {
        // From `typename_in_expressions_parses`: a value built, a static member called.
        assert!(typename_starts_expression(" T::Params{a, b};"));
        assert!(typename_starts_expression(" K::Params(1, 2);"));
        assert!(typename_starts_expression(
            " K::template Load<4>(loader).run(x);"
        ));
        // Declarations stay: an alias, a variable, a variable with constructor arguments.
        assert!(!typename_starts_expression(" K::Loader;\n"));
        assert!(!typename_starts_expression(" K::Loader loader;"));
        assert!(!typename_starts_expression(" K::Loader loader(x);"));
        // No `::`, or the brace on the next line.
        assert!(!typename_starts_expression(" T(1)"));
        assert!(!typename_starts_expression(" T::Params\n{a, b};"));
    }

    #[test]
    fn a_qualified_name_spans_template_arguments_and_stops_at_the_line_end() {
        assert_eq!(qualified_name_len(b" A<B::C, 2>::D(x)"), (14, true));
        assert_eq!(qualified_name_len(b" T x;"), (4, false));
        assert_eq!(qualified_name_len(b" T::X\n(y)"), (5, true));
    }

    /// The text with hidden regions shown as `·` runs, for fixtures.
    fn show(text: &str) -> String {
        let m = masked(Lang::Cuda, text).unwrap_or_else(|| text.to_string());
        m.split('\n')
            .zip(text.split('\n'))
            .map(|(m, t)| {
                if m == t {
                    t.to_string()
                } else {
                    format!("{m}   <- {}", t.trim())
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn pragma_between_a_loop_head_and_its_body_is_hidden_but_not_between_statements() {
        let src = "__global__ void k(float* x) {\n    for (int j = 0; j < 4; ++j)\n#pragma unroll\n        for (int i = 0; i < 8; ++i) x[i] += 1;\n    #pragma unroll 4\n    for (int i = 0; i < 8; ++i) x[i] = 0;\n}\n";
        let shown = show(src);
        assert!(shown.contains("<- #pragma unroll\n"), "{shown}");
        assert!(shown.contains("    #pragma unroll 4\n"), "{shown}");
    }

    #[test]
    fn an_if_group_around_a_statement_head_keeps_the_first_branch() {
        let src = "__global__ void k(int n, float s, float* y) {\n#if USE_FAST\n    if (n > 0 && s > 0)\n#else\n    if (n > 0)\n#endif\n    {\n        y[0] = s;\n    }\n}\n";
        let m = masked(Lang::Cuda, src).unwrap();
        let kept: Vec<&str> = m.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        assert_eq!(
            kept,
            [
                "__global__ void k(int n, float s, float* y) {",
                "if (n > 0 && s > 0)",
                "{",
                "y[0] = s;",
                "}",
                "}"
            ]
        );
        // `#if 0` keeps the other branch.
        let zero = src.replace("#if USE_FAST", "#if 0");
        let m = masked(Lang::Cuda, &zero).unwrap();
        assert!(
            m.contains("    if (n > 0)\n") && !m.contains("s > 0)"),
            "{m}"
        );
    }

    #[test]
    fn macros_used_as_statements_are_hidden_and_ordinary_calls_stay() {
        let src = "static void launch(int t, const float* x, cudaStream_t s) {\n    GGML_TENSOR_LOCALS\n\n    int n = ne0 / 2;\n    switch (t) {\n        case T_F32:  LAUNCH(float,       float);  break;\n        case T_F16: LAUNCH(half, half); break;\n    }\n    DISPATCH(const float*, x)\n    CUDA_CHECK(cudaMemsetAsync(p, 0, n, s));\n    int m = t > 0 ? MAX(t, n) : MIN(t, n);\n    CUDA_KERNEL_LOOP(i, n) {\n        y[i] = 0;\n    }\n}\n";
        expect_test::expect![[r#"
            static void launch(int t, const float* x, cudaStream_t s) {
                                     <- GGML_TENSOR_LOCALS

                int n = ne0 / 2;
                switch (t) {
                    case T_F32:                            ;  break;   <- case T_F32:  LAUNCH(float,       float);  break;
                    case T_F16:                   ; break;   <- case T_F16: LAUNCH(half, half); break;
                }
                                            <- DISPATCH(const float*, x)
                CUDA_CHECK(cudaMemsetAsync(p, 0, n, s));
                int m = t > 0 ? MAX(t, n) : MIN(t, n);
                                       {   <- CUDA_KERNEL_LOOP(i, n) {
                    y[i] = 0;
                }
            }
        "#]]
        .assert_eq(&show(src));
        // And the masked text parses.
        let m = masked(Lang::Cuda, src).unwrap();
        let mut p = tree_sitter::Parser::new();
        p.set_language(&crate::syntax::ts_language(Lang::Cuda))
            .unwrap();
        let tree = p.parse(&m, None).unwrap();
        assert!(!tree.root_node().has_error(), "{m}");
        // A functional cast to `unsigned` reads as a parenthesized expression.
        let cast = "__global__ void k(int n) {\n    dim3 g(unsigned((n + 63) / 64), unsigned(n));\n    unsigned (*f)(int) = 0;\n}\n";
        let m = masked(Lang::Cuda, cast).unwrap();
        assert!(
            m.contains("dim3 g(        ((n + 63) / 64),         (n));"),
            "{m}"
        );
        assert!(m.contains("unsigned (*f)(int)"), "{m}");
        let tree = p.parse(&m, None).unwrap();
        assert!(!tree.root_node().has_error(), "{m}");
        // Qualifier macros and macros between string literals.
        let q = "__global__ void k(const float * RESTRICT x, float & ALIAS y, int n) {\n    const float * __restrict__ p = x;\n    printf(\"%\" PRId64 \" rows\\n\", (long long) n * SCALE);\n    y = x[0] * N + p[0];\n}\n";
        let m = masked(Lang::Cuda, q).unwrap();
        let tree = p.parse(&m, None).unwrap();
        assert!(!tree.root_node().has_error(), "{m}");
        assert!(
            m.contains("const float *          x, float &       y"),
            "{m}"
        );
        assert!(m.contains("\"%\"        \" rows"), "{m}");
        assert!(
            m.contains("* SCALE)") && m.contains("x[0] * N + p[0]"),
            "{m}"
        );
        // Top-level macros are the grammar's business.
        assert_eq!(
            masked(
                Lang::Cuda,
                "GGML_EXTERN_C
int x;
"
            ),
            None
        );
    }

    #[test]
    fn align_attributes_are_hidden_and_top_level_directives_stay() {
        let src = "#include <cuda_fp16.h>\n#if defined(X)\nstruct __align__(8) Pair { float a, b; };\n#endif\n__shared__ __align__(16) float t[32];\nstruct __builtin_align__(32) float8 { float x; };\n";
        let m = masked(Lang::Cuda, src).unwrap();
        assert_eq!(
            m,
            src.replace("__align__(8)", &" ".repeat(12))
                .replace("__align__(16)", &" ".repeat(13))
                .replace("__builtin_align__(32)", &" ".repeat(21))
        );
        assert_eq!(m.len(), src.len());
        assert_eq!(masked(Lang::Cuda, "__global__ void k() { }\n"), None);
        assert_eq!(masked(Lang::Triton, src), None);
    }

    #[test]
    fn calling_convention_macros_are_hidden_and_other_caps_names_stay() {
        // As the CUDA samples write their stream callbacks and driver-API prototypes.
        let src = "void CUDART_CB myStreamCallback(cudaStream_t s, cudaError_t e, void *data) {\n    printf(\"CUDART_CB %d\\n\", (int)e);\n}\nstatic CUresult CUDAAPI load(CUmodule *m);\nMY_TYPE CUDART_CBX f(int x);\n";
        let m = masked(Lang::Cuda, src).unwrap();
        assert_eq!(m.len(), src.len());
        assert!(m.starts_with("void           myStreamCallback("), "{m}");
        assert!(m.contains("static CUresult         load("), "{m}");
        // In a string, and as part of a longer name: kept.
        assert!(m.contains("\"CUDART_CB %d"), "{m}");
        assert!(m.contains("MY_TYPE CUDART_CBX f"), "{m}");
        let mut p = tree_sitter::Parser::new();
        p.set_language(&crate::syntax::ts_language(Lang::Cuda))
            .unwrap();
        let tree = p
            .parse(m.replace("MY_TYPE CUDART_CBX f(int x);", ""), None)
            .unwrap();
        assert!(!tree.root_node().has_error(), "{m}");
    }

    #[test]
    fn typeid_of_a_builtin_type_and_class_instantiations_parse() {
        let src = "template <class Real> struct Est { Real x; };\ntemplate class Est<float>;\nextern template struct Est<double>;\ntemplate __global__ void k<float>(float *);\nvoid check() {\n  if (typeid(Real) == typeid(unsigned int) && typeid( double ) != typeid(x)) {}\n  int typeidx = sizeof(double);\n}\n";
        let m = masked(Lang::Cuda, src).unwrap();
        assert_eq!(m.len(), src.len());
        assert!(
            m.contains("typeid(Real) == typeid(____________) && typeid( ______ ) != typeid(x)"),
            "{m}"
        );
        let lines: Vec<&str> = m.lines().collect();
        assert!(
            lines[1].trim().is_empty() && lines[2].trim().is_empty(),
            "{m}"
        );
        assert!(
            m.contains("template __global__ void k<float>(float *);"),
            "{m}"
        );
        assert!(m.contains("int typeidx = sizeof(double);"), "{m}");
        let mut p = tree_sitter::Parser::new();
        p.set_language(&crate::syntax::ts_language(Lang::Cuda))
            .unwrap();
        let tree = p.parse(&m, None).unwrap();
        assert!(
            !tree.root_node().has_error(),
            "{m}\n{}",
            tree.root_node().to_sexp()
        );
        // Unmasked, the grammar fails on both.
        let tree = p.parse(src, None).unwrap();
        assert!(tree.root_node().has_error());
    }

    #[test]
    fn braces_in_comments_strings_and_hidden_branches_do_not_count() {
        let src = "__global__ void k(float* x) {\n    // {\n    const char* s = \"{\";\n#if A\n    if (x) {\n#else\n    if (!x) {\n#endif\n        x[0] = 1;\n    }\n}\n#define OUTSIDE 1\n";
        let m = masked(Lang::Cuda, src).unwrap();
        // The directive after the function is top level again: kept.
        assert!(m.ends_with("#define OUTSIDE 1\n"), "{m}");
        assert!(!m.contains("!x"), "{m}");
    }
}
