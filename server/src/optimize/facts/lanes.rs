//! The analyses both languages share: the lane derivative of an index expression
//! ([`Deriv`], how an address changes from one lane to the next) and the settling of a
//! name with several definitions ([`Settle`]), so that the CUDA and Triton lowerings
//! (`cuda.rs`, `triton.rs`) compute strides one way and cannot disagree; and the small
//! literal helpers both use.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

use tree_sitter::Node;

use super::Stride;

/// d(expr)/d(lane): a literal, a run-time nonzero value, or not linear in the lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deriv {
    Const(i64),
    Sym,
    Unknown,
}

pub(super) use Deriv::{Const, Sym, Unknown};

pub(super) const ZERO: Deriv = Const(0);

/// Launch axes an index can depend on, as bits of [`LaneWalk::axes`]: the thread index
/// along x (in Triton a `tl.arange` lane), y and z, then the block index (Triton: the
/// program id) along x, y and z.
pub const THREAD_X: u8 = 1;
pub const BLOCK_X: u8 = 1 << 3;

impl Deriv {
    pub(super) fn is_zero(self) -> bool {
        self == ZERO
    }
    pub(super) fn add(self, o: Deriv) -> Deriv {
        match (self, o) {
            (Unknown, _) | (_, Unknown) => Unknown,
            (Const(a), Const(b)) => a.checked_add(b).map_or(Unknown, Const),
            (Const(0), x) | (x, Const(0)) => x,
            _ => Sym,
        }
    }
    pub(super) fn neg(self) -> Deriv {
        match self {
            Const(a) => a.checked_neg().map_or(Unknown, Const),
            x => x,
        }
    }
    pub(super) fn scale(self, c: i64) -> Deriv {
        match self {
            Const(a) => a.checked_mul(c).map_or(Unknown, Const),
            Sym if c == 0 => ZERO,
            x => x,
        }
    }
    /// Derivative of a product `a * b`, where `ka`/`kb` are the factors' literal values.
    pub(super) fn mul(da: Deriv, ka: Option<i64>, db: Deriv, kb: Option<i64>) -> Deriv {
        match (da.is_zero(), db.is_zero()) {
            (true, true) => ZERO,
            (true, false) => ka.map_or(if db == Unknown { Unknown } else { Sym }, |c| db.scale(c)),
            (false, true) => kb.map_or(if da == Unknown { Unknown } else { Sym }, |c| da.scale(c)),
            (false, false) => Unknown,
        }
    }
    /// An operation that is not linear: uniform in, uniform out, else unknown.
    pub(super) fn opaque(parts: &[Deriv]) -> Deriv {
        if parts.iter().all(|d| d.is_zero()) {
            ZERO
        } else {
            Unknown
        }
    }
    pub(super) fn stride(self) -> Stride {
        match self {
            Const(0) => Stride::Uniform,
            Const(1) => Stride::Unit,
            Const(k) => Stride::Strided(k),
            Sym => Stride::Symbolic,
            Unknown => Stride::Unknown,
        }
    }
}

/// One definition of a local name: `v = value`, `v += value`, a loop variable...
#[derive(Clone, Copy)]
pub(super) struct Def<'t> {
    /// `=`, `+=`, `-=`, ... ; `++` for increments; `opaque` for a definition we cannot
    /// follow (tuple unpacking).
    pub(super) op: &'t str,
    pub(super) value: Option<Node<'t>>,
}

#[derive(Clone, Copy)]
pub(super) enum Memo {
    /// Being computed; a self-reference reads this assumption (None: no assumption yet).
    Assume(Option<Deriv>),
    Done(Deriv),
}

/// The grammar's names for the expression forms both languages share.
pub(super) struct Forms {
    /// Literals: the same in every lane.
    pub(super) literals: &'static [&'static str],
    pub(super) unary: &'static str,
    pub(super) binary: &'static str,
}

/// The lane-derivative walker both languages share: the shared forms (names, literals,
/// parentheses, unary and binary arithmetic, conditionals) are walked here, parametrised
/// by the grammar's names for them ([`Forms`]); each language adds its own forms (thread
/// indices and casts; `tl.arange` and tiles) in [`LaneWalk::deriv_own`]. A name with
/// several definitions (loop updates included) is settled: the first definition,
/// evaluated without assumption, is assumed; every other definition must keep it, else
/// the stride is unknown. Memoized; a name met again while it is being settled reads the
/// assumption.
pub(super) trait LaneWalk<'t> {
    const FORMS: Forms;
    fn src(&self) -> &'t str;
    fn memo(&mut self) -> &mut HashMap<String, Memo>;
    /// A literal integer value of an expression, when it has one.
    fn konst(&self, n: Node<'t>) -> Option<i64>;
    /// The derivative of a name the language binds (parameters); None for a local.
    fn bound(&self, name: &str) -> Option<Deriv>;
    /// The local definitions, by name, in source order.
    fn defs(&self) -> &HashMap<String, Vec<Def<'t>>>;
    fn defs_mut(&mut self) -> &mut HashMap<String, Vec<Def<'t>>>;
    /// The local names `n` itself (not its children) defines, with their definitions.
    fn defines(&self, n: Node<'t>) -> Vec<(String, Def<'t>)>;
    /// The name an identifier reads, as [`LaneWalk::defs`] keys it: its text, or, where a
    /// language scopes locals to blocks and one name is declared in several, the
    /// declaration in scope at the identifier.
    fn name_at(&self, n: Node<'t>) -> Cow<'t, str> {
        Cow::Borrowed(node_text(self.src(), n))
    }
    /// The language's own forms; None for the shared ones.
    fn deriv_own(&mut self, n: Node<'t>, depth: usize) -> Option<Deriv>;
    /// The buffer a name the language binds is (`Some(None)`: a bound non-pointer);
    /// None for a local.
    fn bound_buffer(&self, name: &str) -> Option<Option<String>>;
    /// Per-name results of [`LaneWalk::buffer_of`] (None while being computed).
    fn buffer_memo(&self) -> &RefCell<HashMap<String, Option<String>>>;
    /// The language's own pointer forms (casts, `&p[i]`); None for the shared ones.
    fn buffer_own(&self, n: Node<'t>, depth: usize) -> Option<Option<String>>;

    /// The kernel buffer an address expression points into, if any: a pointer
    /// parameter, a local alias of one (by its first definition), and offsets from it.
    fn buffer_of(&self, n: Node<'t>, depth: usize) -> Option<String> {
        if depth > MAX_DEPTH {
            return None;
        }
        if let Some(b) = self.buffer_own(n, depth) {
            return b;
        }
        match n.kind() {
            "identifier" => {
                let name = &*self.name_at(n);
                if let Some(b) = self.bound_buffer(name) {
                    return b;
                }
                if let Some(b) = self.buffer_memo().borrow().get(name) {
                    return b.clone();
                }
                self.buffer_memo()
                    .borrow_mut()
                    .insert(name.to_string(), None);
                let first = self.defs().get(name)?.first().copied()?;
                let b = self.buffer_of(first.value?, depth + 1);
                self.buffer_memo()
                    .borrow_mut()
                    .insert(name.to_string(), b.clone());
                b
            }
            "parenthesized_expression" => self.buffer_of(*named_children(n).first()?, depth + 1),
            kind if kind == Self::FORMS.binary => {
                let op = node_text(self.src(), n.child_by_field_name("operator")?);
                let l = n.child_by_field_name("left")?;
                let r = n.child_by_field_name("right")?;
                match op {
                    "+" => self
                        .buffer_of(l, depth + 1)
                        .or_else(|| self.buffer_of(r, depth + 1)),
                    "-" => self.buffer_of(l, depth + 1),
                    _ => None,
                }
            }
            _ => None,
        }
    }
    /// The launch axes a form of the language's own depends on (`threadIdx.y`,
    /// `tl.program_id(1)`, `tl.arange(...)`); None for the shared forms.
    fn axes_own(&self, n: Node<'t>) -> Option<u8>;
    /// Per-name results of [`LaneWalk::axes`] (0 while being computed).
    fn axes_memo(&self) -> &RefCell<HashMap<String, u8>>;

    /// The launch axes an expression depends on ([`THREAD_X`] ... as bits), through every
    /// definition of each local it names: `x[r * n + c]` with `r = blockIdx.y` and
    /// `c = blockIdx.x * blockDim.x + threadIdx.x` depends on the thread along x and the
    /// blocks along x and y. Which axes an address leaves out says who shares it: every
    /// block along y reads the same `bias[c]`.
    fn axes(&self, n: Node<'t>, depth: usize) -> u8 {
        if depth > MAX_DEPTH {
            return 0;
        }
        if let Some(a) = self.axes_own(n) {
            return a;
        }
        if n.kind() == "identifier" {
            let name = self.name_at(n);
            return self.axes_of_name(&name, depth);
        }
        let mut c = n.walk();
        let children: Vec<Node<'t>> = n.children(&mut c).collect();
        children
            .into_iter()
            .fold(0, |acc, ch| acc | self.axes(ch, depth + 1))
    }

    fn axes_of_name(&self, name: &str, depth: usize) -> u8 {
        if let Some(a) = self.axes_memo().borrow().get(name) {
            return *a;
        }
        self.axes_memo().borrow_mut().insert(name.to_string(), 0);
        let values: Vec<Node<'t>> = self
            .defs()
            .get(name)
            .map(|ds| ds.iter().filter_map(|d| d.value).collect())
            .unwrap_or_default();
        let a = values
            .into_iter()
            .fold(0, |acc, v| acc | self.axes(v, depth + 1));
        self.axes_memo().borrow_mut().insert(name.to_string(), a);
        a
    }

    /// A conditional expression's (condition, then, else).
    fn branches(&self, n: Node<'t>) -> Option<(Node<'t>, Node<'t>, Node<'t>)>;

    /// Every local definition in `n`, in source order, into [`LaneWalk::defs_mut`].
    fn collect_defs(&mut self, n: Node<'t>, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        for (name, def) in self.defines(n) {
            self.defs_mut().entry(name).or_default().push(def);
        }
        let mut c = n.walk();
        for ch in n.children(&mut c) {
            self.collect_defs(ch, depth + 1);
        }
    }

    fn deriv_name(&mut self, name: &str) -> Deriv {
        if let Some(d) = self.bound(name) {
            return d;
        }
        match self.defs().get(name).cloned() {
            Some(defs) => self.settle(name, &defs),
            // Macros, globals, `warpSize`: the same for every lane.
            None => ZERO,
        }
    }

    /// The derivative of the name after one definition, given `cur` before it.
    fn deriv_def(&mut self, def: Def<'t>, cur: Deriv) -> Deriv {
        let v = match (def.op, def.value) {
            // A loop counter of `for i in range(...)` is the same for every lane.
            ("loop", _) => return ZERO,
            // `++`/`--`: shifts by a constant.
            ("++", None) => return cur,
            (_, None) => return Unknown,
            (_, Some(v)) => v,
        };
        let dv = self.deriv(v, 0);
        match def.op {
            "=" => dv,
            "+=" => cur.add(dv),
            "-=" => cur.add(dv.neg()),
            "*=" => Deriv::mul(cur, None, dv, self.konst(v)),
            _ => Deriv::opaque(&[cur, dv]),
        }
    }

    fn settle(&mut self, name: &str, defs: &[Def<'t>]) -> Deriv {
        match self.memo().get(name) {
            Some(Memo::Done(d)) => return *d,
            Some(Memo::Assume(a)) => return a.unwrap_or(Unknown),
            None => {}
        }
        let Some((first_def, rest)) = defs.split_first() else {
            return ZERO;
        };
        self.memo().insert(name.to_string(), Memo::Assume(None));
        let first = self.deriv_def(*first_def, ZERO);
        self.memo()
            .insert(name.to_string(), Memo::Assume(Some(first)));
        let result = if rest.iter().all(|d| self.deriv_def(*d, first) == first) {
            first
        } else {
            Unknown
        };
        self.memo().insert(name.to_string(), Memo::Done(result));
        result
    }

    /// The lane derivative of an expression.
    fn deriv(&mut self, n: Node<'t>, depth: usize) -> Deriv {
        if depth > MAX_DEPTH {
            return Unknown;
        }
        if let Some(d) = self.deriv_own(n, depth) {
            return d;
        }
        let kind = n.kind();
        if Self::FORMS.literals.contains(&kind) {
            return ZERO;
        }
        match kind {
            "identifier" => {
                let name = self.name_at(n);
                self.deriv_name(&name)
            }
            "parenthesized_expression" => match named_children(n).first() {
                Some(c) => self.deriv(*c, depth + 1),
                None => Unknown,
            },
            "conditional_expression" => {
                let Some((c, a, b)) = self.branches(n) else {
                    return Unknown;
                };
                let (da, db) = (self.deriv(a, depth + 1), self.deriv(b, depth + 1));
                // `live ? col : 0`: a clamp that parks the threads past the end on a
                // constant; the others move as the non-constant branch (an estimate that
                // is right for every lane the condition lets through).
                let (ka, kb) = (self.konst(a), self.konst(b));
                match (ka, kb) {
                    _ if da == db && da != Unknown => da,
                    (Some(_), None) if db != Unknown => db,
                    (None, Some(_)) if da != Unknown => da,
                    _ => Deriv::opaque(&[self.deriv(c, depth + 1), da, db]),
                }
            }
            _ if kind == Self::FORMS.unary => {
                let Some(a) = n.child_by_field_name("argument") else {
                    return Unknown;
                };
                let d = self.deriv(a, depth + 1);
                match n
                    .child_by_field_name("operator")
                    .map(|o| node_text(self.src(), o))
                {
                    Some("-") => d.neg(),
                    Some("+") => d,
                    _ => Deriv::opaque(&[d]),
                }
            }
            _ if kind == Self::FORMS.binary => self.deriv_binary(n, depth),
            _ => Unknown,
        }
    }

    /// `l op r`: sums, differences, products and shifts by a literal stay linear.
    fn deriv_binary(&mut self, n: Node<'t>, depth: usize) -> Deriv {
        let (Some(l), Some(r), Some(op)) = (
            n.child_by_field_name("left"),
            n.child_by_field_name("right"),
            n.child_by_field_name("operator"),
        ) else {
            return Unknown;
        };
        let (dl, dr) = (self.deriv(l, depth + 1), self.deriv(r, depth + 1));
        match node_text(self.src(), op) {
            "+" => dl.add(dr),
            "-" => dl.add(dr.neg()),
            "*" => Deriv::mul(dl, self.konst(l), dr, self.konst(r)),
            "<<" => match (dr.is_zero(), self.konst(r)) {
                (true, Some(k)) if (0..62).contains(&k) => dl.scale(1 << k),
                (true, _) if dl.is_zero() => ZERO,
                (true, _) if dl != Unknown => Sym,
                _ => Unknown,
            },
            // The remainder by a uniform value moves as its operand (but where it wraps);
            // the quotient by a uniform value of a warp's width or more (or a run-time
            // one) changes once every that many lanes: taken as uniform, a stride
            // estimate that is right for all but the wrapping lanes.
            "%" if dr.is_zero() && matches!(dl, Const(_)) => dl,
            "/" | "//" if dr.is_zero() && dl != Unknown && wide_divisor(self.konst(r)) => ZERO,
            _ => Deriv::opaque(&[dl, dr]),
        }
    }
}

/// A divisor that spans a warp: a literal of magnitude 32 or more, or a run-time value.
fn wide_divisor(k: Option<i64>) -> bool {
    k.is_none_or(|k| k.unsigned_abs() >= 32)
}

/// Records one global access of either language: counted in every loop around it
/// (`loops`: indices into `facts.loops`, outermost first) and listed.
pub(super) fn record_access(facts: &mut super::Facts, loops: &[usize], mut access: super::Access) {
    use super::AccessKind;
    for &i in loops {
        if let Some(l) = facts.loops.get_mut(i) {
            match access.kind {
                AccessKind::Load => l.global_loads += 1,
                AccessKind::Store => l.global_stores += 1,
                AccessKind::LoadStore | AccessKind::Atomic => {
                    l.global_loads += 1;
                    l.global_stores += 1;
                }
            }
        }
    }
    access.in_loop = !loops.is_empty();
    facts.accesses.push(access);
}

/// Nesting limit for expression evaluation and tree walks: deeper input is "unknown",
/// never a stack overflow.
pub(super) const MAX_DEPTH: usize = 200;

pub(super) fn node_text<'s>(src: &'s str, n: Node) -> &'s str {
    src.get(n.byte_range()).unwrap_or("")
}

pub(super) fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn line_of(n: Node) -> u32 {
    u32::try_from(n.start_position().row + 1).unwrap_or(u32::MAX)
}

pub(super) fn named_children(n: Node) -> Vec<Node> {
    let mut c = n.walk();
    n.named_children(&mut c)
        .filter(|k| k.kind() != "comment")
        .collect()
}

/// Parse a C or Python integer literal (`16`, `0x10`, `256u`, `1_024`).
pub(super) fn int_literal(s: &str) -> Option<i64> {
    let s: String = s
        .trim()
        .trim_end_matches(['u', 'U', 'l', 'L'])
        .chars()
        .filter(|c| *c != '_' && *c != '\'')
        .collect();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// The loop's trip count when init, bound and step are literals, by running it (at most
/// 2^20 iterations; more is "unknown").
pub(super) fn simulate_trip_count(
    init: i64,
    cmp: &str,
    bound: i64,
    op: &str,
    step: i64,
) -> Option<u64> {
    let mut v = init;
    let mut n: u64 = 0;
    let holds = |v: i64| match cmp {
        "<" => v < bound,
        "<=" => v <= bound,
        ">" => v > bound,
        ">=" => v >= bound,
        "!=" => v != bound,
        _ => false,
    };
    while holds(v) {
        n += 1;
        if n > 1 << 20 {
            return None;
        }
        v = match op {
            "+=" => v.checked_add(step)?,
            "-=" => v.checked_sub(step)?,
            "*=" => v.checked_mul(step)?,
            "/=" => v.checked_div(step)?,
            "<<=" if (0..63).contains(&step) => v.checked_shl(u32::try_from(step).ok()?)?,
            ">>=" if (0..63).contains(&step) => v >> step,
            _ => return None,
        };
    }
    Some(n)
}

// ---------------------------------------------------------------------------------------
