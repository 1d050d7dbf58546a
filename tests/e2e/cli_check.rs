//! `kernel-lsp check`: what a kernel author's CI prints.

use std::process::Command;

use expect_test::expect;

fn check(args: &[&str], files: &[(&str, &[u8])]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!(
        "kernel-lsp-check-{}-{}",
        std::process::id(),
        files.first().map_or("x", |f| f.0)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"));
    cmd.current_dir(&dir).arg("check").args(args);
    for (name, body) in files {
        std::fs::write(dir.join(name), body).unwrap();
        cmd.arg(name);
    }
    let out = cmd.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const BAD: &[u8] = b"// @bench n = 1 << 20\n// @bench x: in f33[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n";

#[test]
fn errors_print_compiler_style_and_exit_1() {
    let (code, out, _) = check(&["--no-compile"], &[("bad.cu", BAD)]);
    assert_eq!(code, 1);
    expect![[r#"
        bad.cu:2:17: error: `f33` is not an element type; use one of f16, bf16, f32, f64, i8, i16, i32, i64, u8, u32, bool; did you mean `f32`? [@bench]
    "#]].assert_eq(&out);
}

#[test]
fn json_output_has_positions_and_severity() {
    let (code, out, _) = check(&["--no-compile", "--json"], &[("bad.cu", BAD)]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let f = &v[0];
    assert_eq!(
        (f["file"].as_str(), f["line"].as_u64(), f["column"].as_u64()),
        (Some("bad.cu"), Some(2), Some(17))
    );
    assert_eq!(f["severity"], "error");
    assert_eq!(f["source"], "@bench");
}

#[test]
fn clean_files_exit_0_and_unreadable_ones_exit_2() {
    let good = b"// @bench n = 1 << 20, 4099\n// @bench x: in f32[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n";
    let (code, out, _) = check(&["--no-compile"], &[("good.cu", good)]);
    assert_eq!((code, out.as_str()), (0, ""));

    let (code, _, err) = check(
        &["--no-compile"],
        &[("latin1.cu", b"// caf\xe9\n__global__ void k() {}\n")],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("latin1.cu: error: is not UTF-8 text (invalid byte at offset 6)"),
        "{err}"
    );

    let (code, _, err) = check(&["--no-compile"], &[("blob.cu", b"\x7fELF\x00\x00\x01")]);
    assert_eq!(code, 2);
    assert!(err.contains("looks like a binary file"), "{err}");

    let (code, _, err) = check(&[], &[("notes.txt", b"hello")]);
    assert_eq!(code, 0);
    assert!(
        err.contains("notes.txt: skipped: not a CUDA (.cu, .cuh) or Python file"),
        "{err}"
    );
}

#[test]
fn bundled_examples_check_clean() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut files: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .arg("check")
        .arg("--no-compile")
        .args(&files)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "examples have errors:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(": error:"), "{stdout}");
}
