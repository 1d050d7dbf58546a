"""Sum of all elements of a vector, a first draft by someone who wants no atomics: one
program (grid = (1,)) walks the whole vector BLOCK elements at a time into a lane-wise
accumulator and reduces it once at the end."""
import triton
import triton.language as tl


# @bench n = 1 << 24, 99991
# @bench x: in f32[n]; out: out f32[1]
# @bench grid = (1,); BLOCK = 1024
# @bench atol = 1e-2; rtol = 1e-4
# @bench reference = torch: x.double().sum().float()
@triton.jit
def total_sum(x, out, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x + offs, mask=offs < n, other=0.0)
    tl.store(out, tl.sum(acc, axis=0))
