// A first draft of nn.Linear followed by ReLU: y = relu(x @ W^T + b) with W stored
// [out_features, in_features] as PyTorch stores it. One thread per output on 16x16
// blocks; the sum starts from the bias.
// @bench M = 4096, 33; K = 1024, 77; N = 1024, 130
// @bench x: in f32[M, K]; w: in f32[N, K]; b: in f32[N]; y: out f32[M, N]
// @bench grid = (cdiv(N, 16), cdiv(M, 16)); block = (16, 16)
// @bench flops = 2 * M * N * K
// @bench atol = 1e-3; rtol = 1e-3
// @bench reference = torch: torch.relu(x @ w.T + b)
__global__ void linear_bias_relu(const float* x, const float* w, const float* b, float* y,
                                 int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = b[col];
        for (int k = 0; k < K; ++k)
            acc += x[row * K + k] * w[col * K + k];
        y[row * N + col] = fmaxf(acc, 0.0f);
    }
}
