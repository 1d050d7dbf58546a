// A first draft of index_add along dim 0 (out[idx[i], :] += src[i, :]): one block per
// source row, its threads stride over the row's columns and add with atomicAdd, since
// several source rows may land in the same output row.
// @bench S = 32768, 97; D = 512, 129; R = 4096, 13
// @bench src: in f32[S, D]; idx: in i32[S] ~ randint(0, R); out: inout f32[R, D] ~ zeros
// @bench grid = S; block = 128
// @bench atol = 1e-4; rtol = 1e-4
// @bench reference = torch: out.index_add(0, idx, src)
__global__ void index_add_rows(const float* src, const int* idx, float* out, int S, int D, int R) {
    int i = blockIdx.x;
    if (i >= S) return;
    int dst = idx[i];
    const float* s = src + (size_t)i * D;
    float* o = out + (size_t)dst * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        atomicAdd(&o[d], s[d]);
    }
}
