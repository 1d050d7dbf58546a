//! GPU workers. `protocol`: the JSON-lines messages. `backend`: the trait a language
//! backend implements. `cuda`, `triton`: the backends (worker side). The worker's request
//! loop and the server-side pool come with their own modules.

pub mod backend;
pub mod cuda;
#[cfg(unix)]
pub mod listen;
pub mod pool;
pub mod protocol;
pub mod sanitize;
pub mod serve;
pub mod triton;
