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
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("KERNEL_LSP_BIN", "kernel-lsp")
WORKERS = os.environ.get("KERNEL_LSP_MULTIGPU_WORKERS", "2")

RUNS = [
    # (name, example, kernel, extra args)
    ("step: matmul.py triton_configs", "matmul.py", "matmul_kernel",
     ["--steps", "1", "--only", "triton_configs"]),
    ("6 steps: matmul.py", "matmul.py", "matmul_kernel", ["--steps", "6"]),
    ("6 steps: matmul_naive.cu", "matmul_naive.cu", "matmul", ["--steps", "6"]),
]


def run(example, kernel, extra, workers):
    work = tempfile.mkdtemp(prefix="kernel-lsp-multigpu-")
    shutil.copy(os.path.join(ROOT, "examples", example), work)
    env = dict(os.environ, KERNEL_LSP_DATA_DIR=os.path.join(work, "data"))
    cmd = [BIN, "optimize", example, "--kernel", kernel, "--fresh-policy", "--json",
           "--seed", "42", "--workers", workers] + extra
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    shutil.rmtree(work, ignore_errors=True)
    if p.returncode != 0:
        return wall, None, p.stderr[-3000:]
    r = json.loads(p.stdout)
    accepted = [f"{s['strategy_id']}:{s.get('accepted')}" for s in r["steps"]
                if s["outcome"] == "accepted"]
    cands = sum(len(s["candidates"]) for s in r["steps"])
    on = sorted({str(c["timed_on"]["worker"]) for s in r["steps"] for c in s["candidates"]
                 if c.get("timed_on")})
    return wall, {"accepted": accepted, "candidates": cands, "timed_on": on}, p.stderr


def main():
    rows, bad = [], False
    for name, example, kernel, extra in RUNS:
        res = {}
        for workers in ("1", WORKERS):
            print(f"== {name}, --workers {workers}", flush=True)
            wall, summary, err = run(example, kernel, extra, workers)
            if summary is None:
                print(f"FAILED ({wall:.1f} s):\n{err}")
                bad = True
                res[workers] = (wall, None)
                continue
            print(f"wall {wall:.1f} s; {summary['candidates']} candidates; "
                  f"timed on workers {','.join(summary['timed_on']) or '1'}; "
                  f"accepted: {' '.join(summary['accepted']) or 'nothing'}", flush=True)
            res[workers] = (wall, summary)
        (w1, s1), (w2, s2) = res["1"], res[WORKERS]
        same = s1 is not None and s2 is not None and s1["accepted"] == s2["accepted"]
        bad |= not same
        rows.append((name, w1, w2, w1 / w2 if w2 else 0.0, same,
                     " ".join(s2["accepted"]) if s2 else "-"))
    print(f"\n== multi-GPU table (1 worker vs {WORKERS} workers, one per GPU)")
    print(f"{'run':34} {'1 GPU s':>8} {WORKERS + ' GPUs s':>8} {'speedup':>8}  same accepted  accepted")
    for name, w1, w2, sp, same, acc in rows:
        print(f"{name:34} {w1:8.1f} {w2:8.1f} {sp:7.2f}x  {'yes' if same else 'NO':13}  {acc}")
    print(f"MULTIGPU_GOAL=1.8x on {WORKERS} GPUs with the same accepted versions")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
