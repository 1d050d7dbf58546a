// A first draft of a column-wise max over a batch (`x.amax(0)` of a [batch, features]
// activation, as in max-pooling over a set): one thread per feature walks every batch
// entry, keeping the largest value with an `if`.
#define NEG_INF (-3.402823466e38f)

// @bench batch = 8192, 513; feat = 4096, 100
// @bench x: in f32[batch, feat] ~ normal(0, 1); out: out f32[feat]
// @bench grid = cdiv(feat, 256); block = 256
// @bench reference = torch: x.amax(0)
__global__ void col_max(const float* x, float* out, int batch, int feat) {
    unsigned f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= feat) return;
    float best = NEG_INF;
    for (int b = 0; b < batch; b++) {
        float v = x[b * feat + f];
        if (v > best) best = v;
    }
    out[f] = best;
}
