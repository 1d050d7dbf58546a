// A first draft of a row-wise min-max normalize, y = (x - min) / (max - min + eps): one
// block per row, a first loop finds the row's min and max with a shared-memory tree, a
// second loop writes the scaled row through a row pointer.
#define THREADS 256

// @bench rows = 8192, 37; cols = 2048, 999
// @bench x: in f32[rows, cols]; y: out f32[rows, cols]
// @bench grid = rows; block = THREADS
// @bench reference = torch: (x - x.amin(dim=1, keepdim=True)) / (x.amax(dim=1, keepdim=True) - x.amin(dim=1, keepdim=True) + 1e-6)
// @bench atol = 1e-4; rtol = 1e-4
__global__ void minmax_norm_rows(const float* x, float* y, int cols) {
    __shared__ float smin[THREADS];
    __shared__ float smax[THREADS];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float lo = INFINITY, hi = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        float v = row[c];
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    smin[threadIdx.x] = lo;
    smax[threadIdx.x] = hi;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            smin[threadIdx.x] = fminf(smin[threadIdx.x], smin[threadIdx.x + s]);
            smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + s]);
        }
        __syncthreads();
    }
    float mn = smin[0];
    float scale = 1.0f / (smax[0] - mn + 1e-6f);
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        out[c] = (row[c] - mn) * scale;
    }
}
