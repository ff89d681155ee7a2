//! Start-up: from `fdaudit trace` to programs attached, the part of a session's start that
//! costs time, arranged so that work which does not depend on each other runs on both cores.
//!
//! Measured with `trace -v` and `perf record` on this project's 2-vCPU CI machine: aya
//! 0.14's `EbpfLoader::new()` parses vmlinux BTF (17-50 ms) though fdaudit's programs have
//! no CO-RE relocations to use it for, and its fields are private, so it cannot be skipped:
//! it runs on another thread while fdaudit maps and indexes the same BTF for its offsets
//! (1-3 ms, [`crate::btf`]), runs aya's feature probes, the bpf_loop probe and the untraced
//! close() timing. Then the programs are verified one thread each (the exec program alone
//! takes 10-30 ms of verifier time) and attached in order.

use std::time::Instant;

use anyhow::{Context as _, Result};
use aya::{Ebpf, EbpfLoader};

use super::session::{SessionOptions, StartupTimings};
use crate::{
    ebpf::{self, Backend, BackendChoice, ExecWalk, KernelBtf, ProgramSpec},
    sys,
};

/// close() calls timed per calibration batch (best of 3, traced and untraced): ~1 ms each
/// on an idle machine, enough for a per-call cost within a few percent.
pub(super) const CALIBRATION_CLOSES: u32 = 2_000;

/// The object with its programs attached.
pub(super) struct Loaded {
    pub bpf: Ebpf,
    /// The backend counting syscalls (None with --leaks-only: no syscall is hooked).
    pub backend: Option<Backend>,
    /// Why `auto` did not use fentry.
    pub fallback: Option<String>,
    /// The exec_exit programs are attached: failed execs get their errno and path.
    pub exec_fails: bool,
    /// Untraced cost of one close() on a closed fd, ns (0 with --leaks-only).
    pub close_cost_ns: f64,
    pub timings: StartupTimings,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Creates the maps, loads the programs `opts` needs and attaches them.
pub(super) fn load(opts: &SessionOptions) -> Result<Loaded> {
    let mut timings = StartupTimings::default();
    let loader = std::thread::spawn(|| {
        let mut loader = EbpfLoader::new();
        // No CO-RE relocations: aya needs no target BTF. Dropping its parse here frees
        // it on this thread too.
        loader.btf(None);
        loader
    });
    let t = Instant::now();
    let kernel = KernelBtf::read().context("failed to read kernel offsets")?;
    let mut config = kernel.config;
    config.reads = u32::from(opts.reads);
    if let Some((id, level)) = opts.cgroup {
        config.cgroup_id = id;
        config.cgroup_level = level;
    }
    timings.btf_ms = ms_since(t);
    // While aya parses: its feature probes (a dozen tiny loads it would make when creating
    // the maps) and the bpf_loop probe, both cached for the process.
    let t = Instant::now();
    let _ = aya::features();
    let exec_walk = ebpf::exec_walk();
    let probes_ms = ms_since(t);
    let t = Instant::now();
    let close_cost_ns = if opts.leaks_only {
        0.0
    } else {
        sys::close_cost_ns(CALIBRATION_CLOSES)
    };
    timings.calibrate_ms = ms_since(t);
    let t = Instant::now();
    let loader = loader
        .join()
        .map_err(|_| anyhow::anyhow!("aya's loader panicked"))?;
    let mut bpf = ebpf::open_with(loader, &config).context("failed to load the eBPF object")?;
    timings.maps_ms = ms_since(t) + probes_ms;
    let t = Instant::now();
    let (backend, fallback, exec_fails) =
        load_and_attach(&mut bpf, &kernel, opts, exec_walk, &mut timings)?;
    timings.attach_ms = ms_since(t) - timings.aya_btf_ms;
    Ok(Loaded {
        bpf,
        backend,
        fallback,
        exec_fails,
        close_cost_ns,
        timings,
    })
}

/// Loads every program `opts` needs at once, then attaches them in order: the scheduler
/// hooks first (a spawn never has syscall counts without its fork), then the syscall
/// counters, then the optional exec_exit programs. Returns the backend, why `auto` chose
/// it, and whether failed execs are recorded.
fn load_and_attach(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    opts: &SessionOptions,
    exec_walk: ExecWalk,
    timings: &mut StartupTimings,
) -> Result<(Option<Backend>, Option<String>, bool)> {
    let sched: Vec<&ProgramSpec> = ebpf::PROGRAMS.iter().filter(|p| !p.syscall).collect();
    let raw_syscalls: Vec<&ProgramSpec> = match (opts.leaks_only, opts.backend) {
        (true, _) | (false, BackendChoice::Fentry) => Vec::new(),
        // auto is raw-tp: fentry is opt-in until it is shown faster and safe on real
        // hardware (in emulated guests it measured slower than raw-tp and attaching it once
        // ended in a kernel Oops: README, "Backends").
        (false, BackendChoice::Auto | BackendChoice::RawTp) => ebpf::PROGRAMS
            .iter()
            .filter(|p| p.syscall && (opts.reads || !p.reads_only))
            .collect(),
    };
    // Optional (see ebpf::EXEC_EXIT_PROGRAMS); needless with --leaks-only, which does not
    // count exec attempts and so reports no failed exec. FDAUDIT_EXEC_EXIT=0 leaves them
    // out: the overhead benchmark's switch (bench/trace/overhead.py).
    let want_exec_exit =
        !opts.leaks_only && std::env::var_os("FDAUDIT_EXEC_EXIT").is_none_or(|v| v != "0");
    // The bounded exec walk (5.10, 5.15) fills a tail-call map between its loads: it keeps
    // its own sequence.
    let bounded = |p: &&&ProgramSpec| exec_walk == ExecWalk::Bounded && p.name == EXEC;
    let mut names: Vec<&'static str> = sched
        .iter()
        .filter(|p| !bounded(p))
        .chain(&raw_syscalls)
        .map(|p| p.name)
        .collect();
    let required = names.len();
    if want_exec_exit {
        names.extend(ebpf::EXEC_EXIT_PROGRAMS.map(|(n, _)| n));
    }
    let mut results = ebpf::load_concurrently(bpf, &names);
    let exec_exit_loaded = results.split_off(required);
    for (name, loaded) in names.iter().zip(results) {
        loaded.with_context(|| format!("failed to start program {name}"))?;
    }
    for spec in &sched {
        let attached = if bounded(&spec) {
            ebpf::load_and_attach(bpf, spec)
        } else {
            ebpf::attach_loaded(bpf, spec)
        };
        attached.with_context(|| format!("failed to start program {}", spec.name))?;
    }
    let (backend, fallback) = match (opts.leaks_only, opts.backend) {
        (true, _) => (None, None),
        (false, BackendChoice::Fentry) => {
            let t = Instant::now();
            let aya_btf = kernel.for_aya();
            timings.aya_btf_ms = ms_since(t);
            aya_btf
                .and_then(|btf| ebpf::attach_fentry(bpf, &btf, opts.reads))
                .context("failed to use the fentry backend (--backend fentry)")?;
            (Some(Backend::Fentry), None)
        }
        (false, choice) => {
            for spec in &raw_syscalls {
                ebpf::attach_loaded(bpf, spec)
                    .with_context(|| format!("failed to start program {}", spec.name))?;
            }
            let why = (choice == BackendChoice::Auto).then(|| ebpf::AUTO_REASON.to_string());
            (Some(Backend::RawTp), why)
        }
    };
    let exec_fails = want_exec_exit
        && exec_exit_loaded.iter().all(Result::is_ok)
        && ebpf::attach_exec_exit_loaded(bpf).is_ok();
    Ok((backend, fallback, exec_fails))
}

/// The exec program, whose bounded variant loads differently.
const EXEC: &str = "sched_process_exec";
