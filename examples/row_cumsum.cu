// A first draft of a row-wise prefix sum (`torch.cumsum(x, 1)`): each thread owns a
// row and carries a running total across it. One thread walks each row, and
// neighbouring threads read addresses a whole row apart.
// @bench rows = 8192, 37; cols = 2048, 300
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench grid = cdiv(rows, 128); block = 128
// @bench reference = torch: torch.cumsum(x, 1)
// @bench atol = 1e-3; rtol = 1e-3
extern "C" __global__ void row_cumsum(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        float running = 0.0f;
        for (int c = 0; c < cols; c++) {
            running += x[row * cols + c];
            y[row * cols + c] = running;
        }
    }
}
