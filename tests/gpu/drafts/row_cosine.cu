// A first draft of per-row cosine similarity of two matrices (`F.cosine_similarity(a, b,
// dim=1)`): one thread per row walks the row and keeps three running sums.
// @bench rows = 16384, 1001; cols = 1024, 77
// @bench a: in f32[rows, cols]; b: in f32[rows, cols]; out: out f32[rows]
// @bench grid = cdiv(rows, 128); block = 128
// @bench reference = torch: F.cosine_similarity(a, b, dim=1)
// @bench atol = 1e-4; rtol = 1e-4
__global__ void row_cosine(const float* a, const float* b, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* ar = a + (size_t)r * cols;
    const float* br = b + (size_t)r * cols;
    float dot = 0.0f, na = 0.0f, nb = 0.0f;
    for (int c = 0; c < cols; c++) {
        float u = ar[c], v = br[c];
        dot += u * v;
        na += u * u;
        nb += v * v;
    }
    out[r] = dot / (fmaxf(sqrtf(na), 1e-8f) * fmaxf(sqrtf(nb), 1e-8f));
}
