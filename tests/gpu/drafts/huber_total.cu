// A first draft of a summed Huber loss: a grid-stride loop over a fixed grid of four
// blocks per multiprocessor, each thread's partial folded by a shared-memory tree, and
// one atomicAdd per block into the total.
// @bench n = 1 << 24, 99991
// @bench pred: in f32[n] ~ normal(0, 1); target: in f32[n] ~ normal(0, 1); out: inout f32[1] ~ zeros
// @bench delta = 1.0
// @bench grid = 4 * sms; block = 256
// @bench reference = torch: F.huber_loss(pred, target, reduction="sum", delta=delta).reshape(1)
// @bench atol = 1e-2; rtol = 1e-4
__global__ void huber_total(const float* pred, const float* target, float* out, int n,
                            float delta) {
    __shared__ float part[256];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float d = fabsf(pred[i] - target[i]);
        acc += d < delta ? 0.5f * d * d : delta * (d - 0.5f * delta);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
