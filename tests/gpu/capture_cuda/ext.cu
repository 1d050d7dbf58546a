// A small PyTorch CUDA extension for `kernel-lsp capture` on the GPU (issue #32): four
// kernels in different styles, launched from C++ host functions with `<<<...>>>`.
#include <torch/extension.h>

// 1-D elementwise with a separate output.
__global__ void scale_add_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}

// 2-D grid over rows and columns; the bias has one value per column.
__global__ void bias_relu_kernel(const float* x, const float* bias, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        float v = x[r * cols + c] + bias[c];
        y[r * cols + c] = v > 0.f ? v : 0.f;
    }
}

// One block per row, a shared-memory tree reduction; the block size is a template argument.
template <int BLOCK>
__global__ void row_sum_kernel(const float* x, float* out, int rows, int cols) {
    extern __shared__ float part[];
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) acc += x[blockIdx.x * cols + c];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// In place: y += a * x.
__global__ void axpy_kernel(float* y, const float* x, float a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

torch::Tensor scale_add(torch::Tensor x, torch::Tensor y, double alpha) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    scale_add_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                               out.data_ptr<float>(), (float)alpha, n);
    return out;
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    dim3 block(32, 8);
    dim3 grid((cols + 31) / 32, (rows + 7) / 8);
    bias_relu_kernel<<<grid, block>>>(x.data_ptr<float>(), bias.data_ptr<float>(),
                                      y.data_ptr<float>(), rows, cols);
    return y;
}

torch::Tensor row_sum(torch::Tensor x) {
    int rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({rows}, x.options());
    row_sum_kernel<256><<<rows, 256, 256 * sizeof(float)>>>(x.data_ptr<float>(),
                                                             out.data_ptr<float>(), rows, cols);
    return out;
}

void axpy_(torch::Tensor y, torch::Tensor x, double a) {
    long long n = y.numel();
    axpy_kernel<<<(unsigned)((n + 127) / 128), 128>>>(y.data_ptr<float>(), x.data_ptr<float>(),
                                                      (float)a, n);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("scale_add", &scale_add);
    m.def("bias_relu", &bias_relu);
    m.def("row_sum", &row_sum);
    m.def("axpy_", &axpy_);
}
