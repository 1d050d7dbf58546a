//! Nsight Compute profiles of one kernel version (issue #14): the metric list kernel-lsp
//! asks `ncu` for, the parser of its raw CSV page (`ncu --csv --page raw --metrics ...`),
//! and a one-line diagnosis ("memory-bound at 79% of DRAM peak; 91% of stalls are long
//! scoreboard: waiting on global loads"). Pure: text in, numbers and sentences out. Running
//! `ncu` is `cli::profile`'s job; the diagnosis feeds the strategist's prompt and the
//! facts of the embedded policy (`optimize::facts`).

use serde::Serialize;

/// The metrics a profile reads, one per line (shared with `tests/gpu/ncu_record.sh`,
/// which recorded the parser's fixtures on an H100).
pub const METRICS_FILE: &str = include_str!("../../tests/gpu/ncu_metrics.txt");

/// The metric names, for `--metrics`.
pub fn metrics() -> Vec<&'static str> {
    METRICS_FILE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// One profiled launch.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Profile {
    pub kernel: String,
    pub block: String,
    pub grid: String,
    pub duration_us: Option<f64>,
    /// Throughput as % of peak.
    pub dram_pct: Option<f64>,
    pub l2_pct: Option<f64>,
    pub sm_pct: Option<f64>,
    pub l1_hit_pct: Option<f64>,
    pub l2_hit_pct: Option<f64>,
    pub achieved_occupancy_pct: Option<f64>,
    pub theoretical_occupancy_pct: Option<f64>,
    /// What caps the blocks per SM: `registers`, `shared memory`, `warps` or `blocks`
    /// (the smallest limit; ties name every one).
    pub occupancy_limiter: Option<String>,
    pub registers_per_thread: Option<f64>,
    pub smem_per_block: Option<f64>,
    /// Local-memory sectors loaded and stored: register spills (and local arrays).
    pub local_sectors: Option<f64>,
    /// Global sectors per request (4 is fully coalesced for 4-byte elements, 32 the worst).
    pub ld_sectors_per_request: Option<f64>,
    pub st_sectors_per_request: Option<f64>,
    pub shared_bank_conflicts: Option<f64>,
    pub fma_pipe_pct: Option<f64>,
    pub lsu_pipe_pct: Option<f64>,
    pub tensor_pipe_pct: Option<f64>,
    /// Warp stall reasons with their share of all stalls (0–1), largest first.
    pub stalls: Vec<(String, f64)>,
    /// Grid size in threads (picks the launch of the largest case).
    pub threads: Option<f64>,
    /// Waves of blocks per SM.
    pub waves: Option<f64>,
}

/// Why the output holds no profile: `ncu`'s own errors, as one line for the author.
pub fn ncu_error(output: &str) -> String {
    let errors: Vec<&str> = output
        .lines()
        .filter(|l| l.contains("==ERROR==") || l.contains("ERR_NVGPUCTRPERM"))
        .map(|l| l.trim().trim_start_matches("==ERROR==").trim())
        .collect();
    if output.contains("ERR_NVGPUCTRPERM") {
        return "ncu may not read the GPU's performance counters on this machine (ERR_NVGPUCTRPERM): run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0".into();
    }
    if errors.is_empty() {
        "ncu profiled no launch of the kernel (was it launched? is the name right?)".into()
    } else {
        format!("ncu failed: {}", errors.join("; "))
    }
}

/// Split one CSV line (fields in double quotes, `""` inside a field is a quote).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// `1,048,576` → 1048576; `n/a` and text → None.
fn number(s: &str) -> Option<f64> {
    let t: String = s.chars().filter(|c| *c != ',').collect();
    t.trim().parse().ok()
}

/// Every profiled launch of `ncu --csv --page raw` output (lines before the header, such
/// as `==PROF==` notes and the profiled program's own output, are skipped). `Err` is
/// [`ncu_error`]'s message when there is no header or no launch.
pub fn parse_raw_csv(output: &str) -> Result<Vec<Profile>, String> {
    let mut lines = output.lines().skip_while(|l| !l.starts_with("\"ID\","));
    let header = lines.next().ok_or_else(|| ncu_error(output))?;
    let names = fields(header);
    let _units = lines.next();
    let mut out = Vec::new();
    for line in lines.filter(|l| l.starts_with('"')) {
        let vals = fields(line);
        if vals.len() != names.len() {
            continue;
        }
        let get = |name: &str| -> Option<&str> {
            names
                .iter()
                .position(|n| n == name)
                .map(|i| vals[i].as_str())
        };
        let num = |name: &str| get(name).and_then(number);
        let requests = |kind: &str| {
            let sectors = num(&format!(
                "l1tex__t_sectors_pipe_lsu_mem_global_op_{kind}.sum"
            ))?;
            let reqs = num(&format!(
                "l1tex__t_requests_pipe_lsu_mem_global_op_{kind}.sum"
            ))?;
            (reqs > 0.0).then(|| sectors / reqs)
        };
        let sum2 = |a: &str, b: &str| match (num(a), num(b)) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        let limits: Vec<(&str, f64)> = [
            ("registers", "launch__occupancy_limit_registers"),
            ("shared memory", "launch__occupancy_limit_shared_mem"),
            ("warps", "launch__occupancy_limit_warps"),
            ("blocks", "launch__occupancy_limit_blocks"),
        ]
        .iter()
        .filter_map(|(what, m)| num(m).map(|v| (*what, v)))
        .collect();
        let min = limits.iter().map(|l| l.1).fold(f64::INFINITY, f64::min);
        let limiter = (!limits.is_empty()).then(|| {
            limits
                .iter()
                .filter(|l| l.1 == min)
                .map(|l| l.0)
                .collect::<Vec<_>>()
                .join(", ")
        });
        let prefix = "smsp__average_warps_issue_stalled_";
        let mut stalls: Vec<(String, f64)> = names
            .iter()
            .zip(&vals)
            .filter_map(|(n, v)| {
                let reason = n
                    .strip_prefix(prefix)?
                    .strip_suffix("_per_issue_active.ratio")?;
                // `selected` is the issuing warp itself, not a stall.
                (reason != "selected").then(|| (reason.replace('_', " "), number(v).unwrap_or(0.0)))
            })
            .collect();
        let total: f64 = stalls.iter().map(|s| s.1).sum();
        if total > 0.0 {
            for s in &mut stalls {
                s.1 /= total;
            }
        }
        stalls.retain(|s| s.1 > 0.0);
        stalls.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.push(Profile {
            kernel: get("Kernel Name").unwrap_or_default().to_string(),
            block: get("Block Size").unwrap_or_default().to_string(),
            grid: get("Grid Size").unwrap_or_default().to_string(),
            duration_us: num("gpu__time_duration.sum").map(|ns| ns / 1000.0),
            dram_pct: num("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            l2_pct: num("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
            sm_pct: num("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            l1_hit_pct: num("l1tex__t_sector_hit_rate.pct"),
            l2_hit_pct: num("lts__t_sector_hit_rate.pct"),
            achieved_occupancy_pct: num("sm__warps_active.avg.pct_of_peak_sustained_active"),
            theoretical_occupancy_pct: num("sm__maximum_warps_per_active_cycle_pct"),
            occupancy_limiter: limiter,
            registers_per_thread: num("launch__registers_per_thread"),
            smem_per_block: sum2(
                "launch__shared_mem_per_block_static",
                "launch__shared_mem_per_block_dynamic",
            ),
            local_sectors: sum2(
                "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
                "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
            ),
            ld_sectors_per_request: requests("ld"),
            st_sectors_per_request: requests("st"),
            shared_bank_conflicts: sum2(
                "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
            ),
            fma_pipe_pct: num("sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"),
            lsu_pipe_pct: num("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
            tensor_pipe_pct: num(
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            ),
            stalls,
            threads: num("launch__thread_count"),
            waves: num("launch__waves_per_multiprocessor"),
        });
    }
    if out.is_empty() {
        return Err(ncu_error(output));
    }
    Ok(out)
}

/// What a stall reason means, in the author's terms.
fn stall_meaning(reason: &str) -> &'static str {
    match reason {
        "long scoreboard" => "waiting on global or local memory loads",
        "short scoreboard" => "waiting on shared memory or special math",
        "barrier" => "waiting at __syncthreads",
        "mio throttle" => "the shared-memory / special-function queue is full",
        "lg throttle" => "the global-memory instruction queue is full (many small loads)",
        "math pipe throttle" => "a math pipe is saturated",
        "wait" => "fixed-latency dependencies",
        "not selected" => "eligible but another warp issued (plenty of parallelism)",
        "no instruction" => "instruction cache misses or branches",
        "membar" => "memory fences",
        "drain" => "draining stores at exit",
        "dispatch stall" => "dispatch conflicts",
        "branch resolving" => "branch targets being computed",
        "imc miss" => "constant cache misses",
        "tex throttle" => "the texture queue is full",
        "sleeping" => "sleeping warps",
        _ => "",
    }
}

impl Profile {
    /// The bound in a few words, for an inlay hint: `DRAM 79% · occ 76% (warps)`.
    pub fn short(&self) -> String {
        let mut parts = Vec::new();
        if let Some(d) = self.dram_pct {
            parts.push(format!("DRAM {d:.0}%"));
        }
        if let Some(s) = self.sm_pct {
            parts.push(format!("SM {s:.0}%"));
        }
        if let Some(o) = self.achieved_occupancy_pct {
            let lim = self
                .occupancy_limiter
                .as_deref()
                .map_or(String::new(), |l| format!(" ({l})"));
            parts.push(format!("occ {o:.0}%{lim}"));
        }
        parts.join(" · ")
    }

    /// One line: what bounds the kernel and the main reason, with the numbers.
    pub fn diagnosis(&self) -> String {
        let dram = self.dram_pct.unwrap_or(0.0);
        let l2 = self.l2_pct.unwrap_or(0.0);
        let sm = self.sm_pct.unwrap_or(0.0);
        let occ = self.achieved_occupancy_pct.unwrap_or(0.0);
        let mut out = if dram >= 60.0 || l2 >= 60.0 {
            if dram >= l2 {
                format!("memory-bound at {dram:.0}% of DRAM peak")
            } else {
                format!("L2-bound at {l2:.0}% of L2 peak (DRAM {dram:.0}%)")
            }
        } else if sm >= 60.0 {
            format!("compute-bound at {sm:.0}% of SM peak")
        } else if self.waves.is_some_and(|w| w < 1.0) {
            format!(
                "latency-bound: the grid fills {:.0}% of one wave of the SMs ({occ:.0}% of warps active); more parallelism is the first step",
                self.waves.unwrap_or(0.0) * 100.0
            )
        } else {
            format!(
                "latency-bound at {dram:.0}% of DRAM and {sm:.0}% of SM peak, {occ:.0}% of warps active"
            )
        };
        if let Some((reason, share)) = self.stalls.first() {
            let meaning = stall_meaning(reason);
            out.push_str(&format!(
                "; {:.0}% of stalls are {reason}{}",
                share * 100.0,
                if meaning.is_empty() {
                    String::new()
                } else {
                    format!(": {meaning}")
                }
            ));
        }
        if let Some(s) = self.ld_sectors_per_request.filter(|s| *s > 8.0) {
            out.push_str(&format!(
                "; loads are not coalesced ({s:.1} sectors per request, 4 is ideal for 4-byte elements)"
            ));
        }
        if self.local_sectors.is_some_and(|s| s > 0.0) {
            out.push_str("; registers spill to local memory");
        }
        if let Some(b) = self.shared_bank_conflicts.filter(|b| *b > 0.0) {
            out.push_str(&format!("; {b:.0} shared-memory bank conflicts"));
        }
        if let (Some(t), Some(a)) = (self.theoretical_occupancy_pct, self.achieved_occupancy_pct) {
            if t < 50.0 {
                out.push_str(&format!(
                    "; occupancy is capped at {t:.0}% by {} ({a:.0}% achieved)",
                    self.occupancy_limiter.as_deref().unwrap_or("the launch")
                ));
            }
        }
        out
    }

    /// The metrics as `name: value` lines, for tables and the strategist's prompt.
    pub fn table(&self) -> Vec<(String, String)> {
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}%"));
        let num =
            |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.0}{unit}"));
        let mut rows = vec![
            (
                "kernel".into(),
                format!("{} grid {} block {}", self.kernel, self.grid, self.block),
            ),
            (
                "duration".into(),
                self.duration_us
                    .map_or("-".into(), |d| format!("{d:.1} µs")),
            ),
            ("DRAM throughput".into(), pct(self.dram_pct)),
            ("L2 throughput".into(), pct(self.l2_pct)),
            ("SM throughput".into(), pct(self.sm_pct)),
            (
                "L1 / L2 hit rate".into(),
                format!("{} / {}", pct(self.l1_hit_pct), pct(self.l2_hit_pct)),
            ),
            (
                "occupancy achieved / theoretical".into(),
                format!(
                    "{} / {}{}",
                    pct(self.achieved_occupancy_pct),
                    pct(self.theoretical_occupancy_pct),
                    self.occupancy_limiter
                        .as_deref()
                        .map_or(String::new(), |l| format!(" (limit: {l})"))
                ),
            ),
            (
                "registers per thread".into(),
                num(self.registers_per_thread, ""),
            ),
            (
                "shared memory per block".into(),
                num(self.smem_per_block, " B"),
            ),
            (
                "spilled (local) sectors".into(),
                num(self.local_sectors, ""),
            ),
            (
                "global sectors per request (ld / st)".into(),
                format!(
                    "{} / {}",
                    self.ld_sectors_per_request
                        .map_or("-".into(), |v| format!("{v:.1}")),
                    self.st_sectors_per_request
                        .map_or("-".into(), |v| format!("{v:.1}"))
                ),
            ),
            (
                "shared bank conflicts".into(),
                num(self.shared_bank_conflicts, ""),
            ),
            (
                "pipes FMA / LSU / tensor".into(),
                format!(
                    "{} / {} / {}",
                    pct(self.fma_pipe_pct),
                    pct(self.lsu_pipe_pct),
                    pct(self.tensor_pipe_pct)
                ),
            ),
        ];
        let top: Vec<String> = self
            .stalls
            .iter()
            .take(3)
            .map(|(r, s)| format!("{r} {:.0}%", s * 100.0))
            .collect();
        rows.push(("top stalls".into(), top.join(", ")));
        rows
    }
}

/// The launch to report: the one with the most threads (the largest case), the last of
/// equals.
pub fn pick(profiles: &[Profile]) -> Option<&Profile> {
    profiles.iter().rev().max_by(|a, b| {
        a.threads
            .unwrap_or(0.0)
            .total_cmp(&b.threads.unwrap_or(0.0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAXPY: &str = include_str!("../../tests/fixtures/ncu/saxpy.csv");
    const SOFTMAX: &str = include_str!("../../tests/fixtures/ncu/softmax_rows.csv");
    const BAD: &str = include_str!("../../tests/fixtures/ncu/bad-metric.csv");
    const TRITON: &str = include_str!("../../tests/fixtures/ncu/triton_add.csv");

    #[test]
    fn a_recorded_h100_profile_of_saxpy_parses() {
        let p = parse_raw_csv(SAXPY).unwrap();
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!(
            (p.kernel.as_str(), p.grid.as_str(), p.block.as_str()),
            ("saxpy", "(65536, 1, 1)", "(256, 1, 1)")
        );
        assert_eq!(p.duration_us, Some(70.336));
        assert_eq!(p.dram_pct, Some(78.76));
        assert_eq!(p.achieved_occupancy_pct, Some(76.22));
        assert_eq!(p.theoretical_occupancy_pct, Some(100.0));
        assert_eq!(p.occupancy_limiter.as_deref(), Some("warps"));
        assert_eq!(p.registers_per_thread, Some(16.0));
        assert_eq!(
            p.ld_sectors_per_request,
            Some(4.0),
            "float loads, fully coalesced"
        );
        assert_eq!(p.local_sectors, Some(0.0));
        assert_eq!(p.stalls[0].0, "long scoreboard");
        assert!((p.stalls[0].1 - 0.886).abs() < 0.01, "{:?}", p.stalls);
        let shares: f64 = p.stalls.iter().map(|s| s.1).sum();
        assert!((shares - 1.0).abs() < 1e-9);
        assert_eq!(
            p.diagnosis(),
            "memory-bound at 79% of DRAM peak; 89% of stalls are long scoreboard: waiting on global or local memory loads"
        );
        assert_eq!(p.short(), "DRAM 79% · SM 29% · occ 76% (warps)");
    }

    #[test]
    fn a_kernel_that_does_not_fill_the_gpu_is_latency_bound() {
        let p = parse_raw_csv(SOFTMAX).unwrap();
        let p = pick(&p).unwrap();
        assert_eq!(p.kernel, "softmax_rows");
        assert_eq!(p.waves, Some(0.03));
        assert_eq!(
            p.diagnosis(),
            "latency-bound: the grid fills 3% of one wave of the SMs (6% of warps active); more parallelism is the first step; 91% of stalls are long scoreboard: waiting on global or local memory loads; loads are not coalesced (32.0 sectors per request, 4 is ideal for 4-byte elements)"
        );
        let table = p.table();
        assert!(
            table
                .iter()
                .any(|(k, v)| k == "registers per thread" && v == "29"),
            "{table:?}"
        );
        assert!(
            table
                .iter()
                .any(|(k, v)| k == "top stalls" && v.starts_with("long scoreboard 91%")),
            "{table:?}"
        );
    }

    /// A Triton kernel, profiled as the CUDA kernel Triton compiled it to (recorded on
    /// the H100 with the Triton worker's python process under `--target-processes all`).
    #[test]
    fn a_recorded_triton_kernel_parses() {
        let p = parse_raw_csv(TRITON).unwrap();
        let p = pick(&p).unwrap();
        assert_eq!(p.kernel, "add_kernel");
        assert_eq!(
            (p.grid.as_str(), p.block.as_str()),
            ("(262144, 1, 1)", "(128, 1, 1)")
        );
        assert_eq!(p.dram_pct, Some(35.7));
        assert_eq!(p.registers_per_thread, Some(16.0));
        assert_eq!(p.duration_us, Some(160.256));
        assert!(
            p.diagnosis().starts_with("latency-bound at 36% of DRAM"),
            "{}",
            p.diagnosis()
        );
    }

    #[test]
    fn ncu_errors_become_one_line() {
        // A metric ncu does not know: it profiles with only the launch attributes.
        let p = parse_raw_csv(BAD).unwrap();
        assert_eq!(p[0].dram_pct, None);
        assert!(p[0].stalls.is_empty());
        assert_eq!(
            p[0].diagnosis(),
            "latency-bound at 0% of DRAM and 0% of SM peak, 0% of warps active"
        );
        // No permission to read the counters (ncu's output as printed on such machines).
        let perm = "==PROF== Connected to process 1234 (/usr/bin/kernel-lsp)\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.\n==PROF== Disconnected from process 1234\n==WARNING== No kernels were profiled.\n";
        let err = parse_raw_csv(perm).unwrap_err();
        assert!(
            err.contains("ERR_NVGPUCTRPERM")
                && err.contains("NVreg_RestrictProfilingToAdminUsers=0"),
            "{err}"
        );
        let none = "==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n";
        assert_eq!(
            parse_raw_csv(none).unwrap_err(),
            "ncu profiled no launch of the kernel (was it launched? is the name right?)"
        );
        let other = "==ERROR== Failed to find metric nope\n";
        assert_eq!(
            parse_raw_csv(other).unwrap_err(),
            "ncu failed: Failed to find metric nope"
        );
    }

    #[test]
    fn the_metric_list_is_what_the_fixtures_were_recorded_with() {
        let m = metrics();
        assert!(m.len() > 30);
        let header = SAXPY.lines().find(|l| l.starts_with("\"ID\",")).unwrap();
        for name in m {
            let base = name.split('.').next().unwrap();
            assert!(
                header.contains(base),
                "{name} is not in the recorded header"
            );
        }
    }
}
