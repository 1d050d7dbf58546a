"""A row softmax under a boolean keep-mask (masked positions get probability 0), a first
draft: one program per row, the whole row in one BLOCK-wide tile, the mask read as
bytes and turned into -inf before the max."""
import triton
import triton.language as tl


# @bench M = 16384, 29; N = 1024, 333
# @bench x: in f32[M, N]; keep: in bool[M, N]; y: out f32[M, N]
# @bench grid = M; BLOCK = next_pow2(N); num_warps = 4
# @bench reference = torch: torch.softmax(x.masked_fill(~keep, float("-inf")), dim=-1)
@triton.jit
def masked_softmax_rows(x, keep, y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inb = cols < N
    v = tl.load(x + row * N + cols, mask=inb, other=float("-inf"))
    k = tl.load(keep + row * N + cols, mask=inb, other=0)
    v = tl.where(k != 0, v, float("-inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(y + row * N + cols, e / tl.sum(e, axis=0), mask=inb)
