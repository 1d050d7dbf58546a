"""Row-wise softmax in Triton: one program per row."""
import triton
import triton.language as tl


# @bench rows = 4096, 3; cols = 1024, 77
# @bench x_ptr: in f32[rows, cols]; out_ptr: out f32[rows, cols]
# @bench n_cols = cols; stride = cols
# @bench BLOCK = next_pow2(cols); grid = rows; num_warps = 4
# @bench tune num_warps in [2, 4, 8]
@triton.jit
def softmax_kernel(out_ptr, x_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)
