//! `@bench` lines that no kernel gets: a spec is the block of comment lines ending right
//! above a kernel (docs/spec.md, "Where it goes"), so lines written above a helper, an
//! `#include` or a blank line before the kernel are plain comments, and the kernel
//! silently has no spec ("no @bench spec" in the summary, every optimizer step refused).
//! [`check`] warns on the first such line between the previous kernel and this one,
//! naming the kernel and where the lines must go. Pure: text, kernels and report in.

use crate::spec::{Severity, SpecDiagnostic, SpecReport};
use crate::syntax::{Kernel, Lang};

/// Whether a line is a comment whose first word is `@bench`.
fn is_bench_line(lang: Lang, line: &str) -> bool {
    let t = line.trim_start();
    let rest = match lang {
        Lang::Cuda => t
            .strip_prefix("//")
            .or_else(|| t.strip_prefix("/*"))
            .or_else(|| t.strip_prefix('*')),
        Lang::Triton => t.strip_prefix('#'),
    };
    rest.is_some_and(|r| {
        let r = r.trim_start();
        r.strip_prefix("@bench")
            .is_some_and(|after| after.is_empty() || after.starts_with(char::is_whitespace))
    })
}

/// Each line of `text` with its start, ended by `\n`, `\r\n` or a lone `\r` (not kept).
fn lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' || bytes[i] == b'\r' {
            out.push((start, &text[start..i]));
            i += usize::from(bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n'));
            start = i + 1;
        }
        i += 1;
    }
    out.push((start, &text[start..]));
    out
}

/// Adds a warning when `@bench` lines lie between the kernel before `kernels[i]` (or the
/// start of the file) and `kernels[i]`, outside `kernels[i]`'s own spec block.
pub fn check(text: &str, kernels: &[Kernel], i: usize, report: &mut SpecReport) {
    let k = &kernels[i];
    let from = kernels[..i]
        .iter()
        .map(|p| p.def_range.end)
        .filter(|e| *e <= k.def_range.start)
        .max()
        .unwrap_or(0);
    let own = k.spec.range.clone().unwrap_or(0..0);
    let Some(region) = text.get(from..k.def_range.start) else {
        return;
    };
    for (offset, line) in lines(region) {
        let start = from + offset;
        if own.contains(&start) || !is_bench_line(k.lang, line) {
            continue;
        }
        let lead = line.len() - line.trim_start().len();
        let has = if k.spec.lines.is_empty() {
            format!("so `{}` has no spec", k.name)
        } else {
            format!("`{}`'s spec is only the block right above it", k.name)
        };
        report.diagnostics.push(SpecDiagnostic {
            range: start + lead..start + line.trim_end().len(),
            severity: Severity::Warning,
            message: format!(
                "this @bench line belongs to no kernel: a blank line or code separates it from `{}`, {has}; a spec is the block of comment lines ending right above the kernel (above `template <...>`, `extern \"C\"` or its decorators)",
                k.name
            ),
        });
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(lang: Lang, src: &str) -> Vec<String> {
        let doc = crate::document::Document::new(lang, 0, src);
        let model = crate::syntax::analyze(lang, src, doc.tree().expect("parses"));
        (0..model.kernels.len())
            .flat_map(|i| {
                let mut r = SpecReport {
                    plan: None,
                    diagnostics: Vec::new(),
                };
                check(src, &model.kernels, i, &mut r);
                r.diagnostics
                    .into_iter()
                    .map(|d| format!("{}: {}", &src[d.range], d.message))
            })
            .collect()
    }

    #[test]
    fn bench_lines_above_a_helper_or_a_blank_line_are_named() {
        let src = "// Cosine rows.\n// @bench rows = 100\n// @bench grid = 1; block = 32\n__device__ float h(float v) { return v; }\n\n__global__ void k(float* y, int rows) { y[0] = h(1.0f); }\n";
        expect_test::expect![[r#"
            [
                "// @bench rows = 100: this @bench line belongs to no kernel: a blank line or code separates it from `k`, so `k` has no spec; a spec is the block of comment lines ending right above the kernel (above `template <...>`, `extern \"C\"` or its decorators)",
            ]
        "#]]
        .assert_debug_eq(&warnings(Lang::Cuda, src));
        let py = "import triton\n# @bench n = 10\n\n@triton.jit\ndef k(x, n):\n    pass\n";
        assert_eq!(warnings(Lang::Triton, py).len(), 1);
    }

    #[test]
    fn a_kernel_s_own_block_and_other_comments_are_quiet() {
        assert_eq!(
            lines("a\r\nb\rc\n"),
            [(0, "a"), (3, "b"), (5, "c"), (7, "")]
        );
        let src = "// Uses @bench specs.\n/* @benchmark notes */\n// @bench n = 4\n// @bench grid = 1; block = 32\n__global__ void k(float* y, int n) { }\n\n// @bench n = 8\n// @bench grid = 1; block = 32\ntemplate <int B>\n__global__ void t(float* y, int n) { }\n";
        assert_eq!(warnings(Lang::Cuda, src), Vec::<String>::new());
        let py = "\"\"\"Doc.\"\"\"\n# @bench n = 10\n# @bench grid = 1\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x, n):\n    pass\n";
        assert_eq!(warnings(Lang::Triton, py), Vec::<String>::new());
    }
}
