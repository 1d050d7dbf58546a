//! The history as a page: `kernel-lsp report FILE` renders each kernel's recorded steps
//! (`.kernel-lsp/history/`) as one self-contained HTML file with an inline SVG chart of
//! the time per step and the table of every attempt. Pure: records in, HTML out; no
//! scripts, no external assets, so the page opens anywhere and can be attached to a PR.

use std::fmt::Write as _;

use super::headline::{ratio, Headline};
use super::record::{Outcome, StepRecord};

/// One kernel's history for the page: its steps and its runs' end-of-run timings.
pub struct KernelHistory<'a> {
    pub name: &'a str,
    pub steps: &'a [StepRecord],
    pub headlines: &'a [Headline],
}

/// Escaped text with `code` spans as `<code>code</code>` (catalog titles and
/// rationales are written with backticks).
fn esc_code(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in esc(s).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    if s.matches('`').count() % 2 == 1 {
        return esc(s);
    }
    out
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `2026-11-22 19:04 UTC` from milliseconds since the epoch (civil-from-days, no tz).
pub fn utc(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "-".into();
    }
    let secs = unix_ms / 1000;
    let days = (secs / 86_400) as i64;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02} UTC")
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |t| format!("{t:.4}"))
}

/// The time of the current version after each step that ran (not-applicable ones are
/// left out): the accepted candidate's time, else the time measured before the step.
fn series(steps: &[StepRecord]) -> Vec<(usize, &StepRecord, Option<f64>)> {
    steps
        .iter()
        .filter(|s| s.outcome != Outcome::NotApplicable)
        .enumerate()
        .map(|(i, s)| {
            let after = if s.outcome == Outcome::Accepted {
                s.best_ms
            } else {
                s.before_ms
            };
            (i, s, after)
        })
        .collect()
}

/// Round tick values from 0 up to at least `max`: steps of 1, 2 or 5 times a power of
/// ten, about four of them.
pub fn ticks(max: f64) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) {
        return vec![0.0, 1.0];
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|k| k as f64 * step).collect()
}

/// A tick's label: as many decimals as its step needs, no more.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// The chart's geometry: the slot of each point (each run starts with its start
/// version's slot), the value axis and the pixel mappings.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    slots: usize,
    ymax: f64,
}

impl Frame {
    fn x(&self, slot: usize) -> f64 {
        let pw = self.w - self.left - self.right;
        self.left + pw * (slot as f64 + 0.5) / self.slots as f64
    }
    fn y(&self, v: f64) -> f64 {
        let ph = self.h - self.top - self.bottom;
        self.top + ph * (1.0 - v / self.ymax)
    }
}

/// The steps of each run, in order (steps recorded before runs had ids form one run).
fn runs_of<'a>(
    pts: &[(usize, &'a StepRecord, Option<f64>)],
) -> Vec<Vec<(usize, &'a StepRecord, Option<f64>)>> {
    let mut runs: Vec<Vec<(usize, &StepRecord, Option<f64>)>> = Vec::new();
    for p in pts {
        match runs.last_mut() {
            Some(r) if r[0].1.run == p.1.run => r.push(*p),
            _ => runs.push(vec![*p]),
        }
    }
    runs
}

/// The SVG chart: one line per run, from its start through its steps (green: accepted,
/// grey: no gain, red: failed, drawn on the axis); the best candidate of a step that
/// did not win is a hollow circle. Separate runs are separate lines; the value axis has
/// round ticks and its unit above it.
pub fn chart(steps: &[StepRecord]) -> String {
    let pts = series(steps);
    let (w, h) = (720.0, 280.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="time per step">"#
    );
    let top_value = pts
        .iter()
        .flat_map(|(_, s, a)| [*a, s.best_ms, s.before_ms])
        .flatten()
        .fold(0.0f64, f64::max);
    if pts.is_empty() || top_value <= 0.0 {
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#666">no timed steps yet</text></svg>"##,
            w / 2.0,
            h / 2.0
        );
        return svg;
    }
    let runs = runs_of(&pts);
    let ticks = ticks(top_value);
    let f = Frame {
        w,
        h,
        left: 64.0,
        right: 16.0,
        top: 28.0,
        bottom: 40.0,
        slots: pts.len() + runs.len(),
        ymax: *ticks.last().expect("ticks are never empty"),
    };
    axes(&mut svg, &f, &ticks);
    let mut slot = 0;
    for run in &runs {
        draw_run(&mut svg, &f, run, slot);
        slot += run.len() + 1;
    }
    svg.push_str("</svg>");
    svg
}

/// Grid lines with round tick labels, the unit (`ms`) above the axis, the step axis.
fn axes(svg: &mut String, f: &Frame, ticks: &[f64]) {
    let step = ticks.get(1).copied().unwrap_or(1.0);
    for v in ticks {
        let yy = f.y(*v);
        let _ = write!(
            svg,
            r##"<line x1="{}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#444">{}</text>"##,
            f.left,
            f.w - f.right,
            f.left - 6.0,
            yy + 4.0,
            tick_label(*v, step)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#444">ms</text>"##,
        f.left - 6.0,
        f.top - 12.0
    );
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#444">step</text>"##,
        f.left + (f.w - f.left - f.right) / 2.0,
        f.h - 6.0
    );
}

/// One run: its start (the first step's "before") at `slot`, its steps after it, one
/// line through the current version's times, and each step's mark.
fn draw_run(svg: &mut String, f: &Frame, run: &[(usize, &StepRecord, Option<f64>)], slot: usize) {
    let label_y = f.h - f.bottom + 14.0;
    let mut line: Vec<String> = Vec::new();
    if let Some(v) = run[0].1.before_ms {
        let (x, y) = (f.x(slot), f.y(v));
        line.push(format!("{x:.1},{y:.1}"));
        let _ = write!(
            svg,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="#2b6cb0"><title>start: {v:.4} ms</title></circle><text x="{x:.1}" y="{label_y:.1}" font-size="10" text-anchor="middle" fill="#444">start</text>"##
        );
    }
    for (k, (i, s, a)) in run.iter().enumerate() {
        let x = f.x(slot + 1 + k);
        let _ = write!(
            svg,
            r##"<text x="{x:.1}" y="{label_y:.1}" font-size="10" text-anchor="middle" fill="#444">{}</text>"##,
            i + 1
        );
        if let Some(v) = a {
            line.push(format!("{x:.1},{:.1}", f.y(*v)));
        }
        mark(svg, f, x, *i, s, *a);
    }
    if line.len() > 1 {
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="#2b6cb0" stroke-width="2" points="{}"/>"##,
            line.join(" ")
        );
    }
}

/// A step's mark at `x`: green for accepted, a red cross on the axis for failed, grey
/// for the rest, with the best candidate of a step that did not win as a hollow circle.
fn mark(svg: &mut String, f: &Frame, x: f64, i: usize, s: &StepRecord, a: Option<f64>) {
    let title = esc(&format!(
        "step {}: {} — {}{}",
        i + 1,
        s.strategy,
        s.outcome.label(),
        s.best_ms
            .map_or(String::new(), |b| format!(", best {b:.4} ms"))
    ));
    match (s.outcome, a) {
        (Outcome::Accepted, Some(v)) => {
            let _ = write!(
                svg,
                r##"<circle cx="{x:.1}" cy="{:.1}" r="5" fill="#2f855a"><title>{title}</title></circle>"##,
                f.y(v)
            );
        }
        (Outcome::Failed, _) => {
            let _ = write!(
                svg,
                r##"<path d="M{:.1},{:.1} l8,8 m0,-8 l-8,8" stroke="#c53030" stroke-width="2"><title>{title}</title></path>"##,
                x - 4.0,
                f.y(0.0) - 12.0
            );
        }
        (_, a) => {
            if let Some(v) = a {
                let _ = write!(
                    svg,
                    r##"<circle cx="{x:.1}" cy="{:.1}" r="4" fill="#a0aec0"><title>{title}</title></circle>"##,
                    f.y(v)
                );
            }
            if let Some(b) = s.best_ms {
                let _ = write!(
                    svg,
                    r##"<circle cx="{x:.1}" cy="{:.1}" r="4" fill="none" stroke="#718096"><title>{title}</title></circle>"##,
                    f.y(b)
                );
            }
        }
    }
}

/// Each run's tree of versions as text, one block per run that recorded its tree (runs
/// from before the tree have no `node` and are left out): every version with its
/// speedup over the run's start and the step that made it, what else was tried on it,
/// and `★` on the path to the run's answer.
pub fn trees(steps: &[StepRecord], headlines: &[Headline]) -> Vec<String> {
    let mut runs: Vec<u64> = Vec::new();
    for s in steps {
        if let (Some(r), Some(_)) = (s.run, s.node) {
            if !runs.contains(&r) {
                runs.push(r);
            }
        }
    }
    runs.iter()
        .map(|&run| {
            let rs: Vec<&StepRecord> = steps.iter().filter(|s| s.run == Some(run)).collect();
            // The answer: the version with the highest speedup (ties: the newer one),
            // and the path to it, from the records alone (the history is written as the
            // run goes, before the answer is known).
            let headline = headlines.iter().rev().find(|h| h.run == run);
            let best = match headline {
                Some(h) => (h.best_node > 0).then_some((h.best_node, h.speedup)),
                None => rs
                    .iter()
                    .filter_map(|s| s.child.map(|c| (c, s.cumulative)))
                    .filter(|(_, x)| *x > 1.0)
                    .max_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0))),
            };
            let mut path: Vec<usize> = Vec::new();
            let mut at = best.map(|b| b.0);
            while let Some(id) = at {
                path.push(id);
                at = rs.iter().find(|s| s.child == Some(id)).and_then(|s| s.node);
            }
            let counted = rs
                .iter()
                .filter(|s| s.outcome != Outcome::NotApplicable)
                .count();
            let versions = 1 + rs.iter().filter(|s| s.child.is_some()).count();
            let mut spent = super::record::LlmSpent::default();
            let mut models = false;
            for l in rs.iter().filter_map(|s| s.llm.as_ref()) {
                models = true;
                spent.calls += l.calls;
                spent.input_tokens += l.input_tokens;
                spent.output_tokens += l.output_tokens;
                if let Some(c) = l.cost_usd {
                    *spent.cost_usd.get_or_insert(0.0) += c;
                }
            }
            let mut out = format!(
                "run of {}: {counted} steps ran, {versions} versions{}{}\n",
                utc(run),
                if models {
                    format!(", {}", spent.describe())
                } else {
                    String::new()
                },
                match (headline, best) {
                    (Some(h), _) => format!("; {}", h.describe()),
                    (None, Some((c, x))) => format!(
                        ", best v{c} at {} over the start by the steps' own timings",
                        ratio(x)
                    ),
                    (None, None) => ", no faster version".to_string(),
                }
            );
            #[allow(clippy::too_many_arguments)]
            fn walk(
                out: &mut String,
                rs: &[&StepRecord],
                (path, headline): (&[usize], Option<&Headline>),
                id: usize,
                prefix: &str,
                last: bool,
                root: bool,
            ) {
                let (branch, next) = if root {
                    ("", String::new())
                } else if last {
                    ("└─ ", format!("{prefix}   "))
                } else {
                    ("├─ ", format!("{prefix}│  "))
                };
                let line = match rs.iter().find(|s| s.child == Some(id)) {
                    None => format!("v{id} start"),
                    Some(s) => {
                        // The answer reads the run's one number; other versions the
                        // product of their steps' speedups.
                        let (x, t) = match headline.filter(|h| h.best_node == id) {
                            Some(h) => (h.speedup, Some(h.best_ms)),
                            None => (s.cumulative, s.best_ms),
                        };
                        format!(
                            "v{id}{} {} {} ({}) step {}, {}",
                            if path.contains(&id) { " ★" } else { "" },
                            ratio(x),
                            s.strategy_id,
                            s.accepted.as_deref().unwrap_or("-"),
                            s.step,
                            ms(t) + " ms"
                        )
                    }
                };
                out.push_str(&format!("{prefix}{branch}{line}\n"));
                let tried: Vec<String> = rs
                    .iter()
                    .filter(|s| {
                        s.node == Some(id)
                            && s.child.is_none()
                            && s.outcome != Outcome::NotApplicable
                    })
                    .map(|s| {
                        let pick = s
                            .pick
                            .as_deref()
                            .filter(|p| *p != "best")
                            .map_or(String::new(), |p| format!(" ({p})"));
                        format!("{} {}{pick}", s.strategy_id, s.outcome.label())
                    })
                    .collect();
                let children: Vec<usize> = rs
                    .iter()
                    .filter(|s| s.node == Some(id))
                    .filter_map(|s| s.child)
                    .collect();
                if !tried.is_empty() {
                    let bar = if children.is_empty() { "" } else { "│  " };
                    out.push_str(&format!("{next}{bar}tried: {}\n", tried.join(", ")));
                }
                for (i, c) in children.iter().enumerate() {
                    let on = (path, headline);
                    walk(out, rs, on, *c, &next, i + 1 == children.len(), false);
                }
            }
            walk(&mut out, &rs, (&path, headline), 0, "", true, true);
            out
        })
        .collect()
}

/// `energy per call: 36.2 → 20.1 mJ`, for an accepted step measured with NVML.
fn energy_note(e: Option<(Option<f64>, Option<f64>)>) -> String {
    let show = |j: Option<f64>| {
        j.map_or("-".to_string(), |j| {
            if j >= 0.1 {
                format!("{j:.2} J")
            } else {
                format!("{:.1} mJ", j * 1e3)
            }
        })
    };
    match e {
        Some((a, b)) => format!(
            "<br><small>energy per call: {} → {}</small>",
            show(a),
            show(b)
        ),
        None => String::new(),
    }
}

/// "5 steps ran, 2 accepted, over 2 runs; the last run: best v2: …" — the last run's
/// one number as the CLI printed it, or why there is none.
fn summary(k: &KernelHistory<'_>, ran: usize, accepted: usize) -> String {
    let mut runs: Vec<Option<u64>> = k.steps.iter().map(|s| s.run).collect();
    runs.dedup();
    let n = runs.len();
    let last = k.steps.last().and_then(|s| s.run);
    let headline = k.headlines.iter().rev().find(|h| Some(h.run) == last);
    let result = match headline {
        Some(h) => format!("the last run ({}): {}", utc(h.run), esc(&h.describe())),
        None => {
            "the last run has no end-of-run timing (it was cut short or is older than that timing)"
                .into()
        }
    };
    format!(
        "{ran} steps ran, {accepted} accepted, over {n} run{}; {result}",
        if n == 1 { "" } else { "s" }
    )
}

/// The whole page for `file`.
pub fn html(file: &str, kernels: &[KernelHistory<'_>]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kernel-lsp report: {f}</title>\n<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#1a202c}}table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#f7fafc}}.accepted{{color:#2f855a;font-weight:600}}.failed{{color:#c53030}}.no_gain{{color:#718096}}.not_applicable{{color:#a0aec0}}code{{font-size:12px}}</style></head><body>\n<h1>kernel-lsp report: <code>{f}</code></h1>\n",
        f = esc(file)
    );
    if kernels.is_empty() {
        out.push_str(
            "<p>No history yet: run <code>kernel-lsp optimize</code> on this file first.</p>\n",
        );
    }
    for k in kernels {
        let ran: Vec<&StepRecord> = k
            .steps
            .iter()
            .filter(|s| s.outcome != Outcome::NotApplicable)
            .collect();
        let accepted = ran
            .iter()
            .filter(|s| s.outcome == Outcome::Accepted)
            .count();
        let _ = write!(
            out,
            "<h2><code>{}</code></h2>\n<p>{}",
            esc(k.name),
            summary(k, ran.len(), accepted)
        );
        if k.steps.iter().any(|s| s.interpreter) {
            out.push_str("; some timings come from Triton's CPU interpreter and are not GPU times");
        }
        out.push_str(".</p>\n");
        let trees = trees(k.steps, k.headlines);
        if !trees.is_empty() {
            out.push_str("<h3>Tree of versions</h3>\n");
            for t in &trees {
                let _ = writeln!(out, "<pre class=\"tree\">{}</pre>", esc(t));
            }
        }
        out.push_str(&chart(k.steps));
        out.push_str("\n<table><tr><th>#</th><th>when</th><th>step</th><th>why</th><th>coder</th><th>outcome</th><th>before (ms)</th><th>best (ms)</th><th>speedup</th><th>cumulative</th><th>candidates</th><th>seed</th><th>kernel</th></tr>\n");
        for (i, s) in k.steps.iter().enumerate() {
            let cands: Vec<String> = s
                .candidates
                .iter()
                .map(|c| match (c.median_ms, &c.message) {
                    (Some(m), _) => format!("{} {m:.4} ms", esc(&c.label)),
                    (None, Some(msg)) => format!("{}: {}", esc(&c.label), esc(msg)),
                    (None, None) => esc(&c.label),
                })
                .collect();
            let class = match s.outcome {
                Outcome::Accepted => "accepted",
                Outcome::NoGain => "no_gain",
                Outcome::Failed => "failed",
                Outcome::NotApplicable => "not_applicable",
            };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}<br><code>{}</code></td><td>{}</td><td>{}</td><td class=\"{class}\">{}{}</td><td>{}</td><td>{}</td><td>{:.2}×</td><td>{:.2}×</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                i + 1,
                utc(s.unix_ms),
                esc_code(&s.strategy),
                esc(&s.strategy_id),
                esc_code(&s.rationale),
                esc(&s.coder),
                s.outcome.label(),
                s.accepted
                    .as_ref()
                    .map_or(String::new(), |a| format!(": {}", esc(a)))
                    + &if s.suspicious { " ⚠ large speedup, re-verified".to_string() } else { String::new() }
                    + &s.checks.iter().map(|c| format!("<br><small>{}</small>", esc(c))).collect::<String>()
                    + &energy_note(s.energy_j)
                    + &s.profile.as_ref().map_or(String::new(), |p| format!("<br><small>profile: {}</small>", esc(p))),
                ms(s.before_ms),
                ms(s.best_ms),
                s.speedup,
                s.cumulative,
                cands.join("<br>"),
                s.seed,
                esc(&s.kernel_hash)
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimize::CandidateRecord;

    fn step(id: &str, outcome: Outcome, before: f64, best: Option<f64>) -> StepRecord {
        StepRecord {
            step: 1,
            strategy_id: id.into(),
            strategy: format!("<{id}>"),
            rationale: "because".into(),
            coder: "embedded".into(),
            outcome,
            candidates: vec![CandidateRecord {
                label: "x=1".into(),
                verified: best.is_some(),
                median_ms: best,
                message: best
                    .is_none()
                    .then(|| "y[3]: expected 1, got NaN".to_string()),
                ..Default::default()
            }],
            before_ms: Some(before),
            best_ms: best,
            speedup: best.map_or(1.0, |b| before / b),
            cumulative: 1.0,
            accepted: (outcome == Outcome::Accepted).then(|| "x=1".into()),
            seed: 42,
            source_hash: "sha256:00".into(),
            kernel_hash: "sha256:11".into(),
            kernel_after: None,
            interpreter: false,
            unix_ms: 1_795_000_000_000,
            cancelled: false,
            checks: vec![],
            suspicious: false,
            run: None,
            node: None,
            child: None,
            pick: None,
            on_best_path: false,
            llm: None,
            profile: None,
            energy_j: None,
        }
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "-");
        assert_eq!(utc(1_795_000_000_000), "2026-11-18 11:06 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn page_has_chart_table_and_escapes() {
        let steps = vec![
            step("block_size", Outcome::Accepted, 2.0, Some(1.0)),
            step("unroll", Outcome::NoGain, 1.0, Some(0.99)),
            step("vectorize", Outcome::Failed, 1.0, None),
            step("fast_math", Outcome::NotApplicable, 1.0, None),
        ];
        let page = html(
            "a<b>.cu",
            &[KernelHistory {
                name: "matmul",
                steps: &steps,
                headlines: &[],
            }],
        );
        assert!(page.contains("<code>a&lt;b&gt;.cu</code>"));
        assert!(page.contains(
            "3 steps ran, 1 accepted, over 1 run; the last run has no end-of-run timing"
        ));
        assert!(page.contains("<svg"));
        // One accepted point, one grey point with its hollow best, one red cross.
        assert_eq!(page.matches("fill=\"#2f855a\"").count(), 1);
        assert_eq!(page.matches("stroke=\"#c53030\"").count(), 1);
        assert!(page.contains("&lt;block_size&gt;"));
        assert!(page.contains("y[3]: expected 1, got NaN"));
        assert_eq!(page.matches("<tr><td>").count(), 4);
    }

    #[test]
    fn empty_history_says_so() {
        let page = html("k.cu", &[]);
        assert!(page.contains("No history yet"));
        assert!(chart(&[]).contains("no timed steps yet"));
    }

    #[test]
    fn the_tree_shows_versions_tries_and_the_winning_path() {
        let mk = |n: usize, node: usize, child: Option<usize>, id: &str, cum: f64, best: bool| {
            let mut s = step(
                id,
                if child.is_some() {
                    Outcome::Accepted
                } else {
                    Outcome::NoGain
                },
                1.0,
                Some(0.5),
            );
            s.step = n;
            s.run = Some(1_795_000_000_000);
            s.node = Some(node);
            s.child = child;
            s.cumulative = cum;
            s.on_best_path = best;
            s.pick = (n == 4).then(|| "backtrack".into());
            s
        };
        let mut steps = vec![
            mk(1, 0, Some(1), "block_size", 1.5, false),
            mk(2, 1, None, "unroll", 1.5, false),
            mk(3, 1, None, "vectorize", 1.5, false),
            mk(4, 0, Some(2), "restrict_const", 2.0, true),
            mk(5, 2, Some(3), "unroll", 2.4, true),
        ];
        steps[4].energy_j = Some((Some(0.0362), Some(0.0201)));
        steps[4].profile = Some("memory-bound at 79% of DRAM peak".into());
        let t = trees(&steps, &[]);
        assert_eq!(t.len(), 1);
        expect_test::expect![[r#"
            run of 2026-11-18 11:06 UTC: 5 steps ran, 4 versions, best v3 at 2.40× over the start by the steps' own timings
            v0 start
            ├─ v1 1.50× block_size (x=1) step 1, 0.5000 ms
            │  tried: unroll no gain, vectorize no gain
            └─ v2 ★ 2.00× restrict_const (x=1) step 4, 0.5000 ms
               └─ v3 ★ 2.40× unroll (x=1) step 5, 0.5000 ms
        "#]]
        .assert_eq(&t[0]);
        // Histories from before the tree draw no tree.
        assert!(trees(&[step("x", Outcome::NoGain, 1.0, None)], &[]).is_empty());
        let page = html(
            "k.cu",
            &[KernelHistory {
                name: "k",
                steps: &steps,
                headlines: &[],
            }],
        );
        assert!(page.contains("<h3>Tree of versions</h3>"));
        assert!(page.contains("└─ v2 ★ 2.00× restrict_const"));
        assert!(
            page.contains("energy per call: 36.2 mJ → 20.1 mJ"),
            "{page}"
        );
        assert!(page.contains("profile: memory-bound at 79% of DRAM peak"));
    }

    /// The steps of the tree test's run, with its end-of-run timing.
    fn one_run() -> (Vec<StepRecord>, Headline) {
        let mut steps = vec![
            step("tunable_sweep", Outcome::Accepted, 4.0, Some(1.5)),
            step("unroll", Outcome::NoGain, 1.5, Some(1.6)),
        ];
        for (i, s) in steps.iter_mut().enumerate() {
            s.run = Some(1_795_000_000_000);
            s.node = Some(usize::from(i > 0));
            s.cumulative = 4.0 / 1.5;
        }
        steps[0].child = Some(1);
        steps[0].on_best_path = true;
        (steps, Headline::from_times(1_795_000_000_000, 1, 4.2, 1.4))
    }

    #[test]
    fn the_run_reads_its_end_of_run_number_everywhere() {
        let (steps, h) = one_run();
        let hs = [h];
        let t = trees(&steps, &hs);
        expect_test::expect![[r#"
            run of 2026-11-18 11:06 UTC: 2 steps ran, 2 versions; best v1: 1.4000 ms against the start's 4.2000 ms, 3.00× (timed side by side at the end of the run)
            v0 start
            └─ v1 ★ 3.00× tunable_sweep (x=1) step 1, 1.4000 ms
               tried: unroll no gain
        "#]]
        .assert_eq(&t[0]);
        let k = KernelHistory {
            name: "k",
            steps: &steps,
            headlines: &hs,
        };
        let page = html("k.py", &[k]);
        assert!(page.contains("the last run (2026-11-18 11:06 UTC): best v1: 1.4000 ms against the start&#39;s 4.2000 ms, 3.00×"), "{page}");
        assert!(
            !t[0].contains("2.67×"),
            "the tree has no second figure for the answer"
        );
    }

    #[test]
    fn ticks_are_round_and_cover_the_values() {
        assert_eq!(ticks(303.9), [0.0, 100.0, 200.0, 300.0, 400.0]);
        assert_eq!(ticks(0.0734), [0.0, 0.02, 0.04, 0.06, 0.08]);
        assert_eq!(tick_label(0.04, 0.02), "0.04");
        assert_eq!(tick_label(200.0, 100.0), "200");
    }

    /// The text elements of an SVG as (x, y, anchor, text).
    fn texts(svg: &str) -> Vec<(f64, f64, String, String)> {
        svg.split("<text ")
            .skip(1)
            .map(|t| {
                let attr = |name: &str| {
                    let from = t.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                    t[from..from + t[from..].find('"').unwrap()].to_string()
                };
                let body = &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()];
                let num = |n: &str| attr(n).parse::<f64>().unwrap();
                (num("x"), num("y"), attr("text-anchor"), body.to_string())
            })
            .collect()
    }

    #[test]
    fn the_chart_unit_clears_the_tick_labels() {
        let (steps, _) = one_run();
        let svg = chart(&steps);
        let all = texts(&svg);
        let unit = all.iter().find(|t| t.3 == "ms").expect("a unit label");
        // 11px text: a label's box spans its baseline minus 11 up to the baseline.
        for t in all
            .iter()
            .filter(|t| t.3.parse::<f64>().is_ok() && t.2 == "end")
        {
            assert!(
                unit.1 <= t.1 - 11.0 || t.1 <= unit.1 - 11.0,
                "`ms` at y {} overlaps tick {} at y {}",
                unit.1,
                t.3,
                t.1
            );
        }
        let ticks: Vec<&str> = all
            .iter()
            .filter(|t| t.2 == "end" && t.3 != "ms")
            .map(|t| t.3.as_str())
            .collect();
        assert_eq!(ticks, ["0", "1", "2", "3", "4"], "{svg}");
    }

    #[test]
    fn separate_runs_are_separate_lines() {
        let (mut steps, _) = one_run();
        let (second, _) = one_run();
        steps.extend(second.into_iter().map(|mut s| {
            s.run = Some(1_795_000_100_000);
            s
        }));
        let svg = chart(&steps);
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches(">start</text>").count(), 2);
    }

    #[test]
    fn backticks_in_table_cells_are_code() {
        let mut s = step("restrict_const", Outcome::NoGain, 1.0, Some(1.1));
        s.strategy = "`__restrict__` and `const` on pointers".into();
        let page = html(
            "k.cu",
            &[KernelHistory {
                name: "k",
                steps: &[s],
                headlines: &[],
            }],
        );
        assert!(
            page.contains("<code>__restrict__</code> and <code>const</code> on pointers"),
            "{page}"
        );
        assert!(!page.contains("<td>`"), "{page}");
    }
}
