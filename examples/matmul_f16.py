"""C = A @ B in half precision in Triton, a first draft: one program per output tile of
f16 (accumulated in f32), a 2-D grid in row-major tile order, block sizes picked once by
hand. The bar is cuBLAS (`torch.matmul` on f16)."""
import triton
import triton.language as tl


# @bench M = 4096, 100; N = 4096, 72; K = 4096, 40
# @bench a: in f16[M, K]; b: in f16[K, N]; c: out f16[M, N]
# @bench grid = (cdiv(M, BM), cdiv(N, BN)); BM = 64; BN = 64; BK = 32
# @bench reference = torch: a @ b
@triton.jit
def matmul_f16(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rows[:, None] * K + (k + ks)[None, :],
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
        y = tl.load(b + (k + ks)[:, None] * N + cols[None, :],
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rows[:, None] * N + cols[None, :], acc.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))
