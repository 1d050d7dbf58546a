//! The corpus test (issue #11): real public CUDA projects, downloaded from the package
//! registries by tests/corpus/fetch.sh (tests/setup.sh runs it), checked as a user's
//! editor would check them. For every file: the kernels found against the kernels
//! defined, and the errors shown on files nvcc compiles cleanly (the ground truth in
//! tests/corpus/nvcc-truth.txt, made with the full CUDA toolkit on the GPU machine by
//! tests/corpus/nvcc-truth.sh). Both checkers: NVRTC alone, and nvcc (the CUDA 13
//! wheels). Goal: every kernel found, 0 false errors. Asserted: 0 false errors with
//! nvcc; with NVRTC alone, and for kernels found, no more than the recorded baseline
//! (tests/corpus/baseline.txt, the known gaps listed in docs/compat.md), so a
//! regression fails and an improvement is reported until the baseline is lowered. The
//! baseline also bounds the files that get the "not checked" note instead of a device
//! check, so the share of checked files cannot fall back unnoticed.
//!
//! Issue #31 adds PyTorch extensions (causal-conv1d), a header-heavy library (gsplat)
//! and Triton projects (unsloth; a folder with `triton-files.txt` and no
//! compile_commands.json): Triton kernels are counted against a grep of `@triton.jit`
//! and `triton.jit(f)` calls, and every syntax error in a released package's Python is
//! false. Per CUDA project the table also gives the share of files that got a device
//! check rather than the "not checked" note. `KERNEL_LSP_CORPUS_NVCC=off` leaves the
//! nvcc half out (it reads every header in full: tens of CPU-minutes) and says so.
//!
//! Each file is checked alone, so the files go to `check` in small batches, as many
//! processes at a time as the machine has cores; nvcc checks only the files the truth
//! calls clean, the only ones whose nvcc errors are asserted.
//!
//! Checking every file takes about 25 CPU-minutes, more than the rest of the suite. So
//! a local run checks a fixed sample with NVRTC alone, every 4th file of each project in
//! path order, and leaves the nvcc half out (a single PyTorch extension's file takes
//! nvcc a minute and a half; `cli_check` tests the nvcc checker on a project file); it
//! says so with a SKIP line that the run's summary repeats. `KERNEL_LSP_CORPUS=full`
//! checks every file with both, as CI does (.ci/run).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus")
}

/// `__global__` function definitions in `text`, by a scan that needs no parser: outside
/// comments and `#define`s, a `__global__` whose declaration reaches `{` before `;`.
fn kernels_defined(text: &str) -> usize {
    let mut code = String::with_capacity(text.len());
    let mut in_block = false;
    let mut in_define = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if !in_block && (trimmed.starts_with('#') || in_define) {
            in_define = line.trim_end().ends_with('\\');
            code.push('\n');
            continue;
        }
        let mut rest = line;
        loop {
            if in_block {
                match rest.find("*/") {
                    Some(e) => {
                        rest = &rest[e + 2..];
                        in_block = false;
                    }
                    None => break,
                }
            } else {
                let (lc, bc) = (rest.find("//"), rest.find("/*"));
                match (lc, bc) {
                    (Some(l), b) if b.is_none_or(|b| l < b) => {
                        code.push_str(&rest[..l]);
                        break;
                    }
                    (_, Some(b)) => {
                        code.push_str(&rest[..b]);
                        rest = &rest[b + 2..];
                        in_block = true;
                    }
                    _ => {
                        code.push_str(rest);
                        break;
                    }
                }
            }
        }
        code.push('\n');
    }
    code.match_indices("__global__")
        .filter(|(i, _)| {
            let after = &code[i + "__global__".len()..];
            let brace = after.find('{');
            let semi = after.find(';');
            matches!((brace, semi), (Some(b), Some(s)) if b < s)
                || matches!((brace, semi), (Some(_), None))
        })
        .count()
}

/// Triton kernels in `text` by a scan that needs no parser: `@triton.jit` (or `@jit`)
/// decorator lines, and `triton.jit(name)` calls outside decorators and comments.
fn triton_kernels_defined(text: &str) -> usize {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .map(|l| {
            if l.starts_with('@') {
                usize::from(l.starts_with("@triton.jit") || l.starts_with("@jit"))
            } else {
                l.matches("triton.jit(")
                    .filter(|_| !l.starts_with("def ") && !l.starts_with("import"))
                    .count()
            }
        })
        .sum()
}

#[derive(Default)]
struct Run {
    /// file → (kernels found, errors)
    files: BTreeMap<String, (usize, Vec<String>)>,
    infos: usize,
    /// Files whose compile gave the "not checked" note instead of a device check.
    not_checked: std::collections::BTreeSet<String>,
    /// How long the `check` process took.
    took: std::time::Duration,
}

impl Run {
    /// The runs of one project's batches as one run.
    fn merged(runs: Vec<Run>) -> Run {
        let mut all = Run::default();
        for run in runs {
            all.files.extend(run.files);
            all.infos += run.infos;
            all.not_checked.extend(run.not_checked);
            all.took += run.took;
        }
        all
    }
}

fn check(project: &Path, files: &[String], nvcc: Option<&Path>) -> Run {
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(project)
        .env("KERNEL_LSP_NVCC", nvcc.map_or(Path::new("none"), |p| p))
        .arg("check")
        .arg("--json")
        .args(files)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let findings: Vec<serde_json::Value> = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("check --json: {e}\n{stdout}\n{stderr}"));
    let mut run = Run {
        took: started.elapsed(),
        ..Run::default()
    };
    for line in stderr.lines() {
        // `src/a.cu: 3 kernel(s): ...`
        if let Some((file, rest)) = line.split_once(": ") {
            if let Some(n) = rest
                .split_once(" kernel(s)")
                .and_then(|(n, _)| n.parse().ok())
            {
                run.files.entry(file.to_string()).or_default().0 = n;
            }
        }
    }
    for f in &findings {
        let file = f["file"].as_str().unwrap_or("").to_string();
        match f["severity"].as_str().unwrap_or("") {
            "error" => run.files.entry(file.clone()).or_default().1.push(format!(
                "{file}:{}:{}: {} [{}]",
                f["line"],
                f["column"],
                f["message"].as_str().unwrap_or(""),
                f["source"].as_str().unwrap_or("")
            )),
            "information" | "info" => {
                run.infos += 1;
                if f["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("not checked"))
                {
                    run.not_checked.insert(file);
                }
            }
            _ => {}
        }
    }
    run
}

/// What `baseline.txt` records for a project: the most false errors with NVRTC alone,
/// files with missed kernels and files "not checked" that the test accepts.
struct Baseline {
    false_errors: usize,
    missed: usize,
    /// `usize::MAX` where the file gives none (`-`, or a Triton project).
    not_checked: usize,
}

fn baseline(project: &str) -> Baseline {
    let text = std::fs::read_to_string(corpus_dir().join("baseline.txt")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == project).then(|| Baseline {
                false_errors: w.next().and_then(|x| x.parse().ok()).unwrap_or(0),
                missed: w.next().and_then(|x| x.parse().ok()).unwrap_or(0),
                not_checked: w.next().and_then(|x| x.parse().ok()).unwrap_or(usize::MAX),
            })
        })
        .unwrap_or(Baseline {
            false_errors: 0,
            missed: 0,
            not_checked: usize::MAX,
        })
}

/// A CUDA project of the cache: its files (from compile_commands.json) and the kernels each
/// defines.
struct CudaProject {
    name: String,
    dir: PathBuf,
    files: Vec<String>,
    expected: BTreeMap<String, usize>,
    /// The files checked with nvcc: those nvcc-truth.txt calls clean (only their errors
    /// are asserted), less ggml's template-instances/ (one-line files that instantiate its
    /// heaviest headers; nvcc reads every header in full, host code and templates
    /// included, so they are left to the NVRTC half).
    nvcc_files: Vec<String>,
}

/// A local run checks every `SAMPLE`-th file of each project, in path order, with NVRTC
/// alone; `None` under `KERNEL_LSP_CORPUS=full`: every file, with both checkers.
const SAMPLE: usize = 4;

fn sample() -> Option<usize> {
    let full = std::env::var("KERNEL_LSP_CORPUS").is_ok_and(|v| v == "full");
    (!full).then_some(SAMPLE)
}

fn cuda_project(dir: &Path, clean: &[&str], sample: Option<usize>) -> CudaProject {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let db: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("compile_commands.json")).unwrap())
            .unwrap();
    let mut files: Vec<String> = db
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["file"].as_str().map(String::from))
        .collect();
    files.sort();
    let files: Vec<String> = files.into_iter().step_by(sample.unwrap_or(1)).collect();
    let nvcc_files = files
        .iter()
        .filter(|f| !f.contains("template-instances/"))
        .filter(|f| clean.contains(&format!("{name}/{f}").as_str()))
        .cloned()
        .collect();
    let expected = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            (f.clone(), kernels_defined(&text))
        })
        .collect();
    CudaProject {
        name,
        dir: dir.to_path_buf(),
        files,
        expected,
        nvcc_files,
    }
}

/// One `kernel-lsp check` to run: some of one project's files, with NVRTC alone or nvcc.
struct Batch<'a> {
    project: usize,
    dir: &'a Path,
    files: &'a [String],
    nvcc: Option<&'a Path>,
}

/// Files per `check` process: few enough that the last batches to finish end close
/// together, enough that process start-ups do not count.
const BATCH: usize = 6;

/// `check` processes at a time: one per core.
fn jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Runs every batch, as many `check` processes at a time as the machine has cores: each
/// file is checked alone (its own flags from compile_commands.json), as the editor checks
/// it, so a split changes nothing but the time. The runs come back in batch order.
fn check_batches(batches: &[Batch]) -> Vec<Run> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let jobs = jobs();
    let next = AtomicUsize::new(0);
    let done: std::sync::Mutex<Vec<Option<Run>>> =
        std::sync::Mutex::new(batches.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(batches.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(b) = batches.get(i) else { break };
                let run = check(b.dir, b.files, b.nvcc);
                done.lock().unwrap()[i] = Some(run);
            });
        }
    });
    done.into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("every batch ran"))
        .collect()
}

/// Every project's files in batches, nvcc's first (its files take longest, so the batches
/// left at the end are short), then NVRTC's.
fn batches<'a>(projects: &'a [CudaProject], nvcc: Option<&'a Path>) -> Vec<Batch<'a>> {
    let mut out = Vec::new();
    let mut add = |project: usize, files: &'a [String], nvcc: Option<&'a Path>| {
        let dir = &projects[project].dir;
        out.extend(files.chunks(BATCH).map(|files| Batch {
            project,
            dir,
            files,
            nvcc,
        }));
    };
    if let Some(n) = nvcc {
        for (i, p) in projects.iter().enumerate() {
            add(i, &p.nvcc_files, Some(n));
        }
    }
    for (i, p) in projects.iter().enumerate() {
        add(i, &p.files, None);
    }
    out
}

#[test]
fn corpus_every_kernel_found_and_no_false_errors() {
    let test = "corpus_every_kernel_found_and_no_false_errors";
    let cache = corpus_dir().join("cache");
    if !cache.join("ggml/compile_commands.json").is_file() {
        return crate::tools::skip(
            test,
            "tests/corpus/cache is empty (run tests/corpus/fetch.sh)",
        );
    }
    if let Err(e) = crate::tools::nvrtc_available() {
        return crate::tools::skip(test, &e);
    }
    let truth_text = std::fs::read_to_string(corpus_dir().join("nvcc-truth.txt")).unwrap();
    let clean: Vec<&str> = truth_text
        .lines()
        .filter_map(|l| l.strip_prefix("clean "))
        .collect();
    let sample = sample();
    if let Some(every) = sample {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP {test}[rest]: a sample of the corpus was checked, 1 file in {every} with NVRTC alone; KERNEL_LSP_CORPUS=full checks every file with NVRTC and nvcc"
        );
    }
    let nvcc_off = std::env::var("KERNEL_LSP_CORPUS_NVCC").is_ok_and(|v| v == "off");
    let nvcc = crate::tools::test_nvcc()
        .ok()
        .filter(|_| !nvcc_off && sample.is_none());
    if nvcc_off {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP {test} (nvcc half): KERNEL_LSP_CORPUS_NVCC=off"
        );
    } else if nvcc.is_none() && sample.is_none() {
        crate::tools::skip(&format!("{test} (nvcc half)"), "no nvcc for tests");
    }
    let mut table = vec![format!(
        "{:<16} {:>5} {:>7} {:>7} {:>6} {:>12} {:>11} {:>11} {:>8} {:>8} {:>7}",
        "project",
        "files",
        "kernels",
        "found",
        "clean",
        "false(nvrtc)",
        "false(nvcc)",
        "not-checked",
        "checked%",
        "s(nvrtc)",
        "s(nvcc)"
    )];
    let mut failures: Vec<String> = Vec::new();
    let dirs_with = |marker: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&cache)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join(marker).is_file())
            .collect();
        v.sort();
        v
    };
    for project in &dirs_with("triton-files.txt") {
        let (row, mut f) = triton_project(project);
        table.push(row);
        failures.append(&mut f);
    }
    let projects: Vec<CudaProject> = dirs_with("compile_commands.json")
        .iter()
        .map(|d| cuda_project(d, &clean, sample))
        .collect();
    let started = std::time::Instant::now();
    let batches = batches(&projects, nvcc.as_deref());
    let mut runs: BTreeMap<(usize, bool), Vec<Run>> = BTreeMap::new();
    for (b, run) in batches.iter().zip(check_batches(&batches)) {
        runs.entry((b.project, b.nvcc.is_some()))
            .or_default()
            .push(run);
    }
    for (i, p) in projects.iter().enumerate() {
        let nvrtc = Run::merged(runs.remove(&(i, false)).unwrap_or_default());
        let with_nvcc = nvcc
            .as_ref()
            .map(|_| Run::merged(runs.remove(&(i, true)).unwrap_or_default()));
        let (row, mut f) = cuda_project_row(p, &nvrtc, with_nvcc.as_ref(), &clean);
        table.push(row);
        failures.append(&mut f);
    }
    let report = table.join("\n");
    let _ = writeln!(
        std::io::stderr(),
        "corpus:\n{report}\n(s: seconds of `check` processes, summed; {} of them, up to {BATCH} files each, {} at a time: {:.0} s)",
        batches.len(),
        jobs(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{report}\n{}", failures.join("\n"));
}

/// One CUDA project's row and failures, from its NVRTC run and (when there is nvcc for
/// tests) its nvcc run: kernels found against [`kernels_defined`], false errors on the
/// files nvcc-truth.txt calls clean, files "not checked"; bounded by the baseline.
fn cuda_project_row(
    p: &CudaProject,
    nvrtc: &Run,
    with_nvcc: Option<&Run>,
    clean: &[&str],
) -> (String, Vec<String>) {
    let (name, files) = (&p.name, &p.files);
    let is_clean = |f: &str| clean.contains(&format!("{name}/{f}").as_str());
    let mut failures = Vec::new();
    let mut found = 0;
    let mut missed: Vec<String> = Vec::new();
    for f in files {
        let got = nvrtc.files.get(f).map_or(0, |r| r.0);
        found += got;
        if got != p.expected[f] {
            missed.push(format!(
                "{name}/{f}: {got} kernels found, {} defined",
                p.expected[f]
            ));
        }
    }
    let false_errors = |run: &Run, label: &str, failures: &mut Vec<String>| -> usize {
        let mut n = 0;
        for f in files.iter().filter(|f| is_clean(f)) {
            if let Some((_, errs)) = run.files.get(f) {
                n += errs.len();
                for e in errs.iter().take(3) {
                    failures.push(format!("{name} ({label}): {e}"));
                }
            }
        }
        n
    };
    let mut nvrtc_errors = Vec::new();
    let fe_nvrtc = false_errors(nvrtc, "nvrtc", &mut nvrtc_errors);
    let fe_nvcc = with_nvcc
        .map(|r| false_errors(r, "nvcc", &mut failures).to_string())
        .unwrap_or_else(|| "-".into());
    let Baseline {
        false_errors: max_false,
        missed: max_missed,
        not_checked: max_not_checked,
    } = baseline(name);
    if nvrtc.not_checked.len() > max_not_checked {
        failures.push(format!(
            "{name}: {} files \"not checked\" with NVRTC alone, baseline {max_not_checked}: {:?}",
            nvrtc.not_checked.len(),
            nvrtc.not_checked
        ));
    }
    if fe_nvrtc > max_false {
        failures.push(format!(
            "{name}: {fe_nvrtc} false errors with NVRTC alone, baseline {max_false}"
        ));
        failures.append(&mut nvrtc_errors);
    }
    if missed.len() > max_missed {
        failures.push(format!(
            "{name}: {} files with kernels missed, baseline {max_missed}",
            missed.len()
        ));
        failures.append(&mut missed);
    }
    let checked = files.len() - nvrtc.not_checked.len();
    let row = format!(
        "{:<16} {:>5} {:>7} {:>7} {:>6} {:>12} {:>11} {:>11} {:>7.0}% {:>8.0} {:>7}",
        name,
        files.len(),
        p.expected.values().sum::<usize>(),
        found,
        files.iter().filter(|f| is_clean(f)).count(),
        fe_nvrtc,
        fe_nvcc,
        nvrtc.not_checked.len(),
        100.0 * checked as f64 / files.len().max(1) as f64,
        nvrtc.took.as_secs_f64(),
        with_nvcc.map_or("-".into(), |r| format!("{:.0}", r.took.as_secs_f64()))
    );
    (row, failures)
}

/// One Triton project's row and failures: every file of `triton-files.txt` checked; its
/// kernels against [`triton_kernels_defined`], its syntax errors all false (a released
/// package's Python parses). Baselines as for CUDA projects.
fn triton_project(project: &Path) -> (String, Vec<String>) {
    let name = project.file_name().unwrap().to_string_lossy().into_owned();
    let files: Vec<String> = std::fs::read_to_string(project.join("triton-files.txt"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let run = check(project, &files, None);
    let Baseline {
        false_errors: max_false,
        missed: max_missed,
        ..
    } = baseline(&name);
    let mut failures = Vec::new();
    let (mut expected, mut found, mut errors, mut missed) = (0, 0, Vec::new(), Vec::new());
    for f in &files {
        let want = triton_kernels_defined(&std::fs::read_to_string(project.join(f)).unwrap());
        let (got, errs) = run.files.get(f).cloned().unwrap_or_default();
        expected += want;
        found += got;
        if got != want {
            missed.push(format!("{name}/{f}: {got} kernels found, {want} defined"));
        }
        errors.extend(errs.into_iter().map(|e| format!("{name}: {e}")));
    }
    if errors.len() > max_false {
        failures.push(format!(
            "{name}: {} false errors, baseline {max_false}",
            errors.len()
        ));
        failures.append(&mut errors.clone());
    }
    if missed.len() > max_missed {
        failures.push(format!(
            "{name}: {} files with kernels missed, baseline {max_missed}",
            missed.len()
        ));
        failures.append(&mut missed);
    }
    let row = format!(
        "{:<16} {:>5} {:>7} {:>7} {:>6} {:>12} {:>11} {:>11} {:>8} {:>8.0} {:>7}",
        name,
        files.len(),
        expected,
        found,
        files.len(),
        errors.len(),
        "-",
        "-",
        "-",
        run.took.as_secs_f64(),
        "-"
    );
    (row, failures)
}
