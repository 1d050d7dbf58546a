// A first draft of torch.gather(x, 1, idx) on a 2-D f32 tensor: out[r, k] =
// x[r, idx[r, k]], a 2-D grid of 32x8 blocks with x along k, int64 indices.
#include <cstdint>

// @bench M = 8192, 45; N = 2048, 301; K = 1024, 99
// @bench x: in f32[M, N]; idx: in i64[M, K] ~ randint(0, N); out: out f32[M, K]
// @bench grid = (cdiv(K, 32), cdiv(M, 8)); block = (32, 8)
// @bench reference = torch: torch.gather(x, 1, idx)
__global__ void gather_dim1(const float* x, const int64_t* idx, float* out, int M, int N, int K) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < M && k < K) {
        const float* row = x + (int64_t)r * N;
        int64_t c = idx[(int64_t)r * K + k];
        out[(int64_t)r * K + k] = row[c];
    }
}
