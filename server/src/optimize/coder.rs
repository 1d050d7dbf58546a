//! The LLM's part of a step: the strategist's proposal ([`llm_propose`]) and the coder
//! ([`llm_code`]): its reply spliced into the file in place of the kernel unit, checked
//! against the launch contract, verified (and timed) as a batch, and sent back with the
//! failure for bounded repair rounds, or asked for several samples at once. The model
//! clients and prompts live in `llm`; which step to take and what to accept does not live
//! here.

use std::collections::BTreeSet;

use super::catalog::{Catalog, Strategy};
use super::evaluate::{self, Candidate};
use super::facts::Facts;
use super::launch;
use super::llm;
use super::record::CandidateRecord;
use crate::spec::EvalEnv;
use crate::syntax::Lang;
use crate::worker::pool::WorkerPool;
use crate::worker::protocol::Timing;

/// The LLM strategist and coder of a run, built from the `llm` settings.
pub struct LlmSetup {
    pub strategist: Option<llm::Strategist>,
    pub coder: Option<llm::LlmCoder>,
    /// Use the LLM coder even for steps that have an embedded rewrite.
    pub prefer_coder: bool,
    /// Model calls one step may make (strategy, code and repairs together).
    pub calls_per_step: u32,
    /// Times a failing candidate goes back to the coder with the failure.
    pub repair_rounds: u32,
    /// Coder replies asked for at once in a step's first round (`llm.samples`).
    pub samples: u32,
}

impl LlmSetup {
    /// `Err` names what is missing or wrong, for the author. Neither model configured
    /// is an error: the caller asked for the LLM.
    pub fn from_settings(s: &crate::settings::LlmSettings) -> Result<Self, String> {
        if s.strategy.is_none() && s.coder.is_none() {
            return Err("no LLM is configured: set `llm.strategy` and/or `llm.coder` in the settings (docs/configuration.md)".into());
        }
        let prompts = llm::Prompts::load(s.prompts_dir.as_deref()).map_err(|e| e.to_string())?;
        let strategist = s
            .strategy
            .as_ref()
            .map(|m| llm::Strategist::new(m, prompts.clone()))
            .transpose()
            .map_err(|e| format!("llm.strategy: {e}"))?;
        let coder = s
            .coder
            .as_ref()
            .map(|m| llm::LlmCoder::new(m, prompts.clone()))
            .transpose()
            .map_err(|e| format!("llm.coder: {e}"))?;
        Ok(LlmSetup {
            strategist,
            coder,
            prefer_coder: false,
            calls_per_step: s.calls_per_step.max(1),
            repair_rounds: s.repair_rounds,
            samples: s.samples.max(1),
        })
    }
}

/// The file with the coder's reply in place of the kernel unit (and of its `@bench`
/// lines, when the reply carries them).
fn splice_reply(
    cx: &StepContext<'_>,
    kernel: &crate::syntax::Kernel,
    reply: &llm::CodeReply,
) -> Result<String, String> {
    if reply.spec.is_empty() {
        llm::splice_unit(cx.text, cx.model, kernel, &reply.unit)
    } else {
        llm::splice_unit_with_spec(cx.text, cx.model, kernel, &reply.unit, &reply.spec)
    }
    .map_err(|e| e.to_string())
}

/// The reply's file text as a candidate under `label`, planned once. When the reply
/// carries `@bench` lines, they must plan and differ from the current version's only in
/// the launch ([`launch::launch_only`]); else `Err` names what changed.
fn candidate_of(
    kernel: &crate::syntax::Kernel,
    env: &EvalEnv,
    current: &evaluate::Planned,
    old_lines: &[String],
    reply: &llm::CodeReply,
    label: String,
    new_text: String,
) -> Result<Candidate, String> {
    let c = Candidate::new(kernel.lang, &kernel.name, env, label, new_text);
    if reply.spec.is_empty() {
        return Ok(c);
    }
    let planned = c
        .planned
        .as_ref()
        .map_err(|e| format!("the reply's @bench lines do not give a plan: {e}"))?;
    launch::launch_only(
        &current.version.plan,
        &planned.version.plan,
        old_lines,
        &reply.spec,
    )?;
    Ok(c)
}

/// The step as the coder is asked for it: the strategist's own description, or the
/// catalog step with its parameters, and the strategist's grounding when it gave one.
pub(super) fn step_text(strategy: Option<&Strategy>, proposal: &llm::Proposal) -> String {
    let mut step = match (strategy, &proposal.free_form) {
        (_, Some(d)) => d.clone(),
        (Some(s), None) => {
            let mut params = s.params.clone();
            params.extend(proposal.params.clone());
            format!(
                "{} (`{}`)\n\n{}\n\nParameters: {}",
                s.title,
                s.id,
                s.description,
                serde_json::to_string(&params).unwrap_or_default()
            )
        }
        (None, None) => proposal.id.clone(),
    };
    if let Some(t) = &proposal.touches {
        step.push_str(&format!("\n\nThe code this step touches: {t}"));
    }
    if let Some(l) = &proposal.launch {
        step.push_str(&format!("\n\nThe launch change it implies: {l}"));
    }
    step
}

/// The reply as the coder wrote it (spec lines first), for the repair prompt.
fn reply_text(reply: &llm::CodeReply, kernel_lang: Lang) -> String {
    if reply.spec.is_empty() {
        return reply.unit.clone();
    }
    let marker = match kernel_lang {
        Lang::Triton => "#",
        Lang::Cuda => "//",
    };
    let spec: Vec<String> = reply
        .spec
        .iter()
        .map(|l| format!("{marker} @bench {l}"))
        .collect();
    format!("{}\n{}", spec.join("\n"), reply.unit)
}

/// The kernel's `@bench` comment lines as written.
fn spec_text(text: &str, kernel: &crate::syntax::Kernel) -> String {
    kernel
        .spec
        .range
        .clone()
        .and_then(|r| text.get(r))
        .unwrap_or("(no @bench lines)")
        .to_string()
}

/// The kernel unit's text without the `@bench` block, as models see it.
fn unit_text(text: &str, kernel: &crate::syntax::Kernel) -> String {
    let mut ranges = kernel.unit_ranges.clone();
    if ranges.is_empty() {
        ranges.push(kernel.def_range.clone());
    }
    ranges.sort_by_key(|r| r.start);
    ranges
        .iter()
        .filter_map(|r| text.get(r.clone()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn device_text(hello: &crate::worker::protocol::HelloResult) -> String {
    match &hello.device {
        Some(d) => {
            let mut s = format!(
                "- {} ({}), {} SMs, {} KiB shared memory per block ({} KiB opt-in), {} MiB L2, {} registers per block",
                d.name,
                d.arch,
                d.sms,
                d.smem_per_block / 1024,
                d.smem_per_block_optin / 1024,
                d.l2_bytes >> 20,
                d.regs_per_block
            );
            if let Some(c) = &d.ceilings {
                s.push_str(&format!(
                    "\n- measured: {:.0} GB/s copy bandwidth, {:.1} TFLOP/s FP32 FMA",
                    c.copy_gbps, c.fma_tflops
                ));
            }
            s
        }
        None => format!("- no CUDA device ({})", hello.cuda.message),
    }
}

/// What the strategist and the coder see of a step: the device, the file, the kernel,
/// its facts and its last timing.
pub(super) struct StepContext<'a> {
    pub hello: &'a crate::worker::protocol::HelloResult,
    pub text: &'a str,
    pub model: &'a crate::syntax::FileModel,
    pub kernel: &'a crate::syntax::Kernel,
    pub facts: &'a Facts,
    pub last: Option<&'a Timing>,
}

pub(super) async fn llm_propose(
    setup: &LlmSetup,
    budget: &mut llm::Budget,
    cx: &StepContext<'_>,
    history: &str,
    profile: &str,
    arms: &[&Strategy],
    excluded: &BTreeSet<String>,
) -> Result<llm::Proposal, String> {
    let strategist = setup.strategist.as_ref().ok_or("no strategy model")?;
    let allowed: Vec<Strategy> = arms
        .iter()
        .filter(|s| !excluded.contains(&s.id))
        .map(|s| (*s).clone())
        .collect();
    let sub = Catalog {
        strategies: allowed,
    };
    let refs: Vec<&Strategy> = sub.strategies.iter().collect();
    let input = llm::StrategyInput {
        kernel_name: cx.kernel.name.clone(),
        lang: llm::lang_label(cx.kernel.lang).to_string(),
        kernel_unit: unit_text(cx.text, cx.kernel),
        spec: spec_text(cx.text, cx.kernel),
        facts: facts_text(cx.facts),
        device: device_text(cx.hello),
        timing: cx.last.map_or("(not timed yet)".to_string(), |t| {
            format!(
                "median {:.4} ms (p10 {:.4}, p90 {:.4}), {:.0} GB/s{}",
                t.median_ms,
                t.p10_ms,
                t.p90_ms,
                t.gbps,
                t.frac_copy.map_or(String::new(), |f| format!(
                    ", {:.0}% of copy bandwidth",
                    f * 100.0
                ))
            )
        }),
        history: history.to_string(),
        profile: profile.to_string(),
        catalog: sub.describe_for_model(&refs),
    };
    let p = strategist
        .propose(budget, &input, &sub)
        .await
        .map_err(|e| e.to_string())?;
    if p.id != "free" && excluded.contains(&p.id) {
        return Err(format!(
            "it proposed `{}`, which already failed on this kernel text",
            p.id
        ));
    }
    Ok(p)
}

/// What a coder step works with besides the model's budget and the step's context.
#[derive(Clone, Copy)]
pub(super) struct Coding<'a> {
    pub setup: &'a LlmSetup,
    pub pool: &'a WorkerPool,
    pub env: &'a EvalEnv,
    /// The version candidates are verified against: the current one, or in a repair the
    /// last verified one.
    pub current: &'a evaluate::Planned,
    /// Verified candidates are timed beside it (not in a repair, which needs
    /// correctness alone).
    pub time: bool,
    pub seed: u64,
    /// Against the current version, or no less accurate against PyTorch.
    pub rule: &'a super::judge::Rule,
}

/// Ask the coder for the step, then repair with the failure (a reply that breaks the
/// rules, a compile log, a verification report) up to `repair_rounds` times while the
/// step's budget lasts. Every attempt is a candidate record; the first that verifies
/// is timed against the current version.
pub(super) async fn llm_code(
    coding: &Coding<'_>,
    budget: &mut llm::Budget,
    cx: &StepContext<'_>,
    step: &str,
    stage: &mut (dyn FnMut(String) + Send),
) -> Result<evaluate::BatchResult, String> {
    let Coding {
        setup,
        env,
        current,
        ..
    } = *coding;
    let coder = setup.coder.as_ref().ok_or("no coder model")?;
    let kernel = cx.kernel;
    let input = llm::CoderInput {
        kernel_name: kernel.name.clone(),
        lang: kernel.lang,
        param_names: kernel.params.iter().map(|p| p.name.clone()).collect(),
        kernel_unit: unit_text(cx.text, kernel),
        spec: spec_text(cx.text, kernel),
        step: step.to_string(),
        facts: facts_text(cx.facts),
        device: device_text(cx.hello),
    };
    let old_lines: Vec<String> = kernel
        .spec
        .lines
        .iter()
        .map(|l| l.text.trim().to_string())
        .collect();
    let mut records = Vec::new();
    let mut round = 0u32;
    let mut attempt = if setup.samples > 1 && budget.remaining() > 1 {
        // Several samples at once: the distinct ones are verified and timed together;
        // when none verifies, the repair rounds start from the first failure.
        let failure = match llm_samples(coding, budget, cx, &input, &old_lines, stage).await? {
            Sampled::Verified(b) => return Ok(*b),
            Sampled::Failed(mut r, failure) => {
                records.append(&mut r);
                failure
            }
        };
        match failure {
            Some((previous, feedback)) if setup.repair_rounds > 0 && budget.remaining() > 0 => {
                round = 1;
                stage(format!("repair round {round}"));
                coder.repair(budget, &input, &previous, &feedback).await
            }
            _ => {
                return Ok(evaluate::BatchResult {
                    records,
                    ..Default::default()
                })
            }
        }
    } else {
        stage("asking the coder".into());
        coder.rewrite(budget, &input).await
    };
    loop {
        let label = if round == 0 {
            "llm".to_string()
        } else {
            format!("llm repair {round}")
        };
        // (previous code, feedback) for the next repair round, if any.
        let failure: (String, String) = match attempt {
            Err(e) => {
                let message = e.to_string();
                if e.raw_reply().is_none() && round == 0 {
                    // The first call itself failed (endpoint, key, budget): no candidate
                    // was ever made.
                    return Err(message);
                }
                records.push(CandidateRecord {
                    label: label.clone(),
                    verified: false,
                    median_ms: None,
                    message: Some(message.clone()),
                    ..Default::default()
                });
                match e.raw_reply() {
                    Some(raw) => (raw.to_string(), message),
                    // A later call failed: no more repairs.
                    None => break,
                }
            }
            Ok(reply) => match splice_reply(cx, kernel, &reply).and_then(|t| {
                candidate_of(kernel, env, current, &old_lines, &reply, label.clone(), t)
            }) {
                Err(e) => {
                    records.push(CandidateRecord {
                        label: label.clone(),
                        verified: false,
                        median_ms: None,
                        message: Some(e.clone()),
                        ..Default::default()
                    });
                    (reply_text(&reply, kernel.lang), e)
                }
                Ok(candidate) => {
                    let mut b = evaluate::batch(
                        coding.pool,
                        coding.rule,
                        &current.version,
                        vec![candidate],
                        coding.seed,
                        coding.time,
                        &[],
                        stage,
                    )
                    .await;
                    if !b.verified.is_empty() {
                        records.append(&mut b.records);
                        b.records = records;
                        return Ok(b);
                    }
                    let feedback = b
                        .first_failure
                        .clone()
                        .unwrap_or_else(|| "the candidate failed".into());
                    records.append(&mut b.records);
                    (reply_text(&reply, kernel.lang), feedback)
                }
            },
        };
        if round >= setup.repair_rounds || budget.remaining() == 0 {
            break;
        }
        round += 1;
        stage(format!("repair round {round}"));
        attempt = coder.repair(budget, &input, &failure.0, &failure.1).await;
    }
    Ok(evaluate::BatchResult {
        records,
        ..Default::default()
    })
}

/// What the sampled first round of a coder step gave.
enum Sampled {
    /// At least one sample verified (all verified ones are timed).
    Verified(Box<evaluate::BatchResult>),
    /// None did: the records, and the (code, feedback) a repair round starts from.
    Failed(Vec<CandidateRecord>, Option<(String, String)>),
}

/// `llm.samples` coder replies at a spread of temperatures, asked for concurrently.
/// Replies that break the rules or the launch contract are records with their reason;
/// replies identical to an earlier one up to comments and whitespace are dropped as
/// duplicates; the rest go to the worker as one batch (compiled, verified against the
/// current version, timed). `Err` when no model call got through at all.
async fn llm_samples(
    coding: &Coding<'_>,
    budget: &mut llm::Budget,
    cx: &StepContext<'_>,
    input: &llm::CoderInput,
    old_lines: &[String],
    stage: &mut (dyn FnMut(String) + Send),
) -> Result<Sampled, String> {
    let Coding {
        setup,
        pool,
        env,
        current,
        time,
        seed,
        rule,
    } = *coding;
    let coder = setup.coder.as_ref().ok_or("no coder model")?;
    let kernel = cx.kernel;
    stage(format!("asking the coder for {} samples", setup.samples));
    let samples = coder.rewrite_samples(budget, input, setup.samples).await;
    if let Some(first) = samples.first().and_then(|(_, r)| r.as_ref().err()) {
        if samples
            .iter()
            .all(|(_, r)| r.as_ref().is_err_and(|e| e.raw_reply().is_none()))
        {
            // No call got through (endpoint, key, budget): no candidate was made.
            return Err(first.to_string());
        }
    }
    let mut records = Vec::new();
    let mut failures: Vec<(String, String)> = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut batch: Vec<Candidate> = Vec::new();
    let mut codes: Vec<String> = Vec::new();
    for (i, (t, r)) in samples.into_iter().enumerate() {
        let label = format!("llm s{} t={t}", i + 1);
        let reject = |records: &mut Vec<CandidateRecord>, message: String| {
            records.push(CandidateRecord {
                label: label.clone(),
                verified: false,
                median_ms: None,
                message: Some(message),
                ..Default::default()
            })
        };
        match r {
            Err(e) => {
                let message = e.to_string();
                if let Some(raw) = e.raw_reply() {
                    failures.push((raw.to_string(), message.clone()));
                }
                reject(&mut records, message);
            }
            Ok(reply) => {
                let code = reply_text(&reply, kernel.lang);
                match splice_reply(cx, kernel, &reply).and_then(|t| {
                    candidate_of(kernel, env, current, old_lines, &reply, label.clone(), t)
                }) {
                    Err(e) => {
                        failures.push((code, e.clone()));
                        reject(&mut records, e);
                    }
                    Ok(candidate) => {
                        let key = normalised_reply(&reply, kernel.lang);
                        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
                            reject(
                                &mut records,
                                format!("a duplicate of {first} (same code up to comments and whitespace); not run"),
                            );
                        } else {
                            seen.push((key, label.clone()));
                            batch.push(candidate);
                            codes.push(code);
                        }
                    }
                }
            }
        }
    }
    if !batch.is_empty() {
        let labels: Vec<String> = batch.iter().map(|c| c.label.clone()).collect();
        let mut b =
            evaluate::batch(pool, rule, &current.version, batch, seed, time, &[], stage).await;
        if !b.verified.is_empty() {
            records.append(&mut b.records);
            b.records = records;
            return Ok(Sampled::Verified(Box::new(b)));
        }
        // The first sample that reached the worker and failed is repaired first: its
        // failure says more than a reply that broke the format.
        let failed = b.records.iter().find_map(|r| {
            let i = labels.iter().position(|l| *l == r.label)?;
            Some((codes[i].clone(), r.message.clone()?))
        });
        if let Some((code, message)) = failed {
            failures.insert(0, (code, b.first_failure.clone().unwrap_or(message)));
        }
        records.append(&mut b.records);
    }
    Ok(Sampled::Failed(records, failures.into_iter().next()))
}

/// A coder reply as compared for duplicates: the unit without comments, with runs of
/// whitespace made one space, then its `@bench` lines.
fn normalised_reply(reply: &llm::CodeReply, lang: Lang) -> String {
    let mut out = String::new();
    let mut chars = reply.unit.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match (lang, c, chars.peek()) {
            (_, '"' | '\'', _) => {
                quote = Some(c);
                out.push(c);
            }
            (Lang::Triton, '#', _) | (Lang::Cuda, '/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            (Lang::Cuda, '/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    let mut key = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for l in &reply.spec {
        key.push('\n');
        key.push_str(&l.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    key
}

/// The facts as the models read them: the static facts, then what the diagnosis names
/// (the same causes the embedded policy ranks its cures by).
fn facts_text(f: &super::facts::Facts) -> String {
    let mut out = f.describe();
    for c in super::diagnosis::diagnose(f) {
        out.push_str(&format!(
            "\n- diagnosis: {}; cures: {}",
            c.why,
            c.cures.join(", ")
        ));
    }
    out
}
