// A first draft of SwiGLU on half precision: the last dimension holds the gate half and
// the up half, y = silu(gate) * up; a 2-D grid with x on the output columns, a row pointer
// per row, one 2-byte element per load.
#include <cuda_fp16.h>

// @bench rows = 8192, 77; D = 4096, 1001
// @bench x: in f16[rows, 2 * D]; y: out f16[rows, D]
// @bench grid = (cdiv(D, 128), rows); block = 128
// @bench reference = torch: (F.silu(x[:, :D].float()) * x[:, D:].float()).half()
__global__ void swiglu_half(const __half* x, __half* y, int rows, int D) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y;
    if (col >= D) return;
    const __half* xr = x + (size_t)row * 2 * D;
    float g = __half2float(xr[col]);
    float u = __half2float(xr[D + col]);
    float s = g / (1.0f + expf(-g));
    y[(size_t)row * D + col] = __float2half(s * u);
}
