"""Mean over dim 0 (the mean of each column) in Triton, a first draft: each program owns
BLOCK neighbouring columns and walks every row one at a time, so the loads are coalesced
but each program has one row's load in flight and the grid is N / BLOCK programs."""
import triton
import triton.language as tl


# @bench M = 16384, 1001; N = 1024, 300
# @bench x: in f32[M, N]; out: out f32[N]
# @bench grid = cdiv(N, BLOCK); BLOCK = 128; num_warps = 4
# @bench reference = torch: x.mean(dim=0)
@triton.jit
def col_mean(x, out, M, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(0, M):
        acc += tl.load(x + r * N + cols, mask=inside, other=0.0)
    tl.store(out + cols, acc / M, mask=inside)
