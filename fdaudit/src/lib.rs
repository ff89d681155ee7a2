//! fdaudit: audits how processes hand file descriptors to their children.

pub mod arch;
pub mod bench;
pub mod caller;
pub mod cgroup;
pub mod cli;
pub mod demo;
pub mod doctor;
pub mod exit;
pub mod fdkind;
pub mod output;
pub mod procfs_util;
pub mod scan;
pub mod signals;
pub mod spawner;
pub mod stats;
pub mod sys;
pub mod trace;
pub mod tracer;
pub mod usage;
pub mod watch;

/// The eBPF object built by build.rs (empty when built with FDAUDIT_SKIP_EBPF=1).
pub static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fdaudit-ebpf.o"));
