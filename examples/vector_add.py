"""Element-wise add in Triton, with a deliberately small BLOCK to tune."""
import triton
import triton.language as tl


# @bench n = 1 << 24, 1000
# @bench x_ptr: in f32[n]; y_ptr: in f32[n]; out_ptr: out f32[n]
# @bench grid = cdiv(n, BLOCK); BLOCK = 64; num_warps = 4
# @bench tune BLOCK in [64, 256, 1024, 2048]
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
