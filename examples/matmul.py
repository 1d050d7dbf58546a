"""C = A @ B in Triton, a first draft: one program per output tile, launched over a 2-D
grid in row-major tile order, with the block sizes picked once by hand."""
import triton
import triton.language as tl


# @bench M = 4096, 100; N = 4096, 72; K = 4096, 40
# @bench a_ptr: in f16[M, K]; b_ptr: in f16[K, N]; c_ptr: out f32[M, N]
# @bench grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); BLOCK_M = 64; BLOCK_N = 64; BLOCK_K = 32
# @bench atol = 1e-2; rtol = 1e-2
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
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
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
