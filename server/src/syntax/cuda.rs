//! CUDA kernel discovery and the device slice.
//!
//! Kernels are `__global__` function definitions found by `grammars/cuda/kernels.scm`;
//! unit members are `__device__` definitions (also `__host__ __device__`).
//!
//! # The device slice
//! The source with host-only parts overwritten by spaces (newlines kept, byte length
//! unchanged), so NVRTC's line:column is the author's. Top-level items, walked through
//! namespaces, `extern "C" { }` blocks and `#if`/`#ifdef` groups:
//! - dropped: function definitions without `__global__`/`__device__` (host functions,
//!   `main`, `PYBIND11_MODULE(...) {}` and `TORCH_LIBRARY(...) {}`, which parse as
//!   functions) unless `constexpr`; host function prototypes; variables without
//!   `__device__`/`__constant__`/`__shared__`/`__managed__`/`const`/`constexpr` (device
//!   code cannot read them anyway); `#include <...>` not in
//!   `grammars/cuda/device_includes.txt`; `using namespace X;`, `using X::y;` and
//!   `namespace a = X;` for X in `grammars/cuda/host_namespaces.txt`.
//! - kept: everything else: kernels, device functions, device variables, `#define`s and
//!   other preprocessor lines, types, aliases, templates other than host functions,
//!   quoted includes, comments, and anything unrecognised (including ERROR regions).
//!   A wrong keep shows up as an NVRTC error the author can read; a wrong drop would
//!   hide code, so doubt means keep.

use std::collections::{HashMap, HashSet};

use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, QueryCursor};

use super::spec_block::{spec_block, LineIndex};
use super::unit::{CallGraph, Func};
use super::{errors, queries, text, ByteRange, Kernel, Lang, Param, ParamKind, Region};

/// What one region (a run of top-level items, `Region`) contributes to the file's model,
/// with every offset relative to the region's start, so that the facts of a region the
/// author did not touch stay valid when text before it grows or shrinks. Built once per
/// parse of the region; [`assemble`] turns the facts of all regions into the model.
#[derive(Debug, Default)]
pub(crate) struct ChunkFacts {
    /// Byte length of the region when the facts were made (a guard against reuse with
    /// a region that changed).
    len: usize,
    /// Host-only items, blanked in the device slice.
    blanks: Vec<ByteRange>,
    struct_names: Vec<String>,
    /// Function-like macros defined here whose expansion is only host functions and
    /// explicit instantiations, with the names those instantiate.
    host_macros: Vec<(String, Vec<String>)>,
    /// Host-looking function definitions whose head names words the parser did not
    /// see (macros): blanked unless one is a qualifier macro the file defines.
    guarded: Vec<(ByteRange, Vec<String>)>,
    /// Object-like `#define`s made of words (`qualifiers::word_defines`).
    word_defines: Vec<(String, Vec<String>)>,
    /// Explicit instantiations of function templates without a device qualifier
    /// (`template void launch<float>(float*, int);`) and the function's name: blanked
    /// unless the file defines a kernel or device function of that name, since the
    /// host template they instantiate is blanked.
    instantiations: Vec<(ByteRange, String)>,
    defs: Vec<DefFacts>,
    /// Syntax error places, unmerged (merged over the whole file by `errors::merge`).
    errors: Vec<(ByteRange, String)>,
    /// Per definition, the helpers its body calls, resolved against the file's helper
    /// names whose hash is the key: kept while that set of names does not change.
    resolved: Option<(u64, Vec<Vec<String>>)>,
}

/// A `__global__` or `__device__` function definition.
#[derive(Debug)]
struct DefFacts {
    name: String,
    /// The item around it (`template <...>` and a one-declaration `extern "C"` included).
    def_range: ByteRange,
    /// `None` for device functions.
    kernel: Option<KernelFacts>,
    /// Identifiers in the body followed by `(` (or `<`), first occurrence of each word,
    /// with whether `calls.scm` sees that occurrence as a call (asked only when the word
    /// names a helper of the file, then kept).
    candidates: Vec<Candidate>,
}

#[derive(Debug)]
struct Candidate {
    word: ByteRange,
    callee: std::cell::Cell<Option<bool>>,
}

#[derive(Debug)]
struct KernelFacts {
    name_range: ByteRange,
    params: Vec<RawParam>,
    template_params: Vec<String>,
    extern_c: bool,
    /// The comment items right before the item, nearest last.
    leading: Vec<ByteRange>,
}

/// A parameter whose kind may depend on the struct names of the whole file.
#[derive(Debug)]
struct RawParam {
    name: String,
    index: usize,
    range: ByteRange,
    kind: RawKind,
}

#[derive(Debug)]
enum RawKind {
    Known(ParamKind),
    /// A by-value `type_identifier`: `other` when it names a struct of the file.
    Named {
        ident: String,
        scalar: ParamKind,
        other: ParamKind,
    },
}

/// The facts of each region by region id, kept between analyses of one document.
#[derive(Debug, Default)]
pub struct CudaCache {
    chunks: HashMap<u64, ChunkFacts>,
}

/// Kernels and the device slice of a CUDA file from its regions (in document order,
/// covering the text). The facts of regions whose id is in `cache` are reused; the
/// cache keeps only the regions of this call afterwards.
pub(crate) fn analyze_regions(
    src: &str,
    regions: &[Region],
    lines: &LineIndex,
    cache: &mut CudaCache,
) -> (Vec<Kernel>, String, Vec<(ByteRange, String)>) {
    let facts: Vec<ChunkFacts> = regions
        .iter()
        .map(|r| {
            let len = r.range.len();
            match cache.chunks.remove(&r.id) {
                Some(f) if f.len == len => f,
                _ => chunk_facts(src, r),
            }
        })
        .collect();
    let mut facts = facts;
    let out = assemble(src, regions, &mut facts, lines);
    cache.chunks = regions.iter().map(|r| r.id).zip(facts).collect();
    out
}

/// The facts of one region.
fn chunk_facts(src: &str, region: &Region) -> ChunkFacts {
    let base = region.range.start;
    let rel = |r: ByteRange| r.start.saturating_sub(base)..r.end.saturating_sub(base);
    let walk = SliceWalk::run(src, region.root, &region.range);
    let mut facts = ChunkFacts {
        len: region.range.len(),
        blanks: walk.blanks.iter().cloned().map(rel).collect(),
        struct_names: walk.struct_names.iter().cloned().collect(),
        host_macros: walk.host_macros.clone(),
        guarded: walk
            .guarded
            .iter()
            .map(|(r, w)| (rel(r.clone()), w.clone()))
            .collect(),
        word_defines: super::qualifiers::word_defines(src.get(region.range.clone()).unwrap_or("")),
        instantiations: walk
            .instantiations
            .iter()
            .map(|(r, n)| (rel(r.clone()), n.clone()))
            .collect(),
        defs: Vec::new(),
        errors: errors::found(src, region.root, &region.range)
            .into_iter()
            .map(|(r, m)| (rel(r), m))
            .collect(),
        resolved: None,
    };
    let Some(query) = queries::CUDA_KERNELS.as_ref() else {
        return facts;
    };
    let cap = |n| queries::capture(query, n);
    let (c_kernel, c_device, c_decl, c_body) =
        (cap("kernel"), cap("device"), cap("declarator"), cap("body"));
    // The query runs on each definition the item walk found, at its root only: function
    // bodies are not visited.
    let mut cursor = QueryCursor::new();
    cursor.set_max_start_depth(Some(0));
    for site in &walk.sites {
        let mut matches = cursor.matches(query, site.def, src.as_bytes());
        while let Some(m) = matches.next() {
            let (mut declarator, mut body, mut kernel) = (None, None, None);
            for c in m.captures {
                let i = Some(c.index);
                if i == c_kernel {
                    kernel = Some(true);
                } else if i == c_device {
                    kernel = Some(false);
                } else if i == c_decl {
                    declarator = Some(c.node);
                } else if i == c_body {
                    body = Some(c.node);
                }
            }
            let (Some(kernel), Some(declarator), Some(body)) = (kernel, declarator, body) else {
                continue;
            };
            let Some(fdecl) = function_declarator(declarator) else {
                continue;
            };
            let Some(name) = fdecl.child_by_field_name("declarator").and_then(name_of) else {
                continue;
            };
            let kernel = kernel.then(|| KernelFacts {
                name_range: rel(name.byte_range()),
                params: raw_params(src, fdecl)
                    .into_iter()
                    .map(|p| RawParam {
                        range: rel(p.range.clone()),
                        ..p
                    })
                    .collect(),
                template_params: site
                    .template
                    .map(|t| template_params(src, t))
                    .unwrap_or_default(),
                extern_c: site.extern_c,
                leading: site.leading.iter().cloned().map(rel).collect(),
            });
            facts.defs.push(DefFacts {
                name: text(src, name).to_string(),
                def_range: rel(site.outer.clone()),
                kernel,
                candidates: call_candidates(src, body.byte_range())
                    .into_iter()
                    .map(|w| Candidate {
                        word: rel(w),
                        callee: Default::default(),
                    })
                    .collect(),
            });
        }
    }
    facts
}

/// Words of a body that may call a helper (`unit::call_words`), keywords left out.
fn call_candidates(src: &str, body: ByteRange) -> Vec<ByteRange> {
    const KEYWORDS: [&str; 12] = [
        "if",
        "for",
        "while",
        "switch",
        "return",
        "sizeof",
        "alignof",
        "decltype",
        "catch",
        "static_cast",
        "reinterpret_cast",
        "const_cast",
    ];
    let mut words = super::unit::call_words(Lang::Cuda, src, body);
    words.retain(|w| !KEYWORDS.contains(&&src[w.clone()]));
    words
}

/// The model from the facts of every region: kernels with their units, specs and
/// parameters, the device slice and the syntax errors.
fn assemble(
    src: &str,
    regions: &[Region],
    facts: &mut [ChunkFacts],
    lines: &LineIndex,
) -> (Vec<Kernel>, String, Vec<(ByteRange, String)>) {
    resolve_calls(src, regions, facts);
    let facts: &[ChunkFacts] = facts;
    let kernels = kernels_of(src, regions, facts, lines);
    let slice = device_slice(src, regions, facts);
    let errors = regions
        .iter()
        .zip(facts.iter())
        .flat_map(|(region, f)| {
            f.errors
                .iter()
                .map(move |(r, m)| (abs(region.range.start, r), m.clone()))
        })
        .collect();
    (kernels, slice, errors)
}

/// `r`, relative to a region starting at `base`, in the whole text.
fn abs(base: usize, r: &ByteRange) -> ByteRange {
    r.start + base..r.end + base
}

/// Resolves each definition's calls against this file's helpers; `calls.scm` is asked
/// once per candidate occurrence, and the answer kept with the region's facts. A
/// region's resolved calls are kept while the set of helper names is the same.
fn resolve_calls(src: &str, regions: &[Region], facts: &mut [ChunkFacts]) {
    let helpers: rustc_hash::FxHashSet<&str> = facts
        .iter()
        .flat_map(|f| f.defs.iter().filter(|d| d.kernel.is_none()))
        .map(|d| d.name.as_str())
        .collect();
    // Order-free (a sum of each name's hash, and the count): no sort per keystroke.
    let helpers_key = helpers.iter().fold(helpers.len() as u64, |acc, name| {
        acc.wrapping_add(std::hash::BuildHasher::hash_one(
            &rustc_hash::FxBuildHasher,
            name,
        ))
    });
    let query = queries::CUDA_CALLS.as_ref();
    let callee_cap = query.and_then(|q| queries::capture(q, "callee"));
    let mut cursor = QueryCursor::new();
    let mut updates: Vec<(usize, Vec<Vec<String>>)> = Vec::new();
    for (i, (region, f)) in regions.iter().zip(facts.iter()).enumerate() {
        if f.resolved.as_ref().is_some_and(|(k, _)| *k == helpers_key) {
            continue;
        }
        let base = region.range.start;
        let mut per_def = Vec::with_capacity(f.defs.len());
        for d in &f.defs {
            let mut calls: Vec<String> = Vec::new();
            for c in &d.candidates {
                let word = abs(base, &c.word);
                let Some(w) = src.get(word.clone()) else {
                    continue;
                };
                if !helpers.contains(w) || calls.iter().any(|x| x == w) {
                    continue;
                }
                let is_call = match c.callee.get() {
                    Some(known) => known,
                    None => {
                        let found = match (query, callee_cap) {
                            (Some(q), Some(cap)) => super::unit::is_callee(
                                Lang::Cuda,
                                src,
                                q,
                                cap,
                                region.root,
                                word,
                                &mut cursor,
                            ),
                            _ => false,
                        };
                        c.callee.set(Some(found));
                        found
                    }
                };
                if is_call {
                    calls.push(w.to_string());
                }
            }
            per_def.push(calls);
        }
        updates.push((i, per_def));
    }
    for (i, per_def) in updates {
        facts[i].resolved = Some((helpers_key, per_def));
    }
}

/// The file's kernels, in text order, each with its unit (from the call graph of every
/// definition), its spec block and its parameters (a named type is a struct when the
/// file defines a struct of that name).
fn kernels_of(
    src: &str,
    regions: &[Region],
    facts: &[ChunkFacts],
    lines: &LineIndex,
) -> Vec<Kernel> {
    let struct_names: rustc_hash::FxHashSet<&str> = facts
        .iter()
        .flat_map(|f| f.struct_names.iter().map(String::as_str))
        .collect();

    struct At<'f> {
        base: usize,
        kernel: &'f KernelFacts,
    }
    let mut funcs: Vec<Func> = Vec::new();
    let mut kernel_at: Vec<Option<At>> = Vec::new();
    for (region, f) in regions.iter().zip(facts.iter()) {
        let base = region.range.start;
        let calls = f.resolved.as_ref().map_or(&[][..], |(_, c)| c.as_slice());
        for (d, calls) in f.defs.iter().zip(calls) {
            funcs.push(Func {
                name: d.name.clone(),
                def_range: abs(base, &d.def_range),
                body: None,
                helper: d.kernel.is_none(),
                calls: Some(calls.as_slice()),
            });
            kernel_at.push(d.kernel.as_ref().map(|kernel| At { base, kernel }));
        }
    }
    let mut graph = CallGraph::new(Lang::Cuda, src, &funcs);
    let constants = super::constants::integer_constants(src);
    let mut kernels = Vec::new();
    for (i, at) in kernel_at.iter().enumerate() {
        let Some(At { base, kernel: k }) = at else {
            continue;
        };
        let def_range = funcs[i].def_range.clone();
        let (callees, unit_ranges) = graph.unit(i);
        let leading: Vec<ByteRange> = k.leading.iter().map(|r| abs(*base, r)).collect();
        kernels.push(Kernel {
            name: funcs[i].name.clone(),
            lang: Lang::Cuda,
            name_range: abs(*base, &k.name_range),
            def_range: def_range.clone(),
            params: k
                .params
                .iter()
                .map(|p| Param {
                    name: p.name.clone(),
                    index: p.index,
                    range: abs(*base, &p.range),
                    kind: match &p.kind {
                        RawKind::Known(kind) => kind.clone(),
                        RawKind::Named {
                            ident,
                            scalar,
                            other,
                        } => {
                            if struct_names.contains(ident.as_str()) {
                                other.clone()
                            } else {
                                scalar.clone()
                            }
                        }
                    },
                    default: None,
                })
                .collect(),
            template_params: k.template_params.clone(),
            extern_c: k.extern_c,
            spec: spec_block(Lang::Cuda, src, lines, &leading, def_range.start),
            callees,
            unit_ranges,
            autotune: None,
            heuristics: Vec::new(),
            constants: super::constants::constants_before(&constants, def_range.start),
        });
    }
    kernels.sort_by_key(|k| k.def_range.start);
    kernels
}

/// The device slice: the source with every region's host items blanked, and the host
/// macros' invocations, the guarded functions whose head names no qualifier macro the
/// file defines, and instantiations of host templates.
fn device_slice(src: &str, regions: &[Region], facts: &[ChunkFacts]) -> String {
    let mut bytes = src.as_bytes().to_vec();
    for (region, f) in regions.iter().zip(facts.iter()) {
        for b in &f.blanks {
            blank(&mut bytes, abs(region.range.start, b));
        }
    }
    let device_names: rustc_hash::FxHashSet<&str> = facts
        .iter()
        .flat_map(|f| f.defs.iter().map(|d| d.name.as_str()))
        .collect();
    // A macro that instantiates one of the file's kernels or device functions is device
    // code (`INSTANTIATE(float)` -> `template void k<float>(...);`).
    let host_macros: Vec<&str> = facts
        .iter()
        .flat_map(|f| f.host_macros.iter())
        .filter(|(_, names)| !names.iter().any(|n| device_names.contains(n.as_str())))
        .map(|(m, _)| m.as_str())
        .collect();
    for r in host_macro_invocations(src, regions, &host_macros) {
        blank(&mut bytes, r);
    }
    // A function whose head names a qualifier macro the file defines (`#define FN
    // __host__ __device__`, maybe in another region) is device code; other guarded
    // ones are host functions with some other macro in their head.
    let defines: Vec<(String, Vec<String>)> = facts
        .iter()
        .flat_map(|f| f.word_defines.iter().cloned())
        .collect();
    let defined = super::qualifiers::defined_qualifiers(&defines);
    for (region, f) in regions.iter().zip(facts.iter()) {
        for (r, words) in &f.guarded {
            if !words.iter().any(|w| defined.contains(w)) {
                blank(&mut bytes, abs(region.range.start, r));
            }
        }
        for (r, name) in &f.instantiations {
            if !device_names.contains(name.as_str()) {
                blank(&mut bytes, abs(region.range.start, r));
            }
        }
    }
    // Only whole nodes were blanked, byte by byte with ASCII spaces: still UTF-8 when
    // node boundaries are character boundaries, which they are for a `&str` source.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn blank(bytes: &mut [u8], range: ByteRange) {
    let end = range.end.min(bytes.len());
    for b in &mut bytes[range.start.min(end)..end] {
        if *b != b'\n' && *b != b'\r' {
            *b = b' ';
        }
    }
}

/// The `function_declarator` under a definition's declarator (through the pointer and
/// reference declarators of the return type).
fn function_declarator(declarator: Node) -> Option<Node> {
    let mut n = declarator;
    for _ in 0..64 {
        match n.kind() {
            "function_declarator" => return Some(n),
            "pointer_declarator"
            | "reference_declarator"
            | "parenthesized_declarator"
            | "attributed_declarator" => n = inner_declarator(n)?,
            _ => return None,
        }
    }
    None
}

/// A declarator's inner declarator (`declarator` field, or the last named child for the
/// node kinds that have no field for it).
fn inner_declarator(n: Node) -> Option<Node> {
    n.child_by_field_name("declarator").or_else(|| {
        let count = n.named_child_count();
        (0..count)
            .rev()
            .filter_map(|i| n.named_child(i))
            .find(|c| c.kind() != "type_qualifier" && c.kind() != "ms_pointer_modifier")
    })
}

/// The identifier naming a function: `k`, `ns::k` -> `k`, `k<float>` -> `k`.
pub(super) fn name_of(n: Node) -> Option<Node> {
    let mut n = n;
    for _ in 0..64 {
        match n.kind() {
            "identifier" | "field_identifier" | "operator_name" | "destructor_name" => {
                return Some(n)
            }
            "qualified_identifier" | "template_function" | "template_method" => {
                n = n.child_by_field_name("name")?
            }
            _ => return None,
        }
    }
    None
}

/// Names of the parameters of a `template <...>` header.
fn template_params(src: &str, tpl: Node) -> Vec<String> {
    let Some(list) = tpl.child_by_field_name("parameters") else {
        return Vec::new();
    };
    let mut cursor = list.walk();
    let mut out = Vec::new();
    for p in list.named_children(&mut cursor) {
        if p.kind() == "comment" {
            continue;
        }
        if let Some(name) = template_param_name(p) {
            out.push(text(src, name).to_string());
        }
    }
    out
}

fn template_param_name(p: Node) -> Option<Node> {
    if let Some(n) = p.child_by_field_name("name") {
        return Some(n);
    }
    if let Some(mut d) = p.child_by_field_name("declarator") {
        for _ in 0..64 {
            if d.kind() == "identifier" {
                return Some(d);
            }
            d = inner_declarator(d)?;
        }
        return None;
    }
    let mut cursor = p.walk();
    let found = p
        .named_children(&mut cursor)
        .find(|c| c.kind() == "type_identifier" || c.kind() == "identifier");
    found
}

/// The kernel's parameters, in order (ranges absolute).
fn raw_params(src: &str, fdecl: Node) -> Vec<RawParam> {
    let Some(list) = fdecl.child_by_field_name("parameters") else {
        return Vec::new();
    };
    let mut cursor = list.walk();
    let decls = list.named_children(&mut cursor).filter(|p| {
        matches!(
            p.kind(),
            "parameter_declaration" | "optional_parameter_declaration"
        )
    });
    decls
        .enumerate()
        .map(|(index, p)| raw_param(src, p, index))
        .collect()
}

fn raw_param(src: &str, p: Node, index: usize) -> RawParam {
    let mut pointers = 0;
    let mut other = false;
    let mut name = String::new();
    let mut d = p.child_by_field_name("declarator");
    let mut guard = 0;
    while let Some(n) = d {
        guard += 1;
        if guard > 64 {
            other = true;
            break;
        }
        match n.kind() {
            "identifier" => {
                name = text(src, n).to_string();
                break;
            }
            "pointer_declarator" | "abstract_pointer_declarator" => {
                pointers += 1;
                d = n.child_by_field_name("declarator");
            }
            _ => {
                // References, arrays, function pointers, parenthesised declarators.
                other = true;
                d = inner_declarator(n);
            }
        }
    }
    let ty_node = p.child_by_field_name("type");
    let ty = ty_node
        .map(|t| normalize_type(text(src, t)))
        .unwrap_or_default();
    let mut cursor = p.walk();
    let is_const = p
        .children(&mut cursor)
        .any(|c| c.kind() == "type_qualifier" && text(src, c) == "const");
    let as_other = || ParamKind::Other {
        ty: normalize_space(text(src, p)),
    };
    let kind = if other || pointers > 1 || ty.is_empty() {
        RawKind::Known(as_other())
    } else if pointers == 1 {
        RawKind::Known(ParamKind::Pointer {
            pointee: ty,
            is_const,
        })
    } else {
        match ty_node.map(|t| (t.kind(), t)) {
            Some(("primitive_type" | "sized_type_specifier" | "qualified_identifier", _)) => {
                RawKind::Known(ParamKind::Scalar { ty })
            }
            // A by-value named type is a scalar unless it names a struct of the file.
            Some(("type_identifier", t)) => RawKind::Named {
                ident: text(src, t).to_string(),
                scalar: ParamKind::Scalar { ty },
                other: as_other(),
            },
            _ => RawKind::Known(as_other()),
        }
    };
    RawParam {
        name,
        index,
        range: p.byte_range(),
        kind,
    }
}

fn normalize_space(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The element type a pointer type's text points to, normalised as
/// [`normalize_type`] (`const float4*` -> `float4`); None unless it is one pointer level.
pub(crate) fn pointee_type(ty: &str) -> Option<String> {
    let base = ty.trim().strip_suffix('*')?.trim_end();
    let base = base.strip_suffix("__restrict__").unwrap_or(base).trim_end();
    (!base.ends_with('*')).then(|| normalize_type(base))
}

/// A type's text without qualifiers, whitespace normalised to single spaces.
pub(crate) fn normalize_type(s: &str) -> String {
    const QUALIFIERS: [&str; 5] = [
        "const",
        "volatile",
        "__restrict__",
        "__restrict",
        "restrict",
    ];
    s.split_whitespace()
        .filter(|w| !QUALIFIERS.contains(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A function definition at item level (namespace scope) that may be a kernel or a
/// device function.
struct DefSite<'t> {
    /// The `function_definition`.
    def: Node<'t>,
    /// The item around it: with `template <...>` headers and a one-declaration
    /// `extern "C"` prefix.
    outer: ByteRange,
    /// The innermost `template <...>` header, if any.
    template: Option<Node<'t>>,
    extern_c: bool,
    /// The comment items right before the item, nearest last.
    leading: Vec<ByteRange>,
}

/// The item walk: builds the device slice, collects struct names and the definitions
/// that may be kernels. Visits items (top level, namespaces, `extern "C"` blocks,
/// `#if` groups, ERROR regions), never function bodies.
struct SliceWalk<'s, 't> {
    src: &'s str,
    /// Host-only items (absolute ranges), blanked in the device slice.
    blanks: Vec<ByteRange>,
    struct_names: HashSet<String>,
    sites: Vec<DefSite<'t>>,
    /// Function-like macros whose expansion is only host function definitions and
    /// explicit instantiations (with the names those instantiate).
    host_macros: Vec<(String, Vec<String>)>,
    /// Host-looking definitions with macro words in their head (absolute ranges).
    guarded: Vec<(ByteRange, Vec<String>)>,
    /// Explicit instantiations of function templates with no device qualifier.
    instantiations: Vec<(ByteRange, String)>,
}

impl<'s, 't> SliceWalk<'s, 't> {
    /// Walks the top-level items of `root` that start in `range`.
    fn run(src: &'s str, root: Node<'t>, range: &ByteRange) -> Self {
        let mut w = SliceWalk {
            src,
            blanks: Vec::new(),
            struct_names: Default::default(),
            sites: Vec::new(),
            host_macros: Vec::new(),
            guarded: Vec::new(),
            instantiations: Vec::new(),
        };
        // An explicit stack: nesting depth is input-controlled.
        let mut stack: Vec<(Node, bool)> = vec![(root, false)];
        let mut cursor = root.walk();
        let mut comments: Vec<ByteRange> = Vec::new();
        while let Some((container, extern_c)) = stack.pop() {
            let children: Vec<Node> = if container == root {
                let mut items = super::top_items(root, range);
                items.retain(Node::is_named);
                items
            } else {
                container.named_children(&mut cursor).collect()
            };
            comments.clear();
            for item in children {
                if item.kind() == "comment" {
                    comments.push(item.byte_range());
                    continue;
                }
                w.site(item, extern_c, &comments);
                comments.clear();
                if let Some(inner) = w.item(item) {
                    stack.push((inner, extern_c || item.kind() == "linkage_specification"));
                }
            }
        }
        w.sites.sort_by_key(|s| s.outer.start);
        w.collect_host_macros(root, range);
        w
    }

    /// Records `item` if it carries a `__global__`/`__device__` function definition.
    fn site(&mut self, item: Node<'t>, extern_c: bool, comments: &[ByteRange]) {
        let (def, template, linkage) = match item.kind() {
            "function_definition" => (item, None, false),
            "template_declaration" => {
                let (inner, tpl) = template_item(item);
                (inner, Some(tpl), false)
            }
            "linkage_specification" => match item.child_by_field_name("body") {
                Some(b) => (b, None, true),
                None => return,
            },
            _ => return,
        };
        if def.kind() != "function_definition"
            || !(has_token(def, &["__global__", "__device__"])
                || head_words(self.src, def)
                    .0
                    .iter()
                    .any(|w| super::qualifiers::is_qualifier_name(w)))
        {
            return;
        }
        let extern_c = extern_c
            || (linkage
                && item
                    .child_by_field_name("value")
                    .is_some_and(|v| text(self.src, v).trim_matches('"') == "C"));
        self.sites.push(DefSite {
            def,
            outer: item.byte_range(),
            template,
            extern_c,
            leading: comments.to_vec(),
        });
    }

    /// Handles one item; returns a container to walk into.
    fn item<'n>(&mut self, n: Node<'n>) -> Option<Node<'n>> {
        match n.kind() {
            "preproc_include" if !self.device_include(n) => self.blank(n.byte_range()),
            "function_definition" if !self.device_or_constexpr(n) => {
                self.blank_function(n.byte_range(), n)
            }
            "template_declaration" => {
                // `template <...> template <...> item`: judge the item, blank the whole.
                let (inner, _) = template_item(n);
                match inner.kind() {
                    "function_definition" if !self.device_or_constexpr(inner) => {
                        self.blank_function(n.byte_range(), inner)
                    }
                    "struct_specifier" | "class_specifier" | "union_specifier" => {
                        self.record_struct(inner)
                    }
                    // `template <int N> void launch(const at::Tensor& x);`: a host
                    // prototype, whose parameter types NVRTC may not have.
                    "declaration" if self.host_declaration(inner) => {
                        self.blank_host_declaration(n, inner)
                    }
                    _ => {}
                }
            }
            "linkage_specification" => match n.child_by_field_name("body") {
                Some(b) if b.kind() == "declaration_list" => return Some(b),
                Some(b) if b.kind() == "function_definition" && !self.device_or_constexpr(b) => {
                    self.blank_function(n.byte_range(), b)
                }
                Some(b) if b.kind() == "declaration" && self.host_declaration(b) => {
                    self.blank(n.byte_range())
                }
                _ => {}
            },
            "namespace_definition" => return n.child_by_field_name("body"),
            "declaration_list" | "preproc_if" | "preproc_ifdef" | "preproc_else"
            | "preproc_elif" | "preproc_elifdef" => return Some(n),
            "declaration" if self.host_declaration(n) => self.blank_host_declaration(n, n),
            "template_instantiation" => self.record_instantiation(n),
            "using_declaration" | "namespace_alias_definition" if self.names_host_namespace(n) => {
                self.blank(n.byte_range())
            }
            "struct_specifier" | "class_specifier" | "union_specifier" => self.record_struct(n),
            "type_definition"
                if n.child_by_field_name("type")
                    .is_some_and(|t| t.kind().ends_with("_specifier")) =>
            {
                let mut cursor = n.walk();
                let names: Vec<String> = n
                    .children_by_field_name("declarator", &mut cursor)
                    .filter(|d| d.kind() == "type_identifier")
                    .map(|d| text(self.src, d).to_string())
                    .collect();
                self.struct_names.extend(names);
            }
            _ => {}
        }
        None
    }

    /// This region's function-like macros whose expansion is only host function
    /// definitions (`COUNT_NONZERO_OP(float, f32)` defining an `extern "C"` host
    /// wrapper, as Rust bindings' kernel files do): their invocations are blanked
    /// ([`host_macro_invocations`]), as the functions they define would be.
    fn collect_host_macros(&mut self, root: Node, range: &ByteRange) {
        self.host_macros = host_macro_defs(self.src, root, range);
    }

    /// `template void launch<float>(float*, int, cudaStream_t);`: recorded with the
    /// function's name when nothing marks it device code (a `__global__`/`__device__`
    /// token or a qualifier macro); class instantiations stay.
    fn record_instantiation(&mut self, n: Node) {
        if has_token(n, &["__global__", "__device__"])
            || head_words(self.src, n)
                .0
                .iter()
                .any(|w| super::qualifiers::is_qualifier_name(w))
        {
            return;
        }
        let name = n
            .child_by_field_name("declarator")
            .and_then(function_declarator)
            .and_then(|f| f.child_by_field_name("declarator"))
            .and_then(name_of);
        if let Some(name) = name {
            self.instantiations
                .push((n.byte_range(), text(self.src, name).to_string()));
        }
    }

    fn record_struct(&mut self, n: Node) {
        if let Some(name) = n.child_by_field_name("name") {
            self.struct_names.insert(text(self.src, name).to_string());
        }
        self.blank_host_members(n);
    }

    /// Member functions defined in a class body without `__device__`/`__global__` (or
    /// `constexpr`) are host functions, as at the top level: device code cannot call
    /// them (nvcc refuses it), and their bodies call host code that NVRTC does not have
    /// (the CUDA samples' comparators call `compareData` from a host-only header).
    /// Declarations, `= default` and `= delete` members stay.
    fn blank_host_members(&mut self, n: Node) {
        let Some(body) = n.child_by_field_name("body") else {
            return;
        };
        let mut cursor = body.walk();
        let members: Vec<Node> = body.named_children(&mut cursor).collect();
        for m in members {
            let f = match m.kind() {
                "function_definition" => m,
                "template_declaration" => template_item(m).0,
                _ => continue,
            };
            let has_body = f
                .child_by_field_name("body")
                .is_some_and(|b| b.kind() == "compound_statement");
            if f.kind() == "function_definition" && has_body && !self.device_or_constexpr(f) {
                self.blank_function(m.byte_range(), f);
            }
        }
    }

    fn blank(&mut self, range: ByteRange) {
        self.blanks.push(range);
    }

    /// Blanks `item` (a host prototype or variable `decl`, or the template around it). A
    /// prototype named device code by a qualifier macro stays; the blank of a host one
    /// covers the macros before it. Only a whole statement ending in `;` with no
    /// directive inside is blanked: the grammar reads a constructor head whose
    /// initializers sit in an `#if` as a declaration, and half a conditional group
    /// blanked breaks the file.
    fn blank_host_declaration(&mut self, item: Node, decl: Node) {
        let text = self.src.get(item.byte_range()).unwrap_or("");
        let directive = text
            .lines()
            .skip(1)
            .any(|l| l.trim_start().starts_with('#'));
        if !text.trim_end().ends_with(';') || directive {
            return;
        }
        let (words, head_start) = head_words(self.src, item);
        let (inner_words, _) = head_words(self.src, decl);
        let head_start = head_start.min(item.start_byte());
        let (start, attributes) = macro_lines_before(self.src, head_start);
        let qualified = words
            .iter()
            .chain(&inner_words)
            .chain(&attributes)
            .any(|w| super::qualifiers::is_qualifier_name(w));
        if !qualified {
            self.blank(start..item.end_byte());
        }
    }

    /// Blanks a function definition judged host by its tokens, unless its head names a
    /// qualifier macro (`HD inline float f()`, the macro hidden from the parser): kept
    /// when the name says so, left to `assemble` when only the file's `#define`s can.
    fn blank_function(&mut self, range: ByteRange, f: Node) {
        // A "head" holding a `;` is the grammar's misreading of several items (a macro
        // wrapping a prototype, then everything up to some `{`): doubt means keep.
        let body_start = f
            .child_by_field_name("body")
            .map_or(f.end_byte(), |b| b.start_byte());
        let head = self.src.get(f.start_byte()..body_start).unwrap_or("");
        if super::mask::code_only(head).contains(';') {
            return;
        }
        let (mut words, head_start) = head_words(self.src, f);
        let (start, attributes) = macro_lines_before(self.src, range.start.min(head_start));
        words.extend(attributes);
        let range = start..range.end;
        if words
            .iter()
            .any(|w| super::qualifiers::is_qualifier_name(w))
        {
            return;
        }
        if words.is_empty() {
            self.blank(range);
        } else {
            self.guarded.push((range, words));
        }
    }
}

/// The function-like macros defined among the items of `root` in `range` whose
/// expansion is only host function definitions and explicit instantiations, with the
/// names those instantiate ([`expands_to_host_functions`]).
fn host_macro_defs(src: &str, root: Node, range: &ByteRange) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut others: Vec<(String, String)> = Vec::new();
    let mut items: Vec<Node> = super::top_items(root, range);
    items.retain(Node::is_named);
    let mut containers: Vec<Node> = Vec::new();
    loop {
        for c in items {
            match c.kind() {
                "preproc_function_def" => {
                    let name = c.child_by_field_name("name").map(|x| text(src, x));
                    // From the replacement's start to the last continued line: the
                    // grammar ends the definition at a comment inside it.
                    let value = c
                        .child_by_field_name("value")
                        .map(|x| &src[x.start_byte()..define_end(src, x.start_byte())]);
                    if let (Some(name), Some(value)) = (name, value) {
                        match expands_to_host_functions(value) {
                            Some(names) => out.push((name.to_string(), names)),
                            None => others.push((name.to_string(), value.to_string())),
                        }
                    }
                }
                "preproc_if"
                | "preproc_ifdef"
                | "preproc_else"
                | "preproc_elif"
                | "preproc_elifdef"
                | "linkage_specification"
                | "declaration_list"
                | "namespace_definition" => containers.push(c),
                _ => {}
            }
        }
        let Some(n) = containers.pop() else {
            break;
        };
        let mut cursor = n.walk();
        items = n.named_children(&mut cursor).collect();
    }
    // Macros made of invocations of host macros are host macros (`CASES(64)` expanding
    // to `extern DECL_CASE(64, 1); extern DECL_CASE(64, 2);`).
    loop {
        let before = out.len();
        others.retain(|(name, value)| match invokes_only(value, &out) {
            Some(names) => {
                out.push((name.clone(), names));
                false
            }
            None => true,
        });
        if out.len() == before {
            return out;
        }
    }
}

/// The names `macros` instantiate, when `value` is only `;`-separated invocations of
/// them (each maybe after `extern`); `None` otherwise.
fn invokes_only(value: &str, macros: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    let body = value.replace("\\\n", " \n");
    let mut names = Vec::new();
    let mut any = false;
    let parts = body
        .split(';')
        .map(|p| p.trim_matches(|c: char| c.is_whitespace() || c == '\\'))
        .filter(|p| !p.is_empty());
    for part in parts {
        let part = part
            .strip_prefix("extern")
            .filter(|r| r.starts_with(char::is_whitespace))
            .map_or(part, str::trim_start);
        let n = part
            .bytes()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
            .count();
        let (m, rest) = part.split_at(n);
        let (_, inst) = macros.iter().find(|(name, _)| name == m)?;
        let rest = rest.trim_start();
        let close = super::mask::close_bracket(rest, 0, b'(', b')')?;
        if !rest.starts_with('(') || close + 1 != rest.len() {
            return None;
        }
        names.extend(inst.iter().cloned());
        any = true;
    }
    any.then_some(names)
}

/// The function-like macros `src` (parsed as `tree`) defines whose expansion is only
/// host functions and explicit instantiations of templates, with the names those
/// instantiate: a header's, whose invocations in the files that include it are host
/// code too ([`blank_macro_invocations`]).
pub fn host_macros(src: &str, tree: &tree_sitter::Tree) -> Vec<(String, Vec<String>)> {
    let root = tree.root_node();
    host_macro_defs(src, root, &(0..src.len().max(root.end_byte())))
}

/// `slice` with its file-scope invocations of `names` (host macros of the headers it
/// includes, [`host_macros`]) blanked; `None` when it has none.
pub fn blank_macro_invocations(slice: &str, names: &[&str]) -> Option<String> {
    if !names.iter().any(|n| slice.contains(n)) {
        return None;
    }
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&super::ts_language(Lang::Cuda)).ok()?;
    let tree = super::parse_text(&mut parser, Lang::Cuda, slice)?;
    let ranges = host_macro_invocations(slice, &[Region::whole(&tree, slice.len())], names);
    if ranges.is_empty() {
        return None;
    }
    let mut bytes = slice.as_bytes().to_vec();
    for r in ranges {
        blank(&mut bytes, r);
    }
    String::from_utf8(bytes).ok()
}

/// Whole lines before `at` (where a head starts) made only of all-caps macro words and
/// calls, `GGML_NORETURN GGML_ATTRIBUTE_FORMAT(3, 4)`: attributes of the item that
/// follows, which the grammar read as something else. Returns where they start (`at`
/// if none) and their words, so a qualifier macro among them still marks device code.
fn macro_lines_before(src: &str, at: usize) -> (usize, Vec<String>) {
    // A stale tree may give any offset: then nothing is found.
    let Some(before) = src.get(..at) else {
        return (at, Vec::new());
    };
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    if !before[line_start..].trim().is_empty() {
        return (at, Vec::new());
    }
    let (mut start, mut words) = (at, Vec::new());
    let mut end = line_start;
    while end > 0 {
        let prev_start = src[..end - 1].rfind('\n').map_or(0, |p| p + 1);
        let line = src[prev_start..end - 1].trim();
        match attribute_words(line) {
            Some(w) => {
                words.extend(w);
                start = prev_start
                    + (src[prev_start..end].len() - src[prev_start..end].trim_start().len());
                end = prev_start;
            }
            None => break,
        }
    }
    (start, words)
}

/// The macro names of a line made only of all-caps words and attribute-like calls
/// (`NAME`, `GGML_ATTRIBUTE_FORMAT(3, 4)`), or `None`. A call must name what it is
/// (`ATTR`, `DEPRECATED`, `FORMAT`...): a line such as `MAKE_KERNEL(add, half)` defines
/// items of its own and is never taken.
fn attribute_words(line: &str) -> Option<Vec<String>> {
    const CALLS: &[&str] = &[
        "ATTR",
        "DEPRECATED",
        "FORMAT",
        "NORETURN",
        "ALIGN",
        "VISIBILITY",
        "NODISCARD",
        "UNUSED",
        "PRINTF",
    ];
    let mut rest = line.trim();
    let mut words = Vec::new();
    while !rest.is_empty() {
        let n = rest
            .bytes()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
            .count();
        if n < 2 || rest.as_bytes()[0].is_ascii_digit() {
            return None;
        }
        words.push(rest[..n].to_string());
        rest = rest[n..].trim_start();
        if rest.starts_with('(') {
            if !CALLS
                .iter()
                .any(|c| words.last().is_some_and(|w| w.contains(c)))
            {
                return None;
            }
            let close = super::mask::close_bracket(rest, 0, b'(', b')')?;
            rest = rest[close + 1..].trim_start();
        } else if !rest.is_empty()
            && !rest.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        {
            return None;
        }
    }
    (!words.is_empty()).then_some(words)
}

/// Top-level invocations of the file's host-function macros (`names`): each runs from
/// the macro's name to its closing `)` and an optional `;`.
fn host_macro_invocations(src: &str, regions: &[Region], names: &[&str]) -> Vec<ByteRange> {
    let mut out = Vec::new();
    if names.is_empty() {
        return out;
    }
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let lead = line.len() - line.trim_start().len();
        // `extern DECL_CASE(q4_0);` declares what the macro instantiates.
        let t = &line[lead..];
        let ext = t
            .strip_prefix("extern")
            .filter(|r| r.starts_with([' ', '\t']))
            .map_or(0, |r| t.len() - r.trim_start().len());
        let t = &t[ext..];
        let Some(name) = names
            .iter()
            .find(|h| t.starts_with(*h) && t[h.len()..].trim_start().starts_with('('))
        else {
            continue;
        };
        let lead = lead + ext;
        let begin = start + line.len() - line.trim_start().len();
        let region = regions.partition_point(|r| r.range.end <= begin);
        let Some(region) = regions.get(region) else {
            continue;
        };
        if !at_top_level(region.root, begin) {
            continue;
        }
        let open = start
            + lead
            + name.len()
            + (t[name.len()..].len() - t[name.len()..].trim_start().len());
        let Some(close) = matching_paren(src, open) else {
            continue;
        };
        let rest = &src[close + 1..];
        let semi = rest
            .find(|c: char| !c.is_whitespace())
            .filter(|&i| rest[i..].starts_with(';'))
            .map_or(close + 1, |i| close + 1 + i + 1);
        out.push(begin..semi);
    }
    out
}

/// Whether a macro's replacement text is one or more host function definitions (no
/// `__global__`/`__device__`/`constexpr`) and explicit instantiations of function
/// templates (`template void launch<CDIM>(const at::Tensor x);`, whose host template
/// is blanked), read as a translation unit with `##` pasting and `#` stringizing taken
/// out: `Some` with the names instantiated, `None` when it holds anything else.
fn expands_to_host_functions(value: &str) -> Option<Vec<String>> {
    let maybe = value.contains('{') || value.contains("template");
    if !maybe || value.contains("__global__") || value.contains("__device__") {
        return None;
    }
    let body = value
        .replace("\\\n", " \n")
        .replace("##", "")
        .replace('#', " ");
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&super::ts_language(Lang::Cuda)).ok()?;
    let mut body = body;
    let mut tree = parser.parse(&body, None)?;
    if tree.root_node().has_error() {
        // `template void f<type>(...)` with its `;` at the invocation: `DECL(q4_0);`.
        body = format!("{};", body.trim_end());
        tree = parser.parse(&body, None)?;
    }
    let root = tree.root_node();
    if root.has_error() {
        return None;
    }
    let mut cursor = root.walk();
    let items: Vec<Node> = root
        .named_children(&mut cursor)
        .filter(|c| c.kind() != "comment")
        .collect();
    let mut names = Vec::new();
    for item in &items {
        if item.kind() == "template_instantiation" {
            let name = item
                .child_by_field_name("declarator")
                .and_then(function_declarator)
                .and_then(|f| f.child_by_field_name("declarator"))
                .and_then(name_of)?;
            names.push(text(&body, name).to_string());
            continue;
        }
        let f = match item.kind() {
            "linkage_specification" => item.child_by_field_name("body"),
            "template_declaration" => Some(template_item(*item).0),
            _ => Some(*item),
        };
        let host_function = f.is_some_and(|f| {
            f.kind() == "function_definition"
                && !has_token(f, &["__global__", "__device__", "constexpr"])
        });
        if !host_function {
            return None;
        }
    }
    (!items.is_empty()).then_some(names)
}

/// The words of a function's head the grammar may not have seen: those before the node
/// back to the end of the previous statement (`;`, `{`, `}`, `)`, a directive or comment
/// line: what `mask` hid, or what the grammar read as something else, as in
/// `GLM_FUNC_QUALIFIER GLM_CONSTEXPR static vec<1, R, Q> call(...)`), and the capitalised
/// ones between its start and its declarator. Also where the first word before the node
/// starts (the node's start if none).
pub(super) fn head_words(src: &str, f: Node) -> (Vec<String>, usize) {
    let b = src.as_bytes();
    let start = f.start_byte().min(b.len());
    let mut i = start;
    // `public:` ends a statement too; `ns::T` does not.
    let label =
        |i: usize| b[i - 1] == b':' && b.get(i) != Some(&b':') && (i < 2 || b[i - 2] != b':');
    while i > 0 && !matches!(b[i - 1], b';' | b'{' | b'}' | b')') && !label(i) {
        if b[i - 1] == b'\n' {
            let line_start = src[..i - 1].rfind('\n').map_or(0, |p| p + 1);
            let prev = src.get(line_start..i - 1).unwrap_or("").trim();
            // A directive, its continuation lines, a comment: not part of the head.
            if prev.starts_with('#')
                || prev.ends_with('\\')
                || prev.contains("//")
                || prev.ends_with("*/")
            {
                break;
            }
        }
        i -= 1;
    }
    let before = src.get(i..start).unwrap_or("");
    let first = i + (before.len() - before.trim_start().len());
    let is_word = |w: &&str| {
        w.bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
    };
    let mut words: Vec<String> = before
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(is_word)
        .map(String::from)
        .collect();
    let head_end = f
        .child_by_field_name("declarator")
        .map_or(f.start_byte(), |d| d.start_byte());
    let head = src.get(f.start_byte()..head_end).unwrap_or("");
    words.extend(
        head.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.bytes().next().is_some_and(|c| c.is_ascii_uppercase()))
            .map(String::from),
    );
    let first = if before.trim().is_empty() {
        start
    } else {
        first
    };
    (words, first)
}

/// The end of the `#define` line holding byte `at`, following `\` continuations.
fn define_end(src: &str, at: usize) -> usize {
    let mut end = at;
    for line in src[at..].split_inclusive('\n') {
        end += line.len();
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    end
}

/// Whether byte `at` of the source is outside every function body, class body and
/// macro definition.
fn at_top_level(root: Node, at: usize) -> bool {
    let Some(mut n) = root.descendant_for_byte_range(at, at) else {
        return false;
    };
    loop {
        if matches!(
            n.kind(),
            "compound_statement"
                | "field_declaration_list"
                | "preproc_function_def"
                | "preproc_def"
                | "enumerator_list"
                | "initializer_list"
        ) {
            return false;
        }
        match n.parent() {
            Some(p) => n = p,
            None => return true,
        }
    }
}

/// The byte index of the `)` closing the `(` at `open`, skipping string and character
/// literals and comments.
fn matching_paren(src: &str, open: usize) -> Option<usize> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The item under `template <...>` headers and the innermost header.
pub(super) fn template_item(n: Node) -> (Node, Node) {
    let (mut inner, mut tpl) = (n, n);
    for _ in 0..64 {
        let mut cursor = inner.walk();
        let last = inner
            .named_children(&mut cursor)
            .filter(|c| c.kind() != "comment")
            .last();
        match last {
            Some(c) if c.kind() == "template_declaration" => {
                inner = c;
                tpl = c;
            }
            Some(c) => return (c, tpl),
            None => break,
        }
    }
    (inner, tpl)
}

pub(super) fn has_token(n: Node, tokens: &[&str]) -> bool {
    let mut cursor = n.walk();
    let found = n.children(&mut cursor).any(|c| {
        (!c.is_named() && tokens.contains(&c.kind()))
            || (c.kind() == "type_qualifier"
                && c.child(0).is_some_and(|q| tokens.contains(&q.kind())))
    });
    found
}

impl SliceWalk<'_, '_> {
    fn device_or_constexpr(&self, f: Node) -> bool {
        has_token(f, &["__global__", "__device__", "constexpr"])
    }

    fn host_declaration(&self, d: Node) -> bool {
        if has_token(
            d,
            &[
                "__global__",
                "__device__",
                "__constant__",
                "__shared__",
                "__managed__",
                "const",
                "constexpr",
            ],
        ) {
            return false;
        }
        // A type defined along with the variable (`struct S {...} s;`) stays.
        if d.child_by_field_name("type").is_some_and(|t| {
            t.kind().ends_with("_specifier") && t.child_by_field_name("body").is_some()
        }) {
            return false;
        }
        // Host prototypes and host variables; `typedef`-like or unparsed shapes stay.
        let mut cursor = d.walk();
        let declarators: Vec<Node> = d
            .children_by_field_name("declarator", &mut cursor)
            .collect();
        !declarators.is_empty()
            && declarators.iter().all(|x| {
                matches!(
                    x.kind(),
                    "function_declarator"
                        | "identifier"
                        | "init_declarator"
                        | "array_declarator"
                        | "pointer_declarator"
                        | "reference_declarator"
                )
            })
    }

    fn names_host_namespace(&self, n: Node) -> bool {
        // The first namespace name after `using`, `using namespace` or `namespace a =`.
        let t = text(self.src, n);
        let t = t.trim_start_matches("using").trim_start();
        let t = t.strip_prefix("namespace").unwrap_or(t).trim_start();
        let t = match n.kind() {
            "namespace_alias_definition" => t.split_once('=').map_or("", |(_, r)| r),
            _ => t,
        };
        let name = t.trim_start().trim_start_matches("::");
        let mut path = name.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        let first: &str = path.next().unwrap_or("");
        // `using std::sqrt;`: a math function device code calls (`std_math.txt`).
        let member = path.find(|w| !w.is_empty()).unwrap_or("");
        let one_member = n.kind() == "using_declaration" && name.matches("::").count() == 1;
        if first == "std" && one_member && is_global_math(member) {
            return false;
        }
        queries::data_lines(queries::HOST_NAMESPACES).any(|ns| ns == first)
    }

    fn device_include(&self, n: Node) -> bool {
        let Some(path) = n.child_by_field_name("path") else {
            return true;
        };
        if path.kind() != "system_lib_string" {
            return true; // "local.cuh" and macro includes stay
        }
        let name = text(self.src, path)
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim();
        is_device_header(name)
    }
}

/// Whether `<name>` belongs to a host library NVRTC cannot compile even where the
/// project's folders have it (`grammars/cuda/host_includes.txt`: torch, ATen, c10,
/// pybind11, Python.h...).
pub fn is_host_library_header(name: &str) -> bool {
    queries::data_lines(queries::HOST_INCLUDES).any(|entry| match entry.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == entry,
    })
}

/// Whether `std::name` is a `<cmath>` function NVRTC also declares as `::name`
/// (`grammars/cuda/std_math.txt`).
pub fn is_global_math(name: &str) -> bool {
    queries::data_lines(queries::STD_MATH).any(|m| m == name)
}

/// Whether `<name>` is a header NVRTC compiles for device code
/// (`grammars/cuda/device_includes.txt`: the CUDA headers, CCCL, CUB, curand_kernel.h...).
pub fn is_device_header(name: &str) -> bool {
    queries::data_lines(queries::DEVICE_INCLUDES).any(|entry| match entry.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == entry,
    })
}
