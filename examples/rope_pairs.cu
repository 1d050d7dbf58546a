// A first draft of rotary position embedding (RoPE) on interleaved pairs: each row of x
// holds a head vector whose consecutive pairs (x[2p], x[2p+1]) rotate by their row's
// angle for pair p (cos and sin tables per row and pair). One thread per pair, the pair
// read and written as two 4-byte accesses each.

// @bench rows = 65536, 5; half = 64, 63
// @bench x: in f32[rows, 2 * half]; cos: in f32[rows, half]; sin: in f32[rows, half]
// @bench y: out f32[rows, 2 * half]
// @bench grid = cdiv(rows * half, 256); block = 256
// @bench reference = torch: torch.stack((x[:, 0::2] * cos - x[:, 1::2] * sin, x[:, 0::2] * sin + x[:, 1::2] * cos), -1).flatten(1)
__global__ void rope_pairs(const float* x, const float* cos, const float* sin, float* y, int rows, int half) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * half) return;
    int r = i / half;
    int p = i % half;
    float c = cos[i];
    float s = sin[i];
    float x0 = x[r * 2 * half + 2 * p];
    float x1 = x[r * 2 * half + 2 * p + 1];
    y[r * 2 * half + 2 * p] = x0 * c - x1 * s;
    y[r * 2 * half + 2 * p + 1] = x0 * s + x1 * c;
}
