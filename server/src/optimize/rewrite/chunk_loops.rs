//! Triton loops over chunk indices written as loops over offsets: `for i in range(0,
//! tl.cdiv(n, BLOCK)):` whose body reads `i` only as `i * BLOCK` becomes `for i in range(0,
//! n, BLOCK):` with each `i * BLOCK` written `i` (the matmul tutorial's style against the
//! one the loop cures read). The loop visits the same offsets in the same order: `i *
//! BLOCK` for `i` below `cdiv(n, BLOCK)` are exactly the multiples of BLOCK below `n`. A
//! start `S` becomes `(S) * BLOCK`; the `range` or `tl.range` call and its keyword
//! arguments (`num_stages=`) stay. The dispatcher retries a rewrite that refused the
//! kernel on this text (see [`super::apply`]).

use super::edits::{Edit, Edits};
use super::triton_loops::body_loops;
use super::RewriteContext;
use crate::optimize::facts::triton_loops::collapse;
use crate::syntax::Lang;

/// The file text with every chunk-index loop of the kernel's body written over offsets;
/// None when it has none.
pub(super) fn offset_loops(cx: &RewriteContext<'_>) -> Option<String> {
    if cx.lang != Lang::Triton {
        return None;
    }
    let (_, loops) = body_loops(cx).ok()?;
    let mut edits = Vec::new();
    for l in &loops {
        let Some(c) = l.chunks(cx.text) else { continue };
        let args = l.range_args?;
        let mut c2 = args.walk();
        let positional: Vec<_> = args
            .named_children(&mut c2)
            .filter(|a| a.kind() != "keyword_argument" && a.kind() != "comment")
            .collect();
        let (first, last) = (positional.first()?, positional.last()?);
        if collapse(&cx.text[last.byte_range()]) != l.stop {
            return None;
        }
        let range = format!("{}, {}, {}", c.start, c.n, c.block);
        edits.push(Edit::replace(first.start_byte()..last.end_byte(), range));
        for p in &c.products {
            edits.push(Edit::replace(p.byte_range(), l.var.clone()));
        }
    }
    if edits.is_empty() {
        return None;
    }
    let mut all = Edits::new();
    all.extend(edits);
    all.apply(cx.text).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::with_text;
    use super::*;

    fn offsets(src: &str) -> Option<String> {
        with_text(Lang::Triton, src, "k", &BTreeMap::new(), offset_loops).flatten()
    }

    const HEAD: &str = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, y, n, B: tl.constexpr):\n    pid = tl.program_id(0)\n    acc = tl.zeros([B], dtype=tl.float32)\n";

    #[test]
    fn chunk_indices_read_as_offsets_become_an_offset_loop() {
        let src = format!("{HEAD}    for i in range(0, tl.cdiv(n, B)):\n        offs = i * B + tl.arange(0, B)\n        acc += tl.load(x + pid * n + offs, mask=offs < n, other=0.0)\n    tl.store(y + pid, tl.sum(acc, axis=0))\n");
        let out = offsets(&src).unwrap();
        assert!(
            out.contains("    for i in range(0, n, B):\n        offs = i + tl.arange(0, B)\n"),
            "{out}"
        );
        let staged = format!("{HEAD}    for k in tl.range(1, triton.cdiv(n, B), num_stages=3):\n        v = tl.load(x + B * k + tl.arange(0, B), mask=B * k + tl.arange(0, B) < n)\n        acc += v\n    tl.store(y + pid, tl.sum(acc, axis=0))\n");
        let out = offsets(&staged).unwrap();
        assert!(
            out.contains("for k in tl.range((1) * B, n, B, num_stages=3):\n        v = tl.load(x + k + tl.arange(0, B), mask=k + tl.arange(0, B) < n)"),
            "{out}"
        );
    }

    #[test]
    fn indices_read_otherwise_stay() {
        let bodies = [
            // the index itself, not only its product
            "    for i in range(0, tl.cdiv(n, B)):\n        offs = i * B + tl.arange(0, B)\n        acc += tl.load(x + offs, mask=offs < n, other=0.0) * i\n",
            // a product by another block
            "    for i in range(0, tl.cdiv(n, B)):\n        offs = i * 64 + tl.arange(0, B)\n        acc += tl.load(x + offs, mask=offs < n, other=0.0)\n",
            // not a cdiv bound
            "    for i in range(0, n // B):\n        offs = i * B + tl.arange(0, B)\n        acc += tl.load(x + offs)\n",
            // already over offsets
            "    for i in range(0, n, B):\n        offs = i + tl.arange(0, B)\n        acc += tl.load(x + offs, mask=offs < n, other=0.0)\n",
        ];
        for b in bodies {
            let src = format!("{HEAD}{b}    tl.store(y + pid, tl.sum(acc, axis=0))\n");
            assert_eq!(offsets(&src), None, "{b}");
        }
    }
}
