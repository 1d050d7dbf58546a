//! `sanitize`: re-run a CUDA verify request once under NVIDIA compute-sanitizer, first
//! with memcheck (out-of-bounds and misaligned accesses, including reads the guard
//! elements cannot see), then racecheck (shared-memory hazards), in a child worker, on
//! the spec's smallest case with one trial. The child allocates every buffer at its
//! exact size, with no guards (`KERNEL_LSP_EXACT_BUFFERS=1`), so that memcheck sees any
//! access past a buffer's end. The sanitizer writes its report to a log file,
//! never into the protocol stream. Runs only in the worker; the server never starts it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::protocol::{Op, Request, Version};

/// What the sanitizer runs found.
#[derive(Debug, Clone, PartialEq)]
pub struct SanitizeOutcome {
    /// One line per tool plus the first reported problems, for the author.
    pub summary: String,
    /// Errors (memcheck) plus hazards reported as errors (racecheck).
    pub errors: usize,
}

/// `compute-sanitizer` from PATH, `CUDA_HOME`/`CUDA_PATH`, or `/usr/local/cuda`.
pub fn find_sanitizer() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            dirs.push(PathBuf::from(&v).join("bin"));
            dirs.push(PathBuf::from(&v).join("compute-sanitizer"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.push(PathBuf::from("/usr/local/cuda/compute-sanitizer"));
    dirs.into_iter()
        .map(|d| d.join("compute-sanitizer"))
        .find(|p| p.is_file())
}

/// The candidate and reference reduced to the smallest case (by bytes moved) with one
/// trial: the sanitizer slows kernels down by one or two orders of magnitude.
pub fn reduced(candidate: &Version, reference: &Version) -> (Version, Version) {
    let pick = candidate
        .plan
        .cases
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.bytes.total_cmp(&b.1.bytes))
        .map_or(0, |(i, _)| i);
    let shrink = |v: &Version| {
        let mut v = v.clone();
        if let Some(case) = v.plan.cases.get(pick).cloned() {
            v.plan.cases = vec![case];
        }
        v.plan.trials = 1;
        v
    };
    (shrink(candidate), shrink(reference))
}

/// Run memcheck then racecheck on a child `worker` (this executable) with one verify
/// request. `limit` bounds each tool's run.
pub fn run(
    sanitizer: &Path,
    candidate: &Version,
    reference: &Version,
    seed: u64,
    limit: Duration,
) -> SanitizeOutcome {
    let (cand, refv) = reduced(candidate, reference);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            return SanitizeOutcome {
                summary: format!(
                    "compute-sanitizer not run: cannot find this worker's executable: {e}"
                ),
                errors: 0,
            }
        }
    };
    let request = Request {
        id: 1,
        time_limit_ms: None,
        op: Op::Verify {
            candidate: Box::new(cand),
            reference: Box::new(refv),
            seed,
            sanitize: false,
            cases: None,
            tally: false,
        },
    };
    let line = match serde_json::to_string(&request) {
        Ok(l) => l,
        Err(e) => {
            return SanitizeOutcome {
                summary: format!("compute-sanitizer not run: {e}"),
                errors: 0,
            }
        }
    };
    let mut parts = Vec::new();
    let mut errors = 0;
    for tool in ["memcheck", "racecheck"] {
        let (text, n) = run_tool(sanitizer, &exe, tool, &line, limit);
        errors += n;
        parts.push(text);
    }
    SanitizeOutcome {
        summary: parts.join("\n"),
        errors,
    }
}

fn run_tool(
    sanitizer: &Path,
    exe: &Path,
    tool: &str,
    request: &str,
    limit: Duration,
) -> (String, usize) {
    let log = std::env::temp_dir().join(format!(
        "kernel-lsp-sanitize-{}-{tool}.log",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&log);
    let mut cmd = Command::new(sanitizer);
    cmd.arg("--tool").arg(tool);
    if tool == "memcheck" {
        // Buffers are allocated at their exact size, but the driver may place the next
        // allocation right after one, where a read past the end would land in valid
        // memory; padding after every allocation makes such an access visible.
        cmd.args(["--padding", "4096"]);
    }
    let child = cmd
        .arg("--log-file")
        .arg(&log)
        .args(["--print-limit", "10", "--error-exitcode", "0"])
        .arg(exe)
        .arg("worker")
        // Every buffer at its exact size: a guard region would sit inside the allocation,
        // where memcheck cannot see an access past the buffer's end.
        .env("KERNEL_LSP_EXACT_BUFFERS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return (
                format!("{tool}: could not start {}: {e}", sanitizer.display()),
                0,
            )
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{request}");
        let _ = writeln!(stdin, "{{\"id\":2,\"op\":\"shutdown\"}}");
    }
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_file(&log);
                return (
                    format!(
                        "{tool}: stopped after {} s without finishing",
                        limit.as_secs()
                    ),
                    0,
                );
            }
        }
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    summarize(tool, &text)
}

/// `(line for the author, error count)` from a compute-sanitizer log.
pub fn summarize(tool: &str, log: &str) -> (String, usize) {
    // The number right after `marker` on the line that holds `summary`.
    let count = |summary: &str, marker: &str| {
        log.lines().filter(|l| l.contains(summary)).find_map(|l| {
            let rest = l.split(marker).nth(1)?;
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<usize>()
                .ok()
        })
    };
    // memcheck: "ERROR SUMMARY: 3 errors"; racecheck: "RACECHECK SUMMARY: 1 hazard
    // displayed (1 error, 0 warnings)" (hazards that are only warnings do not fail).
    let n = if tool == "racecheck" {
        count("RACECHECK SUMMARY", "(").or_else(|| count("ERROR SUMMARY:", "ERROR SUMMARY:"))
    } else {
        count("ERROR SUMMARY:", "ERROR SUMMARY:")
    };
    let Some(n) = n else {
        let tail: Vec<&str> = log.lines().rev().take(3).collect();
        return (
            format!(
                "{tool}: no summary in the sanitizer's log ({})",
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ),
            0,
        );
    };
    if n == 0 {
        return (format!("{tool}: 0 errors"), 0);
    }
    let first: Vec<String> = log
        .lines()
        .map(|l| l.trim_start_matches('=').trim())
        .filter(|l| !l.is_empty() && !l.starts_with("COMPUTE-SANITIZER") && !l.contains("SUMMARY"))
        .take(6)
        .map(str::to_string)
        .collect();
    (format!("{tool}: {n} error(s): {}", first.join(" | ")), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_real_log_shapes() {
        let memcheck = "========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 4 bytes\n=========     at saxpy+0x90\n=========     by thread (255,0,0) in block (0,0,0)\n=========     Address 0x7f00 is out of bounds\n========= ERROR SUMMARY: 1 error\n";
        let (line, n) = summarize("memcheck", memcheck);
        assert_eq!(n, 1);
        assert_eq!(line, "memcheck: 1 error(s): Invalid __global__ read of size 4 bytes | at saxpy+0x90 | by thread (255,0,0) in block (0,0,0) | Address 0x7f00 is out of bounds");
        let clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n";
        assert_eq!(
            summarize("memcheck", clean),
            ("memcheck: 0 errors".to_string(), 0)
        );
        let race = "========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at k+0x1b0 (in thread (0,0,0))\n=========     and Read access at k+0x210 [4 hazards]\n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n";
        let (line, n) = summarize("racecheck", race);
        assert_eq!(n, 1, "{line}");
        assert!(
            line.starts_with("racecheck: 1 error(s): Error: Race reported"),
            "{line}"
        );
        let warn_only = "========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n";
        assert_eq!(summarize("racecheck", warn_only).1, 0);
    }
}
