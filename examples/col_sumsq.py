"""The sum of squares of each column in Triton, a first draft in the `while` style: each
program owns BLOCK_N columns, squares one row's values into a local and adds it to the
running total, row after row."""
import triton
import triton.language as tl


# @bench M = 20000, 513; N = 768, 100
# @bench x: in f32[M, N]; ss: out f32[N]
# @bench grid = cdiv(N, BLOCK_N); BLOCK_N = 32
# @bench reference = torch: (x * x).sum(dim=0)
# @bench rtol = 1e-3
@triton.jit
def col_sumsq(x, ss, M, N, BLOCK_N: tl.constexpr):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    m = 0
    while m < M:
        v = tl.load(x + m * N + n, mask=n < N, other=0.0)
        total += v * v
        m += 1
    tl.store(ss + n, total, mask=n < N)
