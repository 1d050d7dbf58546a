// A first draft of bias + ReLU over a row-major matrix, written row-first: the thread x
// index walks the rows, so neighbouring threads touch addresses a whole row apart.
// @bench rows = 8192, 1001; cols = 4096, 77
// @bench x: in f32[rows, cols]; bias: in f32[cols]; y: out f32[rows, cols]
// @bench grid = (cdiv(rows, 16), cdiv(cols, 16)); block = (16, 16)
// @bench reference = torch: torch.relu(x + bias)
__global__ void bias_relu_rows(const float* x, const float* bias, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int c = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        float v = x[r * cols + c] + bias[c];
        y[r * cols + c] = v > 0.0f ? v : 0.0f;
    }
}
