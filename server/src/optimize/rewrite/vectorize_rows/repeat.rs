//! A trailing loop that repeats the columns' work: `for (int p = 0; p < planes; ++p)`
//! over planes, channels or a batch, its header the same for every column of a thread.
//! `vectorize_rows` reads its body as element statements, with its variable a value the
//! lane does not move (like `blockIdx.z`), and wraps the rewritten region in the loop's
//! header: each iteration runs the vector path (or the scalar one) for the thread's W
//! columns, the statements before the loop run again in each iteration.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::tree::{declared_in, first_line, named_children, text, walk, written_target};
use super::shape::{has_effects, mentions};

/// The last element statement when it is a `for` loop the region may run inside, or
/// why not (`Ok(None)`: the last statement is no `for` loop). The other element
/// statements must be declarations with no effect (they run once per iteration now); the
/// header declares its variable and reads neither the lane nor a name those statements
/// declare (it runs before them); the body carries nothing from one iteration to the
/// next (it assigns only names it declares, and memory) and has no `break`.
pub(super) fn trailing_loop<'t>(
    src: &str,
    elements: &[Node<'t>],
    lane: &str,
) -> Result<Option<Node<'t>>, String> {
    let Some((&l, rest)) = elements.split_last() else {
        return Ok(None);
    };
    if l.kind() != "for_statement" {
        return Ok(None);
    }
    let head = first_line(text(src, l));
    let body = l.child_by_field_name("body").ok_or("a loop has no body")?;
    let init = l.child_by_field_name("initializer");
    if init.is_none_or(|i| i.kind() != "declaration") {
        return Err(format!("`{head}` does not declare its variable"));
    }
    if let Some(s) = rest.iter().find(|s| !quiet_declaration(src, **s)) {
        return Err(format!(
            "`{}` would run once per iteration of `{head}`; only declarations may come before it",
            first_line(text(src, *s))
        ));
    }
    let before: BTreeSet<String> = rest.iter().flat_map(|s| declared_in(src, *s)).collect();
    let reads = |name: &str| {
        named_children(l)
            .into_iter()
            .any(|h| h.id() != body.id() && mentions(src, h, name))
    };
    if reads(lane) {
        return Err(format!(
            "`{head}` reads the lane index `{lane}`; its trips would differ between columns"
        ));
    }
    if let Some(name) = before.iter().find(|n| reads(n)) {
        return Err(format!(
            "`{head}` reads `{name}`, which the columns' work declares before it"
        ));
    }
    carried(src, body).map_or(Ok(Some(l)), |why| Err(format!("`{head}`: {why}")))
}

/// What the body carries from one iteration to the next, or a `break`.
fn carried(src: &str, body: Node<'_>) -> Option<String> {
    let own = declared_in(src, body);
    let mut why = None;
    walk(body, &mut |n| {
        if why.is_some() {
            return false;
        }
        match n.kind() {
            "break_statement" => why = Some("its body has a `break`".to_string()),
            "assignment_expression" | "update_expression" => {
                let t = written_target(n).map(strip_parens);
                if let Some(t) = t.filter(|t| t.kind() == "identifier") {
                    let name = text(src, t);
                    if !own.contains(name) {
                        why = Some(format!(
                            "its body assigns `{name}`, carried from one iteration to the next"
                        ));
                    }
                }
            }
            _ => {}
        }
        why.is_none()
    });
    why
}

fn strip_parens(mut n: Node<'_>) -> Node<'_> {
    while n.kind() == "parenthesized_expression" {
        match n.named_child(0) {
            Some(c) => n = c,
            None => break,
        }
    }
    n
}

/// A declaration (or comment) with no assignment, increment or atomic in it.
fn quiet_declaration(src: &str, s: Node<'_>) -> bool {
    matches!(s.kind(), "declaration" | "comment") && !has_effects(src, s)
}
