//! The evaluated bench plan: everything a GPU worker needs to allocate, fill, launch and
//! compare, with no expression left to evaluate. Sent as JSON, so it is self-contained.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use super::torch_ref::TorchReference;
use crate::syntax::Lang;

/// A number in the spec language.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Int(i64),
    /// Always finite (the evaluator rejects NaN and infinities).
    Float(f64),
}

impl Value {
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            // Debug keeps a `.0` on whole floats and uses exponents for tiny ones (1e-5).
            Value::Float(v) => write!(f, "{v:?}"),
        }
    }
}

/// Buffer element types (docs/spec.md, "Statements").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F16,
    Bf16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U32,
    Bool,
}

impl DType {
    pub const ALL: [DType; 11] = [
        DType::F16,
        DType::Bf16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::Bool,
    ];

    pub fn size_bytes(self) -> u64 {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::Bf16 | DType::I16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::Bf16 | DType::F32 | DType::F64)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The integer range a buffer of this type can hold (None for floats).
    pub(crate) fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::I8 => (i8::MIN.into(), i8::MAX.into()),
            DType::I16 => (i16::MIN.into(), i16::MAX.into()),
            DType::I32 => (i32::MIN.into(), i32::MAX.into()),
            DType::I64 => (i64::MIN, i64::MAX),
            DType::U8 => (0, u8::MAX.into()),
            DType::U32 => (0, u32::MAX.into()),
            DType::Bool => (0, 1),
            DType::F16 | DType::Bf16 | DType::F32 | DType::F64 => return None,
        })
    }

    /// docs/spec.md defaults: f64 1e-9; f32 1e-5 / 1e-4; f16, bf16 1e-2; integers and bool exact.
    pub fn default_tolerance(self) -> (f64, f64) {
        match self {
            DType::F64 => (1e-9, 1e-9),
            DType::F32 => (1e-5, 1e-4),
            DType::F16 | DType::Bf16 => (1e-2, 1e-2),
            _ => (0.0, 0.0),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read only.
    In,
    /// Written; poisoned before every launch; compared.
    Out,
    /// Initialised; compared.
    InOut,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::In => "in",
            Role::Out => "out",
            Role::InOut => "inout",
        })
    }
}

/// How a buffer is filled (docs/spec.md, "Distributions"), arguments evaluated for the case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Dist {
    Uniform {
        lo: f64,
        hi: f64,
    },
    Normal {
        mean: f64,
        std: f64,
    },
    /// Half-open: `lo <= v < hi`.
    RandInt {
        lo: i64,
        hi: i64,
    },
    Zeros,
    Ones,
    /// 0, 1, 2, ... in row-major order.
    Arange,
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Uniform { lo, hi } => write!(f, "uniform({lo:?}, {hi:?})"),
            Dist::Normal { mean, std } => write!(f, "normal({mean:?}, {std:?})"),
            Dist::RandInt { lo, hi } => write!(f, "randint({lo}, {hi})"),
            Dist::Zeros => f.write_str("zeros"),
            Dist::Ones => f.write_str("ones"),
            Dist::Arange => f.write_str("arange"),
        }
    }
}

/// The by-value type of a scalar argument. CUDA: from the C type. Triton: `I64` for an
/// integral value and `F64` for a float, i.e. Python's own `int` / `float`, which Triton
/// specializes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalarTy {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    Bf16,
    F32,
    F64,
}

impl ScalarTy {
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ScalarTy::F16 | ScalarTy::Bf16 | ScalarTy::F32 | ScalarTy::F64
        )
    }

    /// Inclusive integer range for integral types.
    pub(crate) fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            ScalarTy::Bool => (0, 1),
            ScalarTy::I8 => (i8::MIN.into(), i8::MAX.into()),
            ScalarTy::I16 => (i16::MIN.into(), i16::MAX.into()),
            ScalarTy::I32 => (i32::MIN.into(), i32::MAX.into()),
            ScalarTy::I64 => (i64::MIN.into(), i64::MAX.into()),
            ScalarTy::U8 => (0, u8::MAX.into()),
            ScalarTy::U16 => (0, u16::MAX.into()),
            ScalarTy::U32 => (0, u32::MAX.into()),
            ScalarTy::U64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Arg {
    Buffer {
        name: String,
        role: Role,
        dtype: DType,
        shape: Vec<u64>,
        elems: u64,
        bytes: u64,
        dist: Dist,
    },
    Scalar {
        name: String,
        value: Value,
        ty: ScalarTy,
    },
    /// A Triton `tl.constexpr` parameter, or (in `Case::template_args`) a CUDA template
    /// argument.
    Constexpr { name: String, value: Value },
    /// A Triton parameter passed as `None` (`NAME = None`: an optional pointer the kernel
    /// is told, by a constexpr flag or an `is None` test, not to use).
    None { name: String },
}

impl Arg {
    pub fn name(&self) -> &str {
        match self {
            Arg::Buffer { name, .. }
            | Arg::Scalar { name, .. }
            | Arg::Constexpr { name, .. }
            | Arg::None { name } => name,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Launch {
    Cuda {
        grid: [u64; 3],
        block: [u64; 3],
        smem: u64,
    },
    Triton {
        grid: Vec<u64>,
        num_warps: Option<u64>,
        num_stages: Option<u64>,
    },
}

/// One set of inputs. `BenchPlan::cases[0]` is the timed case; every case is verified.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Values of the spec's own names (not kernel parameters, not built-ins), in the order
    /// they are defined in the spec.
    pub sizes: Vec<(String, Value)>,
    /// One per kernel parameter, in parameter order.
    pub args: Vec<Arg>,
    /// CUDA only: one `Arg::Constexpr` per template parameter, in template order.
    pub template_args: Vec<Arg>,
    pub launch: Launch,
    /// Bytes the kernel must move (`bytes = E`, or in read once, out written once, inout both).
    pub bytes: f64,
    pub flops: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TunableKind {
    /// CUDA: passed as `-DNAME=V`.
    Define,
    /// CUDA: a kernel template argument.
    TemplateParam,
    /// Triton: a `tl.constexpr` parameter.
    Constexpr,
    NumWarps,
    NumStages,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tunable {
    pub name: String,
    pub values: Vec<Value>,
    /// The plain-run value: an override, else `NAME = V`, else the first listed.
    pub current: Value,
    pub kind: TunableKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchPlan {
    pub kernel: String,
    pub lang: Lang,
    pub cases: Vec<Case>,
    pub tunables: Vec<Tunable>,
    /// CUDA `-DNAME=V` for every `Define` tunable at its current value.
    pub defines: Vec<(String, String)>,
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
    /// Another kernel of the same file to compare against; None: the recorded baseline.
    pub reference: Option<String>,
    /// `reference = torch: ...`: a PyTorch expression or function (then `reference` is None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_reference: Option<Box<TorchReference>>,
    pub trials: u32,
}

impl BenchPlan {
    /// The plan `reference = NAME` runs with beside this kernel's: the reference's own
    /// launch, constexprs and template arguments (`own`, its evaluated spec, when it has
    /// one), on this kernel's inputs: each case's buffers (shapes and distributions) and
    /// scalar values come from this plan, position by position, so both versions run on
    /// the same data. Without a spec of its own, the reference runs with this plan.
    pub fn for_reference(&self, name: &str, own: Option<&BenchPlan>) -> BenchPlan {
        let mut out = own.cloned().unwrap_or_else(|| self.clone());
        out.kernel = name.to_string();
        out.trials = self.trials;
        out.cases.truncate(self.cases.len());
        while out.cases.len() < self.cases.len() {
            out.cases.push(self.cases[out.cases.len()].clone());
        }
        for (theirs, ours) in out.cases.iter_mut().zip(&self.cases) {
            theirs.sizes = ours.sizes.clone();
            theirs.bytes = ours.bytes;
            for (a, b) in theirs.args.iter_mut().zip(&ours.args) {
                if matches!(
                    (&*a, b),
                    (Arg::Buffer { .. }, Arg::Buffer { .. })
                        | (Arg::Scalar { .. }, Arg::Scalar { .. })
                ) {
                    *a = b.clone();
                }
            }
        }
        out
    }

    /// The C++ name expression that instantiates a template kernel with the timed case's
    /// template arguments (`reduce<256, 4>`), for NVRTC's `nvrtcAddNameExpression`.
    /// `None` when the kernel takes no template arguments.
    pub fn template_instance(&self) -> Option<String> {
        let c0 = self.cases.first()?;
        if c0.template_args.is_empty() {
            return None;
        }
        let args: Vec<String> = c0
            .template_args
            .iter()
            .map(|a| match a {
                Arg::Constexpr { value, .. } | Arg::Scalar { value, .. } => value.to_string(),
                Arg::Buffer { name, .. } | Arg::None { name } => name.clone(),
            })
            .collect();
        Some(format!("{}<{}>", self.kernel, args.join(", ")))
    }

    /// (atol, rtol) for comparing a buffer of `dtype`: the spec's overrides, else docs/spec.md's
    /// defaults for the type.
    pub fn tolerance(&self, dtype: DType) -> (f64, f64) {
        let (a, r) = dtype.default_tolerance();
        (self.atol.unwrap_or(a), self.rtol.unwrap_or(r))
    }

    /// Markdown for a hover on the kernel: the cases, buffers, launch, tunables, tolerance,
    /// reference and trials.
    pub fn hover_markdown(&self) -> String {
        let mut s = String::new();
        let n = self.cases.len();
        s.push_str(&format!(
            "**@bench `{}`**: {} case{} (case 0 is timed), {} trial{} per case\n\n",
            self.kernel,
            n,
            if n == 1 { "" } else { "s" },
            self.trials,
            if self.trials == 1 { "" } else { "s" }
        ));
        let Some(c0) = self.cases.first() else {
            return s;
        };

        // Cases: one column per size variable and per scalar / constexpr argument.
        let mut cols: Vec<String> = c0.sizes.iter().map(|(n, _)| n.clone()).collect();
        for a in c0.args.iter().chain(&c0.template_args) {
            if !matches!(a, Arg::Buffer { .. }) {
                cols.push(a.name().to_string());
            }
        }
        if !cols.is_empty() {
            s.push_str(&format!(
                "| case | {} |\n|---|{}\n",
                cols.join(" | "),
                "---|".repeat(cols.len())
            ));
            for (i, c) in self.cases.iter().enumerate() {
                let mut cells: Vec<String> = c.sizes.iter().map(|(_, v)| v.to_string()).collect();
                for a in c.args.iter().chain(&c.template_args) {
                    match a {
                        Arg::Scalar { value, .. } | Arg::Constexpr { value, .. } => {
                            cells.push(value.to_string())
                        }
                        Arg::None { .. } => cells.push("None".into()),
                        Arg::Buffer { .. } => {}
                    }
                }
                let label = if i == 0 {
                    "0 (timed)".to_string()
                } else {
                    i.to_string()
                };
                s.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
            }
            s.push('\n');
        }

        let buffers: Vec<&Arg> = c0
            .args
            .iter()
            .filter(|a| matches!(a, Arg::Buffer { .. }))
            .collect();
        if !buffers.is_empty() {
            s.push_str("| buffer (case 0) | role | dtype | shape | bytes | init |\n|---|---|---|---|---|---|\n");
            for a in buffers {
                if let Arg::Buffer {
                    name,
                    role,
                    dtype,
                    shape,
                    bytes,
                    dist,
                    ..
                } = a
                {
                    let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
                    let init = if *role == Role::Out {
                        "poisoned".to_string()
                    } else {
                        dist.to_string()
                    };
                    s.push_str(&format!(
                        "| `{name}` | {role} | {dtype} | [{}] | {} | {init} |\n",
                        shape.join(", "),
                        human_bytes(*bytes as f64)
                    ));
                }
            }
            s.push('\n');
        }

        match &c0.launch {
            Launch::Cuda { grid, block, smem } => s.push_str(&format!(
                "**Launch** (case 0): grid ({}, {}, {}) × block ({}, {}, {}), {} dynamic shared memory\n\n",
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                human_bytes(*smem as f64)
            )),
            Launch::Triton { grid, num_warps, num_stages } => {
                let g: Vec<String> = grid.iter().map(u64::to_string).collect();
                s.push_str(&format!("**Launch** (case 0): grid ({})", g.join(", ")));
                if let Some(w) = num_warps {
                    s.push_str(&format!(", num_warps {w}"));
                }
                if let Some(st) = num_stages {
                    s.push_str(&format!(", num_stages {st}"));
                }
                s.push_str("\n\n");
            }
        }
        s.push_str(&format!("**Moves** (case 0): {}", human_bytes(c0.bytes)));
        if let Some(f) = c0.flops {
            s.push_str(&format!(", {} FLOP", human_count(f)));
        }
        s.push_str("\n\n");

        if !self.tunables.is_empty() {
            s.push_str("**Tunables**:\n");
            for t in &self.tunables {
                let vals: Vec<String> = t.values.iter().map(Value::to_string).collect();
                let kind = match t.kind {
                    TunableKind::Define => format!("`-D{}`", t.name),
                    TunableKind::TemplateParam => "template argument".to_string(),
                    TunableKind::Constexpr => "tl.constexpr".to_string(),
                    TunableKind::NumWarps | TunableKind::NumStages => "launch option".to_string(),
                };
                s.push_str(&format!(
                    "- `{}` = {} of [{}] ({kind})\n",
                    t.name,
                    t.current,
                    vals.join(", ")
                ));
            }
            s.push('\n');
        }

        let mut dtypes: Vec<DType> = Vec::new();
        for a in &c0.args {
            if let Arg::Buffer { dtype, role, .. } = a {
                if *role != Role::In && !dtypes.contains(dtype) {
                    dtypes.push(*dtype);
                }
            }
        }
        if !dtypes.is_empty() {
            let parts: Vec<String> = dtypes
                .iter()
                .map(|d| {
                    let (a, r) = self.tolerance(*d);
                    if a == 0.0 && r == 0.0 {
                        format!("{d} exact")
                    } else {
                        format!("{d} atol {a:?} rtol {r:?}")
                    }
                })
                .collect();
            s.push_str(&format!("**Tolerance**: {}\n\n", parts.join("; ")));
        }
        match (&self.reference, &self.torch_reference) {
            (Some(r), _) => s.push_str(&format!("**Reference**: kernel `{r}`\n")),
            (None, Some(t)) => s.push_str(&format!("**Reference**: PyTorch `{}`\n", t.describe())),
            (None, None) => s.push_str("**Reference**: the recorded baseline of this kernel\n"),
        }
        s
    }
}

/// `64.0 MiB`, `512 B`.
pub(crate) fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024.0 {
        return format!("{b} B");
    }
    let mut v = b;
    let mut unit = "B";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

fn human_count(f: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, u) in UNITS {
        if f >= scale {
            return format!("{:.1} {u}", f / scale);
        }
    }
    format!("{f}")
}
