//! `vectorize`: each thread of the 1-D elementwise shape handles VEC consecutive
//! elements with one vector load per read buffer and one vector store per written buffer
//! (`float4`, `float2`, `double2`, `__half2`, `__nv_bfloat162`, `int4`/`int2`,
//! `uint4`/`uint2`), and a scalar tail for the last `n % VEC`; the grid's `cdiv` is
//! divided by VEC. An element type with no vector type of that width (8 halves, 16
//! bytes, 4 bfloat16s) is *packed*: an aligned register array moved as one `uint4` or
//! `uint2`, so every element type gets 8- and 16-byte accesses. Refuses another shape, a
//! global access other than `p[i]` (but a buffer the body never writes may be read at any
//! element, `scale[i / cols]`: each element computes its own index), a 2-D launch (`vectorize_rows`
//! takes kernels whose lane walks the columns of rows), a grid with no division, or a pointee
//! of unknown size. Param `widths` (2, 4, 8 or 16; default 4 and 2, and the width that
//! makes the narrowest buffer's accesses 16 bytes when that is wider).
//!
//! An index split the lanes share (`c = i % C; h = i / WC`) is written `(VEC * i) / D`
//! and `(VEC * i) % D + k` in lane k, with `D % VEC == 0` in the vector condition
//! ([`super::lane_split`]); the tail loop then takes only the thread's own VEC
//! elements, since any thread may take it.

use std::collections::{BTreeMap, BTreeSet};

use super::check::{bad_param, current_plan, finish, not_applicable, require_lang, Draft, R};
use super::edits::{EditError, Edits};
use super::elementwise::{
    bound_text, inspect_body, match_elementwise, one_d_grid, pointer_params, BodyFacts,
    Elementwise, INDEX_SHAPE,
};
use super::lane_split::{fixed_integers, Splits};
use super::params::Params;
use super::spec_expr::{widen, words};
use super::tree::{fresh, kernel_function, line_indent, newline, reindent, render};
use super::{RewriteContext, RewriteError};
use crate::syntax::{ByteRange, Lang};

/// Each thread handles VEC consecutive elements with one vector load per read buffer and
/// one vector store per written buffer, and a scalar tail for the last `n % VEC`. Param
/// `widths` (default [4, 2]).
pub fn vectorize(cx: &RewriteContext<'_>) -> R {
    let v = Vectorized::of(cx, "vectorize")?;
    let mut drafts = Vec::new();
    let mut dropped = v.dropped.clone();
    for w in &v.widths {
        let edits = vec![
            (v.shape.guard.start_byte()..v.shape.end, w.code.clone()),
            (v.grid_range.clone(), w.grid.clone()),
        ];
        match Edits::from_pairs(edits).apply(cx.text) {
            Ok(text) => drafts.push(Draft {
                label: w.label.clone(),
                text,
            }),
            Err(e) => dropped.push(format!("{}: {e}", w.label)),
        }
    }
    finish(cx, drafts, dropped)
}

/// One vector width's rewrite of the guarded body.
pub(super) struct Width {
    /// `VEC=4 (float4)`.
    pub label: String,
    /// VEC.
    pub width: usize,
    /// Replaces the bounds check and its body (`shape.guard` to `shape.end`).
    pub code: String,
    /// The grid's first component with its division made VEC times coarser.
    pub grid: String,
}

/// The elementwise shape of a kernel and its vectorized bodies, one per width that fits;
/// shared by `vectorize` and `coarsen`.
pub(super) struct Vectorized<'t> {
    pub shape: Elementwise<'t>,
    pub widths: Vec<Width>,
    /// Widths that did not fit, with the reason.
    pub dropped: Vec<String>,
    /// Document range of the grid's first component.
    pub grid_range: ByteRange,
}

impl<'t> Vectorized<'t> {
    pub fn of(cx: &RewriteContext<'t>, id: &str) -> Result<Vectorized<'t>, RewriteError> {
        require_lang(cx, Lang::Cuda, id)?;
        let plan = current_plan(cx)?;
        widths(cx, None)?;
        let k = &cx.kernel.name;
        let func = kernel_function(cx).ok_or_else(|| {
            not_applicable(format!("`{k}`'s definition is not in the syntax tree"))
        })?;
        let shape = match_elementwise(cx.text, func).map_err(|why| {
            not_applicable(format!(
                "`{k}` is not a 1-D elementwise kernel: {why}; {id} needs {INDEX_SHAPE} with every global access `p[i]`"
            ))
        })?;
        let pointers = pointer_params(cx);
        let facts = inspect_body(cx.text, &shape, &pointers, true)
            .map_err(|why| not_applicable(format!("`{k}` cannot be vectorized: {why}")))?;
        if facts.buffers.is_empty() {
            return Err(not_applicable(format!(
                "`{k}`'s guarded body accesses no pointer parameter as `p[{}]`",
                shape.index
            )));
        }
        let (grid, first) = one_d_grid(cx, &plan, id, shape.batched)?;
        let fixed = fixed_integers(cx.text, func, shape.guard.start_byte(), &shape.index);
        let taken: BTreeSet<String> = words(cx.text).into_iter().map(str::to_string).collect();
        // Buffers in parameter order, for stable output.
        let order: Vec<&String> = cx
            .kernel
            .params
            .iter()
            .filter_map(|p| facts.buffers.get_key_value(&p.name).map(|(k, _)| k))
            .collect();
        let narrowest = order
            .iter()
            .filter_map(|p| element_bytes(&facts.buffers[*p].pointee))
            .min();
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        'width: for width in widths(cx, narrowest)? {
            let mut types: BTreeMap<&str, Lanes> = BTreeMap::new();
            for p in &order {
                let u = &facts.buffers[*p];
                match Lanes::of_wide(&u.pointee, width) {
                    Some(l) => {
                        types.insert(p.as_str(), l);
                    }
                    None => {
                        dropped.push(format!(
                            "VEC={width}: `{p}` is `{}*`, which has no {width}-wide vector type and no 8- or 16-byte packing",
                            u.pointee
                        ));
                        continue 'width;
                    }
                }
            }
            let Some(new_grid) = widen(&grid.text[first.clone()], width) else {
                return Err(not_applicable(format!(
                    "grid = {} has no `cdiv(n, B)` or `(n + B - 1) / B` to divide by the vector width",
                    grid.text
                )));
            };
            let mut names = taken.clone();
            let mut shown: Vec<String> = Vec::new();
            for p in &order {
                let l = types[p.as_str()].shown(width);
                if !shown.contains(&l) {
                    shown.push(l);
                }
            }
            let label = format!("VEC={width} ({})", shown.join(", "));
            let body = (&shape, &facts, &fixed);
            match emit_vectorized(cx.text, body, &order, &types, width, &mut names) {
                Ok(code) => out.push(Width {
                    label,
                    width,
                    code,
                    grid: new_grid,
                }),
                Err(e) => dropped.push(format!("{label}: {e}")),
            }
        }
        Ok(Vectorized {
            shape,
            widths: out,
            dropped,
            grid_range: grid.range.start + first.start..grid.range.start + first.end,
        })
    }
}

/// The widths to try: param `widths` (2, 4, 8 or 16), by default 4 and 2 and, first,
/// the width that makes the `narrowest` element type's accesses 16 bytes when that is
/// wider than 4.
pub(super) fn widths(
    cx: &RewriteContext<'_>,
    narrowest: Option<usize>,
) -> Result<Vec<usize>, RewriteError> {
    let given = cx.params.contains_key("widths");
    let mut widths = Params(cx.params).ints("widths", &[4, 2], 2..=i64::MAX)?;
    if let Some(w) = widths.iter().find(|w| !matches!(w, 2 | 4 | 8 | 16)) {
        return Err(bad_param(
            "widths",
            format!("{w} is not a vector width; use 2, 4, 8 or 16"),
        ));
    }
    if let Some(w) = narrowest.map(|b| 16 / b).filter(|w| *w > 4 && !given) {
        widths.insert(0, w as i64);
    }
    Ok(widths.into_iter().map(|w| w as usize).collect())
}

/// How one buffer's VEC elements live in registers: a CUDA vector type (`float4`, lanes
/// `.x`..`.w`), or an aligned array of the element type moved as one `carrier`
/// (`uint4`: 16 bytes; lanes `[0]`..).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lanes {
    /// The register's type: the vector type, or the element type of the array.
    ty: String,
    /// The packed form's carrier, or None for a vector type.
    carrier: Option<&'static str>,
    /// Carriers the packed form takes: 2 for 32 bytes (four 8-byte elements as two
    /// `uint4`, so an `int64_t` or `double` row also gets 4 elements a thread).
    pieces: usize,
}

impl Lanes {
    pub(super) fn of(pointee: &str, width: usize) -> Option<Lanes> {
        Self::packed(pointee, width, false)
    }

    /// As [`Lanes::of`], and four 8-byte elements (`int64_t`, `double`) as two `uint4`:
    /// for the rewrites whose lanes each own `width` elements, so a row of 64-bit
    /// indices gives each lane as many elements as the `float` rows beside it.
    pub(super) fn of_wide(pointee: &str, width: usize) -> Option<Lanes> {
        Self::packed(pointee, width, true)
    }

    fn packed(pointee: &str, width: usize, wide: bool) -> Option<Lanes> {
        if let Some(vt) = vector_type(pointee, width) {
            return Some(Lanes {
                ty: vt.to_string(),
                carrier: None,
                pieces: 1,
            });
        }
        let bytes = element_bytes(pointee)?;
        let (carrier, pieces) = match bytes * width {
            32 if wide && bytes == 8 => ("uint4", 2),
            16 => ("uint4", 1),
            8 => ("uint2", 1),
            _ => return None,
        };
        Some(Lanes {
            ty: pointee.to_string(),
            carrier: Some(carrier),
            pieces,
        })
    }

    /// For labels: `float4`, `8×__half as uint4`.
    pub(super) fn shown(&self, width: usize) -> String {
        match self.carrier {
            None => self.ty.clone(),
            Some(c) if self.pieces > 1 => format!("{width}×{} as {}×{c}", self.ty, self.pieces),
            Some(c) => format!("{width}×{} as {c}", self.ty),
        }
    }

    /// Loads and stores a register takes (2 for four 8-byte elements as two `uint4`):
    /// its addresses need the alignment of one of them.
    pub(super) fn pieces(&self) -> usize {
        self.pieces
    }

    /// Lane `k` of register `reg`.
    pub(super) fn lane(&self, reg: &str, k: usize) -> String {
        const LANES: [&str; 4] = ["x", "y", "z", "w"];
        match self.carrier {
            None => format!("{reg}.{}", LANES[k]),
            Some(_) => format!("{reg}[{k}]"),
        }
    }

    /// The register's declaration, loaded from `p[i]` (as VEC-wide units) or not.
    pub(super) fn declare(
        &self,
        reg: &str,
        p: &str,
        i: &str,
        load: bool,
        written: bool,
        width: usize,
    ) -> String {
        let ty = &self.ty;
        match (self.carrier, load) {
            (None, true) => {
                let c = if written { "" } else { "const " };
                format!("{c}{ty} {reg} = reinterpret_cast<const {ty}*>({p})[{i}];")
            }
            (None, false) => format!("{ty} {reg};"),
            (Some(c), true) if self.pieces > 1 => {
                let mut o = format!("alignas({c}) {ty} {reg}[{width}];");
                for q in 0..self.pieces {
                    let n = self.pieces;
                    o.push_str(&format!("\nreinterpret_cast<{c}*>({reg})[{q}] = reinterpret_cast<const {c}*>({p})[{n} * ({i}) + {q}];"));
                }
                o
            }
            (Some(c), true) => format!(
                "alignas({c}) {ty} {reg}[{width}];\n*reinterpret_cast<{c}*>({reg}) = reinterpret_cast<const {c}*>({p})[{i}];"
            ),
            (Some(c), false) => format!("alignas({c}) {ty} {reg}[{width}];"),
        }
    }

    /// The store of register `reg` to `p[i]`.
    pub(super) fn store(&self, reg: &str, p: &str, i: &str) -> String {
        match self.carrier {
            None => format!("reinterpret_cast<{0}*>({p})[{i}] = {reg};", self.ty),
            Some(c) if self.pieces > 1 => (0..self.pieces)
                .map(|q| {
                    let n = self.pieces;
                    format!("reinterpret_cast<{c}*>({p})[{n} * ({i}) + {q}] = reinterpret_cast<const {c}*>({reg})[{q}];")
                })
                .collect::<Vec<_>>()
                .join("\n"),
            Some(c) => {
                format!("reinterpret_cast<{c}*>({p})[{i}] = *reinterpret_cast<const {c}*>({reg});")
            }
        }
    }
}

/// Bytes of one element of `pointee`, for the types a spec can name (and the 2-wide
/// vector types a kernel may already take its buffers as: `__half2*` for an f16 buffer).
pub(super) fn element_bytes(pointee: &str) -> Option<usize> {
    Some(match pointee {
        "float2" | "int2" | "uint2" => 8,
        "double" | "long long" | "int64_t" | "unsigned long long" | "uint64_t" => 8,
        "__half2" | "half2" | "__nv_bfloat162" | "nv_bfloat162" => 4,
        "float" | "int" | "unsigned int" | "unsigned" | "int32_t" | "uint32_t" => 4,
        "__half" | "half" | "__nv_bfloat16" | "short" | "int16_t" | "unsigned short"
        | "uint16_t" => 2,
        "char" | "signed char" | "unsigned char" | "int8_t" | "uint8_t" | "bool" => 1,
        _ => return None,
    })
}

/// The CUDA vector type of `width` elements of `pointee`.
pub(super) fn vector_type(pointee: &str, width: usize) -> Option<&'static str> {
    Some(match (pointee, width) {
        ("float", 4) => "float4",
        ("float", 2) => "float2",
        ("double", 2) => "double2",
        ("__half" | "half", 2) => "__half2",
        ("__nv_bfloat16", 2) => "__nv_bfloat162",
        ("int", 4) => "int4",
        ("int", 2) => "int2",
        ("unsigned int" | "unsigned", 4) => "uint4",
        ("unsigned int" | "unsigned", 2) => "uint2",
        ("char" | "signed char" | "int8_t", 4) => "char4",
        ("char" | "signed char" | "int8_t", 2) => "char2",
        ("unsigned char" | "uint8_t", 4) => "uchar4",
        ("unsigned char" | "uint8_t", 2) => "uchar2",
        ("short" | "int16_t", 4) => "short4",
        ("short" | "int16_t", 2) => "short2",
        ("unsigned short" | "uint16_t", 4) => "ushort4",
        ("unsigned short" | "uint16_t", 2) => "ushort2",
        _ => return None,
    })
}

/// The bounds check and guarded body for `width` elements per thread: one vector access
/// per buffer and the body once per element where the thread's last element is in
/// bounds and `width` divides every index split's divisor ([`Splits`]; `fixed` names
/// the integers such a divisor may read), else the thread's elements one by one.
pub(super) fn emit_vectorized(
    src: &str,
    (shape, facts, fixed): (&Elementwise<'_>, &BodyFacts, &BTreeSet<String>),
    order: &[&String],
    types: &BTreeMap<&str, Lanes>,
    width: usize,
    names: &mut BTreeSet<String>,
) -> Result<String, EditError> {
    let nl = newline(src);
    let i = &shape.index;
    let ind = &shape.indent;
    let in1 = format!("{ind}{}", shape.unit);
    let in2 = format!("{in1}{}", shape.unit);
    let bound = bound_text(src, shape.bound);
    let regs: BTreeMap<&str, String> = order
        .iter()
        .map(|p| (p.as_str(), fresh(&format!("{p}{width}"), names)))
        .collect();
    let span = shape.body_span();
    let from = line_indent(src, span.start);
    let single = shape.body.len() == 1 && !src[span.clone()].contains('\n') && !facts.declares;

    let covered: Vec<ByteRange> = facts.subscripts.iter().map(|(r, _)| r.clone()).collect();
    let splits = Splits::find(src, &shape.body, i, width, fixed, &covered);
    let divides: String = splits
        .conditions(&|_| true)
        .iter()
        .map(|c| format!(" && {c}"))
        .collect();
    let mut o = format!(
        "if ({width} * {i} + {} < {bound}{divides}) {{{nl}",
        width - 1
    );
    for p in order {
        let (u, l, reg) = (&facts.buffers[*p], &types[p.as_str()], &regs[p.as_str()]);
        let load = u.read || !u.writes_unconditional;
        for line in l.declare(reg, p, i, load, u.written, width).lines() {
            o.push_str(&format!("{in1}{line}{nl}"));
        }
    }
    for lane in 0..width {
        let mut reps: Vec<(ByteRange, String)> = facts
            .subscripts
            .iter()
            .map(|(r, p)| (r.clone(), types[p.as_str()].lane(&regs[p.as_str()], lane)))
            .collect();
        reps.extend(splits.lane(src, &shape.body, lane, &covered));
        let body = render(src, &span, &reps)?;
        if facts.declares {
            o.push_str(&format!(
                "{in1}{{{nl}{in2}{}{nl}{in1}}}{nl}",
                reindent(&body, from, &in2)
            ));
        } else {
            o.push_str(&format!("{in1}{}{nl}", reindent(&body, from, &in1)));
        }
    }
    for p in order {
        if facts.buffers[*p].written {
            let store = types[p.as_str()].store(&regs[p.as_str()], p, i);
            for line in store.lines() {
                o.push_str(&format!("{in1}{line}{nl}"));
            }
        }
    }
    o.push_str(&format!("{ind}}} else {{{nl}"));
    let t = ["j", "k", "e"]
        .iter()
        .find(|n| !names.contains(**n))
        .map_or_else(|| fresh(&format!("{i}_tail"), names), |n| n.to_string());
    let reps: Vec<(ByteRange, String)> = facts
        .all_index
        .iter()
        .map(|r| (r.clone(), t.clone()))
        .collect();
    let body = render(src, &span, &reps)?;
    // Where a split's divisor decides, any thread may take this path: its own elements.
    let own = match divides.is_empty() {
        true => String::new(),
        false => format!(" && {t} < {width} * {i} + {width}"),
    };
    let head = format!(
        "for ({} {t} = {width} * {i}; {t} < {bound}{own}; ++{t})",
        shape.index_ty
    );
    if single {
        o.push_str(&format!("{in1}{head} {body}{nl}"));
    } else {
        o.push_str(&format!(
            "{in1}{head} {{{nl}{in2}{}{nl}{in1}}}{nl}",
            reindent(&body, from, &in2)
        ));
    }
    o.push_str(&format!("{ind}}}"));
    Ok(o)
}

#[cfg(test)]
mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::check::testing::{
        assert_has, cuda, first_shown, labels, not_applicable, show, LEAKY_RELU,
    };
    use super::*;

    const SAXPY: &str = include_str!("../../../../examples/saxpy.cu");
    const MATMUL: &str = include_str!("../../../../examples/matmul_naive.cu");
    const REDUCE: &str = include_str!("../../../../examples/reduce_sum.cu");

    #[test]
    fn vectorize_saxpy_with_float4_loads_and_a_scalar_tail() {
        let out = cuda(SAXPY, "saxpy", "vectorize", json!({})).unwrap();
        assert_eq!(labels(&out), ["VEC=4 (float4)", "VEC=2 (float2)"]);
        expect![[r#"
            // The first case is timed; every case is verified.
            // @bench n = 1 << 24, 4099
            // @bench x: in f32[n]
            // @bench y: inout f32[n] ~ normal(0, 1)
            // @bench a = 2.5
            // @bench grid = cdiv(n, 4 * 256); block = 256
            extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (4 * i + 3 < n) {
                    const float4 x4 = reinterpret_cast<const float4*>(x)[i];
                    float4 y4 = reinterpret_cast<const float4*>(y)[i];
                    y4.x = a * x4.x + y4.x;
                    y4.y = a * x4.y + y4.y;
                    y4.z = a * x4.z + y4.z;
                    y4.w = a * x4.w + y4.w;
                    reinterpret_cast<float4*>(y)[i] = y4;
                } else {
                    for (int j = 4 * i; j < n; ++j) y[j] = a * x[j] + y[j];
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, SAXPY, &out[0], "saxpy"));
    }

    #[test]
    fn vectorize_early_return_body_with_locals_and_index_uses() {
        let out = cuda(LEAKY_RELU, "leaky", "vectorize", json!({"widths": [2]})).unwrap();
        expect![[r#"
            // @bench n = 1000, 77
            // @bench x: in f32[n]; y: out f32[n]
            // @bench grid = cdiv(n, 2 * 128); block = 128
            __global__ void leaky(int n, const float* __restrict__ x, float* __restrict__ y) {
                const int i = blockIdx.x * blockDim.x + threadIdx.x;
                // past the end
                if (2 * i + 1 < n) {
                    const float2 x2 = reinterpret_cast<const float2*>(x)[i];
                    float2 y2;
                    {
                        float v = x2.x;
                        // keep small negatives
                        y2.x = v > 0.0f ? v : 1e-6f * (2 * i);
                    }
                    {
                        float v = x2.y;
                        // keep small negatives
                        y2.y = v > 0.0f ? v : 1e-6f * (2 * i + 1);
                    }
                    reinterpret_cast<float2*>(y)[i] = y2;
                } else {
                    for (int j = 2 * i; j < n; ++j) {
                        float v = x[j];
                        // keep small negatives
                        y[j] = v > 0.0f ? v : 1e-6f * j;
                    }
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, LEAKY_RELU, &out[0], "leaky"));
    }

    #[test]
    fn vectorize_takes_an_index_cast_to_a_wide_type() {
        // The style of kernels whose sizes pass 2^31: the index and its product widened.
        for init in [
            "(size_t)blockIdx.x * blockDim.x + threadIdx.x",
            "static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x",
            "(long long)(blockIdx.x * blockDim.x) + threadIdx.x",
        ] {
            let src = "// @bench n = 1000, 77\n// @bench x: in f32[n]; y: out f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void sq(long n, const float* x, float* y) {\n    const size_t i = INIT;\n    if (i < n) {\n        y[i] = x[i] * x[i];\n    }\n}\n"
                .replace("INIT", init);
            let out = cuda(&src, "sq", "vectorize", json!({"widths": [4]}))
                .unwrap_or_else(|e| panic!("{init}: {e}"));
            let text = &out[0].text;
            assert!(
                text.contains(&format!("const size_t i = {init};")),
                "{text}"
            );
            assert!(
                text.contains("reinterpret_cast<const float4*>(x)[i]"),
                "{text}"
            );
        }
        // A cast to a float type is not an index.
        let src = LEAKY_RELU.replace(
            "blockIdx.x * blockDim.x + threadIdx.x",
            "(float)blockIdx.x * blockDim.x + threadIdx.x",
        );
        let why = cuda(&src, "leaky", "vectorize", json!({}))
            .unwrap_err()
            .to_string();
        assert!(why.contains("is not the 1-D index"), "{why}");
    }

    #[test]
    fn vectorize_loads_a_written_buffer_when_a_write_is_conditional() {
        let src = LEAKY_RELU.replace(
            "y[i] = v > 0.0f ? v : 1e-6f * i;",
            "if (v > 0.0f) y[i] = v;",
        );
        let out = cuda(&src, "leaky", "vectorize", json!({"widths": [4]})).unwrap();
        assert!(
            out[0]
                .text
                .contains("float4 y4 = reinterpret_cast<const float4*>(y)[i];"),
            "{}",
            out[0].text
        );
    }

    #[test]
    fn vectorize_half_packs_eight_per_access() {
        let src = "#include <cuda_fp16.h>\n// @bench n = 1000\n// @bench x: in f16[n]; y: out f16[n]\n// @bench grid = cdiv(n, 256); block = 256\n__global__ void h(int n, const __half* x, __half* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) {\n        y[i] = __hmul(x[i], x[i]);\n    }\n}\n";
        let out = cuda(src, "h", "vectorize", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "VEC=8 (8×__half as uint4)",
                "VEC=4 (4×__half as uint2)",
                "VEC=2 (__half2)"
            ]
        );
        expect![[r#"
            // @bench n = 1000
            // @bench x: in f16[n]; y: out f16[n]
            // @bench grid = cdiv(n, 8 * 256); block = 256
            __global__ void h(int n, const __half* x, __half* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (8 * i + 7 < n) {
                    alignas(uint4) __half x8[8];
                    *reinterpret_cast<uint4*>(x8) = reinterpret_cast<const uint4*>(x)[i];
                    alignas(uint4) __half y8[8];
                    y8[0] = __hmul(x8[0], x8[0]);
                    y8[1] = __hmul(x8[1], x8[1]);
                    y8[2] = __hmul(x8[2], x8[2]);
                    y8[3] = __hmul(x8[3], x8[3]);
                    y8[4] = __hmul(x8[4], x8[4]);
                    y8[5] = __hmul(x8[5], x8[5]);
                    y8[6] = __hmul(x8[6], x8[6]);
                    y8[7] = __hmul(x8[7], x8[7]);
                    reinterpret_cast<uint4*>(y)[i] = *reinterpret_cast<const uint4*>(y8);
                } else {
                    for (int j = 8 * i; j < n; ++j) y[j] = __hmul(x[j], x[j]);
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, src, &out[0], "h"));
        expect![[r#"
            // @bench n = 1000
            // @bench x: in f16[n]; y: out f16[n]
            // @bench grid = cdiv(n, 2 * 256); block = 256
            __global__ void h(int n, const __half* x, __half* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (2 * i + 1 < n) {
                    const __half2 x2 = reinterpret_cast<const __half2*>(x)[i];
                    __half2 y2;
                    y2.x = __hmul(x2.x, x2.x);
                    y2.y = __hmul(x2.y, x2.y);
                    reinterpret_cast<__half2*>(y)[i] = y2;
                } else {
                    for (int j = 2 * i; j < n; ++j) y[j] = __hmul(x[j], x[j]);
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, src, &out[2], "h"));
        let only16 = cuda(src, "h", "vectorize", json!({"widths": [16]}));
        expect!["no usable candidate for `h`: VEC=16: `x` is `__half*`, which has no 16-wide vector type and no 8- or 16-byte packing"].assert_eq(&not_applicable(only16));
    }

    #[test]
    fn vectorize_gives_8_byte_elements_four_a_thread_as_two_uint4() {
        let src = "// @bench n = 4099\n// @bench x: in f64[n]; idx: in i64[n] ~ randint(0, n); y: out f64[n]\n// @bench grid = cdiv(n, 256); block = 256\n__global__ void pick(int n, const double* x, const long long* idx, double* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0 * x[i] + x[idx[i]];\n}\n";
        let out = cuda(src, "pick", "vectorize", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "VEC=4 (4×double as 2×uint4, 4×long long as 2×uint4)",
                "VEC=2 (double2, 2×long long as uint4)"
            ]
        );
        let shown = show(Lang::Cuda, src, &out[0], "pick");
        assert_has(
            &shown,
            &[
                "alignas(uint4) double x4[4];",
                "reinterpret_cast<uint4*>(x4)[1] = reinterpret_cast<const uint4*>(x)[2 * (i) + 1];",
                "reinterpret_cast<uint4*>(y)[2 * (i) + 0] = reinterpret_cast<const uint4*>(y4)[0];",
                "reinterpret_cast<uint4*>(y)[2 * (i) + 1] = reinterpret_cast<const uint4*>(y4)[1];",
            ],
        );
    }

    #[test]
    fn vectorize_mixed_widths_pack_each_buffer_by_its_own_bytes() {
        // f32 in, bf16 out: 16 bytes of bf16 are 8 elements; 8 floats are two float4s'
        // worth, and only 8-byte elements get a 32-byte carrier, so the width drops; 4
        // packs bf16 into a uint2.
        let src = "#include <cuda_bf16.h>\n// @bench n = 4099\n// @bench x: in f32[n]; y: out bf16[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void to_bf16(int n, const float* x, __nv_bfloat16* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    y[i] = __float2bfloat16(x[i] * 0.5f);\n}\n";
        let out = cuda(src, "to_bf16", "vectorize", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "VEC=4 (float4, 4×__nv_bfloat16 as uint2)",
                "VEC=2 (float2, __nv_bfloat162)"
            ]
        );
        expect![[r#"
            // @bench n = 4099
            // @bench x: in f32[n]; y: out bf16[n]
            // @bench grid = cdiv(n, 4 * 128); block = 128
            __global__ void to_bf16(int n, const float* x, __nv_bfloat16* y) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (4 * i + 3 < n) {
                    const float4 x4 = reinterpret_cast<const float4*>(x)[i];
                    alignas(uint2) __nv_bfloat16 y4[4];
                    y4[0] = __float2bfloat16(x4.x * 0.5f);
                    y4[1] = __float2bfloat16(x4.y * 0.5f);
                    y4[2] = __float2bfloat16(x4.z * 0.5f);
                    y4[3] = __float2bfloat16(x4.w * 0.5f);
                    reinterpret_cast<uint2*>(y)[i] = *reinterpret_cast<const uint2*>(y4);
                } else {
                    for (int j = 4 * i; j < n; ++j) y[j] = __float2bfloat16(x[j] * 0.5f);
                }
            }"#]]
        .assert_eq(&show(Lang::Cuda, src, &out[0], "to_bf16"));
        let u8s = "// @bench n = 1 << 20, 77\n// @bench x: in u8[n]; y: out u8[n]\n// @bench grid = cdiv(n, 256); block = 256\n__global__ void inv(int n, const unsigned char* x, unsigned char* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 255 - x[i];\n}\n";
        let out = cuda(u8s, "inv", "vectorize", json!({})).unwrap();
        assert_eq!(
            labels(&out),
            [
                "VEC=16 (16×unsigned char as uint4)",
                "VEC=4 (uchar4)",
                "VEC=2 (uchar2)"
            ],
            "u8: 16 bytes packed, and CUDA's uchar4 and uchar2"
        );
    }

    const SPLITS: &str = include_str!("../../../../tests/fixtures/rewrites/vec_rows/splits.cu");

    #[test]
    fn vectorize_shares_a_permute_index_split_where_the_width_divides_it() {
        let text = first_shown(SPLITS, "permute_hwc", "vectorize", json!({"widths": [4]}));
        assert_has(
            &text,
            &[
                // `WC` is a local before the index: the condition reads it where it stands.
                "if (4 * idx + 3 < (H * WC) && C % 4 == 0 && WC % 4 == 0) {",
                "int c = ((4 * idx) % C + 3);",
                "int w = ((4 * idx) / C) % W;",
                "int h = (4 * idx) / WC;",
                // Any thread may take the scalar path now: its own four elements only.
                "for (int j = 4 * idx; j < (H * WC) && j < 4 * idx + 4; ++j) {",
                "int h = j / WC;",
            ],
        );
    }

    #[test]
    fn vectorize_says_why_a_kernel_does_not_fit() {
        let why = |src: &str, k: &str| not_applicable(cuda(src, k, "vectorize", json!({})));
        expect!["`matmul` is not a 1-D elementwise kernel: `int row = blockIdx.y * blockDim.y + threadIdx.y;` is a 2-D or 3-D index; only 1-D kernels are handled; vectorize needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"]
            .assert_eq(&why(MATMUL, "matmul"));
        expect!["`reduce_naive` cannot be vectorized: `out` is used other than as `out[i]` (in `atomicAdd(out, load_as_float(x, i));`)"]
            .assert_eq(&why(REDUCE, "reduce_naive"));
        expect!["`reduce_tree` is not a 1-D elementwise kernel: `int i = blockIdx.x * BLOCK + threadIdx.x;` is not the 1-D index `blockIdx.x * blockDim.x + threadIdx.x`; vectorize needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"]
            .assert_eq(&why(REDUCE, "reduce_tree"));
        // Another element of a buffer the body writes: a neighbour's thread may write it.
        let shifted = SAXPY.replace("+ y[i];", "+ y[i + 1];");
        expect!["`saxpy` cannot be vectorized: `y[i + 1]` is not the thread's own element `y[i]`, and the body writes `y`"]
            .assert_eq(&why(&shifted, "saxpy"));
        let address = SAXPY.replace("y[i] = a * x[i] + y[i];", "atomicAdd(&y[i], a * x[i]);");
        expect!["`saxpy` cannot be vectorized: `&y[i]` takes an element's address"]
            .assert_eq(&why(&address, "saxpy"));
        let after = SAXPY.replace(
            "y[i] = a * x[i] + y[i];\n",
            "y[i] = a * x[i] + y[i];\n    __syncthreads();\n",
        );
        expect!["`saxpy` is not a 1-D elementwise kernel: `__syncthreads();` follows the bounds check; the check must end the kernel; vectorize needs `int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return;`) with every global access `p[i]`"]
            .assert_eq(&why(&after, "saxpy"));
        let bad = cuda(SAXPY, "saxpy", "vectorize", json!({"widths": [3]}));
        expect!["parameter `widths`: 3 is not a vector width; use 2, 4, 8 or 16"]
            .assert_eq(&bad.unwrap_err().to_string());
        let wide = cuda(SAXPY, "saxpy", "vectorize", json!({"widths": [8]}));
        expect!["no usable candidate for `saxpy`: VEC=8: `x` is `float*`, which has no 8-wide vector type and no 8- or 16-byte packing"].assert_eq(&not_applicable(wide));
    }
}
