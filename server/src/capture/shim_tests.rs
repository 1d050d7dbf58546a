//! The CUDA shim on the CPU: it compiles with the system `cc`, and, preloaded into a small
//! C program linked against a stand-in `libcudart.so` (launches run on the host, device
//! memory is host memory), it intercepts `cudaLaunchKernel`, records each distinct launch
//! with its parameters and what it did to each buffer, and leaves memory as one launch
//! would. The records then go through `resolve` and the inference like a GPU run's.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::capture::infer::infer;

/// The stand-in runtime and driver: allocations are host memory in a table, a launch calls
/// the "kernel" (a host function) with the argument array and the thread count.
const FAKE_RT: &str = include_str!("../../../tests/fixtures/capture_cuda/fake_cudart.c");

/// saxpy (y = a*x + y, inout) three times (twice the same), `fill` (out) and one kernel
/// the project does not have; prints a checksum of the results.
const PROGRAM: &str = include_str!("../../../tests/fixtures/capture_cuda/prog.c");

const SOURCES: &str = include_str!("../../../tests/fixtures/capture_cuda/kernels.cu");

fn cc_available() -> bool {
    Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kernel-lsp-shim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch folder");
    d
}

fn cc(args: &[&str], dir: &Path) {
    let o = Command::new("cc")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cc runs");
    assert!(
        o.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_shim_compiles_with_the_system_cc() {
    if !cc_available() {
        eprintln!("SKIPPED: no C compiler (`cc`) on this machine; the shim was not compiled");
        return;
    }
    let d = scratch("cc");
    let lib = compile_shim(&d).unwrap_or_else(|e| panic!("{e}"));
    assert!(lib.is_file());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_shim_intercepts_launches_of_a_stand_in_runtime() {
    if !cc_available() {
        eprintln!("SKIPPED: no C compiler (`cc`) on this machine; the interception was not run");
        return;
    }
    let d = scratch("fake");
    std::fs::write(d.join("fake.c"), FAKE_RT).expect("write");
    std::fs::write(d.join("prog.c"), PROGRAM).expect("write");
    cc(&["-shared", "-fPIC", "-o", "libcudart.so", "fake.c"], &d);
    cc(
        &[
            "-o",
            "prog",
            "prog.c",
            "-L.",
            "-lcudart",
            "-Wl,-rpath,$ORIGIN",
        ],
        &d,
    );
    let plain = Command::new(d.join("prog")).output().expect("prog runs");
    let lib = compile_shim(&d).unwrap_or_else(|e| panic!("{e}"));
    let out_file = d.join("records.jsonl");
    let seen = Command::new(d.join("prog"))
        .env("LD_PRELOAD", &lib)
        .env("KERNEL_LSP_CAPTURE_OUT", &out_file)
        .env("KERNEL_LSP_CAPTURE_CUDA_NAMES", "saxpy,fill")
        .output()
        .expect("prog runs");
    assert_eq!(
        String::from_utf8_lossy(&seen.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "the program's results are those of a run without the shim (each launch took effect once)"
    );
    let text = std::fs::read_to_string(&out_file).expect("records written");
    let r = record::parse_lines(&text);
    assert_eq!(
        r.cuda.len(),
        4,
        "two distinct saxpy launches, one fill and one refused in a graph capture: {text}"
    );
    let sources = cuda::kernels_of("/p/k.cu", SOURCES);
    let (launches, counts) = cuda::resolve(&r.cuda, &r.cuda_counts, &sources);
    let saxpy: Vec<&record::Launch> = launches.iter().filter(|l| l.kernel == "saxpy").collect();
    let lines = infer(&saxpy, 4, true)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines;
    assert_eq!(
        lines,
        vec![
            "n = 1000, 600, 999",
            "a = 2.0",
            "x: in f32[n] ~ uniform(1.000, 3.000)",
            "y: inout f32[n] ~ uniform(-599.0, 999.0)",
            "grid = cdiv(n, 128)",
            "block = 128",
        ]
    );
    let fill: Vec<&record::Launch> = launches.iter().filter(|l| l.kernel == "fill").collect();
    let inferred = infer(&fill, 4, true).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        inferred
            .notes
            .iter()
            .any(|n| n.contains("while a CUDA graph was being captured")),
        "{:?}",
        inferred.notes
    );
    let lines = inferred.lines;
    assert!(
        lines.contains(&"out: out f32[rows, cols]".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"grid = cdiv(rows * cols, 128)".to_string()),
        "{lines:?}"
    );
    let n = |k: &str| counts.iter().find(|c| c.kernel == k).map(|c| c.launches);
    assert_eq!((n("saxpy"), n("fill")), (Some(3), Some(2)));
    let _ = std::fs::remove_dir_all(&d);
}
