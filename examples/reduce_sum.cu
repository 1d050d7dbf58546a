// Sum of a vector: a naive reference and a shared-memory tree reduction that the
// reference checks. `BLOCK` is a tunable passed as -DBLOCK=...
#include <cuda_fp16.h>

__device__ float load_as_float(const __half* p, int i) {
    return __half2float(p[i]);
}

// @bench n = 1 << 22, 1000
// @bench x: in f16[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
// @bench grid = cdiv(n, 256); block = 256
// @bench atol = 1e-1; rtol = 1e-3
extern "C" __global__ void reduce_naive(int n, const __half* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, load_as_float(x, i));
}

// @bench n = 1 << 22, 1000
// @bench x: in f16[n] ~ uniform(0, 1); out: inout f32[1] ~ zeros
// @bench tune BLOCK in [128, 256, 512]
// @bench grid = cdiv(n, BLOCK); block = BLOCK; smem = BLOCK * 4
// @bench atol = 1e-1; rtol = 1e-3
// @bench reference = reduce_naive
extern "C" __global__ void reduce_tree(int n, const __half* x, float* out) {
    extern __shared__ float buf[];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    buf[threadIdx.x] = i < n ? load_as_float(x, i) : 0.0f;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, buf[0]);
}
