//! The strategy catalog: data, not code. `prompts/strategies.toml` is compiled in with
//! `include_str!` and can be replaced as a whole by a `strategies.toml` in the user's
//! prompt folder. Each step names the static facts it applies to (`requires`, names from
//! `facts::FACT_NAMES`, `!name` for "must not hold"), its cold-start `prior` for the
//! embedded policy and, if it has one, the embedded rewrite that carries it out
//! (`rewrite::REGISTRY`); steps without one are for an LLM coder only.
//!
//! Loading validates everything a typo could break and reports each problem with the
//! file, line and column and what to write instead. This module does no choosing (that is
//! `policy`) and no rewriting (that is `rewrite`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::facts::{self, Facts, FACT_NAMES};
use super::rewrite;
use crate::syntax::Lang;

/// The catalog compiled into the binary.
pub const EMBEDDED: &str = include_str!("../../../prompts/strategies.toml");

/// The file name looked up in a prompt folder.
pub const FILE_NAME: &str = "strategies.toml";

/// One step of the catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Strategy {
    /// Stable id, e.g. `restrict_const`; what the history and the policy store.
    pub id: String,
    /// Short title for tables and code actions ("`__restrict__` and `const` on pointers").
    pub title: String,
    /// For humans and models: what the step does, when it pays, what it risks.
    pub description: String,
    /// Languages it applies to.
    pub lang: Vec<Lang>,
    /// Names of boolean static facts (`facts::FACT_NAMES`) that must all hold; a leading
    /// `!` means the fact must not hold.
    #[serde(default)]
    pub requires: Vec<String>,
    /// Parameters passed to the rewrite (or shown to the model).
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// The embedded rewrite (`rewrite::REGISTRY`), or none for a model-only step.
    #[serde(default)]
    pub rewrite: Option<String>,
    /// Cold-start preference of the embedded policy, in its reward's unit (the natural
    /// log of the expected speedup: 0.1 is about +10%).
    #[serde(default)]
    pub prior: f64,
    /// A sweep of launch or tunable values, not a change of code: "Tune" runs only
    /// these, and they are retried first on a version a structural step made.
    #[serde(default)]
    pub knob: bool,
}

impl Strategy {
    /// Whether the step is for `lang` and every requirement holds for `facts`.
    pub fn applies(&self, lang: Lang, facts: &Facts) -> bool {
        self.lang.contains(&lang) && self.requires.iter().all(|r| requirement_holds(r, facts))
    }

    /// No embedded rewrite: only an LLM coder can carry it out.
    pub fn is_model_only(&self) -> bool {
        self.rewrite.is_none()
    }
}

/// Whether one `requires` entry (`name` or `!name`) holds; an unknown name never holds.
pub fn requirement_holds(requirement: &str, facts: &Facts) -> bool {
    match requirement.strip_prefix('!') {
        Some(name) => facts.holds(name) == Some(false),
        None => facts.holds(requirement) == Some(true),
    }
}

/// The phrase for one `requires` entry ("pointer params lack `__restrict__`", "no
/// `__launch_bounds__`"), for rationales.
pub fn requirement_phrase(requirement: &str) -> Option<&'static str> {
    match requirement.strip_prefix('!') {
        Some(name) => facts::fact_phrase(name, false),
        None => facts::fact_phrase(requirement, true),
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    #[serde(rename = "strategy")]
    pub strategies: Vec<Strategy>,
}

/// One problem in a catalog file. `line` and `col` are 1-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub col: Option<usize>,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read the strategy catalog {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Every problem found, in file order.
    #[error("{}", render(file, problems))]
    Invalid {
        file: String,
        problems: Vec<Problem>,
    },
}

fn render(file: &str, problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| match (p.line, p.col) {
            (Some(l), Some(c)) => format!("{file}:{l}:{c}: {}", p.message),
            (Some(l), None) => format!("{file}:{l}: {}", p.message),
            _ => format!("{file}: {}", p.message),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The file as written, with spans for the values that validation points at.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalog {
    #[serde(default)]
    strategy: Vec<RawStrategy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStrategy {
    id: Spanned<String>,
    title: Spanned<String>,
    description: Spanned<String>,
    lang: Spanned<Vec<Lang>>,
    #[serde(default)]
    requires: Vec<Spanned<String>>,
    #[serde(default)]
    params: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    rewrite: Option<Spanned<String>>,
    #[serde(default)]
    prior: Option<Spanned<f64>>,
    #[serde(default)]
    knob: bool,
}

impl Catalog {
    /// The compiled-in catalog. It is validated by a unit test, so this cannot fail.
    pub fn embedded() -> Catalog {
        Catalog::parse(EMBEDDED, "prompts/strategies.toml (embedded)").expect(
            "the embedded catalog is validated by catalog::tests::embedded_catalog_is_valid",
        )
    }

    /// `dir/strategies.toml` when `dir` is given and the file exists (it replaces the
    /// embedded catalog as a whole); otherwise the embedded catalog.
    pub fn load(dir: Option<&Path>) -> Result<Catalog, CatalogError> {
        let Some(dir) = dir else {
            return Ok(Catalog::embedded());
        };
        let path = dir.join(FILE_NAME);
        match std::fs::read_to_string(&path) {
            Ok(text) => Catalog::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Catalog::embedded()),
            Err(source) => Err(CatalogError::Read { path, source }),
        }
    }

    /// Parse and validate catalog text; `file` names it in messages.
    pub fn parse(text: &str, file: &str) -> Result<Catalog, CatalogError> {
        let invalid = |problems| CatalogError::Invalid {
            file: file.to_string(),
            problems,
        };
        let raw: RawCatalog = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                let (line, col) = e.span().map_or((None, None), |s| {
                    let (l, c) = line_col(text, s.start);
                    (Some(l), Some(c))
                });
                let mut message = e.message().trim().to_string();
                if message.starts_with("unknown field") {
                    message.push_str(
                        "; a [[strategy]] table has id, title, description, lang, requires, params, rewrite, prior and knob",
                    );
                }
                return Err(invalid(vec![Problem { line, col, message }]));
            }
        };
        let mut problems = Vec::new();
        let at = |span: std::ops::Range<usize>, message: String| {
            let (l, c) = line_col(text, span.start);
            Problem {
                line: Some(l),
                col: Some(c),
                message,
            }
        };
        if raw.strategy.is_empty() {
            problems.push(Problem {
                line: None,
                col: None,
                message: "no [[strategy]] tables; add at least one, or remove the file to use the embedded catalog".into(),
            });
        }
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut strategies = Vec::new();
        for s in raw.strategy {
            let id = s.id.get_ref();
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                problems.push(at(
                    s.id.span(),
                    format!("id `{id}` must be non-empty lowercase letters, digits and `_` (e.g. `smem_tiling`)"),
                ));
            }
            if let Some(first) = seen.get(id) {
                problems.push(at(
                    s.id.span(),
                    format!("duplicate id `{id}` (first defined on line {first}); give each step its own id"),
                ));
            } else {
                seen.insert(id.clone(), line_col(text, s.id.span().start).0);
            }
            for (name, field) in [("title", &s.title), ("description", &s.description)] {
                if field.get_ref().trim().is_empty() {
                    problems.push(at(
                        field.span(),
                        format!("`{id}`: {name} is empty; write one"),
                    ));
                }
            }
            if s.lang.get_ref().is_empty() {
                problems.push(at(
                    s.lang.span(),
                    format!("`{id}`: lang is empty; write lang = [\"cuda\"], [\"triton\"] or [\"cuda\", \"triton\"]"),
                ));
            }
            for r in &s.requires {
                let name = r.get_ref().strip_prefix('!').unwrap_or(r.get_ref());
                if !FACT_NAMES.contains(&name) {
                    let hint = crate::spec::did_you_mean(name, FACT_NAMES.iter().copied());
                    problems.push(at(
                        r.span(),
                        format!(
                            "`{id}`: unknown fact `{name}`{hint} (known facts: {})",
                            FACT_NAMES.join(", ")
                        ),
                    ));
                }
            }
            if let Some(rw) = &s.rewrite {
                if !rewrite::ids().any(|id| id == rw.get_ref().as_str()) {
                    let hint = crate::spec::did_you_mean(rw.get_ref(), rewrite::ids());
                    problems.push(at(
                        rw.span(),
                        format!(
                            "`{id}`: unknown rewrite `{}`{hint} (known rewrites: {}); remove `rewrite` for a model-only step",
                            rw.get_ref(),
                            rewrite::ids().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
            if let Some(p) = &s.prior {
                let v = *p.get_ref();
                if !v.is_finite() || !(-1.0..=1.0).contains(&v) {
                    problems.push(at(
                        p.span(),
                        format!("`{id}`: prior {v} is out of range; write a log-speedup between -1 and 1 (0.1 is about +10%)"),
                    ));
                }
            }
            strategies.push(Strategy {
                id: s.id.into_inner(),
                title: s.title.into_inner().trim().to_string(),
                description: s.description.into_inner().trim().to_string(),
                lang: s.lang.into_inner(),
                requires: s.requires.into_iter().map(Spanned::into_inner).collect(),
                params: s.params,
                rewrite: s.rewrite.map(Spanned::into_inner),
                prior: s.prior.map_or(0.0, Spanned::into_inner),
                knob: s.knob,
            });
        }
        if problems.is_empty() {
            Ok(Catalog { strategies })
        } else {
            Err(invalid(problems))
        }
    }

    /// The step with this id.
    pub fn get(&self, id: &str) -> Option<&Strategy> {
        self.strategies.iter().find(|s| s.id == id)
    }

    /// The ids of the knob steps (sweeps of launch and tunable values).
    pub fn knobs(&self) -> Vec<String> {
        self.strategies
            .iter()
            .filter(|s| s.knob)
            .map(|s| s.id.clone())
            .collect()
    }

    /// The steps for `lang` whose requirements all hold, in catalog order.
    pub fn applicable(&self, lang: Lang, facts: &Facts) -> Vec<&Strategy> {
        self.strategies
            .iter()
            .filter(|s| s.applies(lang, facts))
            .collect()
    }

    /// A markdown list of steps for the LLM strategist's prompt: id, title, whether the
    /// embedded coder can do it, the description and the parameters.
    pub fn describe_for_model(&self, list: &[&Strategy]) -> String {
        let mut out = String::new();
        for s in list {
            let how = match &s.rewrite {
                Some(_) => "embedded rewrite available",
                None => "model-only: you write the code",
            };
            out.push_str(&format!("- `{}`: {} ({how})\n", s.id, s.title));
            let desc = s
                .description
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            out.push_str(&format!("  {desc}\n"));
            if !s.params.is_empty() {
                let params: Vec<String> = s
                    .params
                    .iter()
                    .map(|(k, v)| format!("`{k} = {v}`"))
                    .collect();
                out.push_str(&format!("  Parameters: {}\n", params.join(", ")));
            }
        }
        out
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::*;
    use crate::document::Document;
    use crate::syntax;

    fn check_error(text: &str, expect: Expect) {
        match Catalog::parse(text, "strategies.toml") {
            Ok(c) => panic!("expected an error, parsed {} steps", c.strategies.len()),
            Err(e) => expect.assert_eq(&e.to_string()),
        }
    }

    fn facts_of(lang: Lang, src: &str) -> Facts {
        let doc = Document::new(lang, 0, src);
        let tree = doc.tree().expect("the example parses");
        let model = syntax::analyze(lang, src, tree);
        let kernel = model.kernels.last().expect("the example has a kernel");
        facts::static_facts(lang, src, tree, &model, kernel)
    }

    #[test]
    fn embedded_catalog_is_valid() {
        let c = Catalog::parse(EMBEDDED, "embedded").unwrap_or_else(|e| panic!("{e}"));
        for id in [
            "tunable_sweep",
            "block_size",
            "restrict_const",
            "launch_bounds",
            "unroll",
            "vectorize",
            "grid_stride",
            "fast_math",
            "maxnreg",
            "triton_block",
            "triton_num_warps",
            "triton_num_stages",
            "cooperative_rows",
            "privatize_atomics",
            "transpose_tile",
            "tile_matmul",
            "triton_swizzle",
            "triton_configs",
            "triton_persistent_dot",
            "coarsen",
            "block_reduce",
            "remap_lanes",
            "block_coarsen",
        ] {
            assert_eq!(
                c.get(id).and_then(|s| s.rewrite.as_deref()),
                Some(id),
                "`{id}` must use the rewrite of the same name"
            );
        }
        for id in [
            "smem_tiling",
            "register_tiling",
            "warp_shuffle_reduction",
            "coalesce",
            "operator_fusion",
            "tensor_cores",
        ] {
            assert!(c.get(id).is_some_and(Strategy::is_model_only), "{id}");
        }
        for rw in rewrite::ids() {
            assert!(
                c.strategies
                    .iter()
                    .any(|s| s.rewrite.as_deref() == Some(rw)),
                "no step uses the embedded rewrite `{rw}`"
            );
        }
        assert_eq!(Catalog::embedded(), c);
        assert_eq!(
            c.get("block_size")
                .map(|s| s.params["sizes_1d"].to_string())
                .as_deref(),
            Some("[64,128,256,512,1024]")
        );
    }

    #[test]
    fn cold_start_order_per_example() {
        let c = Catalog::embedded();
        // Highest prior first (catalog order on ties): what the policy does cold. The
        // embedded steps alone, then the model-only ones an LLM coder adds.
        let order = |lang, src| {
            let f = facts_of(lang, src);
            let mut a = c.applicable(lang, &f);
            a.sort_by(|x, y| y.prior.total_cmp(&x.prior));
            let ids = |model_only: bool| {
                a.iter()
                    .filter(|s| s.is_model_only() == model_only)
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            format!("{} | model: {}", ids(false), ids(true))
        };
        expect!["tile_matmul block_size restrict_const unroll launch_bounds | model: smem_tiling register_tiling tensor_cores"].assert_eq(&order(Lang::Cuda, include_str!("../../../examples/matmul_naive.cu")));
        expect!["block_size restrict_const coarsen stream_loads vectorize vectorize_rows block_coarsen grid_stride launch_bounds | model: operator_fusion"]
            .assert_eq(&order(
                Lang::Cuda,
                include_str!("../../../examples/saxpy.cu"),
            ));
        expect!["block_reduce tunable_sweep restrict_const coarsen unroll vectorize grid_stride launch_bounds | model: warp_shuffle_reduction operator_fusion"].assert_eq(&order(Lang::Cuda, include_str!("../../../examples/reduce_sum.cu")));
        expect![
            "triton_configs tunable_sweep stream_loads triton_block triton_num_warps | model: operator_fusion"
        ]
        .assert_eq(&order(
            Lang::Triton,
            include_str!("../../../examples/vector_add.py"),
        ));
        expect![
            "triton_configs tunable_sweep stream_loads triton_block triton_num_warps | model: operator_fusion"
        ]
        .assert_eq(&order(
            Lang::Triton,
            include_str!("../../../examples/softmax.py"),
        ));
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        check_error(
            "[[strategy]]\nid = \"a\"\ntitle = \"A\nlang = [\"cuda\"]\n",
            expect![[r#"strategies.toml:3:11: invalid basic string, expected `"`"#]],
        );
    }

    #[test]
    fn unknown_key_is_named() {
        check_error(
            r#"
[[strategy]]
id = "a"
title = "A"
description = "d"
lang = ["cuda"]
requries = ["has_atomics"]
"#,
            expect!["strategies.toml:7:1: unknown field `requries`, expected one of `id`, `title`, `description`, `lang`, `requires`, `params`, `rewrite`, `prior`, `knob`; a [[strategy]] table has id, title, description, lang, requires, params, rewrite, prior and knob"],
        );
    }

    #[test]
    fn unknown_lang_is_named() {
        check_error(
            r#"
[[strategy]]
id = "a"
title = "A"
description = "d"
lang = ["cuda", "python"]
"#,
            expect!["strategies.toml:6:17: unknown variant `python`, expected `cuda` or `triton`"],
        );
    }

    #[test]
    fn every_semantic_problem_is_reported() {
        check_error(
            r#"
[[strategy]]
id = "a"
title = "A"
description = "d"
lang = []
requires = ["pointer_without_restict", "!has_launch_bounds", "!nope"]
rewrite = "blocksize"
prior = 3.0

[[strategy]]
id = "a"
title = " "
description = "d"
lang = ["triton"]

[[strategy]]
id = "Bad Id"
title = "B"
description = "d"
lang = ["cuda"]
"#,
            expect![[r#"
                strategies.toml:6:8: `a`: lang is empty; write lang = ["cuda"], ["triton"] or ["cuda", "triton"]
                strategies.toml:7:13: `a`: unknown fact `pointer_without_restict`; did you mean `pointer_without_restrict`? (known facts: has_tunables, has_constexpr_params, block_1d, block_2d, block_resizable, has_counted_loop, loop_without_unroll_pragma, loop_over_global_memory, pointer_without_restrict, read_only_pointer_without_const, has_launch_bounds, has_maxnreg, unit_stride_access, strided_access, grouped_access, one_thread_per_element_1d, uses_shared_memory, has_atomics, reduction_pattern, uses_warp_shuffle, uses_tensor_cores, has_fast_math_calls, memory_bound, compute_bound, has_spills, register_limited_occupancy, far_from_roofline, thread_walks_a_row, thread_walks_a_column, scatter_atomics, transposed_access, matmul_like_loop, program_grid_2d, autotune_configs, multi_pass_loops, sequential_axis_loop, reduce_every_step, loop_steps_by_block, loop_steps_at_run_time, loop_steps_over_lanes, read_once_loads, one_block_total, narrow_programs, flat_index_split)
                strategies.toml:7:62: `a`: unknown fact `nope` (known facts: has_tunables, has_constexpr_params, block_1d, block_2d, block_resizable, has_counted_loop, loop_without_unroll_pragma, loop_over_global_memory, pointer_without_restrict, read_only_pointer_without_const, has_launch_bounds, has_maxnreg, unit_stride_access, strided_access, grouped_access, one_thread_per_element_1d, uses_shared_memory, has_atomics, reduction_pattern, uses_warp_shuffle, uses_tensor_cores, has_fast_math_calls, memory_bound, compute_bound, has_spills, register_limited_occupancy, far_from_roofline, thread_walks_a_row, thread_walks_a_column, scatter_atomics, transposed_access, matmul_like_loop, program_grid_2d, autotune_configs, multi_pass_loops, sequential_axis_loop, reduce_every_step, loop_steps_by_block, loop_steps_at_run_time, loop_steps_over_lanes, read_once_loads, one_block_total, narrow_programs, flat_index_split)
                strategies.toml:8:11: `a`: unknown rewrite `blocksize`; did you mean `block_size`? (known rewrites: tunable_sweep, block_size, restrict_const, launch_bounds, unroll, vectorize, grid_stride, fast_math, maxnreg, triton_block, triton_num_warps, triton_num_stages, cooperative_rows, privatize_atomics, transpose_tile, tile_matmul, triton_swizzle, triton_configs, triton_persistent_dot, coarsen, block_reduce, remap_lanes, block_coarsen, triton_autotune, split_loop, triton_online, triton_row_tile, triton_split_loop, triton_hoist_reduce, triton_program_tile, interleave, vectorize_rows, vectorize_groups, stream_loads, stage_rows, grid_total, vector_loops, delinearize); remove `rewrite` for a model-only step
                strategies.toml:9:9: `a`: prior 3 is out of range; write a log-speedup between -1 and 1 (0.1 is about +10%)
                strategies.toml:12:6: duplicate id `a` (first defined on line 3); give each step its own id
                strategies.toml:13:9: `a`: title is empty; write one
                strategies.toml:18:6: id `Bad Id` must be non-empty lowercase letters, digits and `_` (e.g. `smem_tiling`)"#]],
        );
        check_error("# nothing\n", expect!["strategies.toml: no [[strategy]] tables; add at least one, or remove the file to use the embedded catalog"]);
    }

    #[test]
    fn load_prefers_the_folder_file() {
        let dir = std::env::temp_dir().join(format!("kernel-lsp-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let _ = std::fs::remove_file(dir.join(FILE_NAME));
        // No file in the folder: the embedded catalog.
        let c = Catalog::load(Some(&dir)).expect("embedded");
        assert_eq!(c, Catalog::embedded());
        assert_eq!(Catalog::load(None).expect("embedded"), c);
        std::fs::write(
            dir.join(FILE_NAME),
            "[[strategy]]\nid = \"only\"\ntitle = \"Only\"\ndescription = \"d\"\nlang = [\"cuda\"]\n",
        )
        .expect("write");
        let c = Catalog::load(Some(&dir)).expect("the folder's catalog");
        assert_eq!(c.strategies.len(), 1);
        assert_eq!(c.strategies[0].prior, 0.0);
        assert!(c.strategies[0].is_model_only());
        std::fs::write(dir.join(FILE_NAME), "[[strategy]]\nid = 1\n").expect("write");
        let e = Catalog::load(Some(&dir)).expect_err("invalid");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{}:2:6: ", dir.join(FILE_NAME).display())),
            "{msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn requirements_negate_with_bang() {
        let f = facts_of(Lang::Cuda, include_str!("../../../examples/saxpy.cu"));
        assert!(requirement_holds("!has_launch_bounds", &f));
        assert!(!requirement_holds("has_launch_bounds", &f));
        assert!(!requirement_holds("!no_such_fact", &f));
        assert!(!requirement_holds("no_such_fact", &f));
        assert_eq!(
            requirement_phrase("!has_launch_bounds"),
            Some("no `__launch_bounds__`")
        );
    }

    #[test]
    fn model_prompt_lists_steps() {
        let c = Catalog::embedded();
        let list: Vec<&Strategy> = ["block_size", "smem_tiling"]
            .iter()
            .filter_map(|id| c.get(id))
            .collect();
        expect![[r#"
            - `block_size`: Sweep the launch geometry (embedded rewrite available)
              Try other thread-block shapes (the spec's `block = ...`, with the grid recomputed to cover the same elements). Larger blocks amortise per-block work and raise occupancy for light kernels; smaller ones help register-heavy kernels and tails. 2-D kernels gain from blocks whose x extent covers a full warp of consecutive addresses (32 or 64) for coalescing. Applies only when the kernel reads blockDim instead of hard-coding its block size. Risk: a kernel that silently assumes a block size fails verification.
              Parameters: `shapes_2d = [[32,8],[32,4],[64,4],[32,16],[16,16],[16,8],[8,32],[128,2],[256,1]]`, `sizes_1d = [64,128,256,512,1024]`
            - `smem_tiling`: Shared-memory tiling (model-only: you write the code)
              Stage tiles of the inputs in shared memory cooperatively (each thread loads part of a tile, `__syncthreads()`, then every thread of the block reads the tile many times), so each global element is read once per block instead of once per thread. The classic step for matmul, convolution and stencils: it turns a loop over global memory into a loop over shared memory and can give 2-10x on naive kernels. Keep tile rows a multiple of 32 floats for coalesced loads and pad by one column to avoid bank conflicts. Risk: missing barriers (races), out-of-bounds tile loads at the edges (guard them), too much shared memory per block. Launch: usually a 2-D block of the tile's shape (e.g. block = (16, 16)) and a grid of cdiv(size, tile) per dimension; give them in the reply's @bench lines.
        "#]].assert_eq(&c.describe_for_model(&list));
    }
}
