// C = A * B for row-major f32 matrices: one thread per output element, no tiling.
// A deliberately naive starting point for `kernel-lsp optimize`.

// @bench m = 1024, 67; n = 1024, 45; k = 1024, 33
// @bench a: in f32[m, k]; b: in f32[k, n]; c: out f32[m, n]
// @bench grid = (cdiv(n, 16), cdiv(m, 16)); block = (16, 16)
// @bench flops = 2 * m * n * k
// @bench rtol = 1e-3
extern "C" __global__ void matmul(int m, int n, int k, const float* a, const float* b, float* c) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i) {
            acc += a[row * k + i] * b[i * n + col];
        }
        c[row * n + col] = acc;
    }
}
