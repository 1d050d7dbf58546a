"""Concurrent Triton JIT probe (issue #15): time the JIT compiles of matmul.py's kernel for 8
configurations in one process (an empty cache of its own), alone, then two processes at
once, then two pinned to different cores. Run from the repository root on a GPU machine:
`python3 tests/gpu/compile_probe.py`."""
import os, sys, time, subprocess, tempfile
if len(sys.argv) > 1 and sys.argv[1] == "child":
    sys.path.insert(0, os.path.join(os.getcwd(), "examples"))
    import torch, matmul
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    c = torch.empty(256, 256, device="cuda", dtype=torch.float32)
    matmul.matmul_kernel[(1, 1)](a, b, c, 256, 256, 256, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    for bm, bn, bk in [(128, 256, 64), (256, 128, 64), (128, 128, 64), (64, 128, 32),
                       (128, 64, 32), (64, 64, 64), (128, 256, 32), (256, 64, 32)]:
        for st in (3,):
            matmul.matmul_kernel[(2, 2)](a, b, c, 256, 256, 256, BLOCK_M=bm, BLOCK_N=bn,
                                         BLOCK_K=bk, num_warps=8, num_stages=st)
    torch.cuda.synchronize()
    print(f"{time.monotonic() - t0:.2f}", flush=True)
    sys.exit(0)

def run(n, pins=None):
    procs = []
    for i in range(n):
        env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp())
        cmd = [sys.executable, __file__, "child"]
        if pins:
            cmd = ["taskset", "-c", pins[i]] + cmd
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    return [p.communicate()[0].strip() for p in procs]

print("cpus:", os.cpu_count(), open("/proc/cpuinfo").read().count("processor"))
print(subprocess.run("lscpu | grep -E 'Model name|Thread|Core|Socket|MHz'", shell=True, capture_output=True, text=True).stdout)
for r in range(2):
    print("alone:", run(1))
    print("two at once:", run(2))
    print("two pinned 0 / 8:", run(2, ["0", "8"]))
    print("two pinned 0 / 1:", run(2, ["0", "1"]))
