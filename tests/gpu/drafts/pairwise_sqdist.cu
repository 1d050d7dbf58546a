// A first draft of pairwise squared Euclidean distances between two point sets with a
// small feature count (`torch.cdist(X, Y) ** 2`): a 2-D grid, x along the columns of the
// output (points of Y), the feature count a template parameter.
// @bench n = 4096, 77; m = 4096, 1001; D = 8
// @bench X: in f32[n, D]; Y: in f32[m, D]; out: out f32[n, m]
// @bench grid = (cdiv(m, 32), cdiv(n, 8)); block = (32, 8)
// @bench reference = torch: ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
// @bench atol = 1e-4; rtol = 1e-4
template <int D>
__global__ void pairwise_sqdist(const float* X, const float* Y, float* out, int n, int m) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < n && j < m) {
        float acc = 0.0f;
        for (int k = 0; k < D; ++k) {
            float diff = X[i * D + k] - Y[j * D + k];
            acc += diff * diff;
        }
        out[(size_t)i * m + j] = acc;
    }
}
