//! Profiles without a GPU (issue #14): a stand-in `ncu` (a shell script that answers
//! with a recorded H100 profile, or with ncu's permission error) lets CI run
//! `kernel-lsp profile`, `optimize --profile` (the strategist's prompt and the policy's
//! rationale) and the editor's Profile action (progress, hover, code lens) end to end.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::client::TestClient;

const SAXPY_CSV: &str = include_str!("../fixtures/ncu/saxpy.csv");

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fake `ncu` in `dir`: logs its arguments to `ncu-args.txt`, then writes `csv` to the
/// `--log-file` it was given (or, with `csv` empty, prints ncu's permission error).
fn fake_ncu(dir: &Path, csv: &str) -> PathBuf {
    let data = dir.join("profile.csv");
    std::fs::write(&data, csv).unwrap();
    let script = dir.join("ncu");
    let body = if csv.is_empty() {
        "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0.' >&2\nexit 1\n".to_string()
    } else {
        format!(
            "log=''\nprev=''\nfor a in \"$@\"; do [ \"$prev\" = --log-file ] && log=\"$a\"; prev=\"$a\"; done\ncp '{}' \"$log\"\n",
            data.display()
        )
    };
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n{body}",
            dir.join("ncu-args.txt").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn kernel_lsp(dir: &Path, ncu: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
        .current_dir(dir)
        .args(args)
        .env("KERNEL_LSP_NCU", ncu)
        .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn profile_prints_the_metrics_and_a_diagnosis_and_says_why_when_it_cannot() {
    let dir = workdir("profile-cli");
    let saxpy = include_str!("../../examples/saxpy.cu");
    std::fs::write(dir.join("saxpy.cu"), saxpy).unwrap();
    let ncu = fake_ncu(&dir, SAXPY_CSV);
    let (code, out, err) = kernel_lsp(&dir, &ncu, &["profile", "saxpy.cu"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("DRAM throughput                       78.8%"),
        "{out}"
    );
    assert!(
        out.contains("top stalls                            long scoreboard 89%"),
        "{out}"
    );
    assert!(
        out.contains(
            "diagnosis: memory-bound at 79% of DRAM peak; 89% of stalls are long scoreboard"
        ),
        "{out}"
    );
    let args = std::fs::read_to_string(dir.join("ncu-args.txt")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    for want in [
        "--target-processes",
        "--clock-control",
        "none",
        "--csv",
        "raw",
        "regex:^saxpy$",
        "bench",
        "saxpy.cu",
    ] {
        assert!(args.contains(&want), "ncu was run with {args:?}");
    }
    let (code, out, _) = kernel_lsp(&dir, &ncu, &["profile", "saxpy.cu", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kernel"], "saxpy");
    assert_eq!(v["short"], "DRAM 79% · SM 29% · occ 76% (warps)");

    // ncu without permission to read the counters: the fix, on one line.
    let denied = fake_ncu(&workdir("profile-denied"), "");
    let (code, _, err) = kernel_lsp(&dir, &denied, &["profile", "saxpy.cu"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("saxpy.cu: error: ncu may not read the GPU's performance counters"),
        "{err}"
    );
    assert!(
        err.contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{err}"
    );
    // No ncu at all.
    let (code, _, err) = kernel_lsp(&dir, &dir.join("no-such-ncu"), &["profile", "saxpy.cu"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Nsight Compute (`ncu`) was not found"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The code lens titles of the document.
async fn lenses(c: &mut TestClient, uri: &str) -> Vec<String> {
    let v = c
        .request(
            "textDocument/codeLens",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    v["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["command"]["title"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The editor's Profile action over the real binary's stdio: a code lens offers it, the
/// job reports progress and ends with the diagnosis, then the hover on the kernel shows
/// the profile and the lens shows its bound; an edit to the kernel retires both.
#[tokio::test]
async fn the_editor_profiles_a_kernel_and_shows_the_bound_in_hover_and_lens() {
    let dir = workdir("profile-lsp");
    let ncu = fake_ncu(&dir, SAXPY_CSV);
    let ncu = ncu.display().to_string();
    let file = dir.join("saxpy.cu");
    let saxpy = include_str!("../../examples/saxpy.cu");
    std::fs::write(&file, saxpy).unwrap();
    let mut c = TestClient::spawn_binary(&[("KERNEL_LSP_NCU", ncu.as_str())]);
    c.initialize(json!({"compileOnType": false}), &["utf-16"])
        .await;
    let uri = format!("file://{}", file.display());
    c.open(&uri, "cuda", saxpy).await;
    assert!(lenses(&mut c, &uri)
        .await
        .contains(&"🔍 Profile".to_string()));
    let done = c
        .request(
            "workspace/executeCommand",
            json!({"command": "kernel-lsp.profile", "arguments": [{"uri": uri, "kernel": "saxpy"}]}),
        )
        .await;
    assert_eq!(done["result"]["outcome"], "profiled", "{done}");
    assert!(
        done["result"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`saxpy`: memory-bound at 79% of DRAM peak"),
        "{done}"
    );
    let titles = lenses(&mut c, &uri).await;
    assert!(
        titles.contains(&"🔍 DRAM 79% · SM 29% · occ 76% (warps)".to_string()),
        "{titles:?}"
    );
    let line = saxpy
        .lines()
        .position(|l| l.contains("void saxpy("))
        .unwrap();
    let col = saxpy.lines().nth(line).unwrap().find("saxpy(").unwrap();
    let hover = c
        .request(
            "textDocument/hover",
            json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": col + 1}}),
        )
        .await;
    let md = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        md.contains("**Profile** (Nsight Compute): memory-bound at 79% of DRAM peak"),
        "{md}"
    );
    assert!(
        md.contains("| occupancy achieved / theoretical | 76.2% / 100.0% (limit: warps) |"),
        "{md}"
    );
    // An edit inside the kernel: the profile no longer describes it.
    c.edit(
        &uri,
        2,
        (line as u32 + 1, 0),
        (line as u32 + 1, 0),
        "    // edited\n",
    )
    .await;
    let titles = lenses(&mut c, &uri).await;
    assert!(titles.contains(&"🔍 Profile".to_string()), "{titles:?}");
    assert!(!titles.iter().any(|t| t.contains("DRAM")), "{titles:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `optimize --profile` on the Triton interpreter with the stand-in ncu: the version is
/// profiled once, the embedded policy's rationale cites the profile, and the LLM
/// strategist's prompt (a replay server) carries it.
#[test]
fn optimize_with_profiles_feeds_the_policy_and_the_strategist() {
    let test = "optimize_with_profiles_feeds_the_policy_and_the_strategist";
    let py = match crate::bench_triton::python() {
        Ok(p) => p,
        Err(why) => return crate::tools::skip(test, &why),
    };
    let dir = workdir("profile-opt");
    let ncu = fake_ncu(&dir, SAXPY_CSV);
    let add = "import triton\nimport triton.language as tl\n\n\n# @bench n = 1000\n# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]\n# @bench grid = cdiv(n, BLOCK); BLOCK = 256\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)\n";
    std::fs::write(dir.join("add.py"), add).unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kernel-lsp"))
            .current_dir(&dir)
            .args([
                "optimize",
                "add.py",
                "--steps",
                "1",
                "--json",
                "--fresh-policy",
                "--profile",
            ])
            .args(extra)
            .env("KERNEL_LSP_NCU", &ncu)
            .env("KERNEL_LSP_PYTHON", &py)
            .env("TRITON_INTERPRET", "1")
            .env("KERNEL_LSP_DATA_DIR", dir.join("data"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (
            serde_json::from_str::<Value>(&stdout).unwrap_or(Value::Null),
            stderr,
        )
    };
    let (v, err) = run(&["--only", "triton_num_warps"]);
    assert!(
        err.contains("step 1: profiling version 0 with Nsight Compute"),
        "{err}"
    );
    let rationale = v["steps"][0]["rationale"].as_str().unwrap_or_default();
    assert!(
        rationale.ends_with("(profile: DRAM 79% · SM 29% · occ 76% (warps))"),
        "{v}\n{err}"
    );
    assert!(v.get("warnings").is_none(), "{v}");
    assert!(
        v["steps"][0]["profile"]
            .as_str()
            .is_some_and(|p| p.starts_with("memory-bound at 79% of DRAM peak")),
        "the history keeps the version's diagnosis: {v}"
    );
    assert!(
        v["steps"][0].get("energy_j").is_none(),
        "no NVML on the interpreter: {v}"
    );

    let server = crate::llm_server::ReplayServer::start(vec![
        crate::llm_server::Scripted::openai(
            "```json\n{\"id\": \"triton_configs\", \"params\": {}, \"rationale\": \"DRAM 79% of peak: larger tiles cut the launch count\"}\n```",
        ),
    ]);
    let model =
        json!({"provider": "openai", "url": server.url(), "model": "replay", "maxRetries": 0});
    std::fs::write(
        dir.join("settings.json"),
        json!({"llm": {"strategy": model}}).to_string(),
    )
    .unwrap();
    let (v, err) = run(&["--llm", "--config", "settings.json"]);
    assert_eq!(v["steps"][0]["strategy_id"], "triton_configs", "{v}\n{err}");
    assert_eq!(
        v["steps"][0]["rationale"],
        "DRAM 79% of peak: larger tiles cut the launch count"
    );
    let reqs = server.requests();
    let user = reqs[0].body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        user.contains("## Profile (Nsight Compute)\nDiagnosis: memory-bound at 79% of DRAM peak"),
        "{user}"
    );
    assert!(user.contains("- top stalls: long scoreboard 89%"), "{user}");
    assert!(
        user.contains("- profile (Nsight Compute): memory-bound at 79% of DRAM peak"),
        "the facts carry it too: {user}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
