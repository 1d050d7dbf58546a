#!/usr/bin/env python3
"""PyTorch's time for the operation of each bundled example (GPU machine), measured the
way kernel-lsp's worker measures a kernel: case 0's sizes from the example's @bench
lines, CUDA events around one launch, a 256 MB buffer written before every timed launch
to flush L2, warm-up first, the median of the rest. Prints one line per kernel

    TORCH <file> <kernel> ms=<median> op=<what was timed>

for tests/gpu/bench_table.py. Usage: python3 tests/gpu/torch_baselines.py [--reps 100]
"""

import argparse
import os
import re
import statistics
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sizes(path, kernel):
    """Case 0's value of every `NAME = V, ...` statement in the kernel's @bench block."""
    lines = open(os.path.join(ROOT, "examples", path)).read().split("\n")
    end = next(i for i, l in enumerate(lines) if re.search(rf"\b{kernel}\s*\(", l))
    start = end
    while start > 0 and (lines[start - 1].lstrip().startswith(("//", "#", "@")) or not lines[start - 1].strip()):
        start -= 1
    env = {"cdiv": lambda a, b: -(-a // b), "next_pow2": lambda a: 1 << (a - 1).bit_length()}
    for line in lines[start:end]:
        m = re.search(r"@bench(.*)", line)
        if not m:
            continue
        for stmt in m.group(1).split(";"):
            m2 = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*(.+)", stmt)
            if not m2 or m2.group(1) in ("grid", "block", "smem", "atol", "rtol"):
                continue
            first = m2.group(2).split(",")[0].strip()
            try:
                env[m2.group(1)] = eval(first.replace("/", "//"), {}, env)
            except Exception:
                pass
    return env


def time_op(fn, reps):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.fill_(1)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def cases():
    """(file, kernel, what, fn) for every bundled example kernel the benchmark optimizes."""
    dev = "cuda"
    out = []

    s = sizes("saxpy.cu", "saxpy")
    x = torch.randn(s["n"], device=dev)
    y = torch.randn(s["n"], device=dev)
    out.append(("saxpy.cu", "saxpy", "y.add_(x, alpha=a)", lambda: y.add_(x, alpha=2.5)))

    s = sizes("reduce_sum.cu", "reduce_tree")
    h = torch.rand(s["n"], device=dev, dtype=torch.float16)
    out.append(("reduce_sum.cu", "reduce_tree", "torch.sum(f16, dtype=f32)",
                lambda: torch.sum(h, dtype=torch.float32)))

    s = sizes("matmul_naive.cu", "matmul")
    torch.backends.cuda.matmul.allow_tf32 = False  # the example is f32 with rtol 1e-3
    a = torch.randn(s["m"], s["k"], device=dev)
    b = torch.randn(s["k"], s["n"], device=dev)
    out.append(("matmul_naive.cu", "matmul", "a @ b (f32, no TF32)", lambda: a @ b))

    s = sizes("vector_add.py", "add_kernel")
    va, vb = torch.randn(s["n"], device=dev), torch.randn(s["n"], device=dev)
    vo = torch.empty_like(va)
    out.append(("vector_add.py", "add_kernel", "torch.add(out=)", lambda: torch.add(va, vb, out=vo)))

    s = sizes("softmax.py", "softmax_kernel")
    sx = torch.randn(s["rows"], s["cols"], device=dev)
    out.append(("softmax.py", "softmax_kernel", "torch.softmax(dim=1)", lambda: torch.softmax(sx, dim=1)))

    s = sizes("softmax_rows.cu", "softmax_rows")
    rx = torch.randn(s["rows"], s["cols"], device=dev)
    out.append(("softmax_rows.cu", "softmax_rows", "torch.softmax(dim=1)", lambda: torch.softmax(rx, dim=1)))

    s = sizes("histogram.cu", "histogram")
    data = torch.randint(0, 256, (s["n"],), device=dev, dtype=torch.uint8)
    try:
        torch.bincount(data, minlength=256)
        hist_fn, hist_op = (lambda: torch.bincount(data, minlength=256)), "torch.bincount(u8, minlength=256)"
    except RuntimeError:
        data32 = data.to(torch.int32)
        hist_fn, hist_op = (lambda: torch.bincount(data32, minlength=256)), "torch.bincount(i32, minlength=256)"
    out.append(("histogram.cu", "histogram", hist_op, hist_fn))

    s = sizes("transpose.cu", "transpose")
    t = torch.randn(s["rows"], s["cols"], device=dev)
    out.append(("transpose.cu", "transpose", "x.t().contiguous()", lambda: t.t().contiguous()))

    s = sizes("matmul.py", "matmul_kernel")
    ha = torch.randn(s["M"], s["K"], device=dev, dtype=torch.float16)
    hb = torch.randn(s["K"], s["N"], device=dev, dtype=torch.float16)
    out.append(("matmul.py", "matmul_kernel", "a @ b (f16 in, f16 out, tensor cores)", lambda: ha @ hb))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("TORCH unavailable: no CUDA device for torch")
        return 1
    for file, kernel, what, fn in cases():
        try:
            ms = time_op(fn, args.reps)
            print(f"TORCH {file} {kernel} ms={ms:.5f} op={what}", flush=True)
        except Exception as e:  # one failing baseline must not hide the others
            print(f"TORCH {file} {kernel} ms=nan op={what} error={e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
