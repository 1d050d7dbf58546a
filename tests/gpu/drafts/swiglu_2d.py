"""SwiGLU over the two halves of the last dim, bf16, a first draft: a 2-D grid of
(row, column block) programs, strides passed as arguments, a helper for SiLU in f32."""
import triton
import triton.language as tl


@triton.jit
def _silu(v):
    return v * tl.sigmoid(v)


# @bench M = 8192, 77; N = 2048, 1001
# @bench xg: in bf16[M, 2 * N]; out: out bf16[M, N]
# @bench stride_xm = 2 * N; stride_om = N
# @bench grid = (M, cdiv(N, BLOCK_N)); BLOCK_N = 256
# @bench atol = 2e-2; rtol = 2e-2
# @bench reference = torch: F.silu(xg[:, :N].float()) * xg[:, N:].float()
@triton.jit
def swiglu(xg, out, stride_xm, stride_om, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    gate = tl.load(xg + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(xg + row * stride_xm + N + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + row * stride_om + cols, (_silu(gate) * up).to(tl.bfloat16), mask=mask)
