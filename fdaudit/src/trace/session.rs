//! A tracing session: the loaded programs, the maps, and decoding of their records.
//!
//! This is the library face of `trace` (also used by `bench`): start, track a root process,
//! poll for [`Event`]s, read the kernel's own counters.

use std::{
    collections::HashMap as StdHashMap,
    os::fd::AsRawFd as _,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    Ebpf,
};
use fdaudit_common::{
    flags, ExitRecord, FdInfo, FdPath, ReadKey, ReadStat, RecordHeader, RecordKind, SpawnRecord,
    Stats, TaskState, MAP_EVENTS, MAP_READS, MAP_STATS, MAP_TRACKED, MAX_FDS,
};
use serde::Serialize;

use super::strategy::{self, Strategy};
use crate::{
    ebpf,
    fdkind::{self, FdKind},
    output::escape_bytes,
};

/// What to attach.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// Attach the scheduler tracepoints only: leaked fds, no syscall counts, near-zero cost.
    pub leaks_only: bool,
    /// Count read()/readv()/pread64() calls and bytes per process and fd.
    pub reads: bool,
}

/// A leaked fd: open in the new image right after exec, fd >= 3.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LeakedFd {
    pub fd: u32,
    pub kind: FdKind,
    pub target: String,
    /// O_RDONLY / O_WRONLY / O_RDWR.
    pub access: &'static str,
    /// Socket family for sockets ("inet", "unix", ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<&'static str>,
    /// Socket type for sockets ("stream", "dgram", ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_type: Option<&'static str>,
    pub ino: u64,
}

/// One spawn: a traced child that completed an exec.
#[derive(Debug, Clone, Serialize)]
pub struct Spawn {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub parent_pid: u32,
    pub parent_comm: String,
    pub pid: u32,
    /// Thread id that called exec, when it was not the main thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_tid: Option<u32>,
    pub exec_path: String,
    pub argv: Vec<String>,
    pub exec_ok: bool,
    pub exec_attempts: u32,
    /// fork to exec, nanoseconds, as measured (probes included). 0 when the fork was not seen.
    pub window_ns: u64,
    /// `window_ns` less the probes' own cost per counted syscall: the untraced estimate.
    pub window_corrected_ns: u64,
    pub close_calls: u32,
    pub close_ebadf: u32,
    pub close_range_calls: u32,
    /// (first, last, flags) of the first close_range() calls.
    pub close_ranges: Vec<[u32; 3]>,
    pub fcntl_setfd_calls: u32,
    pub fcntl_getfd_calls: u32,
    pub poll_calls: u32,
    pub poll_nfds_max: u32,
    pub getdents64_calls: u32,
    pub procfd_opens: u32,
    pub dup_calls: u32,
    pub strategy: Strategy,
    /// For `close-loop`: the fd the loop ran up to (exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub close_loop_bound: Option<u32>,
    pub leaked_fds: Vec<LeakedFd>,
    /// Number of leaked fds (may exceed `leaked_fds.len()` when truncated).
    pub leaked_count: u32,
    /// Redirected or inherited stdio (fds 0-2), shown apart from leaks.
    pub stdio: Vec<LeakedFd>,
    /// Partial-data markers: fds_truncated, read_failed, argv_truncated, ranges_truncated,
    /// no_fork, fdtable_truncated, no_syscalls, path_partial; and `reexec` (the window
    /// started at this process's previous exec: an exec chain).
    pub flags: Vec<&'static str>,
    /// Kernel timestamp of the exec (CLOCK_MONOTONIC ns).
    #[serde(skip)]
    pub exec_ns: u64,
}

/// A traced process exited.
#[derive(Debug, Clone, Serialize)]
pub struct Exit {
    pub pid: u32,
    pub parent_pid: u32,
    pub comm: String,
    /// It forked and exited without exec'ing.
    pub never_execd: bool,
    pub exit_code: i32,
    pub close_calls: u32,
    /// It tried to exec and every attempt failed: reported as a spawn with `exec_ok: false`.
    pub failed_spawn: Option<Box<Spawn>>,
}

#[derive(Debug, Clone)]
pub enum Event {
    Spawn(Box<Spawn>),
    Exit(Exit),
}

/// Read counters for one (process, fd), from `--reads`.
#[derive(Debug, Clone)]
pub struct ReadCount {
    pub pid: u32,
    pub fd: u32,
    pub calls: u64,
    pub bytes: u64,
    pub tiny_calls: u64,
    pub ino: u64,
    pub magic: u64,
    pub mode: u32,
    pub comm: String,
}

/// Loaded and attached programs with their maps. Dropping it detaches everything.
pub struct Session {
    events: RingBuf<MapData>,
    tracked: HashMap<MapData, u32, TaskState>,
    stats: PerCpuArray<MapData, Stats>,
    reads: Option<HashMap<MapData, ReadKey, ReadStat>>,
    /// Keeps programs and links alive.
    _bpf: Ebpf,
    leaks_only: bool,
    /// Probe cost per counted syscall, ns, measured at start (0 with --leaks-only).
    probe_cost_ns: f64,
    /// Untraced cost of one close() on a closed fd, ns, measured at start.
    close_cost_ns: f64,
    roots: Vec<u32>,
}

impl Session {
    /// Loads the programs, attaches them, and measures the probes' own cost.
    pub fn start(opts: &SessionOptions) -> Result<Session> {
        let mut config = ebpf::kernel_config().context("failed to read kernel offsets")?;
        config.reads = u32::from(opts.reads);
        let close_cost_ns = measure_close_cost(20_000);
        let mut bpf = ebpf::open(&config).context("failed to load the eBPF object")?;
        let wanted = |p: &&ebpf::ProgramSpec| {
            !(opts.leaks_only && p.syscall) && (opts.reads || !p.reads_only)
        };
        for spec in ebpf::PROGRAMS.iter().filter(wanted) {
            ebpf::load_and_attach(&mut bpf, spec)
                .with_context(|| format!("failed to start program {}", spec.name))?;
        }
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
        let mut session = Session {
            events,
            tracked,
            stats,
            reads,
            _bpf: bpf,
            leaks_only: opts.leaks_only,
            probe_cost_ns: 0.0,
            close_cost_ns,
            roots: Vec::new(),
        };
        if !opts.leaks_only {
            session.probe_cost_ns = session
                .measure_probe_cost(20_000, close_cost_ns)
                .context("failed to measure the probes' own cost")?;
        }
        Ok(session)
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
            parent_pid: parent_of(pid).unwrap_or(0),
            ..Default::default()
        };
        self.tracked
            .insert(pid, st, 0)
            .with_context(|| format!("failed to add pid {pid} to the traced set"))?;
        self.roots.push(pid);
        Ok(())
    }

    /// Traces `pid` and all its current descendants (they are found in /proc).
    pub fn track_tree(&mut self, pid: u32) -> Result<Vec<u32>> {
        self.track(pid)?;
        let mut added = vec![pid];
        // Two passes: a child forked between the scan and the insert of its parent is caught
        // by the second (forks after the insert are seen by the fork program).
        for _ in 0..2 {
            for d in descendants(pid) {
                // fdaudit itself may be in the tree (`-p 1`): it is never traced.
                if d != std::process::id() && !added.contains(&d) {
                    let st = TaskState {
                        parent_pid: parent_of(d).unwrap_or(0),
                        ..Default::default()
                    };
                    if self.tracked.insert(d, st, 0).is_ok() {
                        added.push(d);
                    }
                }
            }
        }
        Ok(added)
    }

    /// Whether `pid` is still in the traced set (removed by the kernel when it exits).
    pub fn is_tracked(&self, pid: u32) -> bool {
        self.tracked.get(&pid, 0).is_ok()
    }

    /// Waits up to `timeout` for records, then returns every record available.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Event>> {
        let mut pfd = libc::pollfd {
            fd: self.events.as_raw_fd(),
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

    /// Every record now in the ring buffer, decoded.
    pub fn drain(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        let (leaks_only, cost) = (self.leaks_only, self.probe_cost_ns);
        while let Some(item) = self.events.next() {
            if let Some(ev) = decode(&item, leaks_only, cost) {
                out.push(ev);
            }
        }
        out
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

    pub fn lost_records(&self) -> Result<u64> {
        Ok(self.stats()?.lost_records)
    }

    /// Read counters (with `reads` on), for every (process, fd) seen.
    pub fn read_counts(&self) -> Vec<ReadCount> {
        let Some(reads) = &self.reads else {
            return Vec::new();
        };
        reads
            .iter()
            .filter_map(|r| r.ok())
            .map(|(k, v)| ReadCount {
                pid: k.pid,
                fd: k.fd,
                calls: v.calls,
                bytes: v.bytes,
                tiny_calls: v.tiny_calls,
                ino: v.ino,
                magic: v.magic,
                mode: v.mode,
                comm: cstr(&v.comm),
            })
            .collect()
    }

    /// Measures what the probes add to one close(): a traced child forks a grandchild (so the
    /// grandchild is in a spawn window exactly as a real one, HOT slot and all) that times
    /// `n` close() calls on a closed fd; the difference with the untraced cost is the answer.
    fn measure_probe_cost(&mut self, n: u32, untraced_ns: f64) -> Result<f64> {
        let mut go = [0i32; 2];
        let mut back = [0i32; 2];
        // SAFETY: pipe2 fills the arrays we own.
        unsafe {
            if libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) != 0
                || libc::pipe2(back.as_mut_ptr(), libc::O_CLOEXEC) != 0
            {
                return Err(std::io::Error::last_os_error()).context("pipe2");
            }
        }
        let bad_fd = closed_fd();
        // SAFETY: the children only make async-signal-safe calls, then _exit().
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("fork");
        }
        if pid == 0 {
            unsafe {
                let mut b = 0u8;
                libc::read(go[0], (&mut b as *mut u8).cast(), 1);
                let g = libc::fork();
                if g == 0 {
                    let t = time_closes(bad_fd, n);
                    libc::write(back[1], (&t as *const u64).cast(), 8);
                    libc::_exit(0);
                }
                libc::waitpid(g, std::ptr::null_mut(), 0);
                libc::_exit(0);
            }
        }
        let inserted = self.tracked.insert(pid as u32, TaskState::default(), 0);
        let mut ns = 0u64;
        // SAFETY: plain fd I/O on the pipes we created; waitpid on our child.
        unsafe {
            libc::close(go[0]);
            libc::close(back[1]);
            libc::write(go[1], [1u8].as_ptr().cast(), 1);
            libc::read(back[0], (&mut ns as *mut u64).cast(), 8);
            libc::close(go[1]);
            libc::close(back[0]);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        inserted.context("failed to track the calibration child")?;
        self.drain(); // the calibration processes' exit records
        let traced = ns as f64 / f64::from(n);
        Ok((traced - untraced_ns).max(0.0))
    }
}

/// Decodes one ring-buffer record.
fn decode(bytes: &[u8], leaks_only: bool, probe_cost_ns: f64) -> Option<Event> {
    if bytes.len() < size_of::<RecordHeader>() {
        return None;
    }
    // SAFETY: length checked; RecordHeader is plain integers; read_unaligned copies.
    let header: RecordHeader = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    match RecordKind::from_u32(header.kind)? {
        RecordKind::Spawn if bytes.len() >= size_of::<SpawnRecord>() => {
            // SAFETY: as above, for the full record.
            let rec: Box<SpawnRecord> =
                Box::new(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) });
            Some(Event::Spawn(Box::new(spawn_from_record(
                &rec,
                leaks_only,
                probe_cost_ns,
                resolve_target,
            ))))
        }
        RecordKind::Exit if bytes.len() >= size_of::<ExitRecord>() => {
            // SAFETY: as above.
            let rec: ExitRecord = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            Some(Event::Exit(Exit {
                pid: rec.pid,
                parent_pid: rec.parent_pid,
                comm: cstr(&rec.comm),
                never_execd: rec.never_execd != 0,
                exit_code: rec.exit_code as i32,
                close_calls: rec.counters.close_calls,
                failed_spawn: failed_spawn_from_exit(&rec, leaks_only, probe_cost_ns).map(Box::new),
            }))
        }
        _ => None,
    }
}

/// An fd number that is certainly closed (close() on it fails with EBADF).
fn closed_fd() -> i32 {
    let (soft, _) = crate::doctor::nofile();
    let mut fd = (soft.min(1 << 20) as i32) - 1;
    // SAFETY: fcntl F_GETFD only probes.
    while fd > 3 && unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
        fd -= 1;
    }
    fd
}

/// CPU ns this thread spent in `n` close(fd) calls: the best of three rounds. CPU time, not
/// wall time, so other load on the machine does not inflate it (async-signal-safe).
fn time_closes(fd: i32, n: u32) -> u64 {
    (0..3).map(|_| time_closes_once(fd, n)).min().unwrap_or(0)
}

fn time_closes_once(fd: i32, n: u32) -> u64 {
    let mut a = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut b = a;
    // SAFETY: clock_gettime and close with plain arguments.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut a);
        for _ in 0..n {
            libc::close(fd);
        }
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut b);
    }
    ((b.tv_sec - a.tv_sec) * 1_000_000_000 + (b.tv_nsec - a.tv_nsec)).max(0) as u64
}

/// Untraced CPU cost of one close() on a closed fd (ns).
pub fn measure_close_cost(n: u32) -> f64 {
    time_closes(closed_fd(), n) as f64 / f64::from(n)
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    escape_bytes(&b[..end])
}

fn socket_type_name(t: u16) -> &'static str {
    match i32::from(t) {
        libc::SOCK_STREAM => "stream",
        libc::SOCK_DGRAM => "dgram",
        libc::SOCK_SEQPACKET => "seqpacket",
        libc::SOCK_RAW => "raw",
        _ => "other",
    }
}

fn access_mode(f_flags: u32) -> &'static str {
    match f_flags as i32 & libc::O_ACCMODE {
        libc::O_RDONLY => "r",
        libc::O_WRONLY => "w",
        _ => "rw",
    }
}

/// Resolves the target of a leaked fd: the live link in the child, else in the parent when it
/// is the same inode, else what the kernel saw (pseudo-files are named from the inode).
pub type Resolver = fn(pid: u32, parent: u32, fd: u32, ino: u64) -> Option<String>;

fn resolve_target(pid: u32, parent: u32, fd: u32, ino: u64) -> Option<String> {
    [pid, parent]
        .into_iter()
        .find_map(|p| proc_fd_target(p, fd, ino))
}

/// The target of /proc/PID/fd/FD, when that fd still refers to inode `ino` (escaped).
pub fn proc_fd_target(pid: u32, fd: u32, ino: u64) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let link = format!("/proc/{pid}/fd/{fd}");
    let md = std::fs::metadata(&link).ok()?;
    (md.ino() == ino)
        .then(|| std::fs::read_link(&link).ok())
        .flatten()
        .map(|t| escape_bytes(t.as_os_str().as_encoded_bytes()))
}

/// Joins the components of a kernel-built path (leaf first) into "/a/b/c"; a cut walk is
/// shown with a leading "…".
pub fn join_path(p: &FdPath) -> String {
    let depth = (p.depth as usize).min(p.comps.len());
    let mut s = String::new();
    if p.complete == 0 {
        s.push('…');
    }
    for c in p.comps[..depth].iter().rev() {
        s.push('/');
        s.push_str(&cstr(c));
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

fn leaked_from(
    info: &FdInfo,
    kernel_path: Option<&FdPath>,
    pid: u32,
    parent: u32,
    resolve: Resolver,
) -> LeakedFd {
    let name = cstr(&info.name);
    let kind = fdkind::from_kernel(info.mode, info.magic, &name);
    let target = match kind {
        FdKind::Socket => format!("socket:[{}]", info.ino),
        FdKind::Pipe => format!("pipe:[{}]", info.ino),
        FdKind::Eventfd
        | FdKind::Epoll
        | FdKind::Timerfd
        | FdKind::Signalfd
        | FdKind::Inotify
        | FdKind::Fanotify
        | FdKind::Bpf
        | FdKind::Perf
        | FdKind::AnonInode => format!("anon_inode:{name}"),
        FdKind::Pidfd => "anon_inode:[pidfd]".to_string(),
        _ => match kernel_path {
            Some(p) if p.complete != 0 => join_path(p),
            // A cut or missing path: the live link is better, if the process is still there.
            kp => resolve(pid, parent, info.fd, info.ino)
                .or_else(|| kp.map(join_path))
                .unwrap_or_else(|| format!("…/{name} (inode {})", info.ino)),
        },
    };
    LeakedFd {
        fd: info.fd,
        kind,
        target,
        access: access_mode(info.f_flags),
        family: (kind == FdKind::Socket && info.family != 0)
            .then(|| fdkind::family_name(info.family)),
        socket_type: (kind == FdKind::Socket && info.sock_type != 0)
            .then(|| socket_type_name(info.sock_type)),
        ino: info.ino,
    }
}

/// Names of the set [`flags`] bits.
pub fn flag_names(bits: u32) -> Vec<&'static str> {
    [
        (flags::FDS_TRUNCATED, "fds_truncated"),
        (flags::READ_FAILED, "read_failed"),
        (flags::ARGV_TRUNCATED, "argv_truncated"),
        (flags::RANGES_TRUNCATED, "ranges_truncated"),
        (flags::NO_FORK, "no_fork"),
        (flags::FDTABLE_TRUNCATED, "fdtable_truncated"),
        (flags::NO_SYSCALLS, "no_syscalls"),
        (flags::PATH_PARTIAL, "path_partial"),
        (flags::REEXEC, "reexec"),
        (flags::BOUNDED_WALK, "bounded_walk"),
    ]
    .into_iter()
    .filter(|(b, _)| bits & b != 0)
    .map(|(_, n)| n)
    .collect()
}

/// Turns a kernel record into a [`Spawn`]. Pure but for `resolve` (unit tested with a stub).
pub fn spawn_from_record(
    rec: &SpawnRecord,
    leaks_only: bool,
    probe_cost_ns: f64,
    resolve: Resolver,
) -> Spawn {
    let mut bits = rec.header.flags;
    if leaks_only {
        bits |= flags::NO_SYSCALLS;
    }
    let argv_len = (rec.argv_len as usize).min(rec.argv.len());
    let argv: Vec<String> = rec.argv[..argv_len]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(escape_bytes)
        .collect();
    let window_ns = if rec.fork_ns != 0 && rec.exec_ns > rec.fork_ns {
        rec.exec_ns - rec.fork_ns
    } else {
        0
    };
    let shown = (rec.nfds as usize).min(MAX_FDS);
    let npaths = (rec.npaths as usize).min(rec.paths.len());
    let path_of = |i: usize| rec.paths[..npaths].iter().find(|p| p.index as usize == i);
    let leaked_fds: Vec<LeakedFd> = rec.fds[..shown]
        .iter()
        .enumerate()
        .map(|(i, f)| leaked_from(f, path_of(i), rec.pid, rec.parent_pid, resolve))
        .collect();
    let stdio = (0..3)
        .filter(|i| rec.stdio_mask & (1 << i) != 0)
        .map(|i| leaked_from(&rec.stdio[i], None, rec.pid, rec.parent_pid, resolve))
        .collect();
    Spawn {
        exec_tid: (rec.old_pid != rec.pid).then_some(rec.old_pid),
        exec_path: cstr(&rec.filename),
        argv,
        leaked_count: rec.nfds,
        leaked_fds,
        stdio,
        flags: flag_names(bits),
        exec_ns: rec.exec_ns,
        ..window_spawn(
            rec.pid,
            rec.parent_pid,
            cstr(&rec.parent_comm),
            &rec.counters,
            window_ns,
            leaks_only,
            probe_cost_ns,
        )
    }
}

/// A child that exec'd and never succeeded: it exited with `exec_attempts` failed execs.
/// Reported as a spawn with `exec_ok: false` (no image, so no path and no leaks).
pub fn failed_spawn_from_exit(
    rec: &ExitRecord,
    leaks_only: bool,
    probe_cost_ns: f64,
) -> Option<Spawn> {
    if rec.never_execd == 0 || rec.counters.exec_attempts == 0 {
        return None;
    }
    let window_ns = if rec.fork_ns != 0 {
        rec.exit_ns.saturating_sub(rec.fork_ns)
    } else {
        0
    };
    // Never exec'd: its comm is still its parent's.
    let comm = cstr(&rec.comm);
    let mut s = window_spawn(
        rec.pid,
        rec.parent_pid,
        comm,
        &rec.counters,
        window_ns,
        leaks_only,
        probe_cost_ns,
    );
    s.exec_ok = false;
    s.exec_attempts = rec.counters.exec_attempts;
    s.exec_ns = rec.exit_ns;
    Some(s)
}

/// The parts of a [`Spawn`] that come from the window's counters.
fn window_spawn(
    pid: u32,
    parent_pid: u32,
    parent_comm: String,
    c: &fdaudit_common::Counters,
    window_ns: u64,
    leaks_only: bool,
    probe_cost_ns: f64,
) -> Spawn {
    let probed = u64::from(c.close_calls)
        + u64::from(c.close_range_calls)
        + u64::from(c.fcntl_setfd_calls)
        + u64::from(c.fcntl_getfd_calls)
        + u64::from(c.poll_calls)
        + u64::from(c.getdents64_calls)
        + u64::from(c.procfd_opens)
        + u64::from(c.exec_attempts)
        + u64::from(c.dup_calls);
    let correction = (probe_cost_ns * probed as f64) as u64;
    let nranges = (c.close_range_calls as usize).min(c.ranges.len());
    let counts = strategy::Counts {
        close_calls: c.close_calls,
        close_ebadf: c.close_ebadf,
        close_range_calls: c.close_range_calls,
        fcntl_calls: c.fcntl_setfd_calls + c.fcntl_getfd_calls,
        poll_calls: c.poll_calls,
        poll_nfds_max: c.poll_nfds_max,
        getdents64_calls: c.getdents64_calls,
        procfd_opens: c.procfd_opens,
    };
    let (strategy, close_loop_bound) = if leaks_only {
        (Strategy::Unknown, None)
    } else {
        strategy::classify(&counts)
    };
    Spawn {
        record_type: "spawn",
        parent_pid,
        parent_comm,
        pid,
        exec_tid: None,
        exec_path: String::new(),
        argv: Vec::new(),
        exec_ok: true,
        exec_attempts: c.exec_attempts.max(1),
        window_ns,
        window_corrected_ns: window_ns.saturating_sub(correction),
        close_calls: c.close_calls,
        close_ebadf: c.close_ebadf,
        close_range_calls: c.close_range_calls,
        close_ranges: c.ranges[..nranges]
            .iter()
            .map(|r| [r.first, r.last, r.flags])
            .collect(),
        fcntl_setfd_calls: c.fcntl_setfd_calls,
        fcntl_getfd_calls: c.fcntl_getfd_calls,
        poll_calls: c.poll_calls,
        poll_nfds_max: c.poll_nfds_max,
        getdents64_calls: c.getdents64_calls,
        procfd_opens: c.procfd_opens,
        dup_calls: c.dup_calls,
        strategy,
        close_loop_bound,
        leaked_count: 0,
        leaked_fds: Vec::new(),
        stdio: Vec::new(),
        flags: if leaks_only {
            vec!["no_syscalls"]
        } else {
            Vec::new()
        },
        exec_ns: 0,
    }
}

/// Parent pid of `pid` from /proc/PID/stat.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// Every current descendant of `root`, from /proc (children before grandchildren).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: StdHashMap<u32, Vec<u32>> = StdHashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                if let Some(pp) = parent_of(pid) {
                    children.entry(pp).or_default().push(pid);
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Some(p) = queue.pop() {
        if Instant::now() > deadline {
            break;
        }
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            out.push(c);
            queue.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdaudit_common::{CloseRange, Counters};

    fn zeroed_record() -> Box<SpawnRecord> {
        // SAFETY: SpawnRecord is plain integers and arrays; all-zero is valid.
        Box::new(unsafe { std::mem::zeroed() })
    }

    fn put(dst: &mut [u8], s: &[u8]) {
        dst[..s.len()].copy_from_slice(s);
    }

    #[test]
    fn decodes_a_close_loop_spawn_with_a_leaked_file() {
        let mut rec = zeroed_record();
        rec.header = RecordHeader { kind: 1, flags: 0 };
        rec.pid = 42;
        rec.old_pid = 42;
        rec.parent_pid = 7;
        rec.fork_ns = 1_000;
        rec.exec_ns = 2_501_000;
        put(&mut rec.parent_comm, b"python3");
        put(&mut rec.filename, b"/bin/true");
        put(&mut rec.argv, b"true\0--x\0");
        rec.argv_len = 9;
        rec.counters = Counters {
            close_calls: 19_997,
            close_ebadf: 19_996,
            exec_attempts: 1,
            ..Default::default()
        };
        rec.nfds = 1;
        rec.fds[0].fd = 7;
        rec.fds[0].mode = 0o100600;
        rec.fds[0].magic = 0xef53;
        rec.fds[0].ino = 99;
        put(&mut rec.fds[0].name, b"secret.key");
        rec.npaths = 1;
        rec.paths[0].index = 0;
        rec.paths[0].depth = 2;
        rec.paths[0].complete = 1;
        put(&mut rec.paths[0].comps[0], b"secret.key");
        put(&mut rec.paths[0].comps[1], b"etc");
        rec.stdio_mask = 0b101;
        rec.stdio[0].mode = 0o020666;
        rec.stdio[2].mode = 0o010600;
        rec.stdio[2].magic = fdkind::magic::PIPEFS;
        rec.stdio[2].fd = 2;
        rec.stdio[2].ino = 5;
        let s = spawn_from_record(&rec, false, 100.0, |_, _, _, _| None);
        assert_eq!(s.window_ns, 2_500_000);
        // 19_998 probed syscalls at 100 ns each.
        assert_eq!(s.window_corrected_ns, 2_500_000 - 1_999_800);
        assert_eq!(s.argv, ["true", "--x"]);
        assert_eq!(s.strategy, Strategy::CloseLoop);
        assert_eq!(s.close_loop_bound, Some(20_000));
        assert_eq!(s.leaked_fds.len(), 1);
        assert_eq!(s.leaked_fds[0].kind, FdKind::Regular);
        assert_eq!(s.leaked_fds[0].target, "/etc/secret.key");
        assert_eq!(s.leaked_fds[0].access, "r");
        assert_eq!(s.stdio.len(), 2);
        assert_eq!(s.stdio[1].target, "pipe:[5]");
        assert!(s.flags.is_empty());
        assert_eq!(s.exec_tid, None);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["type"], "spawn");
        assert_eq!(json["strategy"], "close-loop");
        assert_eq!(json["leaked_fds"][0]["fd"], 7);
    }

    #[test]
    fn kernel_paths_join_leaf_last_and_mark_cuts() {
        // SAFETY: FdPath is plain integers; all-zero is valid.
        let mut p: FdPath = unsafe { std::mem::zeroed() };
        p.depth = 3;
        p.complete = 1;
        put(&mut p.comps[0], b"c");
        put(&mut p.comps[1], b"b");
        put(&mut p.comps[2], b"a");
        assert_eq!(join_path(&p), "/a/b/c");
        p.complete = 0;
        assert_eq!(join_path(&p), "…/a/b/c");
        p.depth = 0;
        p.complete = 1;
        assert_eq!(join_path(&p), "/");
    }

    #[test]
    fn unresolvable_targets_and_partial_flags() {
        let mut rec = zeroed_record();
        rec.header = RecordHeader {
            kind: 1,
            flags: flags::FDS_TRUNCATED | flags::NO_FORK,
        };
        rec.pid = 10;
        rec.old_pid = 11;
        rec.nfds = 70;
        for (i, f) in rec.fds.iter_mut().enumerate() {
            f.fd = 3 + i as u32;
            f.mode = 0o140777;
            f.magic = fdkind::magic::SOCKFS;
            f.family = libc::AF_INET as u16;
            f.sock_type = libc::SOCK_STREAM as u16;
            f.ino = 1000 + i as u64;
            f.f_flags = libc::O_RDWR as u32;
        }
        rec.counters.close_range_calls = 5;
        rec.counters.ranges[0] = CloseRange {
            first: 3,
            last: u32::MAX,
            flags: 4,
            _pad: 0,
        };
        let s = spawn_from_record(&rec, false, 0.0, |_, _, _, _| None);
        assert_eq!(s.leaked_count, 70);
        assert_eq!(s.leaked_fds.len(), MAX_FDS);
        assert_eq!(s.leaked_fds[0].target, "socket:[1000]");
        assert_eq!(s.leaked_fds[0].family, Some("inet"));
        assert_eq!(s.leaked_fds[0].socket_type, Some("stream"));
        assert_eq!(s.window_ns, 0);
        assert_eq!(s.exec_tid, Some(11));
        assert_eq!(s.strategy, Strategy::CloseRange);
        assert_eq!(s.close_ranges.len(), 4);
        assert_eq!(s.close_ranges[0], [3, u32::MAX, 4]);
        assert_eq!(s.flags, ["fds_truncated", "no_fork"]);
        let s = spawn_from_record(&rec, true, 0.0, |_, _, _, _| None);
        assert!(s.flags.contains(&"no_syscalls"));
        assert_eq!(s.strategy, Strategy::Unknown);
    }

    #[test]
    fn parent_and_descendants_of_this_process() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(parent_of(child.id()), Some(me));
        assert!(descendants(me).contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(parent_of(u32::MAX), None);
    }
}
