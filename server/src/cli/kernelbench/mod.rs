//! `kernel-lsp import-kernelbench PROBLEM.py [--lang triton|cuda]`: a KernelBench-format
//! problem (`Model` with `forward`, `get_inputs()`, `get_init_inputs()`) becomes a spec'd
//! kernel skeleton whose buffers, shapes and PyTorch reference come from the problem
//! (issue #17; the mapping and its limits are in docs/spec.md, "KernelBench problems").
//!
//! The problem is Python the author brought: it runs once, on the CPU, in a child
//! `python3` (`probe.py`) that reports the inputs, the module's parameters and the
//! outputs as JSON; this process only writes text. Two files are written next to the
//! problem: the kernel skeleton and `<name>_ref.py` (the problem's text plus a
//! `reference` function that runs `Model` with the kernel's inputs), which the spec's
//! `reference = torch: <name>_ref.reference` names.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use serde::Deserialize;

use crate::spec::DType;

/// The probe's source, written to a temporary file for each run.
const PROBE_PY: &str = include_str!("probe.py");

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// A KernelBench-format problem: `class Model(nn.Module)`, `get_inputs()`,
    /// `get_init_inputs()`.
    pub problem: PathBuf,
    /// The kernel's language.
    #[arg(long, value_enum, default_value_t = KernelLang::Triton)]
    pub lang: KernelLang,
    /// Overwrite files that exist.
    #[arg(long)]
    pub force: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLang {
    Triton,
    Cuda,
}

/// What `probe.py` prints.
#[derive(Debug, Deserialize)]
pub struct Probe {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub inputs: Vec<ProbeInput>,
    #[serde(default)]
    pub params: Vec<ProbeTensor>,
    #[serde(default)]
    pub outputs: Vec<ProbeTensor>,
}

#[derive(Debug, Deserialize)]
pub struct ProbeInput {
    pub name: String,
    #[serde(default)]
    pub shape: Option<Vec<u64>>,
    #[serde(default)]
    pub dtype: Option<String>,
    /// A number input (then no shape).
    #[serde(default)]
    pub value: Option<serde_json::Number>,
}

#[derive(Debug, Deserialize)]
pub struct ProbeTensor {
    #[serde(default)]
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: String,
}

/// The two files an import writes.
#[derive(Debug, PartialEq, Eq)]
pub struct Skeleton {
    pub kernel_file: String,
    pub kernel_text: String,
    pub ref_file: String,
    pub ref_text: String,
}

pub fn run(args: &ImportArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("{msg}");
            ExitCode::from(code)
        }
    }
}

fn run_inner(args: &ImportArgs) -> Result<(), (u8, String)> {
    let shown = args.problem.display().to_string();
    let source = std::fs::read_to_string(&args.problem)
        .map_err(|e| (2, format!("{shown}: error: cannot read the problem: {e}")))?;
    let probe = probe(&args.problem).map_err(|e| (1, format!("{shown}: error: {e}")))?;
    let stem = args
        .problem
        .file_stem()
        .map_or("problem".into(), |s| s.to_string_lossy().into_owned());
    let file_name = args
        .problem
        .file_name()
        .map_or(shown.clone(), |s| s.to_string_lossy().into_owned());
    let sk = skeleton(&stem, &file_name, &source, &probe, args.lang)
        .map_err(|e| (1, format!("{shown}: error: {e}")))?;
    let dir = args.problem.parent().unwrap_or(Path::new("."));
    let targets = [
        (&sk.kernel_file, &sk.kernel_text),
        (&sk.ref_file, &sk.ref_text),
    ];
    for (name, text) in &targets {
        // The same reference for the other language is no conflict.
        let same = std::fs::read_to_string(dir.join(name)).is_ok_and(|t| &t == *text);
        if dir.join(name).exists() && !same && !args.force {
            return Err((
                1,
                format!(
                    "{}: error: exists; pass --force to overwrite it",
                    dir.join(name).display()
                ),
            ));
        }
    }
    for (name, text) in &targets {
        std::fs::write(dir.join(name), text)
            .map_err(|e| (2, format!("{}: error: {e}", dir.join(name).display())))?;
    }
    eprintln!(
        "wrote {} (the kernel to fill in) and {} (its PyTorch reference, from {shown}); then run `kernel-lsp bench {}`{}",
        dir.join(&sk.kernel_file).display(),
        dir.join(&sk.ref_file).display(),
        dir.join(&sk.kernel_file).display(),
        if args.lang == KernelLang::Cuda {
            " (a PyTorch reference verifies Triton kernels today; CUDA workers do not run one yet)"
        } else {
            ""
        }
    );
    Ok(())
}

/// Runs `probe.py` on the problem under the worker's Python (`KERNEL_LSP_PYTHON`, else
/// `python3`).
fn probe(problem: &Path) -> Result<Probe, String> {
    let python = std::env::var("KERNEL_LSP_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let script =
        std::env::temp_dir().join(format!("kernel-lsp-kb-probe-{}.py", std::process::id()));
    std::fs::write(&script, PROBE_PY).map_err(|e| format!("cannot write the probe: {e}"))?;
    let out = Command::new(&python)
        .arg(&script)
        .arg(problem)
        .env("CUDA_VISIBLE_DEVICES", "")
        .output();
    let _ = std::fs::remove_file(&script);
    let out = out.map_err(|e| {
        format!("cannot run `{python}`: {e}; set KERNEL_LSP_PYTHON to a Python with torch")
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| {
            let err = String::from_utf8_lossy(&out.stderr);
            format!(
                "running the problem under `{python}` printed no result: {}",
                err.lines().last().unwrap_or("(no output)")
            )
        })?;
    let p: Probe =
        serde_json::from_str(line).map_err(|e| format!("the probe's result is unreadable: {e}"))?;
    match p.error {
        Some(e) => Err(e),
        None => Ok(p),
    }
}

/// `float32` -> f32, and the other torch dtypes a spec has.
fn dtype_of(torch: &str) -> Option<DType> {
    Some(match torch {
        "float32" => DType::F32,
        "float16" => DType::F16,
        "bfloat16" => DType::Bf16,
        "float64" => DType::F64,
        "int8" => DType::I8,
        "int16" => DType::I16,
        "int32" => DType::I32,
        "int64" => DType::I64,
        "uint8" => DType::U8,
        "uint32" => DType::U32,
        "bool" => DType::Bool,
        _ => return None,
    })
}

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "__half",
        DType::Bf16 => "__nv_bfloat16",
        DType::F64 => "double",
        DType::I8 => "signed char",
        DType::I16 => "short",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::U8 => "unsigned char",
        DType::U32 => "unsigned",
        DType::Bool => "bool",
    }
}

/// A Python/C identifier from any text: `1_Square matmul` -> `k1_square_matmul`.
fn ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    let out = out.trim_matches('_').to_string();
    match out.chars().next() {
        None => "problem".into(),
        Some(c) if c.is_ascii_digit() => format!("k{out}"),
        Some(_) => out,
    }
}

/// One kernel argument of the skeleton.
struct Buf {
    /// The Python name in `reference(...)` (forward's parameter, or `w_<param>`).
    py: String,
    /// The kernel parameter's name.
    param: String,
    out: bool,
    dtype: DType,
    shape: Vec<u64>,
}

/// A number input of the problem, passed to the kernel as a scalar: (its Python name,
/// its value as written, whether it is a float).
type Scalar = (String, String, bool);

/// The files for `probe`'s problem (pure: text in, text out).
pub fn skeleton(
    stem: &str,
    shown: &str,
    source: &str,
    probe: &Probe,
    lang: KernelLang,
) -> Result<Skeleton, String> {
    let name = ident(stem);
    let (bufs, scalars) = kernel_arguments(probe, lang)?;
    let ref_module = format!("{name}_ref");
    let spec = spec_lines(shown, &bufs, &scalars, lang, &ref_module);
    let outs: Vec<&Buf> = bufs.iter().filter(|b| b.out).collect();
    let todo = format!(
        "TODO: compute {} from the inputs, as `Model.forward` in {shown} does.",
        outs.iter()
            .map(|b| format!("`{}`", b.param))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let kernel_name = format!("{name}_kernel");
    let (kernel_file, kernel_text) = match lang {
        KernelLang::Triton => (
            format!("{name}_kernel.py"),
            triton_kernel(shown, &spec, &kernel_name, &todo, &bufs, &scalars),
        ),
        KernelLang::Cuda => (
            format!("{name}_kernel.cu"),
            cuda_kernel(shown, &spec, &kernel_name, &todo, &bufs, &scalars),
        ),
    };
    Ok(Skeleton {
        kernel_file,
        kernel_text,
        ref_file: format!("{ref_module}.py"),
        ref_text: reference_module(source, probe, &bufs, &scalars),
    })
}

/// The kernel's arguments, in order: the problem's tensor inputs, the module's
/// parameters (`w_<name>`), the outputs (`out`, or `out0`, `out1`, ...); and its number
/// inputs as scalars. Refuses an input with neither a shape nor a value, a dtype a spec
/// cannot hold, and a forward that returns no tensor.
fn kernel_arguments(probe: &Probe, lang: KernelLang) -> Result<(Vec<Buf>, Vec<Scalar>), String> {
    let ptr = |n: &str| match lang {
        KernelLang::Triton => format!("{n}_ptr"),
        KernelLang::Cuda => n.to_string(),
    };
    let input = |py: String, dtype: DType, shape: Vec<u64>| Buf {
        param: ptr(&py),
        py,
        out: false,
        dtype,
        shape,
    };
    let mut bufs: Vec<Buf> = Vec::new();
    let mut scalars: Vec<Scalar> = Vec::new();
    for i in &probe.inputs {
        let py = ident(&i.name);
        match (&i.shape, &i.dtype, &i.value) {
            (Some(shape), Some(dtype), _) => {
                let (dtype, shape) = tensor(&format!("input `{}`", i.name), dtype, shape)?;
                bufs.push(input(py, dtype, shape));
            }
            (_, _, Some(v)) => scalars.push((py, v.to_string(), v.is_f64())),
            _ => {
                return Err(format!(
                    "input `{}` has neither a shape nor a value",
                    i.name
                ))
            }
        }
    }
    for p in &probe.params {
        let py = format!("w_{}", ident(&p.name));
        let (dtype, shape) = tensor(
            &format!("the module's parameter `{}`", p.name),
            &p.dtype,
            &p.shape,
        )?;
        bufs.push(input(py, dtype, shape));
    }
    if probe.outputs.is_empty() {
        return Err("forward returns no tensor; there is nothing for a kernel to compute".into());
    }
    let n_out = probe.outputs.len();
    for (k, o) in probe.outputs.iter().enumerate() {
        let py = if n_out == 1 {
            "out".to_string()
        } else {
            format!("out{k}")
        };
        let (dtype, shape) = tensor(&format!("output {k}"), &o.dtype, &o.shape)?;
        bufs.push(Buf {
            param: ptr(&py),
            py,
            out: true,
            dtype,
            shape,
        });
    }
    Ok((bufs, scalars))
}

/// A probed tensor's spec dtype and shape (a 0-d tensor is one element); `what` names it
/// in the refusal of a dtype a spec cannot hold.
fn tensor(what: &str, dtype: &str, shape: &[u64]) -> Result<(DType, Vec<u64>), String> {
    let d = dtype_of(dtype).ok_or_else(|| {
        format!("{what} is a torch.{dtype} tensor; a spec has f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32 and bool")
    })?;
    Ok((
        d,
        if shape.is_empty() {
            vec![1]
        } else {
            shape.to_vec()
        },
    ))
}

/// The skeleton's spec comment: a note on where it came from, `n` (the largest output's
/// elements), the buffers and scalars, a 1-D launch over `n`, looser tolerances for a
/// half-precision output, and the reference `ref_module.reference`.
fn spec_lines(
    shown: &str,
    bufs: &[Buf],
    scalars: &[Scalar],
    lang: KernelLang,
    ref_module: &str,
) -> String {
    let n: u64 = bufs
        .iter()
        .filter(|b| b.out)
        .map(|b| b.shape.iter().product::<u64>())
        .max()
        .unwrap_or(1);
    let c = match lang {
        KernelLang::Triton => "#",
        KernelLang::Cuda => "//",
    };
    let mut spec = String::new();
    let _ = writeln!(
        spec,
        "{c} Imported from {shown} by `kernel-lsp import-kernelbench`: the buffers, shapes and"
    );
    let _ = writeln!(
        spec,
        "{c} reference come from the problem; fill in the kernel, then `kernel-lsp bench`."
    );
    let _ = writeln!(
        spec,
        "{c} n: the elements of the largest output (one thread or lane per element to start)."
    );
    let _ = writeln!(spec, "{c} @bench n = {n}");
    for b in bufs {
        let dims: Vec<String> = b.shape.iter().map(u64::to_string).collect();
        let _ = writeln!(
            spec,
            "{c} @bench {}: {} {}[{}]",
            b.param,
            if b.out { "out" } else { "in" },
            b.dtype,
            dims.join(", ")
        );
    }
    for (s, v, _) in scalars {
        let _ = writeln!(spec, "{c} @bench {s} = {v}");
    }
    match lang {
        KernelLang::Triton => {
            let _ = writeln!(spec, "{c} @bench grid = cdiv(n, BLOCK); BLOCK = 1024");
        }
        KernelLang::Cuda => {
            let _ = writeln!(spec, "{c} @bench grid = cdiv(n, 256); block = 256");
        }
    }
    if bufs
        .iter()
        .any(|b| b.out && matches!(b.dtype, DType::F16 | DType::Bf16))
    {
        let _ = writeln!(spec, "{c} @bench atol = 1e-2; rtol = 1e-2");
    }
    let _ = writeln!(spec, "{c} @bench reference = torch: {ref_module}.reference");
    spec
}

/// The Triton skeleton: the spec, then a `@triton.jit` kernel over the arguments, `n`
/// and `BLOCK` whose body is the `todo` and the lanes' offsets and mask.
fn triton_kernel(
    shown: &str,
    spec: &str,
    kernel_name: &str,
    todo: &str,
    bufs: &[Buf],
    scalars: &[Scalar],
) -> String {
    let mut params: Vec<String> = bufs.iter().map(|b| b.param.clone()).collect();
    params.extend(scalars.iter().map(|s| s.0.clone()));
    params.push("n".into());
    params.push("BLOCK: tl.constexpr".into());
    format!(
        "\"\"\"A Triton kernel for the KernelBench problem {shown}.\"\"\"\nimport triton\nimport triton.language as tl\n\n\n{spec}@triton.jit\ndef {kernel_name}({}):\n    # {todo}\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n",
        params.join(", ")
    )
}

/// The CUDA skeleton: the half-precision headers it needs, the spec, then an
/// `extern "C" __global__` kernel over the arguments (inputs `const`, scalars `float`,
/// `int` or `long long` by value) and `n` whose body is the index, its guard and the
/// `todo`.
fn cuda_kernel(
    shown: &str,
    spec: &str,
    kernel_name: &str,
    todo: &str,
    bufs: &[Buf],
    scalars: &[Scalar],
) -> String {
    let mut params: Vec<String> = bufs
        .iter()
        .map(|b| {
            format!(
                "{}{}* {}",
                if b.out { "" } else { "const " },
                c_type(b.dtype),
                b.param
            )
        })
        .collect();
    params.extend(scalars.iter().map(|(s, v, float)| {
        let ty = if *float {
            "float"
        } else if v.parse::<i64>().is_ok_and(|x| i32::try_from(x).is_ok()) {
            "int"
        } else {
            "long long"
        };
        format!("{ty} {s}")
    }));
    params.push("int n".into());
    let mut includes = String::new();
    if bufs.iter().any(|b| b.dtype == DType::F16) {
        includes.push_str("#include <cuda_fp16.h>\n");
    }
    if bufs.iter().any(|b| b.dtype == DType::Bf16) {
        includes.push_str("#include <cuda_bf16.h>\n");
    }
    format!(
        "// A CUDA kernel for the KernelBench problem {shown}.\n{includes}\n{spec}extern \"C\" __global__ void {kernel_name}({}) {{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    // {todo}\n}}\n",
        params.join(", ")
    )
}

/// The reference module: the problem's own text, then `reference(...)` over the kernel's
/// inputs and scalars, which runs `Model.forward` (with the module's parameters taken
/// from the `w_` buffers, if it has any) and returns the outputs in the kernel's order.
fn reference_module(source: &str, probe: &Probe, bufs: &[Buf], scalars: &[Scalar]) -> String {
    let tensors_in: Vec<&Buf> = bufs.iter().filter(|b| !b.out).collect();
    let mut sig: Vec<String> = tensors_in.iter().map(|b| b.py.clone()).collect();
    sig.extend(scalars.iter().map(|s| s.0.clone()));
    let forward_args: Vec<String> = probe.inputs.iter().map(|i| ident(&i.name)).collect();
    let state: Vec<String> = probe
        .params
        .iter()
        .map(|p| format!("{:?}: w_{}", p.name, ident(&p.name)))
        .collect();
    let mut r = String::new();
    r.push_str(source.trim_end());
    r.push_str("\n\n\n# ---- Added by `kernel-lsp import-kernelbench`: the kernel's PyTorch reference ----\n");
    r.push_str("_klsp_model = None\n\n\n");
    let _ = writeln!(r, "def reference({}):", sig.join(", "));
    let _ = writeln!(r, "    \"\"\"`Model.forward` on the kernel's inputs{}; the outputs in the kernel's order.\"\"\"", if state.is_empty() { "" } else { ", with the module's parameters taken from the kernel's `w_` buffers" });
    r.push_str("    import torch\n\n    global _klsp_model\n    if _klsp_model is None:\n        torch.manual_seed(0)\n        _klsp_model = Model(*get_init_inputs()).eval()\n");
    let first = tensors_in
        .first()
        .map_or("None".to_string(), |b| b.py.clone());
    let _ = writeln!(
        r,
        "    model = _klsp_model.to({first}.device) if {first} is not None else _klsp_model"
    );
    let _ = writeln!(r, "    with torch.no_grad():");
    if state.is_empty() {
        let _ = writeln!(r, "        return model({})", forward_args.join(", "));
    } else {
        let _ = writeln!(
            r,
            "        return torch.func.functional_call(model, {{{}}}, ({},))",
            state.join(", "),
            forward_args.join(", ")
        );
    }
    r
}
