//! Fixture tests for constructs of real projects that nvcc and Python accept (issue
//! #31): host/device qualifier macros, explicit instantiations, macro lines, inactive
//! preprocessor branches, and Triton kernels made by calls or nested in statements.
//! Each fixture is parsed as the product parses it (with `mask`), and the test states
//! what a user sees: the kernels found, the syntax errors, the device slice.

use super::*;

/// The model of `src` parsed as the document and `check` parse it.
fn model(lang: Lang, src: &str) -> FileModel {
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&ts_language(lang))
        .expect("the grammar loads");
    let tree = parse_text(&mut parser, lang, src).expect("a tree");
    analyze(lang, src, &tree)
}

fn kernel_names(m: &FileModel) -> Vec<&str> {
    m.kernels.iter().map(|k| k.name.as_str()).collect()
}

fn errors(src: &str, m: &FileModel) -> Vec<String> {
    m.syntax_errors
        .iter()
        .map(|e| format!("{:?} {}: {}", e.range, &src[e.range.clone()], e.message))
        .collect()
}

#[test]
fn triton_kernels_made_by_jit_calls() {
    let src = r#"import triton
import triton.language as tl
from triton import jit as J

def _fwd(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)

_fwd = triton.jit(_fwd)

def _bwd(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    pass

_bwd = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(triton.jit(_bwd))

def _aliased(x_ptr):
    pass

KERNELS = {"aliased": J(_aliased)}

def not_a_kernel(x):
    return x

wrapped = some_other_decorator(not_a_kernel)
also_not = triton.jit(not_a_kernel, 3) if False else None
"#;
    let m = model(Lang::Triton, src);
    assert_eq!(kernel_names(&m), ["_fwd", "_bwd", "_aliased"]);
    assert_eq!(m.kernels[1].heuristics, ["EVEN"]);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert!(is_triton_source(
        "import triton\ndef f(x):\n    pass\nf = triton.jit(f)\n"
    ));
}

#[test]
fn triton_kernels_under_any_nesting_of_statements() {
    let src = r#"import triton
import triton.language as tl

if triton.__version__ >= "3":
    @triton.jit
    def k_if(x):
        pass
elif HAS_OLD:
    @triton.jit
    def k_elif(x):
        pass
else:
    try:
        with ctx():
            @triton.jit
            def k_try_with(x):
                pass
    except ImportError:
        if True:
            for _ in range(1):
                @triton.jit
                def k_deep(x):
                    pass
    finally:
        pass

class Op:
    class Inner:
        @staticmethod
        @triton.jit
        def k_class(x):
            pass
"#;
    let m = model(Lang::Triton, src);
    assert_eq!(
        kernel_names(&m),
        ["k_if", "k_elif", "k_try_with", "k_deep", "k_class"]
    );
}

#[test]
fn starred_items_in_return_and_yield_lists_parse() {
    let src = r#"import triton

class F(torch.autograd.Function):
    @staticmethod
    def backward(ctx, dy):
        return dy, *[None] * 3

    @staticmethod
    def more(ctx, a, b):
        return a, b, *grads, *(None,) * 2  # trailing comment with * star

    def gen(self):
        yield self.x, *self.rest
        return (a, *b)

@triton.jit
def k(x):
    y = x * 2
    return y ** 2
"#;
    let m = model(Lang::Triton, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_eq!(kernel_names(&m), ["k"]);
    // The mask hides only the stars of the starred items; `x * 2`, `**` stay.
    let masked = mask::masked(Lang::Triton, src).expect("stars hidden");
    assert_eq!(masked.len(), src.len());
    let hidden: Vec<usize> = src
        .bytes()
        .zip(masked.bytes())
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect();
    assert!(hidden.iter().all(|&i| &src[i..i + 1] == "*"), "{hidden:?}");
    assert_eq!(hidden.len(), 4, "{hidden:?}");
}
