//! `Settings`: the one configuration struct, fed alike from LSP `initializationOptions`,
//! `workspace/didChangeConfiguration` and CLI flags. Every field has a default, so an
//! empty or partial object is valid; unknown keys are ignored (clients send extra).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::toolchain::ToolchainSettings;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Settings {
    /// Path to `libnvrtc.so*` or the folder that holds it. Default: searched.
    pub nvrtc_path: Option<PathBuf>,
    /// Path to `ptxas`. Default: searched.
    pub ptxas_path: Option<PathBuf>,
    /// Folder with the CUDA headers (`cuda_fp16.h`). Default: searched.
    pub cuda_include: Option<PathBuf>,
    /// Target architecture for NVRTC and ptxas, e.g. `sm_90`.
    pub arch: String,
    /// Compile the device slice with NVRTC as the author types.
    pub compile_on_type: bool,
    /// Quiet time after the last keystroke before NVRTC runs.
    pub compile_debounce_ms: u64,
    /// Past this size a file gets syntax checks only.
    pub max_file_bytes: usize,
    /// Time one document's syntax and @bench checks may take; past it they stop and a
    /// note says what was left unchecked.
    pub analysis_budget_ms: u64,
    /// Multiprocessor count used for `sms` in specs when no GPU has been seen.
    pub sms: u64,
    /// The optional LLM strategist and coder (`optimize::llm`).
    pub llm: LlmSettings,
    /// The command that starts a worker (default: this binary's `worker`), e.g.
    /// `ssh gpu-box kernel-lsp worker`.
    pub worker: Option<String>,
    /// The pool: a count of workers, `"all"` (one local worker per visible GPU, each
    /// pinned with `CUDA_VISIBLE_DEVICES`), or a list of worker commands (local, `ssh`,
    /// `srun`, `kubectl exec`), one worker each. See docs/configuration.md.
    pub workers: Workers,
    /// The Python with torch and triton that runs Triton kernels (`KERNEL_LSP_PYTHON`
    /// for the worker). Default: the worker's own lookup (`python3`).
    pub python: Option<String>,
    /// What happens to a verified faster rewrite: applied as an edit at once, or offered
    /// as a code action.
    pub apply_mode: ApplyMode,
    /// Re-verify and re-time an edited kernel in the background when its file is saved.
    pub bench_on_save: bool,
    /// For a kernel with `reference = torch: ...`: which PyTorch time the inlay hint's
    /// speedup is taken against.
    pub hint_speedup_vs: HintSpeedupVs,
    /// At most this many optimization steps per run ("Optimize", "Tune", and the CLI's
    /// `optimize` unless `--steps`); `None` or 0: no step limit, the time budget and the
    /// search's stop rule end a run.
    pub steps_per_action: Option<usize>,
    /// The wall-time budget of one optimization run, in seconds (the editor's actions
    /// and the CLI's `optimize` unless `--budget`); 0: none.
    pub optimize_budget_s: u64,
    /// Use the configured LLM strategist/coder for "Optimize" (else the embedded policy).
    pub use_llm: bool,
    /// Learn in the user-level policy that every project shares, instead of the
    /// project's own `.kernel-lsp/policy.json` (`optimize::learning`).
    pub shared_policy: bool,
    /// How candidates are verified (docs/verification.md).
    pub verify: VerifySettings,
    /// The command "Capture launches from…" runs (split like `worker`), e.g.
    /// `python train_step.py`; the editor remembers the last one here.
    pub capture_command: Option<String>,
    /// Include folders and defines for the compile checks (docs/project-setup.md).
    pub cuda: CudaSettings,
}

/// The `cuda` section: what a project's compile_commands.json would say, for projects
/// without one (or on top of it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct CudaSettings {
    /// Folders searched for includes after the file's own folder and compile_commands.json's;
    /// relative ones from the workspace root.
    pub include_paths: Vec<PathBuf>,
    /// `NAME` or `NAME=VALUE`.
    pub defines: Vec<String>,
    /// Check files with nvcc when one is found (a device-side compile of the whole file
    /// with the project's flags: the ground truth); `false` checks with NVRTC alone.
    pub use_nvcc: bool,
    /// nvcc itself, or its folder. Default: searched (CUDA installs, pip wheels, `$PATH`).
    pub nvcc_path: Option<PathBuf>,
}

impl Default for CudaSettings {
    fn default() -> Self {
        CudaSettings {
            include_paths: Vec::new(),
            defines: Vec::new(),
            use_nvcc: true,
            nvcc_path: None,
        }
    }
}

/// The `verify` section: what a version must pass before it is accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VerifySettings {
    /// Base seed of the random inputs (every failure names its trial's seed).
    pub seed: u64,
    /// Run a version once under compute-sanitizer (memcheck, racecheck; every buffer at
    /// its exact size) before it is accepted, where the worker's machine has it.
    pub sanitize: bool,
    /// A speedup above this is re-verified on extra seeds before it is accepted, and
    /// marked in the history and the report.
    pub suspicious_speedup: f64,
}

impl Default for VerifySettings {
    fn default() -> Self {
        VerifySettings {
            seed: 42,
            sanitize: true,
            suspicious_speedup: 10.0,
        }
    }
}

/// The `workers` setting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WorkersJson", into = "WorkersJson")]
pub enum Workers {
    /// This many workers started by the `worker` command, pinned to the visible GPUs in
    /// turn when the command is the local default.
    Count(usize),
    /// One local worker per visible GPU.
    All,
    /// One worker per command line (split like `--worker`).
    Commands(Vec<String>),
}

/// How `workers` is written in JSON: `4`, `"all"` or `["cmd", ...]`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum WorkersJson {
    Count(u64),
    Word(String),
    Commands(Vec<String>),
}

impl TryFrom<WorkersJson> for Workers {
    type Error = String;
    fn try_from(v: WorkersJson) -> Result<Self, String> {
        match v {
            WorkersJson::Count(0) => Err("`workers` must be at least 1".into()),
            WorkersJson::Count(n) => Ok(Workers::Count(n.min(1024) as usize)),
            WorkersJson::Word(w) if w.trim().eq_ignore_ascii_case("all") => Ok(Workers::All),
            WorkersJson::Word(w) => match w.trim().parse::<u64>() {
                Ok(n) => Workers::try_from(WorkersJson::Count(n)),
                Err(_) => Err(format!(
                    "`workers` is `{w}`; write a count (4), \"all\" (one per visible GPU) or a list of worker commands"
                )),
            },
            WorkersJson::Commands(c) if c.is_empty() => {
                Err("`workers` is an empty list; give at least one worker command".into())
            }
            WorkersJson::Commands(c) => Ok(Workers::Commands(c)),
        }
    }
}

impl From<Workers> for WorkersJson {
    fn from(w: Workers) -> Self {
        match w {
            Workers::Count(n) => WorkersJson::Count(n as u64),
            Workers::All => WorkersJson::Word("all".into()),
            Workers::Commands(c) => WorkersJson::Commands(c),
        }
    }
}

impl std::str::FromStr for Workers {
    type Err = String;
    /// The `--workers` flag: `4`, `all`, or one or more commands separated by `;`.
    fn from_str(s: &str) -> Result<Self, String> {
        let word = s.trim();
        let count_or_all = word.eq_ignore_ascii_case("all") || word.parse::<u64>().is_ok();
        if !count_or_all && (s.contains(';') || word.contains(char::is_whitespace)) {
            let c: Vec<String> = s
                .split(';')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect();
            return Workers::try_from(WorkersJson::Commands(c));
        }
        Workers::try_from(WorkersJson::Word(s.to_string()))
    }
}

/// What the inlay hint compares a kernel with when its reference is PyTorch (issue #17).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HintSpeedupVs {
    /// Both: `1.06× eager · 0.93× compile`.
    #[default]
    All,
    /// PyTorch eager only.
    Eager,
    /// `torch.compile` only (eager where it was not timed: Triton's CPU interpreter).
    Compile,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApplyMode {
    /// `workspace/applyEdit` as soon as the step is verified and faster.
    #[default]
    Apply,
    /// A code action "Apply verified rewrite (1.8×)" the author confirms.
    Offer,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nvrtc_path: None,
            ptxas_path: None,
            cuda_include: None,
            arch: "sm_90".into(),
            compile_on_type: true,
            compile_debounce_ms: 300,
            max_file_bytes: 2 * 1024 * 1024,
            analysis_budget_ms: 2000,
            sms: 132,
            llm: LlmSettings::default(),
            worker: None,
            workers: Workers::Count(1),
            python: None,
            apply_mode: ApplyMode::Apply,
            bench_on_save: false,
            hint_speedup_vs: HintSpeedupVs::All,
            steps_per_action: None,
            optimize_budget_s: 600,
            use_llm: false,
            shared_policy: false,
            verify: VerifySettings::default(),
            capture_command: None,
            cuda: CudaSettings::default(),
        }
    }
}

/// The `llm` section. With neither `strategy` nor `coder` set, no model is called and
/// the embedded policy and rewrites do all the work.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LlmSettings {
    /// The model that picks the next step (macro). None: the embedded policy picks.
    pub strategy: Option<ModelSettings>,
    /// The model that rewrites the kernel unit (micro). None: embedded rewrites only.
    pub coder: Option<ModelSettings>,
    /// Most model calls one optimization step may make (strategy, code, repairs).
    pub calls_per_step: u32,
    /// How many times a failing candidate goes back to the coder with the failure.
    pub repair_rounds: u32,
    /// Coder replies asked for at once in each step, at a spread of temperatures; the
    /// distinct ones are all verified and the fastest is kept.
    pub samples: u32,
    /// Most model calls of a whole run (0: no limit beyond `callsPerStep`).
    pub calls_per_run: u64,
    /// Most model tokens (input and output) of a whole run (0: no limit).
    pub tokens_per_run: u64,
    /// A folder whose `strategy.md`, `coder.md`, `repair.md` and `strategies.toml`
    /// replace the embedded ones (each file separately; missing files keep the default).
    pub prompts_dir: Option<PathBuf>,
}

impl Default for LlmSettings {
    fn default() -> Self {
        LlmSettings {
            strategy: None,
            coder: None,
            calls_per_step: 6,
            repair_rounds: 2,
            samples: 4,
            calls_per_run: 0,
            tokens_per_run: 0,
            prompts_dir: None,
        }
    }
}

/// The wire format an endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Provider {
    /// OpenAI-compatible chat completions: OpenAI, vLLM, Ollama, llama.cpp, LM Studio.
    #[serde(rename = "openai")]
    OpenAi,
    /// The Anthropic Messages API.
    #[serde(rename = "anthropic")]
    Anthropic,
}

impl Provider {
    /// The environment variable read for the key when `apiKeyEnv` is not set.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    /// The base URL used when `url` is not set.
    pub fn default_url(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        })
    }
}

/// One model endpoint. Holds the *name* of the environment variable with the API key,
/// never the key itself, so these settings can be logged and echoed freely.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSettings {
    #[serde(default = "defaults::provider")]
    pub provider: Provider,
    /// Base URL: `http://localhost:11434/v1` (Ollama), `https://api.openai.com/v1`,
    /// `https://api.anthropic.com`. None: the provider's public API.
    #[serde(default)]
    pub url: Option<String>,
    /// The model name the endpoint expects (`gpt-4o`, `qwen2.5-coder:32b`, ...).
    pub model: String,
    /// Name of the environment variable that holds the key. None: `OPENAI_API_KEY` or
    /// `ANTHROPIC_API_KEY`. A missing variable is fine for `openai` (local servers need
    /// none) and an error for `anthropic`.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Time limit of one HTTP call, reading the whole answer included.
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
    /// Retries after 429, 5xx and connection errors (so at most `maxRetries + 1` calls).
    #[serde(default = "defaults::max_retries")]
    pub max_retries: u32,
    #[serde(default = "defaults::max_tokens")]
    pub max_tokens: u32,
    #[serde(default = "defaults::temperature")]
    pub temperature: f64,
    /// USD per million input tokens, for the cost estimate in progress and reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_in: Option<f64>,
    /// USD per million output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_out: Option<f64>,
}

impl ModelSettings {
    /// Settings with every default, for `provider` and `model`.
    pub fn new(provider: Provider, model: impl Into<String>) -> Self {
        ModelSettings {
            provider,
            url: None,
            model: model.into(),
            api_key_env: None,
            timeout_ms: defaults::timeout_ms(),
            max_retries: defaults::max_retries(),
            max_tokens: defaults::max_tokens(),
            temperature: defaults::temperature(),
            price_in: None,
            price_out: None,
        }
    }

    /// The base URL in use, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        self.url
            .as_deref()
            .unwrap_or(self.provider.default_url())
            .trim_end_matches('/')
    }

    /// The environment variable read for the key.
    pub fn key_env(&self) -> &str {
        self.api_key_env
            .as_deref()
            .unwrap_or(self.provider.default_key_env())
    }
}

mod defaults {
    pub fn provider() -> super::Provider {
        super::Provider::OpenAi
    }
    pub fn timeout_ms() -> u64 {
        120_000
    }
    pub fn max_retries() -> u32 {
        3
    }
    pub fn max_tokens() -> u32 {
        4096
    }
    pub fn temperature() -> f64 {
        0.2
    }
}

impl Settings {
    /// Read settings from a client's JSON. Accepts the settings object itself or one
    /// nested under `kernel-lsp` / `kernelLsp` (how VS Code and Neovim send sections).
    /// Returns the settings and, when some fields had the wrong type, a message naming
    /// them; the rest of the object still applies.
    pub fn from_json(value: &serde_json::Value) -> (Settings, Option<String>) {
        let obj = value
            .get("kernel-lsp")
            .or_else(|| value.get("kernelLsp"))
            .unwrap_or(value);
        let Some(map) = obj.as_object() else {
            return (Settings::default(), None);
        };
        // Field by field, so one bad value does not throw away the others. Objects that
        // are sections of their own (`llm`) merge one level down the same way, so a bad
        // `llm.coder` keeps a good `llm.strategy`.
        let mut settings = Settings::default();
        let mut bad = Vec::new();
        let mut merged = serde_json::to_value(&settings).expect("Settings serializes");
        let mut try_set = |path: &[&str], v: &serde_json::Value, merged: &mut serde_json::Value| {
            let mut trial = merged.clone();
            let mut slot = &mut trial;
            for p in path {
                slot = &mut slot[*p];
            }
            *slot = v.clone();
            match serde_json::from_value::<Settings>(trial.clone()) {
                Ok(s) => {
                    settings = s;
                    *merged = trial;
                }
                Err(e) => bad.push(format!("`{}`: {e}", path.join("."))),
            }
        };
        for (key, v) in map {
            let section = merged.get(key.as_str()).is_some_and(|m| m.is_object());
            match v.as_object() {
                Some(fields) if section => {
                    for (field, fv) in fields {
                        try_set(&[key.as_str(), field.as_str()], fv, &mut merged);
                    }
                }
                _ => try_set(&[key.as_str()], v, &mut merged),
            }
        }
        let msg = (!bad.is_empty()).then(|| {
            format!(
                "kernel-lsp ignored settings with the wrong type: {}",
                bad.join("; ")
            )
        });
        (settings, msg)
    }

    pub fn toolchain(&self) -> ToolchainSettings {
        ToolchainSettings {
            nvrtc_path: self.nvrtc_path.clone(),
            ptxas_path: self.ptxas_path.clone(),
            cuda_include: self.cuda_include.clone(),
            arch: self.arch.clone(),
            nvcc_path: self.cuda.nvcc_path.clone(),
            use_nvcc: self.cuda.use_nvcc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_section_and_partial_objects() {
        let (s, msg) = Settings::from_json(&json!({"kernel-lsp": {"arch": "sm_80"}}));
        assert_eq!(s.arch, "sm_80");
        assert!(s.compile_on_type);
        assert_eq!(msg, None);
    }

    #[test]
    fn a_bad_field_is_named_and_the_rest_applies() {
        let (s, msg) = Settings::from_json(&json!({"arch": "sm_89", "compileDebounceMs": "soon"}));
        assert_eq!(s.arch, "sm_89");
        assert_eq!(s.compile_debounce_ms, 300);
        let msg = msg.unwrap();
        assert!(msg.contains("`compileDebounceMs`"), "{msg}");
    }

    #[test]
    fn workers_take_a_count_all_or_commands() {
        let w = |v: serde_json::Value| Settings::from_json(&json!({ "workers": v }));
        assert_eq!(w(json!(4)).0.workers, Workers::Count(4));
        assert_eq!(w(json!("all")).0.workers, Workers::All);
        assert_eq!(
            w(json!(["kernel-lsp worker", "ssh b kernel-lsp worker"]))
                .0
                .workers,
            Workers::Commands(vec![
                "kernel-lsp worker".into(),
                "ssh b kernel-lsp worker".into()
            ])
        );
        let (s, msg) = w(json!("many"));
        assert_eq!(s.workers, Workers::Count(1));
        let msg = msg.unwrap();
        assert!(
            msg.contains("`workers`") && msg.contains("\"all\""),
            "{msg}"
        );
        assert!(w(json!(0)).1.unwrap().contains("at least 1"));
        // It round-trips, so the merged JSON of `from_json` keeps it.
        let back = serde_json::to_value(w(json!("all")).0).unwrap();
        assert_eq!(back["workers"], json!("all"));
        assert_eq!("3".parse::<Workers>(), Ok(Workers::Count(3)));
        assert_eq!(
            "a worker; b worker".parse::<Workers>(),
            Ok(Workers::Commands(vec![
                "a worker".into(),
                "b worker".into()
            ]))
        );
    }

    #[test]
    fn llm_section_defaults_and_model_fields() {
        let (s, msg) = Settings::from_json(&json!({"llm": {
            "coder": {"provider": "anthropic", "model": "claude-sonnet-4-5", "apiKeyEnv": "MY_KEY"},
            "callsPerStep": 4
        }}));
        assert_eq!(msg, None);
        assert_eq!(s.llm.calls_per_step, 4);
        assert_eq!(s.llm.repair_rounds, 2);
        assert_eq!(s.llm.strategy, None);
        let coder = s.llm.coder.unwrap();
        assert_eq!(coder.provider, Provider::Anthropic);
        assert_eq!(coder.base_url(), "https://api.anthropic.com");
        assert_eq!(coder.key_env(), "MY_KEY");
        assert_eq!(
            (coder.timeout_ms, coder.max_retries, coder.max_tokens),
            (120_000, 3, 4096)
        );
        assert_eq!(coder.temperature, 0.2);
        assert_eq!((coder.price_in, coder.price_out), (None, None));
        let (s, msg) = Settings::from_json(&json!({"llm": {
            "coder": {"model": "m", "priceIn": 3.0, "priceOut": 15},
            "samples": 2, "callsPerRun": 10, "tokensPerRun": 5000
        }}));
        assert_eq!(msg, None);
        let coder = s.llm.coder.unwrap();
        assert_eq!((coder.price_in, coder.price_out), (Some(3.0), Some(15.0)));
        assert_eq!(
            (s.llm.samples, s.llm.calls_per_run, s.llm.tokens_per_run),
            (2, 10, 5000)
        );
        assert_eq!(Settings::default().llm.samples, 4);
        assert_eq!(Settings::default().llm.calls_per_step, 6);
    }

    #[test]
    fn a_bad_llm_field_is_named_with_its_section_and_the_rest_applies() {
        let (s, msg) = Settings::from_json(&json!({"llm": {
            "strategy": {"provider": "openai", "url": "http://localhost:11434/v1/", "model": "qwen"},
            "coder": {"provider": "gemini", "model": "x"},
            "repairRounds": "two"
        }}));
        let strategy = s.llm.strategy.unwrap();
        assert_eq!(strategy.base_url(), "http://localhost:11434/v1");
        assert_eq!(strategy.key_env(), "OPENAI_API_KEY");
        assert_eq!(s.llm.coder, None);
        assert_eq!(s.llm.repair_rounds, 2);
        let msg = msg.unwrap();
        assert!(
            msg.contains("`llm.coder`: unknown variant `gemini`"),
            "{msg}"
        );
        assert!(msg.contains("`llm.repairRounds`"), "{msg}");
    }
}
