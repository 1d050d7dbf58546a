#!/usr/bin/env python3
"""Do two Triton JIT compiles at once slow each other on this host, and does pinning
each process to its own physical cores help? (issue #15: on some GPU pairs a 2-worker
step's compiles were 21-26% slower each than one worker's.)

Each probe process (one per GPU, as a pool worker's helper is) compiles the same list of
`examples/matmul.py` configurations into a Triton cache of its own, timing each first
launch. Modes: one process alone; two at once unpinned; two at once each pinned to its
own half of the physical cores (with their SMT siblings); two at once on the two SMT
siblings of one core (when the host has SMT); one alone pinned to one CPU. Prints the
host's topology, then each mode's mean compile time and its ratio to "alone".

COMPILE_PROBE=split asks what per-case work units cost: each configuration compiled for
a shape divisible by 16 and for one that is not (a 2-case spec's two specializations),
by one process one after the other, or by two processes at once, one shape each (as two
workers verifying one candidate's two cases), sharing one Triton cache or not. Prints
each mode's compile seconds in all and its wall time.

  python3 tests/gpu/compile_concurrency.py      # on a machine with 2 GPUs
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (64, 256, 32, 4, 4),
    (128, 256, 32, 8, 4), (256, 128, 32, 8, 4), (128, 128, 128, 8, 2), (64, 128, 64, 4, 3),
]
SET = os.environ.get("COMPILE_PROBE", "light")
SHAPES = {"div": (512, 512, 512), "odd": (100, 72, 40)}

PROBE = r"""
import importlib.util, json, os, sys, time
cpus = os.environ.get("PROBE_CPUS")
if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
import torch, triton
spec = importlib.util.spec_from_file_location("m", os.environ["PROBE_KERNEL"])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
shapes = json.loads(os.environ["PROBE_SHAPES"])
bufs = []
for M, N, K in shapes:
    bufs.append((M, N, K, torch.randn(M, K, device="cuda", dtype=torch.float16),
                 torch.randn(K, N, device="cuda", dtype=torch.float16),
                 torch.empty(M, N, device="cuda", dtype=torch.float32)))
# Warm, as a worker's helper is: one compile of another configuration (Triton's compile
# stack loaded), not timed.
w = torch.empty(64, 64, device="cuda", dtype=torch.float16)
m.matmul_kernel[(2, 2)](w, w, torch.empty(64, 64, device="cuda"), 64, 64, 64,
                        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()  # start together
out = []
for bm, bn, bk, w, s in json.loads(os.environ["PROBE_CONFIGS"]):
    for M, N, K, a, b, c in bufs:
        t = time.perf_counter()
        try:
            m.matmul_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
                a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w,
                num_stages=s)
            torch.cuda.synchronize()
        except triton.runtime.errors.OutOfResources:
            pass  # compiled; too large to launch
        out.append(time.perf_counter() - t)
print(json.dumps(out), flush=True)
"""


def topology():
    """{physical core id: [cpus]} of the CPUs this process may use."""
    allowed = os.sched_getaffinity(0)
    out = subprocess.run(["lscpu", "-p=cpu,core,socket"], capture_output=True,
                         text=True).stdout
    cores = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        cpu, core, sock = (int(x) for x in line.split(","))
        if cpu in allowed:
            cores.setdefault((sock, core), []).append(cpu)
    return cores


def run(plan, extra_env=None):
    """Start one probe per entry of `plan` ((gpu, cpus) or (gpu, cpus, shapes, cache)),
    release them at once; their times and the wall time from the release."""
    procs = []
    shared = tempfile.mkdtemp(prefix="compile-probe-shared-")
    for entry in plan:
        gpu, cpus = entry[0], entry[1]
        shapes = entry[2] if len(entry) > 2 else ["div"]
        cache = shared if len(entry) > 3 and entry[3] == "shared" else \
            tempfile.mkdtemp(prefix="compile-probe-")
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), TRITON_CACHE_DIR=cache,
                   PROBE_KERNEL=os.path.join(ROOT, "examples", "matmul.py"),
                   PROBE_CONFIGS=json.dumps(CONFIGS),
                   PROBE_SHAPES=json.dumps([SHAPES[x] for x in shapes]),
                   PROBE_CPUS=",".join(map(str, cpus)) if cpus else "")
        env.update(extra_env or {})
        procs.append(subprocess.Popen([sys.executable, "-c", PROBE], env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    times = [json.loads(p.stdout.readline()) for p in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.wait()
    return times, wall


def main():
    cores = topology()
    keys = sorted(cores)
    smt = max(len(v) for v in cores.values())
    print(f"== {len(keys)} physical cores, {sum(len(v) for v in cores.values())} CPUs "
          f"(threads per core: {smt})", flush=True)
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except OSError:
        thp = "?"
    print(f"== transparent huge pages: {thp}; probe set: {SET}", flush=True)
    half = len(keys) // 2
    first = [c for k in keys[:half] for c in cores[k]]
    second = [c for k in keys[half:] for c in cores[k]]
    modes = [("alone", [(0, None)]),
             ("two at once", [(0, None), (1, None)]),
             ("two, own physical cores", [(0, first), (1, second)]),
             ("alone, one CPU", [(0, [cores[keys[0]][0]])])]
    if smt > 1:
        sib = cores[keys[0]]
        modes.insert(3, ("two on SMT siblings", [(0, [sib[0]]), (1, [sib[1]])]))
    # Untimed: file caches, Triton's C helpers (one configuration).
    run([(0, None)], {"PROBE_CONFIGS": json.dumps(CONFIGS[:1])})
    if SET == "split":
        print(f"{'mode':52} {'compile s in all':>16} {'wall s':>7}")
        for name, plan in [
                ("one process, both shapes in turn", [(0, None, ["div", "odd"])]),
                ("two processes at once, one shape each, one cache",
                 [(0, None, ["div"], "shared"), (1, None, ["odd"], "shared")]),
                ("two processes at once, one shape each, own caches",
                 [(0, None, ["div"]), (1, None, ["odd"])]),
                ("one process, both shapes in turn (again)", [(0, None, ["div", "odd"])])]:
            times, wall = run(plan)
            print(f"{name:52} {sum(map(sum, times)):16.2f} {wall:7.2f}", flush=True)
        return
    base = None
    print(f"{'mode':28} {'mean compile s':>15} {'vs alone':>9}")
    for name, plan in modes:
        times, wall = run(plan)
        flat = [t for ts in times for t in ts]
        mean = sum(flat) / len(flat)
        base = base or mean
        print(f"{name:28} {mean:15.2f} {mean / base:8.2f}x  (wall {wall:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
