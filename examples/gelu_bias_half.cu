// A first draft of bias + GELU (tanh approximation) on a half-precision activation
// matrix: one row per block y, one column per thread, the math in float, loads and
// stores of one 2-byte element each.
#include <cuda_fp16.h>

// @bench rows = 8192, 3; cols = 4096, 130
// @bench x: in f16[rows, cols]; bias: in f16[cols]; y: out f16[rows, cols]
// @bench grid = (cdiv(cols, 256), rows); block = 256
// @bench reference = torch: F.gelu(x.float() + bias.float(), approximate="tanh").half()
__global__ void gelu_bias_half(const __half* x, const __half* bias, __half* y, int rows, int cols) {
    int r = blockIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float v = __half2float(x[(size_t)r * cols + c]) + __half2float(bias[c]);
    float t = tanhf(0.7978845608f * (v + 0.044715f * v * v * v));
    y[(size_t)r * cols + c] = __float2half(0.5f * v * (1.0f + t));
}
