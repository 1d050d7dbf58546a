"""The largest magnitude of each row in Triton, a first draft: each program owns ROWS
rows and walks the columns one at a time, so neighbouring lanes read addresses a whole
row (C elements) apart."""
import triton
import triton.language as tl


# @bench R = 6000, 97; C = 2500, 333
# @bench x: in f32[R, C]; amax: out f32[R]
# @bench grid = cdiv(R, ROWS); ROWS = 32
# @bench reference = torch: x.abs().amax(dim=1)
@triton.jit
def row_absmax(x, amax, R, C, ROWS: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    ok = r < R
    best = tl.full([ROWS], -float("inf"), tl.float32)
    for c in range(C):
        best = tl.maximum(best, tl.abs(tl.load(x + r * C + c, mask=ok, other=0.0)))
    tl.store(amax + r, best, mask=ok)
