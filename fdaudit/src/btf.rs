//! BTF (stub).
