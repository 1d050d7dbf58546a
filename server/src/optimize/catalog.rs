//! The strategy catalog: data, not code. `prompts/strategies.toml` is compiled in with
//! `include_str!` and can be replaced by a `strategies.toml` in the user's prompt folder.
//! Each step names the static facts it applies to and, if it has one, the embedded
//! rewrite that carries it out; steps without one are for an LLM coder only.
//! (being written: loading and validation)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::syntax::Lang;

/// One step of the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Strategy {
    /// Stable id, e.g. `restrict_const`; what the history and the policy store.
    pub id: String,
    /// Short title for tables and code actions ("`__restrict__` and `const` on pointers").
    pub title: String,
    /// For humans and models: what the step does and when it pays.
    pub description: String,
    /// Languages it applies to.
    pub lang: Vec<Lang>,
    /// Names of boolean static facts (`facts::FACT_NAMES`) that must all hold.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Parameters passed to the rewrite (or shown to the model).
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// The embedded rewrite (`rewrite::IDS`), or none for a model-only step.
    #[serde(default)]
    pub rewrite: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    #[serde(rename = "strategy")]
    pub strategies: Vec<Strategy>,
}
