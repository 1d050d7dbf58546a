//! `grid_total`'s vector-load variant of the grid-stride loop: where the loop starts at
//! the thread's own element (no offset) and reads some buffers exactly at its variable
//! (`a[i]`), those buffers are read 16 bytes at a time (`float4`, `int4`, `uint4`,
//! `double2`) when every one of them is 16-byte aligned (tested at run time), each vector
//! feeding V copies of the author's body in element order; the elements past the last
//! whole vector, and every element of an unaligned launch, go through the scalar loop as
//! before. Other reads in the body (`w[i % c]`, `x[i + 1]`) stay scalar, at the copy's
//! own `i`. Pure: tree in, text out.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::access::index_of;
use super::super::elementwise::pointer_params;
use super::super::tree::{line_indent, reindent, text, walk};
use super::super::vectorize::{element_bytes, vector_type};
use super::super::RewriteContext;
use super::{Form, Total};

/// The vector type and its width for an element type, 16 bytes (`vectorize`'s table).
fn vector_of(elem: &str) -> Option<(&'static str, usize)> {
    let width = 16 / element_bytes(elem)?;
    vector_type(elem, width).map(|t| (t, width))
}

const LANES: [&str; 4] = ["x", "y", "z", "w"];

/// The loop rewritten with vector loads, and the vector type for the label; None when the
/// loop starts past the thread's element, reads no buffer at its variable, or reads
/// buffers of different widths there.
pub(super) fn vector_loop(
    cx: &RewriteContext<'_>,
    t: &Total<'_>,
    ind: &str,
    nl: &str,
    names: &mut BTreeSet<String>,
) -> Option<(String, &'static str)> {
    let src = cx.text;
    let own_element = match t.form {
        Form::BlockStride => t.start.kind() != "binary_expression",
        Form::Serial => text(src, t.start).trim() == "0",
    };
    let body = t.l.child_by_field_name("body")?;
    let reads = reads_at_var(cx, body, &t.var);
    let (vty, width) = common_vector(&reads)?;
    if !own_element {
        return None;
    }
    let ty = loop_var_type(src, t.l)?;
    let bound =
        t.l.child_by_field_name("condition")?
            .child_by_field_name("right")?;
    let n = format!("({})", text(src, bound));
    let buffers: BTreeSet<&str> = reads.iter().map(|r| r.buffer.as_str()).collect();
    let vname =
        |b: &str, names: &mut BTreeSet<String>| super::super::tree::fresh(&format!("{b}_v"), names);
    let vars: Vec<(&str, String)> = buffers.iter().map(|b| (*b, vname(b, names))).collect();
    let j = super::super::tree::fresh("j", names);
    let (i, i2, i3, i4) = (
        &t.var,
        format!("{ind}    "),
        format!("{ind}        "),
        format!("{ind}            "),
    );
    let aligned: Vec<String> = buffers.iter().map(|b| format!("(size_t){b}")).collect();
    let lane = "blockIdx.x * blockDim.x + threadIdx.x";
    let stride = "gridDim.x * blockDim.x";
    let mut o = format!("{{ // {width} elements a thread per trip ({vty} loads of {}) where they are 16-byte aligned; the rest one at a time{nl}", buffers.iter().copied().collect::<Vec<_>>().join(", "));
    o.push_str(&format!("{i2}{ty} {i} = {lane};{nl}"));
    o.push_str(&format!(
        "{i2}if ((({}) & 15) == 0) {{{nl}",
        aligned.join(" | ")
    ));
    o.push_str(&format!(
        "{i3}for ({ty} {j} = {i}; {j} < {n} / {width}; {j} += {stride}) {{{nl}"
    ));
    for (b, v) in &vars {
        o.push_str(&format!(
            "{i4}const {vty} {v} = reinterpret_cast<const {vty} *>({b})[{j}];{nl}"
        ));
    }
    let body_ind = line_indent(src, t.l.start_byte());
    for (k, lane) in LANES.iter().take(width).enumerate() {
        let copy = body_copy(src, body, &reads, &vars, lane);
        // The copy's own element, in a scope of its own, where the body still names it.
        if mentions(&copy, i) {
            let copy = reindent(&copy, body_ind, &format!("{i4}    "));
            o.push_str(&format!(
                "{i4}{{{nl}{i4}    const {ty} {i} = {width} * {j} + {k};{nl}{i4}    {copy}{nl}{i4}}}{nl}"
            ));
        } else {
            o.push_str(&format!("{i4}{}{nl}", reindent(&copy, body_ind, &i4)));
        }
    }
    o.push_str(&format!(
        "{i3}}}{nl}{i3}{i} = {n} / {width} * {width} + {lane};{nl}{i2}}}{nl}"
    ));
    o.push_str(&format!(
        "{i2}for (; {i} < {}; {i} += {stride}) {}{nl}{ind}}}",
        text(src, bound),
        text(src, body)
    ));
    Some((o, vty))
}

/// A read `p[i]` of a pointer parameter exactly at the loop variable.
struct Read {
    range: std::ops::Range<usize>,
    buffer: String,
    elem: String,
}

fn reads_at_var(cx: &RewriteContext<'_>, body: Node<'_>, var: &str) -> Vec<Read> {
    let src = cx.text;
    let pointers = pointer_params(cx);
    let mut out = Vec::new();
    walk(body, &mut |n| {
        if n.kind() != "subscript_expression" {
            return true;
        }
        let arg = n.child_by_field_name("argument");
        let ix = index_of(n).map(|x| text(src, x).trim().to_string());
        if let (Some(a), Some(ix)) = (arg, ix) {
            let b = text(src, a);
            if let Some(p) = pointers
                .get(b)
                .filter(|_| a.kind() == "identifier" && ix == var)
            {
                out.push(Read {
                    range: n.byte_range(),
                    buffer: b.to_string(),
                    elem: crate::syntax::normalize_type(p),
                });
            }
        }
        true
    });
    out
}

/// The one vector every read's element takes, or None.
fn common_vector(reads: &[Read]) -> Option<(&'static str, usize)> {
    let mut kinds = reads.iter().map(|r| vector_of(&r.elem));
    let first = kinds.next()??;
    kinds.all(|k| k == Some(first)).then_some(first)
}

fn loop_var_type(src: &str, l: Node<'_>) -> Option<String> {
    let init = l.child_by_field_name("initializer")?;
    Some(text(src, init.child_by_field_name("type")?).to_string())
}

/// Does `s` use the identifier `name`?
fn mentions(s: &str, name: &str) -> bool {
    s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w == name)
}

/// The loop body with each vectorized read replaced by its vector's lane `c`.
fn body_copy(
    src: &str,
    body: Node<'_>,
    reads: &[Read],
    vars: &[(&str, String)],
    c: &str,
) -> String {
    let base = body.start_byte();
    let mut out = text(src, body).to_string();
    for r in reads.iter().rev() {
        let v = &vars
            .iter()
            .find(|(b, _)| *b == r.buffer)
            .expect("every read's buffer has a vector")
            .1;
        out.replace_range(
            r.range.start - base..r.range.end - base,
            &format!("{v}.{c}"),
        );
    }
    out
}
