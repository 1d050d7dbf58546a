"""F.avg_pool1d(x, kernel_size=4, stride=2) on an [N*C, L] f32 signal, a first draft: a
2-D grid, tl.program_id(1) the row and tl.program_id(0) a block of BLOCK outputs; each
output sums its K taps with a static loop over masked loads."""
import triton
import triton.language as tl


# @bench R = 4096, 7; L = 4096, 1000
# @bench LOUT = (L - K) / S + 1
# @bench x: in f32[R, L]; out: out f32[R, LOUT]
# @bench grid = (cdiv(LOUT, BLOCK), R); BLOCK = 512; K = 4; S = 2
# @bench reference = torch: F.avg_pool1d(x[:, None, :], 4, 2)[:, 0, :]
@triton.jit
def avg_pool1d(x, out, L, LOUT, K: tl.constexpr, S: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1)
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = o < LOUT
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in tl.static_range(K):
        acc += tl.load(x + row * L + o * S + k, mask=mask, other=0.0)
    tl.store(out + row * LOUT + o, acc / K, mask=mask)
