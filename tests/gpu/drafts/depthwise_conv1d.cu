// A first draft of a depthwise 1-D convolution with "same" zero padding: one thread per
// output element of a [C, L] signal, the filter width a template parameter.
// @bench C = 1024, 3; L = 16384, 1001; K = 7
// @bench x: in f32[C, L]; w: in f32[C, K]; y: out f32[C, L]
// @bench grid = cdiv(C * L, 256); block = 256
// @bench reference = torch: F.conv1d(x[None], w[:, None, :], padding=K // 2, groups=C)[0]
// @bench atol = 1e-4; rtol = 1e-4
template <int K>
__global__ void depthwise_conv1d(const float* x, const float* w, float* y, int C, int L) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C * L) return;
    int c = i / L;
    int l = i % L;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        int src = l + k - K / 2;
        if (src >= 0 && src < L) acc += w[c * K + k] * x[c * L + src];
    }
    y[i] = acc;
}
