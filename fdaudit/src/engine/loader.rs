//! Start-up: from `fdaudit trace` to programs attached, the part of a session's start that
//! costs time, arranged so that work which does not depend on each other runs on both
//! cores. In start-up order (what each step cost, measured with `trace -v`, `strace -f` and
//! `perf record`: docs/performance.md):
//! - aya's loader is made on another thread ([`ebpf::spawn_loader`]), where its own parse
//!   of vmlinux BTF is avoided when it can be; a third thread runs aya's feature probes,
//!   the bpf_loop and task_btf helper probes and times an untraced close();
//! - meanwhile this thread maps and indexes the same BTF for the offsets
//!   ([`crate::engine::btf`]);
//! - aya creates the maps (the first ring buffer is 1 MiB and grows under pressure:
//!   [`super::drain`]; the traced-process table is preallocated only before Linux 6.1:
//!   [`ebpf::open_with`]);
//! - the exec program is verified on its own thread (the verifier's time on it is the long
//!   pole on most kernels) while this one loads the others and then attaches the fork and
//!   exit hooks, the failed-exec programs and tp's syscall counters;
//! - the rest is attached, the scheduler hooks first; where a cgroup is followed, the fork
//!   hook, which begins tracing its processes, comes last of all.
//!
//! The probes' cost is not measured here: the session measures it when the first spawn
//! needs it ([`super::calibrate`]), so a trace whose spawns make no counted syscall never
//! pays for it.

use std::time::Instant;

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, MapData, RingBuf},
    Ebpf,
};
use fdaudit_common::{TaskState, MAP_EVENTS, MAP_TRACKED, NO_OFFSET};

use super::{
    counting::Counting,
    drain, handover,
    load_plan::{raw_syscall_specs, Plan, EXEC},
};
use crate::{
    engine::ebpf::{self, Backend, BackendChoice, ExecWalk, KernelBtf, LoadError, ProgramSpec},
    sys,
};

/// What to attach.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// What the kernel counts: nothing but leaked fds (the scheduler tracepoints only,
    /// near-zero cost), the syscalls, or the syscalls and the reads per process and open file.
    pub counting: Counting,
    /// Record the calls that make fds inheritable (`trace --origin`): two more syscall
    /// programs, run only by the followed tree's fd-creating calls.
    pub origin: bool,
    /// Keep the followed processes' live fds in the kernel (`unclosed`'s own programs).
    pub unclosed: bool,
    /// Ring buffer size in bytes, fixed; `None`: [`super::drain::FIRST_RING_BYTES`], grown
    /// under pressure to [`super::drain::default_ring_bytes`] for the CPUs online.
    pub ring_bytes: Option<u64>,
    /// How to hook the counted syscalls.
    pub backend: BackendChoice,
    /// Also trace every process in this cgroup and below: (id, depth) on the cgroup2
    /// hierarchy, as [`crate::cgroup::Hierarchy::id_of`] gives them.
    pub cgroup: Option<(u64, u32)>,
    /// Its directory: kernels before 5.14 find its processes by it ([`super::cgroup_filter`]).
    pub cgroup_dir: Option<std::path::PathBuf>,
    /// `watch`: batched records, no /proc read per spawn ([`super::fdtarget::Agent`]).
    pub agent: bool,
}

/// Where start-up time went (ms), for `trace -v`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartupTimings {
    /// Reading and parsing vmlinux BTF (fdaudit's parse), or reading its cache.
    pub btf_ms: f64,
    /// The offsets came from the cache ([`crate::engine::btf_cache`]).
    pub btf_cached: bool,
    /// aya's parse of the same bytes, when fentry is tried.
    pub aya_btf_ms: f64,
    /// Waiting for aya's loader, made on another thread meanwhile
    /// ([`crate::engine::ebpf::spawn_loader`]): part of `maps_ms`.
    pub loader_wait_ms: f64,
    /// The feature probes, beside the BTF read.
    pub probes_ms: f64,
    /// Waiting for them after the BTF read: part of `maps_ms`.
    pub probes_wait_ms: f64,
    /// The untraced close() timing, after the feature probes, beside the maps.
    pub close_timing_ms: f64,
    /// Creating the maps (aya's object load).
    pub maps_ms: f64,
    /// Loading (verifier) and attaching the programs.
    pub attach_ms: f64,
}

/// close() calls timed per calibration batch (best of 3, traced and untraced): enough for a
/// per-call cost within a few percent on an idle machine, short enough to pay at start.
pub(super) const CALIBRATION_CLOSES: u32 = 2_000;

/// The object with its programs attached.
pub(super) struct LoadedObject {
    pub bpf: Ebpf,
    /// Taken out of `bpf` for the drain thread.
    pub events: RingBuf<MapData>,
    pub tracked: HashMap<MapData, u32, TaskState>,
    /// The (first) ring buffer's size in bytes.
    pub ring_bytes: u64,
    /// How it grows, unless its size was given.
    pub grow: Option<drain::Grow>,
    /// The backend counting syscalls (None with --no-syscalls: no syscall is hooked).
    pub backend: Option<Backend>,
    /// Why `auto` chose the backend it did.
    pub fallback: Option<String>,
    /// The backend counts native syscalls only and this kernel runs ia32 ones
    /// ([`ebpf::ia32_syscalls`]): those are not counted.
    pub ia32_unseen: bool,
    /// The failed-exec programs are attached: failed execs get their errno and path.
    pub failed_execs: bool,
    /// Untraced cost of one close() on a closed fd, ns, measured before anything was
    /// attached (0 with --no-syscalls).
    pub close_cost_ns: f64,
    pub timings: StartupTimings,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// What the probes thread of [`load`] found.
struct Probed {
    exec_walk: ExecWalk,
    ms: f64,
}

/// The probes thread of [`load`]: what it found is sent first; it returns the untraced
/// close() cost (ns), its time (ms) and the hold of [`handover::LOCK`] (kept until attached).
fn spawn_probes(
    counting: Counting,
) -> (
    std::sync::mpsc::Receiver<Probed>,
    std::thread::JoinHandle<(f64, f64, handover::Held)>,
) {
    // aya's feature probes (a dozen tiny loads it would make creating the maps, cached for the
    // process) and the bpf_loop probe beside the BTF read: the maps wait for them. Then the
    // untraced close() cost (nothing is attached yet) and the hand-over lock, for the programs.
    let (probed_tx, probed_rx) = std::sync::mpsc::channel();
    let probes = std::thread::spawn(move || {
        let starting = handover::starting(counting.syscalls());
        let t = Instant::now();
        let _ = ebpf::task_btf(); // first: KernelBtf::read waits for it
        let _ = aya::features();
        let exec_walk = ebpf::exec_walk();
        let _ = probed_tx.send(Probed {
            exec_walk,
            ms: ms_since(t),
        });
        let t = Instant::now();
        let ns = if !counting.syscalls() {
            0.0
        } else {
            sys::close_cost_ns(CALIBRATION_CLOSES)
        };
        (ns, ms_since(t), starting.held())
    });
    (probed_rx, probes)
}

/// Creates the maps, loads the programs `opts` needs and attaches them.
pub(super) fn load(opts: &SessionOptions) -> Result<LoadedObject> {
    let mut timings = StartupTimings::default();
    let loader = ebpf::spawn_loader();
    let (probed_rx, probes) = spawn_probes(opts.counting);
    let t = Instant::now();
    let kernel = KernelBtf::read_cached().context("failed to read kernel offsets")?;
    let mut config = kernel.config;
    config.reads = u32::from(opts.counting.reads());
    config.origin = u32::from(opts.origin);
    (config.unclosed, config.quiet_spawns) = (u32::from(opts.unclosed), u64::from(opts.agent));
    super::cgroup_filter::configure(&mut config, opts.cgroup);
    timings.btf_ms = ms_since(t);
    timings.btf_cached = kernel.cached;
    let t = Instant::now();
    let probed = probed_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the feature probes panicked"))?;
    timings.probes_wait_ms = ms_since(t);
    timings.probes_ms = probed.ms;
    let wait = Instant::now();
    let loader = loader
        .join()
        .map_err(|_| anyhow::anyhow!("aya's loader panicked"))?;
    timings.loader_wait_ms = ms_since(wait);
    let ring_bytes = opts.ring_bytes.unwrap_or(drain::FIRST_RING_BYTES);
    let ring_arg = u32::try_from(ring_bytes).context("the ring buffer size is too large")?;
    let grown_bytes = drain::default_ring_bytes(drain::online_cpus());
    let mut bpf = ebpf::open_with(loader, &config, Some(ring_arg))
        .context("failed to load the eBPF object")?;
    super::cgroup_filter::fill(&mut bpf, &config, opts.cgroup_dir.as_deref())?;
    let mut take = |name: &str| {
        bpf.take_map(name)
            .with_context(|| format!("the eBPF object has no map {name}"))
    };
    let events = RingBuf::try_from(take(MAP_EVENTS)?)?;
    let tracked = HashMap::try_from(take(MAP_TRACKED)?)?;
    let grow = match opts.ring_bytes {
        None if grown_bytes > ring_bytes => Some(drain::Grow {
            slot: ebpf::RingSlot::of(&bpf).context("failed to load the eBPF object")?,
            bytes: u32::try_from(grown_bytes).context("the ring buffer size is too large")?,
        }),
        _ => None,
    };
    timings.maps_ms = ms_since(t);
    super::pause::at("maps");
    let (close_cost_ns, close_ms, _held) = probes
        .join()
        .map_err(|_| anyhow::anyhow!("the close() timing panicked"))?;
    timings.close_timing_ms = close_ms;
    let t = Instant::now();
    let a = attach_programs(&mut bpf, &kernel, opts, probed.exec_walk)?;
    timings.aya_btf_ms = a.aya_btf_ms;
    timings.attach_ms = ms_since(t) - a.aya_btf_ms;
    super::pause::at("attached");
    Ok(LoadedObject {
        bpf,
        events,
        tracked,
        ring_bytes,
        grow,
        backend: a.backend,
        fallback: a.fallback,
        ia32_unseen: a.backend.is_some_and(Backend::native_only) && kernel.ia32,
        failed_execs: a.failed_execs,
        close_cost_ns,
        timings,
    })
}

/// What [`attach_programs`] did.
struct Attached {
    backend: Option<Backend>,
    fallback: Option<String>,
    failed_execs: bool,
    aya_btf_ms: f64,
}

/// One load result per [`Plan::names`] entry (None: the object has no such program).
type LoadResults = Vec<Option<Result<(), LoadError>>>;

/// What [`load_all`] attached while the exec program was verified.
#[derive(Default)]
struct Early {
    /// The scheduler hooks but the exec one (fork, exit), with their attach results.
    sched: Vec<(&'static str, Result<(), LoadError>)>,
    /// tp's counters ([`attach_tp_early`]); None when not tried.
    tp: Option<Result<(), String>>,
    /// Whether the failed-exec programs were attached; None when not tried.
    failed_exec: Option<bool>,
}

/// Loads every program `opts` needs (see [`load_all`]) and attaches them in order: the
/// scheduler hooks first (a spawn never has syscall counts without its fork), then the
/// syscall counters, then the optional failed-exec programs. The fork and exit hooks, the
/// failed-exec programs and tp's counters come earlier, beside the exec program's verifier
/// ([`load_all`]), while no process is traced; the fork hook of a followed cgroup comes
/// after everything ([`Plan::fork_last`]).
fn attach_programs(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    opts: &SessionOptions,
    exec_walk: ExecWalk,
) -> Result<Attached> {
    let plan = Plan::new(
        opts.counting,
        opts.backend,
        opts.cgroup.is_some(),
        exec_walk,
    );
    let (mut results, early) = load_all(bpf, &plan);
    results.truncate(plan.failed_exec_end); // tp's results: attach_tp reports its own
    let failed_exec_loaded = results.split_off(plan.required);
    for (name, loaded) in plan.names.iter().zip(results) {
        loaded
            .unwrap_or(Err(LoadError::MissingProgram(name)))
            .with_context(|| format!("failed to start program {name}"))?;
    }
    let attached_early: Vec<&str> = early.sched.iter().map(|(name, _)| *name).collect();
    for (name, attached) in early.sched {
        attached.with_context(|| format!("failed to start program {name}"))?;
    }
    let attach_sched = |bpf: &mut Ebpf, spec: &ProgramSpec| {
        let attached = if plan.bounded(spec) {
            ebpf::load_and_attach(bpf, spec)
        } else {
            ebpf::attach_loaded(bpf, spec)
        };
        attached.with_context(|| format!("failed to start program {}", spec.name))
    };
    for spec in &plan.sched {
        if !attached_early.contains(&spec.name) && !plan.attached_last(spec.name) {
            attach_sched(bpf, spec)?;
        }
    }
    let (backend, fallback, aya_btf_ms) =
        attach_syscall_counters(bpf, kernel, opts, &plan, early.tp)?;
    ebpf::python::load_chain(bpf, opts.origin).context("failed to load the Python walk")?;
    let io_uring = opts.unclosed && kernel.config.io_kiocb_opcode != u64::from(NO_OFFSET);
    let io_uring = io_uring.then_some(&ebpf::UNCLOSED_IO_URING);
    for spec in ebpf::mode_programs(opts.origin, opts.unclosed).chain(io_uring) {
        ebpf::load_and_attach(bpf, spec)
            .with_context(|| format!("failed to start program {}", spec.name))?;
    }
    // Syscall tracepoints are named through tracefs, which a fresh boot may not mount.
    let failed_execs = plan.want_failed_exec
        && failed_exec_loaded.iter().all(|r| matches!(r, Some(Ok(()))))
        && early.failed_exec.unwrap_or_else(|| {
            crate::sys::ensure_tracefs() && ebpf::attach_failed_exec_loaded(bpf).is_ok()
        });
    for spec in plan.sched.iter().filter(|s| plan.attached_last(s.name)) {
        attach_sched(bpf, spec)?;
    }
    Ok(Attached {
        backend,
        fallback,
        failed_execs,
        aya_btf_ms,
    })
}

/// Loads every program of the plan at once, on two threads (two cores): the exec program,
/// whose verifier is the long pole on most kernels, on a thread of its own (the verifier of
/// privileged loads takes no global lock), the rest on this one, which ends first and then
/// attaches what it can (docs/performance.md has the per-program figures).
fn load_all(bpf: &mut Ebpf, plan: &Plan) -> (LoadResults, Early) {
    let names = &plan.names;
    let mut results: LoadResults = names.iter().map(|_| None).collect();
    let (mut there, mut here) = (None, Vec::new());
    for (name, prog) in bpf.programs_mut() {
        if let Some(i) = names.iter().position(|&n| n == name) {
            if name == EXEC {
                there = Some((i, prog));
            } else {
                here.push((i, prog));
            }
        }
    }
    let load = |(i, prog): &mut (usize, &mut aya::programs::Program)| {
        (*i, ebpf::load_program(prog, names[*i]))
    };
    let mut early = Early::default();
    let done: Vec<(usize, Result<(), LoadError>)> = std::thread::scope(|s| {
        let thread = s.spawn(|| there.iter_mut().map(load).collect::<Vec<_>>());
        let mut done: Vec<_> = here.iter_mut().map(load).collect();
        // While the exec program is verified (the long pole: this thread's loads end
        // before it), what can be attached before it is: the fork
        // and exit hooks (exec's comes after fork's, as before), the failed-exec programs, then
        // tp's counters. No process is traced yet (the maps are this load's; a followed
        // cgroup's fork hook, which would trace its processes, waits: Plan::fork_last), so
        // the order counts nothing wrong. Only when every load here worked (the optional failed-exec
        // ones apart): a failure is reported as before.
        let optional = |i: usize| ebpf::failed_exec_program(names[i]).is_some();
        if done.iter().all(|(i, r)| r.is_ok() || optional(*i)) {
            for (i, prog) in &mut here {
                let spec = plan
                    .sched
                    .iter()
                    .find(|s| s.name == names[*i] && plan.attached_early(s.name));
                if let Some(spec) = spec {
                    early
                        .sched
                        .push((spec.name, ebpf::attach_program(prog, spec)));
                }
            }
            // The failed-exec programs too (syscall exit tracepoints, so after the close()
            // timing, which load waited for): attached after the exec program, they added
            // to start-up after its verifier.
            if plan.want_failed_exec && crate::sys::ensure_tracefs() {
                let progs = here.iter_mut().map(|(i, p)| (names[*i], &mut **p));
                early.failed_exec = Some(ebpf::attach_loaded_failed_exec(progs).is_ok());
            }
            if plan.tries_tp {
                early.tp = Some(attach_tp_early(here, names));
            }
            super::pause::at("early-attach");
        }
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
    (results, early)
}

/// tp's probe and attach, made while the exec program is verified on the other thread
/// ([`load_all`]), so that they are off the start-up's critical path. Err is why tp
/// cannot be used ([`attach_tp`] then detaches what was attached).
fn attach_tp_early(
    here: Vec<(usize, &mut aya::programs::Program)>,
    names: &[&'static str],
) -> Result<(), String> {
    ebpf::probe_tp()?;
    ebpf::attach_loaded_tp(here.into_iter().map(|(i, p)| (names[i], p)))
        .map_err(|e| ebpf::one_line(&e))
}

/// Attaches the syscall counters of the chosen backend: (backend, why auto chose it,
/// aya's BTF parse in ms). `auto` is tp where it works, else raw-tp, and says why;
/// fentry is opt-in.
fn attach_syscall_counters(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    opts: &SessionOptions,
    plan: &Plan,
    tp_early: Option<Result<(), String>>,
) -> Result<(Option<Backend>, Option<String>, f64)> {
    let choice = opts.backend;
    if !opts.counting.syscalls() {
        return Ok((None, None, 0.0));
    }
    let mut passed_over: Vec<String> = Vec::new();
    let mut aya_btf_ms = 0.0;
    if choice == BackendChoice::Fentry {
        attach_fentry(bpf, kernel, opts.counting.reads(), &mut aya_btf_ms).map_err(|why| {
            anyhow::anyhow!("--backend fentry: {why}: use --backend tp or raw-tp")
        })?;
        return Ok((Some(Backend::Fentry), None, aya_btf_ms));
    }
    if choice == BackendChoice::Auto {
        // fentry is opt-in: in emulated guests it measured slower than raw-tp, one attach
        // in a 6.12 TCG guest ended in a kernel Oops, and under it the root suite's
        // calibration check failed in a 7.2 guest (docs/kernels.md).
        passed_over.push(ebpf::FENTRY_OPT_IN.to_string());
    }
    // tp when chosen, and auto's first try: measured the cheapest here on every workload
    // (see [`ebpf::AUTO_TP`]).
    if plan.tries_tp {
        match attach_tp(bpf, opts.counting.reads(), tp_early) {
            Ok(reads) => {
                let auto = (choice == BackendChoice::Auto)
                    .then(|| format!("auto: {}; {}", passed_over.join("; "), ebpf::AUTO_TP));
                let why = match (auto, reads) {
                    (Some(a), Some(r)) => Some(format!("{a}; {r}")),
                    (a, r) => a.or(r),
                };
                return Ok((Some(Backend::Tp), why, aya_btf_ms));
            }
            Err(why) if choice == BackendChoice::Tp => {
                anyhow::bail!("--backend tp: {why}: use --backend raw-tp")
            }
            Err(why) => passed_over.push(format!("tp: {why}")),
        }
    }
    // raw-tp: loaded with the others when chosen, else (auto's fallback) now.
    let loaded_before = choice == BackendChoice::RawTp;
    for spec in raw_syscall_specs(opts.counting.reads()) {
        let attached = if loaded_before {
            debug_assert!(plan.raw_syscalls.contains(&spec));
            ebpf::attach_loaded(bpf, spec)
        } else {
            ebpf::load_and_attach(bpf, spec)
        };
        attached.with_context(|| format!("failed to start program {}", spec.name))?;
    }
    let why = (choice == BackendChoice::Auto).then(|| format!("auto: {}", passed_over.join("; ")));
    Ok((Some(Backend::RawTp), why, aya_btf_ms))
}

/// The fentry backend, probed with one syscall first: where the kernel refuses every
/// tracing program (EPERM under lockdown or a hardened policy) that is the whole story, in
/// a line. Err is why not, in one line, with nothing left attached.
fn attach_fentry(
    bpf: &mut Ebpf,
    kernel: &KernelBtf,
    reads: bool,
    aya_btf_ms: &mut f64,
) -> Result<(), String> {
    ebpf::probe_fentry(kernel.btf().map_err(|e| ebpf::one_line(&e))?)?;
    let t = Instant::now();
    let aya_btf = kernel.for_aya();
    *aya_btf_ms = ms_since(t);
    aya_btf
        .and_then(|btf| ebpf::attach_fentry(bpf, &btf, reads))
        .map_err(|e| {
            ebpf::detach_fentry(bpf);
            ebpf::one_line(&e)
        })
}

/// The tp backend: its tracepoints probed (tracefs, the record layout), its programs
/// attached, and with `reads` the read syscalls' exit tracepoint programs where the kernel
/// lets them find the fd (5.15+: [`ebpf::probe_tp_reads`]), else the raw sys_exit program
/// (a syscall exit tracepoint's record lacks the fd). Err is why not, with nothing left
/// attached.
/// Ok says, with `reads`, where the read counts come from.
/// `early`: what [`attach_tp_early`] did, None when it was not tried (a tp program did not
/// load: attaching here retries the load and reports its error).
fn attach_tp(
    bpf: &mut Ebpf,
    reads: bool,
    early: Option<Result<(), String>>,
) -> Result<Option<String>, String> {
    let attached = match early {
        Some(attached) => attached,
        None => {
            ebpf::probe_tp().and_then(|()| ebpf::attach_tp(bpf).map_err(|e| ebpf::one_line(&e)))
        }
    };
    if let Err(why) = attached {
        ebpf::detach_tp(bpf); // loaded with the others (Plan::new), now not needed
        return Err(why);
    }
    if !reads {
        return Ok(None);
    }
    let why_not = match ebpf::probe_tp_reads() {
        Ok(()) => {
            ebpf::attach_tp_reads(bpf).map_err(|e| ebpf::one_line(&e))?;
            return Ok(Some(
                "--reads from the read syscalls' exit tracepoints".into(),
            ));
        }
        Err(why) => why,
    };
    let exit = ebpf::PROGRAMS
        .iter()
        .find(|p| p.reads_only)
        .expect("sys_exit is in PROGRAMS");
    if let Err(e) = ebpf::load_and_attach(bpf, exit) {
        ebpf::detach_tp(bpf);
        return Err(ebpf::one_line(&e));
    }
    Ok(Some(format!(
        "--reads from raw sys_exit (every syscall exit): {why_not}"
    )))
}

#[cfg(test)]
mod tests {
    /// An error with a cause, as aya's are.
    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Chained {
        text: &'static str,
        #[source]
        source: Option<Box<Chained>>,
    }

    #[test]
    fn one_line_says_each_cause_once_without_an_empty_verifier_tail() {
        let e = Chained {
            text: "the kernel refused the fentry program fentry_close on __x64_sys_close",
            source: Some(Box::new(Chained {
                text: "the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier output: ",
                source: Some(Box::new(Chained {
                    text: "Operation not permitted (os error 1)",
                    source: None,
                })),
            })),
        };
        assert_eq!(
            super::ebpf::one_line(&e),
            "the kernel refused the fentry program fentry_close on __x64_sys_close: \
             the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)"
        );
    }
}
