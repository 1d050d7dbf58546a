#!/usr/bin/env bash
# The one script for the GPU machine. It builds nothing (no cargo, no network there):
#   KERNEL_LSP_BIN  prebuilt release `kernel-lsp`
#   KERNEL_LSP_E2E  prebuilt release e2e test executable (tests/e2e, which includes tests/gpu)
#   KERNEL_LSP_LIB  (optional) prebuilt release unit-test executable of the library: its
#                   GPU tests check the device helpers against their CPU twins
# Runs the CUDA backend's GPU tests with KERNEL_LSP_REQUIRE_GPU=1 (a missing GPU fails;
# gpu::idioms verifies every idiom rewrite on two or more kernels and prints IDIOM lines),
# `kernel-lsp optimize` with no LLM on every bundled example, PyTorch's time for the same
# operations (torch_baselines.py), then the KernelBench-style turnaround for comparison,
# and prints a short table last: the summary, the idioms, and the no-LLM benchmark
# (draft vs optimized vs PyTorch, geomean, worst ratio to PyTorch; bench_table.py).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${KERNEL_LSP_E2E:?set KERNEL_LSP_E2E to the prebuilt e2e test executable}"
: "${KERNEL_LSP_BIN:?set KERNEL_LSP_BIN to the prebuilt release kernel-lsp}"
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT
# KERNEL_LSP_GPU_PARTS picks sections (default all): tests (the GPU tests), bench
# (`kernel-lsp bench` on the examples), optimize (the no-LLM benchmark: optimize every
# example, PyTorch baselines, the table), torch (`kernel-lsp bench` on the Triton examples
# with `reference = torch: ...`: verified against PyTorch, timed against eager and
# torch.compile), compare (Triton fidelity, KernelBench), ncu
# (Nsight Compute recordings for the profile parser; not in the default set), multigpu
# (1 worker vs 2, one per GPU, on an nvidia-h200-x2: tests/gpu/multigpu.py; not in the
# default set), cures (the drafts whose cure the analysis picks, e.g. remap_lanes: each
# benched as written against PyTorch, optimized with the default policy, and the applied
# result benched again; not in the default set), capture (`kernel-lsp capture` on the
# projects of tests/fixtures/capture run on the GPU, bench of every captured spec, and
# optimize of one captured kernel; not in the default set), capture_cuda (a PyTorch CUDA
# extension built from tests/gpu/capture_cuda, captured, benched and one kernel optimized:
# tests/gpu/capture_cuda.sh; not in the default set). Each
# section stays under ten minutes on an H100, so they can run as separate commands.
parts=" ${KERNEL_LSP_GPU_PARTS:-tests bench optimize torch compare} "
part() { [[ "$parts" == *" $1 "* ]]; }
touch "$log/tests.txt" "$log/tests-fault.txt" "$log/bench-rc.txt" "$log/opt-table.txt" "$log/torch.txt"

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi not available"
"$KERNEL_LSP_BIN" --version 2>&1 | head -1 || true

tests_rc=0
if part tests; then
echo "== GPU tests"
# Some GPU tests run the binary the e2e executable was built beside
# (target/release/kernel-lsp under the checkout): put the prebuilt one there if missing.
bin_beside="$(cd "$here/../.." && pwd)/target/release/kernel-lsp"
if [[ ! -x "$bin_beside" ]]; then
  mkdir -p "$(dirname "$bin_beside")" && cp "$KERNEL_LSP_BIN" "$bin_beside"
fi
KERNEL_LSP_PYTHON="${KERNEL_LSP_PYTHON:-python3}" KERNEL_LSP_EXAMPLES="$here/../../examples" KERNEL_LSP_REQUIRE_GPU=1 "$KERNEL_LSP_E2E" gpu:: gpu_cheats:: gpu_llm:: gpu_profile:: gpu_torch:: --skip gpu_illegal_address --test-threads=1 --nocapture 2>&1 | tee "$log/tests.txt"
tests_rc=${PIPESTATUS[0]}
if [[ -n "${KERNEL_LSP_LIB:-}" ]]; then
  KERNEL_LSP_REQUIRE_GPU=1 "$KERNEL_LSP_LIB" gpu_ --test-threads=1 --nocapture 2>&1 | tee "$log/tests-lib.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || tests_rc=1
fi
# A fault loses the process's CUDA context (every later test in that process would fail):
# the in-process fault test runs alone, in its own process.
KERNEL_LSP_REQUIRE_GPU=1 "$KERNEL_LSP_E2E" gpu::gpu_illegal_address --test-threads=1 --nocapture 2>&1 | tee "$log/tests-fault.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || tests_rc=1
fi

echo "== kernel-lsp device"
"$KERNEL_LSP_BIN" device 2>&1 | tee "$log/device.txt"

root="$(cd "$here/../.." && pwd)"
bench_rc=0
if part bench; then
for ex in saxpy.cu reduce_sum.cu matmul_naive.cu vector_add.py softmax.py softmax_rows.cu histogram.cu transpose.cu matmul.py; do
  echo "== kernel-lsp bench examples/$ex"
  timeout 300 "$KERNEL_LSP_BIN" bench "$root/examples/$ex" 2>&1 | tee "$log/bench-$ex.txt"
  rc=${PIPESTATUS[0]}
  echo "bench $ex exit $rc" >> "$log/bench-rc.txt"
  [[ $rc -eq 0 ]] || bench_rc=1
done
fi

torch_rc=0
if part torch; then
echo "== kernel-lsp bench against PyTorch eager and torch.compile (reference = torch:)"
mkdir -p "$log/torchref"
for f in $(python3 "$here/torch_reference_examples.py" "$root/examples" "$log/torchref"); do
  echo "== kernel-lsp bench $(basename "$f") (reference = torch: $(grep -o 'torch: .*' "$f" | cut -c8-))"
  timeout 400 "$KERNEL_LSP_BIN" bench "$f" 2>&1 | tee -a "$log/torchref.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || torch_rc=1
done
fi

opt_rc=0
bench_args=()
if part optimize; then
echo "== kernel-lsp optimize on the examples (embedded policy and rewrites, no LLM)"
work="$log/opt"; mkdir -p "$work"; cp "$root"/examples/* "$work/"
export KERNEL_LSP_DATA_DIR="$log/policy"   # one policy across the runs: it learns between kernels
while read -r ex kernel steps; do
  # KERNEL_LSP_GPU_EXAMPLES="a.cu b.py" optimizes only those (the first one's policy
  # state is the full run's: matmul_naive.cu comes first).
  [[ -n "${KERNEL_LSP_GPU_EXAMPLES:-}" && " $KERNEL_LSP_GPU_EXAMPLES " != *" $ex "* ]] && continue
  # KERNEL_LSP_OPT_DEFAULT=1: the default run (no step count; the time budget
  # KERNEL_LSP_OPT_BUDGET, default 150s, and the search's stop rule end it) instead of
  # the listed step counts.
  # KERNEL_LSP_OPT_THOROUGH=1: `--thorough --steps 40` (every version expanded until
  # nothing is left on it) within the same budget, to compare with the default run
  # (tests/gpu/thorough_compare.py).
  limit=(--steps "$steps")
  [[ -n "${KERNEL_LSP_OPT_DEFAULT:-}" ]] && limit=(--budget "${KERNEL_LSP_OPT_BUDGET:-150s}")
  [[ -n "${KERNEL_LSP_OPT_THOROUGH:-}" ]] && limit=(--thorough --steps 40 --budget "${KERNEL_LSP_OPT_BUDGET:-150s}")
  echo "== optimize $ex --kernel $kernel ${limit[*]}"
  t0=$(date +%s)
  ( cd "$work" && timeout 420 "$KERNEL_LSP_BIN" optimize "$ex" --kernel "$kernel" "${limit[@]}" --json > "$log/opt-$kernel.json" 2> "$log/opt-$kernel.err" )
  rc=$?
  cat "$log/opt-$kernel.err"
  python3 "$here/optimize_table.py" "$log/opt-$kernel.json" "$ex" "$kernel" | tee -a "$log/opt-table.txt"
  echo "    wall: $(( $(date +%s) - t0 )) s (${limit[*]})" | tee -a "$log/opt-table.txt"
  [[ $rc -eq 0 ]] || { opt_rc=1; echo "optimize $ex exit $rc"; }
  bench_args+=("$log/opt-$kernel.json:$ex:$kernel")
done <<'LIST'
matmul_naive.cu matmul 6
saxpy.cu saxpy 5
reduce_sum.cu reduce_tree 4
vector_add.py add_kernel 4
softmax.py softmax_kernel 3
softmax_rows.cu softmax_rows 4
histogram.cu histogram 4
transpose.cu transpose 4
matmul.py matmul_kernel 4
LIST
# PyTorch's time for the same operations, in this run, for the no-LLM benchmark table.
echo "== PyTorch baselines"
timeout 300 python3 "$here/torch_baselines.py" 2>&1 | tee "$log/torch.txt"
( cd "$work" && "$KERNEL_LSP_BIN" report matmul_naive.cu -o "$log/report-matmul.html" ) 2>&1
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT/${KERNEL_LSP_OPT_TAG:-opt}"
  cp "$log"/opt-*.json "$log"/report-*.html "$log/policy/policy.json" "$OUT/${KERNEL_LSP_OPT_TAG:-opt}/" 2>/dev/null
fi
fi

cures_rc=0
if part cures; then
echo "== cures chosen by the analysis: draft, optimize (no LLM), optimized, each against PyTorch"
cw="$log/cures"; mkdir -p "$cw"
export KERNEL_LSP_DATA_DIR="$log/cures-policy"
for ex in ${KERNEL_LSP_CURE_EXAMPLES:-bias_relu_rows.cu norm_apply.cu gelu_bias_half.cu scale_shift_batched.cu half_axpy.cu rope_pairs.cu softmax_3pass.py logsumexp_rows.py cross_entropy.py col_mean.py matvec.py rmsnorm_2pass.py col_norm.py cumsum_rows.py layernorm_3pass.py col_min.py col_sumsq.py row_absmax.py}; do
  cp "$root/examples/$ex" "$cw/"
  echo "== draft $ex"
  ( cd "$cw" && timeout 300 "$KERNEL_LSP_BIN" bench "$ex" ) 2>&1 | tee "$log/cure-draft-$ex.txt"
  # The default run (time budget KERNEL_LSP_CURE_BUDGET, default 150s, and the stop
  # rule), or KERNEL_LSP_CURE_STEPS steps.
  limit=(--budget "${KERNEL_LSP_CURE_BUDGET:-150s}")
  [[ -n "${KERNEL_LSP_CURE_STEPS:-}" ]] && limit=(--steps "$KERNEL_LSP_CURE_STEPS")
  echo "== optimize $ex ${limit[*]} --apply"
  ( cd "$cw" && timeout 420 "$KERNEL_LSP_BIN" optimize "$ex" "${limit[@]}" --apply ) 2>&1 | tee "$log/cure-opt-$ex.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || cures_rc=1
  echo "== optimized $ex"
  ( cd "$cw" && timeout 300 "$KERNEL_LSP_BIN" bench "$ex" ) 2>&1 | tee "$log/cure-best-$ex.txt"
  grep -h '@bench grid\|@bench block' "$cw/$ex" | sed 's/^/    launch now: /'
done
if [[ -n "${OUT:-}" ]]; then cp "$cw"/*.cu "$cw"/*.py "$OUT/" 2>/dev/null; fi
fi

capture_rc=0
if part capture; then
echo "== capture (issue #32): each project's script captured on the GPU, its specs benched, one kernel optimized"
capw="$log/capture"; mkdir -p "$capw"
for pr in own:run_own.py liger:run_liger.py lightning_attn:run_lightning_attn.py mamba:run_mamba.py; do
  name=${pr%%:*}; script=${pr#*:}
  rm -rf "${capw:?}/$name"; cp -r "$root/tests/fixtures/capture/$name" "$capw/$name"
  echo "== capture $name ($script)"
  ( cd "$capw/$name" && PYTHONPATH="$capw/$name${PYTHONPATH:+:$PYTHONPATH}" timeout 600 \
      "$KERNEL_LSP_BIN" capture --apply -- python3 "$script" ) 2>&1 | tee "$log/capture-$name.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || capture_rc=1
  for f in $(grep -rl '# @bench' "$capw/$name" --include='*.py'); do
    echo "== bench $name/${f#"$capw/$name/"}"
    ( cd "$capw/$name" && PYTHONPATH="$capw/$name${PYTHONPATH:+:$PYTHONPATH}" timeout 300 \
        "$KERNEL_LSP_BIN" bench "$f" ) 2>&1 | tee -a "$log/capture-bench-$name.txt"
  done
done
# End to end on one captured kernel: optimize (no LLM) from the captured spec, then bench.
opt_file="$capw/liger/liger_kernel/ops/softmax.py"
if grep -q '# @bench' "$opt_file" 2>/dev/null; then
  echo "== optimize liger _softmax_single_block_forward_kernel from its captured spec"
  ( cd "$capw/liger" && PYTHONPATH="$capw/liger${PYTHONPATH:+:$PYTHONPATH}" timeout 540 "$KERNEL_LSP_BIN" optimize \
      "$opt_file" --kernel _softmax_single_block_forward_kernel --steps "${KERNEL_LSP_CAPTURE_STEPS:-3}" ) 2>&1 | tee "$log/capture-optimize.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || capture_rc=1
fi
if [[ -n "${OUT:-}" ]]; then (cd "$capw" && tar czf "$OUT/captured-specs.tgz" .) 2>/dev/null; fi
fi

capture_cuda_rc=0
if part capture_cuda; then
echo "== capture_cuda (issue #32): a PyTorch CUDA extension captured, benched, optimized"
KERNEL_LSP_BIN="$KERNEL_LSP_BIN" bash "$here/capture_cuda.sh" 2>&1 | tee "$log/capcuda.txt"
capture_cuda_rc=${PIPESTATUS[0]}
fi

multigpu_rc=0
if part multigpu; then
echo "== multi-GPU: 1 worker vs 2 (tests/gpu/multigpu.py)"
KERNEL_LSP_BIN="$KERNEL_LSP_BIN" timeout 3000 python3 "$here/multigpu.py" 2>&1 | tee "$log/multigpu.txt"
multigpu_rc=${PIPESTATUS[0]}
fi

if part ncu; then
echo "== Nsight Compute recordings (tests/gpu/ncu_record.sh)"
bash "$here/ncu_record.sh" 2>&1 | tee "$log/ncu.txt"
fi

kb_rc=0
touch "$log/fidelity.txt" "$log/kb.txt"
if part compare && [[ -z "${KERNEL_LSP_GPU_QUICK:-}" ]]; then  # QUICK=1 skips the two slow comparisons
echo "== Triton timing fidelity (helper vs triton.testing.do_bench)"
timeout 300 python3 "$here/triton_fidelity.py" 2>&1 | tee "$log/fidelity.txt"

echo "== KernelBench-style turnaround (torch load_inline)"
python3 "$here/kernelbench_compare.py" 2>&1 | tee "$log/kb.txt"
kb_rc=${PIPESTATUS[0]}
fi

val() { grep -o "^$1=[^ ]*" "$2" | tail -1 | cut -d= -f2; }
# --nocapture interleaves prints with `test ... ok` lines: read the harness's summary.
count() { grep -ho 'test result: .*' "$log/tests.txt" "$log/tests-fault.txt" "$log"/tests-lib.txt 2>/dev/null | sed -n "s/.* \([0-9]*\) $1.*/\1/p" | awk '{s+=$1} END {print s+0}'; }
passed=$(count passed)
failed=$(count failed)
ours=$(val TURNAROUND_MS "$log/tests.txt")
theirs=$(val KERNELBENCH_TURNAROUND_MS "$log/kb.txt")
ours24=$(val TURNAROUND_24_MS "$log/tests.txt")
theirs24=$(val KERNELBENCH_TURNAROUND_24_MS "$log/kb.txt")
kb_compile=$(val KERNELBENCH_COMPILE_MS "$log/kb.txt")
ceil=$(grep -o 'CEILINGS .*' "$log/tests.txt" | tail -1)
fidelity=$(grep -o 'FIDELITY .*' "$log/fidelity.txt" | tail -1)

echo
echo "== summary"
printf '%-44s %s\n' "GPU tests passed / failed" "${passed:-0} / ${failed:-0} (exit ${tests_rc})"
printf '%-44s %s\n' "device ceilings" "${ceil:-n/a}"
while read -r _ ex _ rc; do printf '%-44s %s\n' "bench examples/$ex" "exit $rc"; done < "$log/bench-rc.txt"
printf '%-44s %s\n' "Triton fidelity" "${fidelity:-n/a}"
printf '%-44s %s\n' "kernel-lsp compile+verify+time (median ms)" "${ours:-n/a} at 2^20 ($(grep -o 'TURNAROUND_PARTS.*' "$log/tests.txt" | tail -1 | cut -d' ' -f2-)); ${ours24:-n/a} at 2^24 ($(grep -o 'TURNAROUND_24_PARTS.*' "$log/tests.txt" | tail -1 | cut -d' ' -f2-))"
printf '%-44s %s\n' "KernelBench-style at 2^24 (ms)" "${theirs24:-n/a}"
grep -ho 'PROFILE\(D_OPT\)\? .*' "$log/tests.txt" 2>/dev/null | while read -r l; do printf '%-44s %s\n' "profile" "$l"; done
printf '%-44s %s\n' "anti-cheat rejections seen" "$(grep -o 'CHEAT gpu_[a-z_]*' "$log/tests.txt" | sort -u | wc -l)"
printf '%-44s %s\n' "KernelBench load_inline+check+time (ms)" "${theirs:-n/a} (compile ${kb_compile:-n/a} ms, exit ${kb_rc})"
if [[ -n "${ours:-}" && -n "${theirs:-}" ]]; then
  printf '%-44s %s\n' "turnaround ratio (KernelBench / kernel-lsp)" "$(python3 -c "print(f'{${theirs}/max(${ours},1e-9):.1f}x')")"
fi
for k in LSP_BENCH LSP_HINT LSP_OPTIMIZE; do
  printf '%-44s %s\n' "editor path: $k" "$(grep -ho "$k=.*" "$log/tests.txt" | tail -1 | cut -d= -f2-)"
done
echo "== optimize (per kernel: steps run, accepted, verified/failed candidates, speedup)"
cat "$log/opt-table.txt" 2>/dev/null
echo "== idioms on the GPU (per kernel: candidates verified, best speedup over the original)"
awk '/^IDIOM /{p=1; print; next} p && /^    rejected/{print; next} {p=0}' "$log/tests.txt" | grep . || echo "no IDIOM lines (did gpu::idioms run?)"
if part torch; then
echo "== against PyTorch (reference = torch:): kernel time · speedup over eager · over torch.compile"
grep -h '× eager\|PyTorch `\|FAILED\|error' "$log/torchref.txt" 2>/dev/null || echo "no torch reference rows"
grep -ho 'TORCHREF .*' "$log/tests.txt" 2>/dev/null
fi
if part optimize; then
echo "== no-LLM benchmark: first draft vs optimized vs PyTorch, measured in this run"
python3 "$here/bench_table.py" "$log/torch.txt" "${bench_args[@]}" | tee "$log/bench-table.txt"
fi
if part cures; then
echo "== cures: draft and optimized against PyTorch (time · × eager · × compile)"
for f in "$log"/cure-draft-*.txt "$log"/cure-best-*.txt; do
  [[ -e "$f" ]] || continue
  printf '%-34s %s\n' "$(basename "$f" .txt)" "$(grep -h '× eager' "$f" | head -1 | tr -s ' ')"
done
fi
if part capture; then
echo "== capture: per project, kernels captured (specs / refused) and benched (self-check passed / failed)"
for f in "$log"/capture-*.txt; do
  [[ -e "$f" ]] || continue
  case "$f" in *capture-bench-*|*capture-optimize*) continue;; esac
  name=$(basename "$f" .txt); name=${name#capture-}
  printf '%-16s %s; bench: %s passed, %s failed\n' "$name" "$(grep -h 'kernels:' "$f" | tail -1)" \
    "$(grep -c 'self-check passed' "$log/capture-bench-$name.txt" 2>/dev/null)" \
    "$(grep -c 'FAILED' "$log/capture-bench-$name.txt" 2>/dev/null)"
done
grep -h 'speedup\|accepted\|best' "$log/capture-optimize.txt" 2>/dev/null | tail -5
fi
if part capture_cuda; then
sed -n '/^== capture_cuda summary/,$p' "$log/capcuda.txt"
fi
if part multigpu; then
echo "== multi-GPU: 1 worker vs 2 (wall time, same accepted versions)"
sed -n '/^== multi-GPU table/,$p' "$log/multigpu.txt" | tail -n +2
fi
if [[ -n "${OUT:-}" ]]; then for f in "$log"/*.txt; do echo "=== $(basename "$f")"; cat "$f"; done > "$OUT/gpu-logs.txt"; fi
[[ $tests_rc -eq 0 && $bench_rc -eq 0 && $opt_rc -eq 0 && $multigpu_rc -eq 0 && $torch_rc -eq 0 && $cures_rc -eq 0 && $capture_rc -eq 0 && $capture_cuda_rc -eq 0 ]]
