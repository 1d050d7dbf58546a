//! Checking a whole file with nvcc: the ground truth where nvcc is installed.
//!
//! NVRTC sees only the device slice, so a file whose headers hold host code NVRTC cannot
//! read can only be checked approximately ([`super::compat`]). nvcc reads the file as the
//! project builds it: `nvcc -ptx` with the project's include folders, defines, `-std` and
//! front-end flags runs the preprocessor and CUDA's front end on the whole file, host
//! code included, and compiles the device side to PTX (which ptxas then reads for
//! register counts). Nothing is linked and no host object is written.
//!
//! - The author's unsaved text is written to a private temporary folder under the file's
//!   own name; the file's real folder is searched first, so quoted includes resolve as in
//!   the project.
//! - A header nvcc cannot find is supplied (kernel-lsp's stand-in when it has one, else
//!   empty) and the check runs again, at most 16 times; each becomes a [`MissingInclude`].
//! - The preprocessor's messages (`file:line:col: error: …`) and the front end's
//!   (`file(line): error: …`) are placed as NVRTC's are ([`super::parse_nvrtc_log`]).
//! - nvcc itself failing (`nvcc fatal`: no host compiler, a bad flag) is an error value,
//!   so the caller falls back to NVRTC and says why.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::compat::{self, MissingInclude};
use super::nvrtc_log::{parse_nvrtc_log, CompilerMessage};
use super::process::run_with_timeout;
use super::project::ProjectFlags;
use super::ptxas::sm_arch;
use super::ToolError;

/// How long one nvcc run may take (a file that pulls in CUB or CUTLASS takes seconds).
pub const NVCC_TIMEOUT: Duration = Duration::from_secs(90);

/// What one check with nvcc found.
#[derive(Clone, Debug, Default)]
pub struct NvccOutput {
    /// Placed in the author's text; header messages sit on their `#include` line.
    pub messages: Vec<CompilerMessage>,
    /// Headers nvcc could not find, supplied as stand-ins.
    pub missing: Vec<MissingInclude>,
    /// The PTX, when the file compiled.
    pub ptx: Option<String>,
    /// The command line, for the log.
    pub command: String,
}

/// One check: `text` (the author's text of the file at `file`) with the project's flags
/// and the spec's defines, for `arch` (`sm_90`).
pub struct NvccRequest<'a> {
    pub file: &'a Path,
    pub text: &'a str,
    pub project: &'a ProjectFlags,
    pub defines: &'a [(String, String)],
    pub arch: &'a str,
    pub timeout: Duration,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Runs nvcc on the request (blocking: seconds). Safe to call concurrently.
pub fn check_with_nvcc(nvcc: &Path, req: &NvccRequest<'_>) -> Result<NvccOutput, ToolError> {
    let sm = sm_arch(req.arch)?;
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-nvcc-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let io = |what: &str, e: std::io::Error| ToolError::Io {
        what: what.to_string(),
        reason: e.to_string(),
    };
    let standins = dir.join("standins");
    std::fs::create_dir_all(&standins).map_err(|e| io("creating nvcc's folder", e))?;
    let result = run_in(nvcc, req, &sm, &dir, &standins);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(
    nvcc: &Path,
    req: &NvccRequest<'_>,
    sm: &str,
    dir: &Path,
    standins: &Path,
) -> Result<NvccOutput, ToolError> {
    let name = req.file.file_name().map_or_else(
        || "kernel.cu".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let name = if name.ends_with(".cu") || name.ends_with(".cuh") {
        name
    } else {
        format!("{name}.cu")
    };
    let src = dir.join(&name);
    std::fs::write(&src, req.text).map_err(|e| ToolError::Io {
        what: "writing the file for nvcc".into(),
        reason: e.to_string(),
    })?;
    let ptx = dir.join("out.ptx");
    let args = arguments(req, sm, &src, &ptx, standins);
    let shown = src.display().to_string();
    let stand_in_texts = compat::headers(&[]);
    let mut missing: Vec<MissingInclude> = Vec::new();
    loop {
        let mut cmd = Command::new(nvcc);
        cmd.args(&args).current_dir(dir);
        let command = format!("{} {}", nvcc.display(), args.join(" "));
        let done = run_with_timeout(cmd, req.timeout, "nvcc")?;
        let log = format!("{}{}", done.stderr, done.stdout);
        if let Some(fatal) = log
            .lines()
            .find(|l| l.trim_start().starts_with("nvcc fatal"))
        {
            return Err(ToolError::Io {
                what: "nvcc".into(),
                reason: fatal.trim().to_string(),
            });
        }
        if !done.status.success() {
            if let Some((header, line)) = missing_header(&log, &shown) {
                let path = standins.join(&header);
                let already = path.is_file();
                if !already && missing.len() < 16 && !header.contains("..") {
                    let text = stand_in_texts
                        .iter()
                        .find(|(n, _)| *n == header)
                        .map_or(String::new(), |(_, t)| t.clone());
                    if let Some(parent) = path.parent() {
                        let _ = std::fs::create_dir_all(parent);
                    }
                    if std::fs::write(&path, text).is_ok() {
                        let line = line
                            .or_else(|| compat::include_line(req.text, &header))
                            .unwrap_or(0);
                        missing.push(MissingInclude { header, line });
                        continue;
                    }
                }
            }
        }
        let normalized = edg_style(&log);
        let messages = parse_nvrtc_log(&normalized, &shown, req.text);
        let ptx = if done.status.success() {
            std::fs::read_to_string(&ptx).ok()
        } else {
            None
        };
        return Ok(NvccOutput {
            messages,
            missing,
            ptx,
            command,
        });
    }
}

/// nvcc's arguments: PTX only, for `sm`, the file's own folder first, then the project's
/// folders, defines, `-std` and front-end flags, then the stand-ins' folder last.
fn arguments(
    req: &NvccRequest<'_>,
    sm: &str,
    src: &Path,
    ptx: &Path,
    standins: &Path,
) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-ptx".into(),
        format!("-arch={sm}"),
        "-Wno-deprecated-gpu-targets".into(),
        format!("-std={}", req.project.std.as_deref().unwrap_or("c++17")),
    ];
    if let Some(d) = req.file.parent().filter(|d| !d.as_os_str().is_empty()) {
        a.push(format!("-I{}", d.display()));
    }
    for d in &req.project.include_dirs {
        let s = format!("-I{}", d.display());
        if !a.contains(&s) {
            a.push(s);
        }
    }
    let mut defines = req.project.defines.clone();
    for (n, v) in req.defines {
        defines.retain(|(m, _)| m != n);
        defines.push((n.clone(), v.clone()));
    }
    for (n, v) in &defines {
        a.push(if v.is_empty() {
            format!("-D{n}")
        } else {
            format!("-D{n}={v}")
        });
    }
    a.extend(req.project.nvcc_flags.iter().cloned());
    a.push(format!("-I{}", standins.display()));
    a.push("-o".into());
    a.push(ptx.display().to_string());
    a.push(src.display().to_string());
    a
}

/// The header the preprocessor could not open and the 0-based line in the author's file
/// whose `#include` chain reached it (`None`: not known).
fn missing_header(log: &str, ours: &str) -> Option<(String, Option<u32>)> {
    const GCC: &str = ": fatal error: ";
    const TAIL: &str = ": No such file or directory";
    let lines: Vec<&str> = log.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let header = if let Some(at) = l.find(GCC) {
            let rest = &l[at + GCC.len()..];
            rest.strip_suffix(TAIL).map(str::to_string)
        } else {
            compat::cannot_open(l)
        };
        let Some(header) = header else { continue };
        // The line in our file: the error's own place, or the last `from ours:N` above.
        let own = l.strip_prefix(ours).and_then(line_after_colon);
        let chain = lines[..i].iter().rev().find_map(|p| {
            let p = p.trim_start();
            let p = p
                .strip_prefix("In file included from ")
                .or_else(|| p.strip_prefix("from "))?;
            p.strip_prefix(ours).and_then(line_after_colon)
        });
        return Some((header, own.or(chain)));
    }
    None
}

/// `:12:5: …` or `:12,` → 11 (0-based).
fn line_after_colon(rest: &str) -> Option<u32> {
    let digits: String = rest
        .strip_prefix(':')?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<u32>().ok()?.checked_sub(1)
}

/// nvcc's log with the preprocessor's `file:line:col: error: text` lines rewritten in the
/// front end's `file(line): error: text` form, and gcc's source echo and include chain
/// left out, so one parser places both.
fn edg_style(log: &str) -> String {
    let mut out = String::new();
    for l in log.lines() {
        let t = l.trim_start();
        if t.starts_with("In file included from ")
            || (t.starts_with("from ") && (t.ends_with(',') || t.ends_with(':')))
            || t == "compilation terminated."
            || is_gcc_echo(t)
        {
            continue;
        }
        out.push_str(&gcc_to_edg(l).unwrap_or_else(|| l.to_string()));
        out.push('\n');
    }
    out
}

/// ` 5 | #include <x>` and `   |  ^~~~`.
fn is_gcc_echo(t: &str) -> bool {
    let head = t.split('|').next().unwrap_or("");
    t.contains('|') && head.trim().chars().all(|c| c.is_ascii_digit())
}

fn gcc_to_edg(l: &str) -> Option<String> {
    for sev in [": fatal error: ", ": error: ", ": warning: ", ": note: "] {
        let Some(at) = l.find(sev) else { continue };
        let place = &l[..at];
        let mut parts = place.rsplitn(3, ':');
        let col = parts.next()?;
        let line = parts.next()?;
        let file = parts.next()?;
        if !col.chars().all(|c| c.is_ascii_digit())
            || !line.chars().all(|c| c.is_ascii_digit())
            || line.is_empty()
        {
            continue;
        }
        let kind = sev.trim_matches(|c| c == ':' || c == ' ');
        return Some(format!("{file}({line}): {kind}: {}", &l[at + sev.len()..]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn preprocessor_messages_read_as_the_front_end_s() {
        assert_eq!(
            gcc_to_edg("/t/a.cu:7:3: error: #error \"no\"").as_deref(),
            Some("/t/a.cu(7): error: #error \"no\"")
        );
        assert_eq!(gcc_to_edg("/t/a.cu(7): error: x"), None);
        let log = "In file included from src/common.cuh:40,\n                 from /t/acc.cu:3:\nsrc/vendors/cuda.h:5:10: fatal error: cublas_v2.h: No such file or directory\n    5 | #include <cublas_v2.h>\n      |          ^~~~~~~~~~~~~\ncompilation terminated.\n";
        assert_eq!(
            missing_header(log, "/t/acc.cu"),
            Some(("cublas_v2.h".to_string(), Some(2)))
        );
        assert_eq!(
            edg_style(log),
            "src/vendors/cuda.h(5): fatal error: cublas_v2.h: No such file or directory\n"
        );
        let own = "/t/acc.cu:4:10: fatal error: mine.h: No such file or directory\n";
        assert_eq!(
            missing_header(own, "/t/acc.cu"),
            Some(("mine.h".to_string(), Some(3)))
        );
    }

    #[test]
    fn the_project_s_flags_reach_nvcc_and_the_spec_s_defines_win() {
        let project = ProjectFlags {
            include_dirs: vec![PathBuf::from("/p/src"), PathBuf::from("/p/include")],
            defines: vec![("N".into(), "1".into()), ("FAST".into(), String::new())],
            std: Some("c++20".into()),
            nvcc_flags: vec!["--expt-relaxed-constexpr".into()],
            ..ProjectFlags::default()
        };
        let req = NvccRequest {
            file: Path::new("/p/src/k.cu"),
            text: "",
            project: &project,
            defines: &[("N".into(), "4".into())],
            arch: "sm_90a",
            timeout: NVCC_TIMEOUT,
        };
        let a = arguments(
            &req,
            "sm_90a",
            Path::new("/tmp/x/k.cu"),
            Path::new("/tmp/x/out.ptx"),
            Path::new("/tmp/x/standins"),
        );
        expect_test::expect!["-ptx -arch=sm_90a -Wno-deprecated-gpu-targets -std=c++20 -I/p/src -I/p/include -DFAST -DN=4 --expt-relaxed-constexpr -I/tmp/x/standins -o /tmp/x/out.ptx /tmp/x/k.cu"]
            .assert_eq(&a.join(" "));
    }
}
