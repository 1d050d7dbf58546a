// A first draft of a fused SGD step with momentum and weight decay over a flat parameter
// vector: a grid-stride loop, two buffers updated in place.
// @bench n = 1 << 24, 100003
// @bench p: inout f32[n]; buf: inout f32[n] ~ normal(0, 1); g: in f32[n]
// @bench lr = 0.01; mu = 0.9; wd = 0.0001
// @bench grid = 1024; block = 256
// @bench reference = torch: (p - lr * (mu * buf + (g + wd * p)), mu * buf + (g + wd * p))
__global__ void sgd_momentum(float* p, float* buf, const float* g, int n, float lr, float mu,
                             float wd) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float d = g[i] + wd * p[i];
        float b = mu * buf[i] + d;
        buf[i] = b;
        p[i] = p[i] - lr * b;
    }
}
