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

/// The device slice as lines, with blanked lines empty.
fn slice_lines(m: &FileModel) -> Vec<&str> {
    m.device_slice.lines().map(str::trim_end).collect()
}

/// The 0-based lines `blank` are blanked in `m`'s device slice and `kept` are `src`'s.
fn assert_slice(m: &FileModel, src: &str, blank: &[usize], kept: &[usize]) {
    let lines = slice_lines(m);
    for &b in blank {
        assert_eq!(lines[b], "", "line {} is host code", b + 1);
    }
    for &k in kept {
        let want = src.lines().nth(k).unwrap_or("").trim_end();
        assert_eq!(lines[k], want, "line {} is kept", k + 1);
    }
}

#[test]
fn host_device_macros_keep_functions_and_parse() {
    let src = r#"#include <cuda_runtime.h>
#define HD __host__ __device__
#define QUAL_FN __device__ __forceinline__
#define DECL QUAL_FN static
HD inline float sq(float x) { return x * x; }
template <typename T>
HD constexpr T twice(T x) { return x + x; }
HOST_DEVICE float cube(float x) { return x * x * x; }
CUTLASS_HOST_DEVICE
int idx(int a, int b) { return a * b; }
QUAL_FN float quad(float x) { return sq(sq(x)); }
DECL int clampi(int v) { return v < 0 ? 0 : v; }
struct Vec2 {
  float x, y;
  C10_HOST_DEVICE Vec2 operator+(const Vec2& o) const { return {x + o.x, y + o.y}; }
  float host_len() const { return x; }
};
EXPORT_API int host_entry(int n) { return n; }
__global__ void k(float* out, int n) {
  int i = idx(blockIdx.x, blockDim.x) + threadIdx.x;
  if (i < n) out[i] = sq(out[i]) + twice(out[i]) + cube(out[i]) + quad(1.f) + clampi(i);
}
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_eq!(kernel_names(&m), ["k"]);
    let lines = slice_lines(&m);
    for kept in [4, 6, 7, 8, 9, 10, 11, 14] {
        assert_eq!(
            lines[kept],
            src.lines().nth(kept).unwrap(),
            "line {}",
            kept + 1
        );
    }
    // Host code stays blanked: a member without a qualifier, a function whose head
    // names some other macro.
    assert_eq!(lines[15], "");
    assert_eq!(lines[17], "");
}

#[test]
fn explicit_instantiations_in_namespaces_parse() {
    let src = r#"namespace ops {
template <typename T> struct Acc { T v; };
template struct Acc<float>;
namespace detail {
template <typename T, int N> class Tile { T a[N]; };
template class Tile<__half, 128>;
extern template class Tile<float, 64>;
}  // namespace detail
template union std_like<int>;
}
__global__ void k(float* x) { x[0] = 0; }
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_eq!(kernel_names(&m), ["k"]);
}

#[test]
fn empty_brace_default_arguments_parse() {
    let src = r#"struct Opts { int a; float b; };
__device__ float f(float x, Opts o = {}) { return x + o.b; }
template <typename T>
__device__ T g(T x, T y = { }, int z = 0) { return x + y; }
__global__ void k(float* x, Opts o) {
  Opts p = {};
  p = {};
  x[0] = f(x[0]) + g(x[1]) + (x[2] == 1.f);
}
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_eq!(kernel_names(&m), ["k"]);
}

#[test]
fn typename_in_expressions_parses() {
    let src = r#"template <typename T>
__device__ typename T::Params make(int a, int b) {
  return typename T::Params{a, b};
}
template <typename K>
__global__ void k(float* x) {
  using L = typename K::Loader;
  typename K::Loader loader;
  typename K::template Load<4>(loader).run(x);
  auto p = typename K::Params(1, 2);
  x[0] = make<K>(1, 2).v;
}
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_eq!(kernel_names(&m), ["k"]);
}

#[test]
fn file_scope_macro_invocations_without_semicolons() {
    let mut src = String::from(
        "#define Make_Op(NAME, T) __global__ void NAME##_k(T* a) { a[0] = a[0]; }\n#define def_op(NAME) __global__ void NAME(float* a) {}\n",
    );
    for i in 0..100 {
        src.push_str(&format!("Make_Op(op{i}, half)\n"));
    }
    src.push_str(
        "def_op(plain)\n// a kernel after them\n__global__ void last(float* x) { x[0] = 1; }\n",
    );
    let m = model(Lang::Cuda, &src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(&src, &m));
    assert_eq!(kernel_names(&m), ["last"]);
}

#[test]
fn explicit_instantiations_of_host_templates_go_with_their_definitions() {
    let src = r#"template <typename T>
__global__ void k(T* x, int n) { x[0] = n; }
template <typename T, int N>
void launch(T* x, int n, cudaStream_t s) { k<T><<<1, N, 0, s>>>(x, n); }
template void launch<float, 128>(float*, int, cudaStream_t);
template void launch<at::Half, 64>(at::Half*, int, cudaStream_t);
template __global__ void k<float>(float*, int);
template <typename T>
__device__ T twice(T v) { return v + v; }
template float twice<float>(float);
namespace ops {
template <typename T> void run(T* x);
template void run<double>(double*);
}
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    let lines = slice_lines(&m);
    // The host template and its instantiations are blanked together.
    assert_eq!(&lines[3..6], ["", "", ""]);
    assert_eq!(lines[12], "");
    // Instantiations of a kernel or a device function stay.
    assert_eq!(lines[6], src.lines().nth(6).unwrap());
    assert_eq!(lines[9], src.lines().nth(9).unwrap());
}

#[test]
fn qualifier_macro_before_other_macros_in_a_member_head() {
    // As glm writes its members: the qualifier macro, then another macro the grammar
    // cannot place, then the type.
    let src = r#"template <typename T>
struct functor1 {
    GLM_FUNC_QUALIFIER GLM_CONSTEXPR static vec<1, T> call(T (*Func)(T x), vec<1, T> const& v)
    {
        return vec<1, T>(Func(v.x));
    }
    OTHER_MACRO static int host_only(int x) { return x; }
public:
    int after;
};
"#;
    let m = model(Lang::Cuda, src);
    let lines = slice_lines(&m);
    for kept in [2, 3, 4, 5, 7, 8] {
        assert_eq!(
            lines[kept],
            src.lines().nth(kept).unwrap().trim_end(),
            "line {}",
            kept + 1
        );
    }
    assert_eq!(
        lines[6], "",
        "a member with another macro is host code, blanked whole"
    );
}

/// Prints the device slice of `$KERNEL_LSP_SLICE_FILE` (a debugging aid, not a check).
#[test]
#[ignore]
fn print_device_slice() {
    let Ok(path) = std::env::var("KERNEL_LSP_SLICE_FILE") else {
        return;
    };
    let src = std::fs::read_to_string(path).unwrap_or_default();
    println!("{}", model(Lang::Cuda, &src).device_slice);
}

/// A host function after a `#define` whose continued lines end in `;`: its blank
/// starts at the function, never inside the macro's lines (which NVRTC expands).
#[test]
fn a_blanked_head_never_reaches_into_a_continued_define() {
    let src = "#define LAUNCHER(T) \\\n  void launch_##T(T* p) {  \\\n    fill(p);              \\\n  }\nvoid host_fn(int n) { (void)n; }\n";
    let m = model(Lang::Cuda, src);
    let lines = slice_lines(&m);
    let define: Vec<&str> = src.lines().take(4).map(str::trim_end).collect();
    assert_eq!(lines[..4], define[..]);
    assert_eq!(lines[4], "");
}

/// A C header's linkage block opened and closed in separate `#ifdef __cplusplus`
/// groups: the declarations between parse as items, so host prototypes (naming host
/// types such as `FILE`) are blanked, device code and types stay, and the groups stay in
/// the slice for NVRTC.
#[test]
fn linkage_block_split_over_conditional_groups() {
    let src = r#"#pragma once
#ifdef  __cplusplus
extern "C" {
#endif
    typedef struct { int n; } lib_params;
    FILE * lib_fopen(const char * fname, const char * mode);
    LIB_API int64_t lib_cycles(void);
    __device__ inline int lib_twice(int x) { return 2 * x; }
    LIB_API void lib_run(lib_params p) { lib_work(p); }
#if defined(__cplusplus)
}  // extern "C"
#endif
__global__ void k(int* p) { p[0] = lib_twice(p[0]); }
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_eq!(kernel_names(&m), ["k"]);
    assert_slice(&m, src, &[5, 6, 8], &[1, 2, 3, 4, 7, 9, 10, 11, 12]);
}

/// A PyTorch extension's header declares its launchers as host function templates
/// taking `at::Tensor` and `at::optional<...>`, types NVRTC never sees: the prototypes
/// are blanked like other host prototypes; device templates and qualified ones stay.
#[test]
fn host_template_prototypes_are_blanked() {
    let src = r#"namespace at { class Tensor; }
namespace ext {
template <uint32_t CDIM>
void launch_fwd(const at::Tensor means, const at::optional<at::Tensor> masks,
                at::Tensor out);
template <typename T> void launch_bwd(at::Tensor x);
template <typename T> __device__ T twice(T x);
template <typename T> HOST_DEVICE T thrice(T x);
template <typename T> struct Acc;
}
"#;
    let m = model(Lang::Cuda, src);
    assert!(m.syntax_errors.is_empty(), "{:?}", errors(src, &m));
    assert_slice(&m, src, &[2, 3, 4, 5], &[0, 1, 6, 7, 8, 9]);
}

/// A constructor head whose initializers sit in an `#if` (glm) reads as a declaration;
/// it is not blanked, which would cut the conditional group in half.
#[test]
fn a_declaration_holding_a_directive_is_never_blanked() {
    let src = "namespace glm {\ntemplate<typename T>\nGLM_QUALIFIER vec<T>::vec()\n#if GLM_INIT\n    : x(0)\n#endif\n{}\n}\n";
    let m = model(Lang::Cuda, src);
    assert_eq!(m.device_slice, src);
}

/// Explicit instantiations written by a macro (`__INS__(3)` lines after `#define
/// __INS__(CDIM) template void launch<CDIM>(...);`, or with the `;` at the invocation,
/// or through a macro of such macros, ggml's `DECL_..._CASE`s): those of a host template
/// go with it; those of one of the file's kernels stay.
#[test]
fn instantiation_macros_of_host_templates_are_blanked() {
    let src = r#"template <uint32_t CDIM>
void launch(const at::Tensor x, at::optional<at::Tensor> m) { run<CDIM>(x); }
#define __INS__(CDIM) \
    template void launch<CDIM>(const at::Tensor x, at::optional<at::Tensor> m);
__INS__(1)
__INS__(3)
template <int N> __global__ void k(float* p) { p[0] = N; }
#define KERNELS(N) template void k<N>(float* p);
KERNELS(1)
KERNELS(2)
#define DECL_CASE(D, N) template void launch<D * N>(const at::Tensor x, at::optional<at::Tensor> m)
#define DECL_CASES(D) \
    extern DECL_CASE(D, 1); \
    extern DECL_CASE(D, 2); \

DECL_CASES(64)
extern DECL_CASE(8, 1);
DECL_CASE(8, 2);
"#;
    let m = model(Lang::Cuda, src);
    assert_slice(
        &m,
        src,
        &[0, 1, 4, 5, 15, 16, 17],
        &[2, 3, 6, 7, 8, 9, 10, 11, 12, 13],
    );
}

/// `using std::sqrt;` (glm, beside its own `sqrt` overloads) is device code's: it stays
/// in the slice; other using-declarations of `std` names NVRTC may lack are blanked.
#[test]
fn using_declarations_of_std_math_functions_stay() {
    let src = "namespace glm {\nusing std::sqrt;\nusing ::std::fabs;\nusing std::vector;\nusing namespace std;\nusing std::chrono::seconds;\n}\n";
    let m = model(Lang::Cuda, src);
    let lines = slice_lines(&m);
    assert_eq!(lines[1], "using std::sqrt;");
    assert_eq!(lines[2], "using ::std::fabs;");
    for blank in [3, 4, 5] {
        assert_eq!(lines[blank], "", "line {}", blank + 1);
    }
}

/// A C library header as ggml writes it: a split linkage block holding conditional
/// groups, a deprecation macro wrapping a prototype, attribute macros on a line of their
/// own. Host prototypes and functions are blanked with their attributes, types and the
/// wrapped prototype stay (the grammar once read it and everything after it as one host
/// function, typedefs included), and a kernel-defining macro line stays.
#[test]
fn c_library_header_keeps_its_types_and_blanks_its_prototypes() {
    let src = r#"#ifdef __cplusplus
extern "C" {
#endif
    GGML_API int ggml_count(void);
    GGML_DEPRECATED(GGML_API struct ggml_tensor * ggml_add1(
            struct ggml_context * ctx,
            struct ggml_tensor  * a),
        "use ggml_add instead");
    GGML_NORETURN GGML_ATTRIBUTE_FORMAT(3, 4)
    GGML_API void ggml_abort(const char * file, int line, const char * fmt, ...);
    typedef void (*ggml_op_t)(struct ggml_tensor * dst, int ith);
#ifdef GGML_USE_CUDA
    GGML_API int ggml_cuda_count(void);
#else
    GGML_API int ggml_cpu_count(void);
#endif
    static inline int ggml_up(int n, int m) { return (n + m - 1) / m * m; }
#ifdef __cplusplus
}
#endif
MAKE_KERNEL(add, half)
void host_launch(int n) { go(n); }
"#;
    let m = model(Lang::Cuda, src);
    assert_slice(
        &m,
        src,
        &[3, 8, 9, 12, 14, 16, 21],
        &[0, 1, 2, 4, 5, 6, 7, 10, 11, 13, 15, 17, 18, 19, 20],
    );
}

/// A header's instantiation macro invoked from another file (ggml's template-instance
/// files are `#include "../mmq.cuh"` and `DECL_MMQ_CASE(GGML_TYPE_Q4_0);`): the header
/// names it a host macro, and the file's invocation is blanked with it.
#[test]
fn a_header_s_host_macros_are_blanked_where_other_files_invoke_them() {
    let header = "#define DECL_CASE(type) template void mul_mat_case<type>(ctx & c, const args & a)\n#define DECL_KERNEL(T) template __global__ void k<T>(T*);\n";
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&ts_language(Lang::Cuda))
        .expect("grammar");
    let tree = parse_text(&mut parser, Lang::Cuda, header).expect("tree");
    let macros = host_macros(header, &tree);
    assert_eq!(
        macros,
        [("DECL_CASE".to_string(), vec!["mul_mat_case".to_string()])]
    );
    let file = "#include \"../mmq.cuh\"\n\nDECL_CASE(GGML_TYPE_Q4_0);\nDECL_KERNEL(float)\n";
    let out = blank_macro_invocations(file, &["DECL_CASE"]).expect("one invocation");
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    assert_eq!(
        lines,
        ["#include \"../mmq.cuh\"", "", "", "DECL_KERNEL(float)"]
    );
    assert_eq!(blank_macro_invocations(file, &["OTHER"]), None);
}

/// A host function whose parameter comments hold `;` is still a host function.
#[test]
fn a_comment_with_semicolons_in_a_host_head_does_not_keep_it() {
    let src = "extern \"C\" void\nlaunch(int n, // 0 => f16; 1 => bf16\n       float* p) {\n  k<<<1, 1>>>(p);\n}\n";
    let m = model(Lang::Cuda, src);
    assert!(m.device_slice.trim().is_empty(), "{:?}", m.device_slice);
}
