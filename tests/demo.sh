#!/usr/bin/env bash
# Set up and run kernel-lsp on the bundled examples: install the wheels the demo uses
# into ./.venv (tests/setup-demo.sh: no root, no Node), build the release binary, check
# every example (syntax, @bench specs, NVRTC compile, ptxas resources), then the main
# job: optimize a bundled Triton kernel with no LLM (on the GPU when there is one, else
# on Triton's CPU interpreter at small sizes), print the verified speedup, apply it and
# write the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash tests/setup-demo.sh
t1=$SECONDS
cargo build --release --locked
t2=$SECONDS
export VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH"
echo "== kernel-lsp check examples/*" >&2
./target/release/kernel-lsp check examples/*
echo "== no errors in the bundled examples" >&2

echo "== kernel-lsp optimize: a bundled Triton kernel, embedded optimizer, no LLM" >&2
demo="$PWD/target/demo"
rm -rf "$demo" && mkdir -p "$demo"
cp examples/vector_add.py "$demo/"
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
  # No GPU: Triton's CPU interpreter runs every program in Python, so the demo uses
  # small sizes; its results are verified for real, its times are not GPU times.
  export TRITON_INTERPRET=1
  sed -i 's/n = 1 << 24, 1000/n = 1 << 14, 1000/' "$demo/vector_add.py"
  echo "(no GPU here: Triton's CPU interpreter, n = 2^14 and 1000)" >&2
fi
( cd "$demo" && git init -q . && "$OLDPWD/target/release/kernel-lsp" optimize vector_add.py --steps 2 --fresh-policy --apply \
  && "$OLDPWD/target/release/kernel-lsp" report vector_add.py -o "$demo/report.html" >/dev/null )
echo "== the optimized kernel is in $demo/vector_add.py (the original in vector_add.py.orig); report: $demo/report.html" >&2
echo "== demo done in $((SECONDS - t0)) s: wheels $((t1 - t0)) s, build $((t2 - t1)) s, check and optimize $((SECONDS - t2)) s" >&2
