//! The cuda backend of the worker (in progress).
