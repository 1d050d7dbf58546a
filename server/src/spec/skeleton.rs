//! A starting `@bench` spec written from a kernel's signature (the "Insert @bench spec"
//! code action). The result always analyzes cleanly for kernels whose parameters are
//! pointers to known element types and plain numbers; the author then adjusts sizes,
//! roles and shapes.
//!
//! Guesses: pointers (CUDA `T*`, Triton names ending in `ptr`) become buffers of shape
//! `[n]`, role by [`guess_role`](super::check::guess_role); the first integer parameter is
//! the size (`= 1 << 20, 4099`: a second case whose size is not a multiple of the block,
//! rounded up to the widest vector type among the buffers), other integers are `1024` (strides `1`); float scalars `1.0`;
//! constexpr / template parameters `1024` / `256`; the grid covers the size with a block of
//! 256 (CUDA) or the kernel's BLOCK-like constexpr (Triton).

use super::check::guess_role;
use super::ctype::{pointee_dtype, scalar_ty};
use crate::syntax::{Kernel, Lang, ParamKind};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skeleton {
    /// Start of the line where `kernel.def_range` starts.
    pub insert_at: usize,
    /// Whole lines with the comment prefix and that line's indentation, each ending in '\n'.
    pub text: String,
}

const FLOAT_NAMES: [&str; 12] = [
    "alpha",
    "beta",
    "gamma",
    "eps",
    "epsilon",
    "scale",
    "a",
    "b",
    "lr",
    "momentum",
    "temperature",
    "p",
];

/// The spec of a kernel that walks a matrix (`skeleton2d`): both dimensions (an odd
/// second case for the tails), matrices and vectors by how they are indexed, 16 x 16
/// blocks over the two indices.
fn matrix_lines(
    kernel: &Kernel,
    source: &str,
    s: &super::skeleton2d::Shape2d,
    prefix: &str,
) -> String {
    let mut stmts = vec![format!("{} = 2048, 1001; {} = 2048, 77", s.outer, s.inner)];
    for p in &kernel.params {
        let n = &p.name;
        match &p.kind {
            ParamKind::Pointer { pointee, is_const } => {
                let (dt, _) = pointee_dtype(pointee).unwrap_or((super::DType::F32, 1));
                let dims = super::skeleton2d::buffer_dims(s, kernel, source, n);
                let role = guess_role(kernel.lang, n, *is_const);
                stmts.push(format!("{n}: {role} {dt}[{dims}]"));
            }
            ParamKind::Scalar { ty } if *n != s.outer && *n != s.inner => {
                let float = scalar_ty(ty).is_some_and(|t| t.is_float());
                stmts.push(format!("{n} = {}", if float { "1.0" } else { "1" }));
            }
            _ => {}
        }
    }
    stmts.push(format!(
        "grid = (cdiv({}, 16), cdiv({}, 16)); block = (16, 16)",
        s.x_dim, s.y_dim
    ));
    stmts.iter().map(|t| format!("{prefix}{t}\n")).collect()
}

pub fn skeleton(kernel: &Kernel, source: &str) -> Skeleton {
    let start = kernel.def_range.start.min(source.len());
    // `get` so that an offset off a char boundary (a stale kernel model) cannot panic.
    let insert_at = source
        .get(..start)
        .and_then(|s| s.rfind('\n'))
        .map_or(0, |i| i + 1);
    let line = source
        .get(insert_at..)
        .and_then(|s| s.lines().next())
        .unwrap_or("");
    let indent: String = line
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect();
    let prefix = match kernel.lang {
        Lang::Cuda => format!("{indent}// @bench "),
        Lang::Triton => format!("{indent}# @bench "),
    };

    let is_ptr = |k: &ParamKind, name: &str| match k {
        ParamKind::Pointer { .. } => true,
        ParamKind::TritonArg { .. } => name.ends_with("ptr") || name.ends_with("Ptr"),
        _ => false,
    };
    let is_float_scalar = |k: &ParamKind, name: &str| match k {
        ParamKind::Scalar { ty } => scalar_ty(ty).is_some_and(|t| t.is_float()),
        ParamKind::TritonArg { annotation } => {
            annotation.as_deref().is_some_and(|a| a.contains("float"))
                || FLOAT_NAMES.contains(&name.to_ascii_lowercase().as_str())
        }
        _ => false,
    };
    let size_param = kernel
        .params
        .iter()
        .find(|p| {
            matches!(
                p.kind,
                ParamKind::Scalar { .. } | ParamKind::TritonArg { .. }
            ) && !is_ptr(&p.kind, &p.name)
                && !is_float_scalar(&p.kind, &p.name)
        })
        .map(|p| p.name.clone());
    let taken = |n: &str| {
        kernel.params.iter().any(|p| p.name == n) || kernel.template_params.iter().any(|t| t == n)
    };
    let size = size_param.clone().unwrap_or_else(|| {
        if taken("n") {
            "n_elems".to_string()
        } else {
            "n".to_string()
        }
    });

    // The second case is odd on purpose: tails and bounds checks get tried.
    let width = kernel
        .params
        .iter()
        .filter_map(|p| match &p.kind {
            ParamKind::Pointer { pointee, .. } => pointee_dtype(pointee).map(|(_, w)| w),
            _ => None,
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let sizes = format!("1 << 20, {}", 4099u64.div_ceil(width) * width);
    let two_d = match kernel.lang {
        Lang::Cuda => super::skeleton2d::shape(kernel, source),
        Lang::Triton => None,
    };
    if let Some(s) = &two_d {
        return Skeleton {
            insert_at,
            text: matrix_lines(kernel, source, s, &prefix),
        };
    }
    let mut stmts: Vec<String> = Vec::new();
    if size_param.is_none() {
        stmts.push(format!("{size} = {sizes}"));
    }
    for t in &kernel.template_params {
        stmts.push(format!("{t} = 256"));
    }
    for p in &kernel.params {
        let n = &p.name;
        match &p.kind {
            ParamKind::Pointer { pointee, is_const } => {
                let (dt, _) = pointee_dtype(pointee).unwrap_or((super::DType::F32, 1));
                stmts.push(format!(
                    "{n}: {} {dt}[{size}]",
                    guess_role(kernel.lang, n, *is_const)
                ));
            }
            ParamKind::TritonArg { .. } if is_ptr(&p.kind, n) => {
                stmts.push(format!(
                    "{n}: {} f32[{size}]",
                    guess_role(kernel.lang, n, false)
                ));
            }
            k if is_float_scalar(k, n) => stmts.push(format!("{n} = 1.0")),
            ParamKind::Scalar { .. } | ParamKind::TritonArg { .. } => {
                let v = if Some(n) == size_param.as_ref() {
                    sizes.as_str()
                } else if n.starts_with("stride") {
                    "1"
                } else {
                    "1024"
                };
                stmts.push(format!("{n} = {v}"));
            }
            ParamKind::Constexpr => stmts.push(format!("{n} = 1024")),
            ParamKind::Other { .. } => {}
        }
    }
    match kernel.lang {
        Lang::Cuda => stmts.push(format!("grid = cdiv({size}, 256); block = 256")),
        Lang::Triton => {
            let constexprs: Vec<&str> = kernel
                .params
                .iter()
                .filter(|p| p.kind == ParamKind::Constexpr)
                .map(|p| p.name.as_str())
                .collect();
            let block = constexprs
                .iter()
                .find(|c| c.to_ascii_uppercase().contains("BLOCK"))
                .or(constexprs.first());
            match block {
                Some(b) => stmts.push(format!("grid = cdiv({size}, {b})")),
                None => stmts.push(format!("grid = cdiv({size}, 1024)")),
            }
        }
    }
    let mut text = String::new();
    for s in stmts {
        text.push_str(&prefix);
        text.push_str(&s);
        text.push('\n');
    }
    Skeleton { insert_at, text }
}
