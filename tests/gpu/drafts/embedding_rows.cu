// A first draft of an embedding lookup written one token per thread: each thread copies
// its token's whole row of the table.
// @bench T = 16384, 77; D = 1024, 99; V = 32000, 1001
// @bench idx: in i32[T] ~ randint(0, V); table: in f32[V, D]; out: out f32[T, D]
// @bench grid = cdiv(T, 128); block = 128
// @bench reference = torch: F.embedding(idx.long(), table)
__global__ void embedding_rows(const int* __restrict__ idx, const float* __restrict__ table,
                               float* __restrict__ out, int T, int D) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float* src = table + (size_t)idx[t] * D;
    float* dst = out + (size_t)t * D;
    for (int d = 0; d < D; ++d) dst[d] = src[d];
}
