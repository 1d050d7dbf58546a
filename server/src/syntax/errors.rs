//! Syntax errors from a tree-sitter tree: one diagnostic per error region. tree-sitter
//! nests ERROR nodes and often reports a MISSING token next to an ERROR; the author needs
//! one message per place, so nested, overlapping and same-line adjacent errors merge.

use tree_sitter::Node;
#[cfg(test)]
use tree_sitter::Tree;

use super::{ByteRange, SyntaxError};

/// At most this many errors are listed; one more entry says how many were left out.
const MAX_ERRORS: usize = 100;

#[cfg(test)]
pub(crate) fn syntax_errors(src: &str, tree: &Tree) -> Vec<SyntaxError> {
    let root = tree.root_node();
    merge(src, found(src, root, &(0..usize::MAX)))
}

/// The error and missing-token places among the top-level items of `root` that start
/// in `range`, sorted, not merged yet.
pub(crate) fn found(src: &str, root: Node, range: &ByteRange) -> Vec<(ByteRange, String)> {
    let mut found: Vec<(ByteRange, String)> = Vec::new();
    if !root.has_error() {
        return found;
    }
    let mut cursor = root.walk();
    let mut stack: Vec<Node> = if root.is_error() || root.is_missing() {
        vec![root]
    } else {
        let mut top: Vec<Node> = super::top_items(root, range);
        top.retain(|c| c.has_error() || c.is_missing());
        top.reverse();
        top
    };
    // Depth-first over the nodes that contain an error, without recursion.
    while let Some(node) = stack.pop() {
        if node.is_missing() {
            found.push(missing(src, node));
        } else if node.is_error() {
            found.push(error(src, node));
        } else if node.has_error() {
            let before = stack.len();
            stack.extend(
                node.children(&mut cursor)
                    .filter(|c| c.has_error() || c.is_missing()),
            );
            stack[before..].reverse();
        }
    }
    found.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    found
}

/// One error per place: nested, overlapping and same-line adjacent places merge; at most
/// `MAX_ERRORS`, then one entry saying how many were left out.
pub(crate) fn merge(src: &str, mut found: Vec<(ByteRange, String)>) -> Vec<SyntaxError> {
    found.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    let bytes = src.as_bytes();
    let mut merged: Vec<(ByteRange, String)> = Vec::new();
    for (range, message) in found {
        if let Some((last, last_msg)) = merged.last_mut() {
            let touches = range.start <= last.end
                || !bytes[last.end.min(bytes.len())..range.start.min(bytes.len())].contains(&b'\n');
            if touches {
                // An ERROR says more than a MISSING token next to it.
                if last_msg.starts_with("missing") && !message.starts_with("missing") {
                    *last_msg = message;
                }
                last.end = last.end.max(range.end);
                continue;
            }
        }
        merged.push((range, message));
    }
    let total = merged.len();
    let mut out: Vec<SyntaxError> = merged
        .into_iter()
        .take(MAX_ERRORS)
        .map(|(range, message)| SyntaxError { range, message })
        .collect();
    if total > MAX_ERRORS {
        let start = out.last().map_or(0, |e| e.range.start);
        out.push(SyntaxError {
            range: start..start,
            message: format!("… and {} more syntax errors", total - MAX_ERRORS),
        });
    }
    out
}

fn missing(src: &str, node: Node) -> (ByteRange, String) {
    // Anchor right after the previous real token: a missing `;` belongs to the end of the
    // statement, not to the comment or line break that follows it.
    let mut anchor = node.start_byte();
    let mut prev = node.prev_sibling();
    while let Some(p) = prev {
        if p.is_extra() {
            prev = p.prev_sibling();
            continue;
        }
        anchor = p.end_byte();
        break;
    }
    let kind = node.kind();
    let message = if kind.chars().all(|c| c.is_ascii_punctuation()) || !node.is_named() {
        format!("missing `{kind}`")
    } else {
        format!("missing {kind}")
    };
    (one_char(src, anchor), message)
}

fn error(src: &str, node: Node) -> (ByteRange, String) {
    let range = node.byte_range();
    // Name the token only when the region is one token: for a longer region tree-sitter's
    // first token is where recovery started, rarely what is wrong.
    let single = match node.child_count() {
        0 => Some(node),
        1 => node.child(0).filter(|c| c.child_count() == 0),
        _ => None,
    };
    let token = single.map(|t| src.get(t.byte_range()).unwrap_or("").trim());
    let message = match token {
        Some(t) if !t.is_empty() && t.len() <= 24 && !t.contains('\n') => {
            format!("syntax error: unexpected `{t}`")
        }
        _ => "syntax error".to_string(),
    };
    if range.is_empty() {
        (one_char(src, range.start), message)
    } else {
        (range, message)
    }
}

/// A one-character range at `at` (the character before it when `at` is a line end).
fn one_char(src: &str, at: usize) -> ByteRange {
    let at = at.min(src.len());
    if !src.is_char_boundary(at) {
        return at..at;
    }
    let next = src[at..].chars().next();
    match next {
        Some(c) if c != '\n' && c != '\r' => at..at + c.len_utf8(),
        _ => match src[..at].chars().next_back() {
            Some(c) if c != '\n' => at - c.len_utf8()..at,
            _ => at..at,
        },
    }
}
