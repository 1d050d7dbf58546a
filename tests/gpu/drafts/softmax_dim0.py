"""Softmax over dim 0 (down each column) of an f32 matrix, a first draft: each program
owns BLOCK_N neighbouring columns and walks the rows one at a time, three times (max,
sum of exponentials, write)."""
import triton
import triton.language as tl


# @bench M = 4096, 99; N = 4096, 1001
# @bench x: in f32[M, N]; y: out f32[M, N]
# @bench grid = cdiv(N, BLOCK_N); BLOCK_N = 64
# @bench reference = torch: torch.softmax(x, dim=0)
@triton.jit
def softmax_dim0(x, y, M, N, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    for r in range(M):
        m = tl.maximum(m, tl.load(x + r * N + cols, mask=ok, other=-float("inf")))
    s = tl.zeros([BLOCK_N], tl.float32)
    for r in range(M):
        s += tl.exp(tl.load(x + r * N + cols, mask=ok, other=-float("inf")) - m)
    for r in range(M):
        v = tl.load(x + r * N + cols, mask=ok, other=0.0)
        tl.store(y + r * N + cols, tl.exp(v - m) / s, mask=ok)
