// A first draft of C = A @ B the way a tutorial writes it: a 1-D grid, the flat thread
// index split into row and column, and the sum kept in C itself.
// @bench M = 2048, 45; K = 1024, 30; N = 2048, 19
// @bench A: in f32[M, K]; B: in f32[K, N]; C: out f32[M, N]
// @bench grid = cdiv(M * N, 256); block = 256
// @bench flops = 2 * M * N * K
// @bench atol = 1e-3; rtol = 1e-3
// @bench reference = torch: A @ B
__global__ void matmul_flat_accumulate(const float* A, const float* B, float* C, int M, int N, int K) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M * N) return;
    int row = idx / N;
    int col = idx % N;
    C[idx] = 0.0f;
    for (int k = 0; k < K; k++) {
        C[idx] += A[row * K + k] * B[k * N + col];
    }
}
