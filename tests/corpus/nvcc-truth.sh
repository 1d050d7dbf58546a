#!/usr/bin/env bash
# Ground truth for the corpus test, on a machine with the full CUDA toolkit: compiles
# every corpus file with nvcc as its compile_commands.json says (device side, -ptx, for
# sm_90) and prints one line per file: `clean <project>/<file>` or
# `fails <project>/<file>: <first error>`. tests/corpus/nvcc-clean.txt holds the clean
# ones; the corpus test asserts 0 errors on exactly those.
#   NVCC=/usr/local/cuda/bin/nvcc bash tests/corpus/nvcc-truth.sh > tests/corpus/nvcc-truth.txt
# PROJECTS="a b" limits it to those projects (then merge its lines into the file).
set -euo pipefail
cd "$(dirname "$0")/cache"
nvcc=${NVCC:-nvcc}
one() {
  local proj=$1 file=$2 flags
  flags=$(python3 -c 'import json,sys,shlex
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        a = shlex.split(e["command"])[1:]
        out = []; skip = False
        for x in a:
            if skip: skip = False; continue
            if x in ("-c", "-o"): skip = x == "-o"; continue
            if x == sys.argv[2]: continue
            out.append(x)
        print(" ".join(shlex.quote(x) for x in out))' "$proj/compile_commands.json" "$file")
  local log
  if log=$(cd "$proj" && eval "$nvcc" -ptx -arch=sm_90 -Wno-deprecated-gpu-targets $flags -o /dev/null "$file" 2>&1); then
    echo "clean $proj/$file"
  else
    echo "fails $proj/$file: $(grep -m1 -E 'error' <<<"$log" | cut -c1-200)"
  fi
}
export -f one
export nvcc
for proj in ${PROJECTS:-*/}; do
  proj=${proj%/}
  python3 -c 'import json,sys; [print(sys.argv[1], e["file"]) for e in json.load(open(sys.argv[1] + "/compile_commands.json"))]' "$proj"
done | xargs -P "${JOBS:-$(nproc)}" -n 2 bash -c 'one "$0" "$1"' | sort
