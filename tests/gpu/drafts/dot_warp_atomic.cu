// A first draft of a dot product (`torch.dot(a, b)`) that already reduces each warp with
// shuffles, then adds one value per warp to the result with a global atomic.
// @bench n = 1 << 24, 99991
// @bench a: in f32[n]; b: in f32[n]; out: inout f32[1] ~ zeros
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: torch.dot(a, b).reshape(1)
// @bench atol = 1e-1; rtol = 1e-3
__global__ void dot_warp_atomic(const float* a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? a[i] * b[i] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
