//! The tree of versions an optimization run grows, and the choice of which version the
//! next step works on (issue #12, "a tree of versions, not a line").
//!
//! Every verified version is a [`Node`]: its text, its time, its parent, the step that
//! made it. The root is the version the run started from. Each step *expands* one node:
//! the strategy and the coder work on that node's text, and a verified candidate that is
//! faster than the node becomes a new child. [`Search::select`] picks the node:
//!
//! - **best-first**: the open node with the highest speedup over the root;
//! - **ε-greedy**: with probability ε, another open node, drawn uniformly (seeded, so a
//!   run is repeatable). ε follows recent progress: `eps_min` while the last `window`
//!   counted steps all gained, rising linearly to `eps_max` when none did;
//! - **backtracking**: a node whose last `stall_after` expansions gave nothing is
//!   *stalled*; while another open node is not stalled, the best of those is expanded
//!   instead (the best stalled branch is left for an earlier version);
//! - a node on which nothing is left to try is *exhausted* and never picked again.
//!
//! [`drive`] runs the loop against an [`Expand`] implementation, under the run's
//! [`Budgets`] (steps, wall time, model calls, tokens). The optimizer's real steps
//! implement [`Expand`]; the unit tests below use a fake evaluator. Pure: no I/O, no
//! clock of its own (the caller passes elapsed time).

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
    /// Steps run on this node (counted ones).
    pub expansions: u32,
    /// Counted steps on this node since it last gave a child.
    pub since_gain: u32,
    /// Nothing is left to try on this node.
    pub exhausted: bool,
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

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Selection {
    pub node: usize,
    pub pick: Pick,
    /// ε when the pick was made.
    pub epsilon: f64,
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
    /// Counted steps without a gain after which a node is stalled.
    pub stall_after: u32,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            eps_min: 0.0,
            eps_max: 0.3,
            window: 4,
            stall_after: 2,
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
                expansions: 0,
                since_gain: 0,
                exhausted: false,
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

    /// The node the next step works on; None when every node is exhausted.
    pub fn select(&mut self) -> Option<Selection> {
        let epsilon = self.epsilon();
        let open: Vec<usize> = self
            .nodes
            .iter()
            .filter(|n| !n.exhausted)
            .map(|n| n.id)
            .collect();
        let rank =
            |a: &&Node, b: &&Node| a.cumulative.total_cmp(&b.cumulative).then(a.id.cmp(&b.id));
        let best_open = open.iter().map(|&i| &self.nodes[i]).max_by(rank)?.id;
        let fresh_best = open
            .iter()
            .map(|&i| &self.nodes[i])
            .filter(|n| n.since_gain < self.config.stall_after)
            .max_by(rank)
            .map(|n| n.id);
        // The greedy choice: the best open node, unless it stalled and another has not.
        let (greedy, pick) = match fresh_best {
            Some(f) if f != best_open => (f, Pick::Backtrack),
            _ => (best_open, Pick::Best),
        };
        let others: Vec<usize> = open.iter().copied().filter(|&i| i != greedy).collect();
        // The draw is made every time, so the sequence depends only on the seed and the
        // outcomes, not on how many nodes happened to be open.
        let draw = self.next_f64();
        let pick_other = self.next_u64();
        if !others.is_empty() && draw < epsilon {
            let node = others[(pick_other % others.len() as u64) as usize];
            return Some(Selection {
                node,
                pick: Pick::Explore,
                epsilon,
            });
        }
        Some(Selection {
            node: greedy,
            pick,
            epsilon,
        })
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
                    expansions: 0,
                    since_gain: 0,
                    exhausted: false,
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
    /// Why the run must stop now, or None. The step count is the normal end and gives
    /// no message.
    pub fn stop_reason(&self, s: &Spent) -> Option<Option<String>> {
        if s.steps >= self.steps {
            return Some(None);
        }
        if let Some(w) = self.wall {
            if s.elapsed >= w {
                return Some(Some(format!(
                    "the time budget of {} was spent ({} elapsed)",
                    fmt_duration(w),
                    fmt_duration(s.elapsed)
                )));
            }
        }
        if let Some(c) = self.llm_calls {
            if s.llm_calls >= c {
                return Some(Some(format!(
                    "the model-call budget of {c} was spent ({} calls)",
                    s.llm_calls
                )));
            }
        }
        if let Some(t) = self.tokens {
            if s.tokens >= t {
                return Some(Some(format!(
                    "the token budget of {t} was spent ({} tokens)",
                    s.tokens
                )));
            }
        }
        None
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
}

/// Expand nodes until a budget is spent, every node is exhausted, or the expander says
/// stop. Returns why the run stopped early (None: it ran its steps). `elapsed` is the
/// run's wall time so far (tests pass a fake clock).
pub async fn drive<E: Expand>(
    search: &mut Search,
    budgets: &Budgets,
    expander: &mut E,
    elapsed: &mut (dyn FnMut() -> Duration + Send),
) -> Option<String> {
    let mut steps = 0usize;
    // Steps that turn out not applicable don't count, but each excludes its step on the
    // node's text, so this bound is only a guard.
    let max_attempts = budgets.steps * 4 + 16;
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
            let why = last_exhausted.unwrap_or_else(|| "nothing is left to try".into());
            return Some(if search.nodes.len() > 1 {
                format!(
                    "every applicable step was tried on every version ({} versions); last: {why}",
                    search.nodes.len()
                )
            } else {
                why
            });
        };
        let outcome = expander.expand(search, sel, steps + 1).await;
        if let Expansion::Stop(why) = &outcome {
            return Some(why.clone());
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
        search.record(sel.node, steps, &outcome);
    }
    Some("too many steps did not apply".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake evaluator: a version is its text; a step on a text looks up a table of
    /// (text, attempt on that text) → result. Unlisted attempts give no gain; a text runs
    /// out of steps after `per_node` attempts.
    struct Fake {
        gains: Vec<(&'static str, u32, &'static str, f64)>,
        per_node: u32,
        attempts: std::collections::BTreeMap<String, u32>,
        log: Vec<(usize, Pick, String)>,
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
                calls_per_step: 0,
                calls: 0,
                tokens_per_call: 0,
            }
        }
    }

    impl Expand for Fake {
        async fn expand(&mut self, search: &Search, sel: Selection, _step: usize) -> Expansion {
            let text = search.nodes[sel.node].text.clone();
            self.log.push((sel.node, sel.pick, text.clone()));
            let n = self.attempts.entry(text.clone()).or_default();
            if *n >= self.per_node {
                return Expansion::Exhausted(format!("nothing left on {text}"));
            }
            *n += 1;
            self.calls += self.calls_per_step;
            let k = *n;
            match self.gains.iter().find(|g| g.0 == text && g.1 == k) {
                Some(&(_, _, child, speedup)) => Expansion::Improved {
                    text: child.to_string(),
                    kernel_hash: child.to_string(),
                    median_ms: None,
                    speedup,
                    label: format!("{text}->{child}"),
                },
                None => Expansion::NoGain,
            }
        }
        fn llm_spent(&self) -> (u64, u64) {
            (self.calls, self.calls * self.tokens_per_call)
        }
    }

    fn run(search: &mut Search, budgets: &Budgets, fake: &mut Fake) -> Option<String> {
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
        assert_eq!(run(&mut s, &steps(3), &mut fake), None);
        let texts: Vec<&str> = fake.log.iter().map(|l| l.2.as_str()).collect();
        assert_eq!(texts, ["a", "b", "c"]);
        assert!(fake.log.iter().all(|l| l.1 == Pick::Best));
        assert_eq!(s.best().text, "d");
        assert!((s.best().cumulative - 3.6).abs() < 1e-9);
        assert_eq!(s.path(s.best().id), [0, 1, 2, 3]);
    }

    #[test]
    fn a_stalled_branch_is_left_for_an_earlier_version() {
        // a→b gains on the first try; b never gains again. After two misses on b, the
        // search goes back to a, whose third attempt finds c, better than b.
        let mut fake = Fake::new(vec![("a", 1, "b", 1.5), ("a", 2, "c", 2.0)], 9);
        let mut s = Search::new("a", "a", None, 1);
        s.config.eps_max = 0.0; // no exploration: only backtracking moves the search
        assert_eq!(run(&mut s, &steps(6), &mut fake), None);
        let picks: Vec<(String, Pick)> = fake.log.iter().map(|l| (l.2.clone(), l.1)).collect();
        assert_eq!(
            picks,
            [
                ("a".to_string(), Pick::Best),
                ("b".into(), Pick::Best),
                ("b".into(), Pick::Best),
                ("a".into(), Pick::Backtrack),
                ("c".into(), Pick::Best),
                ("c".into(), Pick::Best),
            ]
        );
        // The answer is the best node, on the branch found after backtracking.
        assert_eq!(s.best().text, "c");
        assert_eq!(s.best().parent, Some(0));
        assert!((s.best().cumulative - 2.0).abs() < 1e-9);
    }

    #[test]
    fn exhausted_nodes_are_never_picked_and_the_run_says_why_it_stopped() {
        let mut fake = Fake::new(vec![("a", 1, "b", 1.5)], 2);
        let mut s = Search::new("a", "a", None, 3);
        let why = run(&mut s, &steps(50), &mut fake).expect("stops early");
        assert!(
            why.starts_with("every applicable step was tried on every version (2 versions)"),
            "{why}"
        );
        assert!(s.nodes.iter().all(|n| n.exhausted));
        // Each node was asked once more after its last attempt, to learn it was exhausted.
        assert_eq!(fake.log.len(), 2 + 1 + 2 + 1);

        let mut lone = Fake::new(vec![], 0);
        let mut s = Search::new("x", "x", None, 3);
        assert_eq!(
            run(&mut s, &steps(5), &mut lone).as_deref(),
            Some("nothing left on x")
        );
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
        s.record(
            0,
            2,
            &Expansion::Improved {
                text: "b".into(),
                kernel_hash: "b".into(),
                median_ms: None,
                speedup: 2.0,
                label: String::new(),
            },
        );
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
            s.record(
                1,
                8 + i,
                &Expansion::Improved {
                    text: format!("c{i}"),
                    kernel_hash: String::new(),
                    median_ms: None,
                    speedup: 1.1,
                    label: String::new(),
                },
            );
        }
        assert_eq!(s.epsilon(), 0.0);
    }

    #[test]
    fn exploration_happens_at_the_rate_epsilon_says() {
        // A tree of five open nodes whose best has not stalled; ε pinned at 0.3 by a
        // window of misses on other nodes.
        let mut s = Search::new("r", "r", None, 11);
        for i in 0..4 {
            s.record(
                0,
                i + 1,
                &Expansion::Improved {
                    text: format!("n{i}"),
                    kernel_hash: String::new(),
                    median_ms: None,
                    speedup: 1.0 + i as f64 / 10.0,
                    label: String::new(),
                },
            );
        }
        s.config.stall_after = 1000;
        for _ in 0..4 {
            s.record(1, 9, &Expansion::NoGain);
        }
        let best = s.best().id;
        let n = 10_000;
        let mut explored = 0;
        for _ in 0..n {
            let sel = s.select().unwrap();
            if sel.pick == Pick::Explore {
                explored += 1;
                assert_ne!(sel.node, best);
            } else {
                assert_eq!(sel.node, best);
            }
        }
        let rate = explored as f64 / n as f64;
        assert!((rate - 0.3).abs() < 0.02, "{rate}");
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_may_not() {
        let gains = || {
            vec![
                ("a", 1, "b", 1.2),
                ("a", 3, "c", 1.3),
                ("b", 2, "d", 1.4),
                ("c", 1, "e", 1.1),
                ("d", 4, "f", 1.5),
                ("e", 2, "g", 2.0),
            ]
        };
        let trace = |seed: u64| {
            let mut fake = Fake::new(gains(), 6);
            let mut s = Search::new("a", "a", None, seed);
            s.config.eps_min = 0.2;
            s.config.eps_max = 0.8;
            run(&mut s, &steps(20), &mut fake);
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
        // Steps: the normal end, no message.
        let mut fake = Fake::new(gains(), 9);
        let mut s = Search::new("a", "a", None, 0);
        assert_eq!(run(&mut s, &steps(2), &mut fake), None);
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
        let why = run(&mut s, &b, &mut fake).unwrap();
        assert_eq!(why, "the model-call budget of 7 was spent (9 calls)");
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
            run(&mut s, &b, &mut fake).unwrap(),
            "the token budget of 1500 was spent (2000 tokens)"
        );
        assert_eq!(fake.log.len(), 2);

        // Wall time, with a fake clock that advances 40 s per step.
        let mut fake = Fake::new(gains(), 9);
        let mut s = Search::new("a", "a", None, 0);
        let b = Budgets {
            steps: 10,
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
        let why = rt
            .block_on(drive(&mut s, &b, &mut fake, &mut clock))
            .unwrap();
        assert_eq!(why, "the time budget of 100 s was spent (2.0 min elapsed)");
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
        assert_eq!(why.as_deref(), Some("cancelled"));
        assert_eq!(e.0, 4);
        assert_eq!(s.nodes[0].expansions, 0);
    }
}
