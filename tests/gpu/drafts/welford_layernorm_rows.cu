// A first draft of a layer norm over the last dim, one thread per row: Welford's running
// mean and sum of squared deviations with an explicit count, then a second pass that
// normalizes, scales and shifts.
// @bench rows = 16384, 33; cols = 1024, 999
// @bench x: in f32[rows, cols]; gamma: in f32[cols]; beta: in f32[cols]; y: out f32[rows, cols]
// @bench grid = cdiv(rows, 128); block = 128
// @bench atol = 1e-4; rtol = 1e-4
// @bench reference = torch: F.layer_norm(x, (x.shape[1],), gamma, beta, eps=1e-5)
__global__ void welford_layernorm_rows(const float* x, const float* gamma, const float* beta,
                                       float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)r * cols;
    float count = 0.f, mean = 0.f, m2 = 0.f;
    for (int c = 0; c < cols; ++c) {
        count += 1.f;
        float delta = xr[c] - mean;
        mean += delta / count;
        m2 += delta * (xr[c] - mean);
    }
    float rstd = rsqrtf(m2 / cols + 1e-5f);
    for (int c = 0; c < cols; ++c)
        y[(size_t)r * cols + c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
}
