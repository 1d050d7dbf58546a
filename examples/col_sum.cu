// A first draft of a column sum (`x.sum(0)`): each thread owns one column and walks
// down the rows. The loads are coalesced, but with a few thousand columns the grid is a
// handful of blocks: most of the GPU sits idle while each thread loops over every row.
// @bench rows = 16384, 1001; cols = 2048, 77
// @bench x: in f32[rows, cols]; out: out f32[cols]
// @bench grid = cdiv(cols, 256); block = 256
// @bench reference = torch: x.sum(0)
// @bench atol = 1e-3; rtol = 1e-4
__global__ void col_sum(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < cols) {
        float acc = 0.0f;
        for (int r = 0; r < rows; ++r) {
            acc += x[(size_t)r * cols + col];
        }
        out[col] = acc;
    }
}
