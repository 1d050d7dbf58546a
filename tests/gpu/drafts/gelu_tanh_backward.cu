// A first draft of the tanh-approximated GELU's backward: dx = dy * gelu'(x), with the
// derivative in a __device__ helper and a grid-stride loop over int64 indices, launched
// with a fixed number of blocks per multiprocessor.
#include <cstdint>

__device__ __forceinline__ float gelu_tanh_grad(float x) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    float x2 = x * x;
    float inner = k0 * (x + k1 * x2 * x);
    float t = tanhf(inner);
    float left = 0.5f * (1.0f + t);
    float right = 0.5f * x * (1.0f - t * t) * k0 * (1.0f + 3.0f * k1 * x2);
    return left + right;
}

// @bench n = 1 << 25, 100003
// @bench dy: in f32[n]; x: in f32[n] ~ normal(0, 2); dx: out f32[n]
// @bench grid = sms * 4; block = 256
// @bench reference = torch: torch.ops.aten.gelu_backward(dy, x, approximate="tanh")
__global__ void gelu_tanh_backward(const float* __restrict__ dy, const float* __restrict__ x,
                                   float* __restrict__ dx, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dx[i] = dy[i] * gelu_tanh_grad(x[i]);
    }
}
