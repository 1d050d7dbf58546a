//! Prompt templates: `prompts/{strategy,coder,repair}.md`, compiled in with
//! `include_str!`, each replaceable by a file of the same name in the user's prompt
//! folder (`llm.promptsDir`). Pure apart from reading that folder in [`Prompts::load`].
//!
//! Template format (also in each file's header): a leading `<!-- ... -->` comment is
//! not sent; the line `# system` starts the system message and the line `# user` the
//! user message (each exactly once, in that order; headings inside the messages use
//! `##`); `{{name}}` is replaced by a value. Every placeholder is checked when the
//! template is loaded, against the names known for that template, and the ones the
//! template cannot do without must appear, so a bad user template fails at load with
//! its file, line and name, not halfway through an optimization run. Values are
//! inserted as they are, in one pass: a value that contains `{{x}}` is not expanded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Template {
    Strategy,
    Coder,
    Repair,
}

impl Template {
    pub const ALL: [Template; 3] = [Template::Strategy, Template::Coder, Template::Repair];

    /// The file name, in `prompts/` and in the user's folder.
    pub fn file_name(self) -> &'static str {
        match self {
            Template::Strategy => "strategy.md",
            Template::Coder => "coder.md",
            Template::Repair => "repair.md",
        }
    }

    /// Every placeholder the template may use.
    pub fn placeholders(self) -> &'static [&'static str] {
        match self {
            Template::Strategy => &[
                "kernel_name",
                "lang",
                "kernel_unit",
                "spec",
                "facts",
                "device",
                "timing",
                "history",
                "catalog",
                "profile",
            ],
            Template::Coder => &[
                "kernel_name",
                "lang",
                "kernel_unit",
                "spec",
                "step",
                "facts",
                "device",
            ],
            Template::Repair => &[
                "kernel_name",
                "lang",
                "kernel_unit",
                "spec",
                "step",
                "facts",
                "device",
                "previous_code",
                "feedback",
            ],
        }
    }

    /// The placeholders the template must use: without them the model cannot do its job.
    pub fn required(self) -> &'static [&'static str] {
        match self {
            Template::Strategy => &["kernel_unit", "catalog"],
            Template::Coder => &["kernel_unit", "step"],
            Template::Repair => &["kernel_unit", "previous_code", "feedback"],
        }
    }

    fn embedded(self) -> &'static str {
        match self {
            Template::Strategy => include_str!("../../../../prompts/strategy.md"),
            Template::Coder => include_str!("../../../../prompts/coder.md"),
            Template::Repair => include_str!("../../../../prompts/repair.md"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("the prompt folder {} (`llm.promptsDir`) is not a folder; fix the setting or create it", .path.display())]
    NoFolder { path: PathBuf },
    #[error("cannot read the prompt template {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}:{line}: unknown placeholder `{{{{{name}}}}}`; {template} knows {}", known.join(", "))]
    UnknownPlaceholder {
        file: String,
        line: usize,
        name: String,
        template: &'static str,
        known: Vec<&'static str>,
    },
    #[error("{file}:{line}: `{{{{` without a closing `}}}}` on the same line")]
    Unclosed { file: String, line: usize },
    #[error("{file}: the template never uses `{{{{{name}}}}}`, which it needs; put it where the model should see it")]
    MissingPlaceholder { file: String, name: &'static str },
    #[error("{file}:{line}: {message}")]
    Layout {
        file: String,
        line: usize,
        message: String,
    },
    #[error("no value was given for `{{{{{name}}}}}` of {file}")]
    MissingValue { file: String, name: &'static str },
}

/// One piece of a parsed message.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Text(String),
    Var(&'static str),
}

/// A checked template.
#[derive(Clone, Debug, PartialEq)]
struct Parsed {
    /// Where it came from, for messages: a path, or `prompts/coder.md (built in)`.
    file: String,
    system: Vec<Piece>,
    user: Vec<Piece>,
}

/// The three templates, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompts {
    templates: BTreeMap<Template, Parsed>,
}

impl Prompts {
    /// The embedded templates, each replaced by `dir/<file name>` when that file exists.
    /// A `dir` that is not a folder is an error (a mistyped setting should not silently
    /// fall back to the built-in prompts).
    pub fn load(dir: Option<&Path>) -> Result<Prompts, PromptError> {
        if let Some(d) = dir.filter(|d| !d.is_dir()) {
            return Err(PromptError::NoFolder {
                path: d.to_path_buf(),
            });
        }
        let mut templates = BTreeMap::new();
        for t in Template::ALL {
            let user_file = dir.map(|d| d.join(t.file_name())).filter(|p| p.is_file());
            let parsed = match user_file {
                Some(path) => {
                    let text =
                        std::fs::read_to_string(&path).map_err(|source| PromptError::Read {
                            path: path.clone(),
                            source,
                        })?;
                    parse(t, &path.display().to_string(), &text)?
                }
                None => parse(
                    t,
                    &format!("prompts/{} (built in)", t.file_name()),
                    t.embedded(),
                )?,
            };
            templates.insert(t, parsed);
        }
        Ok(Prompts { templates })
    }

    /// Where `which` came from: the user's file or the built-in one.
    pub fn source(&self, which: Template) -> &str {
        self.templates
            .get(&which)
            .map_or("(not loaded)", |p| p.file.as_str())
    }

    /// The system and user messages of `which` with `vars` filled in. Every placeholder
    /// the template uses needs a value; extra values are ignored.
    pub fn render(
        &self,
        which: Template,
        vars: &BTreeMap<&str, String>,
    ) -> Result<(String, String), PromptError> {
        let parsed = self
            .templates
            .get(&which)
            .expect("Prompts::load fills every template");
        let fill = |pieces: &[Piece]| -> Result<String, PromptError> {
            let mut out = String::new();
            for p in pieces {
                match p {
                    Piece::Text(t) => out.push_str(t),
                    Piece::Var(name) => match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            return Err(PromptError::MissingValue {
                                file: parsed.file.clone(),
                                name,
                            })
                        }
                    },
                }
            }
            Ok(out.trim().to_string())
        };
        Ok((fill(&parsed.system)?, fill(&parsed.user)?))
    }
}

/// Parse and check one template. `file` names it in errors.
fn parse(which: Template, file: &str, text: &str) -> Result<Parsed, PromptError> {
    let layout = |line: usize, message: String| PromptError::Layout {
        file: file.to_string(),
        line,
        message,
    };
    // The header comment, if the file starts with one, is not part of any message.
    let body_start = {
        let lead = text.len() - text.trim_start().len();
        if text[lead..].starts_with("<!--") {
            match text[lead..].find("-->") {
                Some(end) => lead + end + 3,
                None => {
                    return Err(layout(
                        line_of(text, lead),
                        "the header comment `<!--` is never closed with `-->`".into(),
                    ))
                }
            }
        } else {
            0
        }
    };
    // Section heading lines, with their byte offsets.
    let mut system: Option<(usize, usize)> = None; // (line, offset after the heading)
    let mut user: Option<(usize, usize)> = None;
    let mut system_heading_start = 0;
    let mut user_heading_start = 0;
    let mut offset = body_start;
    for raw in text[body_start..].split_inclusive('\n') {
        let line = line_of(text, offset);
        let heading = raw.trim_end();
        let next = offset + raw.len();
        match heading {
            "# system" => {
                if system.is_some() {
                    return Err(layout(line, "a second `# system` line".into()));
                }
                system = Some((line, next));
                system_heading_start = offset;
            }
            "# user" => {
                if user.is_some() {
                    return Err(layout(line, "a second `# user` line".into()));
                }
                if system.is_none() {
                    return Err(layout(
                        line,
                        "`# user` comes before `# system`; the system message comes first".into(),
                    ));
                }
                user = Some((line, next));
                user_heading_start = offset;
            }
            _ => {}
        }
        offset = next;
    }
    let (Some((_, sys_start)), Some((_, user_start))) = (system, user) else {
        let missing = if system.is_none() {
            "`# system`"
        } else {
            "`# user`"
        };
        return Err(layout(
            line_of(text, body_start),
            format!("no {missing} line; a template has a `# system` line, then a `# user` line, each starting its message"),
        ));
    };
    let before = &text[body_start..system_heading_start];
    if !before.trim().is_empty() {
        let at = body_start + (before.len() - before.trim_start().len());
        return Err(layout(
            line_of(text, at),
            "text before `# system` belongs to no message; move it below `# system` or into the header comment".into(),
        ));
    }
    let mut used: Vec<&'static str> = Vec::new();
    let system_pieces = pieces(which, file, text, sys_start..user_heading_start, &mut used)?;
    let user_pieces = pieces(which, file, text, user_start..text.len(), &mut used)?;
    if let Some(name) = which.required().iter().find(|n| !used.contains(n)) {
        return Err(PromptError::MissingPlaceholder {
            file: file.to_string(),
            name,
        });
    }
    Ok(Parsed {
        file: file.to_string(),
        system: system_pieces,
        user: user_pieces,
    })
}

/// Split `text[range]` into text and placeholders, checking each name.
fn pieces(
    which: Template,
    file: &str,
    text: &str,
    range: std::ops::Range<usize>,
    used: &mut Vec<&'static str>,
) -> Result<Vec<Piece>, PromptError> {
    let mut out = Vec::new();
    let mut at = range.start;
    while let Some(open) = text[at..range.end].find("{{").map(|i| at + i) {
        out.push(Piece::Text(text[at..open].to_string()));
        let line_end = text[open..range.end]
            .find('\n')
            .map_or(range.end, |i| open + i);
        let Some(close) = text[open + 2..line_end].find("}}").map(|i| open + 2 + i) else {
            return Err(PromptError::Unclosed {
                file: file.to_string(),
                line: line_of(text, open),
            });
        };
        let name = text[open + 2..close].trim();
        let Some(known) = which.placeholders().iter().find(|k| **k == name) else {
            return Err(PromptError::UnknownPlaceholder {
                file: file.to_string(),
                line: line_of(text, open),
                name: name.to_string(),
                template: which.file_name(),
                known: which.placeholders().to_vec(),
            });
        };
        if !used.contains(known) {
            used.push(known);
        }
        out.push(Piece::Var(known));
        at = close + 2;
    }
    out.push(Piece::Text(text[at..range.end].to_string()));
    Ok(out)
}

/// 1-based line number of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn vars(pairs: &[(&'static str, &str)]) -> BTreeMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    const SAXPY_UNIT: &str = "extern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];\n}";

    #[test]
    fn the_built_in_templates_load() {
        let p = Prompts::load(None).unwrap();
        assert_eq!(p.source(Template::Coder), "prompts/coder.md (built in)");
        let missing = Path::new("/nonexistent/kernel-lsp-prompts");
        expect!["the prompt folder /nonexistent/kernel-lsp-prompts (`llm.promptsDir`) is not a folder; fix the setting or create it"]
            .assert_eq(&Prompts::load(Some(missing)).unwrap_err().to_string());
    }

    #[test]
    fn coder_messages() {
        let p = Prompts::load(None).unwrap();
        let (system, user) = p
            .render(
                Template::Coder,
                &vars(&[
                    ("kernel_name", "saxpy"),
                    ("lang", "CUDA"),
                    ("kernel_unit", SAXPY_UNIT),
                    ("spec", "// @bench n = 1 << 20, 4099\n// @bench x: in f32[n]; y: inout f32[n]\n// @bench grid = cdiv(n, 256); block = 256"),
                    ("step", "restrict_const: add `__restrict__` to every pointer parameter and `const` to the ones the kernel only reads."),
                    ("facts", "- one element per thread\n- registers: 8, spills: 0"),
                    ("device", "NVIDIA H100 80GB HBM3: 132 SMs, 228 KiB shared memory per SM, 50 MiB L2, 3.35 TB/s"),
                ]),
            )
            .unwrap();
        expect![[r#"
            You are the coder of kernel-lsp, a tool that makes GPU kernels faster, one verified
            step at a time. You rewrite one kernel unit (the kernel and the device helpers it
            calls) to carry out exactly the step you are given, and nothing else. Your code is
            compiled, verified against the current version on random inputs (including sizes that
            are not multiples of the block size), and timed. It is kept only if every output
            matches up to floating-point rounding and it is faster.

            Rules for the answer (a reply that breaks one is rejected):
            - Exactly one fenced code block (```cuda for CUDA, ```python for Triton) holding the
              complete replacement kernel unit: the kernel and every helper it calls, in an order
              that compiles (helpers first). Write every line: no "...", no "unchanged" stubs.
            - Keep the kernel's name, and its parameter list exactly: the same names in the same
              order with the same types. Keep `extern "C"`, template parameters, `tl.constexpr`
              annotations and `@triton.jit` where they were. Helpers may be added or changed; give a
              changed helper a new name if other kernels might use the old one.
            - The launch may change with the kernel. To change it, put the kernel's `@bench` lines
              above the kernel in your block, all of them, with only the launch lines changed:
              CUDA `grid`, `block`, `smem` (and helper names only the launch uses); Triton `grid`,
              constexpr values, `num_warps`, `num_stages`; `tune` lists. Sizes, buffers, dtypes,
              distributions, tolerances and the reference stay exactly as written; a reply that
              changes one is rejected. Your version is verified under its own launch. Without
              `@bench` lines in your block, the current launch stays and the kernel must work
              with it.
            - Triton: new `tl.constexpr` parameters may be added after the existing ones when your
              `@bench` launch line gives their values; every other parameter stays.
            - No host code: no `main`, no launch code, no allocations, no tests, no host headers.
            - Triton: the block holds only imports (triton, torch, math, numpy, typing), `@triton.jit`
              functions and constants (`NAME = 4` or `NAME = tl.constexpr(4)`); any other top-level
              statement is refused before anything runs.
            - Keep bounds checks and masks, so sizes that are not multiples of the block size stay
              correct.
            - Outside the block, at most a few lines of explanation."#]]
        .assert_eq(&system);
        expect![[r###"
            ## Kernel `saxpy` (CUDA), current version
            ```
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            ```

            ## Its `@bench` lines (the spec; only launch lines may change)
            ```
            // @bench n = 1 << 20, 4099
            // @bench x: in f32[n]; y: inout f32[n]
            // @bench grid = cdiv(n, 256); block = 256
            ```

            ## Step to carry out
            restrict_const: add `__restrict__` to every pointer parameter and `const` to the ones the kernel only reads.

            ## Static facts
            - one element per thread
            - registers: 8, spills: 0

            ## Device
            NVIDIA H100 80GB HBM3: 132 SMs, 228 KiB shared memory per SM, 50 MiB L2, 3.35 TB/s

            Write the complete replacement kernel unit in one fenced code block."###]]
        .assert_eq(&user);
    }

    #[test]
    fn strategy_and_repair_render_every_placeholder() {
        let p = Prompts::load(None).unwrap();
        for t in Template::ALL {
            let all: BTreeMap<&str, String> = t
                .placeholders()
                .iter()
                .map(|n| (*n, format!("<{n}>")))
                .collect();
            let (system, user) = p.render(t, &all).unwrap();
            let both = format!("{system}\n{user}");
            for n in t.placeholders() {
                assert!(both.contains(&format!("<{n}>")), "{t:?} never shows {n}");
            }
            assert!(!both.contains("{{"), "{t:?}: {both}");
            assert!(!system.contains("# user") && !both.contains("<!--"));
        }
    }

    #[test]
    fn values_are_not_expanded_again() {
        let t = "# system\nS\n# user\n{{kernel_unit}} {{step}}\n";
        let p = parse(Template::Coder, "t.md", t).unwrap();
        let prompts = Prompts {
            templates: [(Template::Coder, p)].into_iter().collect(),
        };
        let (s, u) = prompts
            .render(
                Template::Coder,
                &vars(&[("kernel_unit", "a {{step}} b"), ("step", "X")]),
            )
            .unwrap();
        assert_eq!((s.as_str(), u.as_str()), ("S", "a {{step}} b X"));
    }

    #[test]
    fn template_errors_name_file_line_and_placeholder() {
        let err = |t: Template, text: &str| parse(t, "my/coder.md", text).unwrap_err().to_string();
        expect!["my/coder.md:5: unknown placeholder `{{kernel_src}}`; coder.md knows kernel_name, lang, kernel_unit, spec, step, facts, device"]
            .assert_eq(&err(Template::Coder, "<!-- c -->\n# system\nS {{step}}\n# user\n{{kernel_src}}\n"));
        expect![[r#"my/coder.md: the template never uses `{{step}}`, which it needs; put it where the model should see it"#]]
            .assert_eq(&err(Template::Coder, "# system\nS\n# user\n{{ kernel_unit }}\n"));
        expect![[r#"my/coder.md:2: `{{` without a closing `}}` on the same line"#]].assert_eq(
            &err(
                Template::Coder,
                "# system\nS {{step\n}}\n# user\n{{kernel_unit}}\n",
            ),
        );
        expect![[r#"my/coder.md:1: no `# user` line; a template has a `# system` line, then a `# user` line, each starting its message"#]]
            .assert_eq(&err(Template::Coder, "# system\n{{step}} {{kernel_unit}}\n"));
        expect![[
            r#"my/coder.md:1: `# user` comes before `# system`; the system message comes first"#
        ]]
        .assert_eq(&err(Template::Coder, "# user\nU\n# system\nS\n"));
        expect![[r#"my/coder.md:1: text before `# system` belongs to no message; move it below `# system` or into the header comment"#]]
            .assert_eq(&err(Template::Coder, "hello\n# system\nS\n# user\nU\n"));
        expect![[r#"my/coder.md:1: the header comment `<!--` is never closed with `-->`"#]]
            .assert_eq(&err(Template::Coder, "<!-- oops\n# system\n"));
        // A placeholder of another template is unknown here.
        expect!["my/coder.md:4: unknown placeholder `{{feedback}}`; coder.md knows kernel_name, lang, kernel_unit, spec, step, facts, device"]
            .assert_eq(&err(Template::Coder, "# system\n{{step}}\n# user\n{{kernel_unit}} {{feedback}}\n"));
    }
}
