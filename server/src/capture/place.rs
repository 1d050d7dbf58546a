//! Where captured statements go: a `@bench` block directly above the kernel (above its
//! decorators, `template <...>` or `extern "C"`), indented like the kernel, as a text edit on the file. Pure: the file's text
//! in, edits out. A kernel that already has a spec keeps it unless `replace` is asked,
//! in which case the old block's lines are the edit's range.

use crate::document::Document;
use crate::syntax::Lang;

/// One edit: replace `start..end` of the text with `text`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    pub kernel: String,
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// Edits that write `specs` (kernel name, statements) into `text`, or per kernel why not.
pub fn edits(
    lang: Lang,
    text: &str,
    specs: &[(String, Vec<String>)],
    replace: bool,
) -> (Vec<Edit>, Vec<(String, String)>) {
    let doc = Document::new(lang, 0, text);
    let opts = crate::analysis::AnalyzeOptions::default();
    let model = crate::analysis::analyze(lang, text, doc.tree(), &opts).model;
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for (name, lines) in specs {
        let Some(k) = model.kernels.iter().find(|k| &k.name == name) else {
            skipped.push((
                name.clone(),
                match lang {
                    Lang::Triton => "the file has no @triton.jit kernel of that name".into(),
                    Lang::Cuda => "the file has no __global__ kernel of that name".into(),
                },
            ));
            continue;
        };
        let sk = crate::spec::skeleton(k, text);
        // The skeleton's lines carry the kernel's indentation and comment prefix.
        let prefix = sk
            .text
            .lines()
            .next()
            .and_then(|l| l.split("@bench").next());
        let prefix = prefix.unwrap_or("# ");
        let block: String = lines
            .iter()
            .map(|l| format!("{prefix}@bench {l}\n"))
            .collect();
        let (start, end) = match (&k.spec.range, replace) {
            (Some(_), false) => {
                skipped.push((
                    name.clone(),
                    "it already has a @bench spec (left as it is; --replace writes over it)".into(),
                ));
                continue;
            }
            (Some(r), true) => line_span(text, r.start, r.end),
            (None, _) => (sk.insert_at, sk.insert_at),
        };
        out.push(Edit {
            kernel: name.clone(),
            start,
            end,
            text: block,
        });
    }
    (out, skipped)
}

/// Whole lines from the one holding `start` through the one holding `end`.
fn line_span(text: &str, start: usize, end: usize) -> (usize, usize) {
    let s = text
        .get(..start)
        .and_then(|t| t.rfind('\n'))
        .map_or(0, |i| i + 1);
    let e = text
        .get(end..)
        .and_then(|t| t.find('\n'))
        .map_or(text.len(), |i| end + i + 1);
    (s, e)
}

/// The text with `edits` applied (they do not overlap; any order).
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| std::cmp::Reverse(e.start));
    let mut out = text.to_string();
    for e in sorted {
        out.replace_range(e.start..e.end, &e.text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "import triton\n\nclass K:\n    pass\n\n@triton.jit\ndef k(x_ptr, n):\n    pass\n\n# @bench n = 4\n# @bench x_ptr: in f32[n]\n# @bench grid = 1\n@triton.jit\ndef j(x_ptr, n):\n    pass\n";

    fn specs() -> Vec<(String, Vec<String>)> {
        let lines = vec!["n = 8".to_string(), "grid = 1".to_string()];
        vec![
            ("k".into(), lines.clone()),
            ("j".into(), lines),
            ("z".into(), vec![]),
        ]
    }

    #[test]
    fn inserts_above_the_decorators_and_keeps_an_existing_spec() {
        let (e, skipped) = edits(Lang::Triton, SRC, &specs(), false);
        assert_eq!(e.len(), 1);
        let out = apply(SRC, &e);
        assert!(
            out.contains("    pass\n\n# @bench n = 8\n# @bench grid = 1\n@triton.jit\ndef k("),
            "{out}"
        );
        assert_eq!(skipped[0].0, "j");
        assert!(skipped[0].1.contains("already has a @bench spec"));
        assert!(skipped[1].1.contains("no @triton.jit kernel"));
    }

    #[test]
    fn replace_writes_over_the_old_block() {
        let (e, _) = edits(Lang::Triton, SRC, &specs(), true);
        let out = apply(SRC, &e);
        assert!(!out.contains("# @bench n = 4"), "{out}");
        assert!(
            out.contains("# @bench n = 8\n# @bench grid = 1\n@triton.jit\ndef j("),
            "{out}"
        );
    }
}
