//! The optimizer's rule against a PyTorch reference (`optimize::judge`), for real: a
//! worker on Triton's CPU interpreter verifies candidates of a sequential f32 matmul
//! against the f64 product, counting each case's elements outside the tolerance, and a
//! step's batch passes the candidates no less accurate than the current version: a
//! product accumulated in f64 passes (the old check against the current version's own
//! rounding fails it), plain TF32 operands, a k term dropped, one element far off, one
//! NaN and a write past the edge fail. Without a reference in the spec the old check is kept.

use kernel_lsp::optimize::evaluate::{self, Candidate};
use kernel_lsp::optimize::judge::{Judge, Rule};
use kernel_lsp::spec::EvalEnv;
use kernel_lsp::syntax::Lang;
use kernel_lsp::worker::pool::{PoolConfig, WorkerPool};

use crate::tools;

/// A sequential k loop of f32 multiply-adds, one 16x16 tile per program. `REF` is the
/// spec's reference line; `ACC`, `X`, `Y`, `KS`, `OUT` make the candidates.
const MM: &str = r#"import triton
import triton.language as tl


# @bench M = 16, 7; N = 16, 5; K = 128, 33
# @bench a: in f32[M, K]; b: in f32[K, N]; c: out f32[M, N]
# @bench grid = (cdiv(M, BM), cdiv(N, BN)); BM = 16; BN = 16
REF
# @bench atol = 0; rtol = 1e-6
@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=ACC)
    for k in range(0, KS):
        x = tl.load(a + rm * K + k, mask=rm < M, other=0.0)
        y = tl.load(b + k * N + rn, mask=rn < N, other=0.0)
        acc += X[:, None] * Y[None, :]
    tl.store(c + rm[:, None] * N + rn[None, :], OUT,
             mask=(rm[:, None] < M) & (rn[None, :] < N))
"#;

const F64_REF: &str = "# @bench reference = torch: (a.double() @ b.double()).float()";
const MODULE_REF: &str = "# @bench reference = torch: refs.exact_mm";
const MODULE: &str =
    "import torch\n\n\ndef exact_mm(a, b):\n    return (a.double() @ b.double()).float()\n";

/// The kernel with `reference` and the candidate's pieces.
fn kernel(reference: &str, acc: &str, x: &str, y: &str, ks: &str, out: &str) -> String {
    MM.replace("REF", reference)
        .replace("ACC", acc)
        .replace("X[", &format!("{x}["))
        .replace("Y[", &format!("{y}["))
        .replace("KS", ks)
        .replace("OUT", out)
}

/// The author's loop: f32 products added one by one.
fn current(reference: &str) -> String {
    kernel(reference, "tl.float32", "x", "y", "K", "acc")
}

/// (label, text) of each candidate, and whether the rule must pass it.
fn candidates(reference: &str) -> Vec<(&'static str, String, bool)> {
    let tf32 = |v: &str| {
        format!("(({v}).to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)")
    };
    vec![
        (
            "f64 accumulation",
            kernel(
                reference,
                "tl.float64",
                "x.to(tl.float64)",
                "y.to(tl.float64)",
                "K",
                "acc.to(tl.float32)",
            ),
            true,
        ),
        (
            "plain TF32 operands",
            kernel(reference, "tl.float32", &tf32("x"), &tf32("y"), "K", "acc"),
            false,
        ),
        (
            "the last k term dropped",
            kernel(
                reference,
                "tl.float64",
                "x.to(tl.float64)",
                "y.to(tl.float64)",
                "K - 1",
                "acc.to(tl.float32)",
            ),
            false,
        ),
        (
            "one element far off",
            kernel(
                reference,
                "tl.float64",
                "x.to(tl.float64)",
                "y.to(tl.float64)",
                "K",
                "acc.to(tl.float32) + tl.where((rm[:, None] == 0) & (rn[None, :] == 0), 0.5, 0.0)",
            ),
            false,
        ),
        (
            // The loop's own rounding (its elements outside tie) and one NaN after them.
            "one NaN",
            kernel(
                reference,
                "tl.float32",
                "x",
                "y",
                "K",
                "tl.where((rm[:, None] == 15) & (rn[None, :] == 15), float('nan'), acc)",
            ),
            false,
        ),
        (
            "a column past the edge",
            kernel(
                reference,
                "tl.float64",
                "x.to(tl.float64)",
                "y.to(tl.float64)",
                "K",
                "acc.to(tl.float32)",
            )
            .replace("(rn[None, :] < N))", "(rn[None, :] <= N))"),
            false,
        ),
    ]
}

fn pool(py: &str) -> WorkerPool {
    WorkerPool::new(PoolConfig {
        command: vec![
            "env".into(),
            format!("KERNEL_LSP_PYTHON={py}"),
            "TRITON_INTERPRET=1".into(),
            env!("CARGO_BIN_EXE_kernel-lsp").into(),
            "worker".into(),
        ],
        ..PoolConfig::default()
    })
}

/// Each candidate's verdict by the run's rule for `file` (written with `text`): (label,
/// passed, message); and the rule.
async fn verdicts(
    pool: &WorkerPool,
    dir: &std::path::Path,
    text: &str,
    cands: &[(&'static str, String, bool)],
) -> (Rule, Vec<(String, bool, String)>) {
    let env = EvalEnv::default();
    let file = dir.join("mm.py");
    std::fs::write(&file, text).unwrap();
    let start = evaluate::plan(Lang::Triton, text, "mm", &env).expect("the kernel plans");
    let (judge, warning) = Judge::for_run(&start.version, Some(&file));
    assert_eq!(warning, None);
    let (rule, fell_back) = judge.rule(pool, &start.version, 7, &mut |_| {}).await;
    assert_eq!(fell_back, None);
    let batch: Vec<Candidate> = cands
        .iter()
        .map(|(l, t, _)| Candidate::new(Lang::Triton, "mm", &env, l.to_string(), t.clone()))
        .collect();
    let b = evaluate::batch(
        pool,
        &rule,
        &start.version,
        batch,
        7,
        false,
        &[],
        &mut |_| {},
    )
    .await;
    let out = b
        .records
        .iter()
        .map(|r| {
            (
                r.label.clone(),
                r.verified,
                r.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    (rule, out)
}

#[tokio::test]
async fn against_pytorch_a_more_accurate_matmul_passes_and_a_less_accurate_one_fails() {
    let test = "against_pytorch_a_more_accurate_matmul_passes_and_a_less_accurate_one_fails";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return tools::skip(test, &why),
    };
    let dir = std::env::temp_dir().join(format!("kernel-lsp-judge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("refs.py"), MODULE).unwrap();
    let pool = pool(&py);
    // An expression and a module function, each with the same candidates.
    for reference in [F64_REF, MODULE_REF] {
        let (rule, got) = verdicts(&pool, &dir, &current(reference), &candidates(reference)).await;
        let Rule::Torch { baseline, .. } = &rule else {
            panic!("{reference}: candidates are not judged against PyTorch");
        };
        eprintln!("{reference}: the loop {baseline:?}; candidates {got:?}");
        // The loop is outside rtol 1e-6 of the exact product in both cases.
        assert_eq!(baseline.len(), 2, "{baseline:?}");
        assert!(baseline.iter().all(|t| t.outside > 0), "{baseline:?}");
        for ((label, _, want), (_, passed, message)) in candidates(reference).iter().zip(&got) {
            assert_eq!(passed, want, "{reference}: {label}: {message}");
            if !want {
                assert!(!message.is_empty(), "{label}: no reason given");
            }
        }
        // NaN and writes out of bounds fail whatever the counts.
        assert!(
            got[4].2.contains("c[15, 15]: expected") && got[4].2.contains("got NaN"),
            "{}",
            got[4].2
        );
        assert!(got[5].2.contains("out-of-bounds write"), "{}", got[5].2);
        // A far-off element is caught by the worst difference, not the count.
        let far = &got[3].2;
        assert!(
            far.starts_with("less accurate than the current version against the PyTorch reference")
                && far.contains("case 0, `c`: 3 of 768 elements outside the tolerance"),
            "{far}"
        );
    }
    // Without a reference the candidate is checked against the current version's own
    // rounding, as before: the more accurate product fails rtol 1e-6 there.
    let none = "# @bench trials = 3";
    let (rule, got) = verdicts(&pool, &dir, &current(none), &candidates(none)).await;
    eprintln!("no reference: {got:?}");
    assert!(matches!(rule, Rule::Current));
    assert!(
        !got[0].1,
        "f64 accumulation passed against the loop: {}",
        got[0].2
    );
    assert!(got[0].2.contains("atol 0, rtol 1e-06"), "{}", got[0].2);
    pool.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}
