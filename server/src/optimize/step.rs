//! One step of a run, in named stages with typed hand-offs, each its own method of
//! [`Runner`] (the run's state between steps; a step expands one version of the search
//! tree):
//!
//! - observe: the current version planned and parsed, with its facts ([`Observed`]);
//! - propose: the strategist's or the embedded policy's step ([`llm::Proposal`]);
//! - write: the embedded rewrite's candidates, each planned once ([`Candidate`]), or
//!   the LLM coder's turn ([`Written`]);
//! - evaluate: verify and time the candidates as a batch ([`BatchResult`]);
//! - decide: `accept`'s pure rule on the timings, with the re-timing, drift and
//!   confirmation checks it asks for;
//! - learn: the record, the policy, the tried set, the energy measurement.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};

use super::accept::{self, Retimed, Timed};
use super::catalog::Strategy;
use super::coder::{self, StepContext};
use super::evaluate::{self, BatchResult, Candidate, Planned};
use super::facts::{self, Facts};
use super::history;
use super::judge::{self, Judge, Rule};
use super::llm;
use super::options::{Event, OptimizeOptions};
use super::policy::{self, Policy};
use super::record::{CandidateRecord, LlmSpent, Outcome, StepRecord};
use super::retune;
use super::rewrite;
use super::search::{self, Expansion};
use crate::document::Document;
use crate::spec::EvalEnv;
use crate::syntax::{FileModel, Kernel, Lang};
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::{HelloResult, Op, OpResult, Timing, Version};

/// What observe hands on: the current version planned and parsed, and its facts.
pub(super) struct Observed {
    /// The version's whole file text.
    pub text: String,
    pub current: Planned,
    pub tree: tree_sitter::Tree,
    pub model: FileModel,
    /// The kernel's index in `model.kernels`.
    kernel: usize,
    pub facts: Facts,
    /// The version's last timing, and its profile when it has one.
    pub last: Option<Timing>,
    pub profile: Option<crate::profile::Profile>,
}

impl Observed {
    pub fn kernel(&self) -> &Kernel {
        &self.model.kernels[self.kernel]
    }

    /// What the strategist and the coder see of the step.
    pub fn context<'a>(&'a self, hello: &'a HelloResult) -> StepContext<'a> {
        StepContext {
            hello,
            text: &self.text,
            model: &self.model,
            kernel: self.kernel(),
            facts: &self.facts,
            last: self.last.as_ref(),
        }
    }
}

/// What write hands to evaluate.
pub(super) enum Written {
    /// The embedded rewrite's candidates.
    Candidates(Vec<Candidate>),
    /// The LLM coder writes (and repairs) during evaluation, where the verdicts are.
    Coder,
    /// Nothing to evaluate: the step did not apply (the record says why).
    Nothing,
}

/// An accepted step's energy measurement running beside the next step: joules per call
/// of the version before the step and of the accepted one, when NVML could tell.
pub(super) type EnergyTask = tokio::task::JoinHandle<Option<(Option<f64>, Option<f64>)>>;

/// The state of a run between steps; each step expands one version of the tree.
pub(super) struct Runner<'a, 'o> {
    pub(super) pool: &'a WorkerPool,
    pub(super) lang: Lang,
    pub(super) kernel_name: &'a str,
    /// The run's starting text.
    pub(super) text: &'a str,
    pub(super) opts: &'a OptimizeOptions,
    pub(super) env: EvalEnv,
    pub(super) hello: &'a HelloResult,
    pub(super) start: &'a Planned,
    /// What candidates are verified against: the current version, or PyTorch.
    pub(super) judge: &'a Judge,
    pub(super) repair_reference: Option<&'a Planned>,
    /// The current version's check, running beside the first step (None: passed, or
    /// none is run); its answer is awaited before anything is accepted.
    pub(super) check: Option<tokio::sync::watch::Receiver<Option<Result<(), String>>>>,
    /// Set when that check failed: the step's verifications stop.
    pub(super) check_failed: &'a AtomicBool,
    /// Steps not told yet (`Event::Step`), as indices into `records`: those that ended
    /// before the current version's check answered (told once it passed), and the last
    /// accepted step while its energy is being measured.
    pub(super) held: Vec<usize>,
    /// That measurement: the record it belongs to, and the task.
    pub(super) energy: Option<(usize, EnergyTask)>,
    pub(super) policy: Policy,
    pub(super) tried: BTreeSet<(String, String)>,
    pub(super) records: Vec<StepRecord>,
    pub(super) warnings: Vec<String>,
    pub(super) strategist_down: bool,
    /// The last timing of each version of the tree.
    pub(super) timings: HashMap<usize, Timing>,
    /// Each version's profile, or why it has none (taken once per version).
    pub(super) profiles: HashMap<usize, Result<crate::profile::Profile, String>>,
    pub(super) spent: LlmSpent,
    /// Per version: catalog steps that apply and were not tried on it, as counted by the
    /// last proposal there (the search's stop rule reads it).
    pub(super) untried: HashMap<usize, usize>,
    pub(super) run_id: u64,
    pub(super) started: std::time::Instant,
    pub(super) on: &'o mut (dyn FnMut(Event<'_>) + Send),
}

impl search::Expand for Runner<'_, '_> {
    fn llm_spent(&self) -> (u64, u64) {
        (
            self.spent.calls,
            self.spent.input_tokens + self.spent.output_tokens,
        )
    }

    fn untried(&self, node: usize) -> Option<usize> {
        self.untried.get(&node).copied()
    }

    async fn expand(
        &mut self,
        tree: &search::Search,
        sel: search::Selection,
        step_no: usize,
    ) -> Expansion {
        match self.step(tree, sel, step_no).await {
            Ok(e) => e,
            // The current text stopped planning or parsing: nothing more can be done on
            // this version.
            Err(e) => Expansion::Exhausted(e),
        }
    }
}

/// Waits for the current version's check (once: `check` is None after it passed);
/// `Err` is why it failed.
async fn checked(
    check: &mut Option<tokio::sync::watch::Receiver<Option<Result<(), String>>>>,
) -> Result<(), String> {
    let Some(rx) = check.as_mut() else {
        return Ok(());
    };
    let answer = match rx.wait_for(|v| v.is_some()).await {
        Ok(v) => v.clone().unwrap_or(Ok(())),
        Err(_) => Err("the current version's check stopped without an answer".into()),
    };
    *check = None;
    answer
}

impl Runner<'_, '_> {
    /// Waits for a running energy measurement and puts it into its step's record.
    async fn settle_energy(&mut self) {
        if let Some((at, task)) = self.energy.take() {
            if let Ok(Some(e)) = task.await {
                self.records[at].energy_j = Some(e);
            }
        }
    }

    /// Tells the held steps (`Event::Step`) in order, once the current version's check
    /// has passed, up to a step whose energy is still being measured (at the run's end,
    /// `all`: every one, after the measurement).
    pub(super) async fn tell(&mut self, all: bool) {
        if all {
            self.settle_energy().await;
        } else if self.check.is_some() {
            return;
        }
        let waiting = self.energy.as_ref().map(|(at, _)| *at);
        while let Some(&i) = self.held.first() {
            if Some(i) == waiting {
                break;
            }
            self.held.remove(0);
            (self.on)(Event::Step(&self.records[i]));
        }
    }

    fn cancelled(&self) -> bool {
        self.opts
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// The run's history as the strategist sees it for `node`: steps tried on this
    /// version, on its sibling versions, and the accepted steps that led here.
    fn history_for(&self, tree: &search::Search, node: usize) -> String {
        let parent = tree.nodes[node].parent;
        let path = tree.path(node);
        let on_node: Vec<StepRecord> = self
            .records
            .iter()
            .filter(|r| r.node == Some(node))
            .cloned()
            .collect();
        let siblings: Vec<StepRecord> = self
            .records
            .iter()
            .filter(|r| {
                r.node.is_some_and(|n| {
                    n != node && parent.is_some() && tree.nodes[n].parent == parent
                })
            })
            .cloned()
            .collect();
        let led_here: Vec<StepRecord> = self
            .records
            .iter()
            .filter(|r| r.child.is_some_and(|c| path.contains(&c)))
            .cloned()
            .collect();
        let others = self.records.len() - on_node.len() - siblings.len() - led_here.len();
        let mut out = String::new();
        if !led_here.is_empty() {
            out.push_str("Accepted steps that led to this version:\n");
            out.push_str(&history_text(&led_here));
            out.push('\n');
        }
        out.push_str("Tried on this version:\n");
        out.push_str(&history_text(&on_node));
        if !siblings.is_empty() {
            out.push_str("\nTried on sibling versions (same parent):\n");
            out.push_str(&history_text(&siblings));
        }
        if others > 0 {
            out.push_str(&format!(
                "\n({others} more steps of this run were on other branches)"
            ));
        }
        out
    }

    async fn step(
        &mut self,
        tree: &search::Search,
        sel: search::Selection,
        step_no: usize,
    ) -> Result<Expansion, String> {
        if self.cancelled() {
            return Ok(Expansion::Stop("cancelled".to_string()));
        }
        let node = &tree.nodes[sel.node];
        let obs = self.observe(node.text.clone(), sel.node, step_no).await?;

        // The step's call budget never exceeds what is left of the run's.
        let opts = self.opts;
        let per_step = opts.llm.as_ref().map_or(0, |l| l.calls_per_step);
        let left = opts
            .budget
            .llm_calls
            .map_or(u64::from(per_step), |c| c.saturating_sub(self.spent.calls));
        let mut budget = llm::Budget::new(per_step.min(left.min(u64::from(u32::MAX)) as u32));
        let where_ = if tree.nodes.len() > 1 {
            format!(
                " on version {}{}",
                sel.node,
                match sel.pick {
                    search::Pick::Best => String::new(),
                    p => format!(" ({})", p.label()),
                }
            )
        } else {
            String::new()
        };
        let proposal = match self
            .propose(&obs, tree, &sel, step_no, &where_, &mut budget)
            .await
        {
            Ok(p) => p,
            Err(exhausted) => {
                self.spent.add(&budget);
                return Ok(Expansion::Exhausted(exhausted));
            }
        };
        let strategy = opts.catalog.get(&proposal.id).cloned();
        let title = match (&strategy, &proposal.free_form) {
            (_, Some(d)) => d.clone(),
            (Some(s), None) => s.title.clone(),
            (None, None) => proposal.id.clone(),
        };
        (self.on)(Event::Stage(format!("step {step_no}{where_}: {title}")));
        let mut record = self.record_for(tree, &sel, step_no, &obs, &proposal, title);

        let written = self.write(&obs, &proposal, strategy.as_ref(), &mut record, step_no);
        let (result, llm_failure) = self
            .evaluate(&obs, written, &proposal, strategy.as_ref(), &mut budget)
            .await;
        if budget.used() > 0 {
            let mut step_spent = LlmSpent::default();
            step_spent.add(&budget);
            self.spent.add(&budget);
            record.llm = Some(step_spent);
            (self.on)(Event::Stage(format!(
                "step {step_no}: models so far: {}",
                self.spent.describe()
            )));
        }
        // The coder could not be reached at all (endpoint, key, budget): not the step's
        // fault, so the policy learns nothing and the step is not marked as tried.
        let infra_failure = llm_failure.is_some();
        if let Some(message) = llm_failure {
            record.candidates.push(CandidateRecord {
                label: "llm".into(),
                verified: false,
                median_ms: None,
                message: Some(message),
                ..Default::default()
            });
        }

        // Nothing a step verified counts before the current version has passed its check
        // (a step that did not apply waits for nothing).
        let Some(batch) = result else {
            return Ok(self
                .learn(record, &obs, tree, sel.node, None, infra_failure, None)
                .await);
        };
        if let Err(e) = checked(&mut self.check).await {
            return Ok(Expansion::Stop(e));
        }
        let (accepted, energy) = self
            .decide(batch, &obs, tree.nodes.len(), sel.node, &mut record)
            .await;
        Ok(self
            .learn(
                record,
                &obs,
                tree,
                sel.node,
                accepted,
                infra_failure,
                energy,
            )
            .await)
    }

    /// Observe: the current version planned and parsed, its static facts, and what was
    /// measured of it and of the device (the worker's `hello`, its last timing, CUDA
    /// registers, a profile). `Err`: it stopped planning or parsing.
    async fn observe(
        &mut self,
        text: String,
        node: usize,
        step_no: usize,
    ) -> Result<Observed, String> {
        let (lang, kernel_name) = (self.lang, self.kernel_name);
        let last = self.timings.get(&node).cloned();
        let current = evaluate::plan(lang, &text, kernel_name, &self.env)?;
        let doc = Document::new(lang, 0, &text);
        let tree = doc
            .tree()
            .ok_or("the parser gave up on the current text")?
            .clone();
        let model = crate::syntax::analyze(lang, &text, &tree);
        let kernel = model
            .kernels
            .iter()
            .position(|k| k.name == kernel_name)
            .ok_or("the kernel disappeared from the current text")?;
        let mut facts = facts::static_facts(lang, &text, &tree, &model, &model.kernels[kernel]);
        if let Some(d) = &self.hello.device {
            facts.set_device(facts::DeviceFacts {
                name: d.name.clone(),
                sms: d.sms,
                smem_per_block: d.smem_per_block,
                l2_bytes: d.l2_bytes,
                copy_gbps: d.ceilings.as_ref().map(|c| c.copy_gbps),
                fma_tflops: d.ceilings.as_ref().map(|c| c.fma_tflops),
            });
        }
        if let Some(t) = &last {
            facts.set_timing(t.median_ms, t.frac_copy, t.frac_fma);
        }
        if let Some(case) = current.version.plan.cases.first() {
            facts.set_launch(&case.launch);
        }
        if lang == Lang::Cuda {
            let op = Op::Compile {
                version: current.version.clone(),
            };
            if let Ok(OpResult::Compile(c)) = self.pool.request(op, None).await {
                if let Some(r) = c.registers {
                    facts.set_resources(r, u64::from(c.local_bytes.unwrap_or(0)));
                }
            }
        }
        let profile = self.profile(&text, node, step_no).await;
        if let Some(p) = &profile {
            facts.set_profile(p.clone());
        }
        Ok(Observed {
            text,
            current,
            tree,
            model,
            kernel,
            facts,
            last,
            profile,
        })
    }

    /// The version's profile (`optimize --profile`), taken once per version; a version
    /// that could not be profiled is a warning.
    async fn profile(
        &mut self,
        text: &str,
        node: usize,
        step_no: usize,
    ) -> Option<crate::profile::Profile> {
        let opts = self.opts;
        if let Some(profiler) = &opts.profiler {
            if !self.profiles.contains_key(&node) {
                let short = opts.budget.wall.is_some_and(|w| {
                    w.saturating_sub(self.started.elapsed()) < std::time::Duration::from_secs(60)
                });
                let got = if short {
                    Err("skipped: less than a minute of the time budget is left".to_string())
                } else {
                    (self.on)(Event::Stage(format!(
                        "step {step_no}: profiling version {node} with Nsight Compute"
                    )));
                    profiler(text.to_string()).await
                };
                if let Err(e) = &got {
                    self.warnings
                        .push(format!("version {node} was not profiled: {e}"));
                }
                self.profiles.insert(node, got);
            }
        }
        self.profiles
            .get(&node)
            .and_then(|p| p.as_ref().ok())
            .cloned()
    }

    fn have_coder(&self) -> bool {
        self.opts.llm.as_ref().is_some_and(|l| l.coder.is_some())
    }

    /// Propose: a repair when the run is one, else one of the catalog steps that apply to
    /// the facts and were not tried on this kernel text ([`Runner::propose_open`]).
    /// `Err`: none is left, and why. Counts the steps left on the node for the search.
    async fn propose(
        &mut self,
        obs: &Observed,
        tree: &search::Search,
        sel: &search::Selection,
        step_no: usize,
        where_: &str,
        budget: &mut llm::Budget,
    ) -> Result<llm::Proposal, String> {
        let opts = self.opts;
        let mut excluded: BTreeSet<String> = self
            .tried
            .iter()
            .filter(|(_, h)| *h == obs.current.kernel_hash)
            .map(|(id, _)| id.clone())
            .collect();
        let made_by = opts.catalog.get(&tree.nodes[sel.node].step_id);
        excluded.extend(retune::just_swept(made_by).map(str::to_string));
        let have_coder = self.have_coder();
        let arms: Vec<&Strategy> = opts
            .catalog
            .applicable(self.lang, &obs.facts)
            .into_iter()
            .filter(|s| s.rewrite.is_some() || have_coder)
            .filter(|s| opts.only.is_empty() || opts.only.contains(&s.id))
            .collect();
        let node = sel.node;
        let open: Vec<&str> = arms
            .iter()
            .map(|s| s.id.as_str())
            .filter(|id| !excluded.contains(*id))
            .collect();
        if let Some(r) = &opts.repair {
            return Ok(llm::Proposal {
                id: "repair".into(),
                params: Default::default(),
                rationale: "the kernel fails verification; the coder fixes it with the report".into(),
                free_form: Some(format!(
                    "Fix `{}` so that it passes verification again (same results as its last verified version), keeping any optimization that is correct. The verification report of the current code: {}",
                    self.kernel_name, r.feedback
                )),
                ..Default::default()
            });
        }
        let ask = Asking {
            obs,
            tree,
            sel,
            step_no,
            where_,
            arms: &arms,
            excluded: &excluded,
        };
        let proposal = self.propose_open(&ask, budget).await;
        // After this step, the steps left on the node (a step that turns out n/a is
        // tried too).
        let chosen = proposal.as_ref().ok().map(|p| p.id.as_str());
        let left = open.iter().filter(|id| Some(**id) != chosen).count();
        self.untried.insert(node, left);
        proposal
    }

    /// The proposal among the open arms: a step that gained on another branch first (the
    /// search's transfer), then the knobs of a version a structural step made
    /// (`retune`), else the LLM strategist's step (when there is one and it has not
    /// failed), else the embedded policy's.
    async fn propose_open(
        &mut self,
        ask: &Asking<'_>,
        budget: &mut llm::Budget,
    ) -> Result<llm::Proposal, String> {
        let Asking {
            obs,
            tree,
            sel,
            step_no,
            where_,
            arms,
            excluded,
        } = *ask;
        let opts = self.opts;
        let node = sel.node;
        if let Some(id) = sel
            .transfer
            .iter()
            .find(|id| !excluded.contains(*id) && arms.iter().any(|a| &a.id == *id))
        {
            return Ok(llm::Proposal {
                id: id.clone(),
                params: Default::default(),
                rationale: format!(
                    "transfer: `{id}` made a faster version on another branch of this run"
                ),
                ..Default::default()
            });
        }
        let made_by = opts.catalog.get(&tree.nodes[node].step_id);
        let knobs = retune::retune_first(made_by, arms, &|id| excluded.contains(id));
        if let Some(c) = self.policy.choose(&obs.facts, &knobs, excluded) {
            let after = made_by.map_or("", |s| s.id.as_str());
            return Ok(llm::Proposal {
                id: c.id,
                params: Default::default(),
                rationale: format!("retune after `{after}`: {}", c.rationale),
                ..Default::default()
            });
        }
        if let Some(setup) = opts.llm.as_ref().filter(|s| s.strategist.is_some()) {
            if !self.strategist_down {
                (self.on)(Event::Stage(format!("step {step_no}{where_}: proposing")));
                let history = self.history_for(tree, node);
                let profile = self.profile_text(node);
                let cx = obs.context(self.hello);
                match coder::llm_propose(setup, budget, &cx, &history, &profile, arms, excluded)
                    .await
                {
                    Ok(p) => return Ok(p),
                    Err(e) => {
                        // One warning; the embedded policy picks for the rest of the run.
                        self.strategist_down = true;
                        self.warnings.push(format!(
                            "the LLM strategist failed ({e}); the embedded policy chose instead for the rest of the run"
                        ))
                    }
                }
            }
        }
        match self.policy.choose(&obs.facts, arms, excluded) {
            Some(c) => Ok(llm::Proposal {
                id: c.id,
                params: Default::default(),
                // The measured bound the choice was made under.
                rationale: match &obs.profile {
                    Some(p) => format!("{} (profile: {})", c.rationale, p.short()),
                    None => c.rationale,
                },
                ..Default::default()
            }),
            None => Err(if arms.is_empty() {
                "no catalog step applies to this kernel".to_string()
            } else {
                "every applicable step was tried on this kernel text".to_string()
            }),
        }
    }

    /// The version's profile as the strategist reads it, or why there is none.
    fn profile_text(&self, node: usize) -> String {
        match self.profiles.get(&node) {
            Some(Ok(p)) => {
                let mut s = format!("Diagnosis: {}\n", p.diagnosis());
                for (k, v) in p.table() {
                    s.push_str(&format!("- {k}: {v}\n"));
                }
                s
            }
            Some(Err(e)) => format!("(no profile: {e})"),
            None => {
                "(no profile: run `optimize --profile` on a machine with Nsight Compute)".into()
            }
        }
    }

    /// The step's record as it starts: failed until evaluation says otherwise.
    fn record_for(
        &self,
        tree: &search::Search,
        sel: &search::Selection,
        step_no: usize,
        obs: &Observed,
        proposal: &llm::Proposal,
        title: String,
    ) -> StepRecord {
        StepRecord {
            step: step_no,
            strategy_id: proposal.id.clone(),
            strategy: title,
            rationale: proposal.rationale.clone(),
            coder: "embedded".into(),
            outcome: Outcome::Failed,
            candidates: Vec::new(),
            before_ms: obs.last.as_ref().map(|t| t.median_ms),
            best_ms: None,
            speedup: 1.0,
            cumulative: tree.nodes[sel.node].cumulative,
            accepted: None,
            seed: self.opts.seed,
            source_hash: history::hash(&obs.text),
            kernel_hash: obs.current.kernel_hash.clone(),
            kernel_after: None,
            interpreter: false,
            unix_ms: 0,
            cancelled: false,
            checks: Vec::new(),
            suspicious: false,
            run: Some(self.run_id),
            node: Some(sel.node),
            child: None,
            pick: (tree.nodes.len() > 1).then(|| sel.pick.label().to_string()),
            on_best_path: false,
            llm: None,
            profile: self.profiles.get(&sel.node).map(|p| match p {
                Ok(p) => p.diagnosis(),
                Err(e) => format!("not profiled: {e}"),
            }),
            energy_j: None,
        }
    }

    /// Write: the embedded rewrite's candidates, each planned once, when the step has a
    /// rewrite and no LLM coder is asked for; the LLM coder's turn otherwise. A rewrite
    /// with nothing to change, or a model-only step without a coder, makes the step n/a.
    fn write(
        &mut self,
        obs: &Observed,
        proposal: &llm::Proposal,
        strategy: Option<&Strategy>,
        record: &mut StepRecord,
        step_no: usize,
    ) -> Written {
        let opts = self.opts;
        let use_llm_coder = self.have_coder()
            && (strategy.is_none_or(|s| s.rewrite.is_none())
                || opts.llm.as_ref().is_some_and(|l| l.prefer_coder));
        if use_llm_coder {
            record.coder = "llm".into();
            return Written::Coder;
        }
        let mut not_applicable = |message: String| {
            record.outcome = Outcome::NotApplicable;
            record.candidates.push(CandidateRecord {
                label: proposal.id.clone(),
                verified: false,
                median_ms: None,
                message: Some(message),
                ..Default::default()
            });
            Written::Nothing
        };
        let Some((rw, strategy)) = strategy.and_then(|s| Some((s.rewrite.clone()?, s))) else {
            return not_applicable(
                "a model-only step; configure an LLM coder (settings `llm.coder`) to try it".into(),
            );
        };
        let mut params = strategy.params.clone();
        params.extend(proposal.params.clone());
        let cx = rewrite::RewriteContext {
            lang: self.lang,
            text: &obs.text,
            tree: &obs.tree,
            model: &obs.model,
            kernel: obs.kernel(),
            params: &params,
        };
        (self.on)(Event::Stage(format!("step {step_no}: rewriting")));
        match rewrite::apply(&rw, &cx) {
            Ok(c) => Written::Candidates(
                c.into_iter()
                    .map(|c| {
                        Candidate::new(self.lang, self.kernel_name, &self.env, c.label, c.text)
                    })
                    .collect(),
            ),
            Err(e) => not_applicable(e.to_string()),
        }
    }

    /// Evaluate: the candidates verified against the current version and timed beside it
    /// (a job's cancel or a failed check of the current version stops it); or the LLM
    /// coder's step, with its repair rounds. `None`: nothing was evaluated; the `String`
    /// is why the coder could not be reached.
    async fn evaluate(
        &mut self,
        obs: &Observed,
        written: Written,
        proposal: &llm::Proposal,
        strategy: Option<&Strategy>,
        budget: &mut llm::Budget,
    ) -> (Option<BatchResult>, Option<String>) {
        let (opts, pool, env) = (self.opts, self.pool, &self.env);
        let (repair_reference, check_failed) = (self.repair_reference, self.check_failed);
        let cx = obs.context(self.hello);
        let nothing = match &written {
            Written::Nothing => true,
            Written::Candidates(c) => c.is_empty(),
            Written::Coder => false,
        };
        let rule = if repair_reference.is_some() || nothing {
            Rule::Current
        } else {
            let mut quiet = |_: &str| {};
            let (rule, fell_back) = self
                .judge
                .rule(pool, &obs.current.version, opts.seed, &mut quiet)
                .await;
            if let Some(why) = fell_back.filter(|w| !self.warnings.contains(w)) {
                self.warnings.push(why);
            }
            rule
        };
        let on = &mut *self.on;
        let mut stage = |s: String| on(Event::Stage(s));
        match written {
            Written::Nothing => (None, None),
            Written::Candidates(c) if c.is_empty() => (None, None),
            Written::Candidates(c) => {
                let cancel: Vec<&AtomicBool> = opts
                    .cancel
                    .as_deref()
                    .into_iter()
                    .chain([check_failed])
                    .collect();
                let b = evaluate::batch(
                    pool,
                    &rule,
                    &obs.current.version,
                    c,
                    opts.seed,
                    true,
                    &cancel,
                    &mut stage,
                )
                .await;
                (Some(b), None)
            }
            Written::Coder => {
                let setup = opts
                    .llm
                    .as_ref()
                    .expect("Written::Coder implies an LLM setup");
                let step = coder::step_text(strategy, proposal);
                let coding = coder::Coding {
                    setup,
                    pool,
                    env,
                    current: repair_reference.unwrap_or(&obs.current),
                    time: repair_reference.is_none(),
                    seed: opts.seed,
                    rule: &rule,
                };
                match coder::llm_code(&coding, budget, &cx, &step, &mut stage).await {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(e)),
                }
            }
        }
    }

    /// Decide: the batch's records join the step's; a repair wins by verifying; else
    /// `accept`'s rule on the timings, with the I/O it asks for, picks the winner and
    /// the outcome. `Some((text, kernel hash))` of an accepted winner, and its energy
    /// measurement when one was started.
    async fn decide(
        &mut self,
        mut b: BatchResult,
        obs: &Observed,
        new_node: usize,
        node: usize,
        record: &mut StepRecord,
    ) -> (Option<(String, String)>, Option<EnergyTask>) {
        record.interpreter = b.interpreter;
        record.candidates.extend(std::mem::take(&mut b.records));
        if self.opts.repair.is_some() {
            // A repair wins by passing verification against the last verified version.
            let Some(v) = b.verified.first() else {
                return (None, None);
            };
            record.outcome = Outcome::Accepted;
            record.accepted = Some(v.label.clone());
            record.kernel_after = Some(v.planned.kernel_text.clone());
            return (Some((v.text.clone(), v.planned.kernel_hash.clone())), None);
        }
        let Some(base) = &b.base else {
            return (None, None);
        };
        record.before_ms = Some(base.median_ms);
        let timed = timed_of(&b, self.pool);
        let Some(plan) = accept::plan(&timed, obs.text != self.text) else {
            return (None, None);
        };
        let (d, refusal) = self.judge(&b, &timed, &plan, &obs.current, record).await;
        let winner = &b.verified[d.winner];
        if let Some(why) = refusal {
            record.outcome = Outcome::Failed;
            record.best_ms = Some(d.timing.median_ms);
            record.candidates.push(CandidateRecord {
                label: winner.label.clone(),
                verified: false,
                median_ms: Some(d.timing.median_ms),
                message: Some(why),
                ..Default::default()
            });
            self.timings.insert(node, d.base);
            (None, None)
        } else if d.faster() {
            record.outcome = Outcome::Accepted;
            record.speedup = d.gain.speedup;
            record.accepted = Some(winner.label.clone());
            record.kernel_after = Some(winner.planned.kernel_text.clone());
            self.timings.insert(new_node, d.timing);
            self.timings.insert(node, d.base);
            if !winner.tally.is_empty() {
                // Verified against PyTorch: its tallies are the next step's baseline.
                let seed = self.opts.seed;
                let before = self.judge.tallies(&obs.current.version, seed);
                record
                    .checks
                    .push(judge::accuracy_note(&winner.tally, before.as_deref()));
                self.judge
                    .remember(&winner.version(), seed, winner.tally.clone());
            }
            // Energy per call of both versions, once per accepted step (a short extra
            // timing with NVML; none on the interpreter).
            let energy = (!b.interpreter)
                .then(|| measure_energy(self.pool, &obs.current.version, winner.version()));
            let accepted = (winner.text.clone(), winner.planned.kernel_hash.clone());
            (Some(accepted), energy)
        } else {
            record.outcome = Outcome::NoGain;
            record.speedup = d.gain.speedup;
            self.timings.insert(node, d.base);
            (None, None)
        }
    }

    /// The I/O `accept` asks for: the contenders re-timed on the primary and, beside
    /// that, the best checked against the run's starting version (again when the
    /// re-timing picks another winner); then a faster winner's confirmation (extra seeds
    /// for a suspicious speedup, compute-sanitizer). The decision, and why the winner is
    /// refused if it is.
    async fn judge(
        &mut self,
        b: &BatchResult,
        timed: &[Timed],
        plan: &accept::Plan,
        current: &Planned,
        record: &mut StepRecord,
    ) -> (accept::Decision, Option<String>) {
        let (pool, opts, start) = (self.pool, self.opts, self.start);
        let on = &mut *self.on;
        let mut stage = |s: String| on(Event::Stage(s));
        if plan.retime {
            stage(accept::retime_message(timed, plan));
        }
        // Each candidate is verified against the version it came from; a winner made
        // from a later version is also checked against the run's starting version, so
        // differences within tolerance cannot pile up across steps. That check runs on
        // another worker while the primary re-times (it is dropped if the re-timing says
        // slower, and run again if the re-timing picks another winner).
        let judge = self.judge;
        let drift_of = |w: Version| async move {
            let mut quiet = |_: &str| {};
            judge
                .verify_on(pool, &start.version, &w, opts.seed, &mut quiet)
                .await
                .1
                .err()
                .map(|why| format!(
                    "matches the current version but drifted from the run's starting version beyond tolerance: {why}"
                ))
        };
        let versions: Vec<Version> = plan
            .contenders
            .iter()
            .map(|&(j, _)| b.verified[j].version())
            .collect();
        let (retimed, drift) = tokio::join!(
            async {
                if !plan.retime {
                    return Retimed::NotAsked;
                }
                match evaluate::retime_on_primary(pool, &current.version, &versions).await {
                    Ok((base, timings)) => Retimed::Timed { base, timings },
                    Err(e) => Retimed::Failed(e),
                }
            },
            async {
                if plan.check_drift {
                    drift_of(b.verified[plan.top].version()).await
                } else {
                    None
                }
            }
        );
        let d = accept::decide(timed, plan, retimed, &pool.describe_worker(0));
        record.checks.extend(d.checks.iter().cloned());
        let drift = if d.recheck_drift {
            drift_of(b.verified[d.winner].version()).await
        } else {
            drift
        };
        record.before_ms = Some(d.base.median_ms);
        record.best_ms = Some(d.timing.median_ms);
        let refusal = match drift.filter(|_| d.faster()) {
            Some(why) => Some(why),
            // Before acceptance: a suspiciously large speedup is re-verified on extra
            // seeds, and the winner runs once under compute-sanitizer.
            None if d.faster() => {
                let speedup = d.gain.speedup;
                record.suspicious =
                    evaluate::needs_reverify(speedup, opts.verify.suspicious_speedup);
                let mut stage = |s: &str| stage(s.to_string());
                evaluate::confirm(
                    pool,
                    judge,
                    &current.version,
                    &b.verified[d.winner].version(),
                    speedup,
                    &opts.verify,
                    opts.seed,
                    &mut record.checks,
                    &mut stage,
                )
                .await
                .err()
            }
            None => None,
        };
        (d, refusal)
    }

    /// Learn: the record is finished and kept (told once the current version's check
    /// has passed and its energy is in), the policy learns from a counted step, and the
    /// step joins the tried set of this kernel text. The expansion for the search.
    #[allow(clippy::too_many_arguments)]
    async fn learn(
        &mut self,
        mut record: StepRecord,
        obs: &Observed,
        tree: &search::Search,
        node: usize,
        accepted: Option<(String, String)>,
        infra_failure: bool,
        energy: Option<EnergyTask>,
    ) -> Expansion {
        let opts = self.opts;
        let cumulative = tree.nodes[node].cumulative;
        record.cumulative = if record.outcome == Outcome::Accepted {
            cumulative * record.speedup.max(1e-12)
        } else {
            cumulative
        };
        record.unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // A step cut short by a cancel says nothing about the step: nothing is learned.
        let cut_short = self.cancelled() && record.outcome != Outcome::Accepted;
        let expansion = if cut_short {
            record.cancelled = true;
            Expansion::Stop("cancelled".to_string())
        } else if record.outcome == Outcome::NotApplicable {
            Expansion::NotApplicable
        } else if infra_failure {
            Expansion::Infra
        } else {
            expansion_of(&mut record, tree, cumulative, accepted)
        };
        // The policy learns from counted steps (not from repairs).
        if opts.repair.is_none()
            && matches!(expansion, Expansion::Improved { .. } | Expansion::NoGain)
        {
            let measured = if record.outcome == Outcome::Failed {
                1.0
            } else {
                record.speedup
            };
            self.policy.update(
                &record.strategy_id,
                &obs.facts,
                policy::reward(record.outcome, measured),
            );
            if let Some(p) = &opts.policy_path {
                if let Err(e) = self.policy.save(p) {
                    self.warnings.push(format!(
                        "the strategy policy could not be saved to {}: {e}",
                        p.display()
                    ));
                }
            }
        }
        // A step is not repeated on the same version: after a failure or no gain it
        // would fail again, and after a gain it would make the same child again (when
        // the search comes back to this version).
        if !infra_failure && !cut_short {
            self.tried
                .insert((record.strategy_id.clone(), obs.current.kernel_hash.clone()));
        }
        self.records.push(record);
        self.held.push(self.records.len() - 1);
        // An earlier step's measurement ran beside this step: it is done by now.
        self.settle_energy().await;
        if let Some(task) = energy {
            self.energy = Some((self.records.len() - 1, task));
        }
        self.tell(false).await;
        expansion
    }
}

/// What a proposal is asked with: the version, where it is in the tree, and the catalog
/// steps that apply (`arms`) less those tried on its text (`excluded`).
#[derive(Clone, Copy)]
struct Asking<'a> {
    obs: &'a Observed,
    tree: &'a search::Search,
    sel: &'a search::Selection,
    step_no: usize,
    where_: &'a str,
    arms: &'a [&'a Strategy],
    excluded: &'a BTreeSet<String>,
}

/// A counted step's expansion: a new version when it was accepted and is not already
/// in the tree (a step repeated on an earlier version after backtracking makes the same
/// version again: then it is no gain), else no gain.
fn expansion_of(
    record: &mut StepRecord,
    tree: &search::Search,
    cumulative: f64,
    accepted: Option<(String, String)>,
) -> Expansion {
    let Some((text, kernel_hash)) = accepted else {
        return Expansion::NoGain;
    };
    if let Some(twin) = tree.nodes.iter().find(|n| n.kernel_hash == kernel_hash) {
        record.outcome = Outcome::NoGain;
        record.accepted = None;
        record.kernel_after = None;
        record.cumulative = cumulative;
        record.candidates.push(CandidateRecord {
            label: "tree".into(),
            verified: true,
            median_ms: record.best_ms,
            message: Some(format!(
                "the winner is the same kernel text as v{}, already in the tree",
                twin.id
            )),
            ..Default::default()
        });
        return Expansion::NoGain;
    }
    record.child = Some(tree.nodes.len());
    Expansion::Improved {
        text,
        kernel_hash,
        median_ms: record.best_ms,
        speedup: record.speedup,
        step_id: record.strategy_id.clone(),
        label: format!(
            "{} ({})",
            record.strategy_id,
            record.accepted.as_deref().unwrap_or("")
        ),
    }
}

/// The batch's timed candidates as `accept` sees them.
fn timed_of(b: &BatchResult, pool: &WorkerPool) -> Vec<Timed> {
    b.verified
        .iter()
        .zip(b.bases.iter().zip(&b.timings))
        .zip(&b.timed_on)
        .map(|((v, (base, timing)), &worker)| Timed {
            label: v.label.clone(),
            base: base.clone(),
            timing: timing.clone(),
            worker,
            worker_name: worker.map_or_else(String::new, |w| pool.describe_worker(w)),
            same_model: same_model(pool, worker),
        })
        .collect()
}

/// The energy per call of `current` and `winner` (a short timing with NVML), measured
/// beside the next step (with several workers, on one while the others take its
/// candidates); the step's record is told once it is in.
fn measure_energy(pool: &WorkerPool, current: &Version, winner: Version) -> EnergyTask {
    let settings = crate::worker::protocol::TimeSettings {
        warmup_ms: 5.0,
        rep_ms: 5.0,
        min_reps: 3,
        flush_l2: true,
        energy: true,
    };
    let op = Op::Time {
        versions: vec![current.clone(), winner],
        settings,
    };
    let pool = pool.clone();
    tokio::spawn(async move {
        match pool.request(op, None).await {
            Ok(OpResult::Time(t)) => {
                let e = |i: usize| t.timings.get(i).and_then(|x| x.energy_j);
                (e(0).is_some() || e(1).is_some()).then(|| (e(0), e(1)))
            }
            _ => None,
        }
    })
}

fn history_text(records: &[StepRecord]) -> String {
    if records.is_empty() {
        return "(no steps yet in this run)".into();
    }
    records
        .iter()
        .map(|r| {
            format!(
                "- {} ({}): {}{}",
                r.strategy_id,
                r.strategy,
                r.outcome.label(),
                match (
                    r.outcome,
                    r.candidates.iter().find_map(|c| c.message.as_ref())
                ) {
                    (Outcome::Accepted, _) => format!(", {:.2}× faster", r.speedup),
                    (_, Some(m)) => format!(": {m}"),
                    _ => String::new(),
                }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether worker `w` has the primary worker's GPU model (speedups measured on the two
/// compare), as their `hello`s say.
fn same_model(pool: &WorkerPool, w: Option<usize>) -> bool {
    let name = |i: usize| pool.hello_of(i).and_then(|h| h.device).map(|d| d.name);
    match w {
        None | Some(0) => true,
        Some(w) => name(w).is_some() && name(w) == name(0),
    }
}
