// A first draft of counting the elements above a threshold (`(x > t).sum()`): one
// integer atomic per element that passes the test.
// @bench n = 1 << 24, 99991
// @bench x: in f32[n]; count: inout i32[1] ~ zeros
// @bench t = 0.5
// @bench grid = cdiv(n, 256); block = 256
// @bench reference = torch: (x > t).sum().int().reshape(1)
__global__ void count_above(const float* __restrict__ x, int* __restrict__ count, int n, float t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] > t) atomicAdd(count, 1);
}
