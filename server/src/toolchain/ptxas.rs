//! ptxas: assembling PTX for one architecture to learn each kernel's registers, shared
//! memory, stack and spills (`ptxas -v`), and matching ptxas's (mangled) symbols to the
//! kernel names the author wrote.
//!
//! [`parse_ptxas_verbose`] and [`symbol_matches`] are pure; [`ptxas_resources`] runs the
//! tool in a private temporary folder and kills it at the deadline.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::process::run_with_timeout;
use super::ToolError;

/// What ptxas reports for one entry function (kernel).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelResources {
    /// The symbol as ptxas prints it: a plain name for `extern "C"`, else Itanium-mangled.
    pub symbol: String,
    pub registers: u32,
    /// Static shared memory (`smem`); dynamic shared memory is a launch parameter.
    pub shared_bytes: u64,
    /// The kernel's stack: the cumulative stack size when ptxas gives it (calls
    /// included), else its own frame.
    pub stack_bytes: u64,
    pub spill_stores: u64,
    pub spill_loads: u64,
    /// Sum of the `cmem[N]` banks ptxas lists (older ptxas; 12.x prints none).
    pub constant_bytes: u64,
}

/// Assembles `ptx` for `arch` (`sm_90`) with `ptxas -v` and returns each kernel's resources.
pub fn ptxas_resources(
    ptxas: &Path,
    ptx: &str,
    arch: &str,
    timeout: Duration,
) -> Result<Vec<KernelResources>, ToolError> {
    ptxas_resources_with_args(ptxas, ptx, arch, &[], timeout)
}

/// [`ptxas_resources`] with extra ptxas arguments (e.g. `-maxrregcount=32`); they are
/// passed as separate arguments, never through a shell.
pub fn ptxas_resources_with_args(
    ptxas: &Path,
    ptx: &str,
    arch: &str,
    extra_args: &[String],
    timeout: Duration,
) -> Result<Vec<KernelResources>, ToolError> {
    let sm = sm_arch(arch)?;
    let dir = TempDir::new()?;
    let input = dir.path.join("kernel.ptx");
    let output = dir.path.join("kernel.cubin");
    fs::write(&input, ptx).map_err(|e| ToolError::Io {
        what: format!("writing {}", input.display()),
        reason: e.to_string(),
    })?;
    let mut cmd = Command::new(ptxas);
    cmd.arg(format!("-arch={sm}"))
        .arg("-v")
        .arg("--warn-on-spills")
        .args(extra_args)
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .current_dir(&dir.path);
    let done = run_with_timeout(cmd, timeout, "ptxas")?;
    // ptxas -v writes its report to stderr; some builds use stdout. Read both.
    let report = format!("{}\n{}", done.stderr, done.stdout);
    if !done.status.success() {
        let detail: Vec<&str> = report
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains("ptxas info"))
            .take(8)
            .collect();
        return Err(ToolError::PtxasFailed {
            status: done.status.to_string(),
            stderr: detail.join("\n"),
        });
    }
    Ok(parse_ptxas_verbose(&report))
}

/// `sm_90`, `sm_90a`, or `compute_90` → `sm_90`-style, the only form ptxas takes.
pub(crate) fn sm_arch(arch: &str) -> Result<String, ToolError> {
    let digits_and_suffix = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))
        .unwrap_or("");
    let digits = digits_and_suffix.trim_end_matches(|c: char| c.is_ascii_lowercase());
    let suffix = &digits_and_suffix[digits.len()..];
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) || suffix.len() > 1 {
        return Err(ToolError::InvalidArch {
            arch: arch.to_string(),
        });
    }
    Ok(format!("sm_{digits_and_suffix}"))
}

/// Parses `ptxas -v` output into one record per entry function, in ptxas's order.
///
/// Non-entry functions (`__noinline__` device functions) get "Function properties"
/// lines too; they are not kernels and are left out.
pub fn parse_ptxas_verbose(stderr: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    // Index of the entry being described, and whether the properties block is for it.
    let mut entry: Option<usize> = None;
    let mut props_for_entry = false;
    let mut frame_bytes: Vec<u64> = Vec::new();
    for raw in stderr.lines() {
        let line = raw
            .split_once(" : ")
            .filter(|(head, _)| head.starts_with("ptxas"))
            .map(|(_, rest)| rest)
            .unwrap_or(raw)
            .trim();
        if let Some(rest) = line.strip_prefix("Compiling entry function '") {
            let symbol = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources {
                symbol,
                ..KernelResources::default()
            });
            frame_bytes.push(0);
            entry = Some(out.len() - 1);
            props_for_entry = false;
        } else if let Some(sym) = line.strip_prefix("Function properties for ") {
            props_for_entry = entry.is_some_and(|e| out[e].symbol == sym.trim());
        } else if line.contains("bytes stack frame") {
            if let (true, Some(e)) = (props_for_entry, entry) {
                for part in line.split(',') {
                    let n = leading_number(part);
                    if part.contains("stack frame") {
                        frame_bytes[e] = n;
                    } else if part.contains("spill stores") {
                        out[e].spill_stores = n;
                    } else if part.contains("spill loads") {
                        out[e].spill_loads = n;
                    }
                }
            }
        } else if let Some(rest) = line.strip_prefix("Used ") {
            let Some(e) = entry else { continue };
            for part in rest.split(',') {
                let n = leading_number(part);
                let part = part.trim();
                if part.ends_with("registers") {
                    out[e].registers = n as u32;
                } else if part.ends_with("bytes smem") {
                    out[e].shared_bytes = n;
                } else if part.ends_with("cumulative stack size") {
                    out[e].stack_bytes = n;
                } else if part.contains("bytes cmem[") {
                    out[e].constant_bytes += n;
                }
            }
        }
    }
    for (r, frame) in out.iter_mut().zip(frame_bytes) {
        r.stack_bytes = r.stack_bytes.max(frame);
    }
    out
}

fn leading_number(s: &str) -> u64 {
    let s = s.trim_start();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().unwrap_or(0)
}

/// Whether ptxas's `symbol` is the kernel the author calls `kernel_name`.
///
/// `kernel_name` may be plain (`saxpy`), qualified (`ns::inner`) or carry template
/// arguments (`tmpl<float, 128>`, which are ignored: every instantiation matches).
/// `symbol` is either the plain `extern "C"` name or an Itanium-mangled name
/// (`_Z4tmplIfLi128EEvPT_`, `_ZN2ns5innerEPi`).
pub fn symbol_matches(symbol: &str, kernel_name: &str) -> bool {
    let plain = strip_template_args(kernel_name);
    let wanted: Vec<&str> = plain
        .trim()
        .trim_start_matches("::")
        .split("::")
        .map(str::trim)
        .collect();
    if wanted.iter().any(|w| w.is_empty()) {
        return false;
    }
    if wanted.len() == 1 && symbol == wanted[0] {
        return true;
    }
    let Some(names) = mangled_name_components(symbol) else {
        return false;
    };
    names.len() >= wanted.len() && names[names.len() - wanted.len()..] == wanted[..]
}

fn strip_template_args(name: &str) -> String {
    let mut depth = 0usize;
    let mut out = String::new();
    for c in name.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The qualified name of a mangled function: `_ZN2ns5innerEPi` → `["ns", "inner"]`.
/// Only the encoding's name is read, not its parameter types.
fn mangled_name_components(symbol: &str) -> Option<Vec<&str>> {
    let rest = symbol.strip_prefix("_Z")?;
    let rest = rest.strip_prefix('L').unwrap_or(rest);
    let b = rest.as_bytes();
    if b.first() == Some(&b'N') {
        let mut i = 1;
        // CV and ref qualifiers of member functions.
        while i < b.len() && matches!(b[i], b'r' | b'V' | b'K' | b'R' | b'O') {
            i += 1;
        }
        let mut names = Vec::new();
        while i < b.len() && b[i] != b'E' {
            match b[i] {
                b'0'..=b'9' => {
                    let (name, next) = source_name(rest, i)?;
                    names.push(name);
                    i = next;
                }
                b'I' => i = skip_template_args(b, i)?,
                // Substitutions (`S_`, `S0_`) and `St` (std::) carry no new name.
                b'S' => {
                    i += 1;
                    if b.get(i) == Some(&b't') {
                        i += 1;
                    } else {
                        while i < b.len() && b[i] != b'_' {
                            i += 1;
                        }
                        i += 1;
                    }
                }
                _ => return None,
            }
        }
        (!names.is_empty()).then_some(names)
    } else {
        let (name, _) = source_name(rest, 0)?;
        Some(vec![name])
    }
}

/// `<len><identifier>` at `i`; returns the identifier and the index after it.
fn source_name(s: &str, i: usize) -> Option<(&str, usize)> {
    let b = s.as_bytes();
    let mut j = i;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    let len: usize = s.get(i..j)?.parse().ok()?;
    let name = s.get(j..j + len)?;
    Some((name, j + len))
}

/// Skips `I ... E` starting at `b[i] == b'I'`, nesting included.
fn skip_template_args(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'I' | b'N' | b'X' | b'J' => {
                depth += 1;
                i += 1;
            }
            b'E' => {
                depth = depth.checked_sub(1)?;
                i += 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            // A literal: `L <builtin type> [n] <digits> E`, e.g. `Li128E`.
            b'L' if b.get(i + 1).is_some_and(|c| c.is_ascii_lowercase()) => {
                i += 2;
                while i < b.len() && b[i] != b'E' {
                    i += 1;
                }
                i += 1;
            }
            b'L' => {
                depth += 1;
                i += 1;
            }
            b'0'..=b'9' => {
                let s = std::str::from_utf8(b).ok()?;
                let (_, next) = source_name(s, i)?;
                i = next;
            }
            _ => i += 1,
        }
    }
    None
}

/// A private folder under the system temp dir, removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> Result<Self, ToolError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut last_err = String::new();
        for _ in 0..8 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(format!(
                "kernel-lsp-ptxas-{}-{n}-{nanos}",
                std::process::id()
            ));
            // create_dir (not create_dir_all) fails if it exists: the folder is ours alone.
            match fs::create_dir(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) => last_err = e.to_string(),
            }
        }
        Err(ToolError::Io {
            what: format!("creating a temporary folder in {}", base.display()),
            reason: last_err,
        })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    /// Real `ptxas -arch=sm_90 -v --warn-on-spills -maxrregcount=24` output (CUDA 12.9
    /// wheel) for kernels covering shared memory, spills, a call with a stack, a
    /// `__noinline__` device function, C++ and template names.
    const PTXAS_OUT: &str = "ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : Overriding maximum register limit 256 for '_ZN2ns5innerEPi' with  24 of maxrregcount option
ptxas info    : Overriding maximum register limit 256 for 'spill' with  24 of maxrregcount option
ptxas warning : Registers are spilled to local memory in function 'spill', 4 bytes spill stores, 4 bytes spill loads
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2ns5innerEPi' for 'sm_90'
ptxas info    : Function properties for _ZN2ns5innerEPi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 1.527 ms
ptxas info    : Compiling entry function '_Z4tmplIfLi128EEvPT_' for 'sm_90'
ptxas info    : Function properties for _Z4tmplIfLi128EEvPT_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 512 bytes smem
ptxas info    : Compile time = 1.302 ms
ptxas info    : Compiling entry function 'calls' for 'sm_90'
ptxas info    : Function properties for calls
    128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 23 registers, used 0 barriers, 128 bytes cumulative stack size
ptxas info    : Compile time = 2.397 ms
ptxas info    : Function properties for _Z6helperPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
    1040 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1040 bytes cumulative stack size
ptxas info    : Compile time = 23.958 ms
ptxas info    : Compiling entry function 'saxpy' for 'sm_90'
ptxas info    : Function properties for saxpy
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 1.109 ms
";

    fn render(rs: &[KernelResources]) -> String {
        rs.iter()
            .map(|r| {
                format!(
                    "{} regs={} smem={} stack={} spill={}/{} cmem={}\n",
                    r.symbol,
                    r.registers,
                    r.shared_bytes,
                    r.stack_bytes,
                    r.spill_stores,
                    r.spill_loads,
                    r.constant_bytes
                )
            })
            .collect()
    }

    #[test]
    fn parses_real_ptxas_output() {
        expect![[r#"
            _ZN2ns5innerEPi regs=8 smem=0 stack=0 spill=0/0 cmem=0
            _Z4tmplIfLi128EEvPT_ regs=10 smem=512 stack=0 spill=0/0 cmem=0
            calls regs=23 smem=0 stack=128 spill=0/0 cmem=0
            spill regs=24 smem=0 stack=1040 spill=4/4 cmem=0
            saxpy regs=10 smem=0 stack=0 spill=0/0 cmem=0
        "#]]
        .assert_eq(&render(&parse_ptxas_verbose(PTXAS_OUT)));
    }

    #[test]
    fn parses_older_cmem_format() {
        // CUDA 11-era ptxas lists constant banks on the "Used" line.
        let old = "ptxas info    : Compiling entry function '_Z3addPfS_' for 'sm_80'\nptxas info    : Function properties for _Z3addPfS_\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 8 registers, 368 bytes cmem[0], 4 bytes cmem[2]\n";
        expect![[r#"
            _Z3addPfS_ regs=8 smem=0 stack=0 spill=0/0 cmem=372
        "#]]
        .assert_eq(&render(&parse_ptxas_verbose(old)));
        assert!(parse_ptxas_verbose("").is_empty());
        assert!(parse_ptxas_verbose("garbage\nUsed lots of registers\n").is_empty());
    }

    #[test]
    fn symbols_match_kernel_names() {
        let cases = [
            ("saxpy", "saxpy", true),
            ("saxpy", "sax", false),
            ("_Z10cpp_kernelPf", "cpp_kernel", true),
            ("_Z10cpp_kernelPf", "cpp_kernel2", false),
            ("_Z4tmplIfLi128EEvPT_", "tmpl", true),
            ("_Z4tmplIfLi128EEvPT_", "tmpl<float, 128>", true),
            ("_Z4tmplIfLi128EEvPT_", "tmp", false),
            ("_ZN2ns5innerEPi", "inner", true),
            ("_ZN2ns5innerEPi", "ns::inner", true),
            ("_ZN2ns5innerEPi", "other::inner", false),
            ("_ZN2ns5innerEPi", "ns", false),
            ("_ZN12_GLOBAL__N_16kernelEv", "kernel", true),
            ("_ZN2ns4tmplIiEEvPT_", "ns::tmpl", true),
            ("_ZL6staticPf", "static", true),
            ("_Z", "x", false),
            ("_Z99x", "x", false),
            ("_ZN", "x", false),
            ("saxpy", "", false),
        ];
        for (sym, name, want) in cases {
            assert_eq!(symbol_matches(sym, name), want, "{sym} vs {name}");
        }
    }

    #[test]
    fn arch_forms() {
        assert_eq!(sm_arch("sm_90").ok().as_deref(), Some("sm_90"));
        assert_eq!(sm_arch("sm_90a").ok().as_deref(), Some("sm_90a"));
        assert_eq!(sm_arch("compute_80").ok().as_deref(), Some("sm_80"));
        for bad in ["", "sm_", "sm_9", "90", "sm_90 -o x", "sm_90ab"] {
            assert!(sm_arch(bad).is_err(), "{bad}");
        }
    }
}
