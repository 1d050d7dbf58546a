"""Residual add + RMSNorm fused, bf16, a first draft: one program per row; the first
pass adds the residual, writes the sum (the next layer's residual) and accumulates its
squares in f32; the second pass adds again and writes the normalised, weighted row."""
import triton
import triton.language as tl


# @bench rows = 8192, 77; D = 4096, 1001
# @bench x: in bf16[rows, D]; res: in bf16[rows, D]; w: in bf16[D]
# @bench h: out bf16[rows, D]; y: out bf16[rows, D]
# @bench eps = 1e-6
# @bench grid = rows; BLOCK_D = 1024; num_warps = 8
# @bench atol = 2e-2; rtol = 2e-2
# @bench reference = torch: ((x.float() + res.float()), (x.float() + res.float()) * torch.rsqrt((x.float() + res.float()).pow(2).mean(-1, keepdim=True) + 1e-6) * w.float())
@triton.jit
def add_rmsnorm(x, res, w, h, y, D, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row * D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for off in range(0, D, BLOCK_D):
        cols = off + tl.arange(0, BLOCK_D)
        mask = cols < D
        a = tl.load(x + base + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(res + base + cols, mask=mask, other=0.0).to(tl.float32)
        s = a + b
        tl.store(h + base + cols, s.to(tl.bfloat16), mask=mask)
        acc += s * s
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / D + eps)
    for off in range(0, D, BLOCK_D):
        cols = off + tl.arange(0, BLOCK_D)
        mask = cols < D
        a = tl.load(x + base + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(res + base + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(w + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y + base + cols, ((a + b) * rstd * g).to(tl.bfloat16), mask=mask)
