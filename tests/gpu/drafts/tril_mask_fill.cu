// A first draft of torch.tril on a batch of square matrices: a 2-D grid of 16x16 blocks
// over each matrix, the batch on grid.z, keeping the element on and below the diagonal and
// writing zero above it. Sizes come from a #define.
#define TILE 16

// @bench BATCH = 16, 3; L = 1024, 333
// @bench x: in f32[BATCH, L, L]; y: out f32[BATCH, L, L]
// @bench grid = (cdiv(L, TILE), cdiv(L, TILE), BATCH); block = (TILE, TILE)
// @bench reference = torch: torch.tril(x)
__global__ void tril_mask_fill(const float* x, float* y, int L) {
    int col = blockIdx.x * TILE + threadIdx.x;
    int row = blockIdx.y * TILE + threadIdx.y;
    if (row >= L || col >= L) return;
    long base = (long)blockIdx.z * L * L;
    long at = base + (long)row * L + col;
    y[at] = (col <= row) ? x[at] : 0.0f;
}
