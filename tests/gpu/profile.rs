//! Issue #14 on the GPU: `kernel-lsp profile` with Nsight Compute on bundled examples (a
//! CUDA kernel at DRAM speed, a CUDA kernel that does not fill the GPU, a Triton kernel),
//! asserting sane ranges, and `optimize --profile`, whose steps cite the profile. Prints
//! `PROFILE` lines with the profile's cost and `PROFILED_OPT` lines with the steps the
//! embedded policy needed to reach its best version with and without profiles.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::gpu_llm::{gpu_present, kernel_lsp};

fn examples() -> std::path::PathBuf {
    std::env::var("KERNEL_LSP_EXAMPLES").map_or_else(
        |_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"),
        std::path::PathBuf::from,
    )
}

fn ncu_or_skip(test: &str) -> bool {
    if kernel_lsp::toolchain::ncu::locate(None).is_some() {
        return true;
    }
    assert!(
        std::env::var("KERNEL_LSP_REQUIRE_GPU").as_deref() != Ok("1"),
        "{test}: KERNEL_LSP_REQUIRE_GPU=1 but ncu was not found"
    );
    crate::tools::skip(test, "ncu (Nsight Compute) not found");
    false
}

fn workdir(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn profile(dir: &Path, example: &str) -> Value {
    std::fs::copy(examples().join(example), dir.join(example)).unwrap();
    let t = Instant::now();
    let (p, log) = kernel_lsp(dir, &["profile", example, "--json"]);
    let secs = t.elapsed().as_secs_f64();
    {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "PROFILE {example}: {secs:.1} s; {}",
            p["diagnosis"].as_str().unwrap_or(&log)
        );
    }
    assert!(p.is_object(), "{log}");
    p
}

#[test]
fn gpu_profile_reports_sane_metrics_for_cuda_and_triton_examples() {
    let test = "gpu_profile_reports_sane_metrics_for_cuda_and_triton_examples";
    if !gpu_present(test) || !ncu_or_skip(test) {
        return;
    }
    let dir = workdir(test);
    let pct = |v: &Value| v.as_f64().filter(|x| (0.0..=100.5).contains(x));

    let saxpy = profile(&dir, "saxpy.cu");
    assert_eq!(saxpy["kernel"], "saxpy");
    assert!(pct(&saxpy["dram_pct"]).is_some_and(|d| d > 30.0), "{saxpy}");
    assert!(
        saxpy["duration_us"].as_f64().is_some_and(|d| d > 1.0),
        "{saxpy}"
    );
    assert!(
        pct(&saxpy["achieved_occupancy_pct"]).is_some_and(|o| o > 10.0),
        "{saxpy}"
    );
    assert!(
        saxpy["ld_sectors_per_request"]
            .as_f64()
            .is_some_and(|s| (3.5..=4.5).contains(&s)),
        "float loads are coalesced: {saxpy}"
    );
    // Bound by the memory system: DRAM on an H100; on an H200 (more DRAM bandwidth)
    // the profile can show L2 as the busiest unit.
    let diagnosis = saxpy["diagnosis"].as_str().unwrap();
    assert!(
        diagnosis.starts_with("memory-bound") || diagnosis.starts_with("L2-bound"),
        "{saxpy}"
    );

    let rows = profile(&dir, "softmax_rows.cu");
    assert!(
        rows["diagnosis"]
            .as_str()
            .unwrap()
            .starts_with("latency-bound"),
        "{rows}"
    );
    assert!(
        rows["ld_sectors_per_request"]
            .as_f64()
            .is_some_and(|s| s > 8.0),
        "one thread per row reads with a row's stride: {rows}"
    );

    let add = profile(&dir, "vector_add.py");
    assert_eq!(add["kernel"], "add_kernel", "{add}");
    assert!(pct(&add["dram_pct"]).is_some_and(|d| d > 10.0), "{add}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Steps of a run until its best version was made (0: nothing accepted).
fn steps_to_best(run: &Value) -> usize {
    let best = run["best_node"].as_u64().unwrap_or(0);
    run["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .find(|s| s["child"].as_u64() == Some(best) && best > 0)
                .and_then(|s| s["step"].as_u64())
                .unwrap_or(0) as usize
        })
        .unwrap_or(0)
}

#[test]
fn gpu_optimize_with_profiles_cites_them_and_reports_the_steps_it_needed() {
    let test = "gpu_optimize_with_profiles_cites_them_and_reports_the_steps_it_needed";
    if !gpu_present(test) || !ncu_or_skip(test) {
        return;
    }
    for (example, kernel) in [
        ("softmax_rows.cu", "softmax_rows"),
        ("reduce_sum.cu", "reduce_tree"),
    ] {
        let mut line = format!("PROFILED_OPT {example}:");
        for with in [false, true] {
            let dir = workdir(&format!("{test}-{with}"));
            std::fs::copy(examples().join(example), dir.join(example)).unwrap();
            let mut args = vec![
                "optimize",
                example,
                "--kernel",
                kernel,
                "--steps",
                "3",
                "--json",
                "--fresh-policy",
            ];
            if with {
                args.push("--profile");
            }
            let t = Instant::now();
            let (run, log) = kernel_lsp(&dir, &args);
            let secs = t.elapsed().as_secs_f64();
            assert!(run["steps"].is_array(), "{log}");
            // Accepted steps carry the energy per call of both versions (NVML).
            let accepted: Vec<&Value> = run["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["outcome"] == "accepted")
                .collect();
            assert!(!accepted.is_empty(), "{run}");
            for s in &accepted {
                let e = &s["energy_j"];
                assert!(
                    e[0].as_f64().is_some_and(|j| j > 0.0)
                        && e[1].as_f64().is_some_and(|j| j > 0.0),
                    "{s}"
                );
            }
            if with {
                let steps = run["steps"].as_array().unwrap();
                assert!(
                    steps.iter().any(|s| s["rationale"]
                        .as_str()
                        .is_some_and(|r| r.contains("(profile: "))),
                    "the policy's rationale cites the profile: {run}"
                );
                assert!(
                    run.get("warnings")
                        .is_none_or(|w| !w.to_string().contains("not profiled")),
                    "{run}"
                );
            }
            line.push_str(&format!(
                " {}: best {:.2}x at step {} of {} ({secs:.0} s);",
                if with { "with profiles" } else { "without" },
                run["best_speedup"].as_f64().unwrap_or(1.0),
                steps_to_best(&run),
                run["steps"].as_array().map_or(0, Vec::len)
            ));
            let _ = std::fs::remove_dir_all(&dir);
        }
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}
