//! The 2-D guess behind "Insert @bench spec" for a CUDA kernel that walks a matrix: two
//! thread indices (one from `blockIdx.x`, one from `blockIdx.y`), each bounded by an
//! integer parameter (`r < rows`, `c < cols`). The dimension multiplied inside an index
//! (`x[r * cols + c]`) is the inner one. A buffer indexed by a product is a matrix
//! `[outer, inner]`; one indexed by a bounded index alone (`bias[c]`) is a vector of
//! that dimension. The grid covers each index's dimension with 16 x 16 blocks. Pure:
//! the kernel's text in, the shape out (None when the kernel is not that shape).

use crate::syntax::{Kernel, ParamKind};

/// What the skeleton needs of a 2-D kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape2d {
    pub outer: String,
    pub inner: String,
    /// The dimensions the grid's x and y cover.
    pub x_dim: String,
    pub y_dim: String,
}

/// The variable assigned from an expression that reads `blockIdx.<axis>`.
fn index_var(body: &str, axis: char) -> Option<&str> {
    let needle = format!("blockIdx.{axis}");
    body.split(';').find_map(|stmt| {
        let (lhs, rhs) = stmt.split_once('=')?;
        if !rhs.contains(&needle) || rhs.starts_with('=') {
            return None;
        }
        lhs.split_whitespace().last()
    })
}

/// The integer parameter `var` is compared against (`var < P`).
fn bound_of<'a>(body: &str, var: &str, ints: &[&'a str]) -> Option<&'a str> {
    ints.iter()
        .copied()
        .find(|p| body.contains(&format!("{var} < {p}")))
}

/// The index expressions of `name[...]` in `body`.
fn indices<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    let pat = format!("{name}[");
    body.match_indices(&pat)
        .filter(|(at, _)| {
            let before = body[..*at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .filter_map(|(at, _)| {
            let rest = &body[at + pat.len()..];
            rest.find(']').map(|end| &rest[..end])
        })
        .collect()
}

/// The 2-D shape of a CUDA kernel, if it has one.
pub fn shape(kernel: &Kernel, source: &str) -> Option<Shape2d> {
    let body = source.get(kernel.def_range.clone())?;
    let ints: Vec<&str> = kernel
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamKind::Scalar { .. }) && !p.name.starts_with("stride"))
        .map(|p| p.name.as_str())
        .collect();
    let x_dim = bound_of(body, index_var(body, 'x')?, &ints)?;
    let y_dim = bound_of(body, index_var(body, 'y')?, &ints)?;
    if x_dim == y_dim {
        return None;
    }
    let multiplied = |d: &str| body.contains(&format!("* {d}")) || body.contains(&format!("{d} *"));
    let (outer, inner) = match (multiplied(x_dim), multiplied(y_dim)) {
        (true, false) => (y_dim, x_dim),
        _ => (x_dim, y_dim),
    };
    Some(Shape2d {
        outer: outer.into(),
        inner: inner.into(),
        x_dim: x_dim.into(),
        y_dim: y_dim.into(),
    })
}

/// The shape of buffer `name`: `[outer, inner]`, or `[d]` when every index of it is a
/// single variable bounded by `d`.
pub fn buffer_dims(s: &Shape2d, kernel: &Kernel, source: &str, name: &str) -> String {
    let body = source.get(kernel.def_range.clone()).unwrap_or("");
    let dims = [s.outer.as_str(), s.inner.as_str()];
    let single = indices(body, name)
        .iter()
        .map(|i| {
            let v = i.trim();
            let plain = v.chars().all(|c| c.is_alphanumeric() || c == '_');
            plain.then(|| bound_of(body, v, &dims)).flatten()
        })
        .collect::<Option<Vec<&str>>>();
    match single.as_deref() {
        Some([d, rest @ ..]) if rest.iter().all(|r| r == d) => d.to_string(),
        _ => format!("{}, {}", s.outer, s.inner),
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::{analyze, skeleton, EvalEnv};
    use crate::syntax::{self, Lang};

    /// The skeleton written into `src` above its first kernel, which must analyze
    /// cleanly; returns the spec lines.
    fn skeleton_of(src: &str) -> String {
        let kernels = |t: &str| {
            let doc = crate::document::Document::new(Lang::Cuda, 0, t);
            syntax::analyze(Lang::Cuda, t, doc.tree().unwrap()).kernels
        };
        let sk = skeleton(&kernels(src)[0], src);
        let mut with = src.to_string();
        with.insert_str(sk.insert_at, &sk.text);
        let ks = kernels(&with);
        let r = analyze(&ks[0], &ks, &EvalEnv::default());
        assert!(r.plan.is_some(), "{:?}\n{with}", r.diagnostics);
        sk.text
    }

    #[test]
    fn a_row_kernel_gets_a_two_dimensional_skeleton() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/bias_relu_rows.cu");
        let full = std::fs::read_to_string(path).unwrap();
        let src = &full[full.find("__global__").unwrap()..];
        expect_test::expect![[r#"
            // @bench rows = 2048, 1001; cols = 2048, 77
            // @bench x: in f32[rows, cols]
            // @bench bias: in f32[cols]
            // @bench y: out f32[rows, cols]
            // @bench grid = (cdiv(rows, 16), cdiv(cols, 16)); block = (16, 16)
        "#]]
        .assert_eq(&skeleton_of(src));
    }

    #[test]
    fn a_column_first_kernel_puts_the_inner_dimension_on_x() {
        let src = "__global__ void scale(const float* a, float* b, int n, int m) {\n    int j = blockIdx.x * blockDim.x + threadIdx.x;\n    int i = blockIdx.y * blockDim.y + threadIdx.y;\n    if (i < n && j < m) b[i * m + j] = 2.0f * a[i * m + j];\n}\n";
        expect_test::expect![[r#"
            // @bench n = 2048, 1001; m = 2048, 77
            // @bench a: in f32[n, m]
            // @bench b: inout f32[n, m]
            // @bench grid = (cdiv(m, 16), cdiv(n, 16)); block = (16, 16)
        "#]]
        .assert_eq(&skeleton_of(src));
    }

    #[test]
    fn a_one_dimensional_kernel_keeps_the_flat_skeleton() {
        let src = "__global__ void saxpy(int n, float a, const float* x, float* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];\n}\n";
        assert!(skeleton_of(src).contains("x: in f32[n]"));
    }
}
