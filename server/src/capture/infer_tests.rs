//! Inference fixtures: launches as the hook writes them, statements as the spec gets them.

use super::*;
use crate::capture::record::parse_lines;

fn launch(json: &str) -> Launch {
    parse_lines(json).launches.pop().expect("a launch line")
}

fn tensor(name: &str, shape: &[u64], strides: &[i64], role: &str) -> String {
    format!(
        r#"{{"name":"{name}","kind":"tensor","shape":{shape:?},"strides":{strides:?},"dtype":"float32","lo":-1.5,"hi":2.25,"role":"{role}"}}"#
    )
}

fn int(name: &str, v: i64, constexpr: bool) -> String {
    format!(r#"{{"name":"{name}","kind":"int","value":{v},"constexpr":{constexpr}}}"#)
}

fn line(args: &[String], grid: [u64; 3]) -> String {
    format!(
        r#"{{"kernel":"k","file":"/p/k.py","args":[{}],"grid":{grid:?}}}"#,
        args.join(",")
    )
}

fn lines_of(launches: &[Launch]) -> Result<Inferred, String> {
    let refs: Vec<&Launch> = launches.iter().collect();
    infer(&refs, 4, true)
}

#[test]
fn elementwise_sizes_grid_and_odd_case() {
    let l = launch(&line(
        &[
            tensor("x_ptr", &[4096], &[1], "in"),
            tensor("out_ptr", &[4096], &[1], "out"),
            int("n", 4096, false),
            int("BLOCK", 1024, true),
        ],
        [4, 1, 1],
    ));
    let got = lines_of(&[l]).unwrap();
    assert_eq!(
        got.lines,
        [
            "n = 4096, 4095",
            "BLOCK = 1024",
            "x_ptr: in f32[n] ~ uniform(-1.500, 2.250)",
            "out_ptr: out f32[n]",
            "grid = cdiv(n, BLOCK)",
        ]
    );
    assert_eq!(got.cases, 2);
}

#[test]
fn row_strides_and_numel_become_products_of_sizes() {
    let l = launch(&line(
        &[
            tensor("x_ptr", &[8, 3, 50], &[150, 50, 1], "inout"),
            int("stride_row", 150, false),
            int("numel", 1200, false),
            int("cols", 50, false),
            int("BLOCK", 64, true),
        ],
        [24, 1, 1],
    ));
    let got = lines_of(&[l]).unwrap();
    assert_eq!(
        got.lines,
        [
            "x_d0 = 8, 7",
            "x_d1 = 3, 1",
            "cols = 50, 49",
            "BLOCK = 64",
            "stride_row = x_d1 * cols",
            "numel = x_d0 * x_d1 * cols",
            "x_ptr: inout f32[x_d0, x_d1, cols] ~ uniform(-1.500, 2.250)",
            "grid = x_d0 * x_d1",
        ]
    );
}

#[test]
fn a_transposed_view_is_a_flat_buffer_with_its_strides_as_captured_and_no_odd_case() {
    let l = launch(&line(
        &[
            tensor("x_ptr", &[6, 100], &[1, 6], "in"),
            int("stride", 6, false),
            int("BLOCK", 128, true),
        ],
        [6, 1, 1],
    ));
    let got = lines_of(&[l]).unwrap();
    assert_eq!(
        got.lines,
        [
            "stride = 6",
            "BLOCK = 128",
            "x_elems = 600",
            "grid_x = 6",
            "x_ptr: in f32[x_elems] ~ uniform(-1.500, 2.250)",
            "grid = grid_x",
        ]
    );
    assert_eq!(got.cases, 1);
}

#[test]
fn launches_of_one_layout_are_cases_and_others_are_named_in_notes() {
    let mk = |n: u64, grid: u64| {
        launch(&line(
            &[
                tensor("x_ptr", &[n], &[1], "inout"),
                int("n", n as i64, false),
                int("BLOCK", 256, true),
            ],
            [grid, 1, 1],
        ))
    };
    // The third launch's grid matches no size: another layout.
    let got = lines_of(&[mk(300, 2), mk(1000, 4), mk(512, 7)]).unwrap();
    assert_eq!(got.lines[0], "n = 1000, 300, 999");
    assert_eq!(got.cases, 3);
    assert_eq!(got.notes.len(), 1, "{:?}", got.notes);
    assert!(got.notes[0].contains("another layout"));
}

#[test]
fn refusals_name_the_argument_and_the_reason() {
    let cases = [
        (
            r#"{"name":"p","kind":"pointer","type":"TensorDescriptor"}"#,
            "non-tensor pointer",
        ),
        (
            r#"{"name":"act","kind":"str","value":"gelu","constexpr":true}"#,
            "string",
        ),
        (
            r#"{"name":"x","kind":"tensor","shape":[4],"strides":[1],"dtype":"complex64","role":"in"}"#,
            "complex64",
        ),
    ];
    for (arg, why) in cases {
        let l = launch(&line(&[arg.to_string()], [1, 1, 1]));
        let err = lines_of(&[l]).unwrap_err();
        assert!(err.contains(why), "{err}");
    }
    let mut l = launch(&line(&[tensor("x", &[4], &[1], "in")], [1, 1, 1]));
    l.refused = Some("`a` and `b` share memory".into());
    assert!(lines_of(&[l]).unwrap_err().contains("share memory"));
}

#[test]
fn defaults_and_heuristics_get_no_statement() {
    let l = launch(&line(
        &[
            tensor("x_ptr", &[10], &[1], "in"),
            r#"{"name":"EVEN","kind":"bool","value":false,"constexpr":true,"set_by":"heuristics"}"#.into(),
            r#"{"name":"ACT","kind":"none","constexpr":true,"has_default":true,"default":null,"passed":false}"#.into(),
            r#"{"name":"eps","kind":"float","value":1e-6}"#.into(),
        ],
        [1, 1, 1],
    ));
    let got = lines_of(&[l]).unwrap();
    assert_eq!(
        got.lines,
        [
            "x_d0 = 10",
            "eps = 1e-6",
            "x_ptr: in f32[x_d0] ~ uniform(-1.500, 2.250)",
            "grid = 1"
        ]
    );
    // Nothing tells the kernel the size: no odd case.
    assert_eq!(got.cases, 1);
}

#[test]
fn an_optional_pointer_passed_as_none_is_given_as_none() {
    let l = launch(&line(
        &[
            tensor("x_ptr", &[10], &[1], "in"),
            r#"{"name":"bias_ptr","kind":"none"}"#.into(),
        ],
        [1, 1, 1],
    ));
    let got = lines_of(&[l]).unwrap();
    assert!(
        got.lines.contains(&"bias_ptr = None".to_string()),
        "{:?}",
        got.lines
    );
}

#[test]
fn distributions_keep_the_captured_range() {
    assert_eq!(
        dist("i64", Some(-100.0), Some(31.0)).unwrap(),
        "randint(-100, 32)"
    );
    assert_eq!(dist("f32", Some(0.0), Some(0.0)).unwrap(), "zeros");
    assert_eq!(
        dist("f16", Some(0.001234), Some(7.0)).unwrap(),
        "uniform(0.001234, 7.000)"
    );
    assert_eq!(dist("bool", Some(0.0), Some(1.0)), None);
}
