"""Mean over the last dim of a [B, S, D] tensor with a short last dim, a first draft: a
2-D grid, one program per (batch, position), each reads its D = 64 contiguous values."""
import triton
import triton.language as tl


# @bench B = 16, 3; S = 8192, 1001; D = 64, 77
# @bench x: in f32[B, S, D]; out: out f32[B, S]
# @bench grid = (B, S); BLOCK_D = next_pow2(D)
# @bench reference = torch: x.mean(dim=-1)
@triton.jit
def mean_lastdim(x, out, S, D, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    s = tl.program_id(1)
    offs = tl.arange(0, BLOCK_D)
    v = tl.load(x + (b * S + s) * D + offs, mask=offs < D, other=0.0)
    tl.store(out + b * S + s, tl.sum(v, axis=0) / D)
