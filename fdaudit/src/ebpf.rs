//! eBPF loading (stub).
