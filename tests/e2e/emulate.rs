//! Running CUDA kernels on the CPU, for the rewrite tests: an original kernel and its
//! rewritten candidates are compiled together as C++ (g++) against
//! `tests/fixtures/rewrites/emulator.h`, which runs every thread of a block as a fiber
//! that meets the others at `__syncthreads()` and at warp shuffles and ballots, so
//! shared memory, barriers and shuffles behave as on a GPU (one interleaving of them).
//! Every case of the spec runs on the same seeded inputs (drawn from each buffer's
//! distribution) for every version, with guard elements past each buffer, and every
//! buffer must match the original's within the spec's tolerance (floats) or exactly.
//! A collective whose mask names an exited lane, a deadlock at a barrier, or a
//! difference fails with the version, buffer, index and both values.
//!
//! What it cannot show: a race that this one interleaving happens to win, timing, or
//! anything of `__half`/`__nv_bfloat16` (not emulated).

use std::path::PathBuf;
use std::process::Command;

use kernel_lsp::analysis::{self, AnalyzeOptions};
use kernel_lsp::document::Document;
use kernel_lsp::spec::{Arg, BenchPlan, DType, Dist, EvalEnv, Launch, Role, Value};
use kernel_lsp::syntax::Lang;

/// g++ on PATH, or why not.
pub fn gxx() -> Result<(), String> {
    match Command::new("g++").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("no g++ on PATH to run the kernels' C++ on the CPU".into()),
    }
}

struct Version {
    label: String,
    /// The kernel's source (device slice, includes and `extern "C"` removed).
    source: String,
    kernel: String,
    plan: BenchPlan,
}

fn c_type(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 => "int",
        DType::U32 => "unsigned",
        DType::I64 => "long long",
        DType::U8 => "unsigned char",
        DType::I8 => "signed char",
        DType::I16 => "short",
        _ => return None,
    })
}

fn version(label: &str, text: &str, kernel: &str, sms: u32) -> Result<Version, String> {
    let doc = Document::new(Lang::Cuda, 0, text);
    let opts = AnalyzeOptions {
        env: EvalEnv { sms: sms.into() },
        ..AnalyzeOptions::default()
    };
    let file = analysis::analyze(Lang::Cuda, text, doc.tree(), &opts);
    let idx = file
        .model
        .kernels
        .iter()
        .position(|k| k.name == kernel)
        .ok_or_else(|| format!("{label}: no kernel `{kernel}`"))?;
    let plan = file.specs[idx].plan.clone().ok_or_else(|| {
        format!(
            "{label}: `{kernel}` does not plan: {:?}",
            file.specs[idx].diagnostics
        )
    })?;
    let mut source = String::new();
    for line in file.kernel_source(kernel, text).lines() {
        let t = line.trim_start();
        if t.starts_with("#include") {
            source.push('\n');
            continue;
        }
        let mut l = line.replace("extern \"C\"", "");
        // `extern __shared__ T name[];` -> a pointer into the launch's dynamic smem.
        if let Some(rest) = l.trim_start().strip_prefix("extern __shared__") {
            let decl = rest.trim().trim_end_matches(';').trim();
            if let Some(open) = decl.rfind('[') {
                let head = decl[..open].trim();
                if let Some(sp) = head.rfind(|c: char| c.is_whitespace() || c == '*') {
                    let (ty, name) = (head[..=sp].trim(), head[sp + 1..].trim());
                    let ty = ty.replace("__align__(16)", "").replace("__align__(8)", "");
                    l = format!("{ty}* {name} = ({ty}*)kl::dyn_smem;");
                }
            }
        }
        source.push_str(&l);
        source.push('\n');
    }
    Ok(Version {
        label: label.to_string(),
        source,
        kernel: kernel.to_string(),
        plan,
    })
}

fn literal(v: &Value) -> String {
    match v {
        Value::Int(i) => format!("{i}"),
        Value::Float(f) => format!("{f:e}"),
    }
}

fn program(versions: &[Version]) -> Result<String, String> {
    let mut p = String::from("#include \"emulator.h\"\n");
    for (v, ver) in versions.iter().enumerate() {
        p.push_str(&format!("namespace v{v} {{\n"));
        for (name, value) in &ver.plan.defines {
            p.push_str(&format!("#define {name} {value}\n"));
        }
        p.push_str(&ver.source);
        for (name, _) in &ver.plan.defines {
            p.push_str(&format!("#undef {name}\n"));
        }
        p.push_str("}\n");
    }
    p.push_str(
        "static unsigned long long kl_rng;\nstatic double kl_uniform() { kl_rng = kl_rng * 6364136223846793005ULL + 1442695040888963407ULL; return (double)(kl_rng >> 11) / 9007199254740992.0; }\n",
    );
    p.push_str("int main() {\n    int bad = 0;\n");
    let base = &versions[0].plan;
    let atol = base.atol;
    let rtol = base.rtol;
    for case in 0..base.cases.len() {
        p.push_str(&format!("    {{ // case {case}\n"));
        let c0 = &base.cases[case];
        // Inputs, once per case.
        for (b, a) in c0.args.iter().enumerate() {
            let Arg::Buffer {
                name,
                dtype,
                elems,
                dist,
                role,
                ..
            } = a
            else {
                continue;
            };
            let ty = c_type(*dtype).ok_or_else(|| format!("no emulation for {dtype:?} buffers"))?;
            let n = elems + 64;
            let float = matches!(dtype, DType::F32 | DType::F64);
            let value = match (role, dist) {
                (Role::Out, _) if float => "NAN".to_string(),
                (Role::Out, _) => "0x5a".to_string(),
                (_, Dist::Uniform { lo, hi }) => format!("{lo:e} + ({hi:e} - {lo:e}) * kl_uniform()"),
                (_, Dist::Normal { mean, std }) => format!(
                    "{mean:e} + {std:e} * sqrt(-2.0 * log(kl_uniform() + 1e-12)) * cos(6.283185307179586 * kl_uniform())"
                ),
                (_, Dist::RandInt { lo, hi }) => {
                    format!("{lo} + (long long)(kl_uniform() * ({hi} - {lo}))")
                }
                (_, Dist::Zeros) => "0".into(),
                (_, Dist::Ones) => "1".into(),
                (_, Dist::Arange) => "i".into(),
            };
            p.push_str(&format!(
                "        kl_rng = {};\n        std::vector<{ty}> {name}_in({n});\n        for (long long i = 0; i < {n}; ++i) {name}_in[i] = ({ty})({value});\n",
                1000 * case + b + 1
            ));
        }
        for (v, ver) in versions.iter().enumerate() {
            let c = ver
                .plan
                .cases
                .get(case)
                .ok_or_else(|| format!("{}: no case {case}", ver.label))?;
            let mut call = Vec::new();
            for a in &c.args {
                match a {
                    Arg::Buffer { name, dtype, .. } => {
                        p.push_str(&format!("        auto {name}_{v} = {name}_in;\n"));
                        call.push(match dtype {
                            DType::I64 => format!("kl::ptr64{{{name}_{v}.data()}}"),
                            _ => format!("{name}_{v}.data()"),
                        });
                    }
                    Arg::Scalar { value, .. } | Arg::Constexpr { value, .. } => {
                        call.push(literal(value))
                    }
                    Arg::None { .. } => call.push("nullptr".into()),
                }
            }
            let targs: Vec<String> = c
                .template_args
                .iter()
                .map(|a| match a {
                    Arg::Constexpr { value, .. } | Arg::Scalar { value, .. } => literal(value),
                    Arg::Buffer { name, .. } | Arg::None { name } => name.clone(),
                })
                .collect();
            let callee = if targs.is_empty() {
                format!("v{v}::{}", ver.kernel)
            } else {
                format!("v{v}::{}<{}>", ver.kernel, targs.join(", "))
            };
            let Launch::Cuda { grid, block, smem } = &c.launch else {
                return Err("not a CUDA launch".into());
            };
            p.push_str(&format!(
                "        kl::launch(dim3{{{}, {}, {}}}, dim3{{{}, {}, {}}}, {smem}, [&] {{ {callee}({}); }});\n",
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                call.join(", ")
            ));
            if v == 0 {
                continue;
            }
            for a in &c.args {
                let Arg::Buffer {
                    name, dtype, elems, ..
                } = a
                else {
                    continue;
                };
                let n = elems + 64;
                let (at, rt) = match dtype {
                    DType::F32 => (atol.unwrap_or(1e-5), rtol.unwrap_or(1e-4)),
                    DType::F64 => (atol.unwrap_or(1e-9), rtol.unwrap_or(1e-9)),
                    _ => (0.0, 0.0),
                };
                p.push_str(&format!(
                    "        for (long long i = 0; i < {n}; ++i) {{ double a = (double){name}_{v}[i], b = (double){name}_0[i]; bool same = (a != a && b != b) || std::fabs(a - b) <= {at:e} + {rt:e} * std::fabs(b); if (!same) {{ std::printf(\"%s case {case}: {name}[%lld] = %.9g, original %.9g%s\\n\", \"{label}\", i, a, b, i >= {elems} ? \" (guard element past the end)\" : \"\"); bad = 1; break; }} }}\n",
                    label = ver.label.replace('"', "'")
                ));
            }
        }
        p.push_str("    }\n");
    }
    p.push_str("    return bad;\n}\n");
    Ok(p)
}

/// Runs the original and every candidate on every case of the original's spec (each
/// candidate under its own launch) and compares every buffer. `sms` is the value of
/// the spec's `sms` (small, so a capped grid loops). Err: the differences or emulator
/// errors found, or why the program could not be built.
pub fn compare(
    original: &str,
    kernel: &str,
    candidates: &[(String, String)],
    sms: u32,
) -> Result<(), String> {
    let mut versions = vec![version("original", original, kernel, sms)?];
    for (label, text) in candidates {
        versions.push(version(label, text, kernel, sms)?);
    }
    let src = program(&versions)?;
    // A folder per call: tests (and threads of one test) emulate at the same time.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-emulate-{}-{kernel}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let cpp = dir.join("k.cpp");
    let exe = dir.join("k");
    std::fs::write(&cpp, &src).map_err(|e| e.to_string())?;
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/rewrites");
    let built = Command::new("g++")
        .args(["-std=c++17", "-O1", "-w", "-ffp-contract=off", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&cpp)
        .output()
        .map_err(|e| e.to_string())?;
    if !built.status.success() {
        return Err(format!(
            "g++ failed:\n{}\n{src}",
            String::from_utf8_lossy(&built.stderr)
        ));
    }
    let ran = Command::new(&exe).output().map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&dir).ok();
    if ran.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    ))
}
