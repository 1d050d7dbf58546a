#!/usr/bin/env bash
# GPU test of CUDA capture (issue #32): builds tests/gpu/capture_cuda/ext.cu as a PyTorch
# extension (four kernels: 1-D elementwise, 2-D rows x cols, a template reduction with
# shared memory, an in-place update), runs its script once plainly and once under
# `kernel-lsp capture --apply` (the script checks every result against PyTorch both
# times), then `kernel-lsp bench` on the captured specs and `kernel-lsp optimize` (no LLM)
# of one kernel from its captured spec. Exits non-zero when any of that fails or a kernel
# got no spec. Needs KERNEL_LSP_BIN (a release kernel-lsp), python3 with torch, nvcc, cc.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${KERNEL_LSP_BIN:?set KERNEL_LSP_BIN to the prebuilt release kernel-lsp}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/capture_cuda/ext.cu" "$here/capture_cuda/run_ext.py" "$work/"
export CAPEXT_BUILD="${CAPEXT_BUILD:-$work/.build}"
cd "$work" || exit 2
rc=0
echo "== build and run without capture"
timeout 300 python3 run_ext.py 2>&1 | tail -5
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "the extension did not build or run"; exit 1; }
if [[ -n "${CAPTURE_CUDA_SHIM:-}" ]]; then
  # Diagnosis: the shim's raw records (a shim built from server/src/capture/shim.c).
  echo "== raw shim records"
  LD_PRELOAD="$CAPTURE_CUDA_SHIM" KERNEL_LSP_CAPTURE_OUT="$work/raw.jsonl" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    KERNEL_LSP_CAPTURE_CUDA_NAMES=scale_add_kernel,bias_relu_kernel,row_sum_kernel,axpy_kernel \
    timeout 120 python3 run_ext.py 2>&1 | tail -3
  cut -c1-600 "$work/raw.jsonl" 2>/dev/null | head -12
fi
echo "== kernel-lsp capture --apply -- python3 run_ext.py"
timeout 300 "$KERNEL_LSP_BIN" capture --apply -- python3 run_ext.py 2>&1 | tee capture.txt
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
echo "== the captured specs"
grep -n '@bench' ext.cu
for k in scale_add_kernel bias_relu_kernel row_sum_kernel axpy_kernel; do
  grep -q "\`$k\`: .*written" capture.txt || { echo "FAIL: no spec written for $k"; rc=1; }
done
echo "== kernel-lsp bench ext.cu"
timeout 300 "$KERNEL_LSP_BIN" bench ext.cu 2>&1 | tee bench.txt
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
echo "== kernel-lsp optimize ext.cu --kernel scale_add_kernel"
timeout 200 "$KERNEL_LSP_BIN" optimize ext.cu --kernel scale_add_kernel --steps "${KERNEL_LSP_CAPTURE_STEPS:-2}" \
  --budget 120s --fresh-policy 2>&1 | tee optimize.txt
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
if [[ -n "${OUT:-}" ]]; then cp ext.cu capture.txt bench.txt optimize.txt "$OUT/" 2>/dev/null; fi
echo "== capture_cuda summary"
grep -h 'kernels:' capture.txt | tail -1
echo "bench: $(grep -ci 'passed' bench.txt) passed lines, $(grep -c 'FAILED' bench.txt) FAILED lines"
grep -h 'speedup\|accepted\|best' optimize.txt | tail -4
echo "capture_cuda exit $rc"
exit $rc
