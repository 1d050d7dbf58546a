//! GPU workers: the protocol (this issue), the worker process and the pool (next).

pub mod protocol;
