// A first draft of torch.var(x, dim=1, unbiased=False) with Welford's running mean and
// sum of squared deviations, one thread per row.
// @bench rows = 16384, 33; cols = 1024, 999
// @bench x: in f32[rows, cols]; out: out f32[rows]
// @bench grid = cdiv(rows, 128); block = 128
// @bench atol = 1e-4; rtol = 1e-4
// @bench reference = torch: torch.var(x, dim=1, unbiased=False)
__global__ void welford_var_rows(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float mean = 0.f, m2 = 0.f;
    for (int c = 0; c < cols; ++c) {
        float v = x[(size_t)r * cols + c];
        float d = v - mean;
        mean += d / (c + 1);
        m2 += d * (v - mean);
    }
    out[r] = m2 / cols;
}
