// A first draft of a per-column affine over a batch of matrices (the apply step of a
// batch or group norm): threads along the columns, a 2-D block, the batch on grid z,
// the row's offset computed once before the bounds check.
// @bench batch = 8, 3; rows = 1024, 33; cols = 2048, 999
// @bench x: in f32[batch, rows, cols]; gamma: in f32[cols]; beta: in f32[cols]; y: out f32[batch, rows, cols]
// @bench grid = (cdiv(cols, 32), cdiv(rows, 8), batch); block = (32, 8)
// @bench reference = torch: x * gamma + beta
__global__ void scale_shift_batched(const float* x, const float* gamma, const float* beta,
                                    float* y, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    size_t base = ((size_t)blockIdx.z * rows + row) * cols;
    if (row < rows && col < cols) {
        y[base + col] = x[base + col] * gamma[col] + beta[col];
    }
}
