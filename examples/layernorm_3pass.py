"""LayerNorm of each row in Triton, a first draft in the style of the Triton tutorial's
forward pass: one program per row walks the row three times, BLOCK elements at a time,
with lane-vector accumulators: the mean, then the variance around it, then the
normalised, scaled and shifted write. Every row is read three times."""
import triton
import triton.language as tl


# @bench rows = 8192, 31; N = 4096, 1111
# @bench X: in f32[rows, N]; W: in f32[N]; Bias: in f32[N]; Y: out f32[rows, N]
# @bench eps = 1e-5
# @bench grid = rows; BLOCK_SIZE = 1024; num_warps = 8
# @bench atol = 1e-4; rtol = 1e-4
# @bench reference = torch: F.layer_norm(X, (N,), W, Bias, 1e-5)
@triton.jit
def layernorm_3pass(X, W, Bias, Y, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * N
    Y += row * N
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(Bias + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        tl.store(Y + cols, (x - mean) * rstd * w + b, mask=mask)
