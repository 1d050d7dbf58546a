"""Weighted sum over dim 0 of a [B, N] f16 tensor (out[n] = sum_b w[b] * x[b, n]), a
first draft: each program owns BLOCK columns and walks the B rows one at a time with a
while loop, f32 accumulation."""
import triton
import triton.language as tl


# @bench B = 4096, 99; N = 4096, 1001
# @bench x: in f16[B, N]; wt: in f32[B]; out: out f32[N]
# @bench grid = cdiv(N, BLOCK); BLOCK = 256
# @bench atol = 1e-2; rtol = 1e-3
# @bench reference = torch: (wt[:, None] * x.float()).sum(dim=0)
@triton.jit
def weighted_sum_dim0(x, wt, out, B, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < N
    acc = tl.zeros([BLOCK], tl.float32)
    b = 0
    while b < B:
        acc += tl.load(wt + b) * tl.load(x + b * N + cols, mask=ok, other=0.0).to(tl.float32)
        b += 1
    tl.store(out + cols, acc, mask=ok)
