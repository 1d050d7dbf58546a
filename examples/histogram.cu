// A 256-bin histogram of bytes with one global atomic per input byte: the first draft.
// Every increment goes to one of 256 addresses in global memory, so the atomics queue up
// in L2. `kernel-lsp optimize` gives each block a private copy in shared memory.

// @bench n = 1 << 26, 1000003
// @bench data: in u8[n] ~ randint(0, 256); hist: inout u32[256] ~ zeros
// @bench grid = cdiv(n, 256); block = 256
extern "C" __global__ void histogram(const unsigned char* data, unsigned int* hist, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&hist[data[i]], 1u);
    }
}
