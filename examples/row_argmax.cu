// A first draft of a row-wise argmax (`torch.argmax(x, 1)`, as in greedy decoding over a
// vocabulary): one thread per row keeps the best value and its column; `>` keeps the
// first of equal maxima, as torch does.
// @bench rows = 8192, 37; cols = 4096, 1001
// @bench x: in f32[rows, cols]; idx: out i64[rows]
// @bench grid = cdiv(rows, 256); block = 256
// @bench reference = torch: torch.argmax(x, 1)
__global__ void row_argmax(const float* x, long long* idx, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (size_t)r * cols;
    float best = row[0];
    long long at = 0;
    for (int c = 1; c < cols; ++c) {
        if (row[c] > best) {
            best = row[c];
            at = c;
        }
    }
    idx[r] = at;
}
