"""Dropout with a given keep mask, a first draft: y = x * keep * scale over a flat
tensor, one 1-D block of BLOCK elements a program, the mask read as bytes."""
import triton
import triton.language as tl


# @bench n = 1 << 25, 100001
# @bench x: in f32[n]; keep: in bool[n]; y: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 1024
# @bench reference = torch: x * keep * 1.25
@triton.jit
def dropout_apply(x, keep, y, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m, other=0.0)
    k = tl.load(keep + offs, mask=m, other=0)
    out = tl.where(k != 0, v * 1.25, 0.0)
    tl.store(y + offs, out, mask=m)
