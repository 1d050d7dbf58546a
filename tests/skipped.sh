#!/usr/bin/env bash
# Reads a test run's output (a file, or stdin) and says what did not run: libtest counts
# a test that returned after printing `SKIP <name>: <why>` as passed, so its summary
# alone hides them. Prints "N GPU tests skipped: no CUDA device" for the GPU tests and
# "N tests skipped: <why>" for each other reason; nothing when every test ran.
set -euo pipefail
grep -ao 'SKIP [^ :]*: .*' "${1:-/dev/stdin}" | sort -u | awk '
  { why = $0; sub(/^SKIP [^ :]*: /, "", why); sub(/ \(.*$/, "", why)
    name = $2; sub(/:$/, "", name)
    if (why == "no CUDA device" || name ~ /^gpu_/) gpu++; else other[why]++ }
  END {
    if (gpu) printf "%d GPU tests skipped: no CUDA device\n", gpu
    for (w in other) printf "%d tests skipped: %s\n", other[w], w
  }' || true
