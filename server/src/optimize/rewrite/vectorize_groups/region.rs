//! The statements a thread runs once, in which groups are looked for: the guarded body
//! of the 1-D elementwise shape (with its index, so groups at `k * i` are read as
//! `[i]` and several may go to a thread), or, for any other kernel, the straight-line
//! tail of its body: everything after the last top-level early exit (`if (...)
//! return;`), or the braces of a last `if (...) { ... }` that ends the kernel (a 2-D
//! `if (ox < OW && oy < OH)`).

use tree_sitter::Node;

use super::super::elementwise::{is_plain_return, Elementwise, Guard};
use super::super::tree::{first_line, line_indent, named_children, text};

/// Statements that run once per thread, unconditionally once reached.
pub(super) struct Region<'t> {
    /// The braces of the kernel's body.
    pub kernel: Node<'t>,
    /// The statements (comments among them), at least one that is not a comment.
    pub body: Vec<Node<'t>>,
    /// End of the last statement.
    pub body_end: usize,
    /// The 1-D thread index, where the elementwise shape matched.
    pub index: Option<String>,
    /// The statements stand in braces of their own (or after an early return).
    pub braced: bool,
    pub unit: String,
}

impl Region<'_> {
    pub fn span(&self) -> std::ops::Range<usize> {
        self.body[0].start_byte()..self.body_end
    }
}

impl<'t> Region<'t> {
    /// The elementwise shape's guarded body.
    pub fn of_shape(src: &str, shape: &Elementwise<'t>) -> Region<'t> {
        let braced = shape.form == Guard::EarlyReturn
            || src[shape.cond_end..shape.body_span().start].contains('{');
        Region {
            kernel: kernel_braces(shape.decl),
            body: shape.body.clone(),
            body_end: shape.body_end,
            index: Some(shape.index.clone()),
            braced,
            unit: shape.unit.clone(),
        }
    }

    /// The straight-line tail of any kernel (see the module doc), or why there is none.
    pub fn straight(src: &str, func: Node<'t>) -> Result<Region<'t>, String> {
        let kernel = func
            .child_by_field_name("body")
            .ok_or("the kernel has no body")?;
        let stmts = named_children(kernel);
        let code = |s: &&Node<'_>| s.kind() != "comment";
        let last = stmts.iter().rposition(|s| code(&s));
        let body = match last.map(|l| (l, stmts[l])) {
            Some((_, s)) if guard_block(s).is_some() => {
                named_children(guard_block(s).expect("checked"))
            }
            Some((l, _)) => {
                let from = stmts[..l].iter().rposition(|s| early_exit(*s));
                stmts[from.map_or(0, |f| f + 1)..=l].to_vec()
            }
            None => Vec::new(),
        };
        let Some(end) = body.iter().rev().find(code).map(|s| s.end_byte()) else {
            return Err("the kernel has no statement that every thread runs".into());
        };
        if let Some(exit) = body.iter().find(|s| early_exit(**s)) {
            return Err(format!(
                "`{}` leaves the body before its end",
                first_line(text(src, *exit))
            ));
        }
        let unit = unit_of(src, &body);
        Ok(Region {
            kernel,
            body,
            body_end: end,
            index: None,
            braced: true,
            unit,
        })
    }
}

/// `if (...) return;` (or `{ return; }`) without an `else`.
fn early_exit(s: Node<'_>) -> bool {
    s.kind() == "if_statement"
        && s.child_by_field_name("alternative").is_none()
        && s.child_by_field_name("consequence")
            .is_some_and(is_plain_return)
}

/// The braces of `if (...) { ... }` without an `else`.
fn guard_block(s: Node<'_>) -> Option<Node<'_>> {
    (s.kind() == "if_statement" && s.child_by_field_name("alternative").is_none())
        .then(|| s.child_by_field_name("consequence"))
        .flatten()
        .filter(|c| c.kind() == "compound_statement")
}

/// The braces around `n`: the kernel's body.
fn kernel_braces(n: Node<'_>) -> Node<'_> {
    let mut root = n;
    while let Some(p) = root.parent() {
        root = p;
        if p.kind() == "compound_statement" {
            break;
        }
    }
    root
}

/// One step of indentation: how much deeper the body stands than its braces' line.
fn unit_of(src: &str, body: &[Node<'_>]) -> String {
    let Some(first) = body.first() else {
        return "    ".into();
    };
    let outer = first
        .parent()
        .map_or("", |p| line_indent(src, p.start_byte()));
    match line_indent(src, first.start_byte()).strip_prefix(outer) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => "    ".into(),
    }
}
