// A first draft of a sum over the middle axis of a 3-D tensor (`x.sum(1)`, as in pooling
// a sequence per batch and channel), with one flat index over (batch, channel): each
// thread walks the sequence alone.
// @bench B = 32, 3; S = 512, 77; D = 512, 33
// @bench x: in f32[B, S, D]; y: out f32[B, D]
// @bench grid = cdiv(B * D, 256); block = 256
// @bench reference = torch: x.sum(1)
// @bench atol = 1e-3; rtol = 1e-4
__global__ void mid_sum(const float* x, float* y, int B, int S, int D) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * D) {
        int b = idx / D;
        int d = idx % D;
        float s = 0.0f;
        for (int t = 0; t < S; t++) s += x[((size_t)b * S + t) * D + d];
        y[idx] = s;
    }
}
