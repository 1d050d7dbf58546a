//! The worker pool against the real `kernel-lsp worker` and against fake workers (small
//! `sh` scripts) that hang, crash, print garbage, fault or leave children behind; and the
//! `bench` command on a machine without a GPU.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use kernel_lsp::spec::BenchPlan;
use kernel_lsp::syntax::Lang;
use kernel_lsp::worker::pool::{PoolConfig, TimeLimits, WorkerPool, WorkerSpec, WorkerState};
use kernel_lsp::worker::protocol::{ErrorKind, Op, OpResult, Reply, ReplyBody, Version};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_kernel-lsp");

/// A fresh scratch folder per test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-lsp-pool-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fake worker: answers `hello` and `shutdown` properly; runs `on_request` (sh, with
/// `$id` set and `$n` = how many non-hello requests all fake workers of this folder saw
/// before this one) for anything else. `ok` in the script prints a compile reply.
fn fake(dir: &Path, on_request: &str) -> Vec<String> {
    let script = format!(
        r#"
D='{dir}'
echo $$ >> "$D/started"
ok() {{ echo '{{"id":'$id',"status":"ok","result":{{"kind":"compile","log":"","compile_ms":1.0,"cached":false}}}}'; }}
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/^{{"id":\([0-9]*\).*/\1/p')
  case "$line" in
    *'"op":"hello"'*)
      echo '{{"id":'$id',"status":"ok","result":{{"kind":"hello","protocol":1,"worker_version":"fake","device":null,"cuda":{{"available":false,"message":"fake cuda"}},"triton":{{"available":false,"message":"fake triton"}}}}}}' ;;
    *'"op":"shutdown"'*)
      echo '{{"id":'$id',"status":"ok","result":{{"kind":"shutdown"}}}}'; exit 0 ;;
    *)
      n=$(cat "$D/count" 2>/dev/null || echo 0); echo $((n + 1)) > "$D/count"
      {on_request} ;;
  esac
done
"#,
        dir = dir.display()
    );
    vec!["sh".into(), "-c".into(), script]
}

fn config(command: Vec<String>, size: usize) -> PoolConfig {
    PoolConfig {
        command,
        size,
        workers: Vec::new(),
        limits: TimeLimits {
            hello: Duration::from_secs(20),
            compile: Duration::from_secs(20),
            verify: Duration::from_secs(20),
            time: Duration::from_secs(20),
        },
        kill_grace: Duration::ZERO,
        shutdown_grace: Duration::from_millis(300),
        env: Vec::new(),
    }
}

fn compile_op(kernel: &str) -> Op {
    Op::Compile {
        version: Version {
            torch: None,
            label: "candidate".into(),
            lang: Lang::Cuda,
            source: "__global__ void k() {}".into(),
            plan: BenchPlan {
                kernel: kernel.into(),
                lang: Lang::Cuda,
                cases: Vec::new(),
                tunables: Vec::new(),
                defines: Vec::new(),
                atol: None,
                rtol: None,
                reference: None,
                torch_reference: None,
                trials: 3,
            },
            options: Vec::new(),
            cuda: None,
        },
    }
}

/// Alive and not a zombie (an orphaned grandchild may wait for a reaper that never comes).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

async fn gone_soon(pid: u32) -> bool {
    for _ in 0..100 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn started(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("started"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

// ---- the real worker binary ----

#[tokio::test]
async fn real_worker_says_hello_with_its_backends() {
    let pool = WorkerPool::new(config(vec![BIN.into(), "worker".into()], 1));
    let hello = pool.connect().await.expect("hello");
    assert_eq!(hello.protocol, 1);
    assert_eq!(hello.worker_version, env!("CARGO_PKG_VERSION"));
    if hello.cuda.available {
        assert!(
            hello.device.is_some(),
            "CUDA available but no device: {hello:?}"
        );
    } else {
        assert!(hello.device.is_none());
        assert!(!hello.cuda.message.is_empty(), "no reason given: {hello:?}");
    }
    assert_eq!(pool.hello(), Some(hello));
    pool.shutdown().await;
}

#[tokio::test]
async fn real_worker_answers_bad_lines_and_exits_0_on_shutdown() {
    let mut child = tokio::process::Command::new(BIN)
        .arg("worker")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    stdin
        .write_all(b"this is not json\n{\"id\":4,\"op\":\"launch_missiles\"}\n{\"id\":5,\"op\":\"hello\"}\n{\"id\":6,\"op\":\"shutdown\"}\n")
        .await
        .unwrap();
    let mut replies = Vec::new();
    while let Some(line) = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("worker answers")
        .unwrap()
    {
        replies.push(serde_json::from_str::<Reply>(&line).expect("protocol line"));
    }
    let kinds: Vec<(u64, &str)> = replies
        .iter()
        .map(|r| match &r.body {
            ReplyBody::Error { error } if error.kind == ErrorKind::BadRequest => {
                (r.id, "bad_request")
            }
            ReplyBody::Ok { result } if matches!(**result, OpResult::Hello(_)) => (r.id, "hello"),
            ReplyBody::Ok { result } if matches!(**result, OpResult::Shutdown) => {
                (r.id, "shutdown")
            }
            _ => (r.id, "other"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (0, "bad_request"),
            (4, "bad_request"),
            (5, "hello"),
            (6, "shutdown")
        ]
    );
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

// ---- fake workers ----

#[tokio::test]
async fn a_hung_request_times_out_kills_the_worker_and_the_next_one_works() {
    let dir = scratch("hang");
    let pool = WorkerPool::new(config(
        fake(&dir, r#"if [ "$n" = 0 ]; then sleep 1000; else ok; fi"#),
        1,
    ));
    pool.connect().await.unwrap();
    let pid = pool.worker_pids()[0];
    let t = Instant::now();
    let err = pool
        .request(compile_op("saxpy"), Some(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(
        err.message,
        "`saxpy` did not finish within 300 ms and was stopped; the worker was restarted"
    );
    assert!(gone_soon(pid).await, "worker {pid} survived its time-out");
    let ok = pool.request(compile_op("saxpy"), None).await;
    assert!(matches!(ok, Ok(OpResult::Compile(_))), "{ok:?}");
    assert_eq!(started(&dir).len(), 2);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_worker_that_exits_mid_request_is_lost_with_its_stderr() {
    let dir = scratch("exit");
    let pool = WorkerPool::new(config(
        fake(
            &dir,
            r#"if [ "$n" = 0 ]; then echo "fake: illegal instruction in saxpy" >&2; exit 7; else ok; fi"#,
        ),
        1,
    ));
    let err = pool.request(compile_op("saxpy"), None).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerLost, "{err:?}");
    assert!(
        err.message.contains("exited with status 7"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("fake: illegal instruction in saxpy"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("`compile` of `saxpy`"),
        "{}",
        err.message
    );
    let ok = pool.request(compile_op("saxpy"), None).await;
    assert!(matches!(ok, Ok(OpResult::Compile(_))), "{ok:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn a_worker_that_prints_garbage_is_lost_and_replaced() {
    let dir = scratch("garbage");
    let pool = WorkerPool::new(config(
        fake(
            &dir,
            r#"if [ "$n" = 0 ]; then echo "debug: x = 3"; sleep 1000; else ok; fi"#,
        ),
        1,
    ));
    pool.connect().await.unwrap();
    let pid = pool.worker_pids()[0];
    let err = pool.request(compile_op("k"), None).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerLost, "{err:?}");
    assert!(err.message.contains("`debug: x = 3`"), "{}", err.message);
    assert!(gone_soon(pid).await, "garbage worker {pid} still runs");
    assert!(matches!(
        pool.request(compile_op("k"), None).await,
        Ok(OpResult::Compile(_))
    ));
    pool.shutdown().await;
}

#[tokio::test]
async fn a_kill_takes_children_that_ignore_sigterm_with_it() {
    let dir = scratch("group");
    let pool = WorkerPool::new(config(
        fake(
            &dir,
            r#"sh -c 'trap "" TERM; echo $$ > "$0/child"; while :; do sleep 1; done' "$D" & sleep 1000"#,
        ),
        1,
    ));
    let err = pool
        .request(compile_op("k"), Some(Duration::from_millis(400)))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{err:?}");
    let child: u32 = std::fs::read_to_string(dir.join("child"))
        .expect("the fake started its child")
        .trim()
        .parse()
        .unwrap();
    assert!(
        gone_soon(child).await,
        "grandchild {child} outlived the worker"
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn requests_queue_when_all_workers_are_busy() {
    let dir = scratch("queue");
    let pool = WorkerPool::new(config(fake(&dir, "sleep 0.3; ok"), 2));
    let t = Instant::now();
    let results = futures::future::join_all((0..5).map(|i| {
        let pool = pool.clone();
        async move { pool.request(compile_op(&format!("k{i}")), None).await }
    }))
    .await;
    for r in &results {
        assert!(matches!(r, Ok(OpResult::Compile(_))), "{r:?}");
    }
    assert_eq!(started(&dir).len(), 2, "size 2 started more workers");
    // Five requests of 0.3 s on two workers take three rounds.
    assert!(
        t.elapsed() >= Duration::from_millis(850),
        "{:?}",
        t.elapsed()
    );
    pool.shutdown().await;
}

#[tokio::test]
async fn a_fault_reply_passes_through_and_the_worker_is_replaced() {
    let dir = scratch("fault");
    let pool = WorkerPool::new(config(
        fake(
            &dir,
            r#"if [ "$n" = 0 ]; then echo '{"id":'$id',"status":"error","error":{"kind":"fault","message":"an illegal memory access was encountered"}}'; else ok; fi"#,
        ),
        1,
    ));
    pool.connect().await.unwrap();
    let first = pool.worker_pids()[0];
    let err = pool.request(compile_op("k"), None).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Fault);
    assert_eq!(err.message, "an illegal memory access was encountered");
    assert!(gone_soon(first).await, "faulted worker {first} still runs");
    assert!(matches!(
        pool.request(compile_op("k"), None).await,
        Ok(OpResult::Compile(_))
    ));
    assert_ne!(pool.worker_pids(), vec![first]);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_verify_report_with_a_fault_retires_the_worker_that_exits_after_it() {
    // As the CUDA worker does: reply with a verify report whose failure is a fault,
    // then exit (status 3). The next request must reach a fresh worker.
    let dir = scratch("fault-in-report");
    let pool = WorkerPool::new(config(
        fake(
            &dir,
            r#"if [ "$n" = 0 ]; then echo '{"id":'$id',"status":"ok","result":{"kind":"verify","passed":false,"cases":1,"trials":1,"seed":1,"failure":{"case":0,"trial":0,"seed":1,"kind":"fault","message":"illegal memory access at launch of `k`"},"elapsed_ms":1.0}}'; exit 3; else ok; fi"#,
        ),
        1,
    ));
    pool.connect().await.unwrap();
    let first = pool.worker_pids()[0];
    let r = pool.request(compile_op("k"), None).await;
    let Ok(OpResult::Verify(report)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        report.failure.unwrap().kind,
        kernel_lsp::worker::protocol::FailureKind::Fault
    );
    assert!(gone_soon(first).await, "faulted worker {first} still runs");
    let r = pool.request(compile_op("k"), None).await;
    assert!(matches!(r, Ok(OpResult::Compile(_))), "{r:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn progress_lines_reach_the_caller() {
    let dir = scratch("progress");
    let pool = WorkerPool::new(config(
        fake(
            &dir,
            r#"echo '{"id":'$id',"status":"progress","stage":"compiling"}'; echo '{"id":'$id',"status":"progress","stage":"verifying case 1/2"}'; ok"#,
        ),
        1,
    ));
    let mut stages = Vec::new();
    let r = pool
        .request_with_progress(compile_op("k"), None, &mut |s| stages.push(s.to_string()))
        .await;
    assert!(matches!(r, Ok(OpResult::Compile(_))), "{r:?}");
    assert_eq!(stages, ["compiling", "verifying case 1/2"]);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_request_kills_its_worker_and_the_pool_goes_on() {
    let dir = scratch("cancel");
    let pool = WorkerPool::new(config(
        fake(&dir, r#"if [ "$n" = 0 ]; then sleep 1000; else ok; fi"#),
        1,
    ));
    pool.connect().await.unwrap();
    let pid = pool.worker_pids()[0];
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        pool.request(compile_op("k"), None),
    )
    .await;
    assert!(cancelled.is_err(), "the fake should still be busy");
    assert!(
        gone_soon(pid).await,
        "worker {pid} of a cancelled request still runs"
    );
    let ok = pool.request(compile_op("k"), None).await;
    assert!(matches!(ok, Ok(OpResult::Compile(_))), "{ok:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn a_worker_command_that_cannot_start_is_reported() {
    let pool = WorkerPool::new(config(
        vec!["/nonexistent/kernel-lsp".into(), "worker".into()],
        1,
    ));
    let err = pool.connect().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerLost);
    assert!(
        err.message
            .contains("cannot start the worker `/nonexistent/kernel-lsp worker`"),
        "{}",
        err.message
    );
}

fn spec(command: Vec<String>) -> WorkerSpec {
    WorkerSpec {
        command,
        env: Vec::new(),
        gpu: None,
    }
}

#[tokio::test]
async fn a_worker_that_cannot_start_backs_off_while_the_others_work() {
    let dir = scratch("backoff");
    let mut c = config(Vec::new(), 1);
    c.workers = vec![
        spec(vec!["/nonexistent/kernel-lsp".into(), "worker".into()]),
        spec(fake(&dir, "ok")),
    ];
    let pool = WorkerPool::new(c);
    for _ in 0..3 {
        let served = pool
            .request_on(None, compile_op("k"), None, &mut |_| {})
            .await;
        assert!(
            matches!(served.result, Ok(OpResult::Compile(_))),
            "{served:?}"
        );
        assert_eq!(served.worker, Some(1));
    }
    let status = pool.status();
    assert_eq!(status[0].state, WorkerState::Down, "{status:?}");
    assert!(status[0]
        .error
        .as_deref()
        .unwrap_or("")
        .contains("cannot start the worker"));
    assert_eq!(status[1].state, WorkerState::Idle);
    // Asked for by name, the down worker answers with its own reason at once.
    let t0 = Instant::now();
    let served = pool
        .request_on(Some(0), compile_op("k"), None, &mut |_| {})
        .await;
    let err = served.result.unwrap_err();
    assert!(
        err.message
            .starts_with("worker 1 cannot be started: cannot start the worker"),
        "{}",
        err.message
    );
    assert!(t0.elapsed() < Duration::from_millis(500));
    pool.shutdown().await;
}

#[tokio::test]
async fn a_pool_with_no_live_worker_gives_one_error_naming_each() {
    let mut c = config(Vec::new(), 1);
    c.workers = vec![
        spec(vec!["/nonexistent/a".into()]),
        spec(vec!["/nonexistent/b".into()]),
    ];
    let pool = WorkerPool::new(c);
    let err = pool.request(compile_op("k"), None).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::WorkerLost);
    assert!(
        err.message
            .starts_with("no worker of the pool is alive (2 workers"),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("worker 1 (`/nonexistent/a`): cannot start"),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("worker 2 (`/nonexistent/b`): cannot start"),
        "{}",
        err.message
    );
    // Within the backoff the answer comes at once, not after another try.
    let t0 = Instant::now();
    assert!(pool.request(compile_op("k"), None).await.is_err());
    assert!(t0.elapsed() < Duration::from_millis(200));
}

#[tokio::test]
async fn connect_all_starts_each_worker_with_its_own_environment() {
    // The fake names its device after CUDA_VISIBLE_DEVICES.
    let script = r#"while IFS= read -r line; do id=$(printf '%s' "$line" | sed -n 's/^{"id":\([0-9]*\).*/\1/p'); echo '{"id":'$id',"status":"ok","result":{"kind":"hello","protocol":1,"worker_version":"fake","device":{"name":"gpu'$CUDA_VISIBLE_DEVICES'","arch":"sm_90","sms":1,"warp_size":32,"max_threads_per_block":1024,"max_block":[1024,1024,64],"max_grid":[1,1,1],"smem_per_block":1,"smem_per_block_optin":1,"smem_per_sm":1,"regs_per_block":1,"l2_bytes":1,"mem_bytes":1,"ceilings":null},"cuda":{"available":false,"message":"fake"},"triton":{"available":false,"message":"fake"}}}'; done"#;
    let mut c = config(Vec::new(), 1);
    c.workers = ["3", "5"]
        .iter()
        .map(|g| WorkerSpec {
            command: vec!["sh".into(), "-c".into(), script.into()],
            env: vec![("CUDA_VISIBLE_DEVICES".into(), g.to_string())],
            gpu: Some(g.to_string()),
        })
        .collect();
    let pool = WorkerPool::new(c);
    let hellos = pool.connect_all().await;
    let names: Vec<String> = hellos
        .iter()
        .map(|h| h.as_ref().unwrap().device.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(names, vec!["gpu3", "gpu5"]);
    assert_eq!(pool.describe_worker(1), "worker 2 (gpu5, GPU 5)");
    let status = pool.status();
    assert_eq!(status[1].device.as_deref(), Some("gpu5"));
    assert_eq!(status[1].state, WorkerState::Idle);
    pool.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_every_worker() {
    let dir = scratch("shutdown");
    let pool = WorkerPool::new(config(fake(&dir, "ok"), 1));
    pool.connect().await.unwrap();
    let pid = pool.worker_pids()[0];
    pool.shutdown().await;
    assert!(gone_soon(pid).await);
    let err = pool.request(compile_op("k"), None).await.unwrap_err();
    assert!(err.message.contains("shut down"), "{}", err.message);
}

// ---- `kernel-lsp bench` ----

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = StdCommand::new(BIN)
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn bench_without_a_gpu_fails_with_the_workers_reason() {
    let pool = WorkerPool::new(config(vec![BIN.into(), "worker".into()], 1));
    let hello = pool.connect().await.unwrap();
    pool.shutdown().await;
    if hello.cuda.available {
        {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIP bench_without_a_gpu_fails_with_the_workers_reason: this machine has a CUDA device");
        }
        return;
    }
    let saxpy = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/saxpy.cu");
    let (code, out, err) = bench(&[saxpy]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("the worker cannot run CUDA kernels") && err.contains(&hello.cuda.message),
        "{err}"
    );
}

#[tokio::test]
async fn bench_refuses_a_file_with_spec_errors() {
    let dir = scratch("bench-bad");
    let file = dir.join("bad.cu");
    std::fs::write(
        &file,
        "// @bench n = 1 << 20\n// @bench x: in f33[n]\n// @bench grid = cdiv(n, 128); block = 128\n__global__ void k(int n, const float* x) {}\n",
    )
    .unwrap();
    // A worker that would fail loudly if it were started.
    let (code, out, err) = bench(&[file.to_str().unwrap(), "--worker", "/nonexistent/worker"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("bad.cu:2:17: error: `f33` is not an element type"),
        "{err}"
    );
    assert!(err.contains("nothing was run"), "{err}");
    assert!(!err.contains("cannot start the worker"), "{err}");
}
