// A first draft of a masked mean over the sequence axis ([B, L, D] -> [B, D], padding
// tokens masked out): one thread per (batch, feature) walks the sequence.
// @bench B = 16, 3; L = 2048, 77; D = 1024, 99
// @bench x: in f32[B, L, D]; mask: in f32[B, L] ~ randint(0, 2); out: out f32[B, D]
// @bench grid = (cdiv(D, 128), B); block = 128
// @bench reference = torch: (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)
// @bench atol = 1e-4; rtol = 1e-4
__global__ void masked_mean(const float* x, const float* mask, float* out, int B, int L, int D) {
    int d = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (d >= D) return;
    float num = 0.0f, den = 0.0f;
    for (int l = 0; l < L; ++l) {
        float m = mask[b * L + l];
        num += m * x[((size_t)b * L + l) * D + d];
        den += m;
    }
    out[b * D + d] = num / fmaxf(den, 1.0f);
}
