//! NVRTC, loaded at run time with `libloading`: compiling CUDA C++ to PTX on the CPU.
//!
//! Never linked: a machine without CUDA gets a [`ToolError`] from the locator, not a
//! loader failure at start-up. The driver (`libcuda`) is never loaded here.
//!
//! NVRTC allows concurrent calls on different programs; every [`Nvrtc::compile`] creates
//! and destroys its own program, so one [`Nvrtc`] is shared freely across threads.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock};

use libloading::Library;
use serde::{Deserialize, Serialize};

use super::nvrtc_log::{parse_nvrtc_log, CompilerMessage, MessageSeverity};
use super::ptxas::sm_arch;
use super::ToolError;

type NvrtcResult = c_int;
type Program = *mut c_void;

const NVRTC_SUCCESS: NvrtcResult = 0;

/// The entry points we use, copied out of the library. They stay valid because
/// [`Loaded`] keeps the [`Library`] alive and is never unloaded while an `Nvrtc` exists.
#[derive(Clone, Copy)]
struct Fns {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult,
    get_program_log_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    get_program_log: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    get_ptx_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    add_name_expression: unsafe extern "C" fn(Program, *const c_char) -> NvrtcResult,
    get_lowered_name:
        unsafe extern "C" fn(Program, *const c_char, *mut *const c_char) -> NvrtcResult,
    destroy_program: unsafe extern "C" fn(*mut Program) -> NvrtcResult,
    get_error_string: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
}

struct Loaded {
    path: PathBuf,
    version: (i32, i32),
    fns: Fns,
    _lib: Library,
}

/// A loaded NVRTC. Cheap to clone (shared), `Send + Sync`.
#[derive(Clone)]
pub struct Nvrtc {
    inner: Arc<Loaded>,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.inner.path)
            .field("version", &self.inner.version)
            .finish()
    }
}

/// One compilation: the source NVRTC sees and how to compile it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileRequest {
    pub source: String,
    /// The program's file name, e.g. `kernel.cu`; the log's messages name it.
    pub program_name: String,
    /// NVRTC options, one per element (see [`default_options`]).
    pub options: Vec<String>,
    /// C++ names whose mangled (lowered) names are wanted, e.g. `tmpl<float, 128>`.
    pub name_expressions: Vec<String>,
    /// In-memory headers, `(include name, contents)`, e.g. the [`std_header_shims`].
    pub headers: Vec<(String, String)>,
}

/// What NVRTC made of a [`CompileRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileOutput {
    pub success: bool,
    pub log: String,
    pub ptx: Option<String>,
    /// `(name expression, lowered name)` for each expression NVRTC could lower.
    pub lowered_names: Vec<(String, String)>,
    /// The log parsed against the request's source; also any failure outside the log.
    pub messages: Vec<CompilerMessage>,
}

impl Nvrtc {
    /// Loads NVRTC from `path` (a file, or a bare name for the system loader to find).
    /// A path already loaded in this process is reused.
    pub fn load(path: &Path) -> Result<Nvrtc, ToolError> {
        static CACHE: OnceLock<Mutex<HashMap<PathBuf, Nvrtc>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        if let Some(n) = cache.lock().ok().and_then(|c| c.get(path).cloned()) {
            return Ok(n);
        }
        let n = Self::load_uncached(path)?;
        if let Ok(mut c) = cache.lock() {
            c.insert(path.to_path_buf(), n.clone());
        }
        Ok(n)
    }

    fn load_uncached(path: &Path) -> Result<Nvrtc, ToolError> {
        let unusable = |reason: String| ToolError::NvrtcUnusable {
            path: path.to_path_buf(),
            reason,
        };
        // SAFETY: loading NVRTC runs its initializers, which only set up the library;
        // it has no global constructors that touch the GPU or the driver.
        let lib = unsafe { Library::new(path.as_os_str()) }.map_err(|e| unusable(e.to_string()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the signature matches nvrtc.h for this entry point.
                *unsafe { lib.get($name) }.map_err(|e| {
                    unusable(format!(
                        "it lacks {} ({e})",
                        String::from_utf8_lossy(&$name[..$name.len() - 1])
                    ))
                })?
            };
        }
        let fns = Fns {
            version: sym!(b"nvrtcVersion\0"),
            create_program: sym!(b"nvrtcCreateProgram\0"),
            compile_program: sym!(b"nvrtcCompileProgram\0"),
            get_program_log_size: sym!(b"nvrtcGetProgramLogSize\0"),
            get_program_log: sym!(b"nvrtcGetProgramLog\0"),
            get_ptx_size: sym!(b"nvrtcGetPTXSize\0"),
            get_ptx: sym!(b"nvrtcGetPTX\0"),
            add_name_expression: sym!(b"nvrtcAddNameExpression\0"),
            get_lowered_name: sym!(b"nvrtcGetLoweredName\0"),
            destroy_program: sym!(b"nvrtcDestroyProgram\0"),
            get_error_string: sym!(b"nvrtcGetErrorString\0"),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        let rc = unsafe { (fns.version)(&mut major, &mut minor) };
        if rc != NVRTC_SUCCESS {
            return Err(unusable(format!("nvrtcVersion failed with code {rc}")));
        }
        Ok(Nvrtc {
            inner: Arc::new(Loaded {
                path: path.to_path_buf(),
                version: (major, minor),
                fns,
                _lib: lib,
            }),
        })
    }

    /// NVRTC's `(major, minor)` version, e.g. `(12, 9)`.
    pub fn version(&self) -> (i32, i32) {
        self.inner.version
    }

    /// Where it was loaded from (a bare name when the system loader found it).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn error_string(&self, rc: NvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string (or null) for any code.
        let p = unsafe { (self.inner.fns.get_error_string)(rc) };
        if p.is_null() {
            return format!("NVRTC error {rc}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Compiles `req`. Never fails as a call: every failure is in the output's
    /// `success`, `log` and `messages`.
    pub fn compile(&self, req: &CompileRequest) -> CompileOutput {
        let fns = self.inner.fns;
        let fail = |text: String| CompileOutput {
            success: false,
            log: text.clone(),
            messages: vec![line_zero(&req.source, MessageSeverity::Error, text)],
            ..CompileOutput::default()
        };
        let Ok(source) = CString::new(req.source.as_str()) else {
            return fail("the source contains a NUL byte; NVRTC cannot compile it".into());
        };
        let Ok(name) = CString::new(req.program_name.as_str()) else {
            return fail("the program name contains a NUL byte".into());
        };
        let Some(options) = c_strings(&req.options) else {
            return fail("an NVRTC option contains a NUL byte".into());
        };
        let header_names: Vec<String> = req.headers.iter().map(|h| h.0.clone()).collect();
        let header_texts: Vec<String> = req.headers.iter().map(|h| h.1.clone()).collect();
        let (Some(hnames), Some(htexts)) = (c_strings(&header_names), c_strings(&header_texts))
        else {
            return fail("an in-memory header contains a NUL byte".into());
        };
        let Some(exprs) = c_strings(&req.name_expressions) else {
            return fail("a name expression contains a NUL byte".into());
        };
        let opt_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let hname_ptrs: Vec<*const c_char> = hnames.iter().map(|o| o.as_ptr()).collect();
        let htext_ptrs: Vec<*const c_char> = htexts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: Program = ptr::null_mut();
        // SAFETY: all pointers point into CStrings and Vecs that outlive the call; the
        // header arrays have `headers.len()` elements.
        let rc = unsafe {
            (fns.create_program)(
                &mut prog,
                source.as_ptr(),
                name.as_ptr(),
                htext_ptrs.len() as c_int,
                if htext_ptrs.is_empty() {
                    ptr::null()
                } else {
                    htext_ptrs.as_ptr()
                },
                if hname_ptrs.is_empty() {
                    ptr::null()
                } else {
                    hname_ptrs.as_ptr()
                },
            )
        };
        if rc != NVRTC_SUCCESS || prog.is_null() {
            return fail(format!(
                "nvrtcCreateProgram failed: {}",
                self.error_string(rc)
            ));
        }
        let prog = ProgramGuard { fns, prog };

        let mut extra_messages = Vec::new();
        for (e, text) in exprs.iter().zip(&req.name_expressions) {
            // SAFETY: live program, NUL-terminated expression.
            let rc = unsafe { (fns.add_name_expression)(prog.prog, e.as_ptr()) };
            if rc != NVRTC_SUCCESS {
                extra_messages.push(line_zero(
                    &req.source,
                    MessageSeverity::Warning,
                    format!("name expression `{text}`: {}", self.error_string(rc)),
                ));
            }
        }

        // SAFETY: live program; `opt_ptrs` has `options.len()` valid C strings.
        let rc = unsafe {
            (fns.compile_program)(
                prog.prog,
                opt_ptrs.len() as c_int,
                if opt_ptrs.is_empty() {
                    ptr::null()
                } else {
                    opt_ptrs.as_ptr()
                },
            )
        };
        let log = self.read_string(prog.prog, fns.get_program_log_size, fns.get_program_log);
        let mut messages = parse_nvrtc_log(&log, &req.program_name, &req.source);
        let success = rc == NVRTC_SUCCESS;
        if !success
            && !messages
                .iter()
                .any(|m| m.severity == MessageSeverity::Error)
        {
            // E.g. NVRTC_ERROR_INVALID_OPTION with an empty log: still tell the author.
            messages.push(line_zero(
                &req.source,
                MessageSeverity::Error,
                format!("NVRTC failed: {}", self.error_string(rc)),
            ));
        }
        messages.extend(extra_messages);

        let mut ptx = None;
        let mut lowered_names = Vec::new();
        if success {
            ptx = Some(self.read_string(prog.prog, fns.get_ptx_size, fns.get_ptx));
            for (e, text) in exprs.iter().zip(&req.name_expressions) {
                let mut lowered: *const c_char = ptr::null();
                // SAFETY: live, compiled program; the lowered name is owned by it and
                // copied out before the guard destroys the program.
                let rc = unsafe { (fns.get_lowered_name)(prog.prog, e.as_ptr(), &mut lowered) };
                if rc == NVRTC_SUCCESS && !lowered.is_null() {
                    // SAFETY: non-null NUL-terminated string owned by the program.
                    let s = unsafe { CStr::from_ptr(lowered) }
                        .to_string_lossy()
                        .into_owned();
                    lowered_names.push((text.clone(), s));
                }
            }
        }
        CompileOutput {
            success,
            log,
            ptx,
            lowered_names,
            messages,
        }
    }

    fn read_string(
        &self,
        prog: Program,
        size_fn: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
        get_fn: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    ) -> String {
        let mut size = 0usize;
        // SAFETY: live program, valid out-pointer.
        if unsafe { size_fn(prog, &mut size) } != NVRTC_SUCCESS || size == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has the `size` bytes NVRTC asked for, terminating NUL included.
        if unsafe { get_fn(prog, buf.as_mut_ptr().cast()) } != NVRTC_SUCCESS {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }
}

/// Destroys the NVRTC program however `compile` returns.
struct ProgramGuard {
    fns: Fns,
    prog: Program,
}

impl Drop for ProgramGuard {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed exactly once, here.
        unsafe {
            (self.fns.destroy_program)(&mut self.prog);
        }
    }
}

fn c_strings(items: &[String]) -> Option<Vec<CString>> {
    items
        .iter()
        .map(|s| CString::new(s.as_str()).ok())
        .collect()
}

fn line_zero(source: &str, severity: MessageSeverity, message: String) -> CompilerMessage {
    let first = source.lines().next().unwrap_or("");
    let start = first.len() - first.trim_start().len();
    CompilerMessage {
        line: 0,
        col_start: start as u32,
        col_end: first.trim_end().len().max(start) as u32,
        severity,
        message,
        header: None,
    }
}

/// The NVRTC options kernel-lsp compiles with: the virtual architecture of `arch`
/// (`sm_90` → `--gpu-architecture=compute_90`), C++17, each include folder, each define.
///
/// `-default-device` is deliberately not used: it would hide the "calling a `__host__`
/// function" errors nvcc gives for helpers without `__device__`.
///
/// Define names must be identifiers and values must not contain whitespace or control
/// characters: each becomes one NVRTC option, and a value like `1 -I/etc` must not
/// smuggle in another option.
pub fn default_options(
    arch: &str,
    include_dirs: &[PathBuf],
    defines: &[(String, String)],
) -> Result<Vec<String>, ToolError> {
    let sm = sm_arch(arch)?;
    let compute = format!("compute_{}", &sm["sm_".len()..]);
    let mut opts = vec![
        format!("--gpu-architecture={compute}"),
        "-std=c++17".to_string(),
    ];
    for d in include_dirs {
        opts.push(format!("-I{}", d.display()));
    }
    for (name, value) in defines {
        validate_define(name, value)?;
        opts.push(if value.is_empty() {
            format!("-D{name}")
        } else {
            format!("-D{name}={value}")
        });
    }
    Ok(opts)
}

fn validate_define(name: &str, value: &str) -> Result<(), ToolError> {
    let bad = |reason: &str| ToolError::InvalidDefine {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let mut chars = name.chars();
    let ident_start = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !ident_start || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("the name must be a C identifier (letters, digits, _)"));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            "the value must not contain spaces, tabs or newlines; each define is one compiler option",
        ));
    }
    Ok(())
}

/// `<cstdint>` and friends as in-memory headers, for the standard headers NVRTC
/// (12.x, without a host compiler) cannot open: only those not found in `include_dirs`.
/// Types follow the LP64 Linux ABI so mangled names match what nvcc produces.
pub fn std_header_shims(include_dirs: &[PathBuf]) -> Vec<(String, String)> {
    const CSTDINT: &str = concat!(
        "#pragma once
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long uint64_t; typedef long intptr_t; typedef unsigned long uintptr_t;
typedef long intmax_t; typedef unsigned long uintmax_t;
typedef signed char int_least8_t; typedef short int_least16_t; typedef int int_least32_t; typedef long int_least64_t;
typedef unsigned char uint_least8_t; typedef unsigned short uint_least16_t; typedef unsigned int uint_least32_t; typedef unsigned long uint_least64_t;
typedef signed char int_fast8_t; typedef long int_fast16_t; typedef long int_fast32_t; typedef long int_fast64_t;
typedef unsigned char uint_fast8_t; typedef unsigned long uint_fast16_t; typedef unsigned long uint_fast32_t; typedef unsigned long uint_fast64_t;
#define INT8_MIN (-128)
#define INT16_MIN (-32767-1)
#define INT32_MIN (-2147483647-1)
#define INT64_MIN (-9223372036854775807L-1)
#define INT8_MAX 127
#define INT16_MAX 32767
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807L
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615UL
#define SIZE_MAX UINT64_MAX
#define INTPTR_MAX INT64_MAX
#define UINTPTR_MAX UINT64_MAX
#define INT8_C(c) c
#define INT16_C(c) c
#define INT32_C(c) c
#define INT64_C(c) c ## L
#define UINT8_C(c) c
#define UINT16_C(c) c
#define UINT32_C(c) c ## U
#define UINT64_C(c) c ## UL
#ifdef __cplusplus
",
        std_int_usings!(),
        "#endif
"
    );
    // size_t and ptrdiff_t are predefined by NVRTC.
    const CSTDDEF: &str = "#pragma once
#ifndef NULL
#define NULL 0
#endif
#ifndef offsetof
#define offsetof(t, m) __builtin_offsetof(t, m)
#endif
#ifdef __cplusplus
namespace std { using ::size_t; using ::ptrdiff_t; typedef decltype(nullptr) nullptr_t; }
#endif
";
    let shims = [
        ("cstdint", CSTDINT),
        ("stdint.h", CSTDINT),
        ("cstddef", CSTDDEF),
        ("stddef.h", CSTDDEF),
    ];
    shims
        .iter()
        .filter(|(name, _)| !include_dirs.iter().any(|d| d.join(name).is_file()))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_for_sm_90() {
        let opts = default_options(
            "sm_90a",
            &[PathBuf::from("/opt/cuda/include")],
            &[
                ("BLOCK".into(), "256".into()),
                ("USE_FAST".into(), String::new()),
            ],
        );
        assert_eq!(
            opts.ok(),
            Some(vec![
                "--gpu-architecture=compute_90a".to_string(),
                "-std=c++17".into(),
                "-I/opt/cuda/include".into(),
                "-DBLOCK=256".into(),
                "-DUSE_FAST".into(),
            ])
        );
    }

    #[test]
    fn define_values_with_spaces_are_rejected() {
        for (name, value) in [
            ("N", "1 -I/etc"),
            ("N", "1\n#include <x>"),
            ("N", "a\tb"),
            ("1N", "2"),
            ("", "2"),
            ("N-M", "2"),
        ] {
            let err = default_options("sm_90", &[], &[(name.into(), value.into())]);
            let Err(e) = err else {
                panic!("{name}={value:?} was accepted");
            };
            assert!(matches!(e, ToolError::InvalidDefine { .. }), "{e}");
        }
        let e = default_options("sm_90", &[], &[("N".into(), "1 2".into())]).err();
        expect_test::expect![[r#"
            Some(
                "define N=1 2: the value must not contain spaces, tabs or newlines; each define is one compiler option",
            )
        "#]]
        .assert_debug_eq(&e.map(|e| e.to_string()));
        assert!(default_options("sm_90 -o /x", &[], &[]).is_err());
    }

    #[test]
    fn shims_only_for_missing_headers() {
        assert_eq!(std_header_shims(&[]).len(), 4);
    }

    #[test]
    fn nvrtc_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Nvrtc>();
    }
}
