//! Row staging, the `warp_regs` and `block_regs` modes of `cooperative_rows`: a row read
//! (or written) in several column loops is kept in registers between them, so it crosses
//! global memory once each way instead of once per pass (softmax's max, sum and
//! normalize passes; layer norm's mean, variance and scale).
//!
//! Every column loop is given the same split of columns between lanes (column `c` to
//! lane `c % W`, team width `W`): a *head* over the lane's first `R` columns, unrolled so
//! that slot `j` of a register array `x_r[R]` holds column `lane + W * j` in every loop,
//! and a *tail* that walks the columns past `R * W` through global memory as before. A
//! row longer than the registers is still computed, only the head is staged. A
//! read-only buffer is loaded into its registers once, before the first loop that reads
//! it (over the columns its loops read); a written buffer's registers are stored once,
//! after the last loop that touches it, over the columns its first loop writes.
//!
//! **Stages** a buffer touched in two or more column loops, only at the row's own
//! element (`base + c` with `base` the same everywhere and made of names that no column
//! loop changes), and, when written, not read or written outside column loops, its first
//! loop writing it with a plain `=` statement (not under a condition, before any read of
//! it, and with no `continue`) so that every staged column is written before it is read.
//! **Refuses** (the staged modes only; the other modes are unchanged): column loops that
//! are not `for (T c = LITERAL; c < END; c++)` with one END shared by all, loops at
//! different nesting levels, an END that is neither a literal nor a scalar parameter
//! the spec sets, or no buffer that qualifies.

use std::collections::BTreeSet;

use tree_sitter::Node;

use super::super::access::{canon, contains, Access, Scope};
use super::super::edits::{Edit, Edits};
use super::super::poly::poly;
use super::super::tree::{fresh, line_indent, reindent, text, walk, written_target};
use super::{loop_names, ColumnLoop};
use crate::spec::{Arg, BenchPlan, Value};
use crate::syntax::{ByteRange, ParamKind};

/// Registers a thread may spend on staged columns, all buffers together.
const STAGE_REGISTERS: u64 = 64;

/// Which buffers a staged variant keeps in registers, and how its loops run.
pub(super) struct Stage {
    /// Per column loop (same order as the plan's loops): the declared type of its
    /// variable and its literal start.
    loops: Vec<(String, i64)>,
    /// The bound every column loop shares (`cols`) and its largest value over the cases.
    end: String,
    max_end: u64,
    buffers: Vec<Staged>,
}

struct Staged {
    buffer: String,
    ty: String,
    written: bool,
    /// An access of the buffer's element at the loop variable `var`, as the author wrote it.
    access: String,
    var: String,
    /// The lowest column the buffer's loops touch (loaded from here; written from here).
    start: i64,
    first: usize,
    last: usize,
    /// Accesses inside column loops, replaced by the register slot in the head.
    nodes: Vec<ByteRange>,
}

impl Stage {
    /// Registers per staged buffer for a team of `width` lanes: enough for the longest
    /// row of the spec's cases, within [`STAGE_REGISTERS`].
    pub fn registers(&self, width: u64) -> u64 {
        let cap = STAGE_REGISTERS / self.buffers.len().max(1) as u64;
        self.max_end.div_ceil(width.max(1)).clamp(1, cap.max(1))
    }

    pub fn describe(&self) -> String {
        self.buffers
            .iter()
            .map(|b| format!("`{}`", b.buffer))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The stage of a cooperative row plan, or why none can be made.
pub(super) fn plan<'t>(
    kernel: &crate::syntax::Kernel,
    spec: &BenchPlan,
    scope: &Scope<'_, 't>,
    accesses: &[Access<'t>],
    loops: &[ColumnLoop<'t>],
    body: &[Node<'t>],
) -> Result<Stage, String> {
    let src = scope.src;
    // Loop shapes: `for (T c = LIT; c < END; ...)`, step 1, one END, one parent.
    let mut shapes = Vec::new();
    let mut end: Option<String> = None;
    let parent = loops.first().and_then(|l| l.node.parent()).map(|p| p.id());
    for l in loops {
        let at = super::first_line(text(src, l.node));
        let decl = l
            .node
            .child_by_field_name("initializer")
            .filter(|i| l.node.kind() == "for_statement" && i.kind() == "declaration")
            .ok_or_else(|| format!("`{at}` does not declare its variable in a `for` header"))?;
        let ty = decl
            .child_by_field_name("type")
            .map(|t| text(src, t).to_string())
            .ok_or_else(|| format!("`{at}` has no declared type"))?;
        let start = text(src, l.init)
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|s| *s >= 0)
            .ok_or_else(|| format!("`{at}` does not start at a literal column"))?;
        if l.step != 1 {
            return Err(format!("`{at}` does not step by one column"));
        }
        let cond = l.node.child_by_field_name("condition");
        let bound = cond
            .filter(|c| c.kind() == "binary_expression")
            .filter(|c| c.child_by_field_name("operator").map(|o| text(src, o)) == Some("<"))
            .filter(|c| c.child_by_field_name("left").map(|o| text(src, o)) == Some(&l.var))
            .and_then(|c| c.child_by_field_name("right"))
            .ok_or_else(|| format!("`{at}` is not bounded by `{} < END`", l.var))?;
        let b = text(src, bound).to_string();
        match &end {
            Some(e) if canon(e) != canon(&b) => {
                return Err(format!("column loops end at `{e}` and at `{b}`"))
            }
            None => end = Some(b),
            _ => {}
        }
        if l.node.parent().map(|p| p.id()) != parent {
            return Err("column loops sit at different nesting levels".into());
        }
        shapes.push((ty, start));
    }
    let end = end.ok_or("no column loop")?;
    let max_end = max_value(spec, &end).ok_or_else(|| {
        format!(
            "the column bound `{end}` is neither a literal nor a scalar parameter the spec sets"
        )
    })?;

    let in_loop = |n: Node| loops.iter().position(|l| contains(l.node, n));
    let assigned = assigned_names(src, body);
    let mut buffers = Vec::new();
    let mut reasons = Vec::new();
    let names: BTreeSet<&String> = accesses.iter().map(|a| &a.buffer).collect();
    for b in names {
        let mine: Vec<&Access> = accesses.iter().filter(|a| a.buffer == *b).collect();
        let touched: BTreeSet<usize> = mine.iter().filter_map(|a| in_loop(a.node)).collect();
        if touched.len() < 2 {
            continue;
        }
        match stage_buffer(
            kernel, scope, loops, &shapes, &mine, &touched, &assigned, b, &in_loop,
        ) {
            Ok(s) => buffers.push(s),
            Err(why) => reasons.push(why),
        }
    }
    if buffers.is_empty() {
        return Err(if reasons.is_empty() {
            "no buffer is touched in two or more column loops".into()
        } else {
            reasons.join("; ")
        });
    }
    Ok(Stage {
        loops: shapes,
        end,
        max_end,
        buffers,
    })
}

#[allow(clippy::too_many_arguments)]
fn stage_buffer<'t>(
    kernel: &crate::syntax::Kernel,
    scope: &Scope<'_, 't>,
    loops: &[ColumnLoop<'t>],
    shapes: &[(String, i64)],
    mine: &[&Access<'t>],
    touched: &BTreeSet<usize>,
    assigned: &BTreeSet<String>,
    b: &str,
    in_loop: &dyn Fn(Node<'t>) -> Option<usize>,
) -> Result<Staged, String> {
    let src = scope.src;
    let written = scope.written.contains(b);
    let first = *touched.first().expect("two or more");
    let last = *touched.last().expect("two or more");
    let mut want = None;
    let mut nodes = Vec::new();
    for a in mine {
        let at = super::first_line(text(src, a.node));
        let Some(i) = in_loop(a.node) else {
            if written {
                return Err(format!(
                    "`{b}` is also touched outside column loops (`{at}`)"
                ));
            }
            continue;
        };
        let names = loop_names(scope, &loops[i]);
        let p = a
            .parts
            .iter()
            .fold(Default::default(), |acc: super::Poly, part| {
                acc.add(&poly(src, *part, &names), 1)
            });
        if p.tainted() || p.linear_in("$c").and_then(|c| c.as_constant()) != Some(1) {
            return Err(format!(
                "`{at}` is not `{b}`'s element at the row's own column"
            ));
        }
        match &want {
            Some(q) if *q != p => {
                return Err(format!(
                    "`{b}` is touched at more than one element per column"
                ))
            }
            None => want = Some(p),
            _ => {}
        }
        nodes.push(a.node.byte_range());
    }
    // The access text the prologue and epilogue reuse: names no column loop changes.
    let head = mine
        .iter()
        .find(|a| in_loop(a.node) == Some(first))
        .expect("touched by its first loop");
    let var = loops[first].var.clone();
    let decl_end = loops[first].start;
    let mut bad = None;
    walk(head.node, &mut |n| {
        if n.kind() == "identifier" {
            let t = text(src, n);
            let param = kernel.params.iter().any(|p| p.name == t);
            if t != var
                && (assigned.contains(t) || !(param || declared_before(src, n, t, decl_end)))
            {
                bad = Some(t.to_string());
            }
        }
        bad.is_none()
    });
    if let Some(t) = bad {
        return Err(format!(
            "`{}` names `{t}`, which is not fixed for the whole row",
            text(src, head.node)
        ));
    }
    let mut start = touched.iter().map(|i| shapes[*i].1).min().unwrap_or(0);
    if written {
        // The first loop writes every staged column before anything reads it.
        let l = &loops[first];
        let first_access = mine
            .iter()
            .filter(|a| contains(l.node, a.node))
            .min_by_key(|a| a.node.start_byte())
            .expect("touched");
        let plain = first_access
            .node
            .parent()
            .filter(|p| p.kind() == "assignment_expression")
            .filter(|p| {
                p.child_by_field_name("left").map(|x| x.id()) == Some(first_access.node.id())
            })
            .filter(|p| p.child_by_field_name("operator").map(|o| text(src, o)) == Some("="));
        let stmt = plain.and_then(|p| p.parent()).filter(|s| {
            s.kind() == "expression_statement"
                && s.parent().is_some_and(|b| {
                    b.id() == l.node.id()
                        || (b.kind() == "compound_statement"
                            && b.parent().is_some_and(|f| f.id() == l.node.id()))
                })
        });
        let Some(stmt) = stmt else {
            return Err(format!(
                "`{b}`'s first column loop does not begin by writing it with a plain `=` statement"
            ));
        };
        let assign = plain.expect("checked");
        if mine
            .iter()
            .any(|a| a.node.id() != first_access.node.id() && contains(assign, a.node))
        {
            return Err(format!(
                "`{}` reads `{b}` before writing it",
                text(src, stmt)
            ));
        }
        for i in touched {
            let mut cont = false;
            walk(loops[*i].node, &mut |n| {
                cont |= n.kind() == "continue_statement";
                !cont
            });
            if cont {
                return Err(format!("a column loop over `{b}` has a `continue`"));
            }
        }
        start = shapes[first].1;
    }
    let ty = kernel
        .params
        .iter()
        .find_map(|p| match &p.kind {
            ParamKind::Pointer { pointee, .. } if p.name == b => Some(pointee.clone()),
            _ => None,
        })
        .ok_or_else(|| format!("`{b}`'s element type is not known"))?;
    Ok(Staged {
        buffer: b.to_string(),
        ty,
        written,
        access: text(src, head.node).to_string(),
        var,
        start,
        first,
        last,
        nodes,
    })
}

/// Names assigned (`=`, compound, `++`/`--`) anywhere in the row body.
fn assigned_names(src: &str, body: &[Node<'_>]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for &root in body {
        walk(root, &mut |n| {
            if matches!(n.kind(), "assignment_expression" | "update_expression") {
                let t = written_target(n);
                if let Some(t) = t.filter(|t| t.kind() == "identifier") {
                    out.insert(text(src, t).to_string());
                }
            }
            true
        });
    }
    out
}

/// Is `name` declared before byte `end`, in a scope around the use `at`?
fn declared_before(src: &str, at: Node<'_>, name: &str, end: usize) -> bool {
    let mut scope = at.parent();
    while let Some(s) = scope {
        if s.kind() == "compound_statement" {
            for d in super::named_children(s) {
                if d.kind() == "declaration" && d.end_byte() <= end {
                    let mut c = d.walk();
                    for decl in d.children_by_field_name("declarator", &mut c) {
                        let id = match decl.kind() {
                            "init_declarator" => decl.child_by_field_name("declarator"),
                            _ => Some(decl),
                        };
                        let mut found = false;
                        if let Some(id) = id {
                            walk(id, &mut |x| {
                                found |= x.kind() == "identifier" && text(src, x) == name;
                                !found
                            });
                        }
                        if found {
                            return true;
                        }
                    }
                }
            }
        }
        scope = s.parent();
    }
    false
}

/// The largest value of a bound over the spec's cases: a literal, or a scalar parameter.
fn max_value(spec: &BenchPlan, bound: &str) -> Option<u64> {
    let b = bound.trim();
    if let Ok(v) = b.parse::<u64>() {
        return Some(v);
    }
    let mut max = None;
    for case in &spec.cases {
        let v = case.args.iter().find_map(|a| match a {
            Arg::Scalar {
                name,
                value: Value::Int(v),
                ..
            } if name == b => u64::try_from(*v).ok(),
            _ => None,
        })?;
        max = Some(max.map_or(v, |m: u64| m.max(v)));
    }
    max
}

/// Fresh names of a staged variant: the slot index and one register array per buffer.
pub(super) struct StageNames {
    slot: String,
    regs: Vec<String>,
}

pub(super) fn names(stage: &Stage, taken: &mut BTreeSet<String>) -> StageNames {
    StageNames {
        slot: fresh("j", taken),
        regs: stage
            .buffers
            .iter()
            .map(|b| fresh(&format!("{}_r", b.buffer), taken))
            .collect(),
    }
}

/// Edits for one column loop `i`: the loop replaced by head and tail, registers
/// declared and loaded before it, stored after it. `lane` and `width` (the stride's
/// text) come from the team; `r` is the registers per buffer.
#[allow(clippy::too_many_arguments)]
pub(super) fn loop_edits(
    src: &str,
    stage: &Stage,
    n: &StageNames,
    loops: &[ColumnLoop<'_>],
    i: usize,
    lane: &str,
    width: &str,
    r: u64,
    unit: &str,
    nl: &str,
) -> Vec<Edit> {
    let l = &loops[i];
    let ind = line_indent(src, l.start).to_string();
    let i1 = format!("{ind}{unit}");
    let (ty, start) = &stage.loops[i];
    let end = &stage.end;
    let j = &n.slot;
    let col = |var: &str, ty: &str| format!("{ty} {var} = {lane} + {width} * {j};");
    let range = |var: &str, start: i64| {
        if start == 0 {
            format!("{var} < {end}")
        } else {
            format!("{var} >= {start} && {var} < {end}")
        }
    };
    let unrolled = format!("#pragma unroll{nl}{ind}for (int {j} = 0; {j} < {r}; ++{j}) {{");
    let mut e = Vec::new();
    // Before the loop: registers of buffers first touched here.
    let mut before = String::new();
    for (b, reg) in stage.buffers.iter().zip(&n.regs) {
        if b.first != i {
            continue;
        }
        before.push_str(&format!("{} {reg}[{r}];{nl}{ind}", b.ty));
        if !b.written {
            before.push_str(&format!(
                "{unrolled}{nl}{i1}{}{nl}{i1}if ({}) {reg}[{j}] = {};{nl}{ind}}}{nl}{ind}",
                col(&b.var, ty),
                range(&b.var, b.start),
                b.access
            ));
        }
    }
    if !before.is_empty() {
        e.push(Edit::insert(l.start, before));
    }
    // The loop: head over the slots, tail past them.
    let body = l
        .node
        .child_by_field_name("body")
        .expect("a for loop has a body");
    let mut slots = Edits::new();
    for (b, reg) in stage.buffers.iter().zip(&n.regs) {
        for at in b.nodes.iter().filter(|at| contains_range(body, at)) {
            slots.extend([Edit::replace(at.clone(), format!("{reg}[{j}]"))]);
        }
    }
    let staged_body = slots
        .apply_within(src, body.byte_range())
        .unwrap_or_else(|_| text(src, body).to_string());
    let var = &l.var;
    let mut code = format!(
        "{unrolled}{nl}{i1}{}{nl}{i1}if ({}) {}{nl}{ind}}}",
        col(var, ty),
        range(var, *start),
        reindent(&staged_body, &ind, &i1)
    );
    let tail_guard = if *start == 0 {
        String::new()
    } else {
        format!("if ({var} >= {start}) ")
    };
    let tail_body = if body.kind() == "compound_statement" && tail_guard.is_empty() {
        format!(" {}", text(src, body))
    } else {
        format!(
            "{nl}{i1}{tail_guard}{}",
            reindent(text(src, body), &ind, &i1)
        )
    };
    code.push_str(&format!(
        "{nl}{ind}for ({ty} {var} = {lane} + {width} * {r}; {var} < {end}; {var} += {width}){tail_body}"
    ));
    // After the loop: registers of written buffers last touched here.
    for (b, reg) in stage.buffers.iter().zip(&n.regs) {
        if b.written && b.last == i {
            code.push_str(&format!(
                "{nl}{ind}{unrolled}{nl}{i1}{}{nl}{i1}if ({}) {} = {reg}[{j}];{nl}{ind}}}",
                col(&b.var, ty),
                range(&b.var, b.start),
                b.access
            ));
        }
    }
    e.push(Edit::replace(l.node.byte_range(), code));
    e
}

fn contains_range(n: Node<'_>, at: &ByteRange) -> bool {
    n.start_byte() <= at.start && at.end <= n.end_byte()
}
