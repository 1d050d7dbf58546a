// A first draft of a bincount into a small histogram: one global atomicAdd per element,
// size_t indices.
// @bench n = 1 << 25, 70001; NB = 100, 7
// @bench v: in i32[n] ~ randint(0, NB); hist: inout i32[NB] ~ zeros
// @bench grid = cdiv(n, 512); block = 512
// @bench reference = torch: torch.bincount(v, minlength=NB).int()
__global__ void bincount(const int* v, int* hist, size_t n, int NB) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[v[i]], 1);
}
