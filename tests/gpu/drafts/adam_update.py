"""A fused Adam step over a flat f32 parameter vector, a first draft: one program per
BLOCK elements updates the parameters and both moment buffers in place (bias
corrections c1 = 1 - b1**t and c2 = 1 - b2**t passed in)."""
import triton
import triton.language as tl


# @bench n = 1 << 24, 100003
# @bench p: inout f32[n]; m: inout f32[n] ~ normal(0, 1); v: inout f32[n] ~ uniform(0, 1); g: in f32[n]
# @bench lr = 0.001; b1 = 0.9; b2 = 0.999; eps = 1e-8; c1 = 0.271; c2 = 0.00995
# @bench grid = cdiv(n, BLOCK); BLOCK = 1024
# @bench reference = torch: (p - lr * ((b1 * m + (1 - b1) * g) / c1) / (((b2 * v + (1 - b2) * g * g) / c2).sqrt() + eps), b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g)
@triton.jit
def adam_update(p, m, v, g, n, lr, b1, b2, eps, c1, c2, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    gr = tl.load(g + offs, mask=mask)
    mt = b1 * tl.load(m + offs, mask=mask) + (1 - b1) * gr
    vt = b2 * tl.load(v + offs, mask=mask) + (1 - b2) * gr * gr
    upd = (mt / c1) / (tl.sqrt(vt / c2) + eps)
    tl.store(p + offs, tl.load(p + offs, mask=mask) - lr * upd, mask=mask)
    tl.store(m + offs, mt, mask=mask)
    tl.store(v + offs, vt, mask=mask)
