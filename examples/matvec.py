"""Matrix-vector product y = A @ v in Triton, a first draft: each program owns ROWS rows
and walks the columns one at a time, multiplying a column of A by one element of v.
Neighbouring lanes read addresses K elements apart."""
import triton
import triton.language as tl


# @bench M = 8192, 77; K = 4096, 1234
# @bench A: in f32[M, K]; v: in f32[K]; y: out f32[M]
# @bench grid = cdiv(M, ROWS); ROWS = 64; num_warps = 4
# @bench reference = torch: A @ v
# @bench atol = 1e-3; rtol = 1e-3
@triton.jit
def matvec(A, v, y, M, K, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < M
    dot = tl.zeros((ROWS,), tl.float32)
    for k in tl.range(0, K):
        a = tl.load(A + rows * K + k, mask=live, other=0.0)
        dot = dot + a * tl.load(v + k)
    tl.store(y + rows, dot, mask=live)
