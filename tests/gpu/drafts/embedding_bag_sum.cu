// A first draft of an embedding bag (sum mode): out[b, :] = sum over j of table[idx[b, j], :].
// A 2-D grid, x over features and y over bags; each thread walks its bag's indices.
// @bench B = 4096, 37; L = 16, 5; D = 512, 129; V = 50000, 1003
// @bench idx: in i64[B, L] ~ randint(0, V); table: in f32[V, D]; out: out f32[B, D]
// @bench grid = (cdiv(D, 128), B); block = 128
// @bench reference = torch: F.embedding_bag(idx, table, mode="sum")
__global__ void embedding_bag_sum(const long long* __restrict__ idx, const float* __restrict__ table,
                                  float* __restrict__ out, int B, int L, int D) {
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (d >= D) return;
    const long long* bag = idx + (size_t)b * L;
    float acc = 0.0f;
    for (int j = 0; j < L; ++j) {
        acc += table[bag[j] * D + d];
    }
    out[(size_t)b * D + d] = acc;
}
