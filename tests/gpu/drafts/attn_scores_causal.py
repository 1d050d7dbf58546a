"""Causal attention scores S = scale * Q K^T with the upper triangle set to -inf, f16
inputs, f32 scores, a first draft: one program per (query block, key block, batch*head)
on a 3-D grid, one tl.dot over the whole head dimension (64)."""
import triton
import triton.language as tl


# @bench BH = 16, 3; L = 1024, 77; HD = 64
# @bench q: in f16[BH, L, HD]; k: in f16[BH, L, HD]; s: out f32[BH, L, L]
# @bench scale = 0.125
# @bench grid = (cdiv(L, BM), cdiv(L, BN), BH); BM = 64; BN = 64
# @bench atol = 1e-2; rtol = 1e-2
# @bench reference = torch: (q.float() @ k.float().transpose(1, 2) * 0.125).masked_fill(torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
@triton.jit
def attn_scores(q, k, s, L, scale, HD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    bh = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    d = tl.arange(0, HD)
    qt = tl.load(q + bh * L * HD + rm[:, None] * HD + d[None, :], mask=rm[:, None] < L, other=0.0)
    kt = tl.load(k + bh * L * HD + rn[:, None] * HD + d[None, :], mask=rn[:, None] < L, other=0.0)
    acc = tl.dot(qt, tl.trans(kt)) * scale
    acc = tl.where(rn[None, :] > rm[:, None], float("-inf"), acc)
    out = s + bh * L * L + rm[:, None] * L + rn[None, :]
    tl.store(out, acc, mask=(rm[:, None] < L) & (rn[None, :] < L))
