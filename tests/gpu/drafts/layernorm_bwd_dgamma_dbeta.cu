// A first draft of layer-norm backward's weight and bias gradients: dgamma[j] =
// sum_r dy[r, j] * (x[r, j] - mean[r]) * rstd[r] and dbeta[j] = sum_r dy[r, j], one thread
// per column walking every row through row pointers, with the saved statistics of the
// forward pass as inputs.
#define THREADS 256

// @bench M = 16384, 333; N = 1024, 77
// @bench dy: in f32[M, N]; x: in f32[M, N]; mean: in f32[M]; rstd: in f32[M] ~ uniform(0.5, 2)
// @bench dgamma: out f32[N]; dbeta: out f32[N]
// @bench grid = cdiv(N, THREADS); block = THREADS
// @bench atol = 1e-2; rtol = 1e-3
// @bench reference = torch: ((dy * (x - mean[:, None]) * rstd[:, None]).sum(0), dy.sum(0))
__global__ void layernorm_bwd_dgamma_dbeta(const float* dy, const float* x, const float* mean,
                                           const float* rstd, float* dgamma, float* dbeta,
                                           int M, int N) {
    int j = blockIdx.x * THREADS + threadIdx.x;
    if (j >= N) return;
    float dg = 0.0f, db = 0.0f;
    for (int r = 0; r < M; ++r) {
        const float* dy_row = dy + (size_t)r * N;
        const float* x_row = x + (size_t)r * N;
        float g = dy_row[j];
        dg += g * (x_row[j] - mean[r]) * rstd[r];
        db += g;
    }
    dgamma[j] = dg;
    dbeta[j] = db;
}
