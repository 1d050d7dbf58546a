// A first draft of batch-norm inference on NCHW activations: per-channel statistics and
// affine parameters, the channel recovered from the flat index, the math in a helper.
__device__ __forceinline__ float bn_apply(float v, float m, float var, float g, float b, float eps) {
    return (v - m) * rsqrtf(var + eps) * g + b;
}

// @bench N = 32, 3; C = 64, 5; HW = 16384, 77
// @bench x: in f32[N, C, HW]; mean: in f32[C]; var: in f32[C] ~ uniform(0.5, 2)
// @bench gamma: in f32[C]; beta: in f32[C]; y: out f32[N, C, HW]
// @bench eps = 1e-5
// @bench grid = cdiv(N * C * HW, 512); block = 512
// @bench reference = torch: F.batch_norm(x, mean, var, gamma, beta, False, 0.0, eps)
__global__ void batchnorm_infer(const float* __restrict__ x, const float* __restrict__ mean,
                                const float* __restrict__ var, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float* __restrict__ y,
                                int N, int C, int HW, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N * C * HW) {
        int c = (i / HW) % C;
        y[i] = bn_apply(x[i], mean[c], var[c], gamma[c], beta[c], eps);
    }
}
