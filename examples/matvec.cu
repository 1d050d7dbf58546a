// A first draft of a matrix-vector product with a bias, y = W x + b (a linear layer at
// batch size one): one thread per output row, which reads its row of W alone.
// @bench out_f = 8192, 77; in_f = 4096, 1000
// @bench w: in f32[out_f, in_f]; x: in f32[in_f]; b: in f32[out_f]; y: out f32[out_f]
// @bench grid = cdiv(out_f, 64); block = 64
// @bench reference = torch: w @ x + b
// @bench atol = 1e-3; rtol = 1e-3
__global__ void matvec(const float* __restrict__ w, const float* __restrict__ x,
                       const float* __restrict__ b, float* __restrict__ y, int out_f, int in_f) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out_f) return;
    float dot = b[o];
    for (int k = 0; k < in_f; k++) dot += w[o * in_f + k] * x[k];
    y[o] = dot;
}
