// y = a * x + y, one element per thread: the hello world of kernel tuning.
#include <cstdio>

// The first case is timed; every case is verified.
// @bench n = 1 << 24, 4099
// @bench x: in f32[n]
// @bench y: inout f32[n] ~ normal(0, 1)
// @bench a = 2.5
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
    printf("launch saxpy from your host code; kernel-lsp only needs the kernel\n");
    return 0;
}
