// A first draft of a half-precision axpy (y = a * x + y): one element per thread, the
// math in float, loads and stores of one 2-byte element each.
#include <cuda_fp16.h>

// @bench n = 1 << 25, 3001
// @bench x: in f16[n]; y: inout f16[n]
// @bench a = 0.75
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: a * x + y
__global__ void half_axpy(int n, float a, const __half* x, __half* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __float2half(a * __half2float(x[i]) + __half2float(y[i]));
    }
}
