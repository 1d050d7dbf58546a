// A first draft of scaling attention scores and filling the causal mask in place: a 2-D
// grid with x on the query rows and y on the key columns (so neighbouring threads are a
// whole row apart), one batch-head per grid z.
// @bench BH = 32, 3; L = 1024, 77
// @bench s: inout f32[BH, L, L]
// @bench scale = 0.125
// @bench grid = (cdiv(L, 16), cdiv(L, 16), BH); block = (16, 16)
// @bench reference = torch: torch.where(torch.ones(L, L, dtype=torch.bool, device=s.device).triu(1), torch.full_like(s, -1e9), s * scale)
__global__ void causal_mask_scale(float* s, int BH, int L, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int bh = blockIdx.z;
    if (i < L && j < L) {
        size_t off = ((size_t)bh * L + i) * L + j;
        if (j > i) {
            s[off] = -1e9f;
        } else {
            s[off] = s[off] * scale;
        }
    }
}
