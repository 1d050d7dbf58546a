use super::*;
use crate::document::Document;
use crate::syntax::Lang;

/// The statements of `f`'s body (`body` wrapped in a kernel) and the source.
fn with_body(body: &str, f: impl FnOnce(&str, Vec<Node<'_>>)) {
    let src = format!("__global__ void k(const float* A, int M, int K) {{\n{body}\n}}\n");
    let doc = Document::new(Lang::Cuda, 0, &src);
    let tree = doc.tree().expect("parses");
    let mut stmts = Vec::new();
    walk(tree.root_node(), &mut |n| {
        if n.kind() == "compound_statement" && stmts.is_empty() {
            let mut c = n.walk();
            stmts = n.named_children(&mut c).collect();
            return false;
        }
        true
    });
    f(&src, stmts);
}

/// Each declaration of `body` judged in order from the parameters: (name, why not).
fn judge(body: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    with_body(body, |src, stmts| {
        let assigned = assigned_names(src, &stmts);
        let mut u = Uniform::new(["A", "M", "K"]);
        for s in stmts.iter().filter(|s| s.kind() == "declaration") {
            let whole = u.declare(src, *s, &assigned);
            let mut c = s.walk();
            for d in s.children_by_field_name("declarator", &mut c) {
                let mut n = d;
                while let Some(inner) = n.child_by_field_name("declarator") {
                    n = inner;
                }
                let name = text(src, n).to_string();
                assert_eq!(u.contains(&name), whole, "{name}");
                out.push((name.clone(), (!whole).then(|| u.why_not(&name))));
            }
        }
    });
    out
}

#[test]
fn a_batch_from_blockidx_z_and_parameters_is_the_same_in_every_thread_of_a_block() {
    let got = judge(
        "int b = blockIdx.z;
         const float* a = A + (size_t)b * M * K;
         const long long off = static_cast<long long>(b) * M, n2 = gridDim.z * K;
         float* p = A + (b < M ? b : M) * K;
         const float* __restrict__ r = &A[b * K];",
    );
    assert!(got.iter().all(|(_, w)| w.is_none()), "{got:?}");
}

#[test]
fn what_differs_between_threads_or_is_reassigned_is_not_uniform_and_says_why() {
    let got = judge(
        "int b = blockIdx.z;
         int t = threadIdx.z;
         int r = blockIdx.y * 16 + t;
         int h = b + t, w = b;
         int s = blockDim.x;
         float acc = 0.0f;
         int x = A[b];
         int y = min(b, M);
         int u;
         const float* q = A + b;
         for (int i = 0; i < K; ++i) { acc += 1.0f; q += 1; }",
    );
    let why: Vec<String> = got
        .iter()
        .map(|(n, w)| format!("{n}: {}", w.as_deref().unwrap_or("uniform")))
        .collect();
    assert_eq!(
        why,
        [
            "b: uniform",
            "t: reads `threadIdx.z`",
            "r: reads `blockIdx.y`",
            "h: names `t`",
            "w: is declared with `h`, which names `t`",
            "s: reads `blockDim.x`",
            "acc: is assigned in the loop or after it",
            "x: reads memory (`A[b]`)",
            "y: calls `min`",
            "u: has no initial value",
            "q: is assigned in the loop or after it",
        ]
    );
}

#[test]
fn only_the_z_block_position_and_grid_size_are_kept() {
    with_body(
        "x = blockIdx.z + gridDim.z + blockIdx.x + gridDim.y + threadIdx.z + blockDim.z + p.z;",
        |src, stmts| {
            let mut kept = Vec::new();
            walk(stmts[0], &mut |n| {
                if let Some(k) = kept_position(src, n) {
                    kept.push(format!("{} {k}", text(src, n)));
                }
                true
            });
            assert_eq!(
                kept,
                [
                    "blockIdx.z true",
                    "gridDim.z true",
                    "blockIdx.x false",
                    "gridDim.y false",
                    "threadIdx.z false",
                    "blockDim.z false",
                ]
            );
        },
    );
}

#[test]
fn assignments_increments_and_taken_addresses_are_assignments() {
    with_body(
        "a = 1; b += 2; ++c; d--; f(&e); g[0] = 1; h = &A[0];",
        |src, stmts| {
            let got: Vec<String> = assigned_names(src, &stmts).into_iter().collect();
            assert_eq!(got, ["a", "b", "c", "d", "e", "h"]);
        },
    );
}
