//! `fdaudit watch`: a long-running node agent exporting Prometheus metrics.

pub mod metrics;
