// Row-wise softmax, one thread per row: the first draft most people write. Each
// thread walks its own row three times (max, sum of exponentials, normalize), so
// neighbouring threads read addresses a whole row apart and few threads are busy.
// `kernel-lsp optimize` turns it into a warp (or a block) per row.

// @bench rows = 8192, 37; cols = 1024, 100
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench grid = cdiv(rows, 128); block = 128
// @bench atol = 1e-6; rtol = 1e-4
extern "C" __global__ void softmax_rows(const float* x, float* y, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        const float* in = x + (size_t)row * cols;
        float* out = y + (size_t)row * cols;
        float m = in[0];
        for (int c = 1; c < cols; ++c)
            m = fmaxf(m, in[c]);
        float sum = 0.0f;
        for (int c = 0; c < cols; ++c) {
            float e = expf(in[c] - m);
            out[c] = e;
            sum += e;
        }
        for (int c = 0; c < cols; ++c)
            out[c] /= sum;
    }
}
