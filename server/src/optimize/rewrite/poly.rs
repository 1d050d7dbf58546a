//! Index expressions as polynomials, for the idioms that must prove where a thread reads
//! and writes: `y[row * cols + c]` and `o[c]` with `o = y + (size_t)row * cols` are the
//! same element, `x[c + 1]` is not `x[c]`. A [`Poly`] is a sum of integer-weighted
//! products of atoms; an atom is a name, or the canonical text of a subexpression the
//! polynomial cannot look into (a call, a division, a subscript), marked *tainted* when
//! it depends on a name the caller says varies (see [`Names`]). Casts and parentheses
//! are looked through: they do not change which element is meant, only how an overflow
//! would wrap, and a kernel that overflows an index is wrong before any rewrite.

use std::collections::{BTreeMap, BTreeSet};

use tree_sitter::Node;

use super::tree::{named_children, text, walk, written_target};

/// One atom of a product: a name, `$v` for a variable the caller singles out, or the
/// whitespace-free text of an opaque subexpression (`rowptr[row]`, `n/2`), prefixed `?`
/// when it is tainted.
pub(super) type Atom = String;

/// Σ coefficient × Π atoms; products are sorted atom lists, so `a*b` and `b*a` are one
/// term. Zero coefficients are dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Poly(pub BTreeMap<Vec<Atom>, i64>);

/// What the caller knows about the names an expression may use.
pub(super) trait Names<'t> {
    /// `Some(atom)` to rename (the singled-out variable becomes `$c`); `None` to keep the
    /// name as its own atom.
    fn rename(&self, name: &str) -> Option<Atom>;
    /// The definition to expand in place of the name (a loop-local single definition).
    fn definition(&self, name: &str) -> Option<Node<'t>>;
    /// Does this name vary where the caller cares (a lane-local temporary, an
    /// accumulator, a thread index)? Opaque atoms that mention it are tainted.
    fn varies(&self, name: &str) -> bool;
    /// For questions of stride only, never of identity: `x % K` moves as `x` does (but
    /// where it wraps), and `x / K` is taken as the same for neighbouring `x` (it
    /// changes once every K), when K does not vary.
    fn coarse_quotients(&self) -> bool {
        false
    }
    /// Does a read of a thread or block position (`threadIdx.y`, `blockIdx.z`) taint
    /// the opaque atom it is in? Yes, unless the caller knows the positions it may meet
    /// are the same wherever it looks.
    fn positions_vary(&self) -> bool {
        true
    }
}

/// The usual [`Names`]: one singled-out variable (`$c`), definitions to expand, and
/// names that vary.
pub(super) struct VarNames<'t> {
    pub var: String,
    pub defs: BTreeMap<String, Node<'t>>,
    pub varying: BTreeSet<String>,
}

impl<'t> Names<'t> for VarNames<'t> {
    fn rename(&self, name: &str) -> Option<Atom> {
        (name == self.var).then(|| "$c".to_string())
    }
    fn definition(&self, name: &str) -> Option<Node<'t>> {
        self.defs.get(name).copied()
    }
    fn varies(&self, name: &str) -> bool {
        self.varying.contains(name)
    }
}

/// [`VarNames`] with thread and block positions as atoms like any name, for callers that
/// decide themselves which positions move with the lane (a row's y and z, a loop's
/// uniform part).
pub(super) struct FixedPositions<'t>(pub VarNames<'t>);

impl<'t> Names<'t> for FixedPositions<'t> {
    fn rename(&self, name: &str) -> Option<Atom> {
        self.0.rename(name)
    }
    fn definition(&self, name: &str) -> Option<Node<'t>> {
        self.0.definition(name)
    }
    fn varies(&self, name: &str) -> bool {
        self.0.varies(name)
    }
    fn positions_vary(&self) -> bool {
        false
    }
}

/// [`Names`] that only rename: each listed name becomes its atom (`row` -> `$r`).
pub(super) struct Renamed<'a>(pub Vec<(&'a str, &'static str)>);

impl<'t> Names<'t> for Renamed<'_> {
    fn rename(&self, name: &str) -> Option<Atom> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| (*a).to_string())
    }
    fn definition(&self, _: &str) -> Option<Node<'t>> {
        None
    }
    fn varies(&self, _: &str) -> bool {
        false
    }
}

const MAX_DEPTH: usize = 64;

impl Poly {
    pub fn constant(k: i64) -> Poly {
        let mut p = Poly::default();
        if k != 0 {
            p.0.insert(Vec::new(), k);
        }
        p
    }

    pub fn atom(a: Atom) -> Poly {
        Poly(BTreeMap::from([(vec![a], 1)]))
    }

    pub fn add(mut self, o: &Poly, sign: i64) -> Poly {
        for (k, v) in &o.0 {
            let e = self.0.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(v.saturating_mul(sign));
            if *e == 0 {
                self.0.remove(k);
            }
        }
        self
    }

    pub fn mul(&self, o: &Poly) -> Poly {
        let mut out = Poly::default();
        for (ka, va) in &self.0 {
            for (kb, vb) in &o.0 {
                let mut k: Vec<Atom> = ka.iter().chain(kb).cloned().collect();
                k.sort();
                let mut t = Poly::default();
                t.0.insert(k, va.saturating_mul(*vb));
                out = out.add(&t, 1);
            }
        }
        out
    }

    /// Some atom is tainted.
    pub fn tainted(&self) -> bool {
        self.0.keys().flatten().any(|a| a.starts_with('?'))
    }

    /// The coefficient of `var` when the polynomial is linear in it (every term holds it
    /// at most once): `Some(coefficient)` (empty when it does not occur); `None` when a
    /// term holds it twice or an opaque atom mentions it.
    pub fn linear_in(&self, var: &str) -> Option<Poly> {
        let mut coef = Poly::default();
        for (k, v) in &self.0 {
            let n = k.iter().filter(|a| a.as_str() == var).count();
            if k.iter().any(|a| a != var && a.contains(var)) || n > 1 {
                return None;
            }
            if n == 1 {
                let rest: Vec<Atom> = k.iter().filter(|a| a.as_str() != var).cloned().collect();
                coef = coef.add(&Poly(BTreeMap::from([(rest, *v)])), 1);
            }
        }
        Some(coef)
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    /// No singled-out variable and nothing tainted: the same wherever the caller looks.
    pub fn is_invariant(&self) -> bool {
        !self
            .0
            .keys()
            .flatten()
            .any(|a| a.starts_with('$') || a.starts_with('?'))
    }

    /// A literal constant (no atoms).
    pub fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }
}

/// `(i / K) * K + i % K` is `i`: the row and column of a flat lane index `i`, put back
/// together as `r * K + c`. Each pair of terms `a * (i/K) * K` and `a * (i%K)` becomes
/// `a * i` (`$c`), for any one-word K.
pub(super) fn fold_split(mut p: Poly, lane: &str) -> Poly {
    let quotients: Vec<(Vec<String>, i64, String)> =
        p.0.iter()
            .filter_map(|(atoms, coef)| {
                let q = atoms
                    .iter()
                    .position(|a| a.starts_with(&format!("?{lane}/")))?;
                let k = atoms[q]
                    .strip_prefix(&format!("?{lane}/"))?
                    .strip_suffix("{$c}")?;
                let rest: Vec<&String> = atoms
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != q)
                    .map(|(_, a)| a)
                    .collect();
                (rest.len() == 1 && rest[0] == k).then(|| (atoms.clone(), *coef, k.to_string()))
            })
            .collect();
    for (atoms, coef, k) in quotients {
        let rem = vec![format!("?{lane}%{k}{{$c}}")];
        if p.0.get(&rem) == Some(&coef) {
            p.0.remove(&atoms);
            p.0.remove(&rem);
            p = p.add(&Poly::atom("$c".into()).mul(&Poly::constant(coef)), 1);
        }
    }
    p
}

/// The locals declared under `roots`: those declared once with a value, by a declarator
/// `counts` accepts, and never assigned (name -> value); and every other name declared
/// or assigned there (they vary).
pub(super) fn single_definitions<'t>(
    src: &str,
    roots: &[Node<'t>],
    counts: &dyn Fn(Node<'t>) -> bool,
) -> (BTreeMap<String, Node<'t>>, BTreeSet<String>) {
    let (mut defs, mut varying) = (BTreeMap::new(), BTreeSet::new());
    for s in roots {
        walk(*s, &mut |n| {
            match n.kind() {
                "init_declarator" | "declaration" | "parameter_declaration" => {
                    let d = if n.kind() == "init_declarator" {
                        n.child_by_field_name("declarator")
                    } else {
                        None
                    };
                    if let Some(name) = d.and_then(|d| declared(src, d)) {
                        match n.child_by_field_name("value") {
                            Some(v) if counts(n) && !defs.contains_key(&name) => {
                                defs.insert(name, v);
                            }
                            _ => {
                                varying.insert(name);
                            }
                        }
                    }
                }
                "assignment_expression" | "update_expression" => {
                    let t = written_target(n);
                    if let Some(t) = t.filter(|t| t.kind() == "identifier") {
                        varying.insert(text(src, t).to_string());
                    }
                }
                _ => {}
            }
            true
        });
    }
    for v in &varying {
        defs.remove(v);
    }
    (defs, varying)
}

/// The name a declarator declares (through `*`, `&`, `[]`).
fn declared(src: &str, mut d: Node<'_>) -> Option<String> {
    while d.kind() != "identifier" {
        d = d.child_by_field_name("declarator").or_else(|| {
            named_children(d)
                .into_iter()
                .find(|c| c.kind().ends_with("declarator") || c.kind() == "identifier")
        })?;
    }
    Some(text(src, d).to_string())
}

/// An integer literal (`16`, `0x10`, `16u`, `16LL`); floats and others are None.
pub(super) fn int_literal(s: &str) -> Option<i64> {
    let s = s.trim().replace('\'', "");
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return i64::from_str_radix(h, 16).ok();
    }
    if s.len() > 1 && s.starts_with('0') {
        return i64::from_str_radix(&s[1..], 8).ok();
    }
    s.parse().ok()
}

/// The polynomial of an integer expression.
pub(super) fn poly<'t, N: Names<'t>>(src: &str, n: Node<'t>, names: &N) -> Poly {
    poly_at(src, n, names, 0)
}

fn opaque<'t, N: Names<'t>>(src: &str, n: Node<'t>, names: &N) -> Poly {
    let mut tainted = false;
    let mut renamed: Vec<Atom> = Vec::new();
    let mut stack = vec![n];
    let mut steps = 0;
    while let Some(x) = stack.pop() {
        steps += 1;
        if steps > 10_000 {
            tainted = true;
            break;
        }
        if x.kind() == "identifier" {
            let t = text(src, x);
            if let Some(a) = names.rename(t) {
                if !renamed.contains(&a) {
                    renamed.push(a);
                }
                tainted = true;
            }
            if names.varies(t) || names.definition(t).is_some() {
                tainted = true;
            }
        }
        if x.kind() == "field_expression" {
            let a = x
                .child_by_field_name("argument")
                .map_or("", |a| text(src, a));
            if matches!(a, "threadIdx" | "blockIdx") && names.positions_vary() {
                tainted = true;
            }
        }
        stack.extend(named_children(x));
    }
    let mut canon: String = text(src, n)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    for a in renamed {
        canon.push_str(&format!("{{{a}}}"));
    }
    Poly::atom(if tainted { format!("?{canon}") } else { canon })
}

fn poly_at<'t, N: Names<'t>>(src: &str, n: Node<'t>, names: &N, depth: usize) -> Poly {
    if depth > MAX_DEPTH {
        return Poly::atom("?deep".into());
    }
    let kid = |field: &str| n.child_by_field_name(field);
    match n.kind() {
        "number_literal" => match int_literal(text(src, n)) {
            Some(k) => Poly::constant(k),
            None => opaque(src, n, names),
        },
        "identifier" => {
            let t = text(src, n);
            if let Some(a) = names.rename(t) {
                return Poly::atom(a);
            }
            if let Some(def) = names.definition(t) {
                return poly_at(src, def, names, depth + 1);
            }
            if names.varies(t) {
                return Poly::atom(format!("?{t}"));
            }
            Poly::atom(t.to_string())
        }
        "parenthesized_expression" => match named_children(n).first() {
            Some(c) => poly_at(src, *c, names, depth + 1),
            None => opaque(src, n, names),
        },
        "cast_expression" => match kid("value") {
            Some(v) => poly_at(src, v, names, depth + 1),
            None => opaque(src, n, names),
        },
        "unary_expression" => {
            let (Some(a), Some(op)) = (kid("argument"), kid("operator")) else {
                return opaque(src, n, names);
            };
            match text(src, op) {
                "-" => Poly::default().add(&poly_at(src, a, names, depth + 1), -1),
                "+" => poly_at(src, a, names, depth + 1),
                _ => opaque(src, n, names),
            }
        }
        "binary_expression" => {
            let (Some(l), Some(r), Some(op)) = (kid("left"), kid("right"), kid("operator")) else {
                return opaque(src, n, names);
            };
            let (pl, pr) = (
                poly_at(src, l, names, depth + 1),
                poly_at(src, r, names, depth + 1),
            );
            match text(src, op) {
                "+" => pl.add(&pr, 1),
                "-" => pl.add(&pr, -1),
                "*" => pl.mul(&pr),
                "<<" => match pr.as_constant() {
                    Some(k) if (0..31).contains(&k) => pl.mul(&Poly::constant(1 << k)),
                    _ => opaque(src, n, names),
                },
                "%" if names.coarse_quotients() && pr.is_invariant() => pl,
                "/" if names.coarse_quotients()
                    && pr.is_invariant()
                    && pr.as_constant() != Some(1) =>
                {
                    let canon: String = text(src, n)
                        .chars()
                        .filter(|c| !c.is_whitespace())
                        .collect();
                    Poly::atom(format!("~{canon}"))
                }
                _ => opaque(src, n, names),
            }
        }
        _ => opaque(src, n, names),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::Document;
    use crate::syntax::Lang;

    /// The polynomial of each `E;` in `body` (written as `q[E];` so that C++ does not
    /// read `a * b;` as a declaration), with `int t = E;` as expandable definitions.
    fn polys(body: &str, varying: &[&'static str]) -> Vec<Poly> {
        let stmts: Vec<String> = body
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                if s.starts_with("int ") {
                    format!("{s};")
                } else {
                    format!("q[{s}];")
                }
            })
            .collect();
        let src = format!("void f() {{ {} }}", stmts.join(" "));
        let doc = Document::new(Lang::Cuda, 0, &src);
        let tree = doc.tree().unwrap();
        let mut env = VarNames {
            var: "c".into(),
            defs: BTreeMap::new(),
            varying: varying.iter().map(|v| v.to_string()).collect(),
        };
        let mut exprs = Vec::new();
        let mut stack = vec![tree.root_node()];
        while let Some(n) = stack.pop() {
            if n.kind() == "init_declarator" {
                let name = text(&src, n.child_by_field_name("declarator").unwrap()).to_string();
                env.defs
                    .insert(name, n.child_by_field_name("value").unwrap());
            }
            if n.kind() == "subscript_expression"
                && text(&src, n.child_by_field_name("argument").unwrap()) == "q"
            {
                let ix = n.child_by_field_name("indices").unwrap();
                exprs.push(named_children(ix)[0]);
            }
            let mut kids = named_children(n);
            kids.reverse();
            stack.extend(kids);
        }
        exprs.iter().map(|e| poly(&src, *e, &env)).collect()
    }

    #[test]
    fn the_same_element_written_differently_is_one_polynomial() {
        let p = polys(
            "row * cols + c; c + cols * row; (size_t)row * cols + (c); int o = row * cols; o + c; (row << 2) * cols + c - row * 4 * cols + row * cols;",
            &[],
        );
        assert_eq!(p[0], p[1]);
        assert_eq!(p[0], p[2]);
        assert_eq!(p[0], p[3]);
        assert_eq!(p[0], p[4]);
        let coef = p[0].linear_in("$c").unwrap();
        assert_eq!(coef, Poly::constant(1));
        let rest = p[0].clone().add(&Poly::atom("$c".into()), -1);
        assert_eq!(rest, polys("row * cols;", &[])[0]);
    }

    #[test]
    fn neighbours_opaque_and_tainted_parts_are_told_apart() {
        let p = polys(
            "row * cols + c + 1; c * c; idx[c]; n / 2 + c; t + c; k * stride + c;",
            &["t"],
        );
        assert_ne!(p[0], polys("row * cols + c;", &[])[0]);
        assert_eq!(p[1].linear_in("$c"), None, "quadratic");
        assert!(p[2].tainted(), "an opaque atom over the loop variable");
        assert_eq!(p[2].linear_in("$c"), None);
        assert!(!p[3].tainted(), "n / 2 is uniform");
        assert!(p[4].tainted(), "a varying name");
        assert_eq!(
            p[5].linear_in("$c").unwrap().as_constant(),
            Some(1),
            "{:?}",
            p[5]
        );
    }
}
