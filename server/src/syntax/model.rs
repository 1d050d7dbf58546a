//! Plain data describing what kernel discovery found in one file. These types are the
//! contract between `syntax` (which fills them from a tree-sitter tree) and the layers
//! above (`spec`, `lsp`, the CLI). No logic lives here.

use serde::{Deserialize, Serialize};

/// A half-open range of byte offsets into the document text.
pub type ByteRange = std::ops::Range<usize>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    Cuda,
    Triton,
}

/// One kernel parameter, in signature order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    /// Position in the parameter list (0-based).
    pub index: usize,
    /// The whole parameter declaration (`const float* __restrict__ x`, `BLOCK: tl.constexpr`).
    pub range: ByteRange,
    pub kind: ParamKind,
    /// Triton: the default value's text (`BLOCK: tl.constexpr = 512` -> `512`).
    #[serde(default)]
    pub default: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ParamKind {
    /// CUDA pointer parameter. `pointee` is the element type text with qualifiers
    /// (`const`, `__restrict__`, `volatile`) removed and whitespace normalised to single
    /// spaces: `float`, `float4`, `__half`, `unsigned int`, `long long`, `int64_t`.
    /// `is_const` is true when the pointee is const-qualified (`const T*`, `T const*`).
    Pointer { pointee: String, is_const: bool },
    /// CUDA scalar parameter passed by value; `ty` normalised like `pointee` above
    /// (`int`, `float`, `unsigned int`, `size_t`, `double`, `__half`, `bool`, `int64_t`).
    Scalar { ty: String },
    /// Triton parameter without `tl.constexpr`: a pointer or a scalar, decided by the spec.
    /// `annotation` is the annotation text if any (`"int"`, `"tl.float32"`).
    TritonArg { annotation: Option<String> },
    /// Triton `NAME: tl.constexpr` (also `triton.language.constexpr`).
    Constexpr,
    /// Anything else (references, structs by value, arrays, function pointers);
    /// `ty` is the declaration text.
    Other { ty: String },
}

/// One `@bench` comment line of a spec block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecLine {
    /// 0-based document line of the comment.
    pub line: u32,
    /// Byte offset in the document of `text`'s first byte, so that a byte `i` of `text`
    /// is at document offset `offset + i`.
    pub offset: usize,
    /// The statement text after the `@bench` marker, up to the end of the comment
    /// (for `/* ... */` comments, without the closing `*/`). Not trimmed.
    pub text: String,
}

/// The `@bench` block right above a kernel (docs/spec.md, "Where it goes").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecBlock {
    /// Only the `@bench` lines, in document order. Empty when the kernel has no spec.
    pub lines: Vec<SpecLine>,
    /// From the start of the block's first comment line to the end of its last one
    /// (other comment lines mixed into the block included). `None` when empty.
    pub range: Option<ByteRange>,
}

/// A `__global__` function (CUDA) or `@triton.jit` function (Triton).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    pub lang: Lang,
    /// The kernel's name identifier in its declarator / `def`.
    pub name_range: ByteRange,
    /// The whole definition: `template<...>`, `extern "C"`, attributes and decorators
    /// included, through the closing brace or the end of the Python body.
    pub def_range: ByteRange,
    pub params: Vec<Param>,
    /// CUDA template parameter names (`template <int BLOCK, typename T>` -> BLOCK, T).
    pub template_params: Vec<String>,
    /// Declared inside `extern "C"` (a plain, unmangled symbol).
    pub extern_c: bool,
    pub spec: SpecBlock,
    /// Names of the `__device__` functions (CUDA) or `@triton.jit` helpers (Triton)
    /// defined in the same file that the kernel calls, transitively, in first-call order.
    pub callees: Vec<String>,
    /// The kernel unit: `def_range` of the kernel and of every callee, sorted by start.
    pub unit_ranges: Vec<ByteRange>,
    /// Triton: the `@triton.autotune` decorator above the kernel, if any.
    #[serde(default)]
    pub autotune: Option<Autotune>,
    /// Triton: the names a `@triton.heuristics({...})` decorator computes at launch.
    #[serde(default)]
    pub heuristics: Vec<String>,
    /// The integer constants the file defines above the kernel (`#define THREADS 256`,
    /// `constexpr int BLOCK = 128;`; Python's module-level `BLOCK = 1024`), which its
    /// spec may name (`constants.rs`).
    #[serde(default)]
    pub constants: Vec<(String, i64)>,
}

/// A Triton kernel's `@triton.autotune(configs=[...], ...)` decorator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Autotune {
    /// The decorator, from `@` through its closing parenthesis.
    pub range: ByteRange,
    /// Each `triton.Config(...)` of a literal `configs=[...]` list, in source order: its
    /// integer (or boolean, as 0/1) values by name, the `tl.constexpr` ones from its
    /// dictionary, then `num_warps` and `num_stages` when given. Empty when the list
    /// is not written out in the decorator (a name, a comprehension, a call).
    pub configs: Vec<Vec<(String, i64)>>,
}

/// A syntax error region reported by tree-sitter (one per region, not one per node).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntaxError {
    pub range: ByteRange,
    pub message: String,
}

/// Everything kernel discovery knows about one file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileModel {
    pub lang: Lang,
    pub kernels: Vec<Kernel>,
    /// CUDA only: the text NVRTC can compile. It has exactly the same length and line
    /// structure as the source: removed regions (host functions, `main`, host-only
    /// includes, `PYBIND11_MODULE` glue) are overwritten with spaces, newlines kept, so a
    /// compiler's line:column is the author's line:column. Empty for Triton.
    pub device_slice: String,
    pub syntax_errors: Vec<SyntaxError>,
}
