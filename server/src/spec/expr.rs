//! Expressions of the spec language (docs/spec.md, "Expressions"): the tree, its parser and
//! its evaluator. Precedence follows Python: `<< >>` < `+ -` < `* / %` < unary `-` < `**`
//! (right-associative, so `-2 ** 2 == -4` and `2 ** -1` parses). Values are `i64` or
//! finite `f64`; every overflow, inexact integer division and division by zero is an
//! error with the span of the operation that caused it, never a panic.

use super::lexer::{Tok, Token};
use super::Value;
use crate::syntax::ByteRange;

/// Nesting limit for parentheses, unary minus and calls. The parser is recursive, so the
/// limit keeps hostile input (`((((...`) from exhausting the stack.
pub(crate) const MAX_NESTING: u32 = 64;
/// Limit on the depth of the finished tree (long `a + b + c + ...` chains are left-deep);
/// evaluation and drop are recursive too.
pub(crate) const MAX_TREE_DEPTH: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Shl,
    Shr,
    Pow,
}

impl BinOp {
    fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Pow => "**",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    Cdiv,
    Min,
    Max,
    NextPow2,
}

pub(crate) const FUNCTIONS: [&str; 4] = ["cdiv", "min", "max", "next_pow2"];

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ExprKind {
    Int(i64),
    Float(f64),
    Name(String),
    Neg(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
    /// `(a, b[, c])`: only meaningful as the whole value of `grid` / `block`.
    Tuple(Vec<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Expr {
    pub kind: ExprKind,
    pub span: ByteRange,
    depth: u32,
}

impl Expr {
    /// Every name the expression reads, with the span of each use, in source order.
    pub fn names(&self, out: &mut Vec<(String, ByteRange)>) {
        match &self.kind {
            ExprKind::Name(n) => out.push((n.clone(), self.span.clone())),
            ExprKind::Int(_) | ExprKind::Float(_) => {}
            ExprKind::Neg(e) => e.names(out),
            ExprKind::Bin(_, a, b) => {
                a.names(out);
                b.names(out);
            }
            ExprKind::Call(_, args) | ExprKind::Tuple(args) => {
                args.iter().for_each(|a| a.names(out))
            }
        }
    }

    pub fn as_name(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Name(n) => Some(n),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ParseError {
    pub span: ByteRange,
    pub message: String,
}

fn err<T>(span: ByteRange, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        span,
        message: message.into(),
    })
}

/// A cursor over one statement's tokens.
pub(crate) struct Cursor<'t> {
    pub toks: &'t [Token],
    pub pos: usize,
    nesting: u32,
}

impl<'t> Cursor<'t> {
    pub fn new(toks: &'t [Token]) -> Self {
        Cursor {
            toks,
            pos: 0,
            nesting: 0,
        }
    }

    pub fn peek(&self) -> Option<&'t Token> {
        self.toks.get(self.pos)
    }

    pub fn peek_is(&self, p: &str) -> bool {
        self.peek().is_some_and(|t| t.is(p))
    }

    pub fn eat(&mut self, p: &str) -> Option<&'t Token> {
        let t = self.peek().filter(|t| t.is(p))?;
        self.pos += 1;
        Some(t)
    }

    pub fn next(&mut self) -> Option<&'t Token> {
        let t = self.toks.get(self.pos)?;
        self.pos += 1;
        Some(t)
    }

    /// A span to blame when input ends too early: the last token of the statement.
    pub fn end_span(&self) -> ByteRange {
        self.toks.last().map_or(0..0, |t| t.span.clone())
    }

    /// Expects `p`; `what` completes "expected `p` ...".
    pub fn expect(&mut self, p: &str, what: &str) -> Result<&'t Token, ParseError> {
        match self.peek() {
            Some(t) if t.is(p) => {
                self.pos += 1;
                Ok(t)
            }
            Some(t) => err(
                t.span.clone(),
                format!("expected `{p}` {what}, found {}", describe(t)),
            ),
            None => err(
                self.end_span(),
                format!("expected `{p}` {what}, but the statement ends here"),
            ),
        }
    }

    pub fn expr(&mut self) -> Result<Expr, ParseError> {
        self.shift()
    }

    fn shift(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.additive()?;
        loop {
            let op = if self.eat("<<").is_some() {
                BinOp::Shl
            } else if self.eat(">>").is_some() {
                BinOp::Shr
            } else {
                return Ok(lhs);
            };
            let rhs = self.additive()?;
            lhs = bin(op, lhs, rhs)?;
        }
    }

    fn additive(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.multiplicative()?;
        loop {
            let op = if self.eat("+").is_some() {
                BinOp::Add
            } else if self.eat("-").is_some() {
                BinOp::Sub
            } else {
                return Ok(lhs);
            };
            let rhs = self.multiplicative()?;
            lhs = bin(op, lhs, rhs)?;
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.unary()?;
        loop {
            if let Some(t) = self.peek().filter(|t| t.tok == Tok::FloorDiv) {
                return err(
                    t.span.clone(),
                    "`//` is not an operator here: `/` already divides integers exactly (an error if it \
                     does not); use cdiv(a, b) to round up",
                );
            }
            let op = if self.eat("*").is_some() {
                BinOp::Mul
            } else if self.eat("/").is_some() {
                BinOp::Div
            } else if self.eat("%").is_some() {
                BinOp::Rem
            } else {
                return Ok(lhs);
            };
            let rhs = self.unary()?;
            lhs = bin(op, lhs, rhs)?;
        }
    }

    fn nest(&mut self, span: &ByteRange) -> Result<(), ParseError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return err(
                span.clone(),
                format!("expression is nested too deeply (over {MAX_NESTING} levels); split it into named size variables"),
            );
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        let Some(t) = self.peek() else {
            return self.atom();
        };
        if t.is("-") || t.is("+") {
            self.pos += 1;
            self.nest(&t.span)?;
            let inner = self.unary()?;
            self.nesting -= 1;
            if t.is("+") {
                return Ok(inner);
            }
            let span = t.span.start..inner.span.end;
            return node(ExprKind::Neg(Box::new(inner.clone())), span, &[&inner]);
        }
        self.power()
    }

    fn power(&mut self) -> Result<Expr, ParseError> {
        let base = self.atom()?;
        if let Some(op) = self.eat("**") {
            self.nest(&op.span)?;
            let exp = self.unary()?;
            self.nesting -= 1;
            return bin(BinOp::Pow, base, exp);
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr, ParseError> {
        let Some(t) = self.next() else {
            return err(
                self.end_span(),
                "expected an expression, but the statement ends here",
            );
        };
        let span = t.span.clone();
        match &t.tok {
            Tok::Int(v) => Ok(leaf(ExprKind::Int(*v), span)),
            Tok::Float(v) => Ok(leaf(ExprKind::Float(*v), span)),
            Tok::BadNumber(m) => err(span, m.clone()),
            Tok::Ident(name) => {
                if !self.peek_is("(") {
                    return Ok(leaf(ExprKind::Name(name.clone()), span));
                }
                let func = match name.as_str() {
                    "cdiv" => Func::Cdiv,
                    "min" => Func::Min,
                    "max" => Func::Max,
                    "next_pow2" => Func::NextPow2,
                    _ => {
                        let hint = super::did_you_mean(name, FUNCTIONS.iter().copied());
                        return err(
                            span,
                            format!(
                                "`{name}` is not a function; use cdiv, min, max or next_pow2{hint}"
                            ),
                        );
                    }
                };
                self.nest(&span)?;
                let (args, close, _) = self.paren_list()?;
                self.nesting -= 1;
                let full = span.start..close.end;
                let ok = match func {
                    Func::Cdiv => args.len() == 2,
                    Func::NextPow2 => args.len() == 1,
                    Func::Min | Func::Max => args.len() >= 2,
                };
                if !ok {
                    let want = match func {
                        Func::Cdiv => "2 arguments: cdiv(a, b)",
                        Func::NextPow2 => "1 argument: next_pow2(a)",
                        Func::Min | Func::Max => "at least 2 arguments",
                    };
                    return err(
                        full,
                        format!("`{name}` takes {want}, but {} given", count(args.len())),
                    );
                }
                let refs: Vec<&Expr> = args.iter().collect();
                let depth = refs.iter().map(|e| e.depth).max().unwrap_or(0) + 1;
                check_depth(depth, &full)?;
                Ok(Expr {
                    kind: ExprKind::Call(func, args),
                    span: full,
                    depth,
                })
            }
            Tok::Punct("(") => {
                self.nest(&span)?;
                self.pos -= 1;
                let (mut items, close, trailing) = self.paren_list()?;
                self.nesting -= 1;
                let full = span.start..close.end;
                match items.len() {
                    0 => err(full, "empty parentheses; write an expression inside"),
                    // `(e)` groups; `(e,)` is a one-element tuple, as in Python
                    // (`grid = (cdiv(n, BLOCK),)`).
                    1 if !trailing => {
                        let mut e = items.remove(0);
                        // Widen to the parentheses so a diagnostic on it shows the whole group.
                        e.span = full;
                        Ok(e)
                    }
                    _ => {
                        let depth = items.iter().map(|e| e.depth).max().unwrap_or(0) + 1;
                        check_depth(depth, &full)?;
                        Ok(Expr {
                            kind: ExprKind::Tuple(items),
                            span: full,
                            depth,
                        })
                    }
                }
            }
            Tok::FloorDiv => err(
                span,
                "`//` is not an operator here; use cdiv(a, b) to divide rounding up",
            ),
            _ => err(
                span,
                format!("expected an expression, found {}", describe(t)),
            ),
        }
    }

    /// `( e, e, ... )` starting at the current `(`, a trailing comma allowed as in
    /// Python; returns the items, the `)` span and whether a comma came last.
    fn paren_list(&mut self) -> Result<(Vec<Expr>, ByteRange, bool), ParseError> {
        self.expect("(", "")?;
        let mut items = Vec::new();
        if let Some(close) = self.eat(")") {
            return Ok((items, close.span.clone(), false));
        }
        loop {
            items.push(self.expr()?);
            if let Some(close) = self.eat(")") {
                return Ok((items, close.span.clone(), false));
            }
            self.expect(",", "or `)`")?;
            if let Some(close) = self.eat(")") {
                return Ok((items, close.span.clone(), true));
            }
        }
    }
}

fn count(n: usize) -> String {
    match n {
        1 => "1 was".to_string(),
        n => format!("{n} were"),
    }
}

/// How a token reads in "found ..." messages.
pub(crate) fn describe(t: &Token) -> String {
    match &t.tok {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Int(v) => format!("`{v}`"),
        Tok::Float(v) => format!("`{v:?}`"),
        Tok::BadNumber(_) => "a malformed number".to_string(),
        Tok::Punct(p) => format!("`{p}`"),
        Tok::FloorDiv => "`//`".to_string(),
        Tok::Bad(c) => format!("`{c}`"),
    }
}

fn leaf(kind: ExprKind, span: ByteRange) -> Expr {
    Expr {
        kind,
        span,
        depth: 1,
    }
}

fn check_depth(depth: u32, span: &ByteRange) -> Result<(), ParseError> {
    if depth > MAX_TREE_DEPTH {
        return err(
            span.clone(),
            format!("expression is too long (over {MAX_TREE_DEPTH} levels of operations); split it into named size variables"),
        );
    }
    Ok(())
}

fn node(kind: ExprKind, span: ByteRange, children: &[&Expr]) -> Result<Expr, ParseError> {
    let depth = children.iter().map(|e| e.depth).max().unwrap_or(0) + 1;
    check_depth(depth, &span)?;
    Ok(Expr { kind, span, depth })
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Result<Expr, ParseError> {
    let span = a.span.start..b.span.end;
    let depth = a.depth.max(b.depth) + 1;
    check_depth(depth, &span)?;
    Ok(Expr {
        kind: ExprKind::Bin(op, Box::new(a), Box::new(b)),
        span,
        depth,
    })
}

// ---------------------------------------------------------------------------------------
// Evaluation

/// Why an expression has no value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EvalError {
    /// A name it reads already failed and was reported where it failed.
    Silent,
    Diag {
        span: ByteRange,
        message: String,
    },
}

fn fail<T>(span: &ByteRange, message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError::Diag {
        span: span.clone(),
        message: message.into(),
    })
}

/// What evaluation needs from its surroundings.
pub(crate) trait Scope {
    /// `None`: the name is unknown (callers check names before evaluating, so this is a
    /// bug guard); `Some(Err(()))`: it failed earlier.
    fn lookup(&self, name: &str) -> Option<Result<Value, ()>>;
    /// The source text of a span, for messages that quote the expression.
    fn text(&self, span: &ByteRange) -> String;
}

/// Evaluates a scalar expression (a tuple is an error here).
pub(crate) fn eval(e: &Expr, scope: &dyn Scope) -> Result<Value, EvalError> {
    match &e.kind {
        ExprKind::Int(v) => Ok(Value::Int(*v)),
        ExprKind::Float(v) => Ok(Value::Float(*v)),
        ExprKind::Name(n) => match scope.lookup(n) {
            Some(Ok(v)) => Ok(v),
            Some(Err(())) => Err(EvalError::Silent),
            None => fail(&e.span, format!("`{n}` is not defined")),
        },
        ExprKind::Tuple(_) => fail(
            &e.span,
            "a tuple `(x, y, z)` is only allowed as the whole value of `grid` or `block`",
        ),
        ExprKind::Neg(inner) => match eval(inner, scope)? {
            Value::Int(v) => match v.checked_neg() {
                Some(r) => Ok(Value::Int(r)),
                None => fail(&e.span, overflow_msg(&scope.text(&e.span))),
            },
            Value::Float(v) => Ok(Value::Float(-v)),
        },
        ExprKind::Bin(op, a, b) => {
            let x = eval(a, scope)?;
            let y = eval(b, scope)?;
            binary(*op, x, y, e, a, b, scope)
        }
        ExprKind::Call(f, args) => {
            let vals = args
                .iter()
                .map(|a| eval(a, scope))
                .collect::<Result<Vec<_>, _>>()?;
            call(*f, &vals, e, args, scope)
        }
    }
}

fn overflow_msg(text: &str) -> String {
    format!("`{text}` overflows a 64-bit integer")
}

fn finite(v: f64, e: &Expr, scope: &dyn Scope) -> Result<Value, EvalError> {
    if v.is_finite() {
        Ok(Value::Float(v))
    } else {
        fail(
            &e.span,
            format!("`{}` is not a finite number", scope.text(&e.span)),
        )
    }
}

/// "(n = 4099, m = 3)" for the names an operand reads, or "" for a literal operand.
pub(crate) fn name_values(e: &Expr, scope: &dyn Scope) -> String {
    if matches!(e.kind, ExprKind::Name(_)) {
        // "`n` is 0 (n = 0)" says nothing new.
        return String::new();
    }
    let mut names = Vec::new();
    e.names(&mut names);
    let mut unique = std::collections::HashSet::new();
    let seen: Vec<String> = names
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| unique.insert(n.clone()))
        .collect();
    let parts: Vec<String> = seen
        .iter()
        .filter_map(|n| match scope.lookup(n) {
            Some(Ok(v)) => Some(format!("{n} = {v}")),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn binary(
    op: BinOp,
    x: Value,
    y: Value,
    e: &Expr,
    a: &Expr,
    b: &Expr,
    scope: &dyn Scope,
) -> Result<Value, EvalError> {
    let text = || scope.text(&e.span);
    match (x, y) {
        (Value::Int(x), Value::Int(y)) => {
            let r = match op {
                BinOp::Add => x.checked_add(y),
                BinOp::Sub => x.checked_sub(y),
                BinOp::Mul => x.checked_mul(y),
                BinOp::Div | BinOp::Rem if y == 0 => {
                    return fail(
                        &b.span,
                        format!(
                            "division by zero: `{}` is 0{}",
                            scope.text(&b.span),
                            name_values(b, scope)
                        ),
                    );
                }
                BinOp::Div => {
                    if x.checked_rem(y).is_some_and(|r| r != 0) {
                        let (ta, tb) = (scope.text(&a.span), scope.text(&b.span));
                        return fail(
                            &e.span,
                            format!(
                                "`{}` does not divide evenly{}; use cdiv({ta}, {tb}) or make {ta} a multiple of {tb}",
                                text(),
                                name_values(e, scope)
                            ),
                        );
                    }
                    x.checked_div(y)
                }
                // Python's `%`: the result takes the divisor's sign.
                BinOp::Rem => x.checked_rem(y).map(|r| {
                    if r != 0 && (r < 0) != (y < 0) {
                        r + y
                    } else {
                        r
                    }
                }),
                BinOp::Shl | BinOp::Shr => {
                    if !(0..64).contains(&y) {
                        return fail(
                            &b.span,
                            format!(
                                "shift amount `{}` is {y}; it must be between 0 and 63",
                                scope.text(&b.span)
                            ),
                        );
                    }
                    if op == BinOp::Shr {
                        Some(x >> y)
                    } else {
                        let r = x << y;
                        (r >> y == x).then_some(r)
                    }
                }
                BinOp::Pow => {
                    if y < 0 {
                        return fail(
                            &b.span,
                            format!("integer `**` needs a non-negative exponent; write a float base (`{}.0 ** ...`) for a fraction", scope.text(&a.span)),
                        );
                    }
                    u32::try_from(y).ok().and_then(|y| x.checked_pow(y))
                }
            };
            match r {
                Some(r) => Ok(Value::Int(r)),
                None => fail(
                    &e.span,
                    format!("{}{}", overflow_msg(&text()), name_values(e, scope)),
                ),
            }
        }
        (x, y) => {
            let (x, y) = (x.as_f64(), y.as_f64());
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div | BinOp::Rem if y == 0.0 => {
                    return fail(
                        &b.span,
                        format!(
                            "division by zero: `{}` is 0{}",
                            scope.text(&b.span),
                            name_values(b, scope)
                        ),
                    );
                }
                BinOp::Div => x / y,
                BinOp::Rem => x - y * (x / y).floor(),
                BinOp::Shl | BinOp::Shr => {
                    return fail(
                        &e.span,
                        format!(
                            "`{}` shifts a float; `{}` works on integers only",
                            text(),
                            op.symbol()
                        ),
                    );
                }
                BinOp::Pow => x.powf(y),
            };
            finite(r, e, scope)
        }
    }
}

fn call(
    f: Func,
    vals: &[Value],
    e: &Expr,
    args: &[Expr],
    scope: &dyn Scope,
) -> Result<Value, EvalError> {
    match f {
        Func::Min | Func::Max => {
            let mut best = vals[0];
            for v in &vals[1..] {
                let better = if f == Func::Min {
                    v.as_f64() < best.as_f64()
                } else {
                    v.as_f64() > best.as_f64()
                };
                if better {
                    best = *v;
                }
            }
            Ok(best)
        }
        Func::Cdiv => {
            let (Value::Int(a), Value::Int(b)) = (vals[0], vals[1]) else {
                return fail(
                    &e.span,
                    format!(
                        "`{}` needs integers; cdiv rounds an integer division up",
                        scope.text(&e.span)
                    ),
                );
            };
            if b == 0 {
                return fail(
                    &args[1].span,
                    format!(
                        "division by zero: `{}` is 0{}",
                        scope.text(&args[1].span),
                        name_values(&args[1], scope)
                    ),
                );
            }
            // Ceiling division without the `a + b - 1` overflow: -floor(-a / b).
            let q = a.checked_div_euclid(b).zip(a.checked_rem_euclid(b));
            match q {
                Some((q, r)) => {
                    let up = if r != 0 && b > 0 {
                        q.checked_add(1)
                    } else {
                        Some(q)
                    };
                    match up {
                        Some(v) => Ok(Value::Int(v)),
                        None => fail(&e.span, overflow_msg(&scope.text(&e.span))),
                    }
                }
                None => fail(&e.span, overflow_msg(&scope.text(&e.span))),
            }
        }
        Func::NextPow2 => {
            let Value::Int(a) = vals[0] else {
                return fail(
                    &args[0].span,
                    format!(
                        "next_pow2 needs an integer, but `{}` is {}",
                        scope.text(&args[0].span),
                        vals[0]
                    ),
                );
            };
            if a < 0 {
                return fail(
                    &args[0].span,
                    format!(
                        "next_pow2 needs a non-negative integer, but `{}` is {a}",
                        scope.text(&args[0].span)
                    ),
                );
            }
            match (a.max(1) as u64)
                .checked_next_power_of_two()
                .and_then(|v| i64::try_from(v).ok())
            {
                Some(v) => Ok(Value::Int(v)),
                None => fail(&e.span, overflow_msg(&scope.text(&e.span))),
            }
        }
    }
}
