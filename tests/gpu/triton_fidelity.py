#!/usr/bin/env python3
"""Timing fidelity of the Triton helper against triton.testing.do_bench (GPU machine).

Times the bundled example examples/vector_add.py (`add_kernel`, BLOCK=1024, case 0:
n = 1 << 24) twice: with the Triton helper's own method (server/src/worker/triton/helper.py,
imported directly: interleaved CUDA events, 256 MB L2 flush before each timed launch) and
with `triton.testing.do_bench(..., return_mode="median")` (its own L2 flush). Prints

    FIDELITY vector_add helper_ms=... do_bench_ms=... diff_pct=...

and exits 1 when the two medians differ by more than --max-diff-pct (default 3).
Rounds alternate helper / do_bench so clock or thermal drift hits both alike; each side
reports the median of its rounds.

Usage: python3 tests/gpu/triton_fidelity.py [--rounds 5] [--max-diff-pct 3]
Needs a CUDA GPU with torch and triton; not for TRITON_INTERPRET=1.
"""

import argparse
import importlib.util
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(ROOT, "server", "src", "worker", "triton", "helper.py")
EXAMPLE = os.path.join(ROOT, "examples", "vector_add.py")

N = 1 << 24
BLOCK = 1024
NUM_WARPS = 4


def load_helper():
    spec = importlib.util.spec_from_file_location("kernel_lsp_triton_helper", HELPER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def vector_add_version(source):
    """The Version the server would send for examples/vector_add.py with BLOCK=1024
    (the spec there: x_ptr, y_ptr in f32[n], out_ptr out f32[n], grid cdiv(n, BLOCK))."""

    def buf(name, role):
        return {
            "kind": "buffer",
            "name": name,
            "role": role,
            "dtype": "f32",
            "shape": [N],
            "elems": N,
            "bytes": 4 * N,
            "dist": {"kind": "uniform", "lo": -1.0, "hi": 1.0},
        }

    case = {
        "sizes": [["n", N]],
        "args": [
            buf("x_ptr", "in"),
            buf("y_ptr", "in"),
            buf("out_ptr", "out"),
            {"kind": "scalar", "name": "n", "value": N, "ty": "i64"},
            {"kind": "constexpr", "name": "BLOCK", "value": BLOCK},
        ],
        "template_args": [],
        "launch": {"kind": "triton", "grid": [(N + BLOCK - 1) // BLOCK], "num_warps": NUM_WARPS, "num_stages": None},
        "bytes": 3.0 * 4 * N,
        "flops": None,
    }
    plan = {
        "kernel": "add_kernel",
        "lang": "triton",
        "cases": [case],
        "tunables": [],
        "defines": [],
        "atol": None,
        "rtol": None,
        "reference": None,
        "trials": 1,
    }
    return {"label": "BLOCK=1024", "lang": "triton", "source": source, "plan": plan}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-diff-pct", type=float, default=3.0)
    args = ap.parse_args()

    helper = load_helper()
    hello = helper.init()
    if hello["missing"]:
        print("SKIP triton_fidelity: cannot import %s: %s" % (hello["missing"], hello["error"]))
        return 0
    if hello["interpreter"] or not hello["cuda"]:
        print("SKIP triton_fidelity: needs a CUDA GPU without TRITON_INTERPRET (cuda=%s interpreter=%s)"
              % (hello["cuda"], hello["interpreter"]))
        return 0
    import torch
    import triton

    with open(EXAMPLE, encoding="utf-8") as f:
        source = f.read()
    version = vector_add_version(source)

    # The same kernel object the helper uses, for do_bench on equal inputs.
    _, mod = helper.load_module(version)
    kernel = helper.find_kernel(version, mod)
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.rand(N, generator=gen) * 2 - 1).cuda()
    y = (torch.rand(N, generator=gen) * 2 - 1).cuda()
    out = torch.empty_like(x)
    grid = ((N + BLOCK - 1) // BLOCK,)

    def run():
        kernel[grid](x, y, out, N, BLOCK=BLOCK, num_warps=NUM_WARPS)

    run()
    torch.cuda.synchronize()
    assert torch.allclose(out, x + y), "add_kernel gave wrong results"

    settings = {"warmup_ms": 25.0, "rep_ms": 100.0, "min_reps": 10, "flush_l2": True}
    helper_ms, bench_ms = [], []
    for r in range(args.rounds):
        rep = helper.time_versions([version], settings)
        t = rep["timings"][0]
        helper_ms.append(t["median_ms"])
        bench_ms.append(triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median"))
        print("round %d: helper %.4f ms (reps %d, p10 %.4f, p90 %.4f, %.0f GB/s), do_bench %.4f ms"
              % (r, t["median_ms"], t["reps"], t["p10_ms"], t["p90_ms"], t["gbps"], bench_ms[-1]))
    h = statistics.median(helper_ms)
    b = statistics.median(bench_ms)
    diff = (h - b) / b * 100.0
    print("device %s, torch %s, triton %s" % (hello["device_name"], hello["torch"], hello["triton"]))
    print("FIDELITY vector_add helper_ms=%.4f do_bench_ms=%.4f diff_pct=%.2f" % (h, b, diff))
    return 0 if abs(diff) <= args.max_diff_pct else 1


if __name__ == "__main__":
    sys.exit(main())
