// A first draft of int8 weight dequantization with one scale per output row
// (`q.float() * scale[:, None]`): one element per thread.
// @bench rows = 8192, 31; cols = 8192, 100
// @bench q: in i8[rows, cols] ~ randint(-128, 128); scale: in f32[rows]; y: out f32[rows, cols]
// @bench grid = cdiv(rows * cols, 256); block = 256
// @bench reference = torch: q.float() * scale[:, None]
__global__ void dequant(const signed char* q, const float* scale, float* y, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) y[i] = (float)q[i] * scale[i / cols];
}
