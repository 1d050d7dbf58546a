"""Mean over the middle dim of a [B, S, D] tensor, a first draft: a 2-D grid of
(D tiles, batch) with tl.program_id(1) the batch, each program walks the S rows of its
column tile and accumulates a BLOCK_D vector."""
import triton
import triton.language as tl


# @bench B = 32, 3; S = 512, 77; D = 1024, 333
# @bench x: in f32[B, S, D]; out: out f32[B, D]
# @bench grid = (cdiv(D, BLOCK_D), B); BLOCK_D = 128
# @bench reference = torch: x.mean(dim=1)
# @bench atol = 1e-5; rtol = 1e-5
@triton.jit
def mean_middim(x, out, S, D, BLOCK_D: tl.constexpr):
    pid_d = tl.program_id(0)
    b = tl.program_id(1)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    m = cols < D
    acc = tl.zeros([BLOCK_D], tl.float32)
    for s in range(0, S):
        acc += tl.load(x + (b * S + s) * D + cols, mask=m, other=0.0)
    tl.store(out + b * D + cols, acc / S, mask=m)
