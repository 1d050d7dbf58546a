"""The minimum of each column in Triton, a first draft: each program owns BLOCK columns
and walks the rows with `tl.range`, one row's load in flight at a time; the odd sizes
leave a partial last tile of columns and a grid of 24 programs."""
import triton
import triton.language as tl


# @bench M = 12289, 1001; N = 1531, 77
# @bench x: in f32[M, N] ~ normal(0, 3); lo: out f32[N]
# @bench grid = cdiv(N, BLOCK); BLOCK = 64; num_warps = 2
# @bench reference = torch: x.amin(dim=0)
@triton.jit
def col_min(x, lo, M, N, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    keep = offs < N
    smallest = tl.full((BLOCK,), float("inf"), dtype=tl.float32)
    for row in tl.range(0, M):
        vals = tl.load(x + row * N + offs, mask=keep, other=float("inf"))
        smallest = tl.minimum(smallest, vals)
    tl.store(lo + offs, smallest, mask=keep)
