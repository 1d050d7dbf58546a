// A first draft of a squared L2 norm of a whole tensor (`(x * x).sum()`): every thread
// adds its element's square into one float with an atomic.
// @bench n = 1 << 22, 100003
// @bench x: in f32[n]; total: inout f32[1] ~ zeros
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: (x * x).sum().reshape(1)
// @bench atol = 1e-2; rtol = 1e-2
__global__ void sum_squares(const float* x, float* total, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) {
        float v = x[i];
        atomicAdd(total, v * v);
    }
}
