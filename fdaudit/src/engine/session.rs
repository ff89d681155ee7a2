//! A tracing session: load the programs, attach them, hold the maps, poll the ring buffer.
//!
//! The engine's face for `trace`, `watch` and `bench`: start, track a root process, poll
//! for [`Event`]s (complete spawns: see [`Session::complete`]), read the kernel's own
//! counters. Records are decoded in
//! [`super::decode`]; the programs are loaded and their cost measured in
//! [`super::loader`].

use std::time::Duration;

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, MapData, PerCpuArray},
    Ebpf,
};
use fdaudit_common::{
    FdPath, ReadKey, ReadStat, Stats, TaskState, MAP_FAILED_EXECS, MAP_READS, MAP_READ_PATHS,
    MAP_STATS,
};

pub use super::lifetime::{SessionEnd, SessionStart};
pub use super::loader::{SessionOptions, StartupTimings};
use super::{
    calibrate,
    complete::Completion,
    counting::Counting,
    decode::{self, Decoder},
    drain::Drain,
    loader,
    process::Processes,
    spawn::{Event, ReadCount},
};
use crate::{
    engine::ebpf::{self, Backend, MissedRuns},
    procfs_util,
};

/// What a session started with, fixed from then on.
struct Started {
    /// The first ring buffer's size, bytes (`--buffer-pages`, or the default first ring).
    first_ring_bytes: u64,
    /// Untraced cost of one close() on a closed fd, ns, measured at start.
    close_cost_ns: f64,
    /// The backend counting syscalls (None with --no-syscalls: no syscall is hooked).
    backend: Option<Backend>,
    /// Why `auto` chose the backend it did.
    fallback: Option<String>,
    /// The backend does not count the ia32 syscalls this kernel runs.
    ia32_unseen: bool,
    timings: StartupTimings,
    /// The programs' skipped runs when the session was ready.
    missed_baseline: MissedRuns,
}

/// Drain passes at most before a leaked fd is named `not seen` for good, while origin
/// records the kernel sent are still to be decoded ([`Session::decode_all`]).
const ORIGIN_PASSES: usize = 4;

/// Loaded and attached programs with their maps. Dropping it detaches everything.
pub struct Session {
    drain: Option<Drain>,
    decoder: Decoder,
    pub(super) tracked: HashMap<MapData, u32, TaskState>,
    stats: PerCpuArray<MapData, Stats>,
    reads: Option<HashMap<MapData, ReadKey, ReadStat>>,
    /// The paths of storms' files, walked by the kernel while they were open.
    read_paths: Option<HashMap<MapData, ReadKey, FdPath>>,
    /// Keeps programs and links alive (taken in `drop`).
    bpf: Option<Ebpf>,
    /// What the kernel counts (the session's options).
    counting: Counting,
    /// The probes' own cost, measured once.
    calibration: calibrate::Calibration,
    /// Warnings for the front end ([`Session::take_warnings`]).
    warnings: Vec<String>,
    /// What the session started with.
    started: Started,
    /// The fentry or failed-exec links were handed to a child that closes them after our exit.
    handed_off: bool,
    /// [`Session::detach_after_exit`] was called: the process exits next.
    exiting: bool,
    /// Fills in what the records leave to user space ([`Completion`]).
    completion: Completion,
}

/// The decoder `opts` ask for: an agent's reads nothing from /proc per spawn; `--origin`'s
/// names origins (and Python frames through `python`).
fn decoder(opts: &SessionOptions, python: super::pyframes::Registry) -> Decoder {
    let live: &'static dyn super::fdtarget::Live = if opts.agent {
        &super::fdtarget::Agent
    } else {
        &super::fdtarget::Procfs
    };
    let d = Decoder::new(opts.counting, live);
    if opts.origin {
        d.with_origins(python)
    } else {
        d
    }
}

impl Session {
    /// Loads the programs and attaches them (the probes' own cost is measured later, when
    /// the first spawn needs it).
    pub fn start(opts: &SessionOptions) -> Result<Session> {
        let loader::LoadedObject {
            mut bpf,
            events,
            tracked,
            ring_bytes,
            grow,
            backend,
            fallback,
            ia32_unseen,
            failed_execs: failed_execs_ok,
            close_cost_ns,
            timings,
        } = loader::load(opts)?;
        let take = |bpf: &mut Ebpf, name: &str| {
            bpf.take_map(name)
                .with_context(|| format!("the eBPF object has no map {name}"))
        };
        let stats = PerCpuArray::try_from(take(&mut bpf, MAP_STATS)?)?;
        let (reads, read_paths) = if opts.counting.reads() {
            (
                Some(HashMap::try_from(take(&mut bpf, MAP_READS)?)?),
                Some(HashMap::try_from(take(&mut bpf, MAP_READ_PATHS)?)?),
            )
        } else {
            (None, None)
        };
        let failed_execs = if failed_execs_ok {
            Some(HashMap::try_from(take(&mut bpf, MAP_FAILED_EXECS)?)?)
        } else {
            None
        };
        // `trace --origin`: the CPython processes' entries (pyframes).
        let python = if opts.origin {
            let map = take(&mut bpf, fdaudit_common::MAP_PY_PROCS)?;
            super::pyframes::Registry::new(HashMap::try_from(map)?)
        } else {
            super::pyframes::Registry::default()
        };
        // Fresh programs: zero, as a rule.
        let missed_baseline = ebpf::misses::read_all(&bpf);
        Ok(Session {
            drain: Some(
                Drain::start(events, ring_bytes, grow)
                    .context("failed to start the ring buffer's drain thread")?,
            ),
            decoder: decoder(opts, python),
            tracked,
            stats,
            reads,
            read_paths,
            completion: Completion::new(failed_execs, ia32_unseen, opts.agent),
            bpf: Some(bpf),
            counting: opts.counting,
            calibration: calibrate::Calibration {
                probe_cost_ns: (!opts.counting.syscalls()).then_some(0.0),
                ms: 0.0,
                failed: false,
                ignored: Vec::new(),
            },
            warnings: Vec::new(),
            started: Started {
                first_ring_bytes: ring_bytes,
                close_cost_ns,
                backend,
                fallback,
                ia32_unseen,
                timings,
                missed_baseline,
            },
            handed_off: false,
            exiting: false,
        })
    }

    /// For a process about to exit (trace, unclosed): the detaches happen after the exit, in a
    /// child ([`ebpf::detach_after_exit`]), so the caller does not wait for them: the
    /// fentry trampolines' removal, the tracepoint programs' (a syscall trace event's
    /// program detach waits for RCU grace periods, which would be most of fdaudit's exit
    /// time), the raw tracepoints'. Not for a process that goes on (bench): its later work
    /// would still run under this session's programs. Dropping the session then does not
    /// wait for the kernel to free the rest.
    pub fn detach_after_exit(&mut self) {
        self.exiting = true;
        let hand_off = matches!(self.started.backend, Some(Backend::Fentry | Backend::Tp))
            || self.completion.names_failed_execs();
        if let (true, Some(bpf)) = (hand_off, &mut self.bpf) {
            ebpf::detach_after_exit(bpf);
            self.handed_off = true;
        }
    }

    /// The backend counting syscalls (None with --no-syscalls).
    pub fn backend(&self) -> Option<Backend> {
        self.started.backend
    }

    /// What the backend does not count here ([`ebpf::IA32_UNSEEN`]), for a note.
    pub fn unseen(&self) -> Option<String> {
        let backend = self.started.backend.filter(|_| self.started.ia32_unseen)?;
        Some(format!(
            "{} backend: {}",
            backend.as_str(),
            ebpf::IA32_UNSEEN
        ))
    }

    /// Why `--backend auto` chose its backend, in one line.
    pub fn fallback(&self) -> Option<&str> {
        self.started.fallback.as_deref()
    }

    pub fn timings(&self) -> StartupTimings {
        self.started.timings
    }

    /// Probe cost per counted syscall (ns), measured on the first call (three forks, 8000
    /// close() calls and the waits; [`super::calibrate`]) while the programs
    /// are attached; 0 with --no-syscalls.
    fn probe_cost_ns(&mut self) -> Result<f64> {
        if let Some(ns) = self.calibration.probe_cost_ns {
            return Ok(ns);
        }
        let t = std::time::Instant::now();
        let bpf = self
            .bpf
            .as_ref()
            .context("the programs were already detached")?;
        let m = calibrate::measure(
            bpf,
            &mut self.tracked,
            loader::CALIBRATION_CLOSES,
            self.started.close_cost_ns,
        )
        .context("failed to measure the probes' own cost")?;
        self.calibration
            .ignored
            .extend(m.pids.iter().filter(|&&p| p != 0));
        self.calibration.probe_cost_ns = Some(m.probe_cost_ns);
        self.calibration.ms = t.elapsed().as_secs_f64() * 1e3;
        Ok(m.probe_cost_ns)
    }

    /// The probe cost, if [`Session::probe_cost_ns`] measured it, and how long that took
    /// (ms).
    pub fn probe_cost_measured(&self) -> Option<(f64, f64)> {
        self.calibration
            .probe_cost_ns
            .map(|ns| (ns, self.calibration.ms))
    }

    /// What the kernel counts, as the session was started.
    pub fn counting(&self) -> Counting {
        self.counting
    }

    /// What a front end learns of the session when it starts.
    pub fn at_start(&self) -> SessionStart {
        SessionStart {
            counting: self.counting,
            close_cost_ns: self.started.close_cost_ns,
            ring_bytes: self.ring_bytes(),
        }
    }

    /// What a front end learns of the session at its end (before it is detached).
    pub fn at_end(&self) -> Result<SessionEnd> {
        Ok(SessionEnd {
            stats: self.stats()?,
            missed: self.missed_runs(),
            queue_dropped: self.queue_dropped(),
            first_ring_bytes: self.started.first_ring_bytes,
            ring_bytes: self.ring_bytes(),
            ring_grow_failed: self.drain.as_ref().and_then(Drain::grow_failed),
            probe_cost_ns: self.probe_cost(),
            calibration: self.probe_cost_measured(),
            late_origins: self.decoder.late_origins(),
            origin_records_decoded: self.decoder.origin_records(),
        })
    }

    /// Takes map `name` out of the loaded object (`fdaudit unclosed`'s maps).
    pub fn take_map(&mut self, name: &str) -> Result<aya::maps::Map> {
        self.bpf
            .as_mut()
            .and_then(|b| b.take_map(name))
            .with_context(|| format!("the eBPF object has no map {name}"))
    }

    /// `pid`'s entry in the traced set, if it is traced.
    pub fn task_state(&self, pid: u32) -> Option<TaskState> {
        self.tracked.get(&pid, 0).ok()
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
        // After the insert: an fd made from now on has an origin record.
        self.decoder.note_attached(pid);
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
                        self.decoder.note_attached(d);
                        added.push(d);
                    }
                }
            }
        }
        Ok(())
    }

    /// How many traced processes are still alive: those in the traced set whose exit the
    /// kernel has not seen (it removes them at exit) and that /proc still shows running.
    pub fn traced_alive(&self) -> usize {
        self.tracked
            .keys()
            .filter_map(|k| k.ok())
            .filter(|&pid| procfs_util::alive(pid))
            .count()
    }

    /// Size of the ring buffer in bytes now: the first ring's, or the grown one's.
    pub fn ring_bytes(&self) -> u64 {
        self.drain
            .as_ref()
            .map_or(self.started.first_ring_bytes, Drain::ring_bytes)
    }

    /// Waits up to `timeout` for records, then returns every record available.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Event>> {
        let raw = self.drain.as_ref().map(|d| d.wait(timeout));
        Ok(self.decode_all(raw.unwrap_or_default()))
    }

    /// Readable when records wait: the drain thread's ready eventfd.
    pub fn events_fd(&self) -> std::os::fd::RawFd {
        self.drain.as_ref().map_or(-1, Drain::ready_fd)
    }

    /// Every record now in the ring buffer (and copied out before), decoded.
    pub fn drain(&mut self) -> Vec<Event> {
        let raw = self.flush_raw();
        self.decode_all(raw)
    }

    /// Every record now in the ring buffer (and copied out before), undecoded.
    fn flush_raw(&mut self) -> Vec<Vec<u8>> {
        let raw = self.drain.as_ref().map(|d| d.flush(Duration::from_secs(2)));
        raw.unwrap_or_default()
    }

    fn decode_all(&mut self, raw: Vec<Vec<u8>>) -> Vec<Event> {
        // Out of the completion while records are decoded: the decoder's --origin learns
        // parent links into it, the records written since included.
        let mut procs = std::mem::take(&mut self.completion.processes);
        let mut out = self.decode_raw(&raw, &mut procs);
        // `--origin`: a leaked fd without an origin is named again once the records written
        // meanwhile are read (its origin record may have reached the reader after it): at
        // least one more pass, and more while fewer origin records are decoded than the
        // kernel had sent when the fd was named (bounded: a busy host sends more all along).
        if self.decoder.any_not_seen(&mut out) {
            let sent = self.stats().map_or(0, |s| s.origin_records);
            let mut later = Vec::new();
            for _ in 0..ORIGIN_PASSES {
                let raw = self.flush_raw();
                later.append(&mut self.decode_raw(&raw, &mut procs));
                if self.decoder.origin_records().unwrap_or(0) >= sent {
                    break;
                }
            }
            self.decoder.name_again(&procs, &mut out);
            out.append(&mut later);
        }
        self.decoder.name_left_frames(&mut out);
        // The parent's runtime now, before anything slower (the probe-cost calibration): a
        // spawner often exits soon after its child. A parent read live may have exec'd
        // before it was read (its record not yet taken): the records written since say so.
        if let Some(mut r) = self.completion.runtimes.take() {
            r.name_all(&mut procs, &mut out, |procs| {
                let raw = self.flush_raw();
                self.decode_raw(&raw, procs)
            });
            self.completion.runtimes = Some(r);
        }
        self.completion.processes = procs;
        self.completion.name(&mut out);
        self.complete(&mut out);
        out
    }

    fn decode_raw(&mut self, raw: &[Vec<u8>], procs: &mut Processes) -> Vec<Event> {
        let mut out = Vec::new();
        if self.decoder.names_leaks(raw) {
            // Lost records are counted per process only in its next record: the session's
            // count names a loss that none came after.
            self.decoder
                .note_lost_total(self.stats().map_or(0, |s| s.lost_records));
        }
        self.decoder.prefetch_python(raw);
        for item in raw {
            let Some(mut ev) = self.decoder.decode(procs, item) else {
                continue;
            };
            if self.is_ignored(&ev) {
                continue;
            }
            self.completion.identify(&mut ev);
            out.push(ev);
        }
        out
    }

    /// Fills in, once for every front end, what the kernel records leave to user space: the
    /// window without the probes' own cost (measured when the first spawn that needs it
    /// comes, with the programs attached; a failed measurement leaves windows uncorrected
    /// and is said once through [`Session::take_warnings`]) and the parent's name where the
    /// kernel saw no fork.
    fn complete(&mut self, events: &mut [Event]) {
        if self.calibration.probe_cost_ns.is_none()
            && !self.calibration.failed
            && events.iter().any(|e| e.probed() > 0)
        {
            if let Err(e) = self.probe_cost_ns() {
                self.calibration.failed = true;
                // `{:#}`: the message and its causes on one line.
                self.warnings
                    .push(format!("{e:#}; 'untraced' windows are not corrected"));
            }
        }
        let probe_ns = self.probe_cost().unwrap_or(0.0);
        let forgotten = self.completion.finish(events, probe_ns);
        self.decoder.forget(&forgotten);
    }

    /// Names each spawn's runtime from its parent's image from now on (`trace`).
    pub fn identify_runtimes(&mut self) {
        self.completion.identify_runtimes();
    }

    /// The probes' cost per counted syscall as windows are corrected with it (ns, rounded):
    /// 0 with --no-syscalls, `None` until measured (or when the measurement failed).
    pub fn probe_cost(&self) -> Option<f64> {
        self.calibration.probe_cost_ns.map(f64::round)
    }

    /// What the session has to say since the last call (a failed calibration), one line each.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Whether `ev` is the calibration's (an exit record ends its pid's entry).
    fn is_ignored(&mut self, ev: &Event) -> bool {
        let pid = match ev {
            Event::Spawn(s) => s.pid,
            Event::Exit(e) => e.pid,
        };
        let Some(i) = self.calibration.ignored.iter().position(|&p| p == pid) else {
            return false;
        };
        if matches!(ev, Event::Exit(_)) {
            self.calibration.ignored.swap_remove(i);
        }
        true
    }

    /// The kernel's own counters, summed over CPUs; `lost_records` also counts the records
    /// fdaudit's queue behind the ring dropped ([`Session::queue_dropped`]): lost all the same.
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
            s.unclosed_full += v.unclosed_full;
            s.origin_records += v.origin_records;
            s.unclosed_sites += v.unclosed_sites;
            s.unclosed_split_tables += v.unclosed_split_tables;
            s.unclosed_unseen_calls += v.unclosed_unseen_calls;
            s.unclosed_io_uring += v.unclosed_io_uring;
        }
        s.lost_records += self.queue_dropped();
        Ok(s)
    }

    /// Records the drain thread dropped because the decoder had
    /// [`super::drain::MAX_QUEUE_BYTES`] still to take.
    pub fn queue_dropped(&self) -> u64 {
        self.drain.as_ref().map_or(0, Drain::dropped)
    }

    /// Runs of each program the kernel skipped since the session was ready
    /// ([`crate::engine::ebpf::misses`]): records or counts lost without a trace in the ring buffer.
    pub fn missed_runs(&self) -> MissedRuns {
        self.missed_runs_total()
            .since(&self.started.missed_baseline)
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
                kernel_path: self
                    .read_paths
                    .as_ref()
                    .and_then(|p| p.get(&key, 0).ok())
                    .map(Box::new),
            })
            .collect()
    }
}

impl Drop for Session {
    /// Detaches everything (the fentry programs in parallel, unless
    /// [`Session::detach_after_exit`] has handed them to a child) and waits (up to 200 ms)
    /// until the kernel has let go of the programs (a raw tracepoint link frees its program
    /// after an RCU grace period): when fdaudit says it is done, nothing of it is left loaded
    /// (but for what the child detaching the fentry and failed-exec programs holds). After
    /// [`Session::detach_after_exit`] it does not wait: the caller is about to exit, and
    /// that grace period would be most of its exit time.
    fn drop(&mut self) {
        self.drain = None; // joins the drain thread
        let Some(mut bpf) = self.bpf.take() else {
            return;
        };
        if self.handed_off {
            return; // the child detaches the slow ones after our exit
        }
        if self.started.backend == Some(Backend::Fentry) {
            ebpf::detach_fentry(&mut bpf);
        }
        if self.exiting {
            return;
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
