//! The tracing engine: BTF offsets, loading and attaching the eBPF programs, the maps, the
//! ring-buffer drain, decoding records into spawns, the probe-cost calibration, the
//! syscall counts and the strategy they imply, and waiting on the followed processes.
//! `trace`, `watch` and `bench` are front ends over it; nothing here knows their arguments.

pub mod boundary;
pub mod btf;
pub mod btf_cache;
mod buildid;
pub mod calibrate;
pub mod cgroup_filter;
mod complete;
pub mod counting;
pub mod counts;
pub mod decode;
pub mod drain;
pub mod ebpf;
mod exec_parent;
pub mod fdtarget;
pub mod flags;
pub mod follow;
mod gopclntab;
pub mod handover;
mod ia32;
mod jit;
pub mod lifetime;
mod load_plan;
mod loader;
pub mod maker;
mod names;
pub mod origin;
pub mod pause;
mod perfmap;
mod proc_maps;
mod process;
mod pyframes;
mod runtimes;
pub mod seen;
pub mod session;
pub mod spawn;
mod stack;
mod stack_memo;
pub mod steps;
pub mod strategy;
pub(crate) mod symbolize;
mod symbols;
pub mod unclosed;
mod unwind;
pub mod wait;

#[cfg(test)]
pub(crate) mod engine_tests;
