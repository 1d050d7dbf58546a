"""Row-wise symmetric int8 quantisation of an f16 matrix, a first draft: one program per
row, two passes over the row in chunks of a module-level BLOCK: the absolute maximum,
then q = round(x / scale) with scale = absmax / 127; the scale of each row is written
too."""
import triton
import triton.language as tl

BLOCK = tl.constexpr(512)


# @bench rows = 8192, 77; cols = 4096, 1001
# @bench x: in f16[rows, cols]; q: out i8[rows, cols]; scale: out f32[rows]
# @bench grid = rows
# @bench atol = 1; rtol = 1e-3
# @bench reference = torch: quant_ref.quantize
@triton.jit
def quant_rows(x, q, scale, cols):
    row = tl.program_id(0)
    amax = 0.0
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.max(tl.abs(v), axis=0))
    s = tl.maximum(amax, 1e-8) / 127.0
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + offs, mask=offs < cols, other=0.0).to(tl.float32)
        y = v / s
        y = tl.where(y >= 0, y + 0.5, y - 0.5)
        tl.store(q + row * cols + offs, y.to(tl.int8), mask=offs < cols)
    tl.store(scale + row, s)
