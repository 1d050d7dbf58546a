//! The loops of a Triton kernel body and what each one carries: the analysis that the
//! loop facts ([`LoopPass`], in [`super::Facts::triton_loops`]) and the Triton loop cures
//! (`triton_online`, `triton_row_tile`, `triton_split_loop`) read, so the diagnosis and
//! the rewrites cannot disagree. Pure: text and tree in, loops out.
//!
//! A loop is a statement of the kernel's body (not one nested in an `if` or another loop)
//! that walks a range: `for v in range(a, b, s)` (or `tl.range`), or the while form
//! `v = a` … `while v < b:` … `v += s` as its last statement. For each loop: its range as
//! text, its body statements, and its *carries*: names defined before the loop and
//! assigned inside it. A carry's combine is read from its updates: `c += E` or
//! `c = c + E` is a sum, `c = tl.maximum(c, E)` a max, `tl.minimum` a min, anything else
//! other; a sum read elsewhere in the loop is a running prefix. A carry is *lane-shaped*
//! (one value per `tl.arange` element) unless its updates reduce over the lanes
//! (`tl.sum`, `tl.max`, ...). A later loop *depends* on an earlier one when it reads one of
//! the earlier loop's carries.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tree_sitter::Node;

/// How a carry combines its updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    Sum,
    Max,
    Min,
    Other,
}

/// One carried name of a loop.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Carry<'t> {
    pub name: String,
    pub combine: Combine,
    /// One value per lane (not reduced over the lanes in its updates).
    pub lane: bool,
    /// Read in the loop other than by its own updates (a sum read so is a running prefix).
    pub read_in_loop: bool,
    /// The combined expression of each update (`E` of `c += E`, of `tl.maximum(c, E)`).
    pub updates: Vec<Node<'t>>,
}

/// One loop of the kernel body.
#[derive(Clone, Debug)]
pub(crate) struct Loop<'t> {
    pub node: Node<'t>,
    pub var: String,
    pub start: String,
    pub stop: String,
    pub step: String,
    /// The `for` header's argument list; None for a while loop.
    pub range_args: Option<Node<'t>>,
    /// While form: the `v = a` statement before it and the `v += s` closing its body.
    pub init: Option<Node<'t>>,
    pub incr: Option<Node<'t>>,
    /// Body statements (comments included), without the while form's increment.
    pub stmts: Vec<Node<'t>>,
    pub carries: Vec<Carry<'t>>,
    /// Names assigned anywhere in the body (the loop variable included).
    pub assigned: BTreeSet<String>,
    /// Names read anywhere in the body.
    pub reads: BTreeSet<String>,
    pub loads: u32,
    pub stores: u32,
    /// `tl.sum`/`tl.max`/`tl.dot`/... calls in the body.
    pub reductions: u32,
    /// The body holds another loop or a branch.
    pub nested: bool,
    /// The carries, and the names later body statements compute from them (`inv =
    /// 1 / tl.sqrt(tl.sum(sq) / n)`): what a later loop reading one of them depends on.
    pub results: BTreeSet<String>,
}

impl<'t> Loop<'t> {
    /// `start, stop, step` as one string, for comparing ranges.
    pub fn range_key(&self) -> String {
        format!("{}, {}, {}", self.start, self.stop, self.step)
    }

    /// The range of the offsets a loop over chunk indices walks: `for i in range(0,
    /// tl.cdiv(n, B))` whose body reads `i` only as `i * B` walks `0, n, B`, as `for off in
    /// range(0, n, B)` does; else the range as written.
    pub fn offset_range_key(&self, src: &str) -> String {
        match self.chunks(src) {
            Some(c) => format!("{}, {}, {}", c.start, c.n, c.block),
            None => self.range_key(),
        }
    }

    /// The chunk form of a `for` loop, when it is one (see [`Chunks`]).
    pub fn chunks(&self, src: &str) -> Option<Chunks<'t>> {
        if self.range_args.is_none() || self.step != "1" {
            return None;
        }
        let (n, block) = cdiv_args(&self.stop)?;
        let mut products = Vec::new();
        let mut other = false;
        for s in &self.stmts {
            walk_uses(
                src,
                *s,
                &self.var,
                &mut |use_| match chunk_product(src, use_, &block) {
                    Some(p) => products.push(p),
                    None => other = true,
                },
            );
        }
        if other || products.is_empty() {
            return None;
        }
        let start = match self.start.as_str() {
            "0" => "0".to_string(),
            s => format!("({s}) * {block}"),
        };
        Some(Chunks {
            start,
            n,
            block,
            products,
        })
    }
}

/// A loop over chunk indices read as offsets: `for i in range(S, tl.cdiv(n, B))` whose
/// body reads `i` only in products `i * B` (or `B * i`).
pub(crate) struct Chunks<'t> {
    /// The first offset: `0`, or `(S) * B`.
    pub start: String,
    pub n: String,
    pub block: String,
    /// Each `i * B` of the body.
    pub products: Vec<Node<'t>>,
}

/// `N, B` of `tl.cdiv(N, B)` (also `triton.cdiv`, `cdiv`) with `B` a plain name or number.
fn cdiv_args(stop: &str) -> Option<(String, String)> {
    let inner = ["tl.cdiv(", "triton.cdiv(", "cdiv("]
        .iter()
        .find_map(|f| stop.strip_prefix(f))?
        .strip_suffix(')')?;
    let (n, b) = inner.rsplit_once(',')?;
    let (n, b) = (n.trim(), b.trim());
    let plain = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    (plain(b) && !n.is_empty() && n.matches('(').count() == n.matches(')').count())
        .then(|| (n.to_string(), b.to_string()))
}

/// Every identifier `name` read in `n` (not as an attribute or a keyword's name).
fn walk_uses<'t>(src: &str, n: Node<'t>, name: &str, f: &mut dyn FnMut(Node<'t>)) {
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        if n.kind() == "identifier" && text(src, n) == name {
            let parent = n.parent();
            let attr = parent.is_some_and(|p| {
                (p.kind() == "attribute"
                    && p.child_by_field_name("attribute").map(|a| a.id()) == Some(n.id()))
                    || (p.kind() == "keyword_argument"
                        && p.child_by_field_name("name").map(|a| a.id()) == Some(n.id()))
            });
            if !attr {
                f(n);
            }
        }
        stack.extend(named(n));
    }
}

/// The product `v * B` or `B * v` that the use `v` is an operand of.
fn chunk_product<'t>(src: &str, v: Node<'t>, block: &str) -> Option<Node<'t>> {
    let p = v.parent().filter(|p| p.kind() == "binary_operator")?;
    let op = p.child_by_field_name("operator").map(|o| text(src, o));
    let (l, r) = (
        p.child_by_field_name("left")?,
        p.child_by_field_name("right")?,
    );
    let other = if l.id() == v.id() { r } else { l };
    (op == Some("*") && text(src, other).trim() == block).then_some(p)
}

impl Loop<'_> {
    pub fn carry(&self, name: &str) -> Option<&Carry<'_>> {
        self.carries.iter().find(|c| c.name == name)
    }

    /// The value `name` has when this loop ends is read by a statement after it: read
    /// before a statement after the loop sets it outright (`cols = off + tl.arange(...)`
    /// at the top of a later loop's body reads nothing of this loop's `cols`).
    pub fn reads_after(&self, src: &str, name: &str) -> bool {
        let mut after = Vec::new();
        let mut n = self.node.next_named_sibling();
        while let Some(s) = n {
            after.push(s);
            n = s.next_named_sibling();
        }
        read_before_set(src, &after, name) == Some(true)
    }
}

/// Whether the statements `stmts`, run in order, read `name` (Some(true)) or set it
/// outright first (Some(false)), or neither (None). A loop or a branch may not run, so
/// what it sets counts for its own body only.
pub(crate) fn read_before_set(src: &str, stmts: &[Node<'_>], name: &str) -> Option<bool> {
    let reads_it = |n: Option<Node<'_>>| {
        let mut r = BTreeSet::new();
        if let Some(n) = n {
            reads(src, n, &mut r);
        }
        r.contains(name)
    };
    let body_reads = |n: Option<Node<'_>>| {
        n.is_some_and(|b| read_before_set(src, &named(b), name) == Some(true))
    };
    for &s in stmts {
        let read = match s.kind() {
            "comment" | "pass_statement" => false,
            "for_statement" => {
                let own = s
                    .child_by_field_name("left")
                    .is_some_and(|l| text(src, l) == name);
                reads_it(s.child_by_field_name("right"))
                    || (!own && body_reads(s.child_by_field_name("body")))
            }
            "while_statement" => {
                reads_it(s.child_by_field_name("condition"))
                    || body_reads(s.child_by_field_name("body"))
            }
            "if_statement" => {
                let mut c = s.walk();
                let branches: Vec<Node> = s.children_by_field_name("alternative", &mut c).collect();
                reads_it(s.child_by_field_name("condition"))
                    || body_reads(s.child_by_field_name("consequence"))
                    || branches.into_iter().any(|b| {
                        reads_it(b.child_by_field_name("condition"))
                            || body_reads(
                                b.child_by_field_name("body")
                                    .or_else(|| b.child_by_field_name("consequence")),
                            )
                    })
            }
            _ => match assignment(src, s) {
                Some((n, op, right)) if n == name && op == "=" => {
                    return Some(reads_it(Some(right)));
                }
                _ => reads_it(Some(s)),
            },
        };
        if read {
            return Some(true);
        }
    }
    None
}

/// What the facts keep of a loop: serializable, no tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopPass {
    pub line: u32,
    pub var: String,
    /// `start, stop, step`.
    pub range: String,
    /// Each carry: name, combine, lane-shaped.
    pub carries: Vec<(String, Combine, bool)>,
    /// Lines of the earlier loops whose carries this one reads.
    pub depends_on: Vec<u32>,
    pub loads: u32,
    pub stores: u32,
    pub reductions: u32,
}

pub(crate) fn text<'s>(src: &'s str, n: Node<'_>) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

fn named(n: Node<'_>) -> Vec<Node<'_>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// `tl.load`, `triton.language.load` and `tl.math.exp` as written, shortened to the last
/// two dotted parts (`tl.load`, `math.exp`).
pub(crate) fn callee(src: &str, call: Node) -> String {
    let f = call
        .child_by_field_name("function")
        .map_or("", |f| text(src, f));
    f.strip_prefix("triton.language.")
        .map_or_else(|| f.to_string(), |r| format!("tl.{r}"))
}

/// Reductions over the lanes: their result has one value per program.
pub(crate) const LANE_REDUCTIONS: &[&str] = &[
    "tl.sum",
    "tl.max",
    "tl.min",
    "tl.argmax",
    "tl.argmin",
    "tl.reduce",
    "tl.xor_sum",
];

/// Every identifier `n` reads (attribute names and keyword names excluded).
pub(crate) fn reads(src: &str, n: Node<'_>, out: &mut BTreeSet<String>) {
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        match n.kind() {
            "identifier" => {
                let parent = n.parent();
                let is_attr = parent.is_some_and(|p| {
                    p.kind() == "attribute"
                        && p.child_by_field_name("attribute").map(|a| a.id()) == Some(n.id())
                });
                let is_kw = parent.is_some_and(|p| {
                    p.kind() == "keyword_argument"
                        && p.child_by_field_name("name").map(|a| a.id()) == Some(n.id())
                });
                if !is_attr && !is_kw {
                    out.insert(text(src, n).to_string());
                }
            }
            "comment" => {}
            _ => stack.extend(named(n)),
        }
    }
}

/// The assignment inside an expression statement: (left name, operator, right side).
/// Operator `=` for a plain assignment; None for anything but one name assigned.
pub(crate) fn assignment<'t>(src: &str, stmt: Node<'t>) -> Option<(String, String, Node<'t>)> {
    let a = if stmt.kind() == "expression_statement" {
        *named(stmt).first()?
    } else {
        stmt
    };
    let left = a
        .child_by_field_name("left")
        .filter(|l| l.kind() == "identifier")?;
    let right = a.child_by_field_name("right")?;
    let op = match a.kind() {
        "assignment" => "=".to_string(),
        "augmented_assignment" => text(src, a.child_by_field_name("operator")?).to_string(),
        _ => return None,
    };
    Some((text(src, left).to_string(), op, right))
}

/// Names a statement assigns, at any depth (tuple targets, loop variables included).
pub(crate) fn assigned(src: &str, n: Node<'_>, out: &mut BTreeSet<String>) {
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        match n.kind() {
            "assignment" | "augmented_assignment" => {
                if let Some(l) = n.child_by_field_name("left") {
                    let mut names = BTreeSet::new();
                    reads(src, l, &mut names);
                    out.extend(names);
                }
                if let Some(r) = n.child_by_field_name("right") {
                    stack.push(r);
                }
            }
            "for_statement" => {
                if let Some(l) = n.child_by_field_name("left") {
                    reads(src, l, out);
                }
                stack.extend(named(n));
            }
            _ => stack.extend(named(n)),
        }
    }
}

/// Count calls under `n` by kind: (loads, stores, reductions).
fn count_calls(src: &str, n: Node<'_>) -> (u32, u32, u32) {
    let (mut l, mut s, mut r) = (0, 0, 0);
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        if n.kind() == "call" {
            let name = callee(src, n);
            match name.as_str() {
                "tl.load" => l += 1,
                "tl.store" => s += 1,
                a if a.starts_with("tl.atomic_") => s += 1,
                "tl.dot" | "tl.cumsum" | "tl.cumprod" | "tl.associative_scan" => r += 1,
                a if LANE_REDUCTIONS.contains(&a) => r += 1,
                _ => {}
            }
        }
        stack.extend(named(n));
    }
    (l, s, r)
}

/// The statements of the kernel body, in order.
pub(crate) fn statements(body: Node<'_>) -> Vec<Node<'_>> {
    named(body)
}

/// Every loop among `top` (the kernel body's statements).
pub(crate) fn loops<'t>(src: &str, top: &[Node<'t>]) -> Vec<Loop<'t>> {
    let mut out = Vec::new();
    for (i, s) in top.iter().enumerate() {
        let Some(mut l) = header(src, *s, &top[..i]) else {
            continue;
        };
        let mut before = BTreeSet::new();
        for p in &top[..i] {
            assigned(src, *p, &mut before);
        }
        let body = l.stmts.clone();
        for st in &body {
            assigned(src, *st, &mut l.assigned);
            reads(src, *st, &mut l.reads);
            let (a, b, c) = count_calls(src, *st);
            l.loads += a;
            l.stores += b;
            l.reductions += c;
            l.nested |= has_nested(*st);
        }
        l.assigned.insert(l.var.clone());
        let names: Vec<String> = l
            .assigned
            .iter()
            .filter(|n| before.contains(*n) && **n != l.var && !fresh_each_pass(src, &body, n))
            .cloned()
            .collect();
        l.carries = names.into_iter().map(|n| carry(src, &body, n)).collect();
        l.results = l.carries.iter().map(|c| c.name.clone()).collect();
        for later in &top[i + 1..] {
            let mut r = BTreeSet::new();
            reads(src, *later, &mut r);
            if r.iter().any(|n| l.results.contains(n)) && later.kind() == "expression_statement" {
                assigned(src, *later, &mut l.results);
            }
        }
        out.push(l);
    }
    out
}

/// The first statement of the body that mentions `name` assigns it without reading it:
/// a local recomputed each iteration, not a carry.
fn fresh_each_pass(src: &str, stmts: &[Node<'_>], name: &str) -> bool {
    for st in stmts {
        let (mut a, mut r) = (BTreeSet::new(), BTreeSet::new());
        assigned(src, *st, &mut a);
        reads(src, *st, &mut r);
        if r.contains(name) {
            // `x = f(...)`: the target is not a read; anything else reading it is.
            return match assignment(src, *st) {
                Some((n, op, right)) if n == name && op == "=" => {
                    let mut rr = BTreeSet::new();
                    reads(src, right, &mut rr);
                    !rr.contains(name)
                }
                _ => false,
            };
        }
        if a.contains(name) {
            return true;
        }
    }
    false
}

fn has_nested(n: Node<'_>) -> bool {
    let mut stack = vec![n];
    while let Some(n) = stack.pop() {
        if matches!(
            n.kind(),
            "for_statement" | "while_statement" | "if_statement" | "with_statement"
        ) {
            return true;
        }
        stack.extend(named(n));
    }
    false
}

/// The range of a `for` or while loop statement; None for any other statement.
fn header<'t>(src: &str, s: Node<'t>, earlier: &[Node<'t>]) -> Option<Loop<'t>> {
    let body = s.child_by_field_name("body")?;
    let stmts = named(body);
    let mut l = Loop {
        node: s,
        var: String::new(),
        start: "0".into(),
        stop: String::new(),
        step: "1".into(),
        range_args: None,
        init: None,
        incr: None,
        stmts: stmts.clone(),
        carries: Vec::new(),
        assigned: BTreeSet::new(),
        reads: BTreeSet::new(),
        loads: 0,
        stores: 0,
        reductions: 0,
        nested: false,
        results: BTreeSet::new(),
    };
    match s.kind() {
        "for_statement" => {
            let var = s
                .child_by_field_name("left")
                .filter(|v| v.kind() == "identifier")?;
            let call = s
                .child_by_field_name("right")
                .filter(|r| r.kind() == "call")?;
            if !matches!(callee(src, call).as_str(), "range" | "tl.range") {
                return None;
            }
            let args = call.child_by_field_name("arguments")?;
            let pos: Vec<String> = named(args)
                .into_iter()
                .filter(|a| a.kind() != "keyword_argument" && a.kind() != "comment")
                .map(|a| collapse(text(src, a)))
                .collect();
            match pos.as_slice() {
                [b] => l.stop = b.clone(),
                [a, b] => (l.start, l.stop) = (a.clone(), b.clone()),
                [a, b, c] => (l.start, l.stop, l.step) = (a.clone(), b.clone(), c.clone()),
                _ => return None,
            }
            l.var = text(src, var).to_string();
            l.range_args = Some(args);
        }
        "while_statement" => {
            let cond = s.child_by_field_name("condition")?;
            let parts = named(cond);
            let (var, stop) = match (cond.kind(), parts.as_slice()) {
                ("comparison_operator", [v, b]) if v.kind() == "identifier" => {
                    let op = cond.child(1).map_or("", |o| text(src, o));
                    (op == "<").then_some((text(src, *v).to_string(), collapse(text(src, *b))))?
                }
                _ => return None,
            };
            let last = *stmts.iter().rev().find(|n| n.kind() != "comment")?;
            let (name, op, right) = assignment(src, last)?;
            let step = match op.as_str() {
                "+=" if name == var => collapse(text(src, right)),
                "=" if name == var => {
                    let t = collapse(text(src, right));
                    t.strip_prefix(&format!("{var} + "))?.to_string()
                }
                _ => return None,
            };
            let init = earlier
                .iter()
                .rev()
                .find(|e| assignment(src, **e).is_some_and(|(n, _, _)| n == var))?;
            let (_, iop, ival) = assignment(src, *init)?;
            if iop != "=" {
                return None;
            }
            l.start = collapse(text(src, ival));
            l.var = var;
            l.stop = stop;
            l.step = step;
            l.init = Some(*init);
            l.incr = Some(last);
            l.stmts.retain(|n| n.id() != last.id());
        }
        _ => return None,
    }
    Some(l)
}

/// How `name` is carried by a loop of body `stmts`.
fn carry<'t>(src: &str, stmts: &[Node<'t>], name: String) -> Carry<'t> {
    let mut combine = None::<Combine>;
    let mut updates = Vec::new();
    let mut read_in_loop = false;
    let mut other = false;
    for st in stmts {
        match assignment(src, *st) {
            Some((n, op, right)) if n == name => match update(src, &name, &op, right) {
                Some((c, e)) if combine.is_none_or(|k| k == c) => {
                    combine = Some(c);
                    updates.push(e);
                    let mut r = BTreeSet::new();
                    reads(src, e, &mut r);
                    read_in_loop |= r.contains(&name);
                }
                _ => other = true,
            },
            _ => {
                let (mut a, mut r) = (BTreeSet::new(), BTreeSet::new());
                assigned(src, *st, &mut a);
                reads(src, *st, &mut r);
                other |= a.contains(&name);
                read_in_loop |= r.contains(&name);
            }
        }
    }
    let lane = !updates.iter().all(|e| reduces(src, *e));
    Carry {
        name,
        combine: if other {
            Combine::Other
        } else {
            combine.unwrap_or(Combine::Other)
        },
        lane,
        read_in_loop,
        updates,
    }
}

/// `E` reduces over the lanes: a reduction call, or a call, product or sum of them.
pub(crate) fn reduces(src: &str, e: Node<'_>) -> bool {
    let mut e = e;
    while e.kind() == "parenthesized_expression" {
        match named(e).first() {
            Some(c) => e = *c,
            None => return false,
        }
    }
    e.kind() == "call" && LANE_REDUCTIONS.contains(&callee(src, e).as_str())
}

/// The depth of the deepest node under `n` (iterative: any input depth is safe).
pub(crate) fn depth(n: Node<'_>) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(n, 0usize)];
    while let Some((n, d)) = stack.pop() {
        deepest = deepest.max(d);
        let mut w = n.walk();
        stack.extend(n.named_children(&mut w).map(|c| (c, d + 1)));
    }
    deepest
}

/// The combine and combined expression of one update `name OP right`.
fn update<'t>(src: &str, name: &str, op: &str, right: Node<'t>) -> Option<(Combine, Node<'t>)> {
    let is = |n: Node<'_>| n.kind() == "identifier" && text(src, n) == name;
    match op {
        "+=" => Some((Combine::Sum, right)),
        "=" => match right.kind() {
            "binary_operator" => {
                let (l, r) = (
                    right.child_by_field_name("left")?,
                    right.child_by_field_name("right")?,
                );
                let o = text(src, right.child_by_field_name("operator")?);
                match (o, is(l), is(r)) {
                    ("+", true, false) => Some((Combine::Sum, r)),
                    ("+", false, true) => Some((Combine::Sum, l)),
                    _ => None,
                }
            }
            "call" => {
                let c = match callee(src, right).as_str() {
                    "tl.maximum" => Combine::Max,
                    "tl.minimum" => Combine::Min,
                    _ => return None,
                };
                let args: Vec<Node> = named(right.child_by_field_name("arguments")?)
                    .into_iter()
                    .filter(|a| a.kind() != "comment")
                    .collect();
                match args.as_slice() {
                    [a, b] if is(*a) && !is(*b) => Some((c, *b)),
                    [a, b] if is(*b) && !is(*a) => Some((c, *a)),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whitespace runs collapsed to one space.
pub(crate) fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The facts' summary of `loops`.
pub(crate) fn summarize(src: &str, loops: &[Loop<'_>]) -> Vec<LoopPass> {
    loops
        .iter()
        .enumerate()
        .map(|(i, l)| LoopPass {
            line: l.node.start_position().row as u32 + 1,
            var: l.var.clone(),
            range: l.offset_range_key(src),
            carries: l
                .carries
                .iter()
                .map(|c| (c.name.clone(), c.combine, c.lane))
                .collect(),
            depends_on: loops[..i]
                .iter()
                .filter(|e| e.results.iter().any(|c| l.reads.contains(c)))
                .map(|e| e.node.start_position().row as u32 + 1)
                .collect(),
            loads: l.loads,
            stores: l.stores,
            reductions: l.reductions,
        })
        .collect()
}

/// One bullet per loop for prompts: its range, what it carries, which loops it reads.
pub fn describe(passes: &[LoopPass]) -> Vec<String> {
    passes
        .iter()
        .map(|l| {
            let carries: Vec<String> = l
                .carries
                .iter()
                .map(|(n, c, lane)| {
                    let what = match c {
                        Combine::Sum => "a sum",
                        Combine::Max => "a maximum",
                        Combine::Min => "a minimum",
                        Combine::Other => "a value",
                    };
                    let shape = if *lane {
                        "per lane"
                    } else {
                        "reduced over the lanes"
                    };
                    format!("`{n}` ({what}, {shape})")
                })
                .collect();
            let mut s = format!(
                "- Triton loop at line {} over `{}` in range({})",
                l.line, l.var, l.range
            );
            s.push_str(&match carries.as_slice() {
                [] => ": carries nothing".to_string(),
                c => format!(": carries {}", c.join(", ")),
            });
            if !l.depends_on.is_empty() {
                let lines: Vec<String> = l.depends_on.iter().map(u32::to_string).collect();
                s.push_str(&format!(
                    "; reads the results of the loop(s) at line {}",
                    lines.join(", ")
                ));
            }
            s
        })
        .collect()
}

/// A later loop over the same range reads an earlier loop's max or sum: two passes where
/// one could do (online rescaling, or the row kept in registers).
pub fn multi_pass(passes: &[LoopPass]) -> bool {
    passes.iter().enumerate().any(|(j, l)| {
        passes[..j].iter().any(|e| {
            e.range == l.range
                && l.depends_on.contains(&e.line)
                && e.carries
                    .iter()
                    .any(|c| matches!(c.1, Combine::Max | Combine::Sum))
        })
    })
}

/// A loop of unit step that loads on every iteration and carries a lane-shaped sum, max
/// or min, with no reduction over the lanes inside: each program walks a long axis one
/// element per lane at a time.
pub fn sequential_axis(passes: &[LoopPass]) -> bool {
    passes.iter().any(|l| {
        l.range.ends_with(", 1")
            && l.loads > 0
            && l.stores == 0
            && l.reductions == 0
            && !l.carries.is_empty()
            && l.carries
                .iter()
                .all(|c| c.2 && matches!(c.1, Combine::Sum | Combine::Max | Combine::Min))
    })
}

/// A loop that loads on every iteration, stores nothing, and whose carries are all sums,
/// maxima or minima reduced over the lanes, its reductions no more than its carries: each
/// iteration reduces its tile across the lanes (a barrier when the lanes span warps)
/// where the tiles could be added up first and reduced once.
pub fn reduce_every_step(passes: &[LoopPass]) -> bool {
    passes.iter().any(|l| {
        l.loads > 0
            && l.stores == 0
            && l.reductions > 0
            && l.reductions as usize <= l.carries.len()
            && l.carries
                .iter()
                .all(|c| !c.2 && matches!(c.1, Combine::Sum | Combine::Max | Combine::Min))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::Lang;

    fn passes(src: &str) -> Vec<LoopPass> {
        let doc = crate::document::Document::new(Lang::Triton, 0, src);
        let tree = doc.tree().expect("parses");
        let def = tree
            .root_node()
            .named_child(0)
            .and_then(|d| {
                if d.kind() == "decorated_definition" {
                    d.child_by_field_name("definition")
                } else {
                    Some(d)
                }
            })
            .expect("a def");
        let body = def.child_by_field_name("body").expect("a body");
        let top = statements(body);
        summarize(src, &loops(src, &top))
    }

    const THREE_PASS: &str = "def k(x, y, n, B: tl.constexpr):\n    r = tl.program_id(0)\n    m = -float('inf')\n    for off in range(0, n, B):\n        c = off + tl.arange(0, B)\n        v = tl.load(x + r * n + c, mask=c < n, other=-float('inf'))\n        m = tl.maximum(m, tl.max(v, 0))\n    s = 0.0\n    i = 0\n    while i < n:\n        c = i + tl.arange(0, B)\n        v = tl.load(x + r * n + c, mask=c < n, other=-float('inf'))\n        s += tl.sum(tl.exp(v - m), 0)\n        i += B\n    for off in range(0, n, B):\n        c = off + tl.arange(0, B)\n        v = tl.load(x + r * n + c, mask=c < n)\n        tl.store(y + r * n + c, tl.exp(v - m) / s, mask=c < n)\n";

    /// Whether the statements of `body` (a function body's lines) read `name` before
    /// they set it.
    fn read_first(body: &str, name: &str) -> Option<bool> {
        let src = format!("def k(x, n, B: tl.constexpr):\n{body}");
        let doc = crate::document::Document::new(Lang::Triton, 0, &src);
        let tree = doc.tree().expect("parses");
        let def = tree.root_node().named_child(0).expect("a def");
        let stmts = statements(def.child_by_field_name("body").expect("a body"));
        read_before_set(&src, &stmts, name)
    }

    #[test]
    fn a_name_set_outright_before_it_is_read_is_not_read() {
        let later_loop = "    for off in range(0, n, B):\n        c = off + tl.arange(0, B)\n        tl.store(x + c, 1.0, mask=c < n)\n";
        assert_eq!(read_first(later_loop, "c"), None);
        assert_eq!(read_first("    c = 3\n    y = c\n", "c"), Some(false));
        assert_eq!(
            read_first("    c = c + 1\n", "c"),
            Some(true),
            "the new value reads the old"
        );
        assert_eq!(read_first("    c += 1\n", "c"), Some(true));
        assert_eq!(read_first("    y = c\n    c = 3\n", "c"), Some(true));
        // A loop may not run: what follows it still sees the old value.
        let maybe = "    for off in range(0, n, B):\n        c = off\n    y = c\n";
        assert_eq!(read_first(maybe, "c"), Some(true));
        // Read in a loop body before it is set there, in a branch, in a while condition.
        let first = "    for off in range(0, n, B):\n        y = c\n        c = off\n";
        assert_eq!(read_first(first, "c"), Some(true));
        let branch = "    if n > 4:\n        y = 1\n    elif n > 2:\n        y = c\n";
        assert_eq!(read_first(branch, "c"), Some(true));
        assert_eq!(
            read_first("    while c < n:\n        n -= 1\n", "c"),
            Some(true)
        );
        // The loop's own variable is set by the loop.
        let own = "    for c in range(0, n, B):\n        y = c\n";
        assert_eq!(read_first(own, "c"), None);
        assert_eq!(read_first("    y = range(c)\n", "c"), Some(true));
    }

    #[test]
    fn a_loop_over_chunk_indices_read_as_offsets_walks_the_offsets() {
        let src = "def k(x, y, n, B: tl.constexpr):\n    acc = tl.zeros([B], dtype=tl.float32)\n    for i in range(0, tl.cdiv(n, B)):\n        offs = i * B + tl.arange(0, B)\n        acc += tl.load(x + offs, mask=offs < n, other=0.0)\n    tl.store(y, tl.sum(acc, axis=0))\n";
        let p = passes(src);
        assert_eq!(p[0].range, "0, n, B");
        assert!(
            !sequential_axis(&p),
            "a tile of B offsets a step, not one row"
        );
        let started = src.replace("range(0, tl.cdiv(n, B))", "tl.range(2, triton.cdiv(n, B))");
        assert_eq!(passes(&started)[0].range, "(2) * B, n, B");
        // The index read as itself, or a product by another number: as written.
        let own = src.replace("other=0.0)\n", "other=0.0) * i\n");
        assert_eq!(passes(&own)[0].range, "0, tl.cdiv(n, B), 1");
        let other = src.replace("i * B +", "i * 64 +");
        assert_eq!(passes(&other)[0].range, "0, tl.cdiv(n, B), 1");
    }

    #[test]
    fn three_passes_over_a_row_carry_a_max_then_a_sum_and_the_last_reads_both() {
        let p = passes(THREE_PASS);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].carries, [("m".to_string(), Combine::Max, false)]);
        assert_eq!(p[1].carries, [("s".to_string(), Combine::Sum, false)]);
        assert_eq!(p[1].var, "i");
        assert_eq!(
            p[1].range, p[0].range,
            "the while form walks the same range"
        );
        assert_eq!(p[1].depends_on, [p[0].line]);
        assert_eq!(p[2].depends_on, [p[0].line, p[1].line]);
        assert_eq!(p[2].carries, []);
        assert!(multi_pass(&p));
        assert!(!sequential_axis(&p));
        assert!(
            reduce_every_step(&p),
            "the max and the sum reduce a tile every step"
        );
        assert_eq!(
            describe(&p)[1],
            "- Triton loop at line 10 over `i` in range(0, n, B): carries `s` (a sum, reduced over the lanes); reads the results of the loop(s) at line 4"
        );
    }

    #[test]
    fn a_column_sum_walks_rows_one_at_a_time_with_a_lane_accumulator() {
        let src = "def col(x, y, M, N, B: tl.constexpr):\n    cols = tl.program_id(0) * B + tl.arange(0, B)\n    acc = tl.zeros([B], dtype=tl.float32)\n    for r in range(M):\n        acc += tl.load(x + r * N + cols, mask=cols < N)\n    tl.store(y + cols, acc, mask=cols < N)\n";
        let p = passes(src);
        assert_eq!(p[0].carries, [("acc".to_string(), Combine::Sum, true)]);
        assert_eq!(p[0].range, "0, M, 1");
        assert!(sequential_axis(&p));
        assert!(!multi_pass(&p));
        assert!(!reduce_every_step(&p), "a lane accumulator reduces nothing");
        // A running prefix is not an accumulator the lanes may share.
        let scan = "def cs(x, y, n, B: tl.constexpr):\n    carry = 0.0\n    for off in range(0, n, B):\n        c = off + tl.arange(0, B)\n        v = tl.load(x + c, mask=c < n)\n        tl.store(y + c, tl.cumsum(v, 0) + carry, mask=c < n)\n        carry = carry + tl.sum(v, 0)\n";
        let p = passes(scan);
        assert_eq!(p[0].depends_on, Vec::<u32>::new());
        assert_eq!(p[0].carries, [("carry".to_string(), Combine::Sum, false)]);
        assert!(!sequential_axis(&p) && !multi_pass(&p));
        assert!(!reduce_every_step(&p), "it stores every step");
    }

    #[test]
    fn a_value_computed_from_a_sum_between_the_loops_makes_the_later_loop_depend() {
        let src = "def rms(x, y, n, B: tl.constexpr):\n    sq = tl.zeros([B], dtype=tl.float32)\n    for i in range(0, n, B):\n        j = i + tl.arange(0, B)\n        v = tl.load(x + j, mask=j < n, other=0.0)\n        sq += v * v\n    inv = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / n)\n    for i in range(0, n, B):\n        j = i + tl.arange(0, B)\n        tl.store(y + j, tl.load(x + j, mask=j < n) * inv, mask=j < n)\n";
        let p = passes(src);
        assert_eq!(p[1].depends_on, [p[0].line]);
        assert!(multi_pass(&p));
    }
}
