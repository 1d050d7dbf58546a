//! Hover on a kernel: its signature, its spec as tables, and its compiled resources.

use tower_lsp::lsp_types::{Hover, HoverContents, MarkupContent, MarkupKind, Position};

use crate::analysis::{self, CompileOutcome, FileAnalysis};
use crate::document::{Document, LinePos, PositionEncoding};
use crate::settings::Settings;
use crate::syntax::Lang;

use super::convert::lsp_range;

pub fn hover(
    doc: &Document,
    analysis: &FileAnalysis,
    compile: Option<&CompileOutcome>,
    pos: Position,
    enc: PositionEncoding,
    settings: &Settings,
) -> Option<Hover> {
    let offset = doc
        .offset(
            LinePos {
                line: pos.line,
                col: pos.character,
            },
            enc,
        )
        .ok()?;
    let model = &analysis.model;
    // On the kernel's name, or anywhere in its spec block.
    let idx = model.kernels.iter().position(|k| {
        (k.name_range.start..=k.name_range.end).contains(&offset)
            || k.spec
                .range
                .as_ref()
                .is_some_and(|r| (r.start..=r.end).contains(&offset))
    })?;
    let kernel = &model.kernels[idx];
    let report = analysis.specs.get(idx)?;

    let text = doc.text();
    let mut md = String::new();
    let sig = signature_text(
        text,
        kernel.def_range.clone(),
        kernel.name_range.start,
        kernel.lang,
    );
    let fence = if kernel.lang == Lang::Cuda {
        "cuda"
    } else {
        "python"
    };
    md.push_str(&format!("```{fence}\n{sig}\n```\n"));
    if !kernel.callees.is_empty() {
        md.push_str(&format!(
            "\nKernel unit: `{}` + {}\n",
            kernel.name,
            kernel
                .callees
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    md.push_str("\n---\n");
    match &report.plan {
        Some(plan) => md.push_str(&plan.hover_markdown()),
        None if kernel.spec.lines.is_empty() => md.push_str(
            "No `@bench` spec: this kernel can be compiled but not verified, timed or optimized. Use the code action **Insert @bench spec**.\n",
        ),
        None => md.push_str("The `@bench` spec has errors (see diagnostics).\n"),
    }
    if kernel.lang == Lang::Cuda {
        md.push_str("\n---\n");
        match compile.and_then(|c| analysis::resources_for(&c.resources, kernel)) {
            Some(r) => md.push_str(&format!(
                "**Resources** (ptxas, {}): {} registers · {} shared · {} stack · spills {} B stored / {} B loaded\n",
                settings.arch,
                r.registers,
                analysis::human_bytes(r.shared_bytes),
                analysis::human_bytes(r.stack_bytes),
                r.spill_stores,
                r.spill_loads
            )),
            None => {
                let why = if !settings.compile_on_type {
                    "compile checks are off (setting compileOnType)".to_string()
                } else {
                    compile.and_then(|c| c.note.clone()).unwrap_or_else(|| "not compiled yet".to_string())
                };
                md.push_str(&format!("**Resources**: unknown ({why})\n"));
            }
        }
    }
    Some(Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value: md,
        }),
        range: Some(lsp_range(doc, &kernel.name_range, enc)),
    })
}

/// The kernel's declaration up to its body, whitespace-collapsed for display.
fn signature_text(
    text: &str,
    def: std::ops::Range<usize>,
    name_start: usize,
    lang: Lang,
) -> String {
    let def_text = text.get(def.clone()).unwrap_or("");
    let rel_name = name_start.saturating_sub(def.start);
    let end = match lang {
        Lang::Cuda => def_text
            .get(rel_name..)
            .and_then(|t| t.find('{'))
            .map(|i| rel_name + i),
        Lang::Triton => {
            // Up to the `:` that ends the `def` line: the first `:` after the closing
            // parenthesis of the parameter list at depth zero.
            let mut depth = 0i32;
            let mut seen_paren = false;
            def_text
                .char_indices()
                .skip_while(|(i, _)| *i < rel_name)
                .find(|&(_, c)| {
                    match c {
                        '(' | '[' => {
                            depth += 1;
                            seen_paren = true;
                        }
                        ')' | ']' => depth -= 1,
                        ':' if depth == 0 && seen_paren => return true,
                        _ => {}
                    }
                    false
                })
                .map(|(i, _)| i + 1)
        }
    };
    let sig = &def_text[..end.unwrap_or(def_text.len()).min(def_text.len())];
    let collapsed: Vec<&str> = sig.split_whitespace().collect();
    let mut s = collapsed.join(" ");
    if s.len() > 2000 {
        let mut cut = 2000;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(" …");
    }
    s
}

/// The kernel's Nsight Compute profile, for the hover: the diagnosis and the metrics.
pub fn profile_section(p: &crate::profile::Profile) -> String {
    let mut md = format!(
        "\n\n**Profile** (Nsight Compute): {}\n\n| metric | value |\n| --- | --- |\n",
        p.diagnosis()
    );
    for (k, v) in p.table() {
        md.push_str(&format!("| {k} | {v} |\n"));
    }
    md
}
