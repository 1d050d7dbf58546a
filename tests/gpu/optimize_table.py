"""One summary line per `kernel-lsp optimize --json` run, for tests/gpu/run.sh.

Usage: optimize_table.py RUN.json FILE KERNEL
Prints: FILE KERNEL steps=N accepted=A verified=V failed=F start_ms end_ms speedup, then
the accepted steps in order.
"""
import json
import sys

path, file, kernel = sys.argv[1:4]
try:
    run = json.load(open(path))
except Exception as e:  # the run failed before printing JSON
    print(f"{file:<16} {kernel:<14} no result ({e})")
    sys.exit(0)
steps = [s for s in run["steps"] if s["outcome"] != "not_applicable"]
cands = [c for s in steps for c in s["candidates"]]
verified = sum(1 for c in cands if c["verified"])
failed = [c for c in cands if not c["verified"]]
accepted = [s for s in steps if s["outcome"] == "accepted"]
start = next((s["before_ms"] for s in steps if s.get("before_ms")), None)
# The answer is the best version of the run's tree (older runs: the last step's).
cum = run.get("best_speedup", steps[-1]["cumulative"] if steps else 1.0)
end = start / cum if start else None
fmt = lambda v: f"{v:.4f}" if v else "-"
print(f"{file:<16} {kernel:<14} steps={len(steps)} accepted={len(accepted)} "
      f"verified={verified} failed={len(failed)} start={fmt(start)} ms end={fmt(end)} ms "
      f"speedup={cum:.2f}x interpreter={any(s['interpreter'] for s in steps)}")
for s in accepted:
    where = f" v{s.get('node', 0)}->v{s.get('child', '?')}{' *' if s.get('on_best_path') else ''}" if "node" in s else ""
    print(f"    + {s['strategy_id']}: {s['accepted']} {s['speedup']:.2f}x (cumulative {s['cumulative']:.2f}x){where}")
if run.get("versions", 1) > 1:
    print(f"    best: v{run['best_node']} of {run['versions']} versions")
for c in failed:
    print(f"    - rejected {c['label']}: {(c.get('message') or '')[:160]}")
if run.get("stopped"):
    print(f"    stopped: {run['stopped']}")
