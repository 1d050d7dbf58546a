"""The KernelBench way of checking one CUDA kernel, timed end to end, for comparison with
kernel-lsp's worker (compile + verify + time, printed by the gpu_turnaround test).

KernelBench compiles a candidate with torch.utils.cpp_extension.load_inline (nvcc +
ninja + a C++ binding), checks it against a PyTorch reference on a few random inputs,
then times it with CUDA events. We do the same for the saxpy kernel of the GPU tests
(3 correctness trials, 100 timed runs) in a fresh build folder, so nothing is cached,
at n = 2^20 and n = 2^24 (one compile: it does not depend on n), and print:

    KERNELBENCH_COMPILE_MS=<load_inline alone>
    KERNELBENCH_TURNAROUND_MS=<compile + correctness + timing at 2^20>
    KERNELBENCH_TURNAROUND_24_MS=<compile + correctness + timing at 2^24>

On failure (no torch, no ninja, no nvcc) it prints KERNELBENCH_SKIP=<why> and exits 0,
so tests/gpu/run.sh still prints its table.
"""

import os
import shutil
import sys
import tempfile
import time

CUDA_SRC = r"""
#include <torch/extension.h>

__global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

torch::Tensor saxpy_run(double a, torch::Tensor x, torch::Tensor y) {
    auto out = y.clone();
    int n = x.numel();
    saxpy<<<(n + 255) / 256, 256>>>(n, (float)a, x.data_ptr<float>(), out.data_ptr<float>());
    return out;
}
"""
CPP_SRC = "torch::Tensor saxpy_run(double a, torch::Tensor x, torch::Tensor y);"


def main() -> int:
    try:
        import torch
        from torch.utils.cpp_extension import load_inline
    except Exception as e:  # noqa: BLE001 - report any import problem
        print(f"KERNELBENCH_SKIP=torch unavailable: {e}")
        return 0
    if not torch.cuda.is_available():
        print("KERNELBENCH_SKIP=torch sees no CUDA device")
        return 0
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    # Context creation is outside the measured turnaround, as the worker is warm too.
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()

    build = tempfile.mkdtemp(prefix="kb_saxpy_")
    t0 = time.perf_counter()
    try:
        mod = load_inline(
            name="kb_saxpy",
            cpp_sources=CPP_SRC,
            cuda_sources=CUDA_SRC,
            functions=["saxpy_run"],
            build_directory=build,
            verbose=False,
        )
    except Exception as e:  # noqa: BLE001
        shutil.rmtree(build, ignore_errors=True)
        print(f"KERNELBENCH_SKIP=load_inline failed: {str(e).splitlines()[0] if str(e) else e!r}")
        return 0
    t_compile = time.perf_counter()

    compile_ms = (t_compile - t0) * 1e3
    results = {}
    for tag, n in (("", 1 << 20), ("_24", 1 << 24)):
        t1 = time.perf_counter()
        a = 2.5
        ok = True
        for trial in range(3):
            g = torch.Generator(device="cuda").manual_seed(trial)
            x = torch.rand(n, device="cuda", generator=g) * 2 - 1
            y = torch.randn(n, device="cuda", generator=g)
            got = mod.saxpy_run(a, x, y)
            want = a * x + y
            torch.cuda.synchronize()
            ok &= bool(torch.allclose(got, want, atol=1e-5, rtol=1e-4))
        x = torch.rand(n, device="cuda")
        y = torch.randn(n, device="cuda")
        for _ in range(3):
            mod.saxpy_run(a, x, y)
        times = []
        for _ in range(100):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            mod.saxpy_run(a, x, y)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        results[tag] = (ok, times[len(times) // 2], (time.perf_counter() - t1) * 1e3)
    shutil.rmtree(build, ignore_errors=True)

    print(f"KERNELBENCH_COMPILE_MS={compile_ms:.0f}")
    for tag, (ok, med, check_ms) in results.items():
        print(f"KERNELBENCH{tag}_CORRECT={ok}")
        print(f"KERNELBENCH{tag}_MEDIAN_KERNEL_MS={med:.4f}")
        print(f"KERNELBENCH_TURNAROUND{tag}_MS={compile_ms + check_ms:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
