// A first draft of an outer product scaled by a scalar (`alpha * torch.outer(a, b)`): a
// 2-D grid, x on the columns, one output element per thread.
// @bench M = 8192, 77; N = 4096, 1001
// @bench a: in f32[M]; b: in f32[N]; out: out f32[M, N]
// @bench alpha = 0.5
// @bench grid = (cdiv(N, 256), M); block = 256
// @bench reference = torch: alpha * torch.outer(a, b)
__global__ void outer_product(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                              int M, int N, float alpha) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y;
    if (j < N) out[(size_t)i * N + j] = alpha * a[i] * b[j];
}
