//! Which (step, version) pairs a finished step rules out for the rest of the run: the
//! version it worked on (after a failure or no gain it would fail again; after a gain it
//! would make the same child again), and, for a sweep that was accepted, the version it
//! made: a sweep times every value of its knobs and keeps the fastest, so on its own
//! winner it would time the values it has just timed. Pure; the step's learn stage
//! adds the pairs to the run's tried set.

/// The `(strategy id, kernel hash)` pairs a step on `current` rules out; `made` is the
/// kernel hash of the version it made, when it made one.
pub fn tried_after(
    strategy_id: &str,
    sweep: bool,
    current: &str,
    made: Option<&str>,
) -> Vec<(String, String)> {
    let mut out = vec![(strategy_id.to_string(), current.to_string())];
    if let Some(made) = made.filter(|_| sweep) {
        out.push((strategy_id.to_string(), made.to_string()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_sweep_is_not_repeated_on_its_winner() {
        let t = tried_after("tunable_sweep", true, "h0", Some("h1"));
        assert_eq!(
            t,
            [
                ("tunable_sweep".into(), "h0".into()),
                ("tunable_sweep".into(), "h1".into())
            ]
        );
    }

    #[test]
    fn a_rewrite_may_run_again_on_what_it_made() {
        let t = tried_after("coarsen", false, "h0", Some("h1"));
        assert_eq!(t, [("coarsen".to_string(), "h0".to_string())]);
        let t = tried_after("tunable_sweep", true, "h0", None);
        assert_eq!(
            t.len(),
            1,
            "a sweep that made nothing rules out its own version only"
        );
    }
}
