// A first draft of applying per-row statistics (the second half of a layer norm): each
// row is shifted by its mean and scaled by its inverse deviation. Written with the row
// on threadIdx.x, an early return and a helper that reads the matrix.
__device__ __forceinline__ float at(const float* p, size_t i, size_t j, size_t ld) {
    return p[i * ld + j];
}

// @bench m = 16384, 999; n = 2048, 130
// @bench x: in f32[m, n]; mean: in f32[m]; rstd: in f32[m] ~ uniform(0.5, 2); out: out f32[m, n]
// @bench grid = (cdiv(m, 32), cdiv(n, 4)); block = (32, 4)
// @bench reference = torch: (x - mean[:, None]) * rstd[:, None]
__global__ void norm_apply(const float* __restrict__ x, const float* __restrict__ mean,
                           const float* __restrict__ rstd, float* __restrict__ out, int m, int n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t j = (size_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= (size_t)m || j >= (size_t)n) return;
    out[i * n + j] = (at(x, i, j, n) - mean[i]) * rstd[i];
}
