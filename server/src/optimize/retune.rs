//! Retuning after a structural step: a version made by a step that changed the code
//! (a remap, coarsening, tiling) kept the launch values that suited the old code, so its
//! knob steps (block size, tunables, Triton BLOCK and warps: the catalog's `knob`
//! steps) are tried on it before anything else; and a version made by a sweep is not
//! swept again by the same step (its neighbours were just timed). Pure rules, read by
//! the proposer.

use super::catalog::Strategy;

/// The knob steps to try first on a version, given the step that made it (`None`: the
/// start), the steps that apply to the version and those already tried on it, in
/// `arms` order. Empty when the version was made by a knob step or is the start (its
/// knobs were the author's, and the policy ranks them with everything else).
pub fn retune_first<'a>(
    made_by: Option<&Strategy>,
    arms: &[&'a Strategy],
    tried: &dyn Fn(&str) -> bool,
) -> Vec<&'a Strategy> {
    if made_by.is_none_or(|s| s.knob) {
        return Vec::new();
    }
    arms.iter()
        .copied()
        .filter(|s| s.knob && !tried(&s.id))
        .collect()
}

/// The step not to run again on a version: the knob step that made it (it just swept
/// those values around this one), if any.
pub fn just_swept(made_by: Option<&Strategy>) -> Option<&str> {
    made_by.filter(|s| s.knob).map(|s| s.id.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimize::catalog::Catalog;

    fn ids(v: &[&Strategy]) -> Vec<String> {
        v.iter().map(|s| s.id.clone()).collect()
    }

    #[test]
    fn a_version_made_by_a_structural_step_retunes_its_knobs_first() {
        let c = Catalog::embedded();
        let arms: Vec<&Strategy> = ["restrict_const", "block_size", "unroll", "tunable_sweep"]
            .iter()
            .map(|id| c.get(id).unwrap())
            .collect();
        let remap = c.get("remap_lanes");
        let none = |_: &str| false;
        assert_eq!(
            ids(&retune_first(remap, &arms, &none)),
            ["block_size", "tunable_sweep"]
        );
        let tried = |id: &str| id == "block_size";
        assert_eq!(ids(&retune_first(remap, &arms, &tried)), ["tunable_sweep"]);
    }

    #[test]
    fn the_start_and_a_version_made_by_a_knob_step_follow_the_policy() {
        let c = Catalog::embedded();
        let arms: Vec<&Strategy> = ["block_size", "tunable_sweep", "unroll"]
            .iter()
            .map(|id| c.get(id).unwrap())
            .collect();
        let none = |_: &str| false;
        assert!(retune_first(None, &arms, &none).is_empty());
        assert!(retune_first(c.get("block_size"), &arms, &none).is_empty());
        assert!(retune_first(c.get("triton_num_warps"), &arms, &none).is_empty());
    }

    #[test]
    fn a_sweep_is_not_repeated_on_the_version_it_made() {
        let c = Catalog::embedded();
        assert_eq!(just_swept(c.get("block_size")), Some("block_size"));
        assert_eq!(
            just_swept(c.get("triton_num_warps")),
            Some("triton_num_warps")
        );
        assert_eq!(
            just_swept(c.get("block_coarsen")),
            None,
            "a structural step"
        );
        assert_eq!(just_swept(None), None, "the start");
    }

    #[test]
    fn the_catalog_marks_exactly_the_sweeps_as_knobs() {
        let c = Catalog::embedded();
        assert_eq!(
            c.knobs(),
            [
                "tunable_sweep",
                "block_size",
                "triton_block",
                "triton_num_warps",
                "triton_num_stages",
                "triton_autotune"
            ]
        );
    }
}
