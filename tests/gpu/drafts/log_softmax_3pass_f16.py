"""log_softmax over the last dim of an f16 matrix, a first draft: one program per row,
three passes over the row in chunks (chunk-index loops, as in the matmul tutorial):
the max, the sum of exponentials, then x - max - log(sum). f32 accumulation, strides
passed as arguments."""
import triton
import triton.language as tl


# @bench M = 8192, 77; N = 4096, 1001
# @bench x_ptr: in f16[M, N] ~ normal(0, 2); y_ptr: out f16[M, N]
# @bench stride_xm = N; stride_ym = N
# @bench grid = M; BLOCK = 1024; num_warps = 4
# @bench atol = 1e-2; rtol = 1e-2
# @bench reference = torch: torch.log_softmax(x_ptr.float(), dim=-1)
@triton.jit
def log_softmax_rows(x_ptr, y_ptr, stride_xm, stride_ym, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    for i in range(0, tl.cdiv(N, BLOCK)):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        m = tl.maximum(m, x)
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for i in range(0, tl.cdiv(N, BLOCK)):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        s += tl.exp(x - row_max)
    lse = row_max + tl.log(tl.sum(s, axis=0))
    for i in range(0, tl.cdiv(N, BLOCK)):
        cols = i * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x - lse).to(tl.float16), mask=cols < N)
