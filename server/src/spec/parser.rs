//! Statements of one `@bench` line (docs/spec.md, "Statements"). `;` separates statements; a
//! statement that parses but leaves tokens behind is an error on the leftover text, so a
//! typo never silently drops part of a spec. Knows nothing about the kernel.

use super::expr::{describe, Cursor, Expr, ParseError};
use super::lexer::{lex, Tok, Token};
use super::plan::{DType, Role};
use crate::syntax::{ByteRange, SpecLine};

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Name {
    pub text: String,
    pub span: ByteRange,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DistSpec {
    pub name: Name,
    pub args: Vec<Expr>,
    /// From the distribution's name through its `)`.
    pub span: ByteRange,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum StmtKind {
    /// `NAME = E[, E...]`
    Assign { name: Name, values: Vec<Expr> },
    /// `NAME: ROLE DTYPE[DIM, ...] [~ DIST]`
    Buffer {
        name: Name,
        role: Role,
        dtype: DType,
        dtype_span: ByteRange,
        dims: Vec<Expr>,
        /// `[` through `]`.
        shape_span: ByteRange,
        dist: Option<DistSpec>,
    },
    /// `reference = torch: TEXT`: TEXT is Python (a torch expression or `module.fn`), the
    /// rest of the line, checked by `torch_ref`.
    TorchReference {
        name: Name,
        text: String,
        /// Document span of `text` (trimmed); `reference = torch:` itself when empty.
        span: ByteRange,
    },
    /// `tune NAME in [V, ...]`
    Tune {
        name: Name,
        values: Vec<Expr>,
        list_span: ByteRange,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stmt {
    pub kind: StmtKind,
    /// Index of the spec line (into `SpecBlock::lines`).
    pub line: usize,
}

/// A statement that did not parse. `name` is what it was defining, when that much was
/// readable, so uses of the name elsewhere do not cascade into "not defined" errors.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StmtError {
    pub error: ParseError,
    pub name: Option<String>,
}

const ROLES: [&str; 3] = ["in", "out", "inout"];

/// Parses every statement of every line.
pub(crate) fn parse_lines(lines: &[SpecLine]) -> (Vec<Stmt>, Vec<StmtError>) {
    let mut stmts = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let toks = lex(&line.text, line.offset);
        for part in toks.split(|t| t.is(";")) {
            if part.is_empty() {
                continue;
            }
            if let Some(kind) = torch_reference(part, line) {
                // Python text runs to the end of the line, `;` and all.
                stmts.push(Stmt { kind, line: i });
                break;
            }
            match parse_stmt(part, line) {
                Ok(kind) => stmts.push(Stmt { kind, line: i }),
                Err(e) => errors.push(e),
            }
        }
    }
    (stmts, errors)
}

/// `reference = torch: ...` at the start of `toks`: the statement with the rest of the
/// line as its Python text.
fn torch_reference(toks: &[Token], line: &SpecLine) -> Option<StmtKind> {
    let [r, eq, torch, colon, ..] = toks else {
        return None;
    };
    if r.ident() != Some("reference")
        || !eq.is("=")
        || torch.ident() != Some("torch")
        || !colon.is(":")
    {
        return None;
    }
    let from = colon.span.end.checked_sub(line.offset)?;
    let rest = line.text.get(from..)?;
    let lead = rest.len() - rest.trim_start().len();
    let text = rest.trim();
    let start = line.offset + from + lead;
    Some(StmtKind::TorchReference {
        name: Name {
            text: "reference".into(),
            span: r.span.clone(),
        },
        text: text.to_string(),
        // Nothing after `torch:`: point at the statement itself.
        span: if text.is_empty() {
            r.span.start..colon.span.end
        } else {
            start..start + text.len()
        },
    })
}

fn parse_stmt(toks: &[Token], line: &SpecLine) -> Result<StmtKind, StmtError> {
    let mut c = Cursor::new(toks);
    let no_name = |error| StmtError { error, name: None };
    let first = &toks[0];
    let Some(word) = first.ident() else {
        return Err(no_name(ParseError {
            span: first.span.clone(),
            message: format!(
                "expected a statement (`NAME = ...`, `NAME: in f32[n]` or `tune NAME in [...]`), found {}",
                describe(first)
            ),
        }));
    };
    c.pos = 1;
    let name = Name {
        text: word.to_string(),
        span: first.span.clone(),
    };
    let with_name = |error| StmtError {
        error,
        name: Some(word.to_string()),
    };

    let kind = if word == "tune" && c.peek().is_some_and(|t| t.ident().is_some()) {
        // The condition above checked that a name follows `tune`.
        let tname = match c.next() {
            Some(t) => Name {
                text: t.ident().unwrap_or_default().to_string(),
                span: t.span.clone(),
            },
            None => Name {
                text: String::new(),
                span: first.span.clone(),
            },
        };
        let tn = tname.text.clone();
        let named = |error| StmtError {
            error,
            name: Some(tn.clone()),
        };
        match c.peek() {
            Some(t) if t.ident() == Some("in") => c.pos += 1,
            _ => {
                let span = c.peek().map_or(tname.span.clone(), |t| t.span.clone());
                return Err(named(ParseError {
                    span,
                    message: format!(
                        "expected `in` after `tune {tn}`; write `tune {tn} in [256, 512, 1024]`"
                    ),
                }));
            }
        }
        let open = c
            .expect(
                "[",
                &format!("to start the values of `{tn}`: `tune {tn} in [256, 512]`"),
            )
            .map_err(named)?;
        let mut values = Vec::new();
        let close = loop {
            if let Some(close) = c.eat("]") {
                break close;
            }
            values.push(c.expr().map_err(named)?);
            if let Some(close) = c.eat("]") {
                break close;
            }
            c.expect(",", "or `]` in the tune list").map_err(named)?;
        };
        let list_span = open.span.start..close.span.end;
        if values.is_empty() {
            return Err(named(ParseError {
                span: list_span,
                message: format!(
                    "`tune {tn}` lists no values; write e.g. `tune {tn} in [256, 512, 1024]`"
                ),
            }));
        }
        StmtKind::Tune {
            name: tname,
            values,
            list_span,
        }
    } else if c.eat("=").is_some() {
        let mut values = vec![c.expr().map_err(with_name)?];
        while c.eat(",").is_some() {
            values.push(c.expr().map_err(with_name)?);
        }
        StmtKind::Assign { name, values }
    } else if c.eat(":").is_some() {
        parse_buffer(&mut c, name).map_err(with_name)?
    } else {
        let message = match c.peek() {
            Some(t) if matches!(t.ident(), Some("in" | "out" | "inout")) => {
                format!("missing `:` after `{word}`; write `{word}: {} ...`", t.ident().unwrap_or("in"))
            }
            Some(t) => format!(
                "expected `=` or `:` after `{word}` (`{word} = ...` gives a value, `{word}: in f32[n]` describes a buffer), found {}",
                describe(t)
            ),
            None => format!("`{word}` alone is not a statement; write `{word} = ...` or `{word}: in f32[n]`"),
        };
        let span = c.peek().map_or(first.span.clone(), |t| t.span.clone());
        return Err(no_name(ParseError { span, message }));
    };

    if let Some(rest) = c.peek() {
        let span = rest.span.start..toks[toks.len() - 1].span.end;
        let text = quote(line, &span);
        return Err(StmtError {
            error: ParseError {
                span,
                message: format!(
                    "unexpected `{text}` after the statement; separate statements with `;` and put remarks on a comment line without @bench"
                ),
            },
            name: stmt_name(&kind),
        });
    }
    Ok(kind)
}

fn stmt_name(k: &StmtKind) -> Option<String> {
    match k {
        StmtKind::Assign { name, .. }
        | StmtKind::Buffer { name, .. }
        | StmtKind::Tune { name, .. }
        | StmtKind::TorchReference { name, .. } => Some(name.text.clone()),
    }
}

/// The text of `span` on `line`, shortened to about 40 characters (on a char boundary).
fn quote(line: &SpecLine, span: &ByteRange) -> String {
    let a = span.start.saturating_sub(line.offset);
    let b = span.end.saturating_sub(line.offset);
    let text = line.text.get(a..b).unwrap_or("");
    if text.chars().count() > 40 {
        let short: String = text.chars().take(40).collect();
        format!("{short}…")
    } else {
        text.to_string()
    }
}

/// The role token `rt` of buffer `n` (in, out or inout), or the error with a hint.
fn role_of(rt: &Token, n: &str) -> Result<Role, ParseError> {
    Ok(match rt.ident() {
        Some("in") => Role::In,
        Some("out") => Role::Out,
        Some("inout") => Role::InOut,
        Some(other) => {
            let hint = super::did_you_mean(other, ROLES.iter().copied());
            let hint = if hint.is_empty() && DType::parse(other).is_some() {
                format!("; the role comes first: `{n}: in {other}[...]`")
            } else {
                hint
            };
            return Err(ParseError {
                span: rt.span.clone(),
                message: format!("`{other}` is not a role; use in, out or inout{hint}"),
            });
        }
        None => {
            return Err(ParseError {
                span: rt.span.clone(),
                message: format!("expected a role (in, out or inout), found {}", describe(rt)),
            });
        }
    })
}

/// The distribution after a buffer's `~`: a name and optional arguments in parentheses.
fn parse_dist(c: &mut Cursor<'_>) -> Result<DistSpec, ParseError> {
    let Some(t) = c.next() else {
        return Err(ParseError {
            span: c.end_span(),
            message: format!(
                "expected a distribution after `~`; {}",
                super::check::DIST_LIST
            ),
        });
    };
    let Tok::Ident(dn) = &t.tok else {
        return Err(ParseError {
            span: t.span.clone(),
            message: format!(
                "expected a distribution after `~`, found {}; {}",
                describe(t),
                super::check::DIST_LIST
            ),
        });
    };
    let mut args = Vec::new();
    let mut end = t.span.end;
    if let Some(_open) = c.eat("(") {
        let close = loop {
            if let Some(close) = c.eat(")") {
                break close;
            }
            args.push(c.expr()?);
            if let Some(close) = c.eat(")") {
                break close;
            }
            c.expect(",", "or `)` in the distribution's arguments")?;
        };
        end = close.span.end;
    }
    Ok(DistSpec {
        name: Name {
            text: dn.clone(),
            span: t.span.clone(),
        },
        args,
        span: t.span.start..end,
    })
}

/// A buffer line's statement after `name:`: role, element type, shape and an optional
/// distribution.
fn parse_buffer(c: &mut Cursor<'_>, name: Name) -> Result<StmtKind, ParseError> {
    let n = name.text.clone();
    let Some(rt) = c.next() else {
        return Err(ParseError {
            span: c.end_span(),
            message: format!(
                "expected a role after `{n}:`; write `{n}: in f32[n]` (in, out or inout)"
            ),
        });
    };
    let role = role_of(rt, &n)?;
    let Some(dt) = c.next() else {
        return Err(ParseError {
            span: c.end_span(),
            message: format!("expected an element type after `{role}`; write `{n}: {role} f32[n]`"),
        });
    };
    let dtype_list = DType::ALL
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(", ");
    let dtype = match dt.ident() {
        Some(s) => match DType::parse(s) {
            Some(d) => d,
            None => {
                let hint = match super::ctype::pointee_dtype(s) {
                    // `float`, `int`, `half`: the C spelling of an element type.
                    Some((d, 1)) => format!("; did you mean `{d}`?"),
                    _ => super::did_you_mean(s, DType::ALL.iter().map(|d| d.name())),
                };
                return Err(ParseError {
                    span: dt.span.clone(),
                    message: format!("`{s}` is not an element type; use one of {dtype_list}{hint}"),
                });
            }
        },
        None => {
            return Err(ParseError {
                span: dt.span.clone(),
                message: format!(
                    "expected an element type ({dtype_list}), found {}",
                    describe(dt)
                ),
            });
        }
    };
    let open = match c.peek() {
        Some(t) if t.is("[") => {
            c.pos += 1;
            t
        }
        Some(t) => return Err(ParseError { span: t.span.clone(), message: format!("expected `[` and the shape after `{dtype}`, found {}; write `{n}: {role} {dtype}[n]`", describe(t)) }),
        None => return Err(ParseError { span: dt.span.clone(), message: format!("a buffer needs a shape; write `{n}: {role} {dtype}[n]`") }),
    };
    let mut dims = Vec::new();
    let close = loop {
        if let Some(close) = c.eat("]") {
            break close;
        }
        dims.push(c.expr()?);
        if let Some(close) = c.eat("]") {
            break close;
        }
        c.expect(",", "or `]` in the shape")?;
    };
    let shape_span = open.span.start..close.span.end;
    if dims.is_empty() {
        return Err(ParseError {
            span: shape_span,
            message: format!("the shape is empty; write `{dtype}[1]` for a single element"),
        });
    }
    let dist = if c.eat("~").is_some() {
        Some(parse_dist(c)?)
    } else {
        None
    };
    Ok(StmtKind::Buffer {
        name,
        role,
        dtype,
        dtype_span: dt.span.clone(),
        dims,
        shape_span,
        dist,
    })
}
