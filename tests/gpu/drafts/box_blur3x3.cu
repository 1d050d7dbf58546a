// A first draft of a 3x3 box blur (zero padding) of a single-channel image: a 16x16 tile
// of threads per block, x along the columns, each thread reads its 9 neighbours from
// global memory.
#define TILE 16

// @bench H = 8192, 77; W = 4096, 1001
// @bench img: in f32[H, W]; out: out f32[H, W]
// @bench grid = (cdiv(W, TILE), cdiv(H, TILE)); block = (16, 16)
// @bench reference = torch: F.avg_pool2d(img[None, None], 3, stride=1, padding=1, count_include_pad=True)[0, 0]
__global__ void box_blur3x3(const float* img, float* out, int H, int W) {
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    if (x >= W || y >= H) return;
    float sum = 0.0f;
    for (int dy = -1; dy <= 1; dy++) {
        for (int dx = -1; dx <= 1; dx++) {
            int yy = y + dy;
            int xx = x + dx;
            if (yy >= 0 && yy < H && xx >= 0 && xx < W) {
                sum += img[yy * W + xx];
            }
        }
    }
    out[y * W + x] = sum / 9.0f;
}
