// A first draft of a matrix-vector product with one warp per row: each lane walks the
// row 32 elements apart, then the warp's shuffles add the lanes' partials.
// @bench M = 8192, 1001; K = 4096, 999
// @bench A: in f32[M, K]; x: in f32[K]; y: out f32[M]
// @bench grid = cdiv(M, 8); block = 256
// @bench reference = torch: A @ x
// @bench atol = 1e-4; rtol = 1e-4
__global__ void matvec_warp(const float* A, const float* x, float* y, int M, int K) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    float acc = 0.0f;
    for (int k = lane; k < K; k += 32) acc += A[(size_t)row * K + k] * x[k];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffff, acc, off);
    if (lane == 0) y[row] = acc;
}
