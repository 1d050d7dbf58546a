"""Logsumexp of each row in Triton, a first draft: while loops walk the row twice, once
for its maximum and once for the sum of exp2 of the shifted values, then one value per
row is written. Two reads of every row."""
import triton
import triton.language as tl


# @bench R = 16384, 33; C = 2048, 1500
# @bench inp: in f32[R, C] ~ normal(0, 3); out: out f32[R]
# @bench grid = R; TILE = 256; num_warps = 4
# @bench reference = torch: torch.logsumexp(inp, dim=1)
@triton.jit
def logsumexp_rows(inp, out, C, TILE: tl.constexpr):
    r = tl.program_id(axis=0)
    LOG2E: tl.constexpr = 1.4426950408889634
    hi = float("-inf")
    c = 0
    while c < C:
        idx = c + tl.arange(0, TILE)
        v = tl.load(inp + r * C + idx, idx < C, float("-inf"))
        hi = tl.maximum(hi, tl.max(v, 0))
        c += TILE
    acc = 0.0
    c = 0
    while c < C:
        idx = c + tl.arange(0, TILE)
        v = tl.load(inp + r * C + idx, idx < C, float("-inf"))
        shifted = (v - hi) * LOG2E
        acc = acc + tl.sum(tl.exp2(shifted), 0)
        c += TILE
    tl.store(out + r, hi + tl.log2(acc) / LOG2E)
