//! CUDA launches as captured by the preload shim (`shim.c`) become the same [`Launch`]
//! records the Triton hook writes, so that one inference (`infer`) writes every spec
//! (issue #32). Pure: the shim's records and the project's kernels (as kernel discovery
//! parsed them from its `.cu` sources) in, launches or refusals out.
//!
//! The shim knows bytes, not types: each parameter's bytes, and for a pointer the device
//! allocation it points into and what the launch did to it. The kernel's signature gives
//! the rest: a pointer's element type (`const float*` -> f32), a scalar's type (`int`,
//! `float`, `int64_t`), the parameter names. A buffer holds the elements from the
//! pointer to the end of its allocation; when that count is a product of the launch's
//! integer arguments (`rows * cols`) the buffer gets that shape, so that its sizes are
//! named after them. Integer template arguments (`reduce<256>`) are given as numbers.
//! The shim also gives each allocation's range of values before the launch, read as
//! every element type; the one the signature names becomes the input distribution.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::mangled::{self, TemplateArg};
use super::record::{Arg, Count, Launch};
use crate::spec::ctype::{pointee_dtype, scalar_ty};
use crate::spec::{DType, ScalarTy};
use crate::syntax::{Kernel, Lang, ParamKind};

/// One launch the shim recorded.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CudaLaunch {
    /// The symbol, mangled as compiled.
    pub kernel: String,
    pub grid: Vec<u64>,
    pub block: Vec<u64>,
    #[serde(default)]
    pub smem: u64,
    #[serde(default)]
    pub refused: Option<String>,
    #[serde(default)]
    pub params: Vec<CudaParam>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct CudaParam {
    pub size: u64,
    /// The parameter's bytes, little-endian, as hex.
    pub hex: String,
    #[serde(default)]
    pub alloc: Option<Alloc>,
}

/// The device allocation a parameter points into.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Alloc {
    /// Which allocation of this launch (parameters with the same id share one).
    pub id: u32,
    /// Its size in bytes.
    pub size: u64,
    /// The pointer's offset into it.
    pub offset: u64,
    pub written: bool,
    /// Written, and the result depended on what was there before.
    pub read: bool,
    /// Per spec element type (`f32`, `i32`, ...): the smallest and largest finite value
    /// before the launch, the allocation read as that type.
    #[serde(default)]
    pub ranges: BTreeMap<String, Vec<f64>>,
}

/// Launch counts of one process, per symbol.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct CudaCount {
    pub kernel: String,
    pub launches: u64,
}

/// A kernel of the project's sources.
#[derive(Clone, Debug)]
pub struct SourceKernel {
    /// Its file, absolute.
    pub file: String,
    pub line: u32,
    pub kernel: Kernel,
}

/// The kernels of one CUDA source, as kernel discovery finds them.
pub fn kernels_of(file: &str, text: &str) -> Vec<SourceKernel> {
    let doc = crate::document::Document::new(Lang::Cuda, 0, text);
    let opts = crate::analysis::AnalyzeOptions::default();
    let model = crate::analysis::analyze(Lang::Cuda, text, doc.tree(), &opts).model;
    model
        .kernels
        .into_iter()
        .map(|k| SourceKernel {
            file: file.to_string(),
            line: text
                .get(..k.name_range.start)
                .map_or(0, |t| t.matches('\n').count() as u32 + 1),
            kernel: k,
        })
        .collect()
}

/// The launches and counts, resolved against the project's kernels. A symbol no kernel of
/// the sources matches is a launch refused with that reason.
pub fn resolve(
    launches: &[CudaLaunch],
    counts: &[CudaCount],
    sources: &[SourceKernel],
) -> (Vec<Launch>, Vec<Count>) {
    let mut out = Vec::new();
    for l in launches {
        // A launch the shim refused may carry no parameters.
        let n = match (l.params.is_empty(), &l.refused) {
            (true, Some(_)) => usize::MAX,
            _ => l.params.len(),
        };
        let found = find(&l.kernel, n, sources);
        out.push(match found {
            Ok(k) => launch(l, k),
            Err(e) => Launch {
                kernel: mangled::parse(&l.kernel).map_or(l.kernel.clone(), |m| m.name),
                refused: Some(e),
                ..Launch::default()
            },
        });
    }
    let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
    for c in counts {
        if let Ok(k) = find(&c.kernel, usize::MAX, sources) {
            *by.entry((k.file.clone(), k.kernel.name.clone()))
                .or_default() += c.launches;
        }
    }
    let counts = by
        .into_iter()
        .map(|((file, kernel), launches)| Count {
            file,
            kernel,
            launches,
        })
        .collect();
    (out, counts)
}

/// The kernel `symbol` names; `nparams` (usize::MAX: any) picks among same-named ones.
fn find<'a>(
    symbol: &str,
    nparams: usize,
    sources: &'a [SourceKernel],
) -> Result<&'a SourceKernel, String> {
    let name = mangled::parse(symbol)?.name;
    let named: Vec<&SourceKernel> = sources.iter().filter(|k| k.kernel.name == name).collect();
    let fits: Vec<&SourceKernel> = named
        .iter()
        .copied()
        .filter(|k| nparams == usize::MAX || k.kernel.params.len() == nparams)
        .collect();
    match (named.len(), fits.as_slice()) {
        (0, _) => Err(format!(
            "no __global__ kernel `{name}` in the project's .cu/.cuh sources"
        )),
        (_, [one]) => Ok(one),
        (_, []) => Err(format!(
            "the launched `{name}` has {nparams} parameters; the source's has {}: the \
             program ran another build of it",
            named[0].kernel.params.len()
        )),
        (_, many) => Err(format!(
            "`{name}` is defined in several sources ({}): which one ran cannot be told",
            many.iter()
                .map(|k| k.file.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// One recorded launch of `k` as a [`Launch`], or a launch refused with the reason.
fn launch(l: &CudaLaunch, k: &SourceKernel) -> Launch {
    let mut out = Launch {
        kernel: k.kernel.name.clone(),
        file: k.file.clone(),
        line: k.line,
        grid: Some(three(&l.grid)),
        block: Some(three(&l.block)),
        smem: Some(l.smem),
        refused: l.refused.clone(),
        ..Launch::default()
    };
    if out.refused.is_none() {
        match args(l, &k.kernel) {
            Ok(a) => out.args = a,
            Err(e) => out.refused = Some(e),
        }
    }
    out
}

fn three(v: &[u64]) -> Vec<u64> {
    (0..3).map(|i| v.get(i).copied().unwrap_or(1)).collect()
}

/// The launch's arguments, typed by the signature, in its order (template ones first).
fn args(l: &CudaLaunch, k: &Kernel) -> Result<Vec<Arg>, String> {
    check_aliasing(l, k)?;
    let mut out = template_args(l, k)?;
    let mut scalars: Vec<Option<Arg>> = Vec::new();
    let mut ints: Vec<(String, u64)> = Vec::new();
    for (p, raw) in k.params.iter().zip(&l.params) {
        let a = match &p.kind {
            ParamKind::Scalar { ty } => Some(scalar(&p.name, ty, raw)?),
            _ => None,
        };
        if let Some(v) = a
            .as_ref()
            .filter(|a| a.kind == "int")
            .and_then(|a| a.value.as_ref()?.as_u64())
        {
            ints.push((p.name.clone(), v));
        }
        scalars.push(a);
    }
    for ((p, raw), s) in k.params.iter().zip(&l.params).zip(scalars) {
        match (&p.kind, s) {
            (_, Some(a)) => out.push(a),
            (ParamKind::Pointer { pointee, .. }, None) => {
                out.push(buffer(&p.name, pointee, raw, &ints)?)
            }
            _ => {
                return Err(format!(
                    "`{}` is passed by value as a type a spec cannot give (a struct or a \
                     reference)",
                    p.name
                ))
            }
        }
    }
    Ok(out)
}

/// Integer template arguments, as constexpr-like arguments named after the parameters.
fn template_args(l: &CudaLaunch, k: &Kernel) -> Result<Vec<Arg>, String> {
    let m = mangled::parse(&l.kernel)?;
    if m.template_args.len() != k.template_params.len() {
        return Err(format!(
            "the launched `{}` has {} template arguments; the source's has {} template \
             parameters",
            k.name,
            m.template_args.len(),
            k.template_params.len()
        ));
    }
    k.template_params
        .iter()
        .zip(&m.template_args)
        .map(|(name, a)| match a {
            TemplateArg::Int(v) => Ok(Arg {
                name: name.clone(),
                kind: "int".into(),
                constexpr: true,
                value: Some((*v).into()),
                ..Arg::default()
            }),
            TemplateArg::Type(t) => Err(format!(
                "template parameter `{name}` is the type `{t}` at this launch: a spec gives \
                 template arguments as numbers only"
            )),
        })
        .collect()
}

/// Two pointers into one allocation that the launch wrote.
fn check_aliasing(l: &CudaLaunch, k: &Kernel) -> Result<(), String> {
    let mut seen: BTreeMap<u32, &str> = BTreeMap::new();
    for (p, raw) in k.params.iter().zip(&l.params) {
        let Some(a) = &raw.alloc else { continue };
        if !matches!(p.kind, ParamKind::Pointer { .. }) {
            continue;
        }
        if let Some(other) = seen.insert(a.id, &p.name) {
            if a.written {
                return Err(format!(
                    "`{other}` and `{}` point into the same allocation, which the launch \
                     wrote (aliasing buffers)",
                    p.name
                ));
            }
        }
    }
    Ok(())
}

fn bytes(raw: &CudaParam) -> Result<Vec<u8>, String> {
    (0..raw.hex.len() / 2)
        .map(|i| u8::from_str_radix(raw.hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("a parameter's bytes `{}` are not hex", raw.hex))
}

fn le(b: &[u8]) -> u64 {
    b.iter()
        .rev()
        .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// A scalar argument as the signature types it.
fn scalar(name: &str, ty: &str, raw: &CudaParam) -> Result<Arg, String> {
    let t = scalar_ty(ty)
        .ok_or_else(|| format!("`{name}` has type `{ty}`, which a spec cannot give"))?;
    let b = bytes(raw)?;
    let want = scalar_bytes(t);
    if b.len() as u64 != want {
        return Err(format!(
            "`{name}` is {} bytes at the launch, but `{ty}` is {want}: the program ran another build of the kernel",
            b.len()
        ));
    }
    let v = le(&b);
    let sign = |bits: u32| -> i64 {
        let shift = 64 - bits;
        ((v << shift) as i64) >> shift
    };
    let (kind, value): (&str, serde_json::Value) = match t {
        ScalarTy::Bool => ("bool", (v != 0).into()),
        ScalarTy::I8 => ("int", sign(8).into()),
        ScalarTy::I16 => ("int", sign(16).into()),
        ScalarTy::I32 => ("int", sign(32).into()),
        ScalarTy::I64 => ("int", sign(64).into()),
        ScalarTy::U8 | ScalarTy::U16 | ScalarTy::U32 | ScalarTy::U64 => ("int", v.into()),
        ScalarTy::F32 => ("float", f64::from(f32::from_bits(v as u32)).into()),
        ScalarTy::F64 => ("float", f64::from_bits(v).into()),
        ScalarTy::F16 | ScalarTy::Bf16 => {
            return Err(format!(
                "`{name}` is a half-precision scalar; capture reads f32, f64 and integer scalars"
            ))
        }
    };
    Ok(Arg {
        name: name.into(),
        kind: kind.into(),
        value: Some(value),
        ..Arg::default()
    })
}

fn scalar_bytes(t: ScalarTy) -> u64 {
    match t {
        ScalarTy::Bool | ScalarTy::I8 | ScalarTy::U8 => 1,
        ScalarTy::I16 | ScalarTy::U16 | ScalarTy::F16 | ScalarTy::Bf16 => 2,
        ScalarTy::I32 | ScalarTy::U32 | ScalarTy::F32 => 4,
        ScalarTy::I64 | ScalarTy::U64 | ScalarTy::F64 => 8,
    }
}

/// A pointer argument as a buffer of the elements from it to the end of its allocation.
fn buffer(
    name: &str,
    pointee: &str,
    raw: &CudaParam,
    ints: &[(String, u64)],
) -> Result<Arg, String> {
    let (dtype, _) = pointee_dtype(pointee)
        .ok_or_else(|| format!("`{name}` points to `{pointee}`, which is no spec element type"))?;
    let Some(a) = &raw.alloc else {
        return Err(if le(&bytes(raw)?) == 0 {
            format!("`{name}` is a null pointer at the launch: a spec gives every pointer a buffer")
        } else {
            format!(
                "`{name}` does not point into device memory from cudaMalloc (host, mapped or \
                     a pool's memory): only device allocations can become buffers"
            )
        });
    };
    let elems = a.size.saturating_sub(a.offset) / dtype.size_bytes();
    if elems == 0 {
        return Err(format!("`{name}` points at an empty buffer"));
    }
    let shape = shape_for(elems, ints);
    let mut strides: Vec<i64> = Vec::new();
    let mut acc = 1i64;
    for d in shape.iter().rev() {
        strides.insert(0, acc);
        acc = acc.saturating_mul(*d as i64);
    }
    let range = a.ranges.get(dtype.name()).filter(|r| r.len() == 2);
    let role = match (a.written, a.read) {
        (false, _) => "in",
        (true, false) => "out",
        (true, true) => "inout",
    };
    Ok(Arg {
        name: name.into(),
        kind: "tensor".into(),
        shape,
        strides,
        dtype: Some(torch_name(dtype).into()),
        role: Some(role.into()),
        lo: range.map(|r| r[0]),
        hi: range.map(|r| r[1]),
        ..Arg::default()
    })
}

/// The buffer's shape: one integer argument equal to its element count, else a product
/// of two or three of them (in signature order: `rows`, `cols`), else flat.
pub fn shape_for(elems: u64, ints: &[(String, u64)]) -> Vec<u64> {
    let vals: Vec<u64> = ints.iter().map(|(_, v)| *v).filter(|v| *v >= 2).collect();
    if vals.contains(&elems) {
        return vec![elems];
    }
    for (i, a) in vals.iter().enumerate() {
        for b in &vals[i + 1..] {
            if a.checked_mul(*b) == Some(elems) {
                return vec![*a, *b];
            }
        }
    }
    for (i, a) in vals.iter().enumerate() {
        for (j, b) in vals.iter().enumerate().skip(i + 1) {
            for c in &vals[j + 1..] {
                if a.checked_mul(*b).and_then(|x| x.checked_mul(*c)) == Some(elems) {
                    return vec![*a, *b, *c];
                }
            }
        }
    }
    vec![elems]
}

/// The torch dtype name `infer` reads.
fn torch_name(d: DType) -> &'static str {
    match d {
        DType::F16 => "float16",
        DType::Bf16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U32 => "uint32",
        DType::Bool => "bool",
    }
}

#[cfg(test)]
#[path = "cuda_tests.rs"]
mod tests;
