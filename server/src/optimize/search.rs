//! The tree of versions an optimization run grows, and the choice of which version the
//! next step works on (issue #12, "a tree of versions, not a line"; issue #30, "a search
//! that composes").
//!
//! Every verified version is a [`Node`]: its text, its time, its parent, the step that
//! made it. The root is the version the run started from. Each step *expands* one node:
//! the strategy and the coder work on that node's text, and a verified candidate that is
//! faster than the node becomes a new child. [`Search::select`] picks the node, by
//! [`choose`] (pure):
//!
//! - **best-first, to the end**: the best version (highest speedup over the root) is
//!   expanded while it has untried steps. It is left only when it is *spent*: exhausted
//!   (the policy has nothing left for it), or, under a strategist whose free-form steps
//!   never run out, no catalog step is left and its last `stall_after` steps gave
//!   nothing (or `give_up` steps did). So the steps a gain opens up are tried on the new
//!   version before anything older.
//! - **transfer**: a step that made a version on another branch is offered first on the
//!   picked version ([`Selection::transfer`]; the proposer skips ids that do not apply
//!   or were tried there), so a new best version starts with what worked elsewhere.
//! - **backtracking, then exploration**: when the best version is spent, the best of the
//!   other open versions in the *frontier* (within `frontier` of the best's speedup) is
//!   expanded, or, with probability ε, another frontier version drawn uniformly (seeded,
//!   so a run is repeatable). ε follows recent progress: `eps_min` while the last
//!   `window` counted steps all gained, rising linearly to `eps_max` when none did.
//!   Exploration never takes a step from a best version that still has one to try.
//! - **the stop rule**: when no frontier version is open, nothing is left to try, and
//!   the run ends early saying so; otherwise a budget ends it ([`Budgets`]).
//!
//! [`drive`] runs the loop against an [`Expand`] implementation. The optimizer's real
//! steps implement [`Expand`]; the unit tests below use a fake evaluator. Pure: no I/O,
//! no clock of its own (the caller passes elapsed time).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// One verified version.
#[derive(Clone, Debug, Serialize)]
pub struct Node {
    pub id: usize,
    pub parent: Option<usize>,
    /// The whole file text of this version.
    #[serde(skip)]
    pub text: String,
    /// Hash of the kernel's spec lines and unit text (what the tried set is keyed on).
    pub kernel_hash: String,
    /// Median time measured when this version was made (ms), if it was timed.
    pub median_ms: Option<f64>,
    /// Speedup over the root: the product of the accepted speedups along the path.
    pub cumulative: f64,
    /// The run step that made this node (None for the root).
    pub step: Option<usize>,
    /// The step id and candidate label that made it (`""` for the root).
    pub label: String,
    /// The catalog step id that made it (`""` for the root).
    pub step_id: String,
    /// Steps run on this node (counted ones).
    pub expansions: u32,
    /// Counted steps on this node since it last gave a child.
    pub since_gain: u32,
    /// Nothing is left to try on this node.
    pub exhausted: bool,
    /// Catalog steps that apply to this node and were not tried on it yet, as the
    /// proposer counted them after its last step here (None: not expanded yet).
    pub untried: Option<usize>,
}

/// Why a node was picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pick {
    /// The best open node.
    Best,
    /// An ε draw: another open node.
    Explore,
    /// The best node stalled; the best of the nodes that have not.
    Backtrack,
}

impl Pick {
    pub fn label(self) -> &'static str {
        match self {
            Pick::Best => "best",
            Pick::Explore => "explore",
            Pick::Backtrack => "backtrack",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub node: usize,
    pub pick: Pick,
    /// ε when the pick was made.
    pub epsilon: f64,
    /// Step ids to offer first on the node: steps that made versions off its path, best
    /// gain first.
    pub transfer: Vec<String>,
}

/// What one step on a node gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Expansion {
    /// A verified version faster than the node by `speedup`: a new child.
    Improved {
        text: String,
        kernel_hash: String,
        median_ms: Option<f64>,
        speedup: f64,
        label: String,
        /// The catalog step id that made it.
        step_id: String,
    },
    /// A step ran and nothing was accepted (no gain, or no candidate verified).
    NoGain,
    /// A step counted, but its failure says nothing about the node (the model could not
    /// be reached): no stall is counted.
    Infra,
    /// The chosen step did not apply; nothing is counted and the node stays as it was.
    NotApplicable,
    /// Nothing is left to try on the node (the reason, for the run's stop message).
    Exhausted(String),
    /// Stop the run now (cancelled).
    Stop(String),
}

/// The search's knobs. The defaults keep a run greedy while it makes progress.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchConfig {
    pub eps_min: f64,
    pub eps_max: f64,
    /// Counted steps the ε schedule looks back on.
    pub window: usize,
    /// Counted steps without a gain after which a node with no catalog step left is
    /// spent (free-form strategist steps never run out).
    pub stall_after: u32,
    /// Counted steps without a gain after which a node is spent, whatever is left.
    pub give_up: u32,
    /// The frontier: open nodes whose speedup is at least this share of the best's.
    /// Older, slower versions are not expanded again (the run ends instead).
    pub frontier: f64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            eps_min: 0.0,
            eps_max: 0.3,
            window: 4,
            stall_after: 2,
            give_up: 12,
            frontier: 0.8,
        }
    }
}

impl SearchConfig {
    /// The default knobs, or with `thorough` a frontier of every version: each is
    /// expanded until nothing is left on it, however slow it is against the best.
    pub fn for_run(thorough: bool) -> Self {
        let c = SearchConfig::default();
        if thorough {
            SearchConfig { frontier: 0.0, ..c }
        } else {
            c
        }
    }
}

/// The tree and the selection state.
#[derive(Clone, Debug)]
pub struct Search {
    pub nodes: Vec<Node>,
    pub config: SearchConfig,
    rng: u64,
    /// Gains (true) and misses of the last `window` counted steps.
    recent: VecDeque<bool>,
}

impl Search {
    /// A tree holding only the root.
    pub fn new(root_text: &str, root_hash: &str, root_ms: Option<f64>, seed: u64) -> Self {
        Search::with_config(root_text, root_hash, root_ms, seed, SearchConfig::default())
    }

    pub fn with_config(
        root_text: &str,
        root_hash: &str,
        root_ms: Option<f64>,
        seed: u64,
        config: SearchConfig,
    ) -> Self {
        Search {
            nodes: vec![Node {
                id: 0,
                parent: None,
                text: root_text.to_string(),
                kernel_hash: root_hash.to_string(),
                median_ms: root_ms,
                cumulative: 1.0,
                step: None,
                label: String::new(),
                step_id: String::new(),
                expansions: 0,
                since_gain: 0,
                exhausted: false,
                untried: None,
            }],
            config,
            rng: seed ^ 0x5eed_7ee5_u64,
            recent: VecDeque::new(),
        }
    }

    /// ε now: `eps_min` plus the share of misses in the window times the range. An
    /// empty window counts as progress.
    pub fn epsilon(&self) -> f64 {
        let c = &self.config;
        if self.recent.is_empty() {
            return c.eps_min;
        }
        let misses = self.recent.iter().filter(|g| !**g).count() as f64;
        c.eps_min + (c.eps_max - c.eps_min) * misses / self.recent.len() as f64
    }

    /// The node with the highest speedup over the root (ties: the newer one).
    pub fn best(&self) -> &Node {
        self.nodes
            .iter()
            .max_by(|a, b| a.cumulative.total_cmp(&b.cumulative).then(a.id.cmp(&b.id)))
            .expect("the root is always there")
    }

    /// The ids from the root to `id`.
    pub fn path(&self, id: usize) -> Vec<usize> {
        let mut path = vec![id];
        let mut at = id;
        while let Some(p) = self.nodes[at].parent {
            path.push(p);
            at = p;
        }
        path.reverse();
        path
    }

    /// The node the next step works on ([`choose`]); None when no frontier node is
    /// open.
    pub fn select(&mut self) -> Option<Selection> {
        let epsilon = self.epsilon();
        // The draw is made every time, so the sequence depends only on the seed and the
        // outcomes, not on how many nodes happened to be open.
        let draw = self.next_f64();
        let pick_other = self.next_u64();
        let (node, pick) = choose(&self.nodes, &self.config, epsilon, draw, pick_other)?;
        let transfer = transfers(&self.nodes, &self.path(node));
        Some(Selection {
            node,
            pick,
            epsilon,
            transfer,
        })
    }

    /// The proposer's count of untried catalog steps on `node`, after a step there.
    pub fn set_untried(&mut self, node: usize, untried: Option<usize>) {
        if let Some(n) = untried {
            self.nodes[node].untried = Some(n);
        }
    }

    /// Record what a step on `node` gave; returns the new child's id, if any.
    pub fn record(&mut self, node: usize, step: usize, outcome: &Expansion) -> Option<usize> {
        match outcome {
            Expansion::Improved {
                text,
                kernel_hash,
                median_ms,
                speedup,
                label,
                step_id,
            } => {
                self.count(true);
                let parent = &mut self.nodes[node];
                parent.expansions += 1;
                parent.since_gain = 0;
                let cumulative = parent.cumulative * speedup;
                let id = self.nodes.len();
                self.nodes.push(Node {
                    id,
                    parent: Some(node),
                    text: text.clone(),
                    kernel_hash: kernel_hash.clone(),
                    median_ms: *median_ms,
                    cumulative,
                    step: Some(step),
                    label: label.clone(),
                    step_id: step_id.clone(),
                    expansions: 0,
                    since_gain: 0,
                    exhausted: false,
                    untried: None,
                });
                Some(id)
            }
            Expansion::NoGain => {
                self.count(false);
                let n = &mut self.nodes[node];
                n.expansions += 1;
                n.since_gain += 1;
                None
            }
            Expansion::Infra => {
                self.nodes[node].expansions += 1;
                None
            }
            Expansion::Exhausted(_) => {
                self.nodes[node].exhausted = true;
                None
            }
            Expansion::NotApplicable | Expansion::Stop(_) => None,
        }
    }

    fn count(&mut self, gain: bool) {
        self.recent.push_back(gain);
        while self.recent.len() > self.config.window.max(1) {
            self.recent.pop_front();
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Ranks nodes: higher speedup first, then the newer.
fn rank(a: &&Node, b: &&Node) -> std::cmp::Ordering {
    a.cumulative.total_cmp(&b.cumulative).then(a.id.cmp(&b.id))
}

/// A node the search leaves: exhausted, or stalled with no catalog step left, or
/// without a gain for `give_up` steps.
pub fn spent(n: &Node, c: &SearchConfig) -> bool {
    n.exhausted
        || (n.since_gain >= c.stall_after && n.untried == Some(0))
        || n.since_gain >= c.give_up
}

/// The selection rule (pure). The best node while it is not spent; else, among the open
/// frontier nodes (not spent, speedup at least `frontier` of the best's), the best one
/// (`Backtrack`), or with probability `epsilon` (`draw < epsilon`) another drawn by
/// `pick_other` (`Explore`). None: no frontier node is open.
pub fn choose(
    nodes: &[Node],
    c: &SearchConfig,
    epsilon: f64,
    draw: f64,
    pick_other: u64,
) -> Option<(usize, Pick)> {
    let best = nodes.iter().max_by(rank)?;
    if !spent(best, c) {
        return Some((best.id, Pick::Best));
    }
    let floor = best.cumulative * c.frontier;
    let open: Vec<&Node> = nodes
        .iter()
        .filter(|n| !spent(n, c) && n.cumulative >= floor)
        .collect();
    let greedy = open.iter().copied().max_by(rank)?.id;
    let others: Vec<usize> = open.iter().map(|n| n.id).filter(|&i| i != greedy).collect();
    if !others.is_empty() && draw < epsilon {
        return Some((
            others[(pick_other % others.len() as u64) as usize],
            Pick::Explore,
        ));
    }
    Some((greedy, Pick::Backtrack))
}

/// The steps to transfer to the node at the end of `path`: the step ids that made nodes
/// off that path, highest gain over their parent first, each once.
pub fn transfers(nodes: &[Node], path: &[usize]) -> Vec<String> {
    let mut gains: Vec<(f64, &str)> = nodes
        .iter()
        .filter(|n| !path.contains(&n.id) && !n.step_id.is_empty())
        .filter_map(|n| {
            let parent = &nodes[n.parent?];
            Some((n.cumulative / parent.cumulative, n.step_id.as_str()))
        })
        .collect();
    gains.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut out: Vec<String> = Vec::new();
    for (_, id) in gains {
        if !out.iter().any(|o| o == id) {
            out.push(id.to_string());
        }
    }
    out
}

/// What a run may spend. `None` is no limit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Budgets {
    /// Counted steps (expansions).
    pub steps: usize,
    /// Wall time of the run.
    pub wall: Option<Duration>,
    /// Model calls of the whole run.
    pub llm_calls: Option<u64>,
    /// Model tokens (input and output) of the whole run.
    pub tokens: Option<u64>,
}

/// What a run has spent so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spent {
    pub steps: usize,
    pub elapsed: Duration,
    pub llm_calls: u64,
    pub tokens: u64,
}

impl Budgets {
    /// Why the run must stop now ("budget spent: ..."), or None.
    pub fn stop_reason(&self, s: &Spent) -> Option<String> {
        let why = if s.steps >= self.steps {
            format!("{} step{}", s.steps, if s.steps == 1 { "" } else { "s" })
        } else if self.wall.is_some_and(|w| s.elapsed >= w) {
            let w = self.wall.unwrap_or_default();
            format!(
                "the time budget of {} ({} elapsed)",
                fmt_duration(w),
                fmt_duration(s.elapsed)
            )
        } else if let Some(c) = self.llm_calls.filter(|&c| s.llm_calls >= c) {
            format!("the model-call budget of {c} ({} calls)", s.llm_calls)
        } else if let Some(t) = self.tokens.filter(|&t| s.tokens >= t) {
            format!("the token budget of {t} ({} tokens)", s.tokens)
        } else {
            return None;
        };
        Some(format!("budget spent: {why}"))
    }
}

pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 120.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}

/// One step's work on a node, as [`drive`] asks for it.
#[allow(async_fn_in_trait)]
pub trait Expand {
    /// Run one step on `sel.node` of `search`; `step` is the number a counted step gets.
    async fn expand(&mut self, search: &Search, sel: Selection, step: usize) -> Expansion;
    /// What the run has spent on models so far: (calls, tokens).
    fn llm_spent(&self) -> (u64, u64);
    /// Catalog steps that apply to `node` and were not tried on it, as last counted
    /// (None: unknown).
    fn untried(&self, _node: usize) -> Option<usize> {
        None
    }
}

/// Expand nodes until a budget is spent, no frontier node is open, or the expander says
/// stop. Returns why the run stopped: "budget spent: ...", "nothing left to try: ...",
/// or the expander's reason. `elapsed` is the run's wall time so far (tests pass a fake
/// clock).
pub async fn drive<E: Expand>(
    search: &mut Search,
    budgets: &Budgets,
    expander: &mut E,
    elapsed: &mut (dyn FnMut() -> Duration + Send),
) -> String {
    let mut steps = 0usize;
    // Steps that turn out not applicable don't count, but each excludes its step on the
    // node's text, so this bound is only a guard.
    let max_attempts = budgets.steps.saturating_mul(4).saturating_add(16);
    let mut last_exhausted: Option<String> = None;
    for _ in 0..max_attempts {
        let (llm_calls, tokens) = expander.llm_spent();
        let spent = Spent {
            steps,
            elapsed: elapsed(),
            llm_calls,
            tokens,
        };
        if let Some(why) = budgets.stop_reason(&spent) {
            return why;
        }
        let Some(sel) = search.select() else {
            return nothing_left(search, last_exhausted);
        };
        let outcome = expander.expand(search, sel.clone(), steps + 1).await;
        if let Expansion::Stop(why) = &outcome {
            return why.clone();
        }
        if let Expansion::Exhausted(why) = &outcome {
            last_exhausted = Some(why.clone());
        }
        if matches!(
            outcome,
            Expansion::Improved { .. } | Expansion::NoGain | Expansion::Infra
        ) {
            steps += 1;
        }
        search.set_untried(sel.node, expander.untried(sel.node));
        search.record(sel.node, steps, &outcome);
    }
    "too many steps did not apply".into()
}

/// The stop message when no frontier version is open.
fn nothing_left(search: &Search, last_exhausted: Option<String>) -> String {
    let c = &search.config;
    let versions = search.nodes.len();
    if versions == 1 {
        let why = last_exhausted.unwrap_or_else(|| "no step applies".into());
        return format!("nothing left to try: {why}");
    }
    let below = search
        .nodes
        .iter()
        .filter(|n| !spent(n, c) && n.cumulative < search.best().cumulative * c.frontier)
        .count();
    let mut why = format!(
        "nothing left to try: every applicable step was tried on the best versions ({versions} versions)"
    );
    if below > 0 {
        why.push_str(&format!(
            "; {below} slower version{} not expanded again (below {:.0}% of the best's speedup)",
            if below == 1 { " was" } else { "s were" },
            c.frontier * 100.0
        ));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake evaluator: a version is its text; a step on a text looks up a table of
    /// (text, attempt on that text) → result. Unlisted attempts give no gain; a text runs
    /// out of steps after `per_node` attempts. The k-th attempt on any text is step `sk`.
    struct Fake {
        gains: Vec<(&'static str, u32, &'static str, f64)>,
        per_node: u32,
        attempts: std::collections::BTreeMap<String, u32>,
        log: Vec<(usize, Pick, String)>,
        transfers: Vec<Vec<String>>,
        calls_per_step: u64,
        calls: u64,
        tokens_per_call: u64,
    }

    impl Fake {
        fn new(gains: Vec<(&'static str, u32, &'static str, f64)>, per_node: u32) -> Self {
            Fake {
                gains,
                per_node,
                attempts: Default::default(),
                log: Vec::new(),
                transfers: Vec::new(),
                calls_per_step: 0,
                calls: 0,
                tokens_per_call: 0,
            }
        }

        fn picks(&self) -> Vec<(&str, Pick)> {
            self.log.iter().map(|l| (l.2.as_str(), l.1)).collect()
        }
    }

    impl Expand for Fake {
        async fn expand(&mut self, search: &Search, sel: Selection, _step: usize) -> Expansion {
            let text = search.nodes[sel.node].text.clone();
            self.log.push((sel.node, sel.pick, text.clone()));
            self.transfers.push(sel.transfer.clone());
            let n = self.attempts.entry(text.clone()).or_default();
            if *n >= self.per_node {
                return Expansion::Exhausted(format!("nothing left on {text}"));
            }
            *n += 1;
            self.calls += self.calls_per_step;
            let k = *n;
            match self.gains.iter().find(|g| g.0 == text && g.1 == k) {
                Some(&(_, _, child, speedup)) => improved(child, speedup, &format!("s{k}")),
                None => Expansion::NoGain,
            }
        }
        fn llm_spent(&self) -> (u64, u64) {
            (self.calls, self.calls * self.tokens_per_call)
        }
    }

    fn improved(text: &str, speedup: f64, step_id: &str) -> Expansion {
        Expansion::Improved {
            text: text.to_string(),
            kernel_hash: text.to_string(),
            median_ms: None,
            speedup,
            label: format!("{step_id} -> {text}"),
            step_id: step_id.to_string(),
        }
    }

    fn run(search: &mut Search, budgets: &Budgets, fake: &mut Fake) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut clock = || Duration::ZERO;
        rt.block_on(drive(search, budgets, fake, &mut clock))
    }

    fn steps(n: usize) -> Budgets {
        Budgets {
            steps: n,
            ..Default::default()
        }
    }

    #[test]
    fn a_run_that_keeps_gaining_is_greedy_down_one_line() {
        let mut fake = Fake::new(
            vec![("a", 1, "b", 2.0), ("b", 1, "c", 1.5), ("c", 1, "d", 1.2)],
            9,
        );
        let mut s = Search::new("a", "a", Some(1.0), 7);
        assert_eq!(run(&mut s, &steps(3), &mut fake), "budget spent: 3 steps");
        assert_eq!(
            fake.picks(),
            [("a", Pick::Best), ("b", Pick::Best), ("c", Pick::Best)]
        );
        assert_eq!(s.best().text, "d");
        assert!((s.best().cumulative - 3.6).abs() < 1e-9);
        assert_eq!(s.path(s.best().id), [0, 1, 2, 3]);
    }

    #[test]
    fn the_best_version_is_expanded_until_spent_before_going_back() {
        // a→b (1.1×) on the first try; b's three steps give nothing. Only then does the
        // search go back to a (within the frontier), whose second step finds c.
        let mut fake = Fake::new(vec![("a", 1, "b", 1.1), ("a", 2, "c", 2.0)], 3);
        let mut s = Search::new("a", "a", None, 1);
        s.config.eps_max = 1.0; // exploration would move it if the rule allowed
        run(&mut s, &steps(6), &mut fake);
        assert_eq!(
            fake.picks(),
            [
                ("a", Pick::Best),
                ("b", Pick::Best),
                ("b", Pick::Best),
                ("b", Pick::Best),
                ("b", Pick::Best), // learns b is exhausted (not counted)
                ("a", Pick::Backtrack),
                ("c", Pick::Best),
            ]
        );
        assert_eq!(s.best().text, "c");
        assert_eq!(s.best().parent, Some(0));
    }

    #[test]
    fn a_slower_old_version_is_not_expanded_again_and_the_run_says_nothing_is_left() {
        // A 3× win on the first step: the root is below the frontier, so once the new
        // version is spent the run ends instead of returning to the root.
        let mut fake = Fake::new(vec![("a", 1, "b", 3.0)], 2);
        let mut s = Search::new("a", "a", None, 3);
        let why = run(&mut s, &steps(50), &mut fake);
        assert_eq!(
            why,
            "nothing left to try: every applicable step was tried on the best versions (2 versions); 1 slower version was not expanded again (below 80% of the best's speedup)"
        );
        assert_eq!(fake.picks().iter().filter(|p| p.0 == "a").count(), 1);
        assert_eq!(s.nodes[0].expansions, 1);

        // Within the frontier, every version is tried to the end.
        let mut fake = Fake::new(vec![("a", 1, "b", 1.1)], 2);
        let mut s = Search::new("a", "a", None, 3);
        let why = run(&mut s, &steps(50), &mut fake);
        assert_eq!(
            why,
            "nothing left to try: every applicable step was tried on the best versions (2 versions)"
        );
        assert!(s.nodes.iter().all(|n| n.exhausted));
        // Each node was asked once more after its last attempt, to learn it was exhausted.
        assert_eq!(fake.log.len(), 2 + 1 + 2 + 1);

        // A thorough run goes back to the slower root too, and finds what it held.
        let mut fake = Fake::new(vec![("a", 1, "b", 3.0), ("a", 2, "c", 4.0)], 3);
        let mut s = Search::with_config("a", "a", None, 3, SearchConfig::for_run(true));
        let why = run(&mut s, &steps(50), &mut fake);
        assert_eq!(s.best().text, "c", "{why}");
        assert!(why.starts_with("nothing left to try"), "{why}");
        let mut fake = Fake::new(vec![("a", 1, "b", 3.0), ("a", 2, "c", 4.0)], 3);
        let mut s = Search::with_config("a", "a", None, 3, SearchConfig::for_run(false));
        run(&mut s, &steps(50), &mut fake);
        assert_eq!(
            s.best().text,
            "b",
            "the default run leaves the root after a 3x win"
        );

        let mut lone = Fake::new(vec![], 0);
        let mut s = Search::new("x", "x", None, 3);
        assert_eq!(
            run(&mut s, &steps(5), &mut lone),
            "nothing left to try: nothing left on x"
        );
    }

    #[test]
    fn a_gain_on_another_branch_is_offered_first_on_the_picked_version() {
        // b (1.2×, by s1) is best; its steps give nothing. Back on a, s2 makes c (1.15×);
        // c is picked next, with s1 (b's step, off c's path) offered first.
        let mut fake = Fake::new(vec![("a", 1, "b", 1.2), ("a", 2, "c", 1.15)], 2);
        let mut s = Search::new("a", "a", None, 0);
        s.config.eps_max = 0.0;
        run(&mut s, &steps(5), &mut fake);
        let at = |i: usize| {
            (
                fake.log[i].2.as_str(),
                fake.log[i].1,
                fake.transfers[i].clone(),
            )
        };
        assert_eq!(at(0), ("a", Pick::Best, vec![]));
        assert_eq!(at(1), ("b", Pick::Best, vec![]));
        assert_eq!(at(4), ("a", Pick::Backtrack, vec!["s1".to_string()]));
        assert_eq!(at(5), ("c", Pick::Backtrack, vec!["s1".to_string()]));
        // From the root, both gains are off its path: the larger first.
        assert_eq!(transfers(&s.nodes, &s.path(0)), ["s1", "s2"]);
    }

    #[test]
    fn a_stalled_node_is_spent_only_when_no_catalog_step_is_left() {
        let c = SearchConfig::default();
        let mut s = Search::new("a", "a", None, 0);
        for i in 0..c.stall_after {
            s.record(0, i as usize + 1, &Expansion::NoGain);
        }
        assert!(!spent(&s.nodes[0], &c), "unknown untried count: keep going");
        s.set_untried(0, Some(3));
        assert!(!spent(&s.nodes[0], &c), "three catalog steps left");
        s.set_untried(0, None);
        assert_eq!(s.nodes[0].untried, Some(3), "None keeps the last count");
        s.set_untried(0, Some(0));
        assert!(spent(&s.nodes[0], &c), "stalled with nothing left");
        let mut t = Search::new("a", "a", None, 0);
        t.set_untried(0, Some(5));
        for i in 0..c.give_up {
            t.record(0, i as usize + 1, &Expansion::NoGain);
        }
        assert!(spent(&t.nodes[0], &c), "give_up misses end it anyway");
    }

    #[test]
    fn epsilon_follows_recent_progress() {
        let mut s = Search::new("a", "a", None, 0);
        assert_eq!(s.epsilon(), 0.0, "an empty window is progress");
        s.record(0, 1, &Expansion::NoGain);
        assert!(
            (s.epsilon() - 0.3).abs() < 1e-12,
            "one miss of one: eps_max"
        );
        s.record(0, 2, &improved("b", 2.0, "s"));
        assert!((s.epsilon() - 0.15).abs() < 1e-12);
        for i in 0..4 {
            s.record(1, 3 + i, &Expansion::NoGain);
        }
        assert!(
            (s.epsilon() - 0.3).abs() < 1e-12,
            "the window forgets the old gain"
        );
        // Neither n/a steps nor infrastructure failures move ε.
        s.record(1, 7, &Expansion::NotApplicable);
        s.record(1, 7, &Expansion::Infra);
        assert!((s.epsilon() - 0.3).abs() < 1e-12);
        for i in 0..4 {
            s.record(1, 8 + i, &improved(&format!("c{i}"), 1.1, "s"));
        }
        assert_eq!(s.epsilon(), 0.0);
    }

    /// A root with four children of 1.0×-1.3×; the best is the last.
    fn fan() -> Search {
        let mut s = Search::new("r", "r", None, 11);
        for i in 0..4 {
            s.record(
                0,
                i + 1,
                &improved(&format!("n{i}"), 1.0 + i as f64 / 10.0, "s"),
            );
        }
        for _ in 0..4 {
            s.record(1, 9, &Expansion::NoGain); // ε at eps_max
        }
        s
    }

    #[test]
    fn exploration_never_takes_a_step_from_a_best_version_that_has_one() {
        let mut s = fan();
        s.config.eps_min = 1.0;
        s.config.eps_max = 1.0;
        let best = s.best().id;
        for _ in 0..1000 {
            let sel = s.select().unwrap();
            assert_eq!((sel.node, sel.pick), (best, Pick::Best));
        }
    }

    #[test]
    fn once_the_best_is_spent_exploration_happens_at_the_rate_epsilon_says() {
        let mut s = fan();
        let best = s.best().id;
        s.nodes[best].exhausted = true;
        s.nodes[1].since_gain = 0;
        s.config.frontier = 0.5; // every node is in the frontier
        let greedy = 3; // n2, 1.2×
        let n = 10_000;
        let mut explored = 0;
        for _ in 0..n {
            let sel = s.select().unwrap();
            assert_ne!(sel.node, best);
            if sel.pick == Pick::Explore {
                explored += 1;
                assert_ne!(sel.node, greedy);
            } else {
                assert_eq!((sel.node, sel.pick), (greedy, Pick::Backtrack));
            }
        }
        let rate = explored as f64 / n as f64;
        assert!((rate - 0.3).abs() < 0.02, "{rate}");
        // With the default frontier (80% of 1.3×), only n1 and n2 remain: the root and
        // n0 (1.0×) are never drawn.
        s.config.frontier = SearchConfig::default().frontier;
        for _ in 0..1000 {
            let sel = s.select().unwrap();
            assert!(sel.node == 2 || sel.node == 3, "{sel:?}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_may_not() {
        let gains = || {
            vec![
                ("a", 1, "b", 1.2),
                ("a", 3, "c", 1.15),
                ("b", 2, "d", 1.0),
                ("c", 1, "e", 1.05),
                ("d", 4, "f", 1.01),
                ("e", 2, "g", 1.02),
            ]
        };
        let trace = |seed: u64| {
            let mut fake = Fake::new(gains(), 3);
            let mut s = Search::new("a", "a", None, seed);
            s.config.eps_min = 0.5;
            s.config.eps_max = 0.9;
            s.config.frontier = 0.5;
            run(&mut s, &steps(30), &mut fake);
            (fake.log, s.best().text.clone())
        };
        assert_eq!(trace(5), trace(5));
        let distinct: std::collections::BTreeSet<String> =
            (0..8).map(|seed| format!("{:?}", trace(seed).0)).collect();
        assert!(distinct.len() > 1, "the seed drives the exploration");
    }

    #[test]
    fn each_budget_stops_the_run_with_its_own_message() {
        let gains = || vec![("a", 1, "b", 1.2), ("b", 1, "c", 1.2), ("c", 1, "d", 1.2)];
        let mut fake = Fake::new(gains(), 9);
        let mut s = Search::new("a", "a", None, 0);
        assert_eq!(run(&mut s, &steps(2), &mut fake), "budget spent: 2 steps");
        assert_eq!(fake.log.len(), 2);

        // Model calls: 3 per step, at most 7 → the third step is the last one started.
        let mut fake = Fake::new(gains(), 9);
        fake.calls_per_step = 3;
        let mut s = Search::new("a", "a", None, 0);
        let b = Budgets {
            steps: 10,
            llm_calls: Some(7),
            ..Default::default()
        };
        let why = run(&mut s, &b, &mut fake);
        assert_eq!(why, "budget spent: the model-call budget of 7 (9 calls)");
        assert_eq!(fake.log.len(), 3);

        // Tokens.
        let mut fake = Fake::new(gains(), 9);
        fake.calls_per_step = 1;
        fake.tokens_per_call = 1000;
        let mut s = Search::new("a", "a", None, 0);
        let b = Budgets {
            steps: 10,
            tokens: Some(1500),
            ..Default::default()
        };
        assert_eq!(
            run(&mut s, &b, &mut fake),
            "budget spent: the token budget of 1500 (2000 tokens)"
        );
        assert_eq!(fake.log.len(), 2);

        // Wall time, with a fake clock that advances 40 s per step.
        let mut fake = Fake::new(gains(), 9);
        let mut s = Search::new("a", "a", None, 0);
        let b = Budgets {
            steps: usize::MAX,
            wall: Some(Duration::from_secs(100)),
            ..Default::default()
        };
        let mut t = 0u64;
        let mut clock = || {
            let now = Duration::from_secs(t);
            t += 40;
            now
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let why = rt.block_on(drive(&mut s, &b, &mut fake, &mut clock));
        assert_eq!(
            why,
            "budget spent: the time budget of 100 s (2.0 min elapsed)"
        );
        assert_eq!(fake.log.len(), 3);
        // The best version so far is still the answer.
        assert_eq!(s.best().text, "d");
    }

    #[test]
    fn not_applicable_steps_do_not_count_and_a_stop_ends_the_run() {
        struct NaThenStop(u32);
        impl Expand for NaThenStop {
            async fn expand(&mut self, _: &Search, _: Selection, step: usize) -> Expansion {
                assert_eq!(step, 1, "n/a attempts do not advance the step number");
                self.0 += 1;
                if self.0 < 4 {
                    Expansion::NotApplicable
                } else {
                    Expansion::Stop("cancelled".into())
                }
            }
            fn llm_spent(&self) -> (u64, u64) {
                (0, 0)
            }
        }
        let mut s = Search::new("a", "a", None, 0);
        let mut e = NaThenStop(0);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut clock = || Duration::ZERO;
        let why = rt.block_on(drive(&mut s, &steps(2), &mut e, &mut clock));
        assert_eq!(why, "cancelled");
        assert_eq!(e.0, 4);
        assert_eq!(s.nodes[0].expansions, 0);
    }
}
