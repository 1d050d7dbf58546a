"""The largest value of each row and how many times it occurs, a first draft: one
program per row, two passes over the row in chunks (the maximum, then the count of
elements equal to it); two outputs."""
import triton
import triton.language as tl


# @bench rows = 8192, 77; cols = 4096, 1001
# @bench x: in f32[rows, cols] ~ randint(0, 50); top: out f32[rows]; cnt: out i32[rows]
# @bench grid = rows; BLOCK = 256
# @bench reference = torch: (x.amax(dim=1), (x == x.amax(dim=1, keepdim=True)).sum(dim=1))
@triton.jit
def row_max_count(x, top, cnt, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    ptr = x + row * cols
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, cols, BLOCK):
        k = start + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(ptr + k, mask=k < cols, other=-float("inf")))
    best = tl.max(m, axis=0)
    n = tl.zeros([BLOCK], tl.int32)
    for start in range(0, cols, BLOCK):
        k = start + tl.arange(0, BLOCK)
        v = tl.load(ptr + k, mask=k < cols, other=-float("inf"))
        n += tl.where(v == best, 1, 0)
    tl.store(top + row, best)
    tl.store(cnt + row, tl.sum(n, axis=0))
