"""Embedding bag in mean mode (out[b, :] = mean over j of table[idx[b, j], :]), a first
draft: one program per bag, the whole embedding row in one BLOCK_D vector, a loop over
the bag's indices."""
import triton
import triton.language as tl


# @bench B = 4096, 37; L = 20, 3; D = 768, 97; V = 50000, 1003
# @bench idx: in i32[B, L] ~ randint(0, V); table: in f32[V, D]; out: out f32[B, D]
# @bench grid = (B,); BLOCK_D = 1024
# @bench reference = torch: F.embedding_bag(idx.long(), table, mode="mean")
@triton.jit
def embedding_bag_mean(idx, table, out, B, L, D, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j in range(L):
        row = tl.load(idx + b * L + j).to(tl.int64)
        acc += tl.load(table + row * D + d, mask=ok, other=0.0)
    tl.store(out + b * D + d, acc / L, mask=ok)
