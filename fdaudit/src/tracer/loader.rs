//! Start-up: from `fdaudit trace` to programs attached, the part of a session's start that
//! costs time, arranged so that work which does not depend on each other runs on both
//! cores.
//!
//! Measured with `trace -v`, `strace -f` and `perf record` on this project's 2-vCPU CI
//! machine, in start-up order:
//! - aya's loader is made on another thread ([`ebpf::spawn_loader`]), where its own parse
//!   of vmlinux BTF (17-50 ms) is avoided when it can be; a third thread runs aya's feature
//!   probes, the bpf_loop and task_btf helper probes (0.5-2 ms) and times an untraced
//!   close() (1 ms);
//! - meanwhile this thread maps and indexes the same BTF for the offsets (2-4 ms,
//!   [`crate::tracer::btf`]);
//! - aya creates the maps (3-4 ms, most of it the 8 MiB ring buffer, created and mapped;
//!   the traced-process table is preallocated only before Linux 6.1: [`ebpf::open_with`]);
//! - the exec program is verified on its own thread (4-30 ms of verifier time, the long
//!   pole on most kernels) while this one loads the others (4-5 ms);
//! - everything is attached, the scheduler hooks first.
//!
//! The probes' cost is not measured here: the session measures it when the first spawn
//! needs it ([`super::calibrate`]), which took 4-6 ms off every start (and all of it off a
//! trace whose spawns make no counted syscall).

use std::time::Instant;

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, MapData, RingBuf},
    Ebpf,
};
use fdaudit_common::{TaskState, MAP_EVENTS, MAP_TRACKED};

use super::drain;
use crate::{
    sys,
    tracer::ebpf::{self, Backend, BackendChoice, ExecWalk, KernelBtf, LoadError, ProgramSpec},
};

/// What to attach.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Attach the scheduler tracepoints only: leaked fds, no syscall counts, near-zero cost.
    pub leaks_only: bool,
    /// Count read()/readv()/pread64() calls and bytes per process and open file.
    pub reads: bool,
    /// Ring buffer size in bytes; `None`: [`super::drain::default_ring_bytes`] for the CPUs online.
    pub ring_bytes: Option<u64>,
    /// How to hook the counted syscalls.
    pub backend: BackendChoice,
    /// Also trace every process in this cgroup and below: (id, depth) on the cgroup2
    /// hierarchy, as [`crate::cgroup::Hierarchy::id_of`] gives them.
    pub cgroup: Option<(u64, u32)>,
}

/// Where start-up time went (ms), for `trace -v`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartupTimings {
    /// Reading and parsing vmlinux BTF (fdaudit's parse).
    pub btf_ms: f64,
    /// aya's parse of the same bytes, when fentry is tried.
    pub aya_btf_ms: f64,
    /// Waiting for aya's loader, made on another thread meanwhile
    /// ([`crate::tracer::ebpf::spawn_loader`]): part of `maps_ms`.
    pub loader_wait_ms: f64,
    /// The feature probes and the untraced close() timing, beside the BTF parse.
    pub probes_ms: f64,
    /// Waiting for them after the BTF parse: part of `maps_ms`.
    pub probes_wait_ms: f64,
    /// Creating the maps (aya's object load).
    pub maps_ms: f64,
    /// Loading (verifier) and attaching the programs.
    pub attach_ms: f64,
}

/// close() calls timed per calibration batch (best of 3, traced and untraced): ~1 ms each
/// on an idle machine, enough for a per-call cost within a few percent.
pub(super) const CALIBRATION_CLOSES: u32 = 2_000;

/// The exec program, whose bounded variant loads differently.
const EXEC: &str = "sched_process_exec";

/// The object with its programs attached.
pub(super) struct LoadedObject {
    pub bpf: Ebpf,
    /// Taken out of `bpf` for the drain thread.
    pub events: RingBuf<MapData>,
    pub tracked: HashMap<MapData, u32, TaskState>,
    /// The ring buffer's size in bytes.
    pub ring_bytes: u64,
    /// The backend counting syscalls (None with --leaks-only: no syscall is hooked).
    pub backend: Option<Backend>,
    /// Why `auto` did not use fentry.
    pub fallback: Option<String>,
    /// The exec_exit programs are attached: failed execs get their errno and path.
    pub exec_fails: bool,
    /// Untraced cost of one close() on a closed fd, ns, measured before anything was
    /// attached (0 with --leaks-only).
    pub close_cost_ns: f64,
    pub timings: StartupTimings,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// What the probes thread of [`load`] found.
struct Probed {
    exec_walk: ExecWalk,
    close_cost_ns: f64,
    ms: f64,
}

/// Creates the maps, loads the programs `opts` needs and attaches them.
pub(super) fn load(opts: &SessionOptions) -> Result<LoadedObject> {
    let mut timings = StartupTimings::default();
    let loader = ebpf::spawn_loader();
    // aya's feature probes (a dozen tiny loads it would make when creating the maps, cached
    // for the process), the bpf_loop probe and the untraced close() cost, beside the BTF
    // parse; nothing is attached yet, so the close() timing is the untraced one.
    let leaks_only = opts.leaks_only;
    let probes = std::thread::spawn(move || {
        let t = Instant::now();
        let _ = ebpf::has_task_btf(); // first: KernelBtf::read waits for it
        let _ = aya::features();
        let exec_walk = ebpf::exec_walk();
        let close_cost_ns = if leaks_only {
            0.0
        } else {
            sys::close_cost_ns(CALIBRATION_CLOSES)
        };
        Probed {
            exec_walk,
            close_cost_ns,
            ms: ms_since(t),
        }
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
    let t = Instant::now();
    let probed = probes
        .join()
        .map_err(|_| anyhow::anyhow!("the feature probes panicked"))?;
    timings.probes_wait_ms = ms_since(t);
    timings.probes_ms = probed.ms;
    let wait = Instant::now();
    let loader = loader
        .join()
        .map_err(|_| anyhow::anyhow!("aya's loader panicked"))?;
    timings.loader_wait_ms = ms_since(wait);
    let ring_bytes = opts
        .ring_bytes
        .unwrap_or_else(|| drain::default_ring_bytes(drain::online_cpus()));
    let ring_arg = u32::try_from(ring_bytes).context("the ring buffer size is too large")?;
    let mut bpf = ebpf::open_with(loader, &config, Some(ring_arg))
        .context("failed to load the eBPF object")?;
    let mut take = |name: &str| {
        bpf.take_map(name)
            .with_context(|| format!("the eBPF object has no map {name}"))
    };
    let events = RingBuf::try_from(take(MAP_EVENTS)?)?;
    let tracked = HashMap::try_from(take(MAP_TRACKED)?)?;
    timings.maps_ms = ms_since(t);
    let t = Instant::now();
    let a = attach_programs(&mut bpf, &kernel, opts, probed.exec_walk)?;
    timings.aya_btf_ms = a.aya_btf_ms;
    timings.attach_ms = ms_since(t) - a.aya_btf_ms;
    Ok(LoadedObject {
        bpf,
        events,
        tracked,
        ring_bytes,
        backend: a.backend,
        fallback: a.fallback,
        exec_fails: a.exec_fails,
        close_cost_ns: probed.close_cost_ns,
        timings,
    })
}

/// What [`attach_programs`] did.
struct Attached {
    backend: Option<Backend>,
    fallback: Option<String>,
    exec_fails: bool,
    aya_btf_ms: f64,
}

/// Which programs a session loads, and in what order they are attached.
struct Plan {
    /// The scheduler programs (fork, exec, exit).
    sched: Vec<&'static ProgramSpec>,
    /// The raw-tracepoint syscall counters (none with --leaks-only or fentry).
    raw_syscalls: Vec<&'static ProgramSpec>,
    /// Every program loaded in one go: the required ones, then the optional exec_exit ones.
    names: Vec<&'static str>,
    /// How many of `names` are required.
    required: usize,
    exec_walk: ExecWalk,
    want_exec_exit: bool,
}

impl Plan {
    fn new(opts: &SessionOptions, exec_walk: ExecWalk) -> Self {
        const SPECS: &[ProgramSpec] = &ebpf::PROGRAMS;
        let sched: Vec<&ProgramSpec> = SPECS.iter().filter(|p| !p.syscall).collect();
        let raw_syscalls: Vec<&ProgramSpec> = match (opts.leaks_only, opts.backend) {
            (true, _) | (false, BackendChoice::Fentry) => Vec::new(),
            // auto is raw-tp: fentry is opt-in until it is shown faster and safe on real
            // hardware (in emulated guests it measured slower than raw-tp and attaching it
            // once ended in a kernel Oops: docs/kernels.md).
            (false, BackendChoice::Auto | BackendChoice::RawTp) => SPECS
                .iter()
                .filter(|p| p.syscall && (opts.reads || !p.reads_only))
                .collect(),
        };
        // Optional (see ebpf::EXEC_EXIT_PROGRAMS); needless with --leaks-only, which does
        // not count exec attempts and so reports no failed exec. FDAUDIT_EXEC_EXIT=0 leaves
        // them out: the overhead benchmark's switch (bench/trace/overhead.py).
        let want_exec_exit =
            !opts.leaks_only && std::env::var_os("FDAUDIT_EXEC_EXIT").is_none_or(|v| v != "0");
        let mut plan = Plan {
            sched,
            raw_syscalls,
            names: Vec::new(),
            required: 0,
            exec_walk,
            want_exec_exit,
        };
        plan.names = plan
            .sched
            .iter()
            .filter(|p| !plan.bounded(p))
            .chain(&plan.raw_syscalls)
            .map(|p| p.name)
            .collect();
        plan.required = plan.names.len();
        if want_exec_exit {
            plan.names.extend(ebpf::EXEC_EXIT_PROGRAMS.map(|(n, _)| n));
        }
        plan
    }

    /// The bounded exec walk (5.10, 5.15) fills a tail-call map between its loads: it
    /// keeps its own sequence, after the others.
    fn bounded(&self, p: &ProgramSpec) -> bool {
        self.exec_walk == ExecWalk::Bounded && p.name == EXEC
    }
}

/// One load result per [`Plan::names`] entry (None: the object has no such program).
type LoadResults = Vec<Option<Result<(), LoadError>>>;

/// Loads every program `opts` needs (see [`load_all`]) and attaches them in order: the
/// scheduler hooks first (a spawn never has syscall counts without its fork), then the
/// syscall counters, then the optional exec_exit programs.
fn attach_programs(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    opts: &SessionOptions,
    exec_walk: ExecWalk,
) -> Result<Attached> {
    let plan = Plan::new(opts, exec_walk);
    let mut results = load_all(bpf, &plan);
    let exec_exit_loaded = results.split_off(plan.required);
    for (name, loaded) in plan.names.iter().zip(results) {
        loaded
            .unwrap_or(Err(LoadError::MissingProgram(name)))
            .with_context(|| format!("failed to start program {name}"))?;
    }
    for spec in &plan.sched {
        let attached = if plan.bounded(spec) {
            ebpf::load_and_attach(bpf, spec)
        } else {
            ebpf::attach_loaded(bpf, spec)
        };
        attached.with_context(|| format!("failed to start program {}", spec.name))?;
    }
    let (backend, fallback, aya_btf_ms) = attach_syscall_counters(bpf, kernel, opts, &plan)?;
    let exec_fails = plan.want_exec_exit
        && exec_exit_loaded.iter().all(|r| matches!(r, Some(Ok(()))))
        && ebpf::attach_exec_exit_loaded(bpf).is_ok();
    Ok(Attached {
        backend,
        fallback,
        exec_fails,
        aya_btf_ms,
    })
}

/// Loads every program of the plan at once, on two threads (two cores): the exec program,
/// whose verifier is the long pole on most kernels, with the small exec_exit ones on a
/// thread of its own (the verifier of privileged loads takes no global lock), the rest on
/// this one: that split balances the two threads' verifier time (docs/performance.md has
/// the per-program figures).
fn load_all(bpf: &mut Ebpf, plan: &Plan) -> LoadResults {
    let names = &plan.names;
    let beside =
        |name: &str| name == EXEC || ebpf::EXEC_EXIT_PROGRAMS.iter().any(|(n, _)| *n == name);
    let mut results: LoadResults = names.iter().map(|_| None).collect();
    let (mut there, mut here) = (Vec::new(), Vec::new());
    for (name, prog) in bpf.programs_mut() {
        if let Some(i) = names.iter().position(|&n| n == name) {
            if beside(name) {
                there.push((i, prog));
            } else {
                here.push((i, prog));
            }
        }
    }
    // The exec program first: it is the one the others wait for.
    there.sort_by_key(|(i, _)| names[*i] != EXEC);
    let load =
        |(i, prog): (usize, &mut aya::programs::Program)| (i, ebpf::load_program(prog, names[i]));
    let done: Vec<(usize, Result<(), LoadError>)> = std::thread::scope(|s| {
        let thread = s.spawn(|| there.into_iter().map(load).collect::<Vec<_>>());
        let mut done: Vec<_> = here.into_iter().map(load).collect();
        done.extend(
            thread
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        );
        done
    });
    for (i, r) in done {
        results[i] = Some(r);
    }
    results
}

/// Attaches the syscall counters of the chosen backend: (backend, why auto chose it,
/// aya's BTF parse in ms).
fn attach_syscall_counters(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    opts: &SessionOptions,
    plan: &Plan,
) -> Result<(Option<Backend>, Option<String>, f64)> {
    match (opts.leaks_only, opts.backend) {
        (true, _) => Ok((None, None, 0.0)),
        (false, BackendChoice::Fentry) => {
            let t = Instant::now();
            let aya_btf = kernel.for_aya();
            let aya_btf_ms = ms_since(t);
            aya_btf
                .and_then(|btf| ebpf::attach_fentry(bpf, &btf, opts.reads))
                .context("failed to use the fentry backend (--backend fentry)")?;
            Ok((Some(Backend::Fentry), None, aya_btf_ms))
        }
        (false, choice) => {
            for spec in &plan.raw_syscalls {
                ebpf::attach_loaded(bpf, spec)
                    .with_context(|| format!("failed to start program {}", spec.name))?;
            }
            let why = (choice == BackendChoice::Auto).then(|| ebpf::AUTO_REASON.to_string());
            Ok((Some(Backend::RawTp), why, 0.0))
        }
    }
}
