"""The default run against a thorough one, per kernel (issue: the default `optimize`
should reach within 3% of the best a 40-step run finds).

Usage: thorough_compare.py DEFAULT_DIR THOROUGH_DIR
Each folder holds the `optimize --json` files (opt-KERNEL.json) that tests/gpu/run.sh
keeps under $OUT/$KERNEL_LSP_OPT_TAG. Each run's speedup is its own end-of-run
side-by-side timing of the answer against the start (`headline`), so two runs compare by
speedup, not by milliseconds taken minutes apart. Prints one row per kernel and the
share of the thorough run's speedup that the default run reached.
"""
import json
import pathlib
import sys


def load(folder):
    runs = {}
    for p in sorted(pathlib.Path(folder).glob("opt-*.json")):
        try:
            runs[p.stem[4:]] = json.loads(p.read_text())
        except ValueError as e:
            print(f"{p}: not JSON ({e})")
    return runs


def summary(run):
    head = run.get("headline") or {}
    steps = [s for s in run.get("steps", []) if s.get("outcome") != "not_applicable"]
    chain = [s["strategy_id"] for s in steps if s.get("outcome") == "accepted" and s.get("on_best_path", False)]
    return {
        "speedup": head.get("speedup", run.get("best_speedup", 1.0)),
        "best_ms": head.get("best_ms"),
        "steps": len(steps),
        "chain": chain,
        "stopped": (run.get("stopped") or "").split(":")[0],
    }


def main(default_dir, thorough_dir):
    d, t = load(default_dir), load(thorough_dir)
    print("| kernel | default: speedup (steps, ended) | thorough: speedup (steps, ended) | default / thorough |")
    print("| --- | --- | --- | --- |")
    worst = None
    for k in sorted(set(d) | set(t)):
        if k not in d or k not in t:
            print(f"| {k} | {'-' if k not in d else 'ran'} | {'-' if k not in t else 'ran'} | missing |")
            continue
        a, b = summary(d[k]), summary(t[k])
        share = a["speedup"] / b["speedup"] if b["speedup"] else 0.0
        worst = share if worst is None else min(worst, share)
        print(f"| {k} | {a['speedup']:.2f}x ({a['steps']}, {a['stopped']}) | "
              f"{b['speedup']:.2f}x ({b['steps']}, {b['stopped']}) | {share:.1%} |")
        if a["chain"] != b["chain"]:
            print(f"|   chains | {' > '.join(a['chain']) or '-'} | {' > '.join(b['chain']) or '-'} | |")
    if worst is not None:
        print(f"worst: the default run reached {worst:.1%} of the thorough run's speedup")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
