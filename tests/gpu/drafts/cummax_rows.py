"""Cumulative maximum along each row, a first draft: one program per row walks the row
in chunks, scans each chunk with tl.associative_scan and a combine helper, and carries
the running maximum of the chunks before it."""
import triton
import triton.language as tl


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


# @bench rows = 8192, 77; cols = 4096, 1001
# @bench x: in f32[rows, cols]; y: out f32[rows, cols]
# @bench grid = rows; BLOCK = 512; num_warps = 4
# @bench reference = torch: torch.cummax(x, dim=1).values
@triton.jit
def cummax_rows(x, y, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    carry = -float("inf")
    for start in range(0, cols, BLOCK):
        k = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * cols + k, mask=k < cols, other=-float("inf"))
        c = tl.associative_scan(v, 0, _max_combine)
        tl.store(y + row * cols + k, tl.maximum(c, carry), mask=k < cols)
        carry = tl.maximum(carry, tl.max(v, axis=0))
