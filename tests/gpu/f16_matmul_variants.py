"""16-bit matmuls in Triton on Hopper (issue #30): which kernel shapes reach cuBLAS
(torch.matmul in the operands' type). Three hand kernels of the same product, f16 or bf16
in and out: `ptr` (one program per tile, pointer arithmetic and masks, as a first draft
writes it), `tma` (the same with tensor descriptors) and `tma_persist` (one program per SM
walking the tiles in grouped order, descriptors: what `triton_persistent_dot` writes),
each at a few launch configurations (BM, BN, BK, num_warps, num_stages, GROUP_M). Timed
as the worker times: 256 MB written between launches, CUDA events, median of 40 after 3
warm-ups. On a machine without a GPU (TRITON_INTERPRET=1) it checks the kernels on small
sizes instead.

    python3 tests/gpu/f16_matmul_variants.py     # on a GPU machine with torch and triton

Record results in docs/benchmarks.md."""
import json, os
import numpy as np, torch, triton, triton.language as tl
from timing import bench

dev = "cuda" if torch.cuda.is_available() else "cpu"
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))


@triton.jit
def mm_ptr(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BLOCK_M)
    npn = tl.cdiv(N, BLOCK_N)
    if GROUP_M > 1:
        width = GROUP_M * npn
        first = pid // width * GROUP_M
        gsz = min(npm - first, GROUP_M)
        pid_m = first + (pid % width) % gsz
        pid_n = (pid % width) // gsz
    else:
        pid_m = pid // npn
        pid_n = pid % npn
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def mm_tma(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BLOCK_M)
    npn = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * npn
    first = pid // width * GROUP_M
    gsz = min(npm - first, GROUP_M)
    pid_m = first + (pid % width) % gsz
    pid_n = (pid % width) // gsz
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(a_d.load([pid_m * BLOCK_M, k]), b_d.load([k, pid_n * BLOCK_N]), acc)
    c_d.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def mm_tma_persist(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    npm = tl.cdiv(M, BLOCK_M)
    npn = tl.cdiv(N, BLOCK_N)
    a_d = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_d = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_d = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    width = GROUP_M * npn
    for tile in tl.range(tl.program_id(0), npm * npn, NUM_SMS, flatten=True):
        first = tile // width * GROUP_M
        gsz = min(npm - first, GROUP_M)
        pid_m = first + (tile % width) % gsz
        pid_n = (tile % width) // gsz
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_d.load([pid_m * BLOCK_M, k]), b_d.load([k, pid_n * BLOCK_N]), acc)
        c_d.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))




def main():
    small = dev == "cpu"
    sms = 4 if small else torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [(130, 70, 96), (72, 80, 96)] if small else [(4096, 4096, 4096), (4000, 4000, 4000), (4095, 4097, 4099)]
    cfgs = [(32, 32, 32, 4, 2, 1), (32, 32, 32, 4, 2, 2)] if small else [
        (64, 64, 32, 4, 2, 1), (128, 256, 64, 8, 3, 8), (128, 256, 64, 8, 4, 8), (128, 128, 64, 4, 4, 8)]
    rows = []
    for dt in [torch.float16] if small else [torch.float16, torch.bfloat16]:
        for (M, N, K) in shapes:
            if dt == torch.bfloat16 and (M, N, K) != (4096, 4096, 4096):
                continue
            a = (torch.rand(M, K, device=dev) - 0.5).to(dt)
            b = (torch.rand(K, N, device=dev) - 0.5).to(dt)
            ref = a.float() @ b.float()
            c = torch.empty(M, N, device=dev, dtype=dt)
            t_cub = None if small else bench(lambda: torch.matmul(a, b, out=c))
            for (bm, bn, bk, w, s, g) in (cfgs[1:3] if dt == torch.bfloat16 else cfgs):
                tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
                kernels = [("ptr", lambda: mm_ptr[(tiles,)](a, b, c, M, N, K, bm, bn, bk, g, num_warps=w, num_stages=s))]
                if N % 8 == 0 and K % 8 == 0 and (bm, bn) != (64, 64):  # TMA: 16-byte strides
                    kernels += [
                        ("tma", lambda: mm_tma[(tiles,)](a, b, c, M, N, K, bm, bn, bk, g, num_warps=w, num_stages=s)),
                        ("tma_persist", lambda: mm_tma_persist[(min(sms, tiles),)](
                            a, b, c, M, N, K, bm, bn, bk, g, sms, num_warps=w, num_stages=s)),
                    ]
                for name, fn in kernels:
                    cfg = (bm, bn, bk, w, s, g)
                    try:
                        c.fill_(float("nan")); fn()
                        err = float((c.float() - ref).abs().max())
                        t = None if small else bench(fn)
                    except Exception as ex:
                        print(f"{M}x{N}x{K} {name} {cfg}: FAILED {str(ex)[:200]}", flush=True)
                        continue
                    ok = err <= 1e-2 + 1e-2 * float(ref.abs().max())
                    rows.append(dict(shape=f"{M}x{N}x{K}", dtype=str(dt)[6:], variant=name, cfg=cfg, ms=t,
                                     cublas_ms=t_cub, maxerr=err, ok=ok))
                    if t:
                        print(f"{M}x{N}x{K} {str(dt)[6:]} {name:12s} {cfg}: {t:.4f} ms  cuBLAS {t_cub:.4f} -> "
                              f"{t_cub / t * 100:.1f}% of cuBLAS speed  err {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
                    else:
                        print(name, cfg, err, "ok" if ok else "WRONG")
    if os.environ.get("OUT"):
        json.dump(rows, open(os.path.join(os.environ["OUT"], "f16_matmul_variants.json"), "w"), indent=1)


main()
