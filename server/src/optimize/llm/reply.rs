//! Strict parsing of model replies, and splicing a new kernel unit into the file. Pure:
//! text in, text or data out. Every way a reply can be wrong is its own [`ReplyError`]
//! with a message that can go back to the model as repair feedback as it is.
//!
//! - [`parse_code_reply`]: the coder's reply must hold exactly one fenced code block that
//!   parses, defines the kernel (`__global__` / `@triton.jit`) under its name with the
//!   same parameter names in the same order (a Triton kernel may add `tl.constexpr`
//!   parameters after them), and no host code or other kernel. The block's `@bench` line
//!   comments are returned apart ([`CodeReply::spec`]): a reply may change the kernel's
//!   launch; `optimize::launch` checks that it changed nothing else.
//! - [`splice_unit`]: the file with the kernel unit (and, when the reply has them, its
//!   `@bench` lines) replaced.
//! - [`parse_strategy_reply`]: the strategist's one fenced json block, as a [`Proposal`].

use std::collections::BTreeMap;

use serde_json::Value;
use tree_sitter::{Node, Parser, Tree};

use crate::optimize::catalog::Catalog;
use crate::syntax::{self, ByteRange, FileModel, Kernel, Lang};

/// The strategist's choice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Proposal {
    /// A catalog id, or `free`.
    pub id: String,
    /// The parameters the model gave (only those; the catalog's are the defaults).
    pub params: BTreeMap<String, Value>,
    /// One line.
    pub rationale: String,
    /// For `free`: what the coder should do.
    pub free_form: Option<String>,
    /// The code the step touches (`code`: a loop, an access, a helper), as the model
    /// named it; passed on to the coder.
    pub touches: Option<String>,
    /// The launch change the step implies (`launch`), if any; passed on to the coder.
    pub launch: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("the reply has no fenced code block; it starts: {start}")]
    NoBlock { start: String },
    #[error("the reply has {count} fenced code blocks (at reply lines {}); answer with exactly one", join(.lines))]
    SeveralBlocks { count: usize, lines: Vec<usize> },
    #[error("the code block opened at reply line {line} is never closed (was the reply cut off at maxTokens?)")]
    Unclosed { line: usize },
    #[error("the code block is empty; it must hold the complete kernel unit")]
    EmptyBlock,
    #[error("the code block is tagged `{tag}`, but the answer must be {wanted}; open the block with {expected}")]
    WrongLanguage {
        tag: String,
        wanted: &'static str,
        expected: &'static str,
    },
    #[error("line {line} of the code block holds `@bench` outside a line comment; the spec is the author's: leave it out")]
    SpecInBlock { line: usize },
    #[error("the code does not parse: line {line}, column {column} of the block: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the code block does not define the kernel `{expected}`{}", found_kernels(.found))]
    NoKernel {
        expected: String,
        found: Vec<String>,
    },
    #[error("the code block defines the kernel `{name}` {count} times; define it once")]
    DuplicateKernel { name: String, count: usize },
    #[error("the code block also defines the kernel(s) {}; only `{expected}` and the helpers it calls belong in it", quoted(.names))]
    ExtraKernels {
        expected: String,
        names: Vec<String>,
    },
    #[error("line {line} of the code block defines `{name}`, which is host code ({why}); write only the kernel and its device helpers")]
    HostCode {
        name: String,
        line: usize,
        why: &'static str,
    },
    #[error("the kernel `{kernel}` takes ({}) but must take ({}), the same names in the same order", .found.join(", "), .expected.join(", "))]
    ParamsDiffer {
        kernel: String,
        expected: Vec<String>,
        found: Vec<String>,
    },
    #[error("the new code changes the kernel's {what}; keep it as it was")]
    SignatureChanged { what: String },
    #[error("the new code defines `{name}`, which the file already defines outside this kernel unit{}; give the new function another name", used_by(.shared_with))]
    NameClash {
        name: String,
        shared_with: Vec<String>,
    },
    #[error("the file with the new kernel unit in place {what}")]
    SpliceBroken { what: String },
    #[error("the reply has no JSON object (no fenced json block, and the reply is not JSON); it starts: {start}")]
    NoJson { start: String },
    #[error("the strategy reply is not valid JSON: {what}")]
    BadJson { what: String },
    #[error("the strategy reply has no {field}")]
    MissingField { field: &'static str },
    #[error("`{id}` is not a step of the catalog; use one of {}, or `free`", quoted(.valid))]
    UnknownStrategy { id: String, valid: Vec<String> },
    #[error("`{name}` is not a parameter of `{id}`; {}", known_params(.known))]
    UnknownParam {
        id: String,
        name: String,
        known: Vec<String>,
    },
    #[error("a `free` step needs a `description` that tells the coder what to do")]
    FreeWithoutDescription,
    #[error("line {line} of the code block is top-level code ({what}); a Triton reply holds only imports, `@triton.jit` functions and constants, because everything else would run when the worker loads the file")]
    TopLevelCode { line: usize, what: String },
}

/// Modules a Triton reply may import (the kernel's own needs; importing runs the
/// module's code in the worker, so nothing else).
const TRITON_IMPORTS: [&str; 5] = ["triton", "torch", "math", "numpy", "typing"];

fn join(lines: &[usize]) -> String {
    lines
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn found_kernels(found: &[String]) -> String {
    if found.is_empty() {
        " (it defines no kernel at all)".into()
    } else {
        format!("; it defines {}", quoted(found))
    }
}

fn used_by(kernels: &[String]) -> String {
    if kernels.is_empty() {
        String::new()
    } else {
        format!(" (kernel {} uses it too)", quoted(kernels))
    }
}

fn known_params(known: &[String]) -> String {
    if known.is_empty() {
        "it takes no parameters".into()
    } else {
        format!("its parameters are {}", quoted(known))
    }
}

/// The first 200 characters of a reply, newlines escaped, for messages.
fn start_of(reply: &str) -> String {
    let t = reply.trim();
    if t.is_empty() {
        return "(an empty reply)".into();
    }
    let head: String = t.chars().take(200).collect();
    let more = if t.chars().count() > 200 { "…" } else { "" };
    format!("{:?}{more}", head)
}

/// One fenced block of a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Block {
    /// The info string's first word, lowercased (`cuda`, `python`, ``).
    tag: String,
    code: String,
    /// 1-based reply line of the opening fence.
    line: usize,
}

/// Every fenced block: a line starting (after indentation) with three or more backticks
/// opens one; a line of at least as many backticks and nothing else closes it. The
/// opening fence's indentation is taken off the block's lines.
fn fenced_blocks(reply: &str) -> Result<Vec<Block>, ReplyError> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String, usize, Vec<&str>)> = None; // ticks, indent, tag, line, lines
    for (i, raw) in reply.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        let ticks = trimmed.bytes().take_while(|&b| b == b'`').count();
        let closes =
            matches!(&open, Some((n, ..)) if ticks >= *n && trimmed[ticks..].trim().is_empty());
        if closes {
            let (_, indent, tag, line, lines) =
                open.take().expect("`closes` implies an open block");
            let code = lines
                .iter()
                .map(|l| {
                    let strip = l.len() - l.trim_start_matches(' ').len();
                    &l[strip.min(indent)..]
                })
                .collect::<Vec<_>>()
                .join("\n");
            blocks.push(Block { tag, code, line });
            continue;
        }
        match &mut open {
            None if ticks >= 3 => {
                let info = trimmed[ticks..].trim();
                let tag = info
                    .split(|c: char| c.is_whitespace() || c == '{')
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                open = Some((ticks, indent, tag, i + 1, Vec::new()));
            }
            None => {}
            Some((_, _, _, _, lines)) => lines.push(raw),
        }
    }
    if let Some((_, _, _, line, _)) = open {
        return Err(ReplyError::Unclosed { line });
    }
    Ok(blocks)
}

fn tag_fits(lang: Lang, tag: &str) -> bool {
    match lang {
        Lang::Cuda => matches!(tag, "" | "cuda" | "cu" | "cpp" | "c++" | "cxx" | "cc" | "c"),
        Lang::Triton => matches!(tag, "" | "python" | "py" | "python3" | "triton"),
    }
}

/// Is this line a line comment that holds a `@bench` statement?
fn is_spec_line(lang: Lang, line: &str) -> bool {
    let t = line.trim_start();
    let comment = match lang {
        Lang::Cuda => t.starts_with("//"),
        Lang::Triton => t.starts_with('#'),
    };
    comment && t.contains("@bench")
}

/// The new kernel unit from a coder's reply (see the module doc for the rules).
/// `param_names` are the original kernel's, in order.
/// A coder reply that passed [`parse_code_reply_with_spec`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeReply {
    /// The kernel unit, without the `@bench` lines.
    pub unit: String,
    /// The block's `@bench` statements (the text after the marker, one per comment
    /// line), in order; empty when the reply keeps the spec as it is.
    pub spec: Vec<String>,
}

/// The kernel unit of a coder reply, its `@bench` lines dropped (see
/// [`parse_code_reply_with_spec`]).
pub fn parse_code_reply(
    reply: &str,
    lang: Lang,
    kernel_name: &str,
    param_names: &[String],
) -> Result<String, ReplyError> {
    parse_code_reply_with_spec(reply, lang, kernel_name, param_names).map(|r| r.unit)
}

/// The text after `@bench` on a spec comment line.
fn spec_statement(line: &str) -> String {
    line.split_once("@bench")
        .map_or("", |(_, rest)| rest)
        .trim()
        .trim_end_matches("*/")
        .trim()
        .to_string()
}

pub fn parse_code_reply_with_spec(
    reply: &str,
    lang: Lang,
    kernel_name: &str,
    param_names: &[String],
) -> Result<CodeReply, ReplyError> {
    let blocks = fenced_blocks(reply)?;
    let block = match blocks.as_slice() {
        [] => {
            return Err(ReplyError::NoBlock {
                start: start_of(reply),
            })
        }
        [one] => one,
        many => {
            return Err(ReplyError::SeveralBlocks {
                count: many.len(),
                lines: many.iter().map(|b| b.line).collect(),
            })
        }
    };
    if !tag_fits(lang, &block.tag) {
        return Err(ReplyError::WrongLanguage {
            tag: block.tag.clone(),
            wanted: match lang {
                Lang::Cuda => "CUDA code",
                Lang::Triton => "Triton (Python) code",
            },
            expected: match lang {
                Lang::Cuda => "```cuda",
                Lang::Triton => "```python",
            },
        });
    }
    let spec: Vec<String> = block
        .code
        .lines()
        .filter(|l| is_spec_line(lang, l))
        .map(spec_statement)
        .filter(|s| !s.is_empty())
        .collect();
    let code: Vec<&str> = block
        .code
        .lines()
        .filter(|l| !is_spec_line(lang, l))
        .collect();
    let code = code.join("\n").trim_matches('\n').trim_end().to_string();
    if code.trim().is_empty() {
        return Err(ReplyError::EmptyBlock);
    }
    if let Some(i) = code.lines().position(|l| l.contains("@bench")) {
        return Err(ReplyError::SpecInBlock { line: i + 1 });
    }
    let unit = Analyzed::new(lang, &code);
    if let Some(e) = unit.model.syntax_errors.first() {
        let (line, column) = unit.line_col(e.range.start);
        return Err(ReplyError::Syntax {
            line,
            column,
            message: e.message.clone(),
        });
    }
    let kernel = unit.kernel(kernel_name)?;
    if lang == Lang::Triton {
        unit.check_top_level()?;
    }
    if let Some(f) = unit.functions().into_iter().find(|f| !f.device) {
        return Err(ReplyError::HostCode {
            line: unit.line_col(f.range.start).0,
            name: f.name,
            why: match lang {
                Lang::Cuda => "neither `__global__` nor `__device__`",
                Lang::Triton => "not a `@triton.jit` function",
            },
        });
    }
    let found: Vec<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
    if !same_params(kernel, param_names) {
        return Err(ReplyError::ParamsDiffer {
            kernel: kernel_name.to_string(),
            expected: param_names.to_vec(),
            found,
        });
    }
    Ok(CodeReply { unit: code, spec })
}

/// The kernel takes `expected`, or (Triton) `expected` followed by new `tl.constexpr`
/// parameters, whose values the reply's launch line must then give.
fn same_params(kernel: &Kernel, expected: &[String]) -> bool {
    let found: Vec<&str> = kernel.params.iter().map(|p| p.name.as_str()).collect();
    if found.len() < expected.len() || found[..expected.len()] != *expected {
        return false;
    }
    kernel.params[expected.len()..]
        .iter()
        .all(|p| kernel.lang == Lang::Triton && p.kind == syntax::ParamKind::Constexpr)
}

/// A code block or file, parsed and analyzed. A Triton block is analyzed behind a
/// `from triton import jit` line, so that `@jit` kernels are found as in the author's
/// file; ranges and positions are given without it.
struct Analyzed {
    lang: Lang,
    /// The analyzed text: the prefix, then the code.
    text: String,
    prefix: usize,
    tree: Option<Tree>,
    model: FileModel,
}

impl Analyzed {
    fn new(lang: Lang, code: &str) -> Self {
        let prefix = match lang {
            Lang::Cuda => "",
            Lang::Triton => "from triton import jit\n",
        };
        Self::with_prefix(lang, prefix, code)
    }

    fn file(lang: Lang, text: &str) -> Self {
        Self::with_prefix(lang, "", text)
    }

    fn with_prefix(lang: Lang, prefix: &str, code: &str) -> Self {
        let text = format!("{prefix}{code}");
        let mut parser = Parser::new();
        let tree = parser
            .set_language(&syntax::ts_language(lang))
            .ok()
            .and_then(|()| syntax::parse_text(&mut parser, lang, &text));
        let mut model = match &tree {
            Some(t) => syntax::analyze(lang, &text, t),
            None => FileModel {
                lang,
                kernels: Vec::new(),
                device_slice: String::new(),
                syntax_errors: vec![syntax::SyntaxError {
                    range: prefix.len()..text.len(),
                    message: "tree-sitter could not parse it".into(),
                }],
            },
        };
        let shift = |r: &mut ByteRange| {
            r.start = r.start.saturating_sub(prefix.len());
            r.end = r.end.saturating_sub(prefix.len());
        };
        if !prefix.is_empty() {
            for k in &mut model.kernels {
                shift(&mut k.def_range);
                shift(&mut k.name_range);
                k.unit_ranges.iter_mut().for_each(shift);
                if let Some(r) = &mut k.spec.range {
                    shift(r);
                }
            }
            model
                .syntax_errors
                .iter_mut()
                .for_each(|e| shift(&mut e.range));
        }
        Analyzed {
            lang,
            text,
            prefix: prefix.len(),
            tree,
            model,
        }
    }

    fn code(&self) -> &str {
        &self.text[self.prefix..]
    }

    /// Triton: every top-level statement is an import of a module the kernel may need,
    /// a function definition (checked for `@jit` by the caller), or a constant
    /// (`NAME = literal` or `NAME = tl.constexpr(literal)`). Anything else would run
    /// when the worker imports the file, before verification.
    fn check_top_level(&self) -> Result<(), ReplyError> {
        let Some(tree) = &self.tree else {
            return Ok(());
        };
        let root = tree.root_node();
        let mut cursor = root.walk();
        for item in root.named_children(&mut cursor) {
            if item.end_byte() <= self.prefix {
                continue;
            }
            let text = &self.text[item.byte_range()];
            let fail = |what: String| ReplyError::TopLevelCode {
                line: self.line_col(item.start_byte() - self.prefix).0,
                what,
            };
            match item.kind() {
                "comment" | "function_definition" | "decorated_definition" => {}
                "import_statement" | "import_from_statement" => {
                    let module = text
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("")
                        .trim_end_matches(',');
                    let root_module = module.split('.').next().unwrap_or("");
                    if !TRITON_IMPORTS.contains(&root_module) {
                        return Err(fail(format!(
                            "an import of `{module}`; allowed are {}",
                            TRITON_IMPORTS.join(", ")
                        )));
                    }
                }
                "expression_statement" => {
                    let Some(e) = item.named_child(0) else {
                        return Err(fail("an empty statement".into()));
                    };
                    // A docstring is a string expression: harmless.
                    if e.kind() == "string" {
                        continue;
                    }
                    if e.kind() != "assignment" || !self.is_constant(e) {
                        return Err(fail(format!("`{}`", first_line(text))));
                    }
                }
                _ => return Err(fail(format!("`{}`", first_line(text)))),
            }
        }
        Ok(())
    }

    /// `NAME = literal` or `NAME = tl.constexpr(literal)` (`triton.language.constexpr`).
    fn is_constant(&self, assignment: Node) -> bool {
        let (Some(left), Some(right)) = (
            assignment.child_by_field_name("left"),
            assignment.child_by_field_name("right"),
        ) else {
            return false;
        };
        let literal = |n: Node| {
            matches!(
                n.kind(),
                "integer" | "float" | "string" | "true" | "false" | "none"
            ) || (n.kind() == "unary_operator"
                && n.named_child(0)
                    .is_some_and(|c| matches!(c.kind(), "integer" | "float")))
        };
        if left.kind() != "identifier" {
            return false;
        }
        if literal(right) {
            return true;
        }
        if right.kind() != "call" {
            return false;
        }
        let callee = right
            .child_by_field_name("function")
            .map_or("", |f| &self.text[f.byte_range()]);
        let args: Vec<Node> = right
            .child_by_field_name("arguments")
            .map(|a| {
                let mut c = a.walk();
                a.named_children(&mut c).collect()
            })
            .unwrap_or_default();
        matches!(
            callee,
            "tl.constexpr" | "triton.language.constexpr" | "constexpr"
        ) && args.len() == 1
            && literal(args[0])
    }

    /// 1-based line and column (in characters) of a code offset.
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let code = self.code();
        let offset = offset.min(code.len());
        let before = &code[..floor_char_boundary(code, offset)];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    /// The one kernel named `name`, with the errors of [`parse_code_reply`].
    fn kernel(&self, name: &str) -> Result<&Kernel, ReplyError> {
        let matching: Vec<&Kernel> = self
            .model
            .kernels
            .iter()
            .filter(|k| k.name == name)
            .collect();
        let others: Vec<String> = self
            .model
            .kernels
            .iter()
            .filter(|k| k.name != name)
            .map(|k| k.name.clone())
            .collect();
        match matching.as_slice() {
            [] => Err(ReplyError::NoKernel {
                expected: name.to_string(),
                found: others,
            }),
            [k] if others.is_empty() => Ok(k),
            [_] => Err(ReplyError::ExtraKernels {
                expected: name.to_string(),
                names: others,
            }),
            many => Err(ReplyError::DuplicateKernel {
                name: name.to_string(),
                count: many.len(),
            }),
        }
    }

    /// Top-level function definitions (through `extern "C"`, namespaces, `#if` groups
    /// and templates for CUDA; decorated or not for Python), in code offsets.
    fn functions(&self) -> Vec<FunctionDef> {
        let Some(tree) = &self.tree else {
            return Vec::new();
        };
        let src = self.text.as_str();
        let mut out = Vec::new();
        let mut stack = vec![tree.root_node()];
        while let Some(container) = stack.pop() {
            let mut cursor = container.walk();
            for item in container.named_children(&mut cursor) {
                let def = match (self.lang, item.kind()) {
                    (Lang::Cuda, "function_definition") => Some(item),
                    (Lang::Cuda, "template_declaration") => template_inner(item),
                    (Lang::Cuda, "linkage_specification") => match item.child_by_field_name("body")
                    {
                        Some(b) if b.kind() == "function_definition" => Some(b),
                        Some(b) => {
                            stack.push(b);
                            None
                        }
                        None => None,
                    },
                    (Lang::Cuda, "namespace_definition") => {
                        stack.extend(item.child_by_field_name("body"));
                        None
                    }
                    (
                        Lang::Cuda,
                        "declaration_list" | "preproc_if" | "preproc_ifdef" | "preproc_else"
                        | "preproc_elif" | "preproc_elifdef",
                    ) => {
                        stack.push(item);
                        None
                    }
                    (Lang::Triton, "function_definition") => Some(item),
                    (Lang::Triton, "decorated_definition") => item
                        .child_by_field_name("definition")
                        .filter(|d| d.kind() == "function_definition"),
                    _ => None,
                };
                let Some(def) = def else { continue };
                let Some(name) = function_name(self.lang, src, def) else {
                    continue;
                };
                let body_start = def
                    .child_by_field_name("body")
                    .map_or(def.end_byte(), |b| b.start_byte());
                let header = src.get(item.start_byte()..body_start).unwrap_or("");
                let device = match self.lang {
                    Lang::Cuda => ["__global__", "__device__", "constexpr"]
                        .iter()
                        .any(|t| has_word(header, t)),
                    Lang::Triton => header
                        .lines()
                        .any(|l| l.trim_start().starts_with('@') && has_word(l, "jit")),
                };
                let range = item.start_byte().saturating_sub(self.prefix)
                    ..item.end_byte().saturating_sub(self.prefix);
                out.push(FunctionDef {
                    name,
                    range,
                    device,
                });
            }
        }
        out.sort_by_key(|f| f.range.start);
        out
    }
}

/// One top-level function definition.
#[derive(Clone, Debug)]
struct FunctionDef {
    name: String,
    /// Decorators, `template <...>` and `extern "C"` included; code offsets.
    range: ByteRange,
    /// `__global__`/`__device__`/`constexpr` (CUDA), `@...jit` (Triton).
    device: bool,
}

fn template_inner(n: Node) -> Option<Node> {
    let mut inner = n;
    for _ in 0..64 {
        let mut cursor = inner.walk();
        let last = inner
            .named_children(&mut cursor)
            .filter(|c| c.kind() != "comment")
            .last()?;
        match last.kind() {
            "template_declaration" => inner = last,
            "function_definition" => return Some(last),
            _ => return None,
        }
    }
    None
}

fn function_name(lang: Lang, src: &str, def: Node) -> Option<String> {
    let text = |n: Node| src.get(n.byte_range()).map(str::to_string);
    if lang == Lang::Triton {
        return def.child_by_field_name("name").and_then(text);
    }
    let mut n = def.child_by_field_name("declarator")?;
    for _ in 0..64 {
        n = match n.kind() {
            "identifier" | "field_identifier" | "operator_name" | "destructor_name" => {
                return text(n)
            }
            "qualified_identifier" | "template_function" | "template_method" => {
                n.child_by_field_name("name")?
            }
            _ => n.child_by_field_name("declarator").or_else(|| {
                (0..n.named_child_count())
                    .rev()
                    .filter_map(|i| n.named_child(i))
                    .find(|c| c.kind() != "type_qualifier" && c.kind() != "parameter_list")
            })?,
        };
    }
    None
}

/// The first line of a statement, for messages.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("").trim()
}

fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Whitespace-insensitive text, to tell an unchanged helper from a changed one.
fn squashed(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` (whose analysis is `model`) with `kernel`'s unit replaced by `new_unit` (a
/// block accepted by [`parse_code_reply`]).
///
/// The rule:
/// - Removed: the kernel's definition, and the definitions of its callees that no other
///   kernel of the file calls. A callee another kernel also calls stays as it is (so the
///   other kernel's code is not changed behind its back); if the new unit defines a
///   function of that name, it must be the same text up to whitespace, and is then
///   dropped from the new unit, else it is a [`ReplyError::NameClash`]. So is any other
///   function of the new unit whose name the file defines outside the removed parts.
/// - The new kernel definition goes where the old one was, right under the `@bench`
///   block, which stays exactly as it is. What the new unit has before its kernel (its
///   helpers) goes above the `@bench` block, with a blank line between, so the spec
///   still belongs to the kernel; what it has after the kernel goes right after it.
/// - Unindented `#include` / `import` lines of the new unit that the file already has
///   are left out. Comments above a removed helper stay where they were.
/// - Checked on the result: it parses with no more syntax errors than `text` had, and
///   defines the kernel once, with the same parameters, template parameters,
///   `extern "C"` and the same `@bench` lines.
pub fn splice_unit(
    text: &str,
    model: &FileModel,
    kernel: &Kernel,
    new_unit: &str,
) -> Result<String, ReplyError> {
    splice_unit_with_spec(text, model, kernel, new_unit, &[])
}

/// [`splice_unit`], and when `new_spec` is not empty, the kernel's `@bench` lines
/// replaced by those statements (written with the block's own comment prefix and
/// indentation, where the first `@bench` line was; other comment lines of the block
/// stay).
pub fn splice_unit_with_spec(
    text: &str,
    model: &FileModel,
    kernel: &Kernel,
    new_unit: &str,
    new_spec: &[String],
) -> Result<String, ReplyError> {
    let lang = model.lang;
    let unit = Analyzed::new(lang, new_unit);
    if let Some(e) = unit.model.syntax_errors.first() {
        let (line, column) = unit.line_col(e.range.start);
        return Err(ReplyError::Syntax {
            line,
            column,
            message: e.message.clone(),
        });
    }
    let new_kernel = unit.kernel(&kernel.name)?;
    let file = Analyzed::file(lang, text);

    // The callee definitions to remove, and the ones other kernels share.
    let sharers = |r: &ByteRange| -> Vec<String> {
        model
            .kernels
            .iter()
            .filter(|k| k.name != kernel.name && k.unit_ranges.contains(r))
            .map(|k| k.name.clone())
            .collect()
    };
    let callee_ranges: Vec<&ByteRange> = kernel
        .unit_ranges
        .iter()
        .filter(|r| **r != kernel.def_range)
        .collect();
    let removed: Vec<ByteRange> = callee_ranges
        .iter()
        .filter(|r| sharers(r).is_empty())
        .map(|r| (*r).clone())
        .collect();
    let inside = |r: &ByteRange, outer: &ByteRange| outer.start <= r.start && r.end <= outer.end;
    let staying: Vec<FunctionDef> = file
        .functions()
        .into_iter()
        .filter(|f| {
            !inside(&f.range, &kernel.def_range) && !removed.iter().any(|r| inside(&f.range, r))
        })
        .collect();

    // New functions whose names the file keeps: identical shared helpers are dropped
    // from the new unit, anything else is a clash.
    let mut dropped: Vec<ByteRange> = Vec::new();
    for f in unit.functions() {
        let same_name: Vec<&FunctionDef> = staying.iter().filter(|s| s.name == f.name).collect();
        if same_name.is_empty()
            || (f.name == kernel.name && inside(&f.range, &new_kernel.def_range))
        {
            continue;
        }
        let new_text = squashed(&new_unit[f.range.clone()]);
        let shared: Vec<String> = same_name
            .iter()
            .flat_map(|s| {
                callee_ranges
                    .iter()
                    .filter(|r| inside(&s.range, r))
                    .flat_map(|r| sharers(r))
                    .collect::<Vec<_>>()
            })
            .collect();
        let identical = !shared.is_empty()
            && same_name
                .iter()
                .any(|s| squashed(&text[s.range.clone()]) == new_text);
        if identical {
            dropped.push(f.range.clone());
        } else {
            return Err(ReplyError::NameClash {
                name: f.name,
                shared_with: shared,
            });
        }
    }
    let keep = |range: ByteRange| -> String {
        let mut out = String::new();
        let mut at = range.start;
        for d in dropped.iter().filter(|d| inside(d, &range)) {
            out.push_str(&new_unit[at..d.start]);
            at = d.end;
        }
        out.push_str(&new_unit[at..range.end]);
        out
    };
    let kr = new_kernel.def_range.clone();
    let before = without_known_imports(lang, text, &keep(0..kr.start));
    let after = without_known_imports(lang, text, &keep(kr.end..new_unit.len()));
    let kernel_text = &new_unit[kr];

    // Edits on the file, as (range, replacement).
    let mut edits: Vec<(ByteRange, String)> = Vec::new();
    let mut replacement = kernel_text.to_string();
    if !after.trim().is_empty() {
        replacement.push_str("\n\n");
        replacement.push_str(after.trim());
    }
    edits.push((kernel.def_range.clone(), replacement));
    if !before.trim().is_empty() {
        let anchor = kernel
            .spec
            .range
            .as_ref()
            .map_or(kernel.def_range.start, |r| r.start);
        let at = line_start(text, anchor);
        edits.push((at..at, format!("{}\n\n", before.trim())));
    }
    for r in &removed {
        edits.push((extend_over_blank_tail(text, r.clone()), String::new()));
    }
    if !new_spec.is_empty() {
        edits.extend(spec_edits(lang, text, kernel, new_spec));
    }
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    for pair in edits.windows(2) {
        if pair[0].0.end > pair[1].0.start {
            return Err(ReplyError::SpliceBroken {
                what: "would overlap itself (a helper inside the kernel's definition?)".into(),
            });
        }
    }
    let mut out = text.to_string();
    for (range, with) in edits.iter().rev() {
        out.replace_range(range.clone(), with);
    }
    check_spliced(lang, model, kernel, &out, new_spec)?;
    Ok(out)
}

/// Edits that replace the kernel's `@bench` lines with `new_spec`: the first line's
/// whole line becomes the new lines, the others are removed.
fn spec_edits(
    lang: Lang,
    text: &str,
    kernel: &Kernel,
    new_spec: &[String],
) -> Vec<(ByteRange, String)> {
    let Some(first) = kernel.spec.lines.first() else {
        return Vec::new();
    };
    let whole_line = |offset: usize| {
        let start = line_start(text, offset);
        let end = text[offset..]
            .find('\n')
            .map_or(text.len(), |i| offset + i + 1);
        start..end
    };
    let first_range = whole_line(first.offset);
    let line = &text[first_range.clone()];
    let indent: String = line
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect();
    let prefix = match lang {
        Lang::Cuda => "// @bench ",
        Lang::Triton => "# @bench ",
    };
    let block: String = new_spec
        .iter()
        .map(|s| format!("{indent}{prefix}{s}\n"))
        .collect();
    let mut edits = vec![(first_range.clone(), block)];
    let mut seen = vec![first_range];
    for l in &kernel.spec.lines[1..] {
        let r = whole_line(l.offset);
        if !seen.contains(&r) {
            seen.push(r.clone());
            edits.push((r, String::new()));
        }
    }
    edits
}

/// The invariants of a spliced file (see [`splice_unit`]).
fn check_spliced(
    lang: Lang,
    model: &FileModel,
    kernel: &Kernel,
    out: &str,
    new_spec: &[String],
) -> Result<(), ReplyError> {
    let after = Analyzed::file(lang, out);
    if after.model.syntax_errors.len() > model.syntax_errors.len() {
        let e = &after.model.syntax_errors[0];
        let (line, column) = after.line_col(e.range.start);
        return Err(ReplyError::SpliceBroken {
            what: format!(
                "does not parse: line {line}, column {column}: {}",
                e.message
            ),
        });
    }
    let found: Vec<&Kernel> = after
        .model
        .kernels
        .iter()
        .filter(|k| k.name == kernel.name)
        .collect();
    let [k] = found.as_slice() else {
        return Err(ReplyError::SpliceBroken {
            what: format!("defines the kernel `{}` {} times", kernel.name, found.len()),
        });
    };
    let names = |k: &Kernel| k.params.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
    let params_ok = if new_spec.is_empty() {
        names(k) == names(kernel)
    } else {
        same_params(k, &names(kernel))
    };
    if !params_ok {
        return Err(ReplyError::ParamsDiffer {
            kernel: kernel.name.clone(),
            expected: names(kernel),
            found: names(k),
        });
    }
    if k.template_params != kernel.template_params {
        return Err(ReplyError::SignatureChanged {
            what: format!(
                "template parameters from <{}> to <{}>",
                kernel.template_params.join(", "),
                k.template_params.join(", ")
            ),
        });
    }
    if k.extern_c != kernel.extern_c {
        let had = if kernel.extern_c {
            "had"
        } else {
            "did not have"
        };
        return Err(ReplyError::SignatureChanged {
            what: format!("linkage: it {had} `extern \"C\"`"),
        });
    }
    let spec = |k: &Kernel| {
        k.spec
            .lines
            .iter()
            .map(|l| l.text.clone())
            .collect::<Vec<_>>()
    };
    let want: Vec<String> = if new_spec.is_empty() {
        spec(kernel).iter().map(|l| l.trim().to_string()).collect()
    } else {
        new_spec.iter().map(|l| l.trim().to_string()).collect()
    };
    let got: Vec<String> = spec(k).iter().map(|l| l.trim().to_string()).collect();
    if got != want {
        return Err(ReplyError::SpliceBroken {
            what: "no longer has the kernel's `@bench` lines right above it".into(),
        });
    }
    Ok(())
}

/// `part` without the unindented `#include` (CUDA) or `import` (Python) lines that
/// `file` already has, word for word: a model repeating the file's imports should not
/// add a second copy above the kernel.
fn without_known_imports(lang: Lang, file: &str, part: &str) -> String {
    let is_import = |l: &str| match lang {
        Lang::Cuda => l.starts_with("#include"),
        Lang::Triton => l.starts_with("import ") || l.starts_with("from "),
    };
    let known = |l: &str| file.lines().any(|f| f.trim_end() == l.trim_end());
    part.split_inclusive('\n')
        .filter(|l| !(is_import(l) && known(l)))
        .collect()
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1)
}

/// `range` plus the rest of its last line if blank, and one following blank line.
fn extend_over_blank_tail(text: &str, range: ByteRange) -> ByteRange {
    let bytes = text.as_bytes();
    let mut end = range.end;
    for _ in 0..2 {
        let mut j = end;
        while j < bytes.len() && (bytes[j] == b' ' || bytes[j] == b'\t' || bytes[j] == b'\r') {
            j += 1;
        }
        if j < bytes.len() && bytes[j] == b'\n' {
            end = j + 1;
        } else {
            break;
        }
    }
    range.start..end
}

/// The strategist's choice from its reply: one fenced json block (tagged `json` or not);
/// a reply that is a bare JSON object is accepted too (JSON modes answer that way).
/// `id` must be a step of `catalog` or `free`; `params` may name only the step's
/// parameters; `free` needs a `description`. `rationale` is cut to its first line.
pub fn parse_strategy_reply(reply: &str, catalog: &Catalog) -> Result<Proposal, ReplyError> {
    let blocks = fenced_blocks(reply)?;
    let json_text = match blocks.as_slice() {
        [] if reply.trim_start().starts_with('{') => reply.trim().to_string(),
        [] => {
            return Err(ReplyError::NoJson {
                start: start_of(reply),
            })
        }
        [one] if matches!(one.tag.as_str(), "" | "json" | "jsonc") => one.code.clone(),
        [one] => {
            return Err(ReplyError::WrongLanguage {
                tag: one.tag.clone(),
                wanted: "JSON",
                expected: "```json",
            })
        }
        many => {
            return Err(ReplyError::SeveralBlocks {
                count: many.len(),
                lines: many.iter().map(|b| b.line).collect(),
            })
        }
    };
    let v: Value = serde_json::from_str(&json_text).map_err(|e| ReplyError::BadJson {
        what: e.to_string(),
    })?;
    let Some(obj) = v.as_object() else {
        return Err(ReplyError::BadJson {
            what: "it is not an object `{\"id\": ..., ...}`".into(),
        });
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(ReplyError::MissingField { field: "`id`" })
        }
        Some(other) => {
            return Err(ReplyError::BadJson {
                what: format!("`id` must be a string, not {other}"),
            })
        }
    };
    let params: BTreeMap<String, Value> = match obj.get("params") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Some(other) => {
            return Err(ReplyError::BadJson {
                what: format!("`params` must be an object, not {other}"),
            })
        }
    };
    let rationale = obj
        .get("rationale")
        .and_then(Value::as_str)
        .and_then(|r| r.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("")
        .to_string();
    let text_field = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    };
    let touches = text_field("code");
    let launch = text_field("launch");
    if id == "free" {
        let description = obj
            .get("description")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .ok_or(ReplyError::FreeWithoutDescription)?;
        return Ok(Proposal {
            id,
            params,
            rationale,
            free_form: Some(description.to_string()),
            touches,
            launch,
        });
    }
    let Some(step) = catalog.strategies.iter().find(|s| s.id == id) else {
        return Err(ReplyError::UnknownStrategy {
            id,
            valid: catalog.strategies.iter().map(|s| s.id.clone()).collect(),
        });
    };
    if let Some(name) = params.keys().find(|k| !step.params.contains_key(*k)) {
        return Err(ReplyError::UnknownParam {
            id,
            name: name.clone(),
            known: step.params.keys().cloned().collect(),
        });
    }
    Ok(Proposal {
        id,
        params,
        rationale,
        free_form: None,
        touches,
        launch,
    })
}

#[cfg(test)]
mod tests;
