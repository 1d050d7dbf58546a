// A first draft of a per-sample cross-entropy loss (`F.cross_entropy(logits, target,
// reduction="none")`) in two passes over each row of logits: the largest logit, then the
// sum of exponentials; one thread per sample.
#include <math.h>

// @bench n = 8192, 129; classes = 4096, 1000
// @bench logits: in f32[n, classes] ~ normal(0, 2); target: in i64[n] ~ randint(0, 1000)
// @bench loss: out f32[n]
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: F.cross_entropy(logits, target, reduction="none")
// @bench atol = 1e-4; rtol = 1e-4
__global__ void cross_entropy(const float* logits, const long long* target, float* loss, int n,
                              int classes) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float* row = logits + (size_t)i * classes;
        float mx = row[0];
        for (int c = 1; c < classes; ++c) mx = fmaxf(mx, row[c]);
        float sum = 0.0f;
        for (int c = 0; c < classes; ++c) sum += expf(row[c] - mx);
        loss[i] = logf(sum) + mx - row[target[i]];
    }
}
