// A first draft of bilinear 2x upsampling (align_corners=False) of NCHW planes: a 2-D grid
// over the output, planes in a loop inside each thread.
// @bench P = 32, 3; H = 256, 37; W = 384, 53
// @bench x: in f32[P, H, W]; y: out f32[P, 2 * H, 2 * W]
// @bench grid = (cdiv(2 * W, 16), cdiv(2 * H, 16)); block = (16, 16)
// @bench reference = torch: F.interpolate(x[None], scale_factor=2, mode="bilinear", align_corners=False)[0]
__global__ void bilinear_up2x(const float* __restrict__ x, float* __restrict__ y, int P, int H, int W) {
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    int OW = 2 * W, OH = 2 * H;
    if (ox >= OW || oy >= OH) return;
    float sx = fmaxf((ox + 0.5f) * 0.5f - 0.5f, 0.0f);
    float sy = fmaxf((oy + 0.5f) * 0.5f - 0.5f, 0.0f);
    int x0 = (int)sx, y0 = (int)sy;
    int x1 = min(x0 + 1, W - 1), y1 = min(y0 + 1, H - 1);
    float lx = sx - x0, ly = sy - y0;
    for (int p = 0; p < P; ++p) {
        const float* src = x + (size_t)p * H * W;
        float top = (1.0f - lx) * src[y0 * W + x0] + lx * src[y0 * W + x1];
        float bot = (1.0f - lx) * src[y1 * W + x0] + lx * src[y1 * W + x1];
        y[((size_t)p * OH + oy) * OW + ox] = (1.0f - ly) * top + ly * bot;
    }
}
