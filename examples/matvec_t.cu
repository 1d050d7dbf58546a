// A first draft of a transposed matrix-vector product, y = A^T v (the backward of a
// linear layer's input): one thread per output, an early return, a `while` loop down the
// column with a pointer that steps one row at a time, and a scale applied at the end.
// @bench m = 8192, 333; n = 4096, 65
// @bench a: in f32[m, n]; v: in f32[m]; y: out f32[n]
// @bench alpha = 0.5
// @bench grid = cdiv(n, 128); block = 128
// @bench reference = torch: alpha * (a.t() @ v)
// @bench atol = 1e-3; rtol = 1e-3
extern "C" __global__ void matvec_t(int m, int n, float alpha, const float* a, const float* v,
                                    float* y) {
    const int j = threadIdx.x + blockDim.x * blockIdx.x;
    if (j >= n) return;
    const float* p = a + j;
    float s = 0.f;
    int i = 0;
    while (i < m) {
        s += p[(long long)i * n] * v[i];
        i++;
    }
    y[j] = alpha * s;
}
