use super::expressions::{qualified_name_len, typename_starts_expression};
use super::macros::{macro_statement, statement_start};
use super::*;

#[test]
fn only_paired_one_line_linkage_groups_are_hidden() {
    let open = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n";
    let close = "#ifdef __cplusplus\n}\n#endif\n";
    let decl = "int f(void);\n";
    let both = format!("{open}{decl}{close}");
    let hidden = split_linkage_groups(&both);
    assert_eq!(hidden, [0..open.len(), open.len() + decl.len()..both.len()]);
    // An opening group with no closing one, or groups holding more than the brace.
    assert!(split_linkage_groups(&format!("{open}{decl}")).is_empty());
    let busy = format!("#ifdef __cplusplus\nextern \"C\" {{\nint g(void);\n#endif\n{decl}{close}");
    assert!(split_linkage_groups(&busy).is_empty());
    let other = "#ifdef USE_FAST\nstatic int fast = 1;\n#endif\n";
    assert!(split_linkage_groups(other).is_empty());
}

#[test]
fn a_typename_before_a_qualified_name_and_a_brace_or_paren_is_an_expression() {
    // From `typename_in_expressions_parses`: a value built, a static member called.
    assert!(typename_starts_expression(" T::Params{a, b};"));
    assert!(typename_starts_expression(" K::Params(1, 2);"));
    assert!(typename_starts_expression(
        " K::template Load<4>(loader).run(x);"
    ));
    // Declarations stay: an alias, a variable, a variable with constructor arguments.
    assert!(!typename_starts_expression(" K::Loader;\n"));
    assert!(!typename_starts_expression(" K::Loader loader;"));
    assert!(!typename_starts_expression(" K::Loader loader(x);"));
    // No `::`, or the brace on the next line.
    assert!(!typename_starts_expression(" T(1)"));
    assert!(!typename_starts_expression(" T::Params\n{a, b};"));
}

#[test]
fn a_qualified_name_spans_template_arguments_and_stops_at_the_line_end() {
    assert_eq!(qualified_name_len(b" A<B::C, 2>::D(x)"), (14, true));
    assert_eq!(qualified_name_len(b" T x;"), (4, false));
    assert_eq!(qualified_name_len(b" T::X\n(y)"), (5, true));
}

/// The text with hidden regions shown as `·` runs, for fixtures.
fn show(text: &str) -> String {
    let m = masked(Lang::Cuda, text).unwrap_or_else(|| text.to_string());
    m.split('\n')
        .zip(text.split('\n'))
        .map(|(m, t)| {
            if m == t {
                t.to_string()
            } else {
                format!("{m}   <- {}", t.trim())
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn pragma_between_a_loop_head_and_its_body_is_hidden_but_not_between_statements() {
    let src = "__global__ void k(float* x) {\n    for (int j = 0; j < 4; ++j)\n#pragma unroll\n        for (int i = 0; i < 8; ++i) x[i] += 1;\n    #pragma unroll 4\n    for (int i = 0; i < 8; ++i) x[i] = 0;\n}\n";
    let shown = show(src);
    assert!(shown.contains("<- #pragma unroll\n"), "{shown}");
    assert!(shown.contains("    #pragma unroll 4\n"), "{shown}");
}

#[test]
fn an_if_group_around_a_statement_head_keeps_the_first_branch() {
    let src = "__global__ void k(int n, float s, float* y) {\n#if USE_FAST\n    if (n > 0 && s > 0)\n#else\n    if (n > 0)\n#endif\n    {\n        y[0] = s;\n    }\n}\n";
    let m = masked(Lang::Cuda, src).unwrap();
    let kept: Vec<&str> = m.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    assert_eq!(
        kept,
        [
            "__global__ void k(int n, float s, float* y) {",
            "if (n > 0 && s > 0)",
            "{",
            "y[0] = s;",
            "}",
            "}"
        ]
    );
    // `#if 0` keeps the other branch.
    let zero = src.replace("#if USE_FAST", "#if 0");
    let m = masked(Lang::Cuda, &zero).unwrap();
    assert!(
        m.contains("    if (n > 0)\n") && !m.contains("s > 0)"),
        "{m}"
    );
}

#[test]
fn macros_used_as_statements_are_hidden_and_ordinary_calls_stay() {
    let src = "static void launch(int t, const float* x, cudaStream_t s) {\n    GGML_TENSOR_LOCALS\n\n    int n = ne0 / 2;\n    switch (t) {\n        case T_F32:  LAUNCH(float,       float);  break;\n        case T_F16: LAUNCH(half, half); break;\n    }\n    DISPATCH(const float*, x)\n    CUDA_CHECK(cudaMemsetAsync(p, 0, n, s));\n    int m = t > 0 ? MAX(t, n) : MIN(t, n);\n    CUDA_KERNEL_LOOP(i, n) {\n        y[i] = 0;\n    }\n}\n";
    expect_test::expect![[r#"
        static void launch(int t, const float* x, cudaStream_t s) {
                                 <- GGML_TENSOR_LOCALS

            int n = ne0 / 2;
            switch (t) {
                case T_F32:                            ;  break;   <- case T_F32:  LAUNCH(float,       float);  break;
                case T_F16:                   ; break;   <- case T_F16: LAUNCH(half, half); break;
            }
                                        <- DISPATCH(const float*, x)
            CUDA_CHECK(cudaMemsetAsync(p, 0, n, s));
            int m = t > 0 ? MAX(t, n) : MIN(t, n);
                                   {   <- CUDA_KERNEL_LOOP(i, n) {
                y[i] = 0;
            }
        }
    "#]]
    .assert_eq(&show(src));
    // And the masked text parses.
    let m = masked(Lang::Cuda, src).unwrap();
    let mut p = tree_sitter::Parser::new();
    p.set_language(&crate::syntax::ts_language(Lang::Cuda))
        .unwrap();
    let tree = p.parse(&m, None).unwrap();
    assert!(!tree.root_node().has_error(), "{m}");
    // A functional cast to `unsigned` reads as a parenthesized expression.
    let cast = "__global__ void k(int n) {\n    dim3 g(unsigned((n + 63) / 64), unsigned(n));\n    unsigned (*f)(int) = 0;\n}\n";
    let m = masked(Lang::Cuda, cast).unwrap();
    assert!(
        m.contains("dim3 g(        ((n + 63) / 64),         (n));"),
        "{m}"
    );
    assert!(m.contains("unsigned (*f)(int)"), "{m}");
    let tree = p.parse(&m, None).unwrap();
    assert!(!tree.root_node().has_error(), "{m}");
    // Qualifier macros and macros between string literals.
    let q = "__global__ void k(const float * RESTRICT x, float & ALIAS y, int n) {\n    const float * __restrict__ p = x;\n    printf(\"%\" PRId64 \" rows\\n\", (long long) n * SCALE);\n    y = x[0] * N + p[0];\n}\n";
    let m = masked(Lang::Cuda, q).unwrap();
    let tree = p.parse(&m, None).unwrap();
    assert!(!tree.root_node().has_error(), "{m}");
    assert!(
        m.contains("const float *          x, float &       y"),
        "{m}"
    );
    assert!(m.contains("\"%\"        \" rows"), "{m}");
    assert!(
        m.contains("* SCALE)") && m.contains("x[0] * N + p[0]"),
        "{m}"
    );
    // Top-level macros are the grammar's business.
    assert_eq!(
        masked(
            Lang::Cuda,
            "GGML_EXTERN_C
int x;
"
        ),
        None
    );
}

#[test]
fn align_attributes_are_hidden_and_top_level_directives_stay() {
    let src = "#include <cuda_fp16.h>\n#if defined(X)\nstruct __align__(8) Pair { float a, b; };\n#endif\n__shared__ __align__(16) float t[32];\nstruct __builtin_align__(32) float8 { float x; };\n";
    let m = masked(Lang::Cuda, src).unwrap();
    assert_eq!(
        m,
        src.replace("__align__(8)", &" ".repeat(12))
            .replace("__align__(16)", &" ".repeat(13))
            .replace("__builtin_align__(32)", &" ".repeat(21))
    );
    assert_eq!(m.len(), src.len());
    assert_eq!(masked(Lang::Cuda, "__global__ void k() { }\n"), None);
    assert_eq!(masked(Lang::Triton, src), None);
}

#[test]
fn calling_convention_macros_are_hidden_and_other_caps_names_stay() {
    // As the CUDA samples write their stream callbacks and driver-API prototypes.
    let src = "void CUDART_CB myStreamCallback(cudaStream_t s, cudaError_t e, void *data) {\n    printf(\"CUDART_CB %d\\n\", (int)e);\n}\nstatic CUresult CUDAAPI load(CUmodule *m);\nMY_TYPE CUDART_CBX f(int x);\n";
    let m = masked(Lang::Cuda, src).unwrap();
    assert_eq!(m.len(), src.len());
    assert!(m.starts_with("void           myStreamCallback("), "{m}");
    assert!(m.contains("static CUresult         load("), "{m}");
    // In a string, and as part of a longer name: kept.
    assert!(m.contains("\"CUDART_CB %d"), "{m}");
    assert!(m.contains("MY_TYPE CUDART_CBX f"), "{m}");
    let mut p = tree_sitter::Parser::new();
    p.set_language(&crate::syntax::ts_language(Lang::Cuda))
        .unwrap();
    let tree = p
        .parse(m.replace("MY_TYPE CUDART_CBX f(int x);", ""), None)
        .unwrap();
    assert!(!tree.root_node().has_error(), "{m}");
}

#[test]
fn typeid_of_a_builtin_type_and_class_instantiations_parse() {
    let src = "template <class Real> struct Est { Real x; };\ntemplate class Est<float>;\nextern template struct Est<double>;\ntemplate __global__ void k<float>(float *);\nvoid check() {\n  if (typeid(Real) == typeid(unsigned int) && typeid( double ) != typeid(x)) {}\n  int typeidx = sizeof(double);\n}\n";
    let m = masked(Lang::Cuda, src).unwrap();
    assert_eq!(m.len(), src.len());
    assert!(
        m.contains("typeid(Real) == typeid(____________) && typeid( ______ ) != typeid(x)"),
        "{m}"
    );
    let lines: Vec<&str> = m.lines().collect();
    assert!(
        lines[1].trim().is_empty() && lines[2].trim().is_empty(),
        "{m}"
    );
    assert!(
        m.contains("template __global__ void k<float>(float *);"),
        "{m}"
    );
    assert!(m.contains("int typeidx = sizeof(double);"), "{m}");
    let mut p = tree_sitter::Parser::new();
    p.set_language(&crate::syntax::ts_language(Lang::Cuda))
        .unwrap();
    let tree = p.parse(&m, None).unwrap();
    assert!(
        !tree.root_node().has_error(),
        "{m}\n{}",
        tree.root_node().to_sexp()
    );
    // Unmasked, the grammar fails on both.
    let tree = p.parse(src, None).unwrap();
    assert!(tree.root_node().has_error());
}

#[test]
fn braces_in_comments_strings_and_hidden_branches_do_not_count() {
    let src = "__global__ void k(float* x) {\n    // {\n    const char* s = \"{\";\n#if A\n    if (x) {\n#else\n    if (!x) {\n#endif\n        x[0] = 1;\n    }\n}\n#define OUTSIDE 1\n";
    let m = masked(Lang::Cuda, src).unwrap();
    // The directive after the function is top level again: kept.
    assert!(m.ends_with("#define OUTSIDE 1\n"), "{m}");
    assert!(!m.contains("!x"), "{m}");
}

#[test]
fn a_statement_starts_after_the_indent_and_a_case_label() {
    assert_eq!(statement_start("    x = 1;"), Some(4));
    assert_eq!(statement_start("\tcase T_F32:  LAUNCH(float);"), Some(14));
    // A scoped label's `::` is passed over; `default:` is a label too.
    assert_eq!(statement_start("case A::B: F(x);"), Some(11));
    assert_eq!(statement_start("  default:F(x);"), Some(10));
    // A `case` line with no label colon has no statement here.
    assert_eq!(statement_start("case A::B"), None);
    assert_eq!(statement_start("default_width = 4;"), None);
}

#[test]
fn a_caps_macro_is_a_statement_when_bare_typed_unterminated_or_a_loop_head() {
    // (line, the hidden text, bare)
    let hidden = [
        ("    GGML_TENSOR_LOCALS", "GGML_TENSOR_LOCALS", true),
        ("  LOCALS_2 // all of them", "LOCALS_2", true),
        ("  LAUNCH(float, half);", "LAUNCH(float, half)", false),
        (
            "  DISPATCH(const float*, x);",
            "DISPATCH(const float*, x)",
            false,
        ),
        ("  DISPATCH(n, x)", "DISPATCH(n, x)", true),
        ("  DISPATCH(n, x) /* no ; */", "DISPATCH(n, x)", true),
        (
            "  CUDA_KERNEL_LOOP(i, n) {",
            "CUDA_KERNEL_LOOP(i, n)",
            false,
        ),
        ("    case K::A: RUN(uint8_t); break;", "RUN(uint8_t)", false),
    ];
    for (line, want, bare) in hidden {
        let (a, b, got_bare) = macro_statement(line).unwrap_or_else(|| panic!("{line}"));
        assert_eq!((&line[a..b], got_bare), (want, bare), "{line}");
    }
    // Ordinary calls and expressions, lower-case names, a call left open on the line.
    for line in [
        "  CUDA_CHECK(cudaMalloc(&p, n));",
        "  MAX(a, b) + 1;",
        "  launch(float, half)",
        "  X = 3;",
        "  A",
        "  LAUNCH(float,",
        "case A: x = 1;",
    ] {
        assert_eq!(macro_statement(line), None, "{line}");
    }
}
