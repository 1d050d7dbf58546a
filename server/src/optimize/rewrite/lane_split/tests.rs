use super::*;
use crate::document::Document;
use crate::syntax::Lang;

/// Lane `k`'s text of the kernel's body statements after the lane index `i`'s
/// declaration, with V = `v`, and the vector path's conditions.
fn lanes(src: &str, v: usize, k: usize) -> (String, Vec<String>) {
    let doc = Document::new(Lang::Cuda, 0, src);
    let tree = doc.tree().expect("parses");
    let func = named_children(tree.root_node())
        .into_iter()
        .find(|n| n.kind() == "function_definition")
        .expect("a function");
    let stmts = named_children(func.child_by_field_name("body").expect("a body"));
    let at = stmts[1].start_byte();
    let fixed = fixed_integers(src, func, at, "i");
    let roots = &stmts[1..];
    let s = Splits::find(src, roots, "i", v, &fixed, &[]);
    let span = at..stmts.last().expect("statements").end_byte();
    let text = render(src, &span, &s.lane(src, roots, k, &[])).expect("renders");
    (text, s.conditions(&|_| true))
}

const UPSAMPLE: &str = "__global__ void up(const float* x, float* y, int H, int W) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int ox = i % (2 * W);
    int oy = (i / (2 * W)) % (2 * H);
    int p = (size_t)i / (4 * H * W);
    y[i] = x[(p * H + oy / 2) * W + ox / 2];
}";

#[test]
fn a_split_by_parameters_shares_the_quotient_under_a_divisibility_condition() {
    let (text, conds) = lanes(UPSAMPLE, 4, 3);
    assert_eq!(
        text,
        "int ox = ((4 * i) % (2 * W) + 3);
    int oy = ((4 * i) / (2 * W)) % (2 * H);
    int p = (size_t)(4 * i) / (4 * H * W);
    y[(4 * i + 3)] = x[(p * H + oy / 2) * W + ox / 2];"
    );
    assert_eq!(conds, ["(2 * W) % 4 == 0", "(4 * H * W) % 4 == 0"]);
    let (first, _) = lanes(UPSAMPLE, 4, 0);
    assert!(first.starts_with("int ox = (4 * i) % (2 * W);"), "{first}");
}

#[test]
fn literals_reduce_only_when_the_width_divides_them() {
    let src = "__global__ void k(float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = (float)(i / 3 + i % 8 + i / 0x10 + (i % 4));
}";
    let (text, conds) = lanes(src, 4, 1);
    assert_eq!(
        text,
        "y[(4 * i + 1)] = (float)((4 * i + 1) / 3 + ((4 * i) % 8 + 1) + (4 * i) / 0x10 + ((4 * i) % 4 + 1));"
    );
    assert!(conds.is_empty(), "{conds:?}");
}

#[test]
fn divisors_not_fixed_where_the_condition_stands_stay_as_written() {
    let src = "__global__ void k(const float* x, float* y, int n, float s, int m) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int w = n * 2;
    y[i] = i / w + i % s + i / x[0] + i % (m + 1) + i / n;
    m = 3;
}";
    let (text, conds) = lanes(src, 2, 1);
    assert!(
        text.contains(
            "y[(2 * i + 1)] = (2 * i + 1) / w + (2 * i + 1) % s + (2 * i + 1) / x[0] + (2 * i + 1) % (m + 1) + (2 * i) / n;"
        ),
        "{text}"
    );
    assert_eq!(conds, ["n % 2 == 0"]);
}

#[test]
fn a_shadowed_or_pointer_name_is_not_fixed() {
    let src = "__global__ void k(float* y, int n, int* p, const long d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    {
        int n = 3;
        y[i] = n;
    }
}";
    let doc = Document::new(Lang::Cuda, 0, src);
    let tree = doc.tree().expect("parses");
    let func = named_children(tree.root_node())[0];
    let fixed = fixed_integers(src, func, src.find("    {").expect("block"), "i");
    assert_eq!(fixed.into_iter().collect::<Vec<_>>(), ["d"]);
}

#[test]
fn integer_literals_and_types() {
    assert_eq!(int_literal("16ULL"), Some(16));
    assert_eq!(int_literal("0x10"), Some(16));
    assert_eq!(int_literal("010"), Some(8));
    assert_eq!(int_literal("2.0f"), None);
    assert_eq!(int_literal("1e3"), None);
    assert!(is_int_type("const unsigned int"));
    assert!(is_int_type("size_t"));
    assert!(!is_int_type("float"));
}
