// Matrix transpose, one thread per element: the reads are coalesced, but neighbouring
// threads write addresses a whole column apart, so every write moves a 32-byte sector
// for 4 useful bytes. `kernel-lsp optimize` stages a tile through shared memory.

// @bench rows = 8192, 1000; cols = 4096, 333
// @bench src: in f32[rows, cols]; dst: out f32[cols, rows]
// @bench grid = (cdiv(cols, 16), cdiv(rows, 16)); block = (16, 16)
extern "C" __global__ void transpose(const float* src, float* dst, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        dst[col * rows + row] = src[row * cols + col];
    }
}
