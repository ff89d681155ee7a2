//! Start-up: from `fdaudit trace` to programs attached and their cost measured, the part of
//! a session's start that costs time, arranged so that work which does not depend on each
//! other runs on both cores.
//!
//! Measured with `trace -v`, `strace -f` and `perf record` on this project's 2-vCPU CI
//! machine, in start-up order:
//! - aya's loader is made on another thread ([`ebpf::spawn_loader`]), where its own parse
//!   of vmlinux BTF (17-50 ms) is avoided when it can be;
//! - meanwhile this thread maps and indexes the same BTF for the offsets (1-3 ms,
//!   [`crate::btf`]), runs aya's feature probes and the bpf_loop probe (0.4 ms) and times
//!   an untraced close() (1 ms);
//! - aya creates the maps (4-6 ms: the hash tables are preallocated, the ring buffer's
//!   8 MiB mapped);
//! - the exec program is verified on its own thread (10-30 ms of verifier time, the long
//!   pole) while this one loads the fork, exit and syscall programs (3-4 ms), attaches them,
//!   measures the probes' cost (3-4 ms) and loads the exec_exit ones;
//! - the rest is attached.

use std::time::Instant;

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, MapData, RingBuf},
    programs::Program,
    Ebpf,
};
use fdaudit_common::{TaskState, MAP_EVENTS, MAP_TRACKED};

use super::{calibrate, drain};
use crate::{
    ebpf::{self, Backend, BackendChoice, ExecWalk, KernelBtf, LoadError, ProgramSpec},
    sys,
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
    /// ([`crate::ebpf::spawn_loader`]): part of `maps_ms`.
    pub loader_wait_ms: f64,
    /// Creating the maps (aya's object load and feature probes).
    pub maps_ms: f64,
    /// Loading (verifier) and attaching the programs.
    pub attach_ms: f64,
    /// Measuring the probes' cost.
    pub calibrate_ms: f64,
    /// The probes' cost was measured while the exec programs were verified (part of
    /// `attach_ms`, not after it).
    pub calibration_overlapped: bool,
}

/// close() calls timed per calibration batch (best of 3, traced and untraced): ~1 ms each
/// on an idle machine, enough for a per-call cost within a few percent.
const CALIBRATION_CLOSES: u32 = 2_000;

/// The exec program, whose bounded variant loads differently.
const EXEC: &str = "sched_process_exec";

/// The object with its programs attached.
pub(super) struct Loaded {
    pub bpf: Ebpf,
    /// Taken out of `bpf` for the calibration.
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
    /// Probe cost per counted syscall, ns (0 with --leaks-only).
    pub probe_cost_ns: f64,
    /// Untraced cost of one close() on a closed fd, ns (0 with --leaks-only).
    pub close_cost_ns: f64,
    pub timings: StartupTimings,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Creates the maps, loads the programs `opts` needs, attaches them and measures their
/// cost.
pub(super) fn load(opts: &SessionOptions) -> Result<Loaded> {
    let mut timings = StartupTimings::default();
    let loader = ebpf::spawn_loader();
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
    let mut events = RingBuf::try_from(take(MAP_EVENTS)?)?;
    let mut tracked = HashMap::try_from(take(MAP_TRACKED)?)?;
    timings.maps_ms = ms_since(t) + probes_ms;
    let t = Instant::now();
    let mut maps = calibrate::Maps {
        tracked: &mut tracked,
        events: &mut events,
    };
    let a = load_and_attach(&mut bpf, &kernel, opts, exec_walk, &mut maps, close_cost_ns)?;
    let (probe_cost_ns, close_cost_ns) = match a.calibration {
        Some(c) => {
            timings.calibrate_ms += c.ms;
            timings.calibration_overlapped = c.overlapped;
            (c.probe_cost_ns, c.close_cost_ns)
        }
        None => (0.0, close_cost_ns),
    };
    timings.aya_btf_ms = a.aya_btf_ms;
    // The programs' own time: with calibration after them, not its share.
    timings.attach_ms = ms_since(t)
        - a.aya_btf_ms
        - a.calibration
            .filter(|c| !c.overlapped)
            .map_or(0.0, |c| c.ms);
    Ok(Loaded {
        bpf,
        events,
        tracked,
        ring_bytes,
        backend: a.backend,
        fallback: a.fallback,
        exec_fails: a.exec_fails,
        probe_cost_ns,
        close_cost_ns,
        timings,
    })
}

/// What [`load_and_attach`] did.
struct Attached {
    backend: Option<Backend>,
    fallback: Option<String>,
    exec_fails: bool,
    aya_btf_ms: f64,
    /// None with --leaks-only.
    calibration: Option<Calibration>,
}

/// The probes' measured cost.
#[derive(Debug, Clone, Copy)]
struct Calibration {
    probe_cost_ns: f64,
    close_cost_ns: f64,
    ms: f64,
    /// Measured while the exec programs were verified.
    overlapped: bool,
}

fn calibrate(
    maps: &mut calibrate::Maps<'_>,
    untraced_ns: f64,
    overlapped: bool,
) -> Result<Calibration> {
    let t = Instant::now();
    let (probe_cost_ns, close_cost_ns) = calibrate::measure(maps, CALIBRATION_CLOSES, untraced_ns)
        .context("failed to measure the probes' own cost")?;
    Ok(Calibration {
        probe_cost_ns,
        close_cost_ns,
        ms: ms_since(t),
        overlapped,
    })
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
    /// Attached (in this order) and calibrated while the exec program is verified.
    early: Vec<&'static ProgramSpec>,
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
            // once ended in a kernel Oops: README, "Backends").
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
            early: Vec::new(),
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
        // Calibration needs the fork and exit programs and the syscall counters, not the
        // exec ones: those are attached first and measured while the exec ones are
        // verified. Nothing is traced before the session tracks its roots, so attaching
        // the syscall counters before the exec program changes nothing; except with
        // --cgroup, whose programs follow the cgroup's processes from their attach: there
        // everything is attached in order first.
        if opts.cgroup.is_none() && !plan.raw_syscalls.is_empty() {
            plan.early = plan
                .sched
                .iter()
                .chain(&plan.raw_syscalls)
                .copied()
                .filter(|p| p.name != EXEC)
                .collect();
        }
        plan
    }

    /// The bounded exec walk (5.10, 5.15) fills a tail-call map between its loads: it
    /// keeps its own sequence, after the others.
    fn bounded(&self, p: &ProgramSpec) -> bool {
        self.exec_walk == ExecWalk::Bounded && p.name == EXEC
    }

    fn is_early(&self, spec: &ProgramSpec) -> bool {
        self.early.iter().any(|p| p.name == spec.name)
    }

    /// Position in the loading order of `names[i]`: the early programs first, in attach
    /// order, then the rest in `names` order.
    fn rank(&self, i: usize) -> usize {
        self.early
            .iter()
            .position(|p| p.name == self.names[i])
            .unwrap_or(self.early.len() + i)
    }
}

/// One load result per [`Plan::names`] entry (None: the object has no such program).
type LoadResults = Vec<Option<Result<(), LoadError>>>;

/// Loads every program `opts` needs (see [`load_all`]), attaches them in order (the
/// scheduler hooks first: a spawn never has syscall counts without its fork; then the
/// syscall counters; then the optional exec_exit programs) and measures their cost.
fn load_and_attach(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    opts: &SessionOptions,
    exec_walk: ExecWalk,
    maps: &mut calibrate::Maps<'_>,
    untraced_ns: f64,
) -> Result<Attached> {
    let plan = Plan::new(opts, exec_walk);
    let (mut results, mut calibration) = load_all(bpf, &plan, maps, untraced_ns)?;
    let exec_exit_loaded = results.split_off(plan.required);
    for (name, loaded) in plan.names.iter().zip(results) {
        loaded
            .unwrap_or(Err(LoadError::MissingProgram(name)))
            .with_context(|| format!("failed to start program {name}"))?;
    }
    for spec in plan.sched.iter().filter(|p| !plan.is_early(p)) {
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
    if calibration.is_none() && !opts.leaks_only {
        calibration = Some(calibrate(maps, untraced_ns, false)?);
    }
    Ok(Attached {
        backend,
        fallback,
        exec_fails,
        aya_btf_ms,
        calibration,
    })
}

/// Loads every program of the plan at once. The exec program's verifier is the long pole
/// (10-30 ms; the others take 0.3-3 ms each): it runs on a thread of its own (the verifier
/// of privileged loads takes no global lock) while this one loads the others, one after
/// the other, attaches the early ones and calibrates (3-4 ms on a quiet machine). Two
/// cores, two threads: with a thread per program the early ones shared the cores with the
/// exec one and were attached after 12-28 ms (load 5-8 on the CI machine), this way after
/// 3-16 ms.
fn load_all(
    bpf: &mut Ebpf,
    plan: &Plan,
    maps: &mut calibrate::Maps<'_>,
    untraced_ns: f64,
) -> Result<(LoadResults, Option<Calibration>)> {
    let names = &plan.names;
    std::thread::scope(|s| -> Result<_> {
        let mut exec_load = None;
        let mut here: Vec<(usize, &mut Program)> = Vec::new();
        for (name, prog) in bpf.programs_mut() {
            let Some(i) = names.iter().position(|&n| n == name) else {
                continue;
            };
            if name == EXEC {
                exec_load = Some((i, s.spawn(move || ebpf::load_program(prog, EXEC))));
            } else {
                here.push((i, prog));
            }
        }
        here.sort_by_key(|(i, _)| plan.rank(*i));
        let mut results: LoadResults = names.iter().map(|_| None).collect();
        let mut calibration = None;
        let mut attached = 0;
        for (i, prog) in here {
            let loaded = ebpf::load_program(prog, names[i]);
            if let Some(spec) = plan.early.iter().find(|p| p.name == names[i]) {
                loaded.with_context(|| format!("failed to start program {}", spec.name))?;
                ebpf::attach_program(prog, spec)
                    .with_context(|| format!("failed to start program {}", spec.name))?;
                attached += 1;
                if attached == plan.early.len() {
                    calibration = Some(calibrate(maps, untraced_ns, true)?);
                }
                results[i] = Some(Ok(()));
            } else {
                results[i] = Some(loaded);
            }
        }
        if let Some((i, load)) = exec_load {
            results[i] = Some(load.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        Ok((results, calibration))
    })
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
            for spec in plan.raw_syscalls.iter().filter(|p| !plan.is_early(p)) {
                ebpf::attach_loaded(bpf, spec)
                    .with_context(|| format!("failed to start program {}", spec.name))?;
            }
            let why = (choice == BackendChoice::Auto).then(|| ebpf::AUTO_REASON.to_string());
            Ok((Some(Backend::RawTp), why, 0.0))
        }
    }
}
