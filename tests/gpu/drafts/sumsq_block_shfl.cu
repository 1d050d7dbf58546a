// A first draft of a sum of squares (`(x * x).sum()`) that reduces each block well (warp
// shuffles, one shared slot per warp, the first warp's shuffles) but launches one block
// per 256 elements and adds each block's total with an atomic.
// @bench n = 1 << 24, 99991
// @bench x: in f32[n]; out: inout f32[1] ~ zeros
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: (x * x).sum().reshape(1)
// @bench atol = 1e-1; rtol = 1e-3
__global__ void sumsq_block_shfl(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float warp_part[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    float v = i < n ? x[i] * x[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_part[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
        if (lane == 0) atomicAdd(out, v);
    }
}
