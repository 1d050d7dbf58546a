// A first draft of per-row symmetric int8 quantization: one thread per row finds the
// row's absolute maximum, writes the scale, then quantizes the row.
// @bench rows = 8192, 1001; cols = 4096, 77
// @bench x: in f32[rows, cols]; q: out i8[rows, cols]; scale: out f32[rows]
// @bench grid = cdiv(rows, 256); block = 256
// @bench reference = torch: (torch.round(x / (x.abs().amax(1, keepdim=True) / 127.0)).clamp(-127, 127).to(torch.int8), x.abs().amax(1) / 127.0)
__global__ void rowwise_int8_quant(const float* x, signed char* q, float* scale, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        float amax = 0.0f;
        for (int c = 0; c < cols; ++c) amax = fmaxf(amax, fabsf(x[row * cols + c]));
        float s = amax / 127.0f;
        scale[row] = s;
        for (int c = 0; c < cols; ++c) {
            int v = __float2int_rn(x[row * cols + c] / s);
            v = min(127, max(-127, v));
            q[row * cols + c] = (signed char)v;
        }
    }
}
