//! `trace --origin`: which call made each leaked fd inheritable. The kernel sends one
//! [`OriginRecord`] per call of the origin table (`fdaudit_common::for_each_origin_call!`)
//! made by a traced process without close-on-exec; closes are not tracked. [`Origins`]
//! keeps the last few origins per (process, fd) with the file's identity (inode number and
//! superblock dev) and matches a leaked fd to one only if the identity is the same, so an
//! fd closed and reused for another file is never blamed on the first call. A spawn's fd
//! inherited through fork is looked up in the process's own table, then in its parent's
//! and further ancestors' (as of before the exec); an exec chain keeps the table (same pid).
//!
//! The stack: the kernel's frame-pointer walk (bpf_get_stack), plus the top words of the
//! user stack. Debian's glibc is built without frame pointers, so a walk that starts inside
//! a libc wrapper (open64) skips the function that called it: that frame is read from the
//! stack words where the wrapper's unwind table (`.eh_frame`) says its return address is,
//! marked `"found_by": "eh_frame"`; where the table does not say, it is missing, never
//! guessed, and the stack says it is partial. Each address is resolved to its module and
//! file offset while the process lives (/proc/PID/maps, read when the record is decoded;
//! the module's file opened then, through /proc/PID/map_files), or, for a process gone
//! before that, from the build ids and file offsets the kernel sent with its first origin
//! record ([`super::buildid`]: such a record waits for them), and named from the module's
//! ELF symbol tables
//! (`.symtab`, else `.dynsym`) and DWARF line table (`addr2line`, when the module has
//! `.debug_info`) when a leaked fd needs it: [`super::symbolize`], which treats every path,
//! file and size the traced process controls as hostile and bounds what it keeps.

use std::{collections::HashMap, sync::Arc};

use fdaudit_common::{
    origin_flags, OriginCall, OriginCreatedRecord, OriginMade, OriginModulesRecord, OriginRecord,
    FIOCLEX, FIONCLEX, F_DUPFD, F_DUPFD_CLOEXEC, F_SETFD, ORIGIN_FDS,
};

use super::process::Processes;

mod copy;
mod late;
pub use super::seen::BEFORE_TRACING;
use super::seen::{self, Seen};

pub use super::symbolize::{FoundBy, Frame, Stack, LEFT_FOR_LATER};

/// Origins kept per (process, fd): older ones are dropped.
const PER_FD: usize = 4;
/// Creator records waiting for their origin record.
const PENDING_CREATED: usize = 256;
/// Origin records waiting for their process's modules record.
const PENDING_MODULES: usize = 256;
/// Ancestors looked at for an inherited fd.
const MAX_ANCESTORS: usize = 32;

/// The origin of a leaked fd: the call, or why it is unknown: `before tracing` (open when
/// fdaudit attached) or `not seen` with the `reason` fdaudit knows of. (`trace --json`
/// writes it as `trace/report/json.rs`'s `OriginJson`.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Known(Box<Call>),
    Unknown {
        unknown: &'static str,
        reason: Option<String>,
    },
}

impl Origin {
    /// The syscall's name, or "unknown": a metric label (`watch --origin`).
    pub fn label(&self) -> &str {
        match self {
            Origin::Known(c) => &c.syscall,
            Origin::Unknown { .. } => "unknown",
        }
    }
}

/// One call that made an fd inheritable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The syscall's name; fcntl with its command: `fcntl(F_DUPFD)`, `fcntl(F_SETFD)`.
    pub syscall: String,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// Kernel timestamp of the call's return (CLOCK_MONOTONIC ns).
    pub time_ns: u64,
    /// User stack, innermost first.
    pub stack: Vec<Frame>,
    /// Why `stack` stops short of the stack's outermost frame, if it does.
    pub stack_partial: Option<&'static str>,
    /// When this call (ioctl(FIONCLEX), fcntl(F_SETFD)) made an existing fd inheritable:
    /// the call that created it (`openat(O_CLOEXEC)`), with its own stack.
    pub created_by: Option<Box<Call>>,
}

/// One recorded origin: the call, the file's identity and the raw frames.
#[derive(Debug, Clone)]
struct Entry {
    ino: u64,
    dev: u32,
    /// Close-on-exec was set again here (FIOCLEX, F_SETFD FD_CLOEXEC): no origin.
    cleared: bool,
    /// The call changed the flag of an existing fd (FIONCLEX, F_SETFD): not its creator.
    flag_only: bool,
    call: Arc<Call>,
}

/// The origin table of a session. The parent links it follows are the session's
/// [`Processes`]'; what it keeps by pid goes when that table forgets the pid
/// ([`Origins::forget`]).
#[derive(Default)]
pub struct Origins {
    /// pid → fd → its last origins.
    by_fd: HashMap<u32, HashMap<i32, Vec<Entry>>>,
    /// Frames resolved and named (bounded: [`super::symbolize`]).
    sym: super::symbolize::Symbolizer,
    /// The attach-time tables and what fdaudit could not follow.
    seen: Seen,
    /// The creator records received, for the origin records that follow them.
    created: HashMap<(u32, i32), Box<OriginCreatedRecord>>,
    /// Origin records whose innermost frame had no module yet: their process was gone
    /// before its maps were read; its modules record follows.
    waiting: Vec<OriginRecord>,
    /// CPython processes' frames ([`super::pyframes`]), and the last origin of each thread
    /// for the Python record that follows it.
    python: super::pyframes::PyOrigins,
    py_last: HashMap<(u32, u32), Arc<Call>>,
    /// The last call sites' stacks per process: a site met again is not resolved again.
    memo: super::stack_memo::StackMemo,
    /// Each thread's last origin, for its call site's stack copy that may follow ([`copy`]).
    copies: copy::LastOrigins,
    /// The not-seen fds named, for an origin record that comes after them.
    late: late::Late,
    /// Origin records decoded.
    records: u64,
    /// A frame was left unnamed for a later record ([`Origins::name_left`]).
    left: bool,
}

impl Origins {
    /// Keeps the origin `rec` reports (its frames resolved against the live process).
    pub fn record(&mut self, procs: &mut Processes, rec: &OriginRecord) {
        self.records += 1;
        let Some(call) = OriginCall::from_u32(rec.call) else {
            return;
        };
        if rec.parent_pid != 0 {
            procs.set_parent(rec.pid, rec.parent_pid);
        }
        if self.seen.note(rec, call) {
            return;
        }
        self.record_call(procs, rec, call, false);
    }

    /// Keeps the origin `rec` (of `call`) reports; `last`: with the modules known now (else
    /// a record whose innermost frame has no module waits for its modules record).
    fn record_call(&mut self, procs: &Processes, rec: &OriginRecord, call: OriginCall, last: bool) {
        let flags = rec.header.flags;
        let cleared = flags & origin_flags::CLEARED != 0;
        let flag_only = cleared || seen::clears_cloexec(call, rec.cmd);
        let mut stack = if cleared {
            Stack::default()
        } else {
            match self.memo.get(rec) {
                Some(s) => {
                    self.sym.note_code(rec);
                    s
                }
                None => match self.sym.stack(rec, procs, last) {
                    Some(s) => {
                        self.memo.put(rec, &s, self.sym.words_read());
                        s
                    }
                    None => return self.wait_for_modules(procs, rec),
                },
            }
        };
        let native = stack.frames.len();
        if !cleared {
            stack.frames.splice(0..0, self.python.unsupported(rec.pid));
        }
        let created_by = if flags & origin_flags::CREATED != 0 {
            let made = self.created.remove(&(rec.pid, rec.fd[0]));
            made.and_then(|c| self.created(procs, rec, &c.made))
        } else {
            None
        };
        let call = Arc::new(Call {
            syscall: syscall_name(call, rec.cmd),
            pid: rec.pid,
            tid: rec.tid,
            comm: comm_of(&rec.comm),
            time_ns: rec.time_ns,
            stack: stack.frames,
            stack_partial: stack.partial,
            created_by,
        });
        if !cleared {
            if self.py_last.len() >= PENDING_CREATED {
                self.py_last.clear();
            }
            self.py_last.insert((call.pid, call.tid), Arc::clone(&call));
            self.copies.note(rec, &call, native);
        }
        for i in 0..(rec.nfd as usize).min(ORIGIN_FDS) {
            if rec.fd[i] < 0 {
                continue;
            }
            let list = self.by_fd.entry(rec.pid).or_default();
            let list = list.entry(rec.fd[i]).or_default();
            if list.len() == PER_FD {
                list.remove(0);
            }
            list.push(Entry {
                ino: rec.ino[i],
                dev: rec.dev[i],
                cleared,
                flag_only,
                call: Arc::clone(&call),
            });
            if !cleared {
                let identity = (rec.ino[i], rec.dev[i]);
                self.late.arrived(rec.pid, rec.fd[i], identity, rec.time_ns);
            }
        }
    }

    /// Keeps `rec` until its process's modules record comes (the oldest waiting goes on
    /// without it when too many wait).
    fn wait_for_modules(&mut self, procs: &Processes, rec: &OriginRecord) {
        if self.waiting.len() >= PENDING_MODULES {
            let old = self.waiting.remove(0);
            self.replay(procs, &old);
        }
        self.waiting.push(*rec);
    }

    /// A waiting record, kept with the modules known now.
    fn replay(&mut self, procs: &Processes, rec: &OriginRecord) {
        if let Some(call) = OriginCall::from_u32(rec.call) {
            self.record_call(procs, rec, call, true);
        }
    }

    /// Keeps the records that waited for `pid`'s modules (all of them: None), with the
    /// modules known now.
    fn flush_waiting(&mut self, procs: &Processes, pid: Option<u32>) {
        let (go, stay) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|r| pid.is_none_or(|p| r.pid == p));
        self.waiting = stay;
        for rec in go {
            self.replay(procs, &rec);
        }
    }

    /// Learns the modules of a process's stack from the record the kernel sends after its
    /// first origin record, then keeps its origin records that waited for them.
    pub fn modules_record(&mut self, procs: &Processes, rec: &OriginModulesRecord) {
        self.sym.learn_modules(rec);
        self.flush_waiting(procs, Some(rec.pid));
    }

    /// Sets the PY_PROCS map CPython processes are registered in (`trace --origin`).
    pub fn with_python(mut self, registry: super::pyframes::Registry) -> Origins {
        self.python = super::pyframes::PyOrigins::new(registry);
        self
    }

    /// `pid` exec'd: whether it is CPython now is looked at (in a thread).
    pub fn python_exec(&mut self, pid: u32) {
        self.python.forget(pid);
        self.python.registry.exec(pid);
    }

    /// Reads the code objects of a batch's Python records ahead of the batch.
    pub fn python_prefetch(&mut self, raw: &[Vec<u8>]) {
        self.python.prefetch(raw);
    }

    /// A Python frames record: the origin recorded just before it gets its Python frames.
    pub fn python_record(&mut self, rec: Box<fdaudit_common::PyFramesRecord>) {
        let Some(((pid, tid), mut frames)) = self.python.record(rec) else {
            return;
        };
        let Some(old) = self.py_last.remove(&(pid, tid)) else {
            return;
        };
        let mut call = (*old).clone();
        frames.append(&mut call.stack);
        call.stack = frames;
        let new = Arc::new(call);
        for list in self
            .by_fd
            .get_mut(&pid)
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            for e in list.iter_mut().filter(|e| Arc::ptr_eq(&e.call, &old)) {
                e.call = Arc::clone(&new);
            }
        }
    }

    /// Keeps the creator the kernel sends before the origin record of its fd.
    pub fn created_record(&mut self, rec: Box<OriginCreatedRecord>) {
        // Another CPU's records can come between it and its origin record; one whose
        // origin record was lost must not stay.
        if self.created.len() >= PENDING_CREATED {
            self.created.clear();
        }
        self.created.insert((rec.pid, rec.fd), rec);
    }

    /// The close-on-exec call `m` the kernel kept for the fd `rec` made inheritable.
    fn created(
        &mut self,
        procs: &Processes,
        rec: &OriginRecord,
        m: &OriginMade,
    ) -> Option<Box<Call>> {
        let call = OriginCall::from_u32(m.call)?;
        // Its frames as a record of its own: the same walk and stack scan.
        let mut r = *rec;
        (r.pid, r.tid, r.nstack, r.stack) = (m.pid, m.tid, m.nstack, m.stack);
        (r.nsp_words, r.sp_words) = (m.nsp_words, m.sp_words);
        let mut stack = self.sym.stack(&r, procs, true).unwrap_or_default();
        let mut py = self.python.made_frames(m.pid, m.time_ns);
        py.append(&mut stack.frames);
        stack.frames = py;
        Some(Box::new(Call {
            syscall: seen::cloexec_name(call),
            pid: m.pid,
            tid: m.tid,
            comm: if m.pid == rec.pid {
                comm_of(&rec.comm)
            } else {
                String::new()
            },
            time_ns: m.time_ns,
            stack: stack.frames,
            stack_partial: stack.partial,
            created_by: None,
        }))
    }

    /// Keeps `pid`'s fd table as it is now (fdaudit attaches to it): its fds are the ones
    /// "before tracing".
    pub fn note_attached(&mut self, pid: u32) {
        self.seen.note_attached(pid);
        self.python.registry.exec(pid);
    }

    /// Origin records decoded.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Learns that `pid` runs `path` (from its spawn record), if absolute.
    pub fn note_exec(&mut self, procs: &Processes, pid: u32, path: &[u8]) {
        // The old image's records still waiting for modules go with what is known of it
        // now (its modules record, sent right after each, came before this exec).
        if self.waiting.iter().any(|r| r.pid == pid) {
            self.flush_waiting(procs, Some(pid));
        }
        self.sym.note_exec(pid, path);
        self.memo.forget(pid);
    }

    /// Forgets what is kept of the processes the session's table forgot.
    pub fn forget(&mut self, pids: &[u32]) {
        // (a record still waiting for its modules is kept first, as far as it can be)
        if self.waiting.iter().any(|r| pids.contains(&r.pid)) {
            let procs = Processes::default();
            for pid in pids {
                self.flush_waiting(&procs, Some(*pid));
            }
        }
        for pid in pids {
            self.by_fd.remove(pid);
            self.seen.forget(*pid);
            self.sym.forget(*pid);
            self.memo.forget(*pid);
            self.python.forget(*pid);
            self.py_last.retain(|(p, _), _| p != pid);
            self.copies.forget(*pid);
            self.late.forget(*pid);
        }
    }

    /// The origin of fd `fd` (file `ino` on `dev`) of `pid`, open at its exec at `exec_ns`.
    /// Its newest recorded call names it; else it is `before tracing` if it was in the table
    /// of the process (or an ancestor) when fdaudit attached, else `not seen`.
    pub fn find(
        &mut self,
        procs: &Processes,
        (pid, fd): (u32, u32),
        ino: u64,
        dev: u32,
        exec_ns: u64,
    ) -> Origin {
        self.find_with(procs, (pid, fd), (ino, dev), exec_ns, true)
    }

    /// [`Origins::find`]; `note`: a `not seen` fd is kept for an origin record that comes
    /// after it.
    fn find_with(
        &mut self,
        procs: &Processes,
        (pid, fd): (u32, u32),
        (ino, dev): (u64, u32),
        exec_ns: u64,
        note: bool,
    ) -> Origin {
        // A record that waited for modules that did not come counts with what is known.
        if !self.waiting.is_empty() {
            self.flush_waiting(procs, None);
        }
        let mut chain = vec![pid];
        let mut p = pid;
        for _ in 0..MAX_ANCESTORS {
            let same = |e: &&Entry| e.ino == ino && e.dev == dev && e.call.time_ns <= exec_ns;
            let list = self.by_fd.get(&p).and_then(|m| m.get(&(fd as i32)));
            if let Some(e) = list.and_then(|l| l.iter().rev().find(same)) {
                if e.cleared {
                    let why = self.seen.reason(&chain, exec_ns);
                    return not_seen(format!(
                        "close-on-exec was set again by {} in pid {p}; what cleared it since: {why}",
                        e.call.syscall
                    ));
                }
                let mut call = (*e.call).clone();
                // Made inheritable after its creation, whose record fdaudit has (an fd
                // opened without close-on-exec, set, then cleared again).
                if call.created_by.is_none() && e.flag_only {
                    call.created_by = list
                        .and_then(|l| l.iter().rev().filter(same).find(|o| !o.flag_only))
                        .map(|o| Box::new((*o.call).clone()));
                }
                self.name_frames(&mut call.stack);
                if let Some(c) = &mut call.created_by {
                    self.name_frames(&mut c.stack);
                }
                return Origin::Known(Box::new(call));
            }
            if self.seen.open_at_attach(p, fd, ino) {
                return Origin::Unknown {
                    unknown: BEFORE_TRACING,
                    reason: None,
                };
            }
            match procs.parent(p) {
                Some(pp) if pp != p => {
                    p = pp;
                    chain.push(p);
                }
                _ => break,
            }
        }
        let seen_of_fd = self.near_miss(&chain, fd as i32, ino, exec_ns);
        if note {
            self.late.note(&chain, fd as i32, (ino, dev), exec_ns);
        }
        not_seen(format!("{}{seen_of_fd}", self.seen.reason(&chain, exec_ns)))
    }

    /// Learns the session's count of records lost to a full ring buffer so far (a
    /// `not seen` fd's reason when no process's own count explains it).
    pub fn note_lost_total(&mut self, n: u64) {
        self.seen.set_lost_total(n);
    }

    /// A spawn record's leaked fds are to be named: its share of CPU starts now.
    pub fn begin_record(&mut self) {
        self.sym.begin_record();
    }

    /// A spawn record's frames are named within its own time: a frame whose module is left
    /// for later is named when the batch's frames are named again ([`Origins::name_left`]).
    fn name_frames(&mut self, stack: &mut [Frame]) {
        self.left |= self.sym.name_frames(stack);
    }

    /// Whether a frame was left unnamed for a later record since the last call.
    pub fn take_left(&mut self) -> bool {
        std::mem::take(&mut self.left)
    }

    /// Names again the frames of `call` (and of its creator) that were left for a later
    /// record ([`LEFT_FOR_LATER`]), in the record's time begun last.
    pub fn name_left(&mut self, call: &mut Call) {
        let left = |s: &[Frame]| {
            s.iter()
                .any(|f| f.unnamed.as_deref() == Some(LEFT_FOR_LATER))
        };
        if left(&call.stack) {
            self.name_frames(&mut call.stack);
        }
        if let Some(c) = call.created_by.as_deref_mut().filter(|c| left(&c.stack)) {
            self.name_frames(&mut c.stack);
        }
    }
}

/// The JSON name of a call (fcntl and ioctl with their command).
fn syscall_name(call: OriginCall, cmd: u64) -> String {
    match (call, cmd) {
        (OriginCall::Fcntl, F_DUPFD) => "fcntl(F_DUPFD)".into(),
        (OriginCall::Fcntl, F_DUPFD_CLOEXEC) => "fcntl(F_DUPFD_CLOEXEC)".into(),
        (OriginCall::Fcntl, F_SETFD) => "fcntl(F_SETFD)".into(),
        (OriginCall::Ioctl, c) if c & 0xffff_ffff == FIONCLEX => "ioctl(FIONCLEX)".into(),
        (OriginCall::Ioctl, c) if c & 0xffff_ffff == FIOCLEX => "ioctl(FIOCLEX)".into(),
        (c, _) => c.name().into(),
    }
}

fn not_seen(reason: String) -> Origin {
    Origin::Unknown {
        unknown: seen::NOT_SEEN,
        reason: Some(reason),
    }
}

fn comm_of(comm: &[u8; 16]) -> String {
    String::from_utf8_lossy(&crate::engine::fdtarget::cstr(comm)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_left_for_a_later_record_are_named_again_and_their_creator_s_too() {
        use std::os::unix::fs::MetadataExt as _;
        let exe = std::env::current_exe().unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let left = Frame {
            module: Some(exe.to_str().unwrap().into()),
            offset: Some(0),
            module_id: Some(crate::untrusted::FileId {
                dev: meta.dev(),
                ino: meta.ino(),
            }),
            unnamed: Some(LEFT_FOR_LATER.into()),
            ..Frame::default()
        };
        let call = |created_by| Call {
            syscall: "openat".into(),
            pid: 1,
            tid: 1,
            comm: "t".into(),
            time_ns: 0,
            stack: vec![left.clone()],
            stack_partial: None,
            created_by,
        };
        let mut c = call(Some(Box::new(call(None))));
        let mut o = Origins::default();
        assert!(!o.take_left(), "nothing was left yet");
        o.begin_record();
        o.name_left(&mut c);
        assert_eq!(c.stack[0].unnamed, None, "{:?}", c.stack[0]);
        assert_eq!(c.created_by.as_ref().unwrap().stack[0].unnamed, None);
        assert!(!o.take_left(), "its module was read: nothing is left");
    }

    pub(super) fn rec(pid: u32, parent: u32, fd: [i32; 2], ino: u64, time_ns: u64) -> OriginRecord {
        // SAFETY: OriginRecord is plain integers; all zero is valid.
        let mut r: OriginRecord = unsafe { std::mem::zeroed() };
        r.pid = pid;
        r.tid = pid;
        r.parent_pid = parent;
        r.call = OriginCall::Openat as u32;
        r.nfd = if fd[1] < 0 { 1 } else { 2 };
        r.fd = [-1; ORIGIN_FDS];
        r.fd[..2].copy_from_slice(&fd);
        r.ino[..2].copy_from_slice(&[ino, ino + 1]);
        r.dev = [7; ORIGIN_FDS];
        r.time_ns = time_ns;
        r
    }

    fn flag_call(
        pid: u32,
        fd: i32,
        ino: u64,
        time_ns: u64,
        call: OriginCall,
        cmd: u64,
    ) -> OriginRecord {
        let mut r = rec(pid, 1, [fd, -1], ino, time_ns);
        r.call = call as u32;
        r.cmd = cmd;
        r
    }

    #[test]
    fn an_fd_made_inheritable_names_that_call_and_the_one_that_made_it() {
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        // Made by the kernel-kept close-on-exec open, then FIONCLEX.
        let mut r = flag_call(100, 3, 55, 20, OriginCall::Ioctl, FIONCLEX);
        r.header.flags = origin_flags::CREATED;
        // SAFETY: plain integers; all zero is valid.
        let mut c: OriginCreatedRecord = unsafe { std::mem::zeroed() };
        (c.pid, c.fd) = (100, 3);
        c.made.call = OriginCall::Openat as u32;
        c.made.pid = 100;
        c.made.time_ns = 10;
        o.created_record(Box::new(c));
        o.record(&mut procs, &r);
        let Origin::Known(c) = o.find(&procs, (100, 3), 55, 7, 30) else {
            panic!("FIONCLEX is the origin");
        };
        assert_eq!(c.syscall, "ioctl(FIONCLEX)");
        let made = c.created_by.expect("the creating call");
        assert_eq!(
            (made.syscall.as_str(), made.time_ns),
            ("openat(O_CLOEXEC)", 10)
        );
        // An open without close-on-exec (recorded), FIOCLEX, then F_SETFD(0): the open is
        // the creator; between FIOCLEX and F_SETFD the fd had no origin.
        o.record(&mut procs, &rec(100, 1, [4, -1], 60, 10));
        let mut set = flag_call(100, 4, 60, 20, OriginCall::Ioctl, FIOCLEX);
        set.header.flags = origin_flags::CLEARED;
        o.record(&mut procs, &set);
        assert!(matches!(
            o.find(&procs, (100, 4), 60, 7, 25),
            Origin::Unknown { unknown: seen::NOT_SEEN, reason: Some(r) } if r.contains("ioctl(FIOCLEX)")
        ));
        o.record(
            &mut procs,
            &flag_call(100, 4, 60, 30, OriginCall::Fcntl, F_SETFD),
        );
        let Origin::Known(c) = o.find(&procs, (100, 4), 60, 7, 40) else {
            panic!("F_SETFD is the origin");
        };
        assert_eq!(c.syscall, "fcntl(F_SETFD)");
        assert_eq!(c.created_by.map(|m| m.syscall), Some("openat".into()));
    }

    #[test]
    fn before_tracing_is_only_an_fd_open_at_attach() {
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        o.seen.set_attached(100, HashMap::from([(7, 55)]));
        procs.note_parent(200, 100);
        assert_eq!(
            o.find(&procs, (200, 7), 55, 7, 20),
            Origin::Unknown {
                unknown: BEFORE_TRACING,
                reason: None
            }
        );
        assert!(matches!(
            o.find(&procs, (200, 8), 56, 7, 20),
            Origin::Unknown {
                unknown: seen::NOT_SEEN,
                reason: Some(_)
            }
        ));
    }

    #[test]
    fn a_leaked_fd_matches_its_origin_only_with_the_same_file() {
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        o.record(&mut procs, &rec(100, 1, [3, -1], 55, 10));
        assert!(
            matches!(o.find(&procs, (100, 3), 55, 7, 20), Origin::Known(c) if c.syscall == "openat")
        );
        // fd 3 reused for another file, or another dev: not this call's.
        let why = o.seen.reason(&[100], 20);
        assert_eq!(
            o.find(&procs, (100, 3), 56, 7, 20),
            not_seen(format!(
                "{why}; fdaudit saw fd 3 of pid 100 made by openat for another file (inode 55)"
            ))
        );
        assert_eq!(
            o.find(&procs, (100, 3), 55, 8, 20),
            not_seen(format!(
                "{why}; fdaudit saw fd 3 of pid 100 made by openat for the same inode on another device (7)"
            ))
        );
        // A call after the exec did not make the fd the exec saw.
        assert_eq!(
            o.find(&procs, (100, 3), 55, 7, 5),
            not_seen(format!(
                "{why}; fdaudit saw fd 3 of pid 100 made by openat 5 ns after the exec"
            ))
        );
    }

    #[test]
    fn an_inherited_fd_is_found_in_the_ancestors_tables() {
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        o.record(&mut procs, &rec(100, 1, [4, 5], 90, 10)); // a pair: both fds
        procs.note_parent(200, 100);
        procs.note_parent(300, 200);
        let Origin::Known(c) = o.find(&procs, (300, 5), 91, 7, 50) else {
            panic!("fd 5 of the grandchild comes from pid 100's call");
        };
        assert_eq!((c.pid, c.syscall.as_str()), (100, "openat"));
        assert!(matches!(
            o.find(&procs, (300, 4), 90, 7, 50),
            Origin::Known(_)
        ));
    }

    #[test]
    fn a_long_session_keeps_the_recent_ancestors_origins_and_forgets_the_old_ones() {
        use crate::engine::process::MAX_EXITED;
        let (mut o, mut procs) = (Origins::default(), Processes::default());
        // pid 100 opens fd 4 and forks 200, which forks 300; 100 and 200 exit before 300
        // execs: 300's fd 4 is still 100's call.
        o.record(&mut procs, &rec(100, 1, [4, -1], 90, 10));
        procs.note_parent(200, 100);
        procs.note_parent(300, 200);
        o.forget(&procs.exited([100, 200]));
        assert!(matches!(o.find(&procs, (300, 4), 90, 7, 50), Origin::Known(c) if c.pid == 100));
        // A long `watch --origin`: many more processes, each with an origin, exit.
        for pid in 1000..1000 + 2 * MAX_EXITED as u32 {
            o.record(&mut procs, &rec(pid, 1, [3, -1], 5, 10));
            o.forget(&procs.exited([pid]));
        }
        assert!(
            procs.len() <= MAX_EXITED + 1 && o.by_fd.len() <= MAX_EXITED + 1,
            "{} processes and {} origin tables kept",
            procs.len(),
            o.by_fd.len()
        );
        assert!(matches!(
            o.find(&procs, (300, 4), 90, 7, 50),
            Origin::Unknown {
                unknown: seen::NOT_SEEN,
                ..
            }
        ));
    }

    #[test]
    fn fcntl_is_named_with_its_command() {
        assert_eq!(syscall_name(OriginCall::Fcntl, F_DUPFD), "fcntl(F_DUPFD)");
        assert_eq!(syscall_name(OriginCall::Fcntl, F_SETFD), "fcntl(F_SETFD)");
        assert_eq!(syscall_name(OriginCall::Dup2, 0), "dup2");
    }
}
