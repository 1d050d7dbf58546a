#!/usr/bin/env bash
# Records Nsight Compute raw CSV for the profile parser's fixtures (issue #14): one CUDA
# and one Triton example, profiled through `kernel-lsp bench` (the worker is a child
# process: --target-processes all), one launch each, clocks left alone. Also records
# ncu's error output for a metric that does not exist, and the metric names this chip
# offers. Writes under $OUT/ncu (or ./ncu-out).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$PWD/ncu-out}/ncu"; mkdir -p "$out"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
metrics=$(grep -v '^#' "$here/ncu_metrics.txt" | grep . | paste -sd, -)
"$ncu" --version > "$out/version.txt" 2>&1
"$ncu" --query-metrics --chip gh100 > "$out/query-metrics.txt" 2>&1 || true
prof() { # name file kernel-regex
  local name=$1 file=$2 k=$3 work; work=$(mktemp -d); cp "$root/examples/$file" "$work/"
  ( cd "$work" && timeout 240 "$ncu" --target-processes all --clock-control none --csv --page raw \
      --metrics "$metrics" -k "regex:$k" --launch-skip 2 --launch-count 1 \
      "$KERNEL_LSP_BIN" bench "$file" > "$out/$name.csv" 2> "$out/$name.err" )
  echo "ncu $name exit $? ($(wc -l < "$out/$name.csv") lines)"
}
prof saxpy saxpy.cu '^saxpy$'
prof softmax_rows softmax_rows.cu '^softmax_rows$'
prof triton_add vector_add.py 'add_kernel'
# A metric name that does not exist: ncu's error, for the parser's error path.
work=$(mktemp -d); cp "$root/examples/saxpy.cu" "$work/"
( cd "$work" && timeout 120 "$ncu" --target-processes all --clock-control none --csv --page raw \
    --metrics no_such__metric.sum -k regex:saxpy --launch-count 1 "$KERNEL_LSP_BIN" bench saxpy.cu > "$out/bad-metric.csv" 2> "$out/bad-metric.err" )
echo "ncu bad-metric exit $?"
