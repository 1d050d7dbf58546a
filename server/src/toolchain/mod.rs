//! Finding and running the CPU-side CUDA toolchain: NVRTC (loaded dynamically, never the
//! driver) and ptxas. Turns compiler output into messages at the author's lines.
//!
//! - [`locate`] finds libnvrtc, ptxas and the CUDA headers (toolkit or pip wheels).
//! - [`Nvrtc`] compiles a source string to PTX; [`parse_nvrtc_log`] places its log.
//! - [`ptxas_resources`] runs `ptxas -v`; [`parse_ptxas_verbose`] reads registers,
//!   shared memory, stack and spills; [`symbol_matches`] ties mangled symbols to kernels.
//! - [`check_device_slice`] does all of it for the LSP layer, on a blocking thread.
//!
//! Invariants: nothing here loads `libcuda` or needs a GPU; a missing tool is a value
//! ([`ToolError`]), never a panic or a link-time dependency; every function may be
//! called from several threads at once.

/// `namespace std { using ::int8_t; ... }`: the fixed-width integer names in `std`, for
/// the `<cstdint>` stand-ins (with and without CCCL).
macro_rules! std_int_usings {
    () => {
        "namespace std {
using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t;
using ::uint8_t; using ::uint16_t; using ::uint32_t; using ::uint64_t;
using ::intptr_t; using ::uintptr_t; using ::intmax_t; using ::uintmax_t;
using ::int_least8_t; using ::int_least16_t; using ::int_least32_t; using ::int_least64_t;
using ::uint_least8_t; using ::uint_least16_t; using ::uint_least32_t; using ::uint_least64_t;
using ::int_fast8_t; using ::int_fast16_t; using ::int_fast32_t; using ::int_fast64_t;
using ::uint_fast8_t; using ::uint_fast16_t; using ::uint_fast32_t; using ::uint_fast64_t;
}
"
    };
}

pub mod compat;
mod locate;
pub mod ncu;
pub mod nvcc;
mod nvrtc;
mod nvrtc_log;
mod process;
pub mod project;
mod ptxas;

#[cfg(test)]
mod real_tools_tests;

use std::path::PathBuf;
use std::time::Duration;

pub use locate::{locate, locate_in, SearchEnv, Toolchain, ToolchainSettings};
pub use nvrtc::{default_options, std_header_shims, CompileOutput, CompileRequest, Nvrtc};
pub use nvrtc_log::{header_line, parse_nvrtc_log, CompilerMessage, MessageSeverity};
pub use project::ProjectFlags;
pub use ptxas::{
    parse_ptxas_verbose, ptxas_resources, ptxas_resources_with_args, symbol_matches,
    KernelResources,
};

/// Why a tool could not be found or run. Messages say what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error(
        "libnvrtc not found, so kernels cannot be compiled as you type. Searched: {}. \
         Install the nvidia-cuda-nvrtc-cu12 wheel (pip install nvidia-cuda-nvrtc-cu12) or \
         the CUDA toolkit, or set kernel-lsp.nvrtcPath to libnvrtc.so or its folder",
        .searched.join(", ")
    )]
    NvrtcNotFound { searched: Vec<String> },
    #[error("{} cannot be used as NVRTC: {reason}", .path.display())]
    NvrtcUnusable { path: PathBuf, reason: String },
    #[error("define {name}={value}: {reason}")]
    InvalidDefine {
        name: String,
        value: String,
        reason: String,
    },
    #[error("`{arch}` is not a GPU architecture; use a form like sm_90 or sm_90a")]
    InvalidArch { arch: String },
    #[error("ptxas failed ({status}): {stderr}")]
    PtxasFailed { status: String, stderr: String },
    #[error("{what} did not finish within {millis} ms and was stopped")]
    Timeout { what: String, millis: u64 },
    #[error("{what}: {reason}")]
    Io { what: String, reason: String },
}

/// What checking one device slice found, for diagnostics and inlay hints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckResult {
    /// NVRTC's errors and warnings, placed in the slice's lines.
    pub messages: Vec<CompilerMessage>,
    /// One entry per kernel ptxas assembled; empty without ptxas or PTX.
    pub resources: Vec<KernelResources>,
    /// NVRTC produced PTX (whether or not ptxas then ran).
    pub ptx_ok: bool,
    /// Why something is missing, e.g. "ptxas not found: no register counts".
    pub note: Option<String>,
    /// `(name expression, lowered name)` for the requested name expressions.
    pub lowered_names: Vec<(String, String)>,
    /// Headers nvcc could not find and got as stand-ins: messages on host code, in
    /// headers and about their names may come from the stand-in rather than the code.
    pub missing_headers: Vec<String>,
}

/// [`default_options`] plus the prelude and `-default-device`, and `-std=` from the project when it names a
/// standard NVRTC knows (else C++17 stays).
pub fn project_options(
    arch: &str,
    include_dirs: &[PathBuf],
    defines: &[(String, String)],
    std: Option<&str>,
) -> Result<Vec<String>, ToolError> {
    let mut opts = default_options(arch, include_dirs, defines)?;
    if let Some(s) = std.filter(|s| matches!(*s, "c++11" | "c++14" | "c++17" | "c++20")) {
        for o in &mut opts {
            if o.starts_with("-std=") {
                *o = format!("-std={s}");
            }
        }
    }
    opts.push(compat::prelude_option());
    // Unannotated functions that reach NVRTC are the ones the device slice keeps:
    // `constexpr` helpers and class members, which nvcc lets device code call (with
    // --expt-relaxed-constexpr, as most projects build). NVRTC's JIT mode refuses every
    // host function, so they are taken as device functions. Unannotated non-constexpr
    // helpers are blanked from the slice, so calling one is still an error.
    opts.push("-default-device".to_string());
    Ok(opts)
}

/// How long ptxas may take for one slice before it is stopped.
pub const PTXAS_TIMEOUT: Duration = Duration::from_secs(20);

/// Compiles `device_slice` with NVRTC and, on success, runs ptxas for resources.
///
/// Blocking (tens to hundreds of milliseconds); run it on a blocking thread. Safe to
/// call concurrently. Standard headers NVRTC lacks (`<cstdint>`, `<cstddef>`) are
/// supplied in memory when the include folders have none.
pub fn check_device_slice(
    tc: &Toolchain,
    device_slice: &str,
    program_name: &str,
    defines: &[(String, String)],
    name_expressions: &[String],
) -> CheckResult {
    check_device_slice_with(
        tc,
        device_slice,
        program_name,
        defines,
        name_expressions,
        &ProjectFlags::default(),
        &[],
    )
}

/// [`check_device_slice`] with the file's project flags (its folder, its
/// compile_commands.json entry, the settings): their include folders come before the
/// toolkit's, their defines before the spec's (which win), their `-std` replaces C++17.
/// A header no folder has becomes one warning on its `#include` line, and the rest of
/// the file is still checked ([`compat::compile`]).
pub fn check_device_slice_with(
    tc: &Toolchain,
    device_slice: &str,
    program_name: &str,
    defines: &[(String, String)],
    name_expressions: &[String],
    project: &ProjectFlags,
    headers: &[(String, String)],
) -> CheckResult {
    let nvrtc = match &tc.nvrtc {
        Ok(n) => n,
        Err(e) => {
            return CheckResult {
                note: Some(e.to_string()),
                ..CheckResult::default()
            }
        }
    };
    let mut all_defines = project.defines.clone();
    for (n, v) in defines {
        all_defines.retain(|(m, _)| m != n);
        all_defines.push((n.clone(), v.clone()));
    }
    let mut include_dirs = project.include_dirs.clone();
    include_dirs.extend(tc.include_dirs.iter().cloned());
    let options = match project_options(
        &tc.arch,
        &include_dirs,
        &all_defines,
        project.std.as_deref(),
    ) {
        Ok(o) => o,
        Err(e) => {
            // A bad define or arch comes from the author's spec or settings: show it.
            return CheckResult {
                messages: vec![CompilerMessage {
                    line: 0,
                    col_start: 0,
                    col_end: device_slice.lines().next().map_or(0, |l| l.len()) as u32,
                    severity: MessageSeverity::Error,
                    message: e.to_string(),
                    header: None,
                }],
                note: Some(e.to_string()),
                ..CheckResult::default()
            };
        }
    };
    let (mut out, missing) = compat::compile(
        nvrtc,
        &CompileRequest {
            source: device_slice.to_string(),
            program_name: program_name.to_string(),
            options,
            name_expressions: name_expressions.to_vec(),
            headers: headers.to_vec(),
        },
        &tc.include_dirs,
    );
    out.messages
        .extend(missing_include_warnings(&missing, device_slice, project));
    out.messages.sort_by_key(|m| (m.line, m.col_start));
    let mut result = CheckResult {
        messages: out.messages,
        ptx_ok: out.success && out.ptx.is_some(),
        lowered_names: out.lowered_names,
        missing_headers: missing.iter().map(|m| m.header.clone()).collect(),
        ..CheckResult::default()
    };
    let Some(ptx) = out.ptx.filter(|_| out.success) else {
        return result;
    };
    match &tc.ptxas {
        None => result.note = Some("ptxas not found: no register counts".to_string()),
        Some(ptxas) => match ptxas_resources(ptxas, &ptx, &tc.arch, PTXAS_TIMEOUT) {
            Ok(r) => result.resources = r,
            Err(e) => result.note = Some(format!("no register counts: {e}")),
        },
    }
    result
}

/// One warning per header no folder had, on its `#include` line, saying where it was
/// searched and how to add a folder.
fn missing_include_warnings(
    missing: &[compat::MissingInclude],
    source: &str,
    project: &ProjectFlags,
) -> Vec<CompilerMessage> {
    missing
        .iter()
        .map(|m| {
            let text = source.split('\n').nth(m.line as usize).unwrap_or("");
            let lead = text.len() - text.trim_start().len();
            let searched: Vec<String> = project
                .include_dirs
                .iter()
                .map(|d| d.display().to_string())
                .chain(std::iter::once("the CUDA headers".to_string()))
                .collect();
            CompilerMessage {
                line: m.line,
                col_start: lead as u32,
                col_end: text.trim_end().len() as u32,
                severity: MessageSeverity::Warning,
                message: format!(
                    "cannot open `{}` (searched: {}); the rest of the file was checked without it. Add its folder to the `cuda.includePaths` setting or to compile_commands.json (docs/project-setup.md)",
                    m.header,
                    searched.join(", ")
                ),
                header: None,
            }
        })
        .collect()
}

/// Checks the whole file with nvcc (`tc.nvcc`), as the project builds it, then runs
/// ptxas on the PTX for resources. `Err` when nvcc itself cannot run (no host
/// compiler, a flag it refuses): the caller checks with NVRTC instead and says why.
///
/// Where a header was missing, host code that may use it cannot be judged: the
/// caller drops errors on host-only lines and in headers ([`CheckResult::missing_headers`]).
pub fn check_file_with_nvcc(
    tc: &Toolchain,
    nvcc: &std::path::Path,
    file: &std::path::Path,
    text: &str,
    defines: &[(String, String)],
    project: &ProjectFlags,
) -> Result<CheckResult, ToolError> {
    let out = nvcc::check_with_nvcc(
        nvcc,
        &nvcc::NvccRequest {
            file,
            text,
            project,
            defines,
            arch: &tc.arch,
            timeout: nvcc::NVCC_TIMEOUT,
        },
    )?;
    let mut messages = out.messages;
    messages.extend(missing_include_warnings(&out.missing, text, project));
    messages.sort_by_key(|m| (m.line, m.col_start));
    let mut result = CheckResult {
        messages,
        ptx_ok: out.ptx.is_some(),
        missing_headers: out.missing.iter().map(|m| m.header.clone()).collect(),
        ..CheckResult::default()
    };
    if let Some(ptx) = out.ptx {
        match &tc.ptxas {
            None => result.note = Some("ptxas not found: no register counts".to_string()),
            Some(ptxas) => match ptxas_resources(ptxas, &ptx, &tc.arch, PTXAS_TIMEOUT) {
                Ok(r) => result.resources = r,
                Err(e) => result.note = Some(format!("no register counts: {e}")),
            },
        }
    }
    Ok(result)
}
