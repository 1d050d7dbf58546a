//! `reference = torch: ...` (issue #17): a PyTorch reference, either one expression over
//! the kernel's inputs (`torch.softmax(x, dim=-1)`) or `module.fn`, a function in a Python
//! file next to the kernel. Pure: the statement's text in, a [`TorchReference`] or
//! diagnostics on its columns out. Python is not parsed here, only tokenized enough to
//! catch what an author gets wrong most (an unknown name, an output used as an input, an
//! assignment or a statement, unbalanced brackets, a function named where a call was
//! meant); the worker runs the real thing and reports what is left.
//! Reading the module's file is the edge's job (`analysis::torch_module`).

use serde::{Deserialize, Serialize};

use super::did_you_mean;
use super::plan::Role;
use crate::syntax::ByteRange;

/// A PyTorch reference, as the worker runs it (docs/spec.md, "PyTorch as the reference").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TorchReference {
    /// One Python expression giving the kernel's compared output, or a tuple of one value
    /// per output in parameter order. In scope: the `in`
    /// and `inout` buffers as tensors of their spec shape and dtype, the sizes and scalar
    /// arguments as numbers, `torch`, `F` (`torch.nn.functional`) and `math`.
    Expr { expr: String },
    /// `module.fn`: `fn` of the file `module.py` (dots are folders) next to the kernel,
    /// called with the `in` and `inout` buffers in spec order (and, by name, any sizes or
    /// scalars it has parameters for); it returns the `out`/`inout` buffers in spec order.
    Function { module: String, function: String },
}

impl TorchReference {
    /// `torch.softmax(x, dim=-1)` or `module.fn`, as written.
    pub fn describe(&self) -> String {
        match self {
            TorchReference::Expr { expr } => expr.clone(),
            TorchReference::Function { module, function } => format!("{module}.{function}"),
        }
    }
}

/// What the torch text may name, from the rest of the spec.
pub(crate) struct Scope<'a> {
    /// Buffers in parameter order, with their roles.
    pub buffers: Vec<(&'a str, Role)>,
    /// Sizes and scalar or constexpr arguments.
    pub numbers: Vec<&'a str>,
    /// The other kernels of the file (for "write `reference = K`").
    pub kernels: Vec<&'a str>,
    pub kernel: &'a str,
}

/// Names every torch expression may use besides the spec's.
const MODULES: [&str; 3] = ["torch", "F", "math"];
const PY_KEYWORDS: [&str; 10] = [
    "and", "or", "not", "in", "is", "if", "else", "None", "True", "False",
];
/// Words that make a statement, not an expression.
const PY_STATEMENTS: [&str; 19] = [
    "import", "from", "def", "class", "return", "del", "pass", "while", "with", "assert", "global",
    "nonlocal", "raise", "try", "except", "finally", "yield", "break", "continue",
];
const PY_BUILTINS: [&str; 16] = [
    "abs", "min", "max", "sum", "float", "int", "bool", "len", "range", "tuple", "list", "slice",
    "pow", "round", "zip", "Ellipsis",
];

#[derive(Clone, Debug, PartialEq)]
enum PyTok {
    Name(String),
    /// Numbers and strings: nothing to check.
    Literal,
    /// One operator or bracket (`==`, `**`, `(`, `.`).
    Op(String),
}

/// A diagnostic: document span and message.
pub(crate) type Problem = (ByteRange, String);

/// Tokens of Python text with document spans; an error for a character no expression has.
fn tokenize(text: &str, base: usize) -> Result<Vec<(PyTok, ByteRange)>, Problem> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            // String prefixes: r"..", f'..', b"..".
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') && word.len() <= 2 {
                i = skip_string(text, i, base)?;
                out.push((PyTok::Literal, base + start..base + i));
                continue;
            }
            out.push((PyTok::Name(word.to_string()), base + start..base + i));
            continue;
        }
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == b'_'
                    || b[i] == b'.'
                    || ((b[i] == b'-' || b[i] == b'+') && matches!(b[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            out.push((PyTok::Literal, base + start..base + i));
            continue;
        }
        if c == b'"' || c == b'\'' {
            i = skip_string(text, i, base)?;
            out.push((PyTok::Literal, base + start..base + i));
            continue;
        }
        const OPS: [&str; 36] = [
            "**=", "//=", ">>=", "<<=", "==", "!=", "<=", ">=", "**", "//", "<<", ">>", "+=", "-=",
            "*=", "/=", "->", ":=", "(", ")", "[", "]", "{", "}", ",", ":", ".", "=", "+", "-",
            "*", "/", "%", "@", "<", ">",
        ];
        const MORE: [&str; 4] = ["&", "|", "^", "~"];
        let rest = &text[i..];
        if let Some(op) = OPS
            .iter()
            .chain(MORE.iter())
            .find(|o| rest.starts_with(**o))
        {
            i += op.len();
            out.push((PyTok::Op(op.to_string()), base + start..base + i));
            continue;
        }
        let ch = rest.chars().next().unwrap_or('\u{FFFD}');
        let span = base + start..base + start + ch.len_utf8();
        let msg = if ch == ';' {
            "`reference = torch:` takes the rest of its line as one Python expression; put other statements before it or on their own line".to_string()
        } else if ch == '#' {
            "a comment cannot follow the torch reference; put remarks on a comment line without @bench".to_string()
        } else {
            format!("`{ch}` cannot appear in a Python expression; write one torch expression, e.g. `reference = torch: torch.softmax(x, dim=-1)`")
        };
        return Err((span, msg));
    }
    Ok(out)
}

/// The index after the string literal whose quote is at `i`.
fn skip_string(text: &str, i: usize, base: usize) -> Result<usize, Problem> {
    let b = text.as_bytes();
    let q = b[i];
    let mut j = i + 1;
    while j < b.len() {
        if b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j] == q {
            return Ok(j + 1);
        }
        j += 1;
    }
    Err((
        base + i..base + text.len(),
        "this string is not closed before the end of the line".into(),
    ))
}

/// Checks the text of `reference = torch: TEXT` (at document span `span`). Returns the
/// reference and the spec names it reads (so they do not count as unused), or the
/// problems, each on its columns.
pub(crate) fn check(
    text: &str,
    span: &ByteRange,
    scope: &Scope<'_>,
) -> Result<(TorchReference, Vec<String>), Vec<Problem>> {
    let example = "e.g. `reference = torch: torch.softmax(x, dim=-1)` or `reference = torch: my_ref.softmax` (a function in my_ref.py next to the kernel)";
    if text.is_empty() {
        return Err(vec![(
            span.clone(),
            format!("`torch:` needs a torch expression or a `module.function`; {example}"),
        )]);
    }
    let toks = tokenize(text, span.start).map_err(|p| vec![p])?;
    brackets_match(&toks).map_err(|p| vec![p])?;
    if let Some(parts) = dotted_name(&toks) {
        if let Some(named) = named_function(text, span, scope, &parts) {
            return named.map(|r| (r, Vec::new())).map_err(|p| vec![p]);
        }
    }
    one_expression(&toks).map_err(|p| vec![p])?;
    let (mut used, reads_input) = names_read(&toks, scope)?;
    if !reads_input {
        return Err(vec![(
            span.clone(),
            format!(
                "the torch reference reads no input buffer, so it cannot check `{}`; compute the output from the inputs ({})",
                scope.kernel,
                input_list(scope)
            ),
        )]);
    }
    outputs_match(&toks, scope).map_err(|msg| vec![(span.clone(), msg)])?;
    used.sort();
    used.dedup();
    Ok((
        TorchReference::Expr {
            expr: text.to_string(),
        },
        used,
    ))
}

/// The parts of a text that is only a dotted name (`a`, `my_ref.softmax`).
fn dotted_name(toks: &[(PyTok, ByteRange)]) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let mut ok = toks.len() % 2 == 1;
    for (i, (t, _)) in toks.iter().enumerate() {
        match (i % 2, t) {
            (0, PyTok::Name(n)) => parts.push(n.as_str()),
            (1, PyTok::Op(o)) if o == "." => {}
            _ => ok = false,
        }
    }
    ok.then_some(parts)
}

/// What a dotted name (`parts`) as the whole reference means: `module.fn`, or a problem
/// (a kernel or a torch function named where a call was meant). `None` for a single
/// name that is no kernel, which is checked as an expression.
fn named_function(
    text: &str,
    span: &ByteRange,
    scope: &Scope<'_>,
    parts: &[&str],
) -> Option<Result<TorchReference, Problem>> {
    if parts.len() == 1 && scope.kernels.contains(&parts[0]) {
        return Some(Err((
            span.clone(),
            format!(
                "`{0}` is a kernel of this file, not a torch expression; write `reference = {0}` (without `torch:`)",
                parts[0]
            ),
        )));
    }
    let (function, module) = parts.split_last().filter(|(_, m)| !m.is_empty())?;
    let head = parts[0];
    let is_value = scope.buffers.iter().any(|(b, _)| *b == head) || scope.numbers.contains(&head);
    if MODULES.contains(&head) || is_value {
        let inputs = input_list(scope);
        return Some(Err((
            span.clone(),
            format!(
                "`{text}` is not a torch expression but a function or attribute; call it on the inputs, e.g. `reference = torch: {text}({inputs})`, or name a function of a file next to the kernel (`my_ref.fn`)"
            ),
        )));
    }
    Some(Ok(TorchReference::Function {
        module: module.join("."),
        function: function.to_string(),
    }))
}

/// The first statement keyword or assignment of a text that must be one expression
/// (`f(dim=-1)`'s keyword argument is neither), on its columns.
fn one_expression(toks: &[(PyTok, ByteRange)]) -> Result<(), Problem> {
    let mut depth = 0usize;
    for (i, (t, s)) in toks.iter().enumerate() {
        match t {
            PyTok::Name(n) if PY_STATEMENTS.contains(&n.as_str()) => {
                return Err((
                    s.clone(),
                    format!("`{n}` starts a statement, not a torch expression; write one expression, or put the code in a function of a file next to the kernel and write `reference = torch: module.fn`"),
                ));
            }
            PyTok::Op(o) if ["(", "[", "{"].contains(&o.as_str()) => depth += 1,
            PyTok::Op(o) if [")", "]", "}"].contains(&o.as_str()) => {
                depth = depth.saturating_sub(1)
            }
            PyTok::Op(o) if o.ends_with('=') && !["==", "!=", "<=", ">="].contains(&o.as_str()) => {
                // `f(dim=-1)` is a keyword argument; anything else assigns.
                let kwarg = o == "="
                    && depth > 0
                    && matches!(toks.get(i.wrapping_sub(1)), Some((PyTok::Name(_), _)));
                if !kwarg {
                    return Err((
                        s.clone(),
                        format!("`{o}` assigns, and the torch reference is one expression whose value is the output; write only the value, e.g. `reference = torch: x + y`"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The names the expression binds itself: comprehension variables (`for i in`) and
/// lambda parameters (`lambda a, b:`).
fn bound_names(toks: &[(PyTok, ByteRange)]) -> Vec<&str> {
    let mut bound: Vec<&str> = Vec::new();
    let mut binding = false;
    for (t, _) in toks {
        match t {
            PyTok::Name(n) if n == "for" || n == "lambda" => binding = true,
            PyTok::Name(n) if n == "in" => binding = false,
            PyTok::Op(o) if o == ":" && binding => binding = false,
            PyTok::Name(n) if binding => bound.push(n),
            _ => {}
        }
    }
    bound
}

/// The spec names the expression reads and whether one is an input buffer; or a problem
/// for each `out` buffer it reads and each name it cannot know.
fn names_read(
    toks: &[(PyTok, ByteRange)],
    scope: &Scope<'_>,
) -> Result<(Vec<String>, bool), Vec<Problem>> {
    let bound = bound_names(toks);
    let mut problems = Vec::new();
    let mut used = Vec::new();
    let mut reads_input = false;
    for (i, (t, s)) in toks.iter().enumerate() {
        let PyTok::Name(n) = t else { continue };
        let after_dot = i > 0 && matches!(&toks[i - 1].0, PyTok::Op(o) if o == ".");
        let kwarg = matches!(toks.get(i + 1), Some((PyTok::Op(o), _)) if o == "=");
        let n = n.as_str();
        if after_dot
            || kwarg
            || PY_KEYWORDS.contains(&n)
            || ["for", "lambda"].contains(&n)
            || MODULES.contains(&n)
            || PY_BUILTINS.contains(&n)
            || bound.contains(&n)
        {
            continue;
        }
        if let Some((_, role)) = scope.buffers.iter().find(|(b, _)| *b == n) {
            if *role == Role::Out {
                problems.push((
                    s.clone(),
                    format!(
                        "`{n}` is an `out` buffer: the torch reference computes it and cannot read it; use the inputs ({})",
                        input_list(scope)
                    ),
                ));
                continue;
            }
            reads_input = true;
            used.push(n.to_string());
            continue;
        }
        if scope.numbers.contains(&n) {
            used.push(n.to_string());
            continue;
        }
        problems.push((s.clone(), unknown_name(n, scope)));
    }
    if problems.is_empty() {
        Ok((used, reads_input))
    } else {
        Err(problems)
    }
}

/// The message for a name the torch reference cannot know: what it may use, and the
/// likeliest name meant.
fn unknown_name(n: &str, scope: &Scope<'_>) -> String {
    let hint = if scope.kernels.contains(&n) {
        format!("; `{n}` is a kernel: to compare with it write `reference = {n}` without `torch:`")
    } else if let Some(b) = scope
        .buffers
        .iter()
        .find(|(b, r)| *r != Role::Out && (b.starts_with(n) || n.starts_with(b)))
    {
        // `x` for `x_ptr`: the kernel's name of the tensor.
        format!("; did you mean `{}`?", b.0)
    } else {
        did_you_mean(
            n,
            scope
                .buffers
                .iter()
                .map(|(b, _)| *b)
                .chain(scope.numbers.iter().copied()),
        )
    };
    format!(
        "unknown name `{n}` in the torch reference; it can use the input buffers ({}), the sizes and scalars{}, `torch`, `F` (torch.nn.functional) and `math`{hint}",
        input_list(scope),
        if scope.numbers.is_empty() {
            String::new()
        } else {
            format!(" ({})", scope.numbers.join(", "))
        },
    )
}

/// Whether the expression gives one value per `out`/`inout` buffer (a tuple for
/// several); the message when it does not.
fn outputs_match(toks: &[(PyTok, ByteRange)], scope: &Scope<'_>) -> Result<(), String> {
    let outputs: Vec<&str> = scope
        .buffers
        .iter()
        .filter(|(_, r)| *r != Role::In)
        .map(|(b, _)| *b)
        .collect();
    let gives = tuple_arity(toks);
    if outputs.len() == gives {
        return Ok(());
    }
    Err(if outputs.is_empty() {
        format!("`{}` has no `out` or `inout` buffer, so there is nothing to compare with the torch reference; mark the buffer the kernel writes as `out`", scope.kernel)
    } else if gives == 1 {
        format!(
            "a torch expression gives one output, but `{}` has {} (`{}`); write a tuple of {} expressions in that order, or `reference = torch: module.fn` with a function in a file next to the kernel that returns them",
            scope.kernel,
            outputs.len(),
            outputs.join("`, `"),
            outputs.len()
        )
    } else {
        format!(
            "this tuple gives {gives} outputs, but `{}` has {} (`{}`); give one expression per output, in that order",
            scope.kernel,
            outputs.len(),
            outputs.join("`, `")
        )
    })
}

/// Every bracket closed by its own kind, in order; the first that is not, on its columns.
fn brackets_match(toks: &[(PyTok, ByteRange)]) -> Result<(), Problem> {
    let mut stack: Vec<(&str, &ByteRange)> = Vec::new();
    for (t, s) in toks {
        let PyTok::Op(op) = t else { continue };
        match op.as_str() {
            "(" | "[" | "{" => stack.push((op, s)),
            ")" | "]" | "}" => {
                let want = match op.as_str() {
                    ")" => "(",
                    "]" => "[",
                    _ => "{",
                };
                match stack.pop() {
                    Some((open, _)) if open == want => {}
                    Some((open, os)) => {
                        return Err((
                            os.start..s.end,
                            format!("`{open}` is closed by `{op}`; match the brackets"),
                        ))
                    }
                    None => {
                        return Err((
                            s.clone(),
                            format!("`{op}` closes nothing; remove it or add its `{want}`"),
                        ))
                    }
                }
            }
            _ => {}
        }
    }
    if let Some((open, s)) = stack.pop() {
        return Err((
            s.clone(),
            format!("`{open}` is never closed; the torch reference must end on its line"),
        ));
    }
    Ok(())
}

/// How many values the expression gives: the elements of a tuple written at its top
/// level (`a, b` or `(a, b)`, a trailing comma allowed), else 1.
fn tuple_arity(toks: &[(PyTok, ByteRange)]) -> usize {
    let op = |i: usize| match toks.get(i) {
        Some((PyTok::Op(o), _)) => o.as_str(),
        _ => "",
    };
    // One pair of parentheses around the whole expression is the tuple's own.
    let mut depth = 0usize;
    let wraps = op(0) == "(" && {
        let mut closes_at_end = false;
        for i in 0..toks.len() {
            match op(i) {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        closes_at_end = i + 1 == toks.len();
                        break;
                    }
                }
                _ => {}
            }
        }
        closes_at_end
    };
    let inner = if wraps {
        &toks[1..toks.len() - 1]
    } else {
        toks
    };
    let mut depth = 0usize;
    let mut commas = 0;
    for (i, (t, _)) in inner.iter().enumerate() {
        let PyTok::Op(o) = t else { continue };
        match o.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth = depth.saturating_sub(1),
            "," if depth == 0 && i + 1 < inner.len() => commas += 1,
            _ => {}
        }
    }
    commas + 1
}

/// `x, y`: the buffers a torch reference reads.
fn input_list(scope: &Scope<'_>) -> String {
    let v: Vec<&str> = scope
        .buffers
        .iter()
        .filter(|(_, r)| *r != Role::Out)
        .map(|(b, _)| *b)
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
