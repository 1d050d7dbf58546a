"""Cumulative sum along each row in Triton, a first draft: one program per row walks the
row BLOCK elements at a time, scanning each block with tl.cumsum and adding the running
total of the blocks before it, carried from one iteration to the next."""
import triton
import triton.language as tl


# @bench rows = 8192, 19; cols = 4096, 777
# @bench x: in f32[rows, cols]; y: out f32[rows, cols]
# @bench grid = rows; BLOCK = 256; num_warps = 4
# @bench atol = 1e-3; rtol = 1e-4
# @bench reference = torch: torch.cumsum(x, dim=1)
@triton.jit
def cumsum_rows(x, y, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    running = 0.0
    for start in tl.range(0, cols, BLOCK):
        k = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + k, mask=k < cols, other=0.0)
        tl.store(y + row * cols + k, running + tl.cumsum(v, axis=0), mask=k < cols)
        running += tl.sum(v, axis=0)
