//! The diagnosis chooses the cure: what the hardware profile (when one was taken) or,
//! without one, the static access analysis says holds the kernel back, and the steps
//! that act on that cause, best first. The policy ranks these steps ahead of the rest
//! ([`super::policy::Policy::rank`]), so `optimize --profile` tries first the cure the
//! profile names. Pure: facts in, causes out.

use super::facts::Facts;

/// Sectors per global request above which accesses count as not coalesced (4 is ideal
/// for 4-byte elements, 32 the worst; 8 allows 8-byte elements and edges).
const UNCOALESCED_SECTORS: f64 = 8.0;

/// One cause and the steps that cure it, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// For the step table: what was seen, and where ("the profile: loads are not
    /// coalesced (8.5 sectors per request)").
    pub why: String,
    pub cures: &'static [&'static str],
}

/// Steps for accesses that are not coalesced: remap the lanes, stage a transpose, or
/// (for a model) any coalescing rewrite.
const COALESCE: &[&str] = &[
    "remap_lanes",
    "transpose_tile",
    "triton_program_tile",
    "coalesce",
];
/// Steps for a thread that reads or writes its interleaved group one element at a time.
const GROUPS: &[&str] = &["vectorize_groups"];
/// Steps for a grid that leaves the GPU idle or a thread that walks a long loop alone.
const PARALLELIZE: &[&str] = &[
    "split_loop",
    "cooperative_rows",
    "block_reduce",
    "triton_split_loop",
    "block_size",
    "triton_block",
    "grid_total",
];
/// Steps for several passes over the same data where one would do.
const ONE_PASS: &[&str] = &["triton_online", "triton_row_tile"];
/// Steps for a thread that waits on one load at a time: more loads in flight per thread.
const LOADS_IN_FLIGHT: &[&str] = &[
    "vector_loops",
    "interleave",
    "vectorize",
    "vectorize_rows",
    "coarsen",
];
/// Steps for loops that stride by all their lanes: keep what a first pass read for the
/// later passes (refused at once where no later pass rereads it), then wider accesses.
const LANE_LOOPS: &[&str] = &["stage_rows", "vector_loops"];
/// The share of stalls on global loads (long scoreboard) above which, short of the DRAM
/// peak, the threads wait on their loads rather than on the memory system.
const LOAD_WAIT_SHARE: f64 = 0.5;
const DRAM_BUSY_PCT: f64 = 70.0;
/// Steps for a program that walks a long axis one step at a time.
const SPLIT_LOOP: &[&str] = &["triton_split_loop"];
/// Steps for many programs that each load a few elements a thread: pack them.
const PACK_PROGRAMS: &[&str] = &["triton_program_rows"];
/// Steps for a loop that reduces across the lanes every iteration: no loop at all where
/// the row fits one tile, else one reduction after the loop.
const REDUCE_ONCE: &[&str] = &["triton_row_tile", "triton_hoist_reduce"];

/// The causes the facts show, most telling first: the profile's when there is one, else
/// the static analysis's.
pub fn diagnose(f: &Facts) -> Vec<Cause> {
    match &f.profile {
        Some(p) => {
            let mut out = Vec::new();
            let sectors = [
                ("loads", p.ld_sectors_per_request),
                ("stores", p.st_sectors_per_request),
            ];
            if let Some((what, s)) = sectors
                .iter()
                .filter_map(|(w, s)| Some((*w, (*s)?)))
                .filter(|(_, s)| *s > UNCOALESCED_SECTORS)
                .max_by(|a, b| a.1.total_cmp(&b.1))
            {
                out.push(Cause {
                    why: format!(
                        "the profile: {what} are not coalesced ({s:.1} sectors per request)"
                    ),
                    cures: COALESCE,
                });
            }
            if let Some(w) = p.waves.filter(|w| *w < 1.0) {
                out.push(Cause {
                    why: format!("the profile: the grid fills {:.0}% of one wave", w * 100.0),
                    cures: PARALLELIZE,
                });
            }
            if let Some(why) = waits_on_loads(p) {
                out.push(Cause {
                    why,
                    cures: LOADS_IN_FLIGHT,
                });
            }
            out.extend(loop_causes(f));
            out
        }
        None => {
            let mut out = Vec::new();
            if f.holds("grouped_access") == Some(true) {
                out.push(Cause {
                    why: "the analysis: each thread touches an interleaved group of 2 to 16 elements (`x[2 * i]`, `x[2 * i + 1]`), one narrow access each".into(),
                    cures: GROUPS,
                });
            }
            if f.holds("flat_index_split") == Some(true) {
                out.push(Cause {
                    why: "the analysis: every thread divides its flat index (`i / D`, `i % D`) to find its row and column, and reads a row's values once per element".into(),
                    cures: &["delinearize"],
                });
            }
            if f.holds("strided_access") == Some(true) {
                out.push(Cause {
                    why: "the analysis: neighbouring threads touch addresses a stride apart".into(),
                    cures: COALESCE,
                });
            }
            if f.holds("one_block_total") == Some(true) {
                out.push(Cause {
                    why: "the analysis: one block folds the whole range: one multiprocessor works while the others sit idle".into(),
                    cures: &["grid_total"],
                });
            }
            if let Some(why) = under_a_wave(f) {
                out.push(Cause {
                    why,
                    cures: PARALLELIZE,
                });
            }
            if f.holds("thread_walks_a_row") == Some(true) {
                out.push(Cause {
                    why: "the analysis: each thread walks a row alone".into(),
                    cures: PARALLELIZE,
                });
            }
            if f.holds("loop_steps_at_run_time") == Some(true) {
                out.push(Cause {
                    why: "the analysis: a loop that reads memory steps by a run-time value, so the compiler does not unroll it and each thread waits on one load at a time".into(),
                    cures: LOADS_IN_FLIGHT,
                });
            }
            if f.holds("loop_steps_over_lanes") == Some(true) {
                out.push(Cause {
                    why: "the analysis: a loop strides through memory by all its lanes, each lane reading 4 bytes per access where 16 would do, and a later loop over the same range reads the same elements again".into(),
                    cures: LANE_LOOPS,
                });
            }

            out.extend(loop_causes(f));
            out
        }
    }
}

/// The profile: most stalls wait on global loads while DRAM is far from busy, so each
/// warp has too few loads in flight.
fn waits_on_loads(p: &crate::profile::Profile) -> Option<String> {
    let share = p
        .stalls
        .iter()
        .find(|(reason, _)| reason == "long scoreboard")
        .map(|s| s.1)?;
    let dram = p.dram_pct?;
    (share > LOAD_WAIT_SHARE && dram < DRAM_BUSY_PCT).then(|| {
        format!(
            "the profile: {:.0}% of stalls wait on global loads at {dram:.0}% of DRAM peak (few loads in flight)",
            share * 100.0
        )
    })
}

/// What the Triton analysis shows whatever the profile says: passes that re-read what an
/// earlier pass reduced, programs that walk an axis one step at a time, loops that
/// reduce across the lanes on every iteration, and many programs that each load little.
fn loop_causes(f: &Facts) -> Vec<Cause> {
    let mut out = Vec::new();
    if f.holds("narrow_programs") == Some(true) {
        out.push(Cause {
            why: "the analysis: each of many programs loads a short tile (under 4 elements a thread), so little is in flight per multiprocessor".into(),
            cures: PACK_PROGRAMS,
        });
    }
    if f.holds("multi_pass_loops") == Some(true) {
        out.push(Cause {
            why: "the analysis: a later loop reads the data again for an earlier loop's maximum or sum".into(),
            cures: ONE_PASS,
        });
    }
    if f.holds("sequential_axis_loop") == Some(true) {
        out.push(Cause {
            why: "the analysis: each program walks an axis one step at a time".into(),
            cures: SPLIT_LOOP,
        });
    }
    if f.holds("reduce_every_step") == Some(true) {
        out.push(Cause {
            why: "the analysis: a loop reduces its tile across the lanes on every iteration".into(),
            cures: REDUCE_ONCE,
        });
    }
    out
}

/// Without a profile: a launch of fewer blocks than the device has SMs leaves most of
/// it idle, whatever each block does.
fn under_a_wave(f: &Facts) -> Option<String> {
    let blocks = f.grid_blocks?;
    let sms = u64::from(f.device.as_ref()?.sms);
    (blocks < sms).then(|| {
        format!("the analysis: the launch has {blocks} blocks for {sms} multiprocessors (under one wave)")
    })
}

/// Where step `id` stands among the cures (0 first), and the cause that names it; None
/// when no cause names it.
pub fn cure_rank<'c>(causes: &'c [Cause], id: &str) -> Option<(usize, &'c Cause)> {
    let mut rank = 0;
    for c in causes {
        for cure in c.cures {
            if *cure == id {
                return Some((rank, c));
            }
            rank += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    fn profiled(p: Profile) -> Facts {
        let mut f = Facts::default();
        f.set_profile(p);
        f
    }

    #[test]
    fn the_profile_names_uncoalesced_accesses_and_a_small_grid() {
        let f = profiled(Profile {
            ld_sectors_per_request: Some(8.5),
            st_sectors_per_request: Some(16.0),
            waves: Some(0.02),
            ..Profile::default()
        });
        let causes = diagnose(&f);
        let whys: Vec<&str> = causes.iter().map(|c| c.why.as_str()).collect();
        assert_eq!(
            whys,
            [
                "the profile: stores are not coalesced (16.0 sectors per request)",
                "the profile: the grid fills 2% of one wave"
            ]
        );
        assert_eq!(cure_rank(&causes, "remap_lanes").map(|r| r.0), Some(0));
        assert_eq!(cure_rank(&causes, "split_loop").map(|r| r.0), Some(4));
        assert_eq!(cure_rank(&causes, "cooperative_rows").map(|r| r.0), Some(5));
        assert_eq!(
            cure_rank(&causes, "triton_split_loop").map(|r| r.0),
            Some(7)
        );
        assert_eq!(cure_rank(&causes, "vectorize"), None);
    }

    #[test]
    fn loads_waited_on_one_at_a_time_name_the_cures_that_put_more_in_flight() {
        let waiting = |share: f64, dram: f64| {
            profiled(Profile {
                stalls: vec![
                    ("long scoreboard".into(), share),
                    ("wait".into(), 1.0 - share),
                ],
                dram_pct: Some(dram),
                ..Profile::default()
            })
        };
        let causes = diagnose(&waiting(0.8, 40.0));
        assert_eq!(
            causes[0].why,
            "the profile: 80% of stalls wait on global loads at 40% of DRAM peak (few loads in flight)"
        );
        // Vector accesses first (one 16-byte load where four were waited on), then more
        // iterations per trip.
        assert_eq!(cure_rank(&causes, "vector_loops").map(|r| r.0), Some(0));
        assert_eq!(cure_rank(&causes, "interleave").map(|r| r.0), Some(1));
        // DRAM already busy, or stalls mostly elsewhere: nothing to add in flight.
        assert_eq!(diagnose(&waiting(0.8, 85.0)), Vec::new());
        assert_eq!(diagnose(&waiting(0.3, 40.0)), Vec::new());
        // Without a profile, a loop stepped by a run-time value names the same cures.
        let src = "// @bench n = 1 << 20\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = 64; block = 256\n__global__ void k(const float* x, float* y, int n) {\n    float s = 0.0f;\n    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];\n    y[threadIdx.x] = s;\n}\n";
        let doc = crate::document::Document::new(crate::syntax::Lang::Cuda, 0, src);
        let tree = doc.tree().expect("parses");
        let model = crate::syntax::analyze(crate::syntax::Lang::Cuda, src, tree);
        let f = crate::optimize::facts::static_facts(
            crate::syntax::Lang::Cuda,
            src,
            tree,
            &model,
            &model.kernels[0],
        );
        let causes = diagnose(&f);
        assert_eq!(
            cure_rank(&causes, "interleave").map(|r| r.0),
            Some(1),
            "{causes:?}"
        );
        // A constant step is the compiler's to unroll.
        let fixed = src.replace("i += blockDim.x", "i += 256");
        let doc = crate::document::Document::new(crate::syntax::Lang::Cuda, 0, &fixed);
        let tree = doc.tree().expect("parses");
        let model = crate::syntax::analyze(crate::syntax::Lang::Cuda, &fixed, tree);
        let f = crate::optimize::facts::static_facts(
            crate::syntax::Lang::Cuda,
            &fixed,
            tree,
            &model,
            &model.kernels[0],
        );
        assert_eq!(cure_rank(&diagnose(&f), "interleave"), None);
    }

    #[test]
    fn a_healthy_profile_names_nothing_and_overrides_the_static_guess() {
        let mut f = profiled(Profile {
            ld_sectors_per_request: Some(4.0),
            waves: Some(12.0),
            ..Profile::default()
        });
        f.accesses.push(crate::optimize::facts::Access {
            buffer: "x".into(),
            index: "i * n".into(),
            kind: crate::optimize::facts::AccessKind::Load,
            stride: crate::optimize::facts::Stride::Symbolic,
            stride_y: crate::optimize::facts::Stride::Unknown,
            in_loop: false,
            line: 1,
            via: None,
            axes: 0,
            span: None,
            hinted: false,
        });
        assert_eq!(diagnose(&f), Vec::new());
        // Without the profile, the analysis names the strided load.
        f.profile = None;
        let causes = diagnose(&f);
        assert_eq!(causes.len(), 1);
        assert_eq!(cure_rank(&causes, "remap_lanes").map(|r| r.0), Some(0));
    }

    #[test]
    fn without_a_profile_a_launch_under_one_wave_names_the_parallelism_cures() {
        let mut f = Facts::default();
        f.set_launch(&crate::spec::Launch::Cuda {
            grid: [4, 1, 1],
            block: [256, 1, 1],
            smem: 0,
        });
        assert_eq!(diagnose(&f), Vec::new(), "no device: no judgement");
        f.set_device(crate::optimize::facts::DeviceFacts {
            name: "H100".into(),
            sms: 132,
            smem_per_block: 0,
            l2_bytes: 0,
            copy_gbps: None,
            fma_tflops: None,
        });
        let causes = diagnose(&f);
        assert_eq!(
            causes[0].why,
            "the analysis: the launch has 4 blocks for 132 multiprocessors (under one wave)"
        );
        assert_eq!(cure_rank(&causes, "split_loop").map(|r| r.0), Some(0));
        assert_eq!(cure_rank(&causes, "cooperative_rows").map(|r| r.0), Some(1));
        // A Triton grid of 16 x 16 programs fills it.
        f.set_launch(&crate::spec::Launch::Triton {
            grid: vec![16, 16],
            num_warps: None,
            num_stages: None,
        });
        assert_eq!(diagnose(&f), Vec::new());
    }

    /// The static facts of the first kernel of Triton source `src`.
    fn triton_facts(src: &str) -> Facts {
        let doc = crate::document::Document::new(crate::syntax::Lang::Triton, 0, src);
        let tree = doc.tree().expect("parses");
        let model = crate::syntax::analyze(crate::syntax::Lang::Triton, src, tree);
        crate::optimize::facts::static_facts(
            crate::syntax::Lang::Triton,
            src,
            tree,
            &model,
            &model.kernels[0],
        )
    }

    #[test]
    fn triton_passes_and_one_step_loops_name_their_cures_with_or_without_a_profile() {
        let facts = triton_facts;
        let passes = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, y, n, B: tl.constexpr):\n    m = -float('inf')\n    for o in range(0, n, B):\n        c = o + tl.arange(0, B)\n        m = tl.maximum(m, tl.max(tl.load(x + c, mask=c < n), 0))\n    s = 0.0\n    for o in range(0, n, B):\n        c = o + tl.arange(0, B)\n        s += tl.sum(tl.exp(tl.load(x + c, mask=c < n) - m), 0)\n    tl.store(y, s)\n";
        let causes = diagnose(&facts(passes));
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert_eq!(cure_rank(&causes, "triton_online").map(|r| r.0), Some(0));
        assert_eq!(cure_rank(&causes, "triton_row_tile").map(|r| r.0), Some(1));
        // Both passes also reduce every step: moving the reductions out comes after
        // joining the passes.
        assert_eq!(
            cure_rank(&causes, "triton_hoist_reduce").map(|r| r.0),
            Some(3)
        );
        let cols = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, y, M, N, B: tl.constexpr):\n    c = tl.program_id(0) * B + tl.arange(0, B)\n    acc = tl.zeros([B], dtype=tl.float32)\n    for r in range(M):\n        acc += tl.load(x + r * N + c, mask=c < N)\n    tl.store(y + c, acc, mask=c < N)\n";
        let mut f = facts(cols);
        f.set_profile(Profile {
            waves: Some(0.1),
            ..Profile::default()
        });
        let causes = diagnose(&f);
        let whys: Vec<&str> = causes.iter().map(|c| c.why.as_str()).collect();
        assert_eq!(
            whys,
            [
                "the profile: the grid fills 10% of one wave",
                "the analysis: each program walks an axis one step at a time"
            ]
        );
        assert_eq!(
            cure_rank(&causes, "triton_split_loop").map(|r| r.0),
            Some(3)
        );
    }

    #[test]
    fn a_loop_reducing_2d_blocks_every_step_names_the_one_tile_then_the_hoist() {
        let src = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, y, M, N, BM: tl.constexpr, BN: tl.constexpr):\n    c = tl.program_id(0) * BN + tl.arange(0, BN)\n    acc = tl.zeros([BN], dtype=tl.float32)\n    for m0 in range(0, M, BM):\n        r = m0 + tl.arange(0, BM)\n        t = tl.load(x + r[:, None] * N + c[None, :], mask=r[:, None] < M)\n        acc += tl.sum(t * t, axis=0)\n    tl.store(y + c, acc)\n";
        let causes = diagnose(&triton_facts(src));
        let whys: Vec<&str> = causes.iter().map(|c| c.why.as_str()).collect();
        assert_eq!(
            whys,
            ["the analysis: a loop reduces its tile across the lanes on every iteration"]
        );
        assert_eq!(
            cure_rank(&causes, "triton_hoist_reduce").map(|r| r.0),
            Some(1)
        );
    }

    #[test]
    fn many_short_programs_name_the_packing_and_a_long_row_does_not() {
        let src = |rows: &str, d: &str| {
            format!("import triton\nimport triton.language as tl\n# @bench R = {rows}; D = {d}\n# @bench x: in f32[R, D]; y: out f32[R]\n# @bench grid = R; BLOCK = next_pow2(D)\n@triton.jit\ndef k(x, y, R, D, BLOCK: tl.constexpr):\n    r = tl.program_id(0)\n    c = tl.arange(0, BLOCK)\n    v = tl.load(x + r * D + c, mask=c < D, other=0.0)\n    tl.store(y + r, tl.sum(v, axis=0))\n")
        };
        let causes = diagnose(&triton_facts(&src("65536", "64")));
        assert_eq!(
            cure_rank(&causes, "triton_program_rows").map(|r| r.0),
            Some(0),
            "{causes:?}"
        );
        // A row of 4096 floats gives each of 128 threads 32: nothing to pack.
        assert_eq!(diagnose(&triton_facts(&src("65536", "4096"))), Vec::new());
        // Few programs: packing them would leave multiprocessors idle.
        assert_eq!(diagnose(&triton_facts(&src("512", "64"))), Vec::new());
    }
}
