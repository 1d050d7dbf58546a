"""Row L2-normalisation of a bf16 matrix, a first draft: one program per row holds the
whole row (BLOCK = next_pow2(cols)), a helper sums the squares in f32."""
import triton
import triton.language as tl


@triton.jit
def _sum_sq(v):
    return tl.sum(v * v, axis=0)


# @bench rows = 16384, 77; cols = 2048, 1001
# @bench x_ptr: in bf16[rows, cols]; out_ptr: out bf16[rows, cols]
# @bench grid = rows; BLOCK = next_pow2(cols); eps = 1e-12
# @bench atol = 1e-2; rtol = 1e-2
# @bench reference = torch: F.normalize(x_ptr.float(), dim=-1, eps=1e-12)
@triton.jit
def l2_normalize(x_ptr, out_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    norm = tl.sqrt(_sum_sq(x))
    y = x / tl.maximum(norm, eps)
    tl.store(out_ptr + row * cols + offs, y.to(tl.bfloat16), mask=mask)
