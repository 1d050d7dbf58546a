// A first draft of softmax's backward, dx = y * (dy - sum(dy * y)) per row: one warp per
// row, a strided loop for the row dot finished with __shfl_xor_sync, then an elementwise
// loop. Four warps a block, int64 row offsets.
#include <cstdint>

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// @bench rows = 16384, 45; cols = 1024, 1003
// @bench dy: in f32[rows, cols]; y: in f32[rows, cols] ~ uniform(0, 1); dx: out f32[rows, cols]
// @bench grid = cdiv(rows, 4); block = 128
// @bench reference = torch: torch.ops.aten._softmax_backward_data(dy, y, 1, torch.float32)
// @bench atol = 1e-4; rtol = 1e-4
__global__ void softmax_backward_rows(const float* dy, const float* y, float* dx, int rows,
                                      int cols) {
    int row = blockIdx.x * 4 + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int64_t base = (int64_t)row * cols;
    float dot = 0.0f;
    for (int c = lane; c < cols; c += 32) dot += dy[base + c] * y[base + c];
    dot = warp_sum(dot);
    for (int c = lane; c < cols; c += 32) dx[base + c] = y[base + c] * (dy[base + c] - dot);
}
