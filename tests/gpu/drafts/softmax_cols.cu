// A first draft of a softmax over dim 0 of a row-major matrix: one thread per column,
// three passes down the rows (max, sum of exponentials, write), the first in a helper.
__device__ float col_max(const float* x, int rows, int cols, int c) {
    float m = -INFINITY;
    for (int r = 0; r < rows; ++r) m = fmaxf(m, x[r * cols + c]);
    return m;
}

// @bench rows = 2048, 37; cols = 8192, 1001
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench grid = cdiv(cols, 256); block = 256
// @bench reference = torch: torch.softmax(x, dim=0)
__global__ void softmax_cols(const float* x, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float m = col_max(x, rows, cols, c);
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += expf(x[r * cols + c] - m);
    float inv = 1.0f / s;
    for (int r = 0; r < rows; ++r) y[r * cols + c] = expf(x[r * cols + c] - m) * inv;
}
