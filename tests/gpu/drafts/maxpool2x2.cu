// A first draft of 2x2 max pooling with stride 2 over NCHW planes: one thread per output
// element from a flat size_t index, the four inputs read one float at a time.
// @bench NC = 128, 3; OH = 256, 39; OW = 256, 101
// @bench x: in f32[NC, 2 * OH, 2 * OW]; y: out f32[NC, OH, OW]
// @bench grid = cdiv(NC * OH * OW, 256); block = 256
// @bench reference = torch: F.max_pool2d(x, 2)
__global__ void maxpool2x2(const float* __restrict__ x, float* __restrict__ y, int NC, int OH, int OW) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)NC * OH * OW;
    if (idx >= total) return;
    int ow = idx % OW;
    int oh = (idx / OW) % OH;
    size_t p = idx / ((size_t)OH * OW);
    int W = 2 * OW;
    const float* src = x + (p * 2 * OH + 2 * oh) * W + 2 * ow;
    float a = fmaxf(src[0], src[1]);
    float b = fmaxf(src[W], src[W + 1]);
    y[idx] = fmaxf(a, b);
}
