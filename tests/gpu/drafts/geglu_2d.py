"""GEGLU on a [T, 2D] projection, a first draft: out = a * gelu(b) with a the first D
columns and b the last D, on 2-D tiles of BLOCK_T rows by BLOCK_D columns with the
erf GELU."""
import triton
import triton.language as tl


# @bench T = 8192, 37; D = 2048, 515
# @bench x: in f32[T, 2 * D]; out: out f32[T, D]
# @bench grid = (cdiv(T, BLOCK_T), cdiv(D, BLOCK_D)); BLOCK_T = 16; BLOCK_D = 128
# @bench reference = torch: x[:, :D] * torch.nn.functional.gelu(x[:, D:])
# @bench atol = 1e-5; rtol = 1e-5
@triton.jit
def geglu(x, out, T, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_t = tl.program_id(0)
    pid_d = tl.program_id(1)
    rt = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
    rd = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)[None, :]
    mask = (rt < T) & (rd < D)
    a = tl.load(x + rt * (2 * D) + rd, mask=mask, other=0.0)
    b = tl.load(x + rt * (2 * D) + D + rd, mask=mask, other=0.0)
    g = 0.5 * b * (1.0 + tl.math.erf(b * 0.7071067811865476))
    tl.store(out + rt * D + rd, a * g, mask=mask)
