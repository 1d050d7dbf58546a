//! End-to-end tests: LSP sessions (in-process and over the real binary's stdio), the
//! `check` command, and a real Neovim client. Tests that need a tool this machine may
//! lack (NVRTC, ptxas, nvim) print `SKIP ...` and return, unless
//! KERNEL_LSP_REQUIRE_TOOLS=1 (CI sets it), where a missing tool fails the test.

mod bench_retime;
mod bench_triton;
mod capture;
mod cli_check;
mod client;
mod cluster;
mod corpus;
mod cures_corpus;
mod emulate;
#[path = "../gpu/cuda_backend.rs"]
mod gpu;
#[path = "../gpu/cheats.rs"]
mod gpu_cheats;
#[path = "../gpu/llm_experts.rs"]
mod gpu_llm;
#[path = "../gpu/profile.rs"]
mod gpu_profile;
#[path = "../gpu/torch_reference.rs"]
mod gpu_torch;
mod health;
mod import_kernelbench;
mod judge_torch;
mod llm_client;
mod llm_server;
mod lsp_fuzz;
mod lsp_jobs;
mod lsp_lifecycle;
mod lsp_responsive;
mod lsp_session;
mod lsp_transport;
mod nvim;
mod optimize_llm;
mod optimize_run;
mod pool_parallel;
mod profile_cpu;
mod rewrites_cuda;
mod rewrites_geometry;
mod rewrites_idioms;
mod rewrites_triton_loops;
mod rewrites_vec_groups;
mod rewrites_vec_loops;
mod rewrites_vec_rows;
mod tools;
mod torch_reference;
mod worker_listen;
mod worker_pool;
