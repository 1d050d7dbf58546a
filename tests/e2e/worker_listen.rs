//! Workers kept warm between commands: `kernel-lsp worker --listen SOCKET` keeps one
//! worker and serves one client after another with it, and `kernel-lsp worker --connect
//! SOCKET` is the worker command a pool runs to use it. The real worker on Triton's CPU
//! interpreter, and the fake worker for clients that leave mid-request and workers that
//! die.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench_triton::python;
use crate::tools;

const BIN: &str = env!("CARGO_BIN_EXE_kernel-lsp");

fn workspace(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-listen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/vector_add.py");
    // Small sizes: Triton's interpreter runs every program in Python.
    let text = std::fs::read_to_string(example).unwrap();
    let small = text.replace("n = 1 << 24, 1000", "n = 4096, 1000");
    assert_ne!(
        small, text,
        "examples/vector_add.py's sizes changed; update this test"
    );
    std::fs::write(dir.join("vector_add.py"), small).unwrap();
    dir
}

/// A `--listen` worker on `sock` (killed when dropped), once its socket is there.
struct Listener(Child);

impl Listener {
    fn start(sock: &Path, py: &str, log: &Path) -> Listener {
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--listen"])
            .arg(sock)
            .env("TRITON_INTERPRET", "1")
            .env("KERNEL_LSP_PYTHON", py);
        Listener::spawn(cmd, sock, log)
    }

    /// A listener that keeps the fake worker, with `env` for it.
    fn fake(sock: &Path, env: &[(&str, &str)], log: &Path) -> Listener {
        let fake =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/workers/fake_worker.py");
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--listen"])
            .arg(sock)
            .args(["--", "python3"])
            .arg(fake)
            .envs(env.iter().copied());
        Listener::spawn(cmd, sock, log)
    }

    fn spawn(mut cmd: Command, sock: &Path, log: &Path) -> Listener {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("the listener starts");
        let t0 = Instant::now();
        while !sock.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no socket at {sock:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Listener(child)
    }

    /// The worker it keeps (its one child), once it has started it (the socket comes
    /// first).
    fn kept(&self) -> Vec<u32> {
        let t0 = Instant::now();
        loop {
            let now = self.children();
            if now.len() == 1 {
                return now;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the listener keeps no worker: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its child processes (the worker it keeps), by pid.
    fn children(&self) -> Vec<u32> {
        let me = self.0.id();
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: the comm may hold spaces, the last ')' ends it.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(me) {
                out.push(pid);
            }
        }
        out.sort();
        out
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn optimize(dir: &Path, workers: &str) -> std::process::Output {
    Command::new(BIN)
        .args([
            "optimize",
            "vector_add.py",
            "--steps",
            "1",
            "--only",
            "tunable_sweep",
            "--fresh-policy",
            "--json",
            "--workers",
            workers,
        ])
        .current_dir(dir)
        .output()
        .expect("kernel-lsp runs")
}

#[test]
fn a_listening_worker_serves_one_command_after_another_with_the_same_helper() {
    let py = match python() {
        Ok(p) => p,
        Err(why) => {
            return tools::skip(
                "a_listening_worker_serves_one_command_after_another_with_the_same_helper",
                &why,
            )
        }
    };
    let dir = workspace("warm");
    let sock = dir.join("w.sock");
    let listener = Listener::start(&sock, &py, &dir.join("listen.log"));
    let connect = format!("{BIN} worker --connect {}", sock.display());
    let mut helpers = Vec::new();
    let mut verified = Vec::new();
    for _ in 0..2 {
        let out = optimize(&dir, &connect);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "optimize failed:\n{stderr}");
        let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let step = &run["steps"][0];
        assert!(
            step["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["verified"] == true),
            "candidates were verified: {run}"
        );
        // What was verified, not which won: on the interpreter the winner is a CPU
        // timing, which the rest of the suite beside it moves (CI once accepted BLOCK=2048
        // then BLOCK=1024).
        verified.push(
            step["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (c["label"].clone(), c["verified"].clone()))
                .collect::<Vec<_>>(),
        );
        helpers.push(listener.children());
    }
    // The same worker process served both commands: nothing restarted in between.
    assert_eq!(helpers[0].len(), 1, "one worker: {helpers:?}");
    assert_eq!(helpers[0], helpers[1], "the worker was kept: {helpers:?}");
    assert_eq!(
        verified[0], verified[1],
        "the same candidates verified both times"
    );
    // The socket is for this user only (a client runs code on the GPU).
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    // A second listener on the same socket refuses, and the first keeps serving.
    let second = Command::new(BIN)
        .args(["worker", "--listen"])
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("a worker already listens there"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(sock.exists());
    drop(listener);
}

#[test]
fn connecting_where_no_worker_listens_says_how_to_start_one() {
    let dir = workspace("none");
    let sock = dir.join("nobody.sock");
    let direct = Command::new(BIN)
        .args(["worker", "--connect"])
        .arg(&sock)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(direct.status.code(), Some(1));
    let err = String::from_utf8_lossy(&direct.stderr);
    assert!(
        err.contains("no worker listens there")
            && err.contains(&format!("kernel-lsp worker --listen {}", sock.display())),
        "{err}"
    );
    // Through a pool: the command fails with the worker's own words.
    let out = optimize(&dir, &format!("{BIN} worker --connect {}", sock.display()));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no worker listens there"), "{stderr}");
}

#[test]
fn a_listener_with_idle_exit_leaves_when_no_client_comes() {
    let dir = workspace("idle");
    let sock = dir.join("w.sock");
    let t0 = Instant::now();
    let out = Command::new(BIN)
        .args(["worker", "--idle-exit", "1", "--listen"])
        .arg(&sock)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no client for"),
        "{out:?}"
    );
    assert!(!sock.exists(), "the socket is removed at exit");
}

/// A workspace `name` with a listener keeping the fake worker (`env`, and FAKE_LOG in the
/// workspace): (workspace, its fake log, the listener, its worker, the connect command).
fn fake_setup(name: &str, env: &str) -> (PathBuf, PathBuf, Listener, Vec<u32>, String) {
    let dir = workspace(name);
    let sock = dir.join("w.sock");
    let log = dir.join("fake.log");
    let log_s = log.display().to_string();
    let (k, v) = env.split_once('=').unwrap();
    let listener = Listener::fake(
        &sock,
        &[(k, v), ("FAKE_LOG", log_s.as_str())],
        &dir.join("listen.log"),
    );
    let first = listener.kept();
    let connect = format!("{BIN} worker --connect {}", sock.display());
    (dir, log, listener, first, connect)
}

/// Waits (up to 20 s) until `listener` keeps a worker other than `old`; returns it.
fn replaced(listener: &Listener, old: &[u32]) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        let now = listener.children();
        if now.len() == 1 && now != old {
            return now;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the worker {old:?} was not replaced: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_client_that_leaves_mid_request_gets_the_worker_replaced_for_the_next() {
    let (dir, log, listener, first, connect) = fake_setup("leave", "FAKE_VERIFY_MS=3000");
    // A command killed while the worker verifies (as a pool's time limit or a cancel
    // ends a request): the listener stops that worker and starts another.
    let mut cmd = Command::new(BIN)
        .args([
            "optimize",
            "vector_add.py",
            "--steps",
            "1",
            "--workers",
            &connect,
        ])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed once a candidate's verification is under way (each takes the fake 3 s).
    let stderr = std::io::BufReader::new(cmd.stderr.take().unwrap());
    use std::io::BufRead as _;
    let seen: Vec<String> = stderr
        .lines()
        .map_while(Result::ok)
        .take_while(|l| !l.contains("verifying"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    cmd.kill().unwrap();
    cmd.wait().unwrap();
    let fresh = replaced(&listener, &first);
    assert!(seen.len() < 1000, "{seen:?}");
    // The candidate's verification never finished on the old worker (the check of the
    // current version before it did).
    let done = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(done.contains(" verify current "), "{done}");
    assert!(!done.contains(" verify BLOCK="), "{done}");
    // The next command is served by the fresh worker.
    let out = optimize(&dir, &connect);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(listener.children(), fresh);
}

#[test]
fn a_worker_that_dies_mid_request_is_replaced_and_the_client_goes_on() {
    // The worker exits abruptly during its first verify of a candidate (once per log
    // folder, so its replacement lives).
    let (dir, _log, listener, first, connect) = fake_setup("die", "FAKE_DIE_ON=1");
    // The listener answers the request as lost, starts a fresh worker and goes on: the
    // step completes, the lost candidate saying what happened.
    let out = optimize(&dir, &connect);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let now = listener.children();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first, "the dead worker was replaced");
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let cands = run["steps"][0]["candidates"].as_array().unwrap().clone();
    let lost: Vec<&serde_json::Value> = cands.iter().filter(|c| c["verified"] == false).collect();
    assert_eq!(lost.len(), 1, "{run}");
    let msg = lost[0]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("the worker this listener keeps exited during the request")
            && msg.contains("a fresh one was started"),
        "{msg}"
    );
    assert!(
        cands.iter().filter(|c| c["verified"] == true).count() >= 1,
        "the fresh worker verified the others: {run}"
    );
}

#[test]
fn a_second_client_is_refused_at_once_while_one_is_served() {
    let (dir, _log, _listener, _first, connect) = fake_setup("busy", "FAKE_VERIFY_MS=0");
    // Two pool workers on one listener (a mistake): the second is refused with why,
    // instead of waiting for its `hello` to time out.
    let t0 = Instant::now();
    let out = Command::new(BIN)
        .args(["health", "--workers", &format!("{connect}; {connect}")])
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("refused `hello`: this listening worker is serving another client"),
        "{text}"
    );
    assert!(text.contains("alive"), "the first is served: {text}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// A `--connect` client on `connect` (its command line) with piped stdin and stdout.
fn bridge(connect: &str) -> Child {
    let argv: Vec<&str> = connect.split_whitespace().collect();
    Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Sends `hello` as request `id` and returns the reply line.
fn hello(client: &mut Child, id: u64) -> String {
    use std::io::{BufRead as _, Write as _};
    let stdin = client.stdin.as_mut().unwrap();
    writeln!(stdin, "{{\"id\":{id},\"op\":\"hello\"}}").unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(client.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

#[test]
fn a_client_that_comes_as_the_last_one_leaves_is_served_not_refused() {
    let (_dir, _log, listener, first, connect) = fake_setup("handover", "FAKE_VERIFY_MS=0");
    // One client is served; the next connects before it has gone (a command that starts
    // as the previous one ends, or a pool's replacement for a worker it stopped).
    let mut a = bridge(&connect);
    assert!(hello(&mut a, 1).contains("\"hello\""));
    let mut b = bridge(&connect);
    let leave = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        drop(a.stdin.take());
        a.wait().unwrap();
    });
    let t0 = Instant::now();
    let reply = hello(&mut b, 7);
    leave.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_default();
    assert!(
        v["id"] == 7 && v["status"] == "ok" && v["result"]["kind"] == "hello",
        "the second client is served once the first has gone: {reply}"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(1000),
        "it waited for the first: {:?}",
        t0.elapsed()
    );
    // The same warm worker served both.
    assert_eq!(listener.children(), first);
    drop(b.stdin.take());
    b.wait().unwrap();
}

#[test]
fn a_replaced_worker_goes_with_its_whole_process_group() {
    // The kept worker command is a shell that leaves a child behind (as an `srun`, an
    // `ssh` or a Python helper would) and then becomes the fake worker.
    let dir = workspace("group");
    let sock = dir.join("w.sock");
    let pids = dir.join("bg.pids");
    let fake =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/workers/fake_worker.py");
    let script = format!(
        "sleep 300 & echo $! >> {}; exec python3 {}",
        pids.display(),
        fake.display()
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["worker", "--listen"])
        .arg(&sock)
        .args(["--", "sh", "-c", &script])
        .env("FAKE_VERIFY_MS", "5000");
    let listener = Listener::spawn(cmd, &sock, &dir.join("listen.log"));
    let first = listener.kept();
    // The socket is there before the worker has started.
    let t0 = Instant::now();
    let left_behind: u32 = loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        if let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
            break pid;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(Path::new(&format!("/proc/{left_behind}")).exists());
    // A client leaves while its request runs: the worker is stopped and replaced.
    let connect = format!("{BIN} worker --connect {}", sock.display());
    let mut a = bridge(&connect);
    assert!(hello(&mut a, 1).contains("\"hello\""));
    {
        use std::io::{BufRead as _, Write as _};
        let stdin = a.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "{}",
            serde_json::json!({"id": 2, "op": "verify", "seed": 1,
                "candidate": {"label": "new", "plan": {"x": 1}},
                "reference": {"label": "old", "plan": {"x": 2}}})
        )
        .unwrap();
        stdin.flush().unwrap();
        let mut progress = String::new();
        std::io::BufReader::new(a.stdout.as_mut().unwrap())
            .read_line(&mut progress)
            .unwrap();
        assert!(progress.contains("progress"), "{progress}");
    }
    a.kill().unwrap();
    a.wait().unwrap();
    replaced(&listener, &first);
    // What the old worker left running went with it.
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{left_behind}")).exists() {
        let state =
            std::fs::read_to_string(format!("/proc/{left_behind}/stat")).unwrap_or_default();
        if state.contains(") Z") {
            break; // a zombie waiting for its reaper: it has ended
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the old worker's child {left_behind} still runs: {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
