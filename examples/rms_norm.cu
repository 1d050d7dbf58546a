// A first draft of RMSNorm over the last dimension (y = x / sqrt(mean(x^2) + eps) * w):
// one thread per row, a loop for the mean square and a loop for the output.
#include <math.h>

// @bench rows = 8192, 31; dim = 2048, 520
// @bench x: in f32[rows, dim]; w: in f32[dim]; y: out f32[rows, dim]
// @bench eps = 1e-6
// @bench grid = cdiv(rows, 128); block = 128
// @bench reference = torch: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
// @bench atol = 1e-4; rtol = 1e-3
extern "C" __global__ void rms_norm(const float* x, const float* w, float* y, int rows, int dim,
                                    float eps) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float ss = 0.0f;
    for (int j = 0; j < dim; ++j) {
        float v = x[r * dim + j];
        ss += v * v;
    }
    float inv = rsqrtf(ss / dim + eps);
    for (int j = 0; j < dim; ++j) y[r * dim + j] = x[r * dim + j] * inv * w[j];
}
