"""Column sums of an f32 matrix (x.sum(dim=0)), a first draft: each program owns
BLOCK_N neighbouring columns and walks the rows BLOCK_M at a time with a 2-D tile,
reducing every tile over its rows."""
import triton
import triton.language as tl


# @bench M = 8192, 77; N = 2048, 301
# @bench x: in f32[M, N]; out: out f32[N]
# @bench grid = cdiv(N, BLOCK_N); BLOCK_M = 32; BLOCK_N = 64
# @bench atol = 1e-3; rtol = 1e-4
# @bench reference = torch: x.sum(dim=0)
@triton.jit
def col_sum_tiles(x, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for r0 in range(0, M, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        tile = tl.load(x + rows[:, None] * N + cols[None, :],
                       mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out + cols, acc, mask=cols < N)
