// A first draft of torch.logsumexp(x, dim=1) in one pass per row: the running maximum
// and the sum of exponentials rescaled whenever the maximum grows (the online form),
// one thread per row.
// @bench rows = 16384, 33; cols = 1024, 999
// @bench x: in f32[rows, cols]; out: out f32[rows]
// @bench grid = cdiv(rows, 128); block = 128
// @bench reference = torch: torch.logsumexp(x, dim=1)
__global__ void online_logsumexp_rows(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = -1e30f, s = 0.f;
    for (int c = 0; c < cols; ++c) {
        float v = x[(size_t)r * cols + c];
        float mn = fmaxf(m, v);
        s = s * expf(m - mn) + expf(v - mn);
        m = mn;
    }
    out[r] = m + logf(s);
}
