"""Batch-norm inference over an NCHW tensor, a first draft: one program per BLOCK of
flat elements, the channel of each element computed as (offs // HW) % C, per-channel
mean, variance, weight and bias gathered."""
import triton
import triton.language as tl


# @bench N = 32, 3; C = 128, 7; HW = 4096, 77
# @bench x: in f32[N, C, HW]; mean: in f32[C]; var: in f32[C] ~ uniform(0.5, 2)
# @bench w: in f32[C]; b: in f32[C]; y: out f32[N, C, HW]
# @bench total = N * C * HW; eps = 1e-5
# @bench grid = cdiv(total, BLOCK); BLOCK = 1024
# @bench atol = 1e-4; rtol = 1e-4
# @bench reference = torch: F.batch_norm(x.view(N, C, HW), mean, var, w, b, False, 0.0, 1e-5)
@triton.jit
def batchnorm_infer(x, mean, var, w, b, y, total, C, HW, eps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    c = (offs // HW) % C
    v = tl.load(x + offs, mask=mask, other=0.0)
    mu = tl.load(mean + c, mask=mask, other=0.0)
    sd = tl.sqrt(tl.load(var + c, mask=mask, other=1.0) + eps)
    g = tl.load(w + c, mask=mask, other=1.0)
    bb = tl.load(b + c, mask=mask, other=0.0)
    tl.store(y + offs, (v - mu) / sd * g + bb, mask=mask)
