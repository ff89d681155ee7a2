//! Decoding ring-buffer records into [`Spawn`]s and [`Exit`]s: pure functions of the record
//! and of what the session's [`Live`] answers (fd links, a process's image), stubbed in
//! tests; nothing here reads a file. The probe-cost correction is not
//! applied here but by the consumer ([`Spawn::correct_for_probes`]).

use std::collections::VecDeque;

use fdaudit_common::{
    fd_flags, Counters, ExitRecord, FdInfo, FdPath, PathsRecord, RecordHeader, RecordKind,
    SpawnRecord, MAX_FDS,
};

pub use super::fdtarget::cstr;
use super::fdtarget::Live;
use super::process::Processes;
use super::seen::OriginMessage;
use super::spawn::{Event, Exit, LeakedFd, Spawn};
use super::{
    boundary::Boundary,
    counting::Counting,
    counts::SyscallCounts,
    fdtarget,
    flags::SpawnFlags,
    strategy::{self, Strategy},
};
use crate::{
    cgroup::Identity,
    fdkind::{self, FdKind},
    output::text::Lossless,
};

/// A record of type `T` from the first bytes of `bytes` (a variable-length record: the
/// fields not sent are zero).
fn record_from<T: Copy>(bytes: &[u8]) -> Box<T> {
    // SAFETY: only used with the repr(C) integer-only record types, for which all-zero is a
    // valid value; at most size_of::<T>() bytes are copied into it.
    unsafe {
        let mut rec: Box<T> = Box::new(std::mem::zeroed());
        let n = bytes.len().min(size_of::<T>());
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut *rec as *mut T).cast::<u8>(), n);
        rec
    }
}

/// Paths records waiting for their spawn (they come just before it; one whose spawn was lost
/// is dropped once this many newer ones came).
const PENDING_PATHS: usize = 64;
/// `trace --origin`: passes over a batch's spawns naming frames left for a later record
/// (each reads a module at least: a JVM's stacks run through five or so).
const NAMING_PASSES: usize = 8;

/// Decodes ring-buffer records in order, pairing each spawn with the paths sent before it.
pub struct Decoder {
    counting: Counting,
    /// What the live system says of a process (the session's [`super::fdtarget::Procfs`]).
    live: &'static dyn Live,
    pending: VecDeque<Box<PathsRecord>>,
    /// `trace --origin`: the origin records seen, to name each leaked fd's.
    origins: Option<super::origin::Origins>,
}

impl Decoder {
    pub fn new(counting: Counting, live: &'static dyn Live) -> Decoder {
        Decoder {
            counting,
            live,
            pending: VecDeque::new(),
            origins: None,
        }
    }

    /// Also keeps the origin records and gives each leaked fd its `origin`.
    pub fn with_origins(mut self, python: super::pyframes::Registry) -> Decoder {
        self.origins = Some(super::origin::Origins::default().with_python(python));
        self
    }

    /// `trace --origin`: keeps `pid`'s fd table as fdaudit attaches to it (its fds are
    /// "before tracing"; any other fd without an origin is "not seen").
    pub fn note_attached(&mut self, pid: u32) {
        if let Some(origins) = &mut self.origins {
            origins.note_attached(pid);
        }
    }

    /// Forgets what is kept of the processes the session's table forgot.
    pub fn forget(&mut self, pids: &[u32]) {
        if let Some(origins) = &mut self.origins {
            origins.forget(pids);
        }
    }

    /// `trace --origin`: origin records that came after the spawn whose leaked fd they
    /// made (that fd was named `not seen`).
    pub fn late_origins(&self) -> u64 {
        self.origins
            .as_ref()
            .map_or(0, super::origin::Origins::late_origins)
    }

    /// `trace --origin`: origin records decoded (None without `--origin`).
    pub fn origin_records(&self) -> Option<u64> {
        self.origins.as_ref().map(super::origin::Origins::records)
    }

    /// `trace --origin`: whether an event of `events` has a leaked fd named `not seen`,
    /// whose origin record may yet be read ([`Decoder::name_again`]).
    pub fn any_not_seen(&self, events: &mut [Event]) -> bool {
        self.origins.is_some()
            && events
                .iter_mut()
                .filter_map(spawn_of)
                .any(|s| s.leaked_fds.iter().any(not_seen))
    }

    /// `trace --origin`: names again each leaked fd of `events` named `not seen`, once the
    /// records read after them are decoded: an origin record can reach the reader after the
    /// spawn of its fd (another CPU's, or the first ring's while the grown one is put in).
    pub fn name_again(&mut self, procs: &Processes, events: &mut [Event]) {
        let Some(origins) = &mut self.origins else {
            return;
        };
        for s in events.iter_mut().filter_map(spawn_of) {
            let (pid, exec_ns) = (s.pid, s.exec_ns);
            for fd in s.leaked_fds.iter_mut().filter(|fd| not_seen(fd)) {
                let again = origins.find_again(procs, (pid, fd.fd), (fd.ino, fd.dev), exec_ns);
                if let Some(o) = again {
                    fd.origin = Some(o);
                }
            }
        }
    }

    /// `trace --origin`: names again the origins' frames of `events` whose modules were
    /// left for a later record: a pass gives each spawn a record's time again and reads one
    /// module at least, so a spawn whose stacks run through several large modules (a JVM's)
    /// is named whole within [`NAMING_PASSES`], and what a spawn costs stays bounded.
    pub fn name_left_frames(&mut self, events: &mut [Event]) {
        let Some(origins) = &mut self.origins else {
            return;
        };
        for _ in 0..NAMING_PASSES {
            if !origins.take_left() {
                return;
            }
            for s in events.iter_mut().filter_map(spawn_of) {
                origins.begin_record();
                for fd in &mut s.leaked_fds {
                    if let Some(super::origin::Origin::Known(c)) = &mut fd.origin {
                        origins.name_left(c);
                    }
                }
            }
        }
    }

    /// `trace --origin`: whether the batch `raw` has a record that names leaked fds (a
    /// spawn, an exit with a failed exec), so that the session's lost-record count is to be
    /// read before it.
    pub fn names_leaks(&self, raw: &[Vec<u8>]) -> bool {
        self.origins.is_some()
            && raw.iter().any(|b| {
                let kind = b
                    .get(..4)
                    .map(|k| u32::from_ne_bytes([k[0], k[1], k[2], k[3]]));
                kind == Some(RecordKind::Spawn as u32) || kind == Some(RecordKind::Exit as u32)
            })
    }

    /// `trace --origin`: the session's records lost to a full ring buffer so far.
    pub fn note_lost_total(&mut self, n: u64) {
        if let Some(origins) = &mut self.origins {
            origins.note_lost_total(n);
        }
    }

    /// `trace --origin`: reads the code objects a batch's Python records name, before the
    /// batch is decoded.
    pub fn prefetch_python(&mut self, raw: &[Vec<u8>]) {
        if let Some(origins) = &mut self.origins {
            origins.python_prefetch(raw);
        }
    }

    /// Decodes one record; a paths record gives nothing until its spawn comes. An exec path
    /// the kernel cut is read again from /proc/PID/exe while the process lives, when that
    /// starts with what the kernel kept (asked of [`Live`]).
    pub fn decode(&mut self, procs: &mut Processes, bytes: &[u8]) -> Option<Event> {
        if let Some(origins) = &mut self.origins {
            match super::seen::origin_message(bytes) {
                Some(OriginMessage::Origin(rec)) => {
                    origins.record(procs, &rec);
                    return None;
                }
                Some(OriginMessage::Created(rec)) => {
                    origins.created_record(rec);
                    return None;
                }
                Some(OriginMessage::Modules(rec)) => {
                    origins.modules_record(procs, &rec);
                    return None;
                }
                Some(OriginMessage::Python(rec)) => {
                    origins.python_record(rec);
                    return None;
                }
                Some(OriginMessage::StackCopy(rec)) => {
                    origins.stack_copy_record(procs, &rec);
                    return None;
                }
                None => {}
            }
        }
        let mut ev = decode_with(bytes, self.counting, &mut self.pending, self.live);
        if let (Some(origins), Some(ev)) = (&mut self.origins, &mut ev) {
            name_origins(origins, procs, ev);
        }
        if let Some(Event::Spawn(s)) = &mut ev {
            if s.exec_path_cut {
                if let Some(exe) = self.live.exe(s.pid).filter(|e| e.starts_with(&s.exec_path)) {
                    s.exec_path = Lossless::new(exe);
                    s.exec_path_cut = false;
                }
            }
        }
        ev
    }
}

/// The spawn (or failed exec) an event names leaked fds in.
fn spawn_of(ev: &mut Event) -> Option<&mut super::spawn::Spawn> {
    match ev {
        Event::Spawn(s) => Some(s),
        Event::Exit(e) => e.failed_exec.as_deref_mut(),
    }
}

/// Whether `fd` was named `not seen`.
fn not_seen(fd: &super::spawn::LeakedFd) -> bool {
    matches!(
        fd.origin,
        Some(super::origin::Origin::Unknown {
            unknown: super::seen::NOT_SEEN,
            ..
        })
    )
}

/// Gives each leaked fd of a spawn its origin, and learns the parent links.
fn name_origins(origins: &mut super::origin::Origins, procs: &mut Processes, ev: &mut Event) {
    let s = match ev {
        Event::Spawn(s) => s,
        Event::Exit(e) => {
            procs.note_parent(e.pid, e.parent_pid);
            match e.failed_exec.as_mut() {
                Some(s) => s,
                None => return,
            }
        }
    };
    procs.note_parent(s.pid, s.parent_pid);
    origins.begin_record();
    if s.exec_ok {
        origins.note_exec(procs, s.pid, &s.exec_path);
        origins.python_exec(s.pid);
    }
    for fd in &mut s.leaked_fds {
        fd.origin = Some(origins.find(procs, (s.pid, fd.fd), fd.ino, fd.dev, s.exec_ns));
    }
}

fn decode_with(
    bytes: &[u8],
    counting: Counting,
    pending: &mut VecDeque<Box<PathsRecord>>,
    live: &dyn Live,
) -> Option<Event> {
    if bytes.len() < size_of::<RecordHeader>() {
        return None;
    }
    // SAFETY: length checked; RecordHeader is plain integers; read_unaligned copies.
    let header: RecordHeader = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    match RecordKind::from_u32(header.kind)? {
        RecordKind::Paths if bytes.len() >= PathsRecord::sent_len(0) => {
            if pending.len() >= PENDING_PATHS {
                pending.pop_front();
            }
            pending.push_back(record_from::<PathsRecord>(bytes));
            None
        }
        RecordKind::Spawn if bytes.len() >= SpawnRecord::sent_len(0) => {
            let rec = record_from::<SpawnRecord>(bytes);
            let paths = pending
                .iter()
                .position(|p| p.pid == rec.pid && p.exec_ns == rec.exec_ns)
                .and_then(|i| pending.remove(i));
            let npaths = paths
                .as_ref()
                .map_or(0, |p| (p.npaths as usize).min(p.paths.len()));
            let paths = paths.as_ref().map_or(&[][..], |p| &p.paths[..npaths]);
            Some(Event::Spawn(Box::new(spawn_from_record(
                &rec, paths, counting, live,
            ))))
        }
        RecordKind::Exit if bytes.len() >= size_of::<ExitRecord>() => {
            // SAFETY: as above.
            let rec: ExitRecord = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
            Some(Event::Exit(Exit {
                pid: rec.pid,
                parent_pid: rec.parent_pid,
                never_execd: rec.never_execd != 0,
                failed_exec: failed_exec_from_exit(&rec, counting).map(Box::new),
            }))
        }
        _ => None,
    }
}

fn leaked_from(
    info: &FdInfo,
    kernel_path: Option<&FdPath>,
    pid: u32,
    parent: u32,
    live: &dyn Live,
) -> LeakedFd {
    let name = cstr(&info.name);
    let name_text = String::from_utf8_lossy(&name);
    let kind = fdkind::from_kernel(info.mode, info.magic, &name_text);
    let name_cut = info.fd_flags & fd_flags::NAME_CUT != 0;
    let deleted = info.fd_flags & fd_flags::DELETED != 0
        && matches!(kind, FdKind::Regular | FdKind::Directory);
    let site = fdtarget::Site {
        pid,
        parent,
        fd: info.fd,
        ino: info.ino,
    };
    let named = fdtarget::name(kind, &name, name_cut, kernel_path, site, live);
    let (target, deleted, partial) = (named.target, deleted || named.deleted, named.partial);
    LeakedFd {
        fd: info.fd,
        kind,
        target: Lossless::new(target),
        access: fdkind::access_mode(info.f_flags),
        family: (kind == FdKind::Socket && info.family != 0)
            .then(|| fdkind::family_name(info.family)),
        protocol: (kind == FdKind::Socket && info.sock_type != 0)
            .then(|| fdkind::protocol_name(info.family, info.sock_type)),
        ino: info.ino,
        dev: info.dev,
        origin: None,
        critical: false,
        deleted,
        partial,
    }
}

/// The arguments of a NUL-separated argv block (`a\0\0b\0` is `["a", "", "b"]`): every
/// element is NUL-terminated, so only the block's final terminator is dropped; a block cut
/// short (`argv_truncated`) keeps its unterminated last piece.
pub fn split_argv(block: &[u8]) -> Vec<Vec<u8>> {
    if block.is_empty() {
        return Vec::new();
    }
    let body = block.strip_suffix(&[0]).unwrap_or(block);
    body.split(|&b| b == 0).map(<[u8]>::to_vec).collect()
}

/// Turns a kernel record and the paths sent with it into a [`Spawn`]. Pure but for what
/// `live` answers (unit tested with a stub).
pub fn spawn_from_record(
    rec: &SpawnRecord,
    paths: &[FdPath],
    counting: Counting,
    live: &dyn Live,
) -> Spawn {
    let mut flags = SpawnFlags::from_bits_retain(rec.header.flags);
    if !counting.syscalls() {
        flags |= SpawnFlags::NO_SYSCALLS;
    }
    let argv_len = (rec.argv_len as usize).min(rec.argv.len());
    let argv = split_argv(&rec.argv[..argv_len]);
    let window_ns = if rec.fork_ns != 0 && rec.exec_ns > rec.fork_ns {
        rec.exec_ns - rec.fork_ns
    } else {
        0
    };
    let shown = (rec.nfds as usize).min(MAX_FDS);
    let path_of = |i: usize| paths.iter().find(|p| p.index as usize == i);
    let boundary = Boundary::across(&[&rec.image_credns, &rec.prev_credns], &rec.exec_credns);
    let leaked_fds: Vec<LeakedFd> = rec.fds[..shown]
        .iter()
        .enumerate()
        .map(|(i, f)| LeakedFd {
            critical: boundary.is_some(),
            ..leaked_from(f, path_of(i), rec.pid, rec.parent_pid, live)
        })
        .collect();
    let stdio: Vec<LeakedFd> = (0..3)
        .filter(|i| live.names_stdio() && rec.stdio_mask & (1 << i) != 0)
        .map(|i| leaked_from(&rec.stdio[i], None, rec.pid, rec.parent_pid, live))
        .collect();
    if names_cut(rec, shown, &leaked_fds, &stdio) {
        flags |= SpawnFlags::PATH_PARTIAL;
    }
    let filename_len = rec.filename.iter().position(|&b| b == 0);
    let exec_path_cut =
        flags.contains(SpawnFlags::PATH_PARTIAL) && filename_len == Some(rec.filename.len() - 1);
    let mut exec_path = cstr(&rec.filename);
    match fdtarget::exec_image(rec.pid, &exec_path, live) {
        Some(Some(image)) => exec_path = image,
        Some(None) => flags |= SpawnFlags::PATH_PARTIAL,
        None => {}
    }
    Spawn {
        runtime: None,
        parent_nofile: None,
        nofile: (rec.nofile_max != 0).then_some(crate::runtime::Nofile {
            soft: rec.nofile_cur,
            hard: rec.nofile_max,
        }),
        exec_path_cut,
        exec_tid: (rec.old_pid != rec.pid).then_some(rec.old_pid),
        exec_path: Lossless::new(exec_path),
        argv: Lossless::new(argv),
        leaked_count: rec.nfds,
        leaked_fds,
        stdio,
        flags,
        boundary,
        exec_ns: rec.exec_ns,
        identity: Identity {
            cgroup_id: (rec.cgroup_id != 0).then_some(rec.cgroup_id),
            ..Default::default()
        },
        ..window_spawn(
            rec.pid,
            rec.parent_pid,
            cstr(&rec.parent_comm),
            &rec.counters,
            window_ns,
            counting,
        )
    }
}

/// Whether a name of the record was cut by its buffer or a target the live link could not
/// complete: the spawn's paths are partial then.
fn names_cut(rec: &SpawnRecord, shown: usize, leaked: &[LeakedFd], stdio: &[LeakedFd]) -> bool {
    rec.fds[..shown]
        .iter()
        .chain(&rec.stdio)
        .any(|f| f.fd_flags & fd_flags::NAME_CUT != 0)
        || leaked.iter().chain(stdio).any(|f| f.partial)
}

/// The spawn an exit record stands for, when no exec record came:
/// - a child that exec'd and never succeeded (it exited with `exec_attempts` failed
///   execs): a spawn with `exec_ok: false` (no image, so no path and no leaks);
/// - a child whose exec the kernel skipped the program of (`EXEC_MISSED`): a spawn flagged
///   `exec_missed`, without path, argv or leaked fds.
pub fn failed_exec_from_exit(rec: &ExitRecord, counting: Counting) -> Option<Spawn> {
    let missed = rec.header.flags & fdaudit_common::flags::EXEC_MISSED != 0;
    if !missed && (rec.never_execd == 0 || rec.counters.exec_attempts == 0) {
        return None;
    }
    let window_ns = if rec.fork_ns != 0 {
        rec.exit_ns.saturating_sub(rec.fork_ns)
    } else {
        0
    };
    // Never exec'd: its comm is still its parent's. Exec'd unseen: the comm is the new
    // image's, and the parent's is looked up when the spawn is reported.
    let parent_comm = if missed { Vec::new() } else { cstr(&rec.comm) };
    let mut s = window_spawn(
        rec.pid,
        rec.parent_pid,
        parent_comm,
        &rec.counters,
        window_ns,
        counting,
    );
    s.exec_ok = missed;
    s.exec_attempts = rec.counters.exec_attempts.max(u32::from(missed));
    s.exec_ns = rec.exit_ns;
    s.flags |= SpawnFlags::from_bits_retain(rec.header.flags) & SpawnFlags::EXEC_MISSED;
    // Named by Completion::identify, as an exec record's is.
    s.identity.cgroup_id = (rec.cgroup_id != 0).then_some(rec.cgroup_id);
    Some(s)
}

/// The parts of a [`Spawn`] that come from the window's counters.
fn window_spawn(
    pid: u32,
    parent_pid: u32,
    parent_comm: Vec<u8>,
    c: &Counters,
    window_ns: u64,
    counting: Counting,
) -> Spawn {
    let calls = SyscallCounts::from(c);
    let nranges = (c.close_range_calls as usize).min(c.ranges.len());
    let (strategy, close_loop_bound) = if counting.syscalls() {
        strategy::classify(&calls)
    } else {
        (Strategy::Unknown, None)
    };
    Spawn {
        parent_pid,
        parent_comm: Lossless::new(parent_comm),
        pid,
        exec_tid: None,
        exec_path: Lossless::default(),
        argv: Lossless::default(),
        exec_ok: true,
        exec_attempts: c.exec_attempts.max(1),
        exec_errno: None,
        exec_error: None,
        window_ns,
        window_corrected_ns: window_ns,
        calls,
        close_ranges: c.ranges[..nranges]
            .iter()
            .map(|r| [r.first, r.last, r.flags])
            .collect(),
        strategy,
        close_loop_bound,
        leaked_count: 0,
        leaked_fds: Vec::new(),
        stdio: Vec::new(),
        flags: if counting.syscalls() {
            SpawnFlags::empty()
        } else {
            SpawnFlags::NO_SYSCALLS
        },
        boundary: None,
        exec_ns: 0,
        identity: Identity::default(),
        probed: calls.probed() + u64::from(c.exec_attempts),
        exec_path_cut: false,
        runtime: None,
        parent_nofile: None,
        nofile: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fdtarget::{join_path, Links};
    use fdaudit_common::CloseRange;

    fn zeroed_record() -> Box<SpawnRecord> {
        // SAFETY: SpawnRecord is plain integers and arrays; all-zero is valid.
        Box::new(unsafe { std::mem::zeroed() })
    }

    /// The first `len` bytes of a record, as the ring buffer carries them.
    fn sent<T>(rec: &T, len: usize) -> &[u8] {
        assert!(len <= size_of::<T>());
        // SAFETY: `len` bytes of a plain-integer record.
        unsafe { std::slice::from_raw_parts((rec as *const T).cast::<u8>(), len) }
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
        // SAFETY: PathsRecord is plain integers and arrays; all-zero is valid.
        let mut paths: Box<PathsRecord> = Box::new(unsafe { std::mem::zeroed() });
        paths.header = RecordHeader { kind: 3, flags: 0 };
        paths.pid = 42;
        paths.exec_ns = rec.exec_ns;
        paths.npaths = 1;
        paths.paths[0].index = 0;
        paths.paths[0].depth = 2;
        paths.paths[0].complete = 1;
        put(&mut paths.paths[0].comps[0], b"secret.key");
        put(&mut paths.paths[0].comps[1], b"etc");
        rec.stdio_mask = 0b101;
        rec.stdio[0].mode = 0o020666;
        rec.stdio[2].mode = 0o010600;
        rec.stdio[2].magic = fdkind::magic::PIPEFS;
        rec.stdio[2].fd = 2;
        rec.stdio[2].ino = 5;
        // As the kernel sends them: the paths, then the spawn up to its one leaked fd.
        let mut pending = VecDeque::new();
        let none = |_, _, _, _| None;
        assert!(decode_with(
            sent(&*paths, PathsRecord::sent_len(1)),
            Counting::Syscalls,
            &mut pending,
            &Links(none)
        )
        .is_none());
        let Some(Event::Spawn(mut s)) = decode_with(
            sent(&*rec, SpawnRecord::sent_len(1)),
            Counting::Syscalls,
            &mut pending,
            &Links(none),
        ) else {
            panic!("no spawn decoded");
        };
        assert!(pending.is_empty(), "the paths went with their spawn");
        assert_eq!(
            s.window_corrected_ns, s.window_ns,
            "no correction before the collector's"
        );
        s.correct_for_probes(100.0);
        assert_eq!(s.window_ns, 2_500_000);
        // 19_998 probed syscalls at 100 ns each.
        assert_eq!(s.window_corrected_ns, 2_500_000 - 1_999_800);
        assert_eq!(*s.argv, [b"true".to_vec(), b"--x".to_vec()]);
        assert_eq!(s.strategy, Strategy::CloseLoop);
        assert_eq!(s.close_loop_bound, Some(20_000));
        assert_eq!(s.leaked_fds.len(), 1);
        assert_eq!(s.leaked_fds[0].kind, FdKind::Regular);
        assert_eq!(s.leaked_fds[0].target.lossy(), "/etc/secret.key");
        assert_eq!(s.leaked_fds[0].access, "r");
        assert_eq!(s.stdio.len(), 2);
        assert_eq!(s.stdio[1].target.lossy(), "pipe:[5]");
        // stdin, a device, has no kernel path and (resolver `none`) no live link: its
        // target is a leaf name, and the record says so (#25 item 6).
        assert!(s.stdio[0].target.lossy().starts_with("…/"));
        assert_eq!(s.flags, SpawnFlags::PATH_PARTIAL);
        assert_eq!(s.calls.close_calls, 19_997);
        assert_eq!(s.exec_tid, None);
    }

    /// A stdio target the live link names whole is no partial path; one it cannot name is.
    #[test]
    fn a_stdio_target_without_a_live_link_is_partial() {
        let mut rec = zeroed_record();
        rec.header = RecordHeader { kind: 1, flags: 0 };
        rec.pid = 5;
        rec.stdio_mask = 0b010;
        rec.stdio[1].fd = 1;
        rec.stdio[1].mode = 0o100644;
        rec.stdio[1].magic = 0xef53;
        rec.stdio[1].ino = 77;
        put(&mut rec.stdio[1].name, b"tr.stdout");
        let live = |_, _, _, _| Some(b"/tmp/run/tr.stdout".to_vec());
        let s = spawn_from_record(&rec, &[], Counting::Syscalls, &Links(live));
        assert_eq!(s.stdio[0].target.lossy(), "/tmp/run/tr.stdout");
        assert!(s.flags.is_empty(), "{:?}", s.flags);
        let gone = |_, _, _, _| None;
        let s = spawn_from_record(&rec, &[], Counting::Syscalls, &Links(gone));
        assert_eq!(s.stdio[0].target.lossy(), "…/tr.stdout (inode 77)");
        assert!(s.flags.contains(SpawnFlags::PATH_PARTIAL));
        // A device whose leaf and inode are /dev's own node is whole without a live link.
        use std::os::unix::fs::MetadataExt as _;
        let null = std::fs::metadata("/dev/null").unwrap();
        rec.stdio[1].mode = null.mode();
        rec.stdio[1].magic = 0x0102_1994; // tmpfs (devtmpfs)
        rec.stdio[1].ino = null.ino();
        rec.stdio[1].name.fill(0);
        put(&mut rec.stdio[1].name, b"null");
        let s = spawn_from_record(&rec, &[], Counting::Syscalls, &Links(gone));
        assert_eq!(s.stdio[0].target.lossy(), "/dev/null");
        assert!(s.flags.is_empty(), "{:?}", s.flags);
        rec.stdio[1].ino = null.ino() + 1;
        let s = spawn_from_record(&rec, &[], Counting::Syscalls, &Links(gone));
        assert!(s.flags.contains(SpawnFlags::PATH_PARTIAL), "another inode");
    }

    #[test]
    fn argv_keeps_empty_elements() {
        assert_eq!(
            split_argv(b"/bin/true\0\0x\0"),
            [b"/bin/true".to_vec(), Vec::new(), b"x".to_vec()]
        );
        assert_eq!(split_argv(b"a\0\0"), [b"a".to_vec(), Vec::new()]);
        assert_eq!(split_argv(b"cut-shor"), [b"cut-shor".to_vec()]);
        assert!(split_argv(b"").is_empty());
    }

    #[test]
    fn memfds_deleted_files_and_cut_names() {
        let mut rec = zeroed_record();
        rec.header = RecordHeader { kind: 1, flags: 0 };
        rec.pid = 5;
        rec.nfds = 3;
        rec.fds[0].fd = 3;
        rec.fds[0].mode = 0o100777;
        rec.fds[0].magic = fdkind::magic::TMPFS;
        put(&mut rec.fds[0].name, b"memfd:cache");
        rec.fds[0].fd_flags = fd_flags::DELETED;
        rec.fds[1].fd = 4;
        rec.fds[1].mode = 0o100644;
        rec.fds[1].magic = 0xef53;
        put(&mut rec.fds[1].name, b"gone");
        rec.fds[1].fd_flags = fd_flags::DELETED;
        rec.fds[2].fd = 5;
        rec.fds[2].mode = 0o100777;
        rec.fds[2].magic = fdkind::magic::TMPFS;
        put(
            &mut rec.fds[2].name,
            &[b"memfd:".as_slice(), &[b'm'; 57]].concat(),
        );
        rec.fds[2].fd_flags = fd_flags::NAME_CUT;
        put(&mut rec.filename, &[b'a'; 255]);
        let live = |_, _, fd, _| match fd {
            4 => Some(b"/srv/gone (deleted)".to_vec()),
            _ => None,
        };
        let s = spawn_from_record(&rec, &[], Counting::Syscalls, &Links(live));
        assert_eq!(s.leaked_fds[0].target.lossy(), "memfd:cache");
        assert!(
            !s.leaked_fds[0].deleted,
            "a memfd is never anything but unlinked"
        );
        assert_eq!(s.leaked_fds[1].target.lossy(), "/srv/gone");
        assert!(s.leaked_fds[1].deleted);
        assert!(
            s.leaked_fds[2].target.lossy().ends_with('…'),
            "{}",
            s.leaked_fds[2].target.lossy()
        );
        assert!(
            s.flags.contains(SpawnFlags::PATH_PARTIAL),
            "a cut name is a partial path"
        );
        assert!(
            s.exec_path_cut,
            "255 bytes and partial: the exec path may be cut"
        );
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
        assert_eq!(join_path(&p), b"/a/b/c");
        p.complete = 0;
        assert_eq!(join_path(&p), "…/a/b/c".as_bytes());
        p.depth = 0;
        p.complete = 1;
        assert_eq!(join_path(&p), b"/");
    }

    #[test]
    fn unresolvable_targets_and_partial_flags() {
        let mut rec = zeroed_record();
        rec.header = RecordHeader {
            kind: 1,
            flags: fdaudit_common::flags::FDS_TRUNCATED | fdaudit_common::flags::NO_FORK,
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
        let s = spawn_from_record(&rec, &[], Counting::Syscalls, &Links(|_, _, _, _| None));
        assert_eq!(s.leaked_count, 70);
        assert_eq!(s.leaked_fds.len(), MAX_FDS);
        assert_eq!(s.leaked_fds[0].target.lossy(), "socket:[1000]");
        assert_eq!(s.leaked_fds[0].family, Some("inet"));
        assert_eq!(s.leaked_fds[0].protocol, Some("tcp"));
        assert_eq!(s.window_ns, 0);
        assert_eq!(s.exec_tid, Some(11));
        assert_eq!(s.strategy, Strategy::CloseRange);
        assert_eq!(s.close_ranges.len(), 4);
        assert_eq!(s.close_ranges[0], [3, u32::MAX, 4]);
        assert_eq!(s.flags, SpawnFlags::FDS_TRUNCATED | SpawnFlags::NO_FORK);
        let s = spawn_from_record(&rec, &[], Counting::Nothing, &Links(|_, _, _, _| None));
        assert!(s.flags.contains(SpawnFlags::NO_SYSCALLS));
        assert_eq!(s.strategy, Strategy::Unknown);
    }

    #[test]
    fn an_exit_stands_for_a_failed_or_an_unseen_exec() {
        let mut rec = ExitRecord {
            header: RecordHeader {
                kind: RecordKind::Exit as u32,
                flags: 0,
            },
            pid: 42,
            parent_pid: 7,
            fork_ns: 1_000,
            exit_ns: 5_000,
            cgroup_id: 0,
            never_execd: 1,
            exit_code: 0,
            comm: *b"bash\0\0\0\0\0\0\0\0\0\0\0\0",
            counters: Counters::default(),
        };
        assert!(
            failed_exec_from_exit(&rec, Counting::Syscalls).is_none(),
            "fork-only: no spawn"
        );
        rec.counters.exec_attempts = 2;
        let failed = failed_exec_from_exit(&rec, Counting::Syscalls).expect("a failed spawn");
        assert!(!failed.exec_ok);
        assert_eq!(failed.exec_attempts, 2);
        assert_eq!(&failed.parent_comm[..], b"bash");
        assert!(failed.flags.is_empty());
        assert_eq!(failed.identity.cgroup_id, None, "no cgroup said");

        // The exec succeeded but its program was skipped (sys_enter may have been too).
        rec.never_execd = 0;
        rec.counters.exec_attempts = 0;
        rec.header.flags = fdaudit_common::flags::EXEC_MISSED;
        rec.comm = *b"true\0\0\0\0\0\0\0\0\0\0\0\0";
        rec.cgroup_id = 4242;
        let missed = failed_exec_from_exit(&rec, Counting::Syscalls).expect("a spawn");
        assert!(missed.exec_ok);
        assert_eq!(missed.exec_attempts, 1);
        assert_eq!(missed.flags, SpawnFlags::EXEC_MISSED);
        assert!(missed.flags.partial().contains(SpawnFlags::EXEC_MISSED));
        assert!(
            missed.parent_comm.is_empty(),
            "the comm is the new image's, not the parent's"
        );
        assert_eq!(missed.window_ns, 4_000);
        assert_eq!(
            missed.identity.cgroup_id,
            Some(4242),
            "the cgroup it exited in"
        );
    }
}
