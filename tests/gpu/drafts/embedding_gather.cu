// A first draft of an embedding lookup: out[t, :] = table[idx[t], :], one thread per
// output element from a flat index split into token and feature.
#define BLOCK 256

// @bench T = 16384, 77; D = 1024, 99; V = 32000, 1001
// @bench idx: in i64[T] ~ randint(0, V); table: in f32[V, D]; out: out f32[T, D]
// @bench grid = cdiv(T * D, BLOCK); block = BLOCK
// @bench reference = torch: F.embedding(idx, table)
__global__ void embedding_gather(const long long* idx, const float* table, float* out, int T, int D, int V) {
    size_t i = (size_t)blockIdx.x * BLOCK + threadIdx.x;
    if (i < (size_t)T * D) {
        size_t t = i / D;
        size_t d = i % D;
        out[i] = table[idx[t] * D + d];
    }
}
