//! The triton backend of the worker (in progress).
