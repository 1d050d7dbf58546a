// A first draft of torch.flip(x, dims=[-1]) on a [rows, cols] tensor: one thread per
// element with size_t indices, reading from the mirrored column of the same row.
#include <cstddef>

// @bench rows = 8192, 33; cols = 2048, 1001
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench grid = cdiv(rows * cols, 256); block = 256
// @bench reference = torch: torch.flip(x, dims=[-1])
__global__ void flip_lastdim(const float* __restrict__ x, float* __restrict__ y, size_t rows,
                             size_t cols) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    size_t r = i / cols;
    size_t c = i % cols;
    y[i] = x[r * cols + (cols - 1 - c)];
}
