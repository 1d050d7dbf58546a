// A first draft of x.permute(0, 2, 1).contiguous() on a [B, M, N] tensor: a 2-D grid of
// 2-D blocks over (n, m) with the batch on grid.z, each thread copies one element with
// int indices, so the reads walk a row of x and the writes walk a column of y.

// @bench B = 8, 3; M = 1024, 301; N = 1024, 77
// @bench x: in f32[B, M, N]; y: out f32[B, N, M]
// @bench grid = (cdiv(N, 32), cdiv(M, 8), B); block = (32, 8)
// @bench reference = torch: x.permute(0, 2, 1).contiguous()
__global__ void permute_021(const float* x, float* y, int M, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    int b = blockIdx.z;
    if (m < M && n < N) {
        y[(b * N + n) * M + m] = x[(b * M + m) * N + n];
    }
}
