//! A tracing session: load the programs, attach them, hold the maps, poll the ring buffer.
//!
//! This is the library face of `trace` (also used by `bench`): start, track a root process,
//! poll for [`Event`]s, read the kernel's own counters. Records are decoded in
//! [`super::decode`]; the probes' cost is measured in [`super::calibrate`].

use std::{
    os::fd::AsRawFd as _,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    Ebpf,
};
use fdaudit_common::{
    ExecFailure, ReadKey, ReadStat, Stats, TaskState, MAP_EVENTS, MAP_EXEC_FAILS, MAP_READS,
    MAP_STATS, MAP_TRACKED,
};

use super::{
    calibrate,
    decode::{self, Decoder, Event, ReadCount},
    drain::{self, Drain},
};
use crate::{
    cgroup::Hierarchy,
    ebpf::{self, Backend, BackendChoice, MissedRuns},
    procfs_util, sys,
};

/// close() calls timed per calibration batch (best of 3, traced and untraced): ~1 ms each
/// on an idle machine, enough for a per-call cost within a few percent.
const CALIBRATION_CLOSES: u32 = 2_000;

/// What to attach.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Attach the scheduler tracepoints only: leaked fds, no syscall counts, near-zero cost.
    pub leaks_only: bool,
    /// Count read()/readv()/pread64() calls and bytes per process and open file.
    pub reads: bool,
    /// Ring buffer size in bytes; `None`: [`drain::default_ring_bytes`] for the CPUs online.
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
    /// Creating the maps (aya's object load and feature probes).
    pub maps_ms: f64,
    /// Loading (verifier) and attaching the programs.
    pub attach_ms: f64,
    /// Measuring the probes' cost.
    pub calibrate_ms: f64,
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Attaches the syscall-counting programs of the chosen backend; `auto` is raw tracepoints
/// (fentry is opt-in), and an explicit fentry that fails is an error.
fn attach_syscalls(
    bpf: &mut Ebpf,
    kernel: &ebpf::KernelBtf,
    opts: &SessionOptions,
    timings: &mut StartupTimings,
) -> Result<(Backend, Option<String>)> {
    let raw = |bpf: &mut Ebpf| -> Result<()> {
        let wanted = |p: &&ebpf::ProgramSpec| p.syscall && (opts.reads || !p.reads_only);
        for spec in ebpf::PROGRAMS.iter().filter(wanted) {
            ebpf::load_and_attach(bpf, spec)
                .with_context(|| format!("failed to start program {}", spec.name))?;
        }
        Ok(())
    };
    if opts.backend == BackendChoice::RawTp {
        raw(bpf)?;
        return Ok((Backend::RawTp, None));
    }
    if opts.backend == BackendChoice::Auto {
        // fentry is opt-in until it is shown faster and safe on real hardware: in emulated
        // guests it measured slower than raw-tp and attaching it once ended in a kernel Oops
        // (README, "Backends").
        raw(bpf)?;
        return Ok((Backend::RawTp, Some(ebpf::AUTO_REASON.to_string())));
    }
    let t = Instant::now();
    let aya_btf = kernel.for_aya();
    timings.aya_btf_ms = ms_since(t);
    let fentry = aya_btf.and_then(|btf| ebpf::attach_fentry(bpf, &btf, opts.reads));
    match fentry {
        Ok(()) => Ok((Backend::Fentry, None)),
        Err(e) => Err(e).context("failed to use the fentry backend (--backend fentry)"),
    }
}

/// Loaded and attached programs with their maps. Dropping it detaches everything.
pub struct Session {
    /// The ring until the drain thread takes it (calibration reads it directly).
    events: Option<RingBuf<MapData>>,
    drain: Option<Drain>,
    decoder: Decoder,
    ring_bytes: u64,
    pub(super) tracked: HashMap<MapData, u32, TaskState>,
    stats: PerCpuArray<MapData, Stats>,
    reads: Option<HashMap<MapData, ReadKey, ReadStat>>,
    /// Failed execs' errno and path, when the exec_exit programs could be attached.
    exec_fails: Option<HashMap<MapData, u32, ExecFailure>>,
    /// Keeps programs and links alive (taken in `drop`).
    bpf: Option<Ebpf>,
    leaks_only: bool,
    /// Probe cost per counted syscall, ns, measured at start (0 with --leaks-only).
    probe_cost_ns: f64,
    /// Untraced cost of one close() on a closed fd, ns, measured at start.
    close_cost_ns: f64,
    /// The backend counting syscalls (None with --leaks-only: no syscall is hooked).
    backend: Option<Backend>,
    /// Why `auto` did not use fentry.
    fallback: Option<String>,
    timings: StartupTimings,
    /// The fentry links were handed to a child that closes them after our exit.
    handed_off: bool,
    /// The cgroup2 hierarchy, to name the cgroup ids of spawn records (None without cgroup2).
    cgroups: Option<Hierarchy>,
    /// The programs' skipped runs when the session was ready (fresh programs: zero, unless
    /// calibration's own syscalls were skipped).
    missed_baseline: MissedRuns,
}

impl Session {
    /// Loads the programs, attaches them, and measures the probes' own cost.
    pub fn start(opts: &SessionOptions) -> Result<Session> {
        let mut timings = StartupTimings::default();
        // aya's loader parses vmlinux BTF on its own: let it, on another core, while the
        // offsets are read and close() is timed here.
        let loader = std::thread::spawn(aya::EbpfLoader::new);
        let t = Instant::now();
        let kernel = ebpf::KernelBtf::read().context("failed to read kernel offsets")?;
        let mut config = kernel.config;
        config.reads = u32::from(opts.reads);
        if let Some((id, level)) = opts.cgroup {
            config.cgroup_id = id;
            config.cgroup_level = level;
        }
        timings.btf_ms = ms_since(t);
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
        let ring_bytes = opts
            .ring_bytes
            .unwrap_or_else(|| drain::default_ring_bytes(drain::online_cpus()));
        let ring_arg = u32::try_from(ring_bytes).context("the ring buffer size is too large")?;
        let mut bpf = ebpf::open_with(loader, &config, Some(ring_arg))
            .context("failed to load the eBPF object")?;
        timings.maps_ms = ms_since(t);
        let t = Instant::now();
        for spec in ebpf::PROGRAMS.iter().filter(|p| !p.syscall) {
            ebpf::load_and_attach(&mut bpf, spec)
                .with_context(|| format!("failed to start program {}", spec.name))?;
        }
        let (backend, fallback) = if opts.leaks_only {
            (None, None)
        } else {
            let (b, why) = attach_syscalls(&mut bpf, &kernel, opts, &mut timings)?;
            (Some(b), why)
        };
        timings.attach_ms = ms_since(t) - timings.aya_btf_ms;
        // Optional (see ebpf::EXEC_EXIT_PROGRAMS); needless with --leaks-only, which does not
        // count exec attempts and so reports no failed exec.
        // FDAUDIT_EXEC_EXIT=0 leaves them out: the overhead benchmark's switch
        // (measured with bench/trace/overhead.py).
        let exec_fails_ok = !opts.leaks_only
            && std::env::var_os("FDAUDIT_EXEC_EXIT").is_none_or(|v| v != "0")
            && ebpf::attach_exec_exit(&mut bpf).is_ok();
        let take = |bpf: &mut Ebpf, name: &str| {
            bpf.take_map(name)
                .with_context(|| format!("the eBPF object has no map {name}"))
        };
        let events = RingBuf::try_from(take(&mut bpf, MAP_EVENTS)?)?;
        let tracked = HashMap::try_from(take(&mut bpf, MAP_TRACKED)?)?;
        let stats = PerCpuArray::try_from(take(&mut bpf, MAP_STATS)?)?;
        let reads = if opts.reads {
            Some(HashMap::try_from(take(&mut bpf, MAP_READS)?)?)
        } else {
            None
        };
        let exec_fails = if exec_fails_ok {
            Some(HashMap::try_from(take(&mut bpf, MAP_EXEC_FAILS)?)?)
        } else {
            None
        };
        let mut session = Session {
            events: Some(events),
            drain: None,
            decoder: Decoder::new(opts.leaks_only),
            ring_bytes,
            tracked,
            stats,
            reads,
            exec_fails,
            bpf: Some(bpf),
            leaks_only: opts.leaks_only,
            probe_cost_ns: 0.0,
            close_cost_ns,
            backend,
            fallback,
            timings,
            handed_off: false,
            cgroups: Hierarchy::open(),
            missed_baseline: MissedRuns::default(),
        };
        if !opts.leaks_only {
            let t = Instant::now();
            session.probe_cost_ns =
                calibrate::probe_cost_ns(&mut session, CALIBRATION_CLOSES, close_cost_ns)
                    .context("failed to measure the probes' own cost")?;
            if session.probe_cost_ns <= 0.0 {
                // Lost in the noise (a loaded machine, an emulated guest's clock): once
                // more, ten times longer.
                let n = CALIBRATION_CLOSES * 10;
                let untraced = sys::close_cost_ns(n);
                session.close_cost_ns = untraced;
                session.probe_cost_ns = calibrate::probe_cost_ns(&mut session, n, untraced)
                    .context("failed to measure the probes' own cost")?;
            }
            session.timings.calibrate_ms += ms_since(t);
        }
        session.drain();
        session.missed_baseline = session.missed_runs_total();
        let ring = session.events.take().context("the ring buffer is gone")?;
        session.drain =
            Some(Drain::start(ring).context("failed to start the ring buffer's drain thread")?);
        Ok(session)
    }

    /// For a process about to exit (trace): with fentry, the trampolines' slow removal
    /// happens after the exit, in a child ([`ebpf::detach_after_exit`]), so the caller
    /// does not wait for it. Not for a process that goes on (bench): its later work would
    /// still run under this session's programs.
    pub fn detach_after_exit(&mut self) {
        if let (Some(Backend::Fentry), Some(bpf)) = (self.backend, &mut self.bpf) {
            ebpf::detach_after_exit(bpf);
            self.handed_off = true;
        }
    }

    /// The backend counting syscalls (None with --leaks-only).
    pub fn backend(&self) -> Option<Backend> {
        self.backend
    }

    /// Why `--backend auto` fell back to raw tracepoints, in one line.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    pub fn timings(&self) -> StartupTimings {
        self.timings
    }

    /// Probe cost per counted syscall (ns).
    pub fn probe_cost_ns(&self) -> f64 {
        self.probe_cost_ns
    }

    /// Untraced cost of one close() on a closed fd (ns), measured before attaching.
    pub fn close_cost_ns(&self) -> f64 {
        self.close_cost_ns
    }

    pub fn leaks_only(&self) -> bool {
        self.leaks_only
    }

    /// Traces `pid` and every process it forks from now on. Its own next exec is not a
    /// spawn (it is reported with the `no_fork` flag).
    pub fn track(&mut self, pid: u32) -> Result<()> {
        let st = TaskState {
            parent_pid: procfs_util::parent_of(pid).unwrap_or(0),
            ..Default::default()
        };
        self.tracked
            .insert(pid, st, 0)
            .with_context(|| format!("failed to add pid {pid} to the traced set"))?;
        Ok(())
    }

    /// Traces `pid` and all its current descendants (they are found in /proc).
    pub fn track_tree(&mut self, pid: u32) -> Result<()> {
        self.track(pid)?;
        let mut added = vec![pid];
        // Two passes: a child forked between the scan and the insert of its parent is caught
        // by the second (forks after the insert are seen by the fork program).
        for _ in 0..2 {
            for d in procfs_util::descendants(pid) {
                // fdaudit itself may be in the tree (`-p 1`): it is never traced.
                if d != std::process::id() && !added.contains(&d) {
                    let st = TaskState {
                        parent_pid: procfs_util::parent_of(d).unwrap_or(0),
                        ..Default::default()
                    };
                    // A process that exited since the scan cannot be inserted: nothing to
                    // trace, so the error is not one.
                    if self.tracked.insert(d, st, 0).is_ok() {
                        added.push(d);
                    }
                }
            }
        }
        Ok(())
    }

    /// Size of the ring buffer in bytes.
    pub fn ring_bytes(&self) -> u64 {
        self.ring_bytes
    }

    /// Waits up to `timeout` for records, then returns every record available.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Event>> {
        if let Some(d) = &self.drain {
            let raw = d.wait(timeout);
            return Ok(self.decode_all(raw));
        }
        let Some(events) = &self.events else {
            return Ok(Vec::new());
        };
        let mut pfd = libc::pollfd {
            fd: events.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e).context("failed to poll the ring buffer");
            }
        }
        Ok(self.drain())
    }

    /// Readable when records wait: the drain thread's ready eventfd (the ring buffer's fd
    /// before the thread starts).
    pub fn events_fd(&self) -> std::os::fd::RawFd {
        match (&self.drain, &self.events) {
            (Some(d), _) => d.ready_fd(),
            (None, Some(e)) => e.as_raw_fd(),
            (None, None) => -1,
        }
    }

    /// Every record now in the ring buffer (and copied out before), decoded.
    pub fn drain(&mut self) -> Vec<Event> {
        if let Some(d) = &self.drain {
            let raw = d.flush(Duration::from_secs(2));
            return self.decode_all(raw);
        }
        let mut raw = Vec::new();
        if let Some(events) = &mut self.events {
            while let Some(item) = events.next() {
                raw.push(item.to_vec());
            }
        }
        self.decode_all(raw)
    }

    fn decode_all(&mut self, raw: Vec<Vec<u8>>) -> Vec<Event> {
        let mut out = Vec::new();
        for item in &raw {
            if let Some(mut ev) = self.decoder.decode(item) {
                if let Event::Spawn(s) = &mut ev {
                    if let (Some(id), Some(h)) = (s.identity.cgroup_id, &mut self.cgroups) {
                        s.identity = h.identity(id, s.pid);
                    }
                    // Picked up at its exec by `--cgroup` (its fork was not seen): the parent
                    // from /proc while the process runs.
                    if s.parent_pid == 0 {
                        if let Some(pp) = procfs_util::parent_of(s.pid) {
                            s.parent_pid = pp;
                            s.parent_comm = crate::output::text::Lossless::new(
                                std::fs::read(format!("/proc/{pp}/comm"))
                                    .map(|mut c| {
                                        c.pop_if(|b| *b == b'\n');
                                        c
                                    })
                                    .unwrap_or_default(),
                            );
                        }
                    }
                }
                out.push(ev);
            }
        }
        for ev in &mut out {
            self.add_exec_failure(ev);
        }
        out
    }

    /// Gives a failed exec its errno and path (from the exec_exit programs' map) and drops a
    /// failure that a later exec of the same process superseded.
    fn add_exec_failure(&mut self, ev: &mut Event) {
        let Some(map) = self.exec_fails.as_mut() else {
            return;
        };
        match ev {
            Event::Exit(e) => {
                if let Some(s) = e.failed_spawn.as_mut() {
                    if let Ok(f) = map.get(&s.pid, 0) {
                        s.exec_errno = Some(f.errno);
                        s.exec_error = sys::errno_name(f.errno);
                        s.exec_path = crate::output::text::Lossless::new(decode::cstr(&f.path));
                        let _ = map.remove(&s.pid);
                    }
                }
            }
            Event::Spawn(s) if s.exec_attempts > 1 => {
                let _ = map.remove(&s.pid);
            }
            Event::Spawn(_) => {}
        }
    }

    /// The kernel's own counters, summed over CPUs.
    pub fn stats(&self) -> Result<Stats> {
        let per_cpu = self
            .stats
            .get(&0, 0)
            .context("failed to read the STATS map")?;
        let mut s = Stats::default();
        for v in per_cpu.iter() {
            s.lost_records += v.lost_records;
            s.tracked_full += v.tracked_full;
            s.reads_full += v.reads_full;
        }
        Ok(s)
    }

    /// Runs of each program the kernel skipped since the session was ready
    /// ([`crate::ebpf::misses`]): records or counts lost without a trace in the ring buffer.
    pub fn missed_runs(&self) -> MissedRuns {
        self.missed_runs_total().since(&self.missed_baseline)
    }

    /// The programs' skipped runs since they were loaded.
    fn missed_runs_total(&self) -> MissedRuns {
        match &self.bpf {
            Some(bpf) => ebpf::misses::read_all(bpf),
            None => MissedRuns::Unknown,
        }
    }

    pub fn lost_records(&self) -> Result<u64> {
        Ok(self.stats()?.lost_records)
    }

    /// Read counters (with `reads` on), for every (process, open file) seen.
    pub fn read_counts(&self) -> Vec<ReadCount> {
        let Some(reads) = &self.reads else {
            return Vec::new();
        };
        reads
            .iter()
            .filter_map(|r| r.ok())
            .map(|(key, stat)| ReadCount {
                key,
                stat,
                comm: decode::cstr(&stat.comm),
            })
            .collect()
    }
}

impl Drop for Session {
    /// Detaches everything (the fentry programs in parallel, unless
    /// [`Session::detach_after_exit`] has handed them to a child) and waits (up to 200 ms)
    /// until the kernel has let go of the programs (a raw tracepoint link frees its program
    /// after an RCU grace period): when fdaudit says it is done, nothing of it is left loaded
    /// (but for what the child detaching the fentry programs holds).
    fn drop(&mut self) {
        self.drain = None; // joins the drain thread
        let Some(mut bpf) = self.bpf.take() else {
            return;
        };
        if self.backend == Some(Backend::Fentry) {
            if self.handed_off {
                return; // the child detaches them after our exit
            }
            ebpf::detach_fentry(&mut bpf);
        }
        let ids: Vec<u32> = bpf
            .programs()
            .filter_map(|(_, p)| p.info().ok().map(|i| i.id()))
            .collect();
        drop(bpf);
        let deadline = std::time::Instant::now() + Duration::from_millis(200);
        while std::time::Instant::now() < deadline
            && aya::programs::loaded_programs()
                .filter_map(|p| p.ok())
                .any(|p| ids.contains(&p.id()))
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
