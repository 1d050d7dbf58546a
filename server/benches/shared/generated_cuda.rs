//! The keystroke benchmark's CUDA file, shared with the document's region tests
//! (`server/src/document/region_tests.rs`), so both measure and check the same shape of file.

/// `kernels` blocks of about 50 lines: `helpers` one-line device helpers (each calling
/// the previous one), a 5-line spec, a kernel with loops that calls the last helper,
/// and comment lines.
pub fn generated_file(kernels: usize, helpers: usize) -> String {
    let mut s = String::from("#include <cuda_fp16.h>\n#include <cstdio>\n\n");
    for k in 0..kernels {
        s.push_str(&format!(
            "__device__ __forceinline__ float helper_{k}_0(float a, float v) {{ return a * v; }}\n"
        ));
        for h in 1..helpers {
            s.push_str(&format!(
                "__device__ __forceinline__ float helper_{k}_{h}(float a, float v) {{ return helper_{k}_{}(a, v) * 0.5f + v; }}\n",
                h - 1
            ));
        }
        let last = helpers - 1;
        s.push_str(&format!(
            "\n// kernel {k}: a generated workload\n\
             // @bench n = 1 << 20, 4099\n\
             // @bench x: in f32[n]; y: inout f32[n] ~ normal(0, 1)\n\
             // @bench a = 2.5; w = 4\n\
             // @bench grid = cdiv(n, 256 * w); block = 256\n\
             // @bench atol = 1e-4\n\
             extern \"C\" __global__ void kern_{k}(int n, float a, const float* __restrict__ x, float* __restrict__ y) {{\n\
             \x20   int base = (blockIdx.x * blockDim.x + threadIdx.x) * 4;\n\
             \x20   float acc[4];\n\
             \x20   #pragma unroll\n\
             \x20   for (int j = 0; j < 4; ++j) {{\n\
             \x20       int i = base + j;\n\
             \x20       acc[j] = i < n ? helper_{k}_{last}(a, x[i]) : 0.0f;\n\
             \x20   }}\n\
             \x20   for (int j = 0; j < 4; ++j) {{\n\
             \x20       int i = base + j;\n\
             \x20       if (i < n) {{\n\
             \x20           y[i] = acc[j] + y[i];\n\
             \x20       }}\n\
             \x20   }}\n\
             }}\n\n"
        ));
    }
    s
}
