#!/usr/bin/env python3
"""The no-LLM benchmark's table (tests/gpu/run.sh): per bundled example kernel, the first
draft's time and the optimized time from its `kernel-lsp optimize --json` run (the first
step's "before" and that divided by the run's cumulative speedup: both measured by the
worker, interleaved with the versions they were compared to), and PyTorch's time for
the same operation from tests/gpu/torch_baselines.py in the same run. Then the geomean
speedup over the drafts and the worst optimized/PyTorch ratio, against the goals of
issue #13 (geomean >= 2.5x, no kernel slower than 1.25x PyTorch).

Usage: bench_table.py TORCH.txt RUN.json:FILE:KERNEL ...
"""

import json
import math
import re
import sys


def torch_times(path):
    out = {}
    for line in open(path):
        m = re.match(r"TORCH (\S+) (\S+) ms=(\S+) op=(.*)", line.strip())
        if m:
            out[(m.group(1), m.group(2))] = (float(m.group(3)), m.group(4))
    return out


def run_times(path):
    """(draft ms, optimized ms, accepted steps) of one optimize run, or None."""
    try:
        run = json.load(open(path))
    except Exception:
        return None
    steps = [s for s in run.get("steps", []) if s["outcome"] != "not_applicable"]
    start = next((s["before_ms"] for s in steps if s.get("before_ms")), None)
    if start is None:
        return None
    # The answer is the best version of the run's tree (older runs: the last step's).
    cum = run.get("best_speedup", steps[-1]["cumulative"] if steps else 1.0)
    accepted = [f"{s['strategy_id']}({s['accepted']})" for s in steps
                if s["outcome"] == "accepted" and s.get("on_best_path", True)]
    return start, start / cum, accepted


def main():
    torch = torch_times(sys.argv[1])
    rows, speedups, ratios = [], [], []
    for arg in sys.argv[2:]:
        path, file, kernel = arg.split(":")
        t = run_times(path)
        tt = torch.get((file, kernel))
        if t is None:
            rows.append((file, kernel, None, None, None, tt, []))
            continue
        draft, opt, accepted = t
        speedups.append(draft / opt)
        if tt and not math.isnan(tt[0]):
            ratios.append((opt / tt[0], f"{file}:{kernel}"))
        rows.append((file, kernel, draft, opt, draft / opt, tt, accepted))
    print(f"{'kernel':<32} {'draft ms':>10} {'optimized':>10} {'speedup':>8} {'torch ms':>10} {'opt/torch':>9}  accepted steps")
    fmt = lambda v, p=4: f"{v:.{p}f}" if v is not None and not math.isnan(v) else "-"
    for file, kernel, draft, opt, sp, tt, acc in rows:
        tms = tt[0] if tt else None
        ratio = opt / tms if (opt and tms and not math.isnan(tms)) else None
        print(f"{file + ':' + kernel:<32} {fmt(draft):>10} {fmt(opt):>10} {fmt(sp, 2) + 'x' if sp else '-':>8} "
              f"{fmt(tms):>10} {fmt(ratio, 2) + 'x' if ratio else '-':>9}  {', '.join(acc) or '-'}")
    if speedups:
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        print(f"geomean speedup over the drafts: {geo:.2f}x over {len(speedups)} kernels (goal >= 2.5x: {'met' if geo >= 2.5 else 'NOT met'})")
    if ratios:
        worst, where = max(ratios)
        print(f"slowest against PyTorch: {worst:.2f}x PyTorch's time ({where}) (goal <= 1.25x: {'met' if worst <= 1.25 else 'NOT met'})")
        over = [f"{w} {r:.2f}x" for r, w in sorted(ratios, reverse=True) if r > 1.25]
        if over:
            print("over 1.25x PyTorch: " + "; ".join(over))
    for file, kernel, draft, *_ in rows:
        if draft is None:
            print(f"no optimize result for {file}:{kernel}")


if __name__ == "__main__":
    main()
