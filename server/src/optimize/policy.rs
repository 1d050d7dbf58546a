//! The embedded strategy policy: a contextual bandit that learns online which catalog
//! steps pay for which kernels, the offline stand-in for an LLM strategist.
//!
//! Algorithm: disjoint LinUCB (Li et al., 2010). For each strategy id, a ridge regression
//! of the step's reward on the kernel's context vector `x = Facts::features()`; a step's
//! score is its predicted reward `x·θ` plus `ALPHA` times the regression's standard error
//! `sqrt(xᵀ A⁻¹ x)`, and the step with the best score wins (catalog order breaks ties).
//! LinUCB rather than Thompson sampling because it is deterministic for a given state: the
//! same kernel and the same state file choose the same step, so a run replays exactly and
//! tests need no seeds, while exploration still happens through the confidence bonus,
//! which shrinks as a step is tried in similar contexts.
//!
//! Cold start: the catalog's `prior` is the prior mean of the bias weight, a Gaussian
//! prior `θ ~ N(prior·e₀, I/λ)`, so `A = λI + Σ x xᵀ` and `b = λ·prior·e₀ + Σ r x`. An
//! untried step scores its prior plus the same bonus as every other untried step (so the
//! priors order them), and the prior's pull fades as rewards arrive. Only the data sums are
//! stored, so editing a prior in the catalog takes effect at once.
//!
//! Reward ([`reward`]): the natural log of an accepted step's speedup; a small cost for a
//! step that verified but did not gain; a larger penalty for one that failed.
//!
//! The state persists as JSON at [`default_path`]; a corrupt file or one from another
//! format version gives a fresh policy and a warning, never an error. This module does no
//! I/O besides `load` and `save`, and knows nothing of workers or prompts.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::catalog::{requirement_phrase, Strategy};
use super::diagnosis::{cure_rank, diagnose};
use super::facts::{Facts, FEATURE_DIM};
use super::record::Outcome;

/// Version of the state file's format; a file with another version starts fresh.
pub const POLICY_VERSION: u32 = 1;

/// Weight of the prior (ridge strength).
const LAMBDA: f64 = 1.0;

/// Weight of the confidence bonus. With about 8 active features an untried step gets a
/// bonus near 0.14 and a step tried once in the same context near 0.05: the difference is
/// about the spread of the catalog's priors, so a measured gain of +20% keeps its step
/// ahead of untried ones, and a failure sends it behind all of them.
const ALPHA: f64 = 0.05;

/// Reward of a step that verified but gained nothing (the time it cost).
pub const STEP_COST: f64 = 0.02;

/// Reward of a step whose candidates all failed (compile, verification, time-out).
pub const FAILURE_PENALTY: f64 = 0.1;

/// The reward the policy learns from: `ln(speedup)` for an accepted step (clamped to
/// [0, 3]), `-STEP_COST` for no gain, `-FAILURE_PENALTY` for a failure.
pub fn reward(outcome: Outcome, speedup: f64) -> f64 {
    match outcome {
        Outcome::Accepted if speedup.is_finite() && speedup > 0.0 => speedup.ln().clamp(0.0, 3.0),
        Outcome::Accepted => 0.0,
        Outcome::NoGain => -STEP_COST,
        Outcome::Failed => -FAILURE_PENALTY,
        // Nothing ran; the step loop does not report these (the step is only excluded
        // for this kernel text).
        Outcome::NotApplicable => 0.0,
    }
}

/// Where the state lives: `$KERNEL_LSP_DATA_DIR/policy.json` when that variable is set,
/// else `<data dir>/kernel-lsp/policy.json` (`~/.local/share` on Linux,
/// `~/Library/Application Support` on macOS, `%APPDATA%` on Windows), else the system
/// temp folder.
pub fn default_path() -> PathBuf {
    path_from(std::env::var_os("KERNEL_LSP_DATA_DIR"), dirs::data_dir())
}

fn path_from(env: Option<OsString>, data_dir: Option<PathBuf>) -> PathBuf {
    match env.filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("policy.json"),
        None => data_dir
            .unwrap_or_else(std::env::temp_dir)
            .join("kernel-lsp")
            .join("policy.json"),
    }
}

/// The hash the step loop keys "already tried on this kernel text" by: the kernel unit's
/// source (the same hash as `history::hash`).
pub fn kernel_text_hash(unit_source: &str) -> String {
    super::history::hash(unit_source)
}

/// The policy's pick.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    pub id: String,
    /// Predicted reward plus the exploration bonus.
    pub score: f64,
    /// One line for the step table ("pointer params lack `__restrict__`; expected +16%
    /// (untried, catalog prior)").
    pub rationale: String,
}

/// Learned sums for one strategy id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Arm {
    tries: u32,
    /// Σ x xᵀ, row-major FEATURE_DIM × FEATURE_DIM.
    gram: Vec<f64>,
    /// Σ r x.
    moment: Vec<f64>,
    reward_sum: f64,
}

impl Arm {
    fn new() -> Arm {
        Arm {
            tries: 0,
            gram: vec![0.0; FEATURE_DIM * FEATURE_DIM],
            moment: vec![0.0; FEATURE_DIM],
            reward_sum: 0.0,
        }
    }

    fn is_consistent(&self) -> bool {
        self.gram.len() == FEATURE_DIM * FEATURE_DIM
            && self.moment.len() == FEATURE_DIM
            && self.gram.iter().chain(&self.moment).all(|v| v.is_finite())
            && self.reward_sum.is_finite()
    }
}

/// The bandit's state: what each step earned in which contexts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    version: u32,
    feature_dim: usize,
    arms: BTreeMap<String, Arm>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new()
    }
}

/// A step's estimate in one context.
struct Estimate {
    mean: f64,
    bonus: f64,
}

impl Policy {
    /// A policy that knows nothing yet (cold start: catalog priors).
    pub fn new() -> Policy {
        Policy {
            version: POLICY_VERSION,
            feature_dim: FEATURE_DIM,
            arms: BTreeMap::new(),
        }
    }

    /// Read the state at `path`. A missing file is a fresh policy; an unreadable,
    /// corrupt or other-version file is a fresh policy and a warning for the user.
    pub fn load(path: &Path) -> (Policy, Option<String>) {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Policy::new(), None),
            Err(e) => {
                return (
                    Policy::new(),
                    Some(format!(
                    "cannot read the strategy policy {}: {e}; starting from the catalog's priors",
                    path.display()
                )),
                )
            }
        };
        let corrupt = |why: String| {
            Some(format!(
                "the strategy policy {} is corrupt ({why}); starting from the catalog's priors (the file is replaced on the next save)",
                path.display()
            ))
        };
        // Read the version first, so a future format is named as such, not as corrupt.
        #[derive(Deserialize)]
        struct Header {
            version: u32,
            feature_dim: usize,
        }
        match serde_json::from_str::<Header>(&text) {
            Err(e) => return (Policy::new(), corrupt(e.to_string())),
            Ok(h) if h.version != POLICY_VERSION || h.feature_dim != FEATURE_DIM => {
                return (
                    Policy::new(),
                    Some(format!(
                        "the strategy policy {} has format v{} with {} features; this kernel-lsp reads v{POLICY_VERSION} with {FEATURE_DIM}; starting from the catalog's priors (the file is replaced on the next save)",
                        path.display(),
                        h.version,
                        h.feature_dim
                    )),
                )
            }
            Ok(_) => {}
        }
        match serde_json::from_str::<Policy>(&text) {
            Err(e) => (Policy::new(), corrupt(e.to_string())),
            Ok(p) => match p.arms.iter().find(|(_, a)| !a.is_consistent()) {
                Some((id, _)) => (Policy::new(), corrupt(format!("bad sums for `{id}`"))),
                None => (p, None),
            },
        }
    }

    /// Write the state to `path` atomically (a temporary file in the same folder, then a
    /// rename), creating the folder.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let json = serde_json::to_string(self).map_err(std::io::Error::other)?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// How often `id` was rewarded.
    pub fn tries(&self, id: &str) -> u32 {
        self.arms.get(id).map_or(0, |a| a.tries)
    }

    /// Every step of `arms` not in `excluded`, best first (catalog order on ties), each
    /// with its score and rationale. `arms` is usually `Catalog::applicable(..)`, filtered
    /// to what the configured coders can carry out. The cures that the diagnosis names
    /// (`diagnosis::diagnose`: the profile's cause, else the analysis's) come first, in
    /// its order; the learned scores order the rest.
    pub fn rank(
        &self,
        facts: &Facts,
        arms: &[&Strategy],
        excluded: &BTreeSet<String>,
    ) -> Vec<Choice> {
        let x = facts.features();
        let causes = diagnose(facts);
        let mut out: Vec<(usize, Choice)> = arms
            .iter()
            .enumerate()
            .filter(|(_, s)| !excluded.contains(&s.id))
            .map(|(i, s)| {
                let e = self.estimate(s, &x);
                let score = e.mean + e.bonus;
                let mut rationale = self.rationale(s, &e);
                if let Some((_, cause)) = cure_rank(&causes, &s.id) {
                    rationale = format!("{}; {rationale}", cause.why);
                }
                (
                    i,
                    Choice {
                        id: s.id.clone(),
                        score,
                        rationale,
                    },
                )
            })
            .collect();
        let cure = |c: &Choice| cure_rank(&causes, &c.id).map_or(usize::MAX, |r| r.0);
        out.sort_by(|(ia, a), (ib, b)| {
            cure(a)
                .cmp(&cure(b))
                .then(b.score.total_cmp(&a.score))
                .then(ia.cmp(ib))
        });
        out.into_iter().map(|(_, c)| c).collect()
    }

    /// The best step of `arms` not in `excluded` (the step loop passes the ids that
    /// failed or gave no gain on the current kernel text); `None` when none is left.
    pub fn choose(
        &self,
        facts: &Facts,
        arms: &[&Strategy],
        excluded: &BTreeSet<String>,
    ) -> Option<Choice> {
        self.rank(facts, arms, excluded).into_iter().next()
    }

    /// Learn from one step: `reward` (see [`reward`]) of step `id` on a kernel with these
    /// facts. A non-finite reward is ignored.
    pub fn update(&mut self, id: &str, facts: &Facts, reward: f64) {
        if !reward.is_finite() {
            return;
        }
        let x = facts.features();
        let arm = self.arms.entry(id.to_string()).or_insert_with(Arm::new);
        for (i, xi) in x.iter().enumerate() {
            for (j, xj) in x.iter().enumerate() {
                arm.gram[i * FEATURE_DIM + j] += xi * xj;
            }
            arm.moment[i] += reward * xi;
        }
        arm.tries += 1;
        arm.reward_sum += reward;
    }

    fn estimate(&self, s: &Strategy, x: &[f64]) -> Estimate {
        let d = FEATURE_DIM;
        let mut a = vec![0.0; d * d];
        let mut b = vec![0.0; d];
        for i in 0..d {
            a[i * d + i] = LAMBDA;
        }
        b[0] = LAMBDA * s.prior;
        if let Some(arm) = self.arms.get(&s.id) {
            for (ai, gi) in a.iter_mut().zip(&arm.gram) {
                *ai += gi;
            }
            for (bi, mi) in b.iter_mut().zip(&arm.moment) {
                *bi += mi;
            }
        }
        match (cholesky_solve(&a, d, &b), cholesky_solve(&a, d, x)) {
            (Some(theta), Some(ainv_x)) => Estimate {
                mean: dot(x, &theta),
                bonus: ALPHA * dot(x, &ainv_x).max(0.0).sqrt(),
            },
            // Unreachable for a consistent state (A is λI plus a sum of outer products);
            // fall back to the prior rather than fail.
            _ => Estimate {
                mean: s.prior,
                bonus: ALPHA * (dot(x, x) / LAMBDA).sqrt(),
            },
        }
    }

    fn rationale(&self, s: &Strategy, e: &Estimate) -> String {
        let reason = s
            .requires
            .iter()
            .find_map(|r| requirement_phrase(r))
            .map_or_else(|| s.title.clone(), str::to_string);
        let pct = (e.mean.exp() - 1.0) * 100.0;
        let pct = if pct.abs() < 10.0 {
            format!("{pct:+.1}%")
        } else {
            format!("{pct:+.0}%")
        };
        let evidence = match self.tries(&s.id) {
            0 => "untried, catalog prior".to_string(),
            n => {
                let tries = if n == 1 {
                    "1 try".into()
                } else {
                    format!("{n} tries")
                };
                if e.bonus > e.mean.abs() {
                    format!("{tries}, exploring")
                } else {
                    tries
                }
            }
        };
        format!("{reason}; expected {pct} ({evidence})")
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Solve `A y = b` for a symmetric positive definite `A` (row-major, `d × d`) by Cholesky
/// decomposition; `None` when `A` is not positive definite or sizes disagree.
fn cholesky_solve(a: &[f64], d: usize, b: &[f64]) -> Option<Vec<f64>> {
    if a.len() != d * d || b.len() != d {
        return None;
    }
    let mut l = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..=i {
            let mut sum = a[i * d + j];
            for k in 0..j {
                sum -= l[i * d + k] * l[j * d + k];
            }
            if i == j {
                if !sum.is_finite() || sum <= 0.0 {
                    return None;
                }
                l[i * d + i] = sum.sqrt();
            } else {
                l[i * d + j] = sum / l[j * d + j];
            }
        }
    }
    // L z = b, then Lᵀ y = z.
    let mut z = vec![0.0; d];
    for i in 0..d {
        let mut sum = b[i];
        for k in 0..i {
            sum -= l[i * d + k] * z[k];
        }
        z[i] = sum / l[i * d + i];
    }
    let mut y = vec![0.0; d];
    for i in (0..d).rev() {
        let mut sum = z[i];
        for k in i + 1..d {
            sum -= l[k * d + i] * y[k];
        }
        y[i] = sum / l[i * d + i];
    }
    Some(y)
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::*;
    use crate::document::Document;
    use crate::optimize::catalog::Catalog;
    use crate::optimize::facts::static_facts;
    use crate::syntax::{self, Lang};

    fn facts_of(lang: Lang, src: &str) -> Facts {
        let doc = Document::new(lang, 0, src);
        let tree = doc.tree().expect("the example parses");
        let model = syntax::analyze(lang, src, tree);
        let kernel = model.kernels.last().expect("the example has a kernel");
        static_facts(lang, src, tree, &model, kernel)
    }

    fn matmul() -> Facts {
        facts_of(
            Lang::Cuda,
            include_str!("../../../examples/matmul_naive.cu"),
        )
    }

    fn saxpy() -> Facts {
        facts_of(Lang::Cuda, include_str!("../../../examples/saxpy.cu"))
    }

    /// The embedded steps that apply to `facts`, in catalog order.
    fn embedded_arms<'c>(c: &'c Catalog, lang: Lang, facts: &Facts) -> Vec<&'c Strategy> {
        c.applicable(lang, facts)
            .into_iter()
            .filter(|s| !s.is_model_only())
            .collect()
    }

    fn ranking(p: &Policy, facts: &Facts, arms: &[&Strategy], excluded: &[&str]) -> String {
        let ex: BTreeSet<String> = excluded.iter().map(|s| s.to_string()).collect();
        p.rank(facts, arms, &ex)
            .iter()
            .map(|c| format!("{} {:.3}: {}", c.id, c.score, c.rationale))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("kernel-lsp-policy-{}-{name}", std::process::id()))
            .join("policy.json")
    }

    #[test]
    fn a_recorded_profile_puts_the_cure_it_names_first() {
        // The row softmax draft as Nsight Compute saw it on an H100: the grid fills 3% of
        // one wave, loads are not coalesced. The cure for both (a warp per row) comes
        // first, and the step table says which measurement chose it.
        let c = Catalog::embedded();
        let mut f = facts_of(
            Lang::Cuda,
            include_str!("../../../examples/softmax_rows.cu"),
        );
        let arms = embedded_arms(&c, Lang::Cuda, &f);
        let profile = crate::profile::parse_raw_csv(include_str!(
            "../../../tests/fixtures/ncu/softmax_rows.csv"
        ))
        .expect("the recorded profile parses")
        .remove(0);
        f.set_profile(profile);
        let p = Policy::new();
        let first = p.rank(&f, &arms, &BTreeSet::new()).remove(0);
        assert_eq!(first.id, "cooperative_rows");
        assert!(
            first
                .rationale
                .starts_with("the profile: the grid fills 3% of one wave; "),
            "{}",
            first.rationale
        );
        // Without the profile, the static analysis names the same cure.
        f.profile = None;
        let first = p.rank(&f, &arms, &BTreeSet::new()).remove(0);
        assert_eq!(first.id, "cooperative_rows");
        assert!(
            first
                .rationale
                .starts_with("the analysis: each thread walks a row alone; "),
            "{}",
            first.rationale
        );
        // A learned preference does not override the diagnosis.
        let mut learned = Policy::new();
        for _ in 0..20 {
            learned.update("block_size", &f, 1.0);
        }
        assert_eq!(
            learned.rank(&f, &arms, &BTreeSet::new())[0].id,
            "cooperative_rows"
        );
    }

    #[test]
    fn cold_start_follows_the_catalog_priors() {
        let c = Catalog::embedded();
        let f = matmul();
        let arms = embedded_arms(&c, Lang::Cuda, &f);
        expect![[r#"
            tile_matmul 1.137: 2-D threads (or a flat index split into row and column) each loop over k reading a row operand (the same for a row of threads) and a column operand, with no shared memory; expected +172% (untried, catalog prior)
            block_size 0.337: the spec sets the block size and the kernel reads blockDim; expected +22% (untried, catalog prior)
            restrict_const 0.287: pointer params lack `__restrict__`; expected +16% (untried, catalog prior)
            unroll 0.257: a counted loop has no `#pragma unroll`; expected +13% (untried, catalog prior)
            launch_bounds 0.177: no `__launch_bounds__`; expected +4.1% (untried, catalog prior)"#]].assert_eq(&ranking(&Policy::new(), &f, &arms, &[]));
    }

    #[test]
    fn exclusion_is_respected() {
        let c = Catalog::embedded();
        let f = matmul();
        let arms = embedded_arms(&c, Lang::Cuda, &f);
        let p = Policy::new();
        let ex = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            p.choose(&f, &arms, &ex(&[])).map(|c| c.id),
            Some("tile_matmul".into())
        );
        assert_eq!(
            p.choose(&f, &arms, &ex(&["tile_matmul"])).map(|c| c.id),
            Some("block_size".into())
        );
        assert_eq!(
            p.choose(&f, &arms, &ex(&["tile_matmul", "block_size"]))
                .map(|c| c.id),
            Some("restrict_const".into())
        );
        let all: Vec<&str> = arms.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(p.choose(&f, &arms, &ex(&all)), None);
        assert_eq!(p.choose(&f, &[], &ex(&[])), None);
    }

    #[test]
    fn rewards_change_the_preferred_step() {
        let c = Catalog::embedded();
        let f = matmul();
        let arms = embedded_arms(&c, Lang::Cuda, &f);
        let mut p = Policy::new();
        // block_size fails twice on this kind of kernel; restrict_const gains 1.3x.
        p.update("block_size", &f, reward(Outcome::Failed, 1.0));
        p.update("block_size", &f, reward(Outcome::Failed, 1.0));
        p.update("restrict_const", &f, reward(Outcome::Accepted, 1.3));
        expect![[r#"
            tile_matmul 1.137: 2-D threads (or a flat index split into row and column) each loop over k reading a row operand (the same for a row of threads) and a column operand, with no shared memory; expected +172% (untried, catalog prior)
            restrict_const 0.296: pointer params lack `__restrict__`; expected +28% (1 try)
            unroll 0.257: a counted loop has no `#pragma unroll`; expected +13% (untried, catalog prior)
            launch_bounds 0.177: no `__launch_bounds__`; expected +4.1% (untried, catalog prior)
            block_size -0.047: the spec sets the block size and the kernel reads blockDim; expected -7.8% (2 tries)"#]].assert_eq(&ranking(&p, &f, &arms, &[]));
        assert_eq!(p.tries("block_size"), 2);
        assert_eq!(p.tries("unroll"), 0);
    }

    #[test]
    fn learning_is_per_context() {
        let step = |id: &str| Strategy {
            id: id.into(),
            title: id.into(),
            description: "d".into(),
            lang: vec![Lang::Cuda],
            requires: Vec::new(),
            params: BTreeMap::new(),
            rewrite: None,
            prior: 0.0,
            knob: false,
        };
        let (a, b) = (step("a"), step("b"));
        let arms = [&a, &b];
        let (mm, sx) = (matmul(), saxpy());
        let mut p = Policy::new();
        for _ in 0..4 {
            // `a` pays on matmul-like kernels and fails on streaming ones; `b` is the
            // reverse.
            p.update("a", &mm, reward(Outcome::Accepted, 1.5));
            p.update("a", &sx, reward(Outcome::Failed, 1.0));
            p.update("b", &mm, reward(Outcome::NoGain, 1.0));
            p.update("b", &sx, reward(Outcome::Accepted, 1.2));
        }
        let none = BTreeSet::new();
        assert_eq!(p.choose(&mm, &arms, &none).map(|c| c.id), Some("a".into()));
        assert_eq!(p.choose(&sx, &arms, &none).map(|c| c.id), Some("b".into()));
        // Deterministic: the same state gives the same answer.
        assert_eq!(p.rank(&mm, &arms, &none), p.rank(&mm, &arms, &none));
    }

    #[test]
    fn persistence_round_trip() {
        let path = temp_path("roundtrip");
        let _ = std::fs::remove_dir_all(path.parent().expect("has a parent"));
        let f = matmul();
        let mut p = Policy::new();
        p.update("unroll", &f, reward(Outcome::Accepted, 1.1));
        p.save(&path).expect("save creates the folder");
        let (q, warning) = Policy::load(&path);
        assert_eq!(warning, None);
        // serde_json reads floats back to within an ulp (no `float_roundtrip` feature).
        assert_eq!(q.arms.keys().collect::<Vec<_>>(), ["unroll"]);
        let (a, b) = (&p.arms["unroll"], &q.arms["unroll"]);
        assert_eq!(a.tries, b.tries);
        for (x, y) in a
            .gram
            .iter()
            .chain(&a.moment)
            .zip(b.gram.iter().chain(&b.moment))
        {
            assert!((x - y).abs() <= 1e-15 * x.abs().max(1.0), "{x} vs {y}");
        }
        let c = Catalog::embedded();
        let arms = embedded_arms(&c, Lang::Cuda, &f);
        let none = BTreeSet::new();
        let ids = |p: &Policy| {
            p.rank(&f, &arms, &none)
                .into_iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&p), ids(&q));
        // Saving again replaces the file and leaves no temporary behind.
        q.save(&path).expect("save again");
        let names: Vec<String> = std::fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["policy.json"]);
        let _ = std::fs::remove_dir_all(path.parent().expect("parent"));
    }

    #[test]
    fn missing_corrupt_and_foreign_files_start_fresh() {
        let path = temp_path("corrupt");
        let dir = path.parent().expect("parent").to_path_buf();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(Policy::load(&path), (Policy::new(), None));

        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(&path, "{ not json").expect("write");
        let (p, w) = Policy::load(&path);
        assert_eq!(p, Policy::new());
        let w = w
            .expect("a warning")
            .replace(&path.display().to_string(), "$PATH");
        expect!["the strategy policy $PATH is corrupt (key must be a string at line 1 column 3); starting from the catalog's priors (the file is replaced on the next save)"].assert_eq(&w);

        std::fs::write(&path, r#"{"version": 99, "feature_dim": 3, "arms": {}}"#).expect("write");
        let (p, w) = Policy::load(&path);
        assert_eq!(p, Policy::new());
        let w = w
            .expect("a warning")
            .replace(&path.display().to_string(), "$PATH");
        expect!["the strategy policy $PATH has format v99 with 3 features; this kernel-lsp reads v1 with 19; starting from the catalog's priors (the file is replaced on the next save)"].assert_eq(&w);

        let bad_sums = format!(
            r#"{{"version": {POLICY_VERSION}, "feature_dim": {FEATURE_DIM}, "arms": {{"unroll": {{"tries": 1, "gram": [1.0], "moment": [], "reward_sum": 0.0}}}}}}"#
        );
        std::fs::write(&path, bad_sums).expect("write");
        let (p, w) = Policy::load(&path);
        assert_eq!(p, Policy::new());
        assert!(w.is_some_and(|w| w.contains("bad sums for `unroll`")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reward_shape() {
        assert!((reward(Outcome::Accepted, 2.0) - 2f64.ln()).abs() < 1e-12);
        assert_eq!(reward(Outcome::Accepted, f64::NAN), 0.0);
        assert_eq!(reward(Outcome::Accepted, 1e9), 3.0);
        assert_eq!(reward(Outcome::NoGain, 1.0), -STEP_COST);
        assert_eq!(reward(Outcome::Failed, 1.0), -FAILURE_PENALTY);
        let mut p = Policy::new();
        p.update("x", &matmul(), f64::INFINITY);
        assert_eq!(p.tries("x"), 0, "a non-finite reward is ignored");
    }

    #[test]
    fn data_dir_resolution() {
        assert_eq!(
            path_from(Some("/tmp/kl".into()), Some("/home/u/.local/share".into())),
            PathBuf::from("/tmp/kl/policy.json")
        );
        assert_eq!(
            path_from(Some("".into()), Some("/home/u/.local/share".into())),
            PathBuf::from("/home/u/.local/share/kernel-lsp/policy.json")
        );
        assert_eq!(
            path_from(None, None),
            std::env::temp_dir().join("kernel-lsp").join("policy.json")
        );
    }

    #[test]
    fn cholesky_solves() {
        // [[4, 2], [2, 3]] y = [2, 1] -> y = [0.5, 0]
        let y = cholesky_solve(&[4.0, 2.0, 2.0, 3.0], 2, &[2.0, 1.0]).expect("SPD");
        assert!((y[0] - 0.5).abs() < 1e-12 && y[1].abs() < 1e-12, "{y:?}");
        assert_eq!(cholesky_solve(&[0.0, 0.0, 0.0, 0.0], 2, &[1.0, 1.0]), None);
        assert_eq!(cholesky_solve(&[1.0], 2, &[1.0, 1.0]), None);
    }
}
