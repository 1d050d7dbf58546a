"""torch.logsumexp(x, dim=0) of an f32 matrix, a first draft: each program owns BLOCK_N
neighbouring columns and walks the rows BLOCK_M at a time with a 2-D tile, keeping a
running maximum and a rescaled running sum per column (one pass over x)."""
import triton
import triton.language as tl


# @bench M = 8192, 333; N = 2048, 77
# @bench x: in f32[M, N] ~ normal(0, 3); out: out f32[N]
# @bench grid = cdiv(N, BLOCK_N); BLOCK_M = 16; BLOCK_N = 128
# @bench atol = 1e-4; rtol = 1e-4
# @bench reference = torch: torch.logsumexp(x, dim=0)
@triton.jit
def logsumexp_dim0(x, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    m = tl.full([BLOCK_N], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_N], dtype=tl.float32)
    for r0 in range(0, M, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        tile = tl.load(x + rows[:, None] * N + cols[None, :],
                       mask=(rows[:, None] < M) & col_mask[None, :], other=float("-inf"))
        new_m = tl.maximum(m, tl.max(tile, axis=0))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(tile - new_m[None, :]), axis=0)
        m = new_m
    tl.store(out + cols, m + tl.log(s), mask=col_mask)
