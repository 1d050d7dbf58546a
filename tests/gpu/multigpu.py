#!/usr/bin/env python3
"""The multi-GPU benchmark (issue #15): the same optimize runs on a pool of 1 worker and
of 2 workers (one per GPU, pinned with CUDA_VISIBLE_DEVICES by `--workers N`), each in a
fresh copy of the example (no history, fresh policy, the same seed), printing the wall
time and the accepted versions of each, and a short table last.

  python3 tests/gpu/multigpu.py            # KERNEL_LSP_BIN: the prebuilt release binary

Runs: one step with >= 8 candidates (`matmul.py`, `triton_configs`: 12 configurations),
and whole 6-step optimizes of `matmul.py` and `matmul_naive.cu`. Goal: >= 1.8x faster
on 2 GPUs with the same accepted versions. Exits 1 when a run fails or the accepted
versions differ between 1 and 2 workers (a slower 2-GPU run is reported, not failed:
timing goals are read from the table)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("KERNEL_LSP_BIN", "kernel-lsp")
WORKERS = os.environ.get("KERNEL_LSP_MULTIGPU_WORKERS", "2")
# KERNEL_LSP_MULTIGPU_RUNS=0,1 picks runs by index (each device call has a time limit).
PICK = os.environ.get("KERNEL_LSP_MULTIGPU_RUNS", "")
# KERNEL_LSP_MULTIGPU_LOG=DIR writes each run's progress lines (stderr) there, each with
# its time since the command's start: where the wall time goes.
LOG_DIR = os.environ.get("KERNEL_LSP_MULTIGPU_LOG", "")
# KERNEL_LSP_MULTIGPU_COLD=1: every run starts with an empty Triton cache (and pays for
# Triton's C helpers and the starting kernel's compiles, which an author's cache holds).
COLD = os.environ.get("KERNEL_LSP_MULTIGPU_COLD", "") not in ("", "0")
SEEDS = {}
STEP_START = re.compile(r": (step 1:|verifying .* \(\d+/\d+\))")

RUNS = [
    # (name, example, kernel, extra args)
    ("step: matmul.py triton_configs", "matmul.py", "matmul_kernel",
     ["--steps", "1", "--only", "triton_configs"]),
    ("6 steps: matmul.py", "matmul.py", "matmul_kernel", ["--steps", "6"]),
    ("6 steps: matmul_naive.cu", "matmul_naive.cu", "matmul", ["--steps", "6"]),
]


def author_cache(example, kernel):
    """A Triton cache as its author has it: the example's kernel as written, run once
    (`kernel-lsp bench`: Triton's own C helpers built, the kernel compiled for each case).
    Each run starts from a copy, so no run finds a candidate compiled by another."""
    if COLD:
        return None
    if example not in SEEDS:
        seed = tempfile.mkdtemp(prefix="kernel-lsp-multigpu-seed-")
        work = os.path.join(seed, "work")
        os.makedirs(work)
        shutil.copy(os.path.join(ROOT, "examples", example), work)
        cache = os.path.join(seed, "triton-cache")
        env = dict(os.environ, KERNEL_LSP_DATA_DIR=os.path.join(work, "data"),
                   TRITON_CACHE_DIR=cache)
        subprocess.run([BIN, "bench", example, "--kernel", kernel], cwd=work, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
                       check=False)
        SEEDS[example] = cache
    return SEEDS[example]


def run(example, kernel, extra, workers, log_name=None):
    work = tempfile.mkdtemp(prefix="kernel-lsp-multigpu-")
    shutil.copy(os.path.join(ROOT, "examples", example), work)
    # A Triton cache of its own per run (a shared one would let the later run skip the
    # candidates' JIT): a copy of the author's (KERNEL_LSP_MULTIGPU_COLD=1: empty).
    cache = os.path.join(work, "triton-cache")
    seed = author_cache(example, kernel)
    if seed and os.path.isdir(seed):
        shutil.copytree(seed, cache)
    env = dict(os.environ, KERNEL_LSP_DATA_DIR=os.path.join(work, "data"),
               TRITON_CACHE_DIR=cache)
    cmd = [BIN, "optimize", example, "--kernel", kernel, "--fresh-policy", "--json",
           "--seed", "42", "--workers", workers] + extra
    t0 = time.monotonic()
    # stderr is read as it comes, to time the steps apart from the command's start (the
    # CLI, the workers' start and the current version's check come before step 1).
    p = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    err_lines, first_step, stamped = [], [], []

    def read_err():
        for line in p.stderr:
            now = time.monotonic()
            # The first step begins with its first line that is not the current
            # version's check (progress lines are throttled: "step 1:" may be dropped).
            if not first_step and STEP_START.search(line):
                first_step.append(now)
            err_lines.append(line)
            stamped.append(f"{now - t0:7.2f} {line}")

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    try:
        out, _ = p.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    reader.join(timeout=10)
    end = time.monotonic()
    wall = end - t0
    steps_wall = end - first_step[0] if first_step else float('nan')
    stderr = "".join(err_lines)
    if LOG_DIR and log_name:
        os.makedirs(LOG_DIR, exist_ok=True)
        with open(os.path.join(LOG_DIR, log_name), "w") as f:
            f.write("".join(stamped) + f"{wall:7.2f} exit {p.returncode}\n")
    shutil.rmtree(work, ignore_errors=True)
    if p.returncode != 0:
        return wall, steps_wall, None, stderr[-3000:]
    r = json.loads(out)
    accepted = [f"{s['strategy_id']}:{s.get('accepted')}" for s in r["steps"]
                if s["outcome"] == "accepted"]
    cands = sum(len(s["candidates"]) for s in r["steps"])
    on = sorted({str(c["timed_on"]["worker"]) for s in r["steps"] for c in s["candidates"]
                 if c.get("timed_on")})
    return wall, steps_wall, {"accepted": accepted, "candidates": cands, "timed_on": on}, stderr


def warm_up():
    """Loads torch, Triton and every GPU once, untimed: the first run would otherwise pay
    for a cold file cache and driver alone."""
    subprocess.run([sys.executable, "-c",
                    "import torch, triton\n"
                    "for i in range(torch.cuda.device_count()): torch.zeros(1, device=f'cuda:{i}')"],
                   check=False, timeout=300)


def main():
    warm_up()
    rows, bad = [], False
    picked = [RUNS[int(i)] for i in PICK.split(",")] if PICK else RUNS
    for name, example, kernel, extra in picked:
        res = {}
        for workers in ("1", WORKERS):
            print(f"== {name}, --workers {workers}", flush=True)
            log_name = f"run{RUNS.index((name, example, kernel, extra))}-w{workers}.log"
            wall, steps, summary, err = run(example, kernel, extra, workers, log_name)
            if summary is None:
                print(f"FAILED ({wall:.1f} s):\n{err}")
                bad = True
                res[workers] = (wall, steps, None)
                continue
            print(f"wall {wall:.1f} s (steps {steps:.1f} s); {summary['candidates']} candidates; "
                  f"timed on workers {','.join(summary['timed_on']) or '1'}; "
                  f"accepted: {' '.join(summary['accepted']) or 'nothing'}", flush=True)
            res[workers] = (wall, steps, summary)
        (w1, t1, s1), (w2, t2, s2) = res["1"], res[WORKERS]
        same = s1 is not None and s2 is not None and s1["accepted"] == s2["accepted"]
        bad |= not same
        rows.append((name, w1, w2, w1 / w2 if w2 else 0.0, t1, t2, t1 / t2 if t2 else 0.0, same,
                     " ".join(s2["accepted"]) if s2 else "-"))
    print(f"\n== multi-GPU table (1 worker vs {WORKERS} workers, one per GPU; Triton cache: "
          f"{'empty' if COLD else 'the author kernel compiled'} at each run's start)")
    print("(command: the whole `kernel-lsp optimize`; steps: from step 1 to the end, after"
          " the workers' start and the current version's check)")
    print(f"{'run':34} {'1 GPU s':>8} {WORKERS + ' GPUs s':>8} {'speedup':>8} "
          f"{'steps 1':>8} {'steps ' + WORKERS:>8} {'speedup':>8}  same accepted  accepted")
    for name, w1, w2, sp, t1, t2, tsp, same, acc in rows:
        print(f"{name:34} {w1:8.1f} {w2:8.1f} {sp:7.2f}x {t1:8.1f} {t2:8.1f} {tsp:7.2f}x  "
              f"{'yes' if same else 'NO':13}  {acc}")
    print(f"MULTIGPU_GOAL=1.8x on {WORKERS} GPUs with the same accepted versions")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
