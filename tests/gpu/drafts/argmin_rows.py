"""Index of the minimum of each row, a first draft: one program per row walks the row in
chunks, keeping a lane-wise best value and its column with tl.where, then picks the
smallest value's first column across the lanes."""
import triton
import triton.language as tl


# @bench rows = 8192, 77; cols = 4096, 1001
# @bench x: in f32[rows, cols]; idx: out i32[rows]
# @bench grid = rows; BLOCK = 1024; num_warps = 4
# @bench reference = torch: torch.argmin(x, dim=1)
@triton.jit
def argmin_rows(x, idx, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("inf"), tl.float32)
    at = tl.zeros([BLOCK], tl.int32)
    for start in range(0, cols, BLOCK):
        k = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + k, mask=k < cols, other=float("inf"))
        better = v < best
        best = tl.where(better, v, best)
        at = tl.where(better, k, at)
    low = tl.min(best, axis=0)
    cand = tl.where(best == low, at, cols)
    tl.store(idx + row, tl.min(cand, axis=0))
