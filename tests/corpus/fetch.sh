#!/usr/bin/env bash
# Downloads the public CUDA projects the corpus test checks (pinned versions, from the
# package registries, with their licenses) into tests/corpus/cache/ (git-ignored):
#   ggml     the CUDA backend of llama.cpp, from the llama-cpp-python sdist on PyPI (MIT)
#   candle   candle-kernels from crates.io (MIT OR Apache-2.0)
#   mistralrs-quant  quantized GEMM kernels (CUB, cooperative groups) from crates.io (MIT)
#   cuda-samples  NVIDIA's CUDA samples 11.8, from Debian's contrib package (BSD-3-Clause)
#   causal-conv1d  a PyTorch CUDA extension (torch, ATen, c10, CUB), its sdist on PyPI (BSD-3-Clause)
#   gsplat   a header-heavy CUDA library (glm, its own .cuh headers, PyTorch), its sdist on PyPI (Apache-2.0)
#   unsloth  Triton kernels, some made by `triton.jit(f)` calls, its sdist on PyPI (Apache-2.0)
# Each project gets a compile_commands.json with the include folders its build uses.
# Safe to run again: a project already there is kept.
set -euo pipefail
cd "$(dirname "$0")"
cache=cache
mkdir -p "$cache"
py=${PYTHON:-python3}
[ -x ../../.venv/bin/python3 ] && py=../../.venv/bin/python3

pypi_sdist() { # name version -> path of the downloaded sdist
  "$py" - "$1" "$2" "$cache" <<'PY'
import json, sys, urllib.request, urllib.parse, os
name, version, cache = sys.argv[1:]
# The simple index (PEP 503) works on mirrors too; the sdist is the .tar.gz of the version.
import re
page = urllib.request.urlopen(f"https://pypi.org/simple/{name}/").read().decode()
want = f"{name.replace('-', '_')}-{version}.tar.gz".lower()
url = next(h for h in re.findall(r'href="([^"]+)"', page)
           if h.split("#")[0].rsplit("/", 1)[-1].lower().replace("-", "_") == want.replace("-", "_"))
url = urllib.parse.urljoin(f"https://pypi.org/simple/{name}/", url.split("#")[0])
dest = os.path.join(cache, os.path.basename(url))
if not os.path.exists(dest):
    urllib.request.urlretrieve(url, dest + ".part"); os.rename(dest + ".part", dest)
print(dest)
PY
}

commands() { # dir flags... : compile_commands.json for every .cu under dir
  local dir=$1; shift
  "$py" - "$dir" "$@" <<'PY'
import json, os, sys
d = os.path.abspath(sys.argv[1]); flags = " ".join(sys.argv[2:])
files = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs if f.endswith(".cu"))
json.dump([{"directory": d, "file": f, "command": f"nvcc {flags} -c {f}"} for f in files],
          open(os.path.join(d, "compile_commands.json"), "w"), indent=0)
PY
}

crate() { # name version dest: a crate's sources and Cargo.toml (its license field)
  local tmp; tmp=$(mktemp -d)
  "$py" -c "import urllib.request,sys; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])" \
    "https://static.crates.io/crates/$1/$1-$2.crate" "$tmp/c.tgz"
  tar -xzf "$tmp/c.tgz" -C "$tmp"
  mkdir -p "$3"
  cp "$tmp/$1-$2/Cargo.toml" "$3/"
  cp "$tmp/$1-$2"/LICENSE* "$3/" 2>/dev/null || true
  echo "$tmp/$1-$2"
}

if [ ! -d "$cache/ggml" ]; then
  sd=$(pypi_sdist llama-cpp-python 0.3.36)
  tmp=$(mktemp -d); tar -xzf "$sd" -C "$tmp" --wildcards '*/vendor/llama.cpp/ggml/*' '*/vendor/llama.cpp/LICENSE'
  mkdir -p "$cache/ggml"
  cp -r "$tmp"/*/vendor/llama.cpp/ggml/{include,src} "$cache/ggml/"
  cp "$tmp"/*/vendor/llama.cpp/LICENSE "$cache/ggml/LICENSE"
  rm -rf "$tmp" "$sd"
  # Only the CUDA backend is checked; the other backends' sources are not needed.
  find "$cache/ggml/src" -mindepth 1 -maxdepth 1 -type d ! -name ggml-cuda -exec rm -rf {} +
  commands "$cache/ggml" -Iinclude -Isrc -Isrc/ggml-cuda -DGGML_USE_CUDA -std=c++17 --expt-relaxed-constexpr --extended-lambda -use_fast_math
fi

if [ ! -d "$cache/candle" ]; then
  src=$(crate candle-kernels 0.8.4 "$cache/candle")
  cp -r "$src/src" "$cache/candle/"
  rm -rf "$(dirname "$src")"
  commands "$cache/candle" -Isrc -std=c++17
fi

if [ ! -d "$cache/mistralrs-quant" ]; then
  src=$(crate mistralrs-quant 0.8.1 "$cache/mistralrs-quant")
  cp -r "$src/kernels" "$cache/mistralrs-quant/"
  rm -rf "$(dirname "$src")"
  commands "$cache/mistralrs-quant" -std=c++17 --expt-relaxed-constexpr
fi

if [ ! -d "$cache/cuda-samples" ]; then
  # NVIDIA's CUDA samples 11.8 as Debian packages them (contrib; BSD-3-Clause). Only the
  # sources are kept: the samples and their Common/ headers (helper_cuda.h, helper_math.h).
  deb=nvidia-cuda-samples_11.8~dfsg-2_all.deb
  tmp=$(mktemp -d)
  "$py" -c "import urllib.request,sys; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])" \
    "http://deb.debian.org/debian/pool/contrib/n/nvidia-cuda-samples/$deb" "$tmp/$deb"
  echo "fad5e89ead99dfbd55124180eb56db8e2cea35cedff8e5295e9a23baf73d4134  $tmp/$deb" | sha256sum -c --quiet
  (cd "$tmp" && ar x "$deb" && mkdir x && tar -xf data.tar.* -C x)
  ex="$tmp/x/usr/share/doc/nvidia-cuda-toolkit/examples"
  dest="$PWD/$cache/cuda-samples"
  mkdir -p "$dest"
  (cd "$ex" && find Samples Common -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' \
      -o -name '*.hpp' -o -name '*.inl' \) -print0 | xargs -0 cp --parents -t "$dest")
  cp "$tmp/x/usr/share/doc/nvidia-cuda-samples/copyright" "$cache/cuda-samples/LICENSE"
  rm -rf "$tmp"
  # As the samples' Makefiles build them: -I../../../Common, C++17 for the newest ones.
  commands "$cache/cuda-samples" -ICommon -std=c++17
fi

# PyTorch extensions are built with torch's include folders and Python's (as
# torch.utils.cpp_extension passes them); they come from this machine's torch.
torch_flags() {
  "$py" -c 'import sysconfig, torch.utils.cpp_extension as c
print(" ".join("-I" + p for p in c.include_paths() + [sysconfig.get_paths()["include"]]))'
}

sdist_dir() { # name version: the unpacked sdist's top folder (in a temporary folder)
  local sd tmp; sd=$(pypi_sdist "$1" "$2"); tmp=$(mktemp -d)
  tar -xzf "$sd" -C "$tmp"; rm -f "$sd"
  echo "$tmp"/*
}

if [ ! -d "$cache/causal-conv1d" ]; then
  src=$(sdist_dir causal-conv1d 1.7.0)
  mkdir -p "$cache/causal-conv1d"
  cp -r "$src/csrc" "$src/LICENSE" "$cache/causal-conv1d/"
  rm -rf "$(dirname "$src")"
  # As its setup.py builds it (CUDAExtension, the nvcc flags of a CUDA build).
  commands "$cache/causal-conv1d" -Icsrc $(torch_flags) -std=c++17 -U__CUDA_NO_HALF_OPERATORS__ \
    -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_BFLOAT16_OPERATORS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ \
    --expt-relaxed-constexpr --expt-extended-lambda -use_fast_math
fi

if [ ! -d "$cache/gsplat" ]; then
  # 1.5.0: the later sdists leave out gsplat/cuda/include (Common.h, Utils.cuh).
  src=$(sdist_dir gsplat 1.5.0)
  mkdir -p "$cache/gsplat"
  cp -r "$src/gsplat/cuda/csrc" "$src/gsplat/cuda/include" "$src/LICENSE" "$cache/gsplat/"
  rm -rf "$(dirname "$src")"
  # glm's headers and license only (its docs and tests are 22 MB).
  g="$cache/gsplat/csrc/third_party/glm"
  find "$g" -mindepth 1 -maxdepth 1 ! -name glm ! -name copying.txt -exec rm -rf {} +
  # torch 2.15's headers need C++20 (std::bit_width).
  commands "$cache/gsplat" -Iinclude -Icsrc/third_party/glm $(torch_flags) -std=c++20 \
    --expt-relaxed-constexpr -use_fast_math
fi

if [ ! -d "$cache/unsloth" ]; then
  # Triton: no compile_commands.json; the corpus test checks every .py file that
  # imports triton (kernels.txt lists them).
  src=$(sdist_dir unsloth 2026.3.4)
  mkdir -p "$cache/unsloth"
  cp -r "$src/unsloth/kernels" "$src/LICENSE" "$cache/unsloth/"
  rm -rf "$(dirname "$src")"
  (cd "$cache/unsloth" && grep -rl --include='*.py' -E '^\s*(import triton|from triton)' kernels | sort > triton-files.txt)
fi

du -sh "$cache"/* >&2
