//! Finding and running the CPU-side CUDA toolchain: NVRTC (loaded dynamically, never the
//! driver) and ptxas. Turns compiler output into messages at the author's lines.
