//! Spec inference: the captured launches of one kernel become `@bench` statements (issue
//! #32). Pure: records in, statements or a refusal out.
//!
//! The rules, applied to each launch:
//! - every distinct dimension of a contiguous tensor is a size; it takes the name of the
//!   first integer argument with its value (names with `stride` last), else a new name
//!   `<tensor>_d<axis>`;
//! - an integer argument equal to a size is that size; one equal to the product of a
//!   tensor's trailing dimensions (a numel, a row stride) is that product; any other
//!   value is written as captured; constexprs likewise, as captured;
//! - a non-contiguous tensor is a flat buffer of the elements its strides reach, its
//!   strides as captured;
//! - roles come from what the launch wrote (`in`, `out`, `inout`), the input
//!   distribution from the captured values' range;
//! - each grid dimension is a size, or `cdiv` of a size by a constexpr, else as captured
//!   (sizes that an argument names are tried first: the kernel masks by them);
//! - CUDA: `block` and `smem` as launched; a block dimension divides a `cdiv` grid like
//!   a constexpr does (`grid = cdiv(n, 256); block = 256`);
//! - arguments left to their default, and constexprs a `@triton.heuristics` computes,
//!   get no statement; an argument passed as `None` (an optional pointer) is `NAME = None`.
//!
//! Launches whose statements come out the same (values aside) are cases of one spec,
//! the largest first (it is the timed case). A second, odd-sized case is derived from the
//! first when every buffer is contiguous and some size is one the kernel is told (an
//! argument or the grid): each such size shrinks to the next smaller odd number, unless
//! a constexpr has its value, another number of the launch has it too, or one tensor has
//! it on two axes (then it is not clear which quantity it is).

use std::collections::BTreeSet;

use super::record::{Arg, Launch};

/// The statements for one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Inferred {
    /// Statements, one per line, without the comment prefix.
    pub lines: Vec<String>,
    pub cases: usize,
    /// Launches left out and why ("launch 3 has another layout").
    pub notes: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn text(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => {
                let s = format!("{f:?}");
                if s.contains(['.', 'e']) {
                    s
                } else {
                    format!("{s}.0")
                }
            }
        }
    }
}

/// A named value of the spec: a size, a scalar or constexpr argument, a captured grid
/// dimension or extent.
#[derive(Clone, Debug, PartialEq)]
struct Var {
    name: String,
    value: Num,
    /// A size the kernel is told (an argument or the grid names it): it may change in
    /// the derived odd case.
    told: bool,
    size: bool,
    /// A size equal to a constexpr: the kernel may be compiled for it, so it keeps its
    /// value in the derived case.
    fixed: bool,
}

/// One launch as statements: the shape of the spec (`stmts`, var names) and its values.
#[derive(Clone, Debug, PartialEq)]
struct Template {
    vars: Vec<Var>,
    stmts: Vec<String>,
    contiguous: bool,
    /// Per buffer statement (index into `stmts`): its element type and captured range,
    /// merged over the cases before the distribution is written.
    ranges: Vec<Range>,
}

#[derive(Clone, Debug, PartialEq)]
struct Range {
    stmt: usize,
    dtype: &'static str,
    lo: Option<f64>,
    hi: Option<f64>,
}

impl Range {
    fn merge(&mut self, other: &Range) {
        let pick = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| match (a, b) {
            (Some(x), Some(y)) => Some(f(x, y)),
            (x, y) => x.or(y),
        };
        self.lo = pick(self.lo, other.lo, f64::min);
        self.hi = pick(self.hi, other.hi, f64::max);
    }
}

impl Template {
    fn shape_key(&self) -> (Vec<String>, Vec<String>) {
        (
            self.vars.iter().map(|v| v.name.clone()).collect(),
            self.stmts.clone(),
        )
    }
}

/// The statements for `launches` (all of one kernel), at most `max_cases` of them as cases
/// plus the derived odd one when `odd`.
pub fn infer(launches: &[&Launch], max_cases: usize, odd: bool) -> Result<Inferred, String> {
    let mut order: Vec<&Launch> = launches.to_vec();
    // The largest launch is case 0, the timed one.
    order.sort_by_key(|l| std::cmp::Reverse(launch_bytes(l)));
    let mut notes = Vec::new();
    let mut first: Option<Template> = None;
    let mut ranges: Vec<Range> = Vec::new();
    let mut cases: Vec<Vec<Num>> = Vec::new();
    let mut last_err = None;
    for (i, l) in order.iter().enumerate() {
        let t = match template(l) {
            Ok(t) => t,
            Err(e) => {
                notes.push(format!("a launch was refused: {e}"));
                last_err = Some(e);
                continue;
            }
        };
        match &first {
            None => {
                cases.push(t.vars.iter().map(|v| v.value).collect());
                ranges = t.ranges.clone();
                first = Some(t);
            }
            Some(f) if f.shape_key() == t.shape_key() => {
                for (r, o) in ranges.iter_mut().zip(&t.ranges) {
                    r.merge(o);
                }
                let vals: Vec<Num> = t.vars.iter().map(|v| v.value).collect();
                if cases.len() < max_cases.max(1) && !cases.contains(&vals) {
                    cases.push(vals);
                }
            }
            Some(_) => notes.push(format!(
                "launch {} of {} has another layout (different ties between its sizes, \
                 arguments and grid); it is not a case of this spec",
                i + 1,
                order.len()
            )),
        }
    }
    let Some(t) = first else {
        return Err(last_err.unwrap_or_else(|| "no launch was captured".into()));
    };
    if odd {
        if let Some(o) = odd_case(&t, &cases[0]) {
            if !cases.contains(&o) {
                cases.push(o);
            }
        }
    }
    Ok(Inferred {
        lines: render(&t, &cases, &ranges),
        cases: cases.len(),
        notes,
    })
}

fn launch_bytes(l: &Launch) -> u64 {
    l.args
        .iter()
        .filter(|a| a.kind == "tensor")
        .map(|a| a.shape.iter().product::<u64>())
        .sum()
}

/// The derived odd-sized case, if the first case allows one.
fn odd_case(t: &Template, values: &[Num]) -> Option<Vec<Num>> {
    if !t.contiguous {
        return None;
    }
    let mut changed = false;
    let out = t
        .vars
        .iter()
        .zip(values)
        .map(
            |(v, val)| match (v.size && v.told && !v.fixed && !ambiguous(t, v), *val) {
                (true, Num::Int(n)) if n >= 2 => {
                    changed = true;
                    Num::Int(if n % 2 == 0 { n - 1 } else { n - 2 })
                }
                _ => *val,
            },
        )
        .collect();
    changed.then_some(out)
}

/// A size whose value another number of the launch also has (a literal argument or
/// captured grid dimension) may stand for either: shrinking it alone could break their tie.
fn ambiguous(t: &Template, size: &Var) -> bool {
    t.vars.iter().any(|o| !o.size && o.value == size.value)
}

fn render(t: &Template, cases: &[Vec<Num>], ranges: &[Range]) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, v) in t.vars.iter().enumerate() {
        let vals: Vec<Num> = cases.iter().map(|c| c[i]).collect();
        let text = if vals.iter().all(|x| *x == vals[0]) {
            vals[0].text()
        } else {
            vals.iter().map(|x| x.text()).collect::<Vec<_>>().join(", ")
        };
        lines.push(format!("{} = {text}", v.name));
    }
    for (i, s) in t.stmts.iter().enumerate() {
        let d = ranges
            .iter()
            .find(|r| r.stmt == i)
            .and_then(|r| dist(r.dtype, r.lo, r.hi));
        lines.push(match d {
            Some(d) => format!("{s} ~ {d}"),
            None => s.clone(),
        });
    }
    lines
}

/// The spec element type of a torch dtype.
pub fn spec_dtype(torch: &str) -> Option<&'static str> {
    Some(match torch {
        "float16" => "f16",
        "bfloat16" => "bf16",
        "float32" => "f32",
        "float64" => "f64",
        "int8" => "i8",
        "int16" => "i16",
        "int32" => "i32",
        "int64" => "i64",
        "uint8" => "u8",
        "uint32" => "u32",
        "bool" => "bool",
        _ => return None,
    })
}

/// What one argument becomes.
enum Use<'a> {
    Buffer(&'a Arg),
    Scalar(&'a Arg, Num),
    Constexpr(&'a Arg, Num),
    /// Passed as `None` (an optional pointer): `NAME = None`.
    Nothing(&'a Arg),
    Omit,
}

fn classify(a: &Arg) -> Result<Use<'_>, String> {
    if a.set_by.as_deref() == Some("heuristics") || (!a.passed && a.has_default) {
        return Ok(Use::Omit);
    }
    let num = |a: &Arg| -> Result<Num, String> {
        let v = a.value.as_ref();
        if a.kind == "bool" {
            return Ok(Num::Int(i64::from(
                v.and_then(|v| v.as_bool()) == Some(true),
            )));
        }
        if let Some(i) = v.and_then(|v| v.as_i64()) {
            return Ok(Num::Int(i));
        }
        match v.and_then(|v| v.as_f64()) {
            Some(f) if f.is_finite() && a.kind == "float" => Ok(Num::Float(f)),
            Some(f) => Err(format!("`{}` is {f}, not a finite number", a.name)),
            None => Err(format!("`{}` has no numeric value", a.name)),
        }
    };
    match a.kind.as_str() {
        "tensor" => Ok(Use::Buffer(a)),
        "int" | "bool" | "float" if a.constexpr => Ok(Use::Constexpr(a, num(a)?)),
        "int" | "bool" | "float" => Ok(Use::Scalar(a, num(a)?)),
        "none" | "str" if a.has_default && a.default == a.value => Ok(Use::Omit),
        "none" => Ok(Use::Nothing(a)),
        "str" => Err(format!(
            "`{}` is the string {}: a spec gives numbers only",
            a.name,
            a.value.as_ref().map_or(String::new(), |v| v.to_string())
        )),
        "pointer" => Err(format!(
            "`{}` is a non-tensor pointer (a {}): only torch tensors can become buffers",
            a.name,
            a.type_name.as_deref().unwrap_or("pointer")
        )),
        other => Err(format!(
            "`{}` is a {} ({}): a spec gives buffers and numbers only",
            a.name,
            a.type_name.as_deref().unwrap_or(other),
            other
        )),
    }
}

/// Row-major, with dimensions of size 1 free to have any stride.
fn is_contiguous(shape: &[u64], strides: &[i64]) -> bool {
    let mut expect: i64 = 1;
    for (s, st) in shape.iter().zip(strides).rev() {
        if *s != 1 && *st != expect {
            return false;
        }
        expect = expect.saturating_mul(*s as i64);
    }
    shape.len() == strides.len()
}

/// Elements from the first to one past the last that the strides reach.
fn extent(shape: &[u64], strides: &[i64]) -> u64 {
    1 + shape
        .iter()
        .zip(strides)
        .map(|(s, st)| s.saturating_sub(1) * st.unsigned_abs())
        .sum::<u64>()
}

fn stem(name: &str) -> &str {
    let s = name.strip_suffix("_ptr").unwrap_or(name);
    s.strip_suffix("_p").unwrap_or(s)
}

/// A value something can be written as, and how good a guess it is (0: a size the
/// kernel is told by an argument).
struct Candidate {
    value: i64,
    expr: String,
    rank: u8,
    /// Sizes the expression names (told once used).
    sizes: Vec<usize>,
}

fn template(l: &Launch) -> Result<Template, String> {
    if let Some(r) = &l.refused {
        return Err(r.clone());
    }
    let uses = l.args.iter().map(classify).collect::<Result<Vec<_>, _>>()?;
    let mut b = Builder::default();
    for u in &uses {
        if let Use::Buffer(a) = u {
            b.check_buffer(a)?;
        }
    }
    b.name_sizes(&uses);
    b.tie_scalars(&uses);
    for u in &uses {
        if let Use::Constexpr(a, n) = u {
            if b.vars.iter().any(|v| v.name == a.name) {
                continue;
            }
            b.vars.push(Var {
                name: a.name.clone(),
                value: *n,
                told: false,
                size: false,
                fixed: false,
            });
        }
    }
    for u in &uses {
        if let Use::Nothing(a) = u {
            b.stmts.push(format!("{} = None", a.name));
        }
    }
    for u in &uses {
        if let Use::Buffer(a) = u {
            let line = b.buffer_line(a);
            if a.role.as_deref() != Some("out") {
                b.ranges.push(Range {
                    stmt: b.stmts.len(),
                    dtype: a.dtype.as_deref().and_then(spec_dtype).unwrap_or("f32"),
                    lo: a.lo,
                    hi: a.hi,
                });
            }
            b.stmts.push(line);
        }
    }
    let grid = l.grid.as_ref().ok_or("the grid could not be evaluated")?;
    b.block = l.block.iter().flatten().map(|&d| d as i64).collect();
    let line = b.grid_line(grid);
    b.stmts.push(line);
    if let Some(block) = &l.block {
        let line = b.block_line(block);
        b.stmts.push(line);
    }
    if let Some(smem) = l.smem.filter(|s| *s > 0) {
        b.stmts.push(format!("smem = {smem}"));
    }
    if let Some(w) = l.num_warps {
        b.stmts.push(format!("num_warps = {w}"));
    }
    if let Some(s) = l.num_stages {
        b.stmts.push(format!("num_stages = {s}"));
    }
    Ok(Template {
        vars: b.vars,
        stmts: b.stmts,
        contiguous: b.contiguous,
        ranges: b.ranges,
    })
}

#[derive(Default)]
struct Builder {
    /// CUDA: the block's dimensions, divisors of a `cdiv` grid like the constexprs.
    block: Vec<i64>,
    vars: Vec<Var>,
    stmts: Vec<String>,
    contiguous: bool,
    ranges: Vec<Range>,
    /// Scalar arguments written as an expression of sizes: (value, name).
    tied_scalars: Vec<(i64, String)>,
    /// Size index by value.
    by_value: Vec<(i64, usize)>,
    /// Contiguous buffers' dimensions as size indices (`None` for 1).
    dims: Vec<Vec<Option<usize>>>,
}

impl Builder {
    fn check_buffer(&mut self, a: &Arg) -> Result<(), String> {
        let dtype = a.dtype.as_deref().unwrap_or("?");
        if spec_dtype(dtype).is_none() {
            return Err(format!(
                "`{}` is a {dtype} tensor: a spec has f16, bf16, f32, f64, i8, i16, i32, i64, \
                 u8, u32 and bool",
                a.name
            ));
        }
        if a.shape.contains(&0) {
            return Err(format!("`{}` is an empty tensor", a.name));
        }
        if a.role.is_none() {
            return Err(format!(
                "what the launch wrote into `{}` is unknown",
                a.name
            ));
        }
        Ok(())
    }

    fn size_of(&self, value: i64) -> Option<usize> {
        self.by_value
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, i)| *i)
    }

    /// Every dimension (≥ 2) of a contiguous buffer becomes a size, named after the first
    /// integer argument of its value.
    fn name_sizes(&mut self, uses: &[Use]) {
        self.contiguous = true;
        let mut ints: Vec<(&str, i64)> = uses
            .iter()
            .filter_map(|u| match u {
                Use::Scalar(a, Num::Int(v)) if a.kind == "int" => Some((a.name.as_str(), *v)),
                _ => None,
            })
            .collect();
        ints.sort_by_key(|(n, _)| n.contains("stride"));
        let constexprs: Vec<(&str, i64)> = uses
            .iter()
            .filter_map(|u| match u {
                Use::Constexpr(a, Num::Int(v)) if a.kind == "int" => Some((a.name.as_str(), *v)),
                _ => None,
            })
            .collect();
        let taken: BTreeSet<&str> = uses
            .iter()
            .filter_map(|u| match u {
                Use::Buffer(a) | Use::Scalar(a, _) | Use::Constexpr(a, _) | Use::Nothing(a) => {
                    Some(a.name.as_str())
                }
                Use::Omit => None,
            })
            .collect();
        for u in uses {
            let Use::Buffer(a) = u else { continue };
            if !is_contiguous(&a.shape, &a.strides) {
                self.contiguous = false;
                self.dims.push(Vec::new());
                continue;
            }
            let mut dims = Vec::new();
            for (axis, &d) in a.shape.iter().enumerate() {
                let d = d as i64;
                if d < 2 {
                    dims.push(None);
                    continue;
                }
                if let Some(i) = self.size_of(d) {
                    // The same size twice in one tensor ([heads, chunks, ...] with equal
                    // counts): which is which cannot be told, so neither shrinks.
                    if dims.contains(&Some(i)) {
                        self.vars[i].fixed = true;
                    }
                    dims.push(Some(i));
                    continue;
                }
                // An argument of that value names it; else a constexpr (the kernel is
                // compiled for the size); else a new name.
                let fixed = constexprs.iter().find(|(_, v)| *v == d);
                let (name, told) = match (ints.iter().find(|(_, v)| *v == d), fixed) {
                    (Some((n, _)), _) => (n.to_string(), true),
                    (None, Some((n, _))) => (n.to_string(), false),
                    (None, None) => (fresh(&format!("{}_d{axis}", stem(&a.name)), &taken), false),
                };
                self.vars.push(Var {
                    name,
                    value: Num::Int(d),
                    told,
                    size: true,
                    fixed: fixed.is_some(),
                });
                self.by_value.push((d, self.vars.len() - 1));
                dims.push(Some(self.vars.len() - 1));
            }
            self.dims.push(dims);
        }
    }

    /// Products of each buffer's neighbouring dimensions (two or more), as candidates.
    fn products(&self) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = Vec::new();
        for dims in &self.dims {
            let named: Vec<usize> = dims.iter().flatten().copied().collect();
            // Every run of two or more neighbouring dimensions: trailing ones are
            // numels and row strides, leading ones flattened batch grids.
            let n = named.len();
            let windows = (0..n).flat_map(|s| (s + 2..=n).map(move |e| (s, e)));
            for (start, end) in windows {
                let part = &named[start..end];
                let value = part
                    .iter()
                    .try_fold(1i64, |acc, i| match self.vars[*i].value {
                        Num::Int(v) => acc.checked_mul(v),
                        Num::Float(_) => None,
                    });
                let Some(value) = value else { continue };
                let expr = part
                    .iter()
                    .map(|i| self.vars[*i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(" * ");
                if !out.iter().any(|c| c.value == value) {
                    out.push(Candidate {
                        value,
                        expr,
                        rank: 1,
                        sizes: part.to_vec(),
                    });
                }
            }
        }
        out
    }

    fn size_candidates(&self) -> Vec<Candidate> {
        let mut out: Vec<Candidate> = self
            .vars
            .iter()
            .enumerate()
            .filter(|(_, v)| v.size)
            .filter_map(|(i, v)| match v.value {
                Num::Int(n) => Some(Candidate {
                    value: n,
                    expr: v.name.clone(),
                    rank: if v.told { 0 } else { 1 },
                    sizes: vec![i],
                }),
                Num::Float(_) => None,
            })
            .collect();
        out.extend(self.tied_scalars.iter().map(|(v, n)| Candidate {
            value: *v,
            expr: n.clone(),
            rank: 0,
            sizes: Vec::new(),
        }));
        out.extend(self.products());
        out.sort_by_key(|c| c.rank);
        out
    }

    /// Scalar arguments: a size, a product of sizes, else as captured.
    fn tie_scalars(&mut self, uses: &[Use]) {
        let products = self.products();
        for u in uses {
            let Use::Scalar(a, n) = u else { continue };
            if self.vars.iter().any(|v| v.name == a.name) {
                continue;
            }
            let found = match n {
                Num::Int(v) if *v >= 2 && a.kind == "int" => self
                    .size_of(*v)
                    .map(|i| (self.vars[i].name.clone(), vec![i]))
                    .or_else(|| {
                        products
                            .iter()
                            .find(|c| c.value == *v)
                            .map(|c| (c.expr.clone(), c.sizes.clone()))
                    }),
                _ => None,
            };
            match (found, n) {
                (Some((expr, sizes)), Num::Int(v)) => {
                    for i in sizes {
                        self.vars[i].told = true;
                    }
                    self.stmts.push(format!("{} = {expr}", a.name));
                    self.tied_scalars.push((*v, a.name.clone()));
                }
                _ => self.vars.push(Var {
                    name: a.name.clone(),
                    value: *n,
                    told: false,
                    size: false,
                    fixed: false,
                }),
            }
        }
    }

    fn constexprs(&self) -> Vec<(String, i64)> {
        self.vars
            .iter()
            .filter(|v| !v.size)
            .filter_map(|v| match v.value {
                Num::Int(n) if n >= 2 => Some((v.name.clone(), n)),
                _ => None,
            })
            .collect()
    }

    fn buffer_line(&mut self, a: &Arg) -> String {
        let dtype = a.dtype.as_deref().and_then(spec_dtype).unwrap_or("f32");
        let role = a.role.as_deref().unwrap_or("inout");
        let shape = if is_contiguous(&a.shape, &a.strides) {
            a.shape
                .iter()
                .map(|&d| match self.size_of(d as i64) {
                    Some(i) if d >= 2 => self.vars[i].name.clone(),
                    _ => d.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            let name = format!("{}_elems", stem(&a.name));
            self.vars.push(Var {
                name: name.clone(),
                value: Num::Int(extent(&a.shape, &a.strides) as i64),
                told: false,
                size: false,
                fixed: false,
            });
            name
        };
        format!("{}: {role} {dtype}[{shape}]", a.name)
    }

    fn grid_line(&mut self, grid: &[u64]) -> String {
        let mut dims: Vec<u64> = grid.to_vec();
        while dims.len() > 1 && dims.last() == Some(&1) {
            dims.pop();
        }
        let names = ["grid_x", "grid_y", "grid_z"];
        let exprs: Vec<String> = dims
            .iter()
            .enumerate()
            .map(|(i, &g)| self.grid_dim(g as i64, names[i.min(2)]))
            .collect();
        if exprs.len() == 1 {
            format!("grid = {}", exprs[0])
        } else {
            format!("grid = ({})", exprs.join(", "))
        }
    }

    /// `block = 256`, `block = (16, 16)` (trailing 1s dropped); a dimension equal to a
    /// constexpr (a template argument) is written as its name.
    fn block_line(&self, block: &[u64]) -> String {
        let mut d: Vec<u64> = block.to_vec();
        while d.len() > 1 && d.last() == Some(&1) {
            d.pop();
        }
        let named = self.constexprs();
        let text: Vec<String> = d
            .iter()
            .map(|&v| {
                named
                    .iter()
                    .find(|(_, n)| *n == v as i64)
                    .map_or(v.to_string(), |(name, _)| name.clone())
            })
            .collect();
        match text.as_slice() {
            [one] => format!("block = {one}"),
            many => format!("block = ({})", many.join(", ")),
        }
    }

    fn grid_dim(&mut self, g: i64, fallback: &str) -> String {
        if g == 1 {
            return "1".into();
        }
        let cands = self.size_candidates();
        let mut blocks = self.constexprs();
        blocks.extend(
            self.block
                .iter()
                .filter(|&&d| d >= 2)
                .map(|&d| (d.to_string(), d)),
        );
        for rank in 0..=1 {
            let here = cands.iter().filter(|c| c.rank == rank);
            let exact = here
                .clone()
                .find(|c| c.value == g)
                .map(|c| (c.expr.clone(), c.sizes.clone()));
            let cdiv = || {
                here.clone().find_map(|c| {
                    blocks
                        .iter()
                        .find(|(_, b)| (c.value + b - 1) / b == g && c.value > *b)
                        .map(|(b, _)| (format!("cdiv({}, {b})", c.expr), c.sizes.clone()))
                })
            };
            if let Some((expr, sizes)) = exact.or_else(cdiv) {
                for i in sizes {
                    self.vars[i].told = true;
                }
                return expr;
            }
        }
        self.vars.push(Var {
            name: fallback.into(),
            value: Num::Int(g),
            told: false,
            size: false,
            fixed: false,
        });
        fallback.into()
    }
}

fn fresh(base: &str, taken: &BTreeSet<&str>) -> String {
    let mut name = base.to_string();
    let mut i = 2;
    while taken.contains(name.as_str()) {
        name = format!("{base}_{i}");
        i += 1;
    }
    name
}

/// The input distribution that keeps the captured values' range.
fn dist(dtype: &str, lo: Option<f64>, hi: Option<f64>) -> Option<String> {
    let (lo, hi) = (lo?, hi?);
    if dtype == "bool" {
        return None;
    }
    if dtype.starts_with('f') || dtype == "bf16" {
        if lo == hi {
            return match lo {
                0.0 => Some("zeros".into()),
                1.0 => Some("ones".into()),
                _ => None,
            };
        }
        return Some(format!(
            "uniform({}, {})",
            round_to(lo, false),
            round_to(hi, true)
        ));
    }
    Some(format!(
        "randint({}, {})",
        lo as i64,
        (hi as i64).saturating_add(1)
    ))
}

/// `x` to 4 significant digits, rounded outward (down for a low bound, up for a high one).
fn round_to(x: f64, up: bool) -> String {
    if x == 0.0 {
        return "0.0".into();
    }
    let mag = x.abs().log10().floor() as i32;
    let digits = (3 - mag).max(0) as usize;
    let scale = 10f64.powi(3 - mag);
    let r = if up {
        (x * scale).ceil() / scale
    } else {
        (x * scale).floor() / scale
    };
    let s = format!("{r:.digits$}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
#[path = "infer_tests.rs"]
mod tests;
