"""The L2 norm of each column in Triton, a first draft: one program per column walks down
the rows BLOCK at a time, so neighbouring lanes read elements a whole row apart (one
memory sector per lane) and the grid has one program per column."""
import triton
import triton.language as tl


# @bench M = 8192, 1000; N = 2048, 333
# @bench x: in f32[M, N]; out: out f32[N]
# @bench grid = N; BLOCK = 128; num_warps = 4
# @bench reference = torch: torch.linalg.vector_norm(x, dim=0)
@triton.jit
def col_norm(x, out, M, N, BLOCK: tl.constexpr):
    col = tl.program_id(0)
    sumsq = 0.0
    for r0 in range(0, M, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        v = tl.load(x + r * N + col, mask=r < M, other=0.0)
        sumsq += tl.sum(v * v, axis=0)
    tl.store(out + col, tl.sqrt(sumsq))
