// A first draft of row sums over a batch of matrices (`x.sum(2)` of [B, R, C]): the
// batch on the grid's y, one thread per row walking its columns.
// @bench B = 16, 3; R = 1024, 33; C = 1024, 100
// @bench x: in f32[B, R, C]; y: out f32[B, R]
// @bench grid = (cdiv(R, 128), B); block = 128
// @bench reference = torch: x.sum(2)
// @bench atol = 1e-3; rtol = 1e-4
__global__ void batched_rowsum(const float* x, float* y, int B, int R, int C) {
    int b = blockIdx.y;
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < R) {
        float s = 0.f;
        for (int c = 0; c < C; ++c) s += x[((size_t)b * R + r) * C + c];
        y[b * R + r] = s;
    }
}
