"""out = x + y.T for square-ish [M, N] and [N, M] inputs, a first draft: 2-D tiles of
BLOCK_M by BLOCK_N, y's tile loaded through its transposed strides."""
import triton
import triton.language as tl


# @bench M = 4096, 333; N = 4096, 77
# @bench x: in f32[M, N]; y: in f32[N, M]; out: out f32[M, N]
# @bench grid = (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); BLOCK_M = 32; BLOCK_N = 32
# @bench reference = torch: x + y.t()
@triton.jit
def transpose_add(x, y, out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    a = tl.load(x + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    b = tl.load(y + rn[None, :] * M + rm[:, None], mask=mask, other=0.0)
    tl.store(out + rm[:, None] * N + rn[None, :], a + b, mask=mask)
