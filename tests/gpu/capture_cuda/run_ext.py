"""Builds ext.cu as a PyTorch extension (torch.utils.cpp_extension with ninja, else nvcc
by hand), calls each of its kernels on two shapes and checks every result against
PyTorch: under `kernel-lsp capture` this also shows the capture left each result as one
launch would (the shim replays launches and puts the memory back)."""
import importlib.util
import os
import subprocess
import sys
import sysconfig

import torch
from torch.utils import cpp_extension

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("CAPEXT_BUILD", "/tmp/capext_build")


def _paths(fn):
    try:
        return fn(device_type="cuda")
    except TypeError:
        return fn(cuda=True)


def build_by_hand():
    os.makedirs(BUILD, exist_ok=True)
    so = os.path.join(BUILD, "capext.so")
    if not os.path.exists(so):
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        cmd = ["nvcc", "-O2", "-std=c++17", "--shared", "-Xcompiler", "-fPIC", "-cudart", "shared",
               "-DTORCH_EXTENSION_NAME=capext", "-DTORCH_API_INCLUDE_EXTENSION_H",
               f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I" + sysconfig.get_paths()["include"]]
        cmd += ["-I" + p for p in _paths(cpp_extension.include_paths)]
        cmd += [os.path.join(HERE, "ext.cu"), "-o", so]
        cmd += ["-L" + p for p in _paths(cpp_extension.library_paths)]
        cmd += ["-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-ltorch_python"]
        subprocess.run(cmd, check=True)
    spec = importlib.util.spec_from_file_location("capext", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build():
    if cpp_extension.is_ninja_available():
        os.makedirs(BUILD, exist_ok=True)
        return cpp_extension.load(name="capext", sources=[os.path.join(HERE, "ext.cu")],
                                  build_directory=BUILD, extra_cuda_cflags=["-O2"])
    print("capext: no ninja; building with nvcc by hand", file=sys.stderr)
    return build_by_hand()


def main():
    ext = build()
    torch.manual_seed(0)
    dev = "cuda"
    for n in (1 << 20, 5001):
        x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
        torch.testing.assert_close(ext.scale_add(x, y, 0.5), 0.5 * x + y)
    for rows, cols in ((512, 1024), (37, 100)):
        x, b = torch.randn(rows, cols, device=dev), torch.randn(cols, device=dev)
        torch.testing.assert_close(ext.bias_relu(x, b), torch.relu(x + b))
        torch.testing.assert_close(ext.row_sum(x), x.sum(1), rtol=1e-4, atol=1e-3)
    for n in (1 << 18, 999):
        y, x = torch.randn(n, device=dev), torch.randn(n, device=dev)
        want = y + 2.0 * x
        ext.axpy_(y, x, 2.0)
        torch.testing.assert_close(y, want)
    print("capext: every result matches PyTorch")


if __name__ == "__main__":
    main()
