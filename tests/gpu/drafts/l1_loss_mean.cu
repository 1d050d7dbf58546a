// A first draft of the mean absolute error (`F.l1_loss`): each block reduces its
// elements in a shared-memory tree, then one atomic per block adds the block's share.
#define THREADS 256

// @bench n = 1 << 24, 99991
// @bench a: in f32[n]; b: in f32[n]; out: inout f32[1] ~ zeros
// @bench grid = cdiv(n, THREADS); block = THREADS
// @bench reference = torch: F.l1_loss(a, b).reshape(1)
// @bench atol = 1e-4; rtol = 1e-3
__global__ void l1_loss_mean(const float* __restrict__ a, const float* __restrict__ b, float* out, unsigned int n) {
    __shared__ float buf[THREADS];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * THREADS + tid;
    float v = 0.0f;
    if (i < n) v = fabsf(a[i] - b[i]);
    buf[tid] = v;
    __syncthreads();
    for (unsigned int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) buf[tid] += buf[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, buf[0] / n);
}
