//! Kernel units: a kernel plus the same-file helpers it calls, transitively
//! (`__device__` functions in CUDA, `@triton.jit` helpers in Triton).
//!
//! Finding calls must not visit every node of every body (this runs per keystroke, and
//! on a slow machine a full tree walk of a 10,000-line file already costs milliseconds).
//! So a byte scan of each body picks candidates, identifiers that name a helper and are
//! followed by `(` (or `<` in CUDA), and `grammars/*/calls.scm`, run only over each
//! candidate's bytes, confirms it is the callee of a call. Each body is scanned once
//! (memoized) and helpers are looked up by name in a map.

use rustc_hash::{FxHashMap, FxHashSet};

use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, Query, QueryCursor};

use super::{queries, ByteRange, Lang};

/// A function that can be a kernel or a kernel-unit member.
#[derive(Debug)]
pub(crate) struct Func<'t> {
    pub name: String,
    pub def_range: ByteRange,
    /// The body searched for calls (not needed when `calls` is known).
    pub body: Option<Node<'t>>,
    /// Can be a callee (`__device__` / jit function).
    pub helper: bool,
    /// The helper names the body calls, when already known (an unchanged chunk of an
    /// edited document, `cuda::Chunks`): the body is then not searched again.
    pub calls: Option<&'t [String]>,
}

pub(crate) struct CallGraph<'a> {
    funcs: &'a [Func<'a>],
    by_name: FxHashMap<&'a str, Vec<usize>>,
    /// Per function: the helper names it calls, first call first, no duplicates.
    calls: Vec<Option<Vec<&'a str>>>,
    src: &'a str,
    lang: Lang,
    cursor: QueryCursor,
}

impl<'a> CallGraph<'a> {
    pub(crate) fn new(lang: Lang, src: &'a str, funcs: &'a [Func<'a>]) -> Self {
        let mut by_name: FxHashMap<&str, Vec<usize>> = FxHashMap::default();
        for (i, f) in funcs.iter().enumerate() {
            if f.helper {
                by_name.entry(f.name.as_str()).or_default().push(i);
            }
        }
        // Known calls name helpers of this file (a name that is no helper any more is
        // dropped; the caller resolves again when the set of helper names changed).
        let calls = funcs
            .iter()
            .map(|f| {
                f.calls.as_ref().map(|names| {
                    names
                        .iter()
                        .filter_map(|n| by_name.get_key_value(n.as_str()).map(|(k, _)| *k))
                        .collect()
                })
            })
            .collect();
        CallGraph {
            funcs,
            by_name,
            calls,
            src,
            lang,
            cursor: QueryCursor::new(),
        }
    }

    /// The helper names called by function `i`, first call first.
    pub(crate) fn calls(&mut self, i: usize) -> Vec<&'a str> {
        if let Some(c) = &self.calls[i] {
            return c.clone();
        }
        let found = self.find_calls(i);
        self.calls[i] = Some(found.clone());
        found
    }

    fn find_calls(&mut self, i: usize) -> Vec<&'a str> {
        let query: Option<&'static Query> = match self.lang {
            Lang::Cuda => queries::CUDA_CALLS.as_ref(),
            Lang::Triton => queries::TRITON_CALLS.as_ref(),
        };
        let Some(query) = query else {
            return Vec::new();
        };
        let Some(callee) = queries::capture(query, "callee") else {
            return Vec::new();
        };
        let mut out: Vec<&'a str> = Vec::new();
        let (src, lang) = (self.src, self.lang);
        let Some(body) = self.funcs[i].body else {
            return Vec::new();
        };
        for word in call_words(lang, src, body.byte_range()) {
            let Some((&key, _)) = self.by_name.get_key_value(&src[word.clone()]) else {
                continue;
            };
            if !out.contains(&key)
                && is_callee(lang, src, query, callee, body, word, &mut self.cursor)
            {
                out.push(key);
            }
        }
        out
    }

    /// The callees of function `i` (depth-first, first call first, each name once; the
    /// function's own name never) and the unit ranges (its `def_range` and every callee
    /// definition's, all overloads of a name included, sorted by start).
    pub(crate) fn unit(&mut self, i: usize) -> (Vec<String>, Vec<ByteRange>) {
        let funcs = self.funcs;
        let mut visited: FxHashSet<&str> = FxHashSet::default();
        visited.insert(funcs[i].name.as_str());
        let mut callees: Vec<String> = Vec::new();
        let mut ranges: Vec<ByteRange> = vec![funcs[i].def_range.clone()];
        let mut stack: Vec<(Vec<&'a str>, usize)> = vec![(self.calls(i), 0)];
        while let Some((calls, pos)) = stack.last_mut() {
            let Some(&name) = calls.get(*pos) else {
                stack.pop();
                continue;
            };
            *pos += 1;
            if !visited.insert(name) {
                continue;
            }
            let Some(defs) = self.by_name.get(name).cloned() else {
                continue;
            };
            callees.push(name.to_string());
            let mut next = Vec::new();
            for d in defs {
                ranges.push(funcs[d].def_range.clone());
                next.extend(self.calls(d));
            }
            stack.push((next, 0));
        }
        ranges.sort_by_key(|r| (r.start, r.end));
        ranges.dedup();
        (callees, ranges)
    }
}

/// Identifiers in `body` followed by `(` (or `<` in CUDA: a template call), every
/// occurrence: the words that may call a helper. A byte scan, cheap next to a query.
pub(crate) fn call_words(lang: Lang, src: &str, body: ByteRange) -> Vec<ByteRange> {
    let bytes = src.as_bytes();
    let end = body.end.min(bytes.len());
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
    let mut out = Vec::new();
    let mut j = body.start.min(end);
    while j < end {
        if !ident(bytes[j]) {
            j += 1;
            continue;
        }
        let start = j;
        while j < end && ident(bytes[j]) {
            j += 1;
        }
        // Cheap test first: most identifiers are not followed by `(` or `<`.
        let mut k = j;
        while k < end && bytes[k].is_ascii_whitespace() {
            k += 1;
        }
        let opens = bytes
            .get(k)
            .is_some_and(|&b| b == b'(' || (lang == Lang::Cuda && b == b'<'));
        if opens
            && !bytes[start].is_ascii_digit()
            && src.is_char_boundary(start)
            && src.is_char_boundary(j)
        {
            out.push(start..j);
        }
    }
    out
}

/// Does `calls.scm` see the identifier at `range` (inside `node`) as the callee of a call?
pub(crate) fn is_callee(
    lang: Lang,
    src: &str,
    query: &Query,
    callee: u32,
    node: Node,
    range: ByteRange,
    cursor: &mut QueryCursor,
) -> bool {
    cursor.set_byte_range(range.clone());
    let mut matches = cursor.matches(query, node, src.as_bytes());
    while let Some(m) = matches.next() {
        for cap in m.captures.iter().filter(|c| c.index == callee) {
            let name = match lang {
                Lang::Cuda => called_name(cap.node),
                Lang::Triton => Some(cap.node),
            };
            if name.is_some_and(|n| n.byte_range() == range) {
                return true;
            }
        }
    }
    false
}

/// The plain function name a CUDA call expression calls: `f`, `f<T>`, `ns::f`,
/// `ns::f<T>`. Member calls, function pointers and lambdas give `None`.
fn called_name(node: Node) -> Option<Node> {
    let mut n = node;
    for _ in 0..32 {
        match n.kind() {
            "identifier" => return Some(n),
            "template_function" | "qualified_identifier" => n = n.child_by_field_name("name")?,
            _ => return None,
        }
    }
    None
}
