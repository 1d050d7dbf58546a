//! The optional LLM strategist (macro: picks the next step) and coder (micro: rewrites
//! the kernel unit), over any OpenAI-compatible endpoint or the Anthropic Messages API.
//! Owns the HTTP client (`client`), the prompt templates (`prompts`) and the strict
//! parsing of replies plus splicing a new unit into the file (`reply`). Does not run,
//! compile or verify anything: what the coder returns is text for the step loop to
//! splice, compile and verify in a worker like any other candidate. Model output is
//! never executed here and never reaches the author's text unverified.
//!
//! [`Strategist::propose`] and [`LlmCoder::rewrite`] / [`LlmCoder::repair`] each spend
//! one unit of the step's [`Budget`] and return a [`LlmStepError`] whose Display is one
//! line for the author. A coder reply that breaks the format comes back as
//! [`LlmStepError::Reply`] with the raw reply, so the step loop can send it to
//! [`LlmCoder::repair`] with the error as feedback.

pub mod client;
pub mod prompts;
pub mod reply;

use std::collections::BTreeMap;

pub use client::{Backoff, Budget, LlmClient, LlmError, Reply, Usage};
pub use prompts::{PromptError, Prompts, Template};
pub use reply::{
    parse_code_reply, parse_code_reply_with_spec, parse_strategy_reply, splice_unit,
    splice_unit_with_spec, CodeReply, Proposal, ReplyError,
};

use crate::optimize::catalog::Catalog;
use crate::settings::ModelSettings;
use crate::syntax::Lang;

/// What the strategy template's placeholders are filled with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StrategyInput {
    pub kernel_name: String,
    /// As shown to the model: `CUDA`, `Triton`.
    pub lang: String,
    /// The kernel and its device helpers, without the `@bench` block.
    pub kernel_unit: String,
    /// The kernel's `@bench` comment lines as written (the launch lines may change in a
    /// reply; nothing else).
    pub spec: String,
    pub facts: String,
    pub device: String,
    pub timing: String,
    pub history: String,
    /// The catalog as text for the model (`Catalog::describe_for_model`).
    pub catalog: String,
    /// The version's Nsight Compute profile (diagnosis and metrics), or why there is none.
    pub profile: String,
}

impl StrategyInput {
    fn vars(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("kernel_name", self.kernel_name.clone()),
            ("lang", self.lang.clone()),
            ("kernel_unit", self.kernel_unit.clone()),
            ("spec", self.spec.clone()),
            ("facts", self.facts.clone()),
            ("device", self.device.clone()),
            ("timing", self.timing.clone()),
            ("history", self.history.clone()),
            ("catalog", self.catalog.clone()),
            ("profile", self.profile.clone()),
        ])
    }
}

/// What the coder and repair templates' placeholders are filled with, plus what the
/// reply is checked against (`lang`, `param_names`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoderInput {
    pub kernel_name: String,
    pub lang: Lang,
    /// The original kernel's parameter names, in order.
    pub param_names: Vec<String>,
    /// The kernel and its device helpers, without the `@bench` block.
    pub kernel_unit: String,
    /// The kernel's `@bench` comment lines as written (the launch lines may change in a
    /// reply; nothing else).
    pub spec: String,
    /// The step to carry out: a catalog step's title, description and parameters, or
    /// a free-form step's description.
    pub step: String,
    pub facts: String,
    pub device: String,
}

impl CoderInput {
    fn vars(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("kernel_name", self.kernel_name.clone()),
            ("lang", lang_label(self.lang).to_string()),
            ("kernel_unit", self.kernel_unit.clone()),
            ("spec", self.spec.clone()),
            ("step", self.step.clone()),
            ("facts", self.facts.clone()),
            ("device", self.device.clone()),
        ])
    }
}

/// The language as the prompts show it.
pub fn lang_label(lang: Lang) -> &'static str {
    match lang {
        Lang::Cuda => "CUDA",
        Lang::Triton => "Triton",
    }
}

/// Which model a [`LlmStepError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Strategist,
    Coder,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Strategist => "strategy model",
            Role::Coder => "coder model",
        })
    }
}

/// Everything an LLM step can fail with; Display is one line for the author.
#[derive(Debug, thiserror::Error)]
pub enum LlmStepError {
    /// The call failed (endpoint, key, budget).
    #[error("{role} `{model}`: {source}")]
    Call {
        role: Role,
        model: String,
        source: LlmError,
    },
    /// The model answered, but not in the required form.
    #[error("{role} `{model}`: {source}")]
    Reply {
        role: Role,
        model: String,
        source: ReplyError,
        /// The reply as the model wrote it (for a repair round).
        raw: String,
    },
    #[error("{0}")]
    Prompt(#[from] PromptError),
}

impl LlmStepError {
    /// The step's call budget is spent: stop asking models in this step.
    pub fn is_budget_exhausted(&self) -> bool {
        matches!(
            self,
            LlmStepError::Call {
                source: LlmError::BudgetExhausted { .. },
                ..
            }
        )
    }

    /// The raw reply of a [`LlmStepError::Reply`].
    pub fn raw_reply(&self) -> Option<&str> {
        match self {
            LlmStepError::Reply { raw, .. } => Some(raw),
            _ => None,
        }
    }
}

/// Spend one budget unit and make one exchange.
async fn call(
    client: &LlmClient,
    role: Role,
    budget: &mut Budget,
    system: &str,
    user: &str,
) -> Result<Reply, LlmStepError> {
    budget.spend().map_err(|source| LlmStepError::Call {
        role,
        model: client.model().to_string(),
        source,
    })?;
    let reply = exchange(client, role, system, user, client.temperature()).await?;
    budget.record(&reply.usage);
    budget.add_cost(client.cost(&reply.usage));
    Ok(reply)
}

/// One exchange at `temperature`, its budget unit already spent.
async fn exchange(
    client: &LlmClient,
    role: Role,
    system: &str,
    user: &str,
    temperature: f64,
) -> Result<Reply, LlmStepError> {
    let reply = client
        .chat_at(system, user, temperature)
        .await
        .map_err(|source| LlmStepError::Call {
            role,
            model: client.model().to_string(),
            source,
        })?;
    tracing::debug!(
        %role, model = client.model(), system_chars = system.len(), user_chars = user.len(),
        reply_chars = reply.text.len(), truncated = reply.truncated, temperature,
        "model replied"
    );
    Ok(reply)
}

/// The temperatures of `n` samples: the configured one first, then evenly up to
/// `base + 0.8` (at most 1.0, never below `base`).
pub fn sample_temperatures(base: f64, n: u32) -> Vec<f64> {
    if n <= 1 {
        return vec![base];
    }
    let top = (base + 0.8).min(1.0).max(base);
    (0..n)
        .map(|i| {
            let t = base + (top - base) * f64::from(i) / f64::from(n - 1);
            (t * 100.0).round() / 100.0
        })
        .collect()
}

/// The LLM strategy model.
#[derive(Debug)]
pub struct Strategist {
    pub client: LlmClient,
    pub prompts: Prompts,
}

impl Strategist {
    pub fn new(settings: &ModelSettings, prompts: Prompts) -> Result<Self, LlmError> {
        Ok(Strategist {
            client: LlmClient::new(settings)?,
            prompts,
        })
    }

    /// The next step for the kernel. `catalog` holds the steps the model may pick (pass
    /// only those that apply to this kernel); its ids and `free` are accepted.
    pub async fn propose(
        &self,
        budget: &mut Budget,
        input: &StrategyInput,
        catalog: &Catalog,
    ) -> Result<Proposal, LlmStepError> {
        let (system, user) = self.prompts.render(Template::Strategy, &input.vars())?;
        let reply = call(&self.client, Role::Strategist, budget, &system, &user).await?;
        parse_strategy_reply(&reply.text, catalog).map_err(|source| LlmStepError::Reply {
            role: Role::Strategist,
            model: self.client.model().to_string(),
            source,
            raw: reply.text,
        })
    }
}

/// The LLM coder.
#[derive(Debug)]
pub struct LlmCoder {
    pub client: LlmClient,
    pub prompts: Prompts,
}

impl LlmCoder {
    pub fn new(settings: &ModelSettings, prompts: Prompts) -> Result<Self, LlmError> {
        Ok(LlmCoder {
            client: LlmClient::new(settings)?,
            prompts,
        })
    }

    /// The new kernel unit carrying out `input.step` and, when the reply changes the
    /// launch, its `@bench` lines, checked by [`parse_code_reply_with_spec`]; splice it
    /// with [`splice_unit_with_spec`].
    pub async fn rewrite(
        &self,
        budget: &mut Budget,
        input: &CoderInput,
    ) -> Result<CodeReply, LlmStepError> {
        let (system, user) = self.prompts.render(Template::Coder, &input.vars())?;
        self.code(budget, input, &system, &user).await
    }

    /// `n` replies for the step, asked for at once at [`sample_temperatures`]; as many as
    /// the budget allows (at least one attempt, which fails if the budget is spent).
    /// Each comes back with its temperature.
    #[allow(clippy::result_large_err)]
    pub async fn rewrite_samples(
        &self,
        budget: &mut Budget,
        input: &CoderInput,
        n: u32,
    ) -> Vec<(f64, Result<CodeReply, LlmStepError>)> {
        let n = n.max(1).min(budget.remaining().max(1));
        if n == 1 {
            let t = self.client.temperature();
            return vec![(t, self.rewrite(budget, input).await)];
        }
        let (system, user) = match self.prompts.render(Template::Coder, &input.vars()) {
            Ok(p) => p,
            Err(e) => return vec![(self.client.temperature(), Err(e.into()))],
        };
        let temps = sample_temperatures(self.client.temperature(), n);
        for _ in &temps {
            budget.spend().expect("n is within the budget");
        }
        let replies = futures::future::join_all(
            temps
                .iter()
                .map(|&t| exchange(&self.client, Role::Coder, &system, &user, t)),
        )
        .await;
        temps
            .into_iter()
            .zip(replies)
            .map(|(t, r)| {
                let parsed = r.and_then(|reply| {
                    budget.record(&reply.usage);
                    budget.add_cost(self.client.cost(&reply.usage));
                    self.parse(input, reply)
                });
                (t, parsed)
            })
            .collect()
    }

    /// Another try after `previous_code` (a unit or a raw reply) was rejected for
    /// `feedback` (a reply error, compiler messages, a verification failure).
    pub async fn repair(
        &self,
        budget: &mut Budget,
        input: &CoderInput,
        previous_code: &str,
        feedback: &str,
    ) -> Result<CodeReply, LlmStepError> {
        let mut vars = input.vars();
        vars.insert("previous_code", previous_code.to_string());
        vars.insert("feedback", feedback.to_string());
        let (system, user) = self.prompts.render(Template::Repair, &vars)?;
        self.code(budget, input, &system, &user).await
    }

    async fn code(
        &self,
        budget: &mut Budget,
        input: &CoderInput,
        system: &str,
        user: &str,
    ) -> Result<CodeReply, LlmStepError> {
        let reply = call(&self.client, Role::Coder, budget, system, user).await?;
        self.parse(input, reply)
    }

    #[allow(clippy::result_large_err)]
    fn parse(&self, input: &CoderInput, reply: Reply) -> Result<CodeReply, LlmStepError> {
        parse_code_reply_with_spec(
            &reply.text,
            input.lang,
            &input.kernel_name,
            &input.param_names,
        )
        .map_err(|source| LlmStepError::Reply {
            role: Role::Coder,
            model: self.client.model().to_string(),
            source,
            raw: reply.text,
        })
    }
}
