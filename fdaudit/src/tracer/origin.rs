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
//! a libc wrapper (open64) skips the function that called it: that frame is recovered as
//! the first word above the user sp that is a return address into an executable mapping
//! (the bytes before it are a call instruction). Such frames are marked
//! `"found_by": "stack-scan"`; they are a heuristic (a stale return address left on the
//! stack can match too). Each address is resolved to its module and file offset while the
//! process lives (/proc/PID/maps, read when the record is decoded), and named from the
//! module's ELF symbol tables (`.symtab`, else `.dynsym`) and DWARF line table (`addr2line`,
//! when the module has `.debug_info`) when a leaked fd needs it.

use std::{collections::HashMap, os::unix::fs::FileExt, path::PathBuf, sync::Arc};

use fdaudit_common::{
    origin_flags, OriginCall, OriginCreatedRecord, OriginMade, OriginRecord, FIOCLEX, FIONCLEX,
    F_DUPFD, F_DUPFD_CLOEXEC, F_SETFD, ORIGIN_FDS,
};

pub use super::seen::BEFORE_TRACING;
use super::seen::{self, Seen};
use serde::Serialize;

/// Origins kept per (process, fd): older ones are dropped.
const PER_FD: usize = 4;
/// Above the user half of the address space (x86_64's 47 bits; aarch64's 48).
const USER_TOP: u64 = 1 << 48;
/// Creator records waiting for their origin record.
const PENDING_CREATED: usize = 256;
/// Ancestors looked at for an inherited fd.
const MAX_ANCESTORS: usize = 32;

/// The origin of a leaked fd, as JSON: the call, or why it is unknown: `before tracing`
/// (open when fdaudit attached) or `not seen` with the `reason` fdaudit knows of.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Origin {
    Known(Box<Call>),
    Unknown {
        unknown: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
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
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
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
    /// When this call (ioctl(FIONCLEX), fcntl(F_SETFD)) made an existing fd inheritable:
    /// the call that created it (`openat(O_CLOEXEC)`), with its own stack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by: Option<Box<Call>>,
}

/// One user stack frame.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// The ELF symbol containing `addr` with the offset into it (`open_hostname+0x1c`).
    pub symbol: Option<String>,
    /// Source file and line of the call (DWARF), when the module has them.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The mapped file `addr` is in, and the offset into that file.
    pub module: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The module's GNU build id (hex), to find its debug file elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    /// `stack-scan`: recovered from the words on the stack, not the frame-pointer walk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found_by: Option<&'static str>,
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

/// The origin table of a session.
#[derive(Default)]
pub struct Origins {
    by_fd: HashMap<(u32, i32), Vec<Entry>>,
    parent: HashMap<u32, u32>,
    maps: HashMap<u32, Vec<Mapping>>,
    symbols: HashMap<PathBuf, Option<Arc<Symbols>>>,
    /// Whether a call instruction ends before (module, file offset): the stack scan asks
    /// for the same return addresses again and again.
    follows_call: HashMap<(PathBuf, u64), bool>,
    /// Each process's executable (from its spawn) and text (from its origin records): its
    /// own frames are found there once /proc/PID/maps is gone.
    exe: HashMap<u32, PathBuf>,
    code: HashMap<u32, (u64, u64)>,
    /// (p_vaddr, p_offset) of an executable's first executable segment.
    text_segment: HashMap<PathBuf, Option<(u64, u64)>>,
    /// The attach-time tables and what fdaudit could not follow.
    seen: Seen,
    /// The creator records received, for the origin records that follow them.
    created: HashMap<(u32, i32), Box<OriginCreatedRecord>>,
}

/// An executable mapping of a process: [start, end) from file offset `offset` of `path`.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: PathBuf,
}

impl Origins {
    /// Keeps the origin `rec` reports (its frames resolved against the live process).
    pub fn record(&mut self, rec: &OriginRecord) {
        let Some(call) = OriginCall::from_u32(rec.call) else {
            return;
        };
        if rec.parent_pid != 0 {
            self.parent.insert(rec.pid, rec.parent_pid);
        }
        if rec.start_code < rec.end_code {
            self.code.insert(rec.pid, (rec.start_code, rec.end_code));
        }
        if self.seen.note(rec, call) {
            return;
        }
        let flags = rec.header.flags;
        let cleared = flags & origin_flags::CLEARED != 0;
        let flag_only = cleared || seen::clears_cloexec(call, rec.cmd);
        let stack = if cleared {
            Vec::new()
        } else {
            self.frames(rec)
        };
        let created_by = if flags & origin_flags::CREATED != 0 {
            let made = self.created.remove(&(rec.pid, rec.fd[0]));
            made.and_then(|c| self.created(rec, &c.made))
        } else {
            None
        };
        let call = Arc::new(Call {
            syscall: syscall_name(call, rec.cmd),
            pid: rec.pid,
            tid: rec.tid,
            comm: comm_of(&rec.comm),
            time_ns: rec.time_ns,
            stack,
            created_by,
        });
        for i in 0..(rec.nfd as usize).min(ORIGIN_FDS) {
            if rec.fd[i] < 0 {
                continue;
            }
            let list = self.by_fd.entry((rec.pid, rec.fd[i])).or_default();
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
    fn created(&mut self, rec: &OriginRecord, m: &OriginMade) -> Option<Box<Call>> {
        let call = OriginCall::from_u32(m.call)?;
        // Its frames as a record of its own: the same walk and stack scan.
        let mut r = *rec;
        (r.pid, r.tid, r.nstack, r.stack) = (m.pid, m.tid, m.nstack, m.stack);
        (r.nsp_words, r.sp_words) = (m.nsp_words, m.sp_words);
        let stack = self.frames(&r);
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
            stack,
            created_by: None,
        }))
    }

    /// Keeps `pid`'s fd table as it is now (fdaudit attaches to it): its fds are the ones
    /// "before tracing".
    pub fn note_attached(&mut self, pid: u32) {
        self.seen.note_attached(pid);
    }

    /// Learns that `pid` runs `path` (from its spawn record), if absolute.
    pub fn note_exec(&mut self, pid: u32, path: &[u8]) {
        use std::os::unix::ffi::OsStrExt as _;
        if path.first() == Some(&b'/') {
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
            self.exe.insert(pid, path);
        }
    }

    /// Learns that `pid`'s parent is `parent` (from a spawn or exit record).
    pub fn note_parent(&mut self, pid: u32, parent: u32) {
        if parent != 0 && parent != pid {
            self.parent.entry(pid).or_insert(parent);
        }
    }

    /// The origin of fd `fd` (file `ino` on `dev`) of `pid`, open at its exec at `exec_ns`.
    /// Its newest recorded call names it; else it is `before tracing` if it was in the table
    /// of the process (or an ancestor) when fdaudit attached, else `not seen`.
    pub fn find(&mut self, pid: u32, fd: u32, ino: u64, dev: u32, exec_ns: u64) -> Origin {
        let mut chain = vec![pid];
        let mut p = pid;
        for _ in 0..MAX_ANCESTORS {
            let same = |e: &&Entry| e.ino == ino && e.dev == dev && e.call.time_ns <= exec_ns;
            let list = self.by_fd.get(&(p, fd as i32));
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
            match self.parent.get(&p) {
                Some(&pp) if pp != p => {
                    p = pp;
                    chain.push(p);
                }
                _ => break,
            }
        }
        not_seen(self.seen.reason(&chain, exec_ns))
    }

    fn frames(&mut self, rec: &OriginRecord) -> Vec<Frame> {
        let n = (rec.nstack as usize).min(rec.stack.len());
        // A walk through a frame without a frame pointer ends in garbage: stop at the
        // first word that is no user address.
        let walk: Vec<u64> = rec.stack[..n]
            .iter()
            .copied()
            .take_while(|&a| a != 0 && a < USER_TOP)
            .collect();
        let mut out: Vec<Frame> = walk.iter().map(|&a| self.frame(rec.pid, a, None)).collect();
        let words = &rec.sp_words[..(rec.nsp_words as usize).min(rec.sp_words.len())];
        if let Some(found) = self.scan_return_address(rec.pid, words) {
            if walk.get(1) != Some(&found) {
                let at = out.len().min(1);
                out.insert(at, self.frame(rec.pid, found, Some("stack-scan")));
            }
        }
        out
    }

    fn frame(&mut self, pid: u32, addr: u64, found_by: Option<&'static str>) -> Frame {
        let m = self.mapping_in_tree(pid, addr, true);
        Frame {
            addr,
            symbol: None,
            file: None,
            line: None,
            module: m.as_ref().map(|m| m.path.to_string_lossy().into_owned()),
            offset: m.map(|m| addr - m.start + m.offset),
            build_id: None,
            found_by,
        }
    }

    /// The first word that is a return address: in an executable mapping, just after a
    /// call instruction (read from the mapped file, so it works once the process is gone).
    fn scan_return_address(&mut self, pid: u32, words: &[u64]) -> Option<u64> {
        words.iter().copied().find(|&w| {
            let Some(m) = self.mapping_in_tree(pid, w, false) else {
                return false;
            };
            let off = w - m.start + m.offset;
            *self
                .follows_call
                .entry((m.path, off))
                .or_insert_with_key(|(path, off)| follows_call(path, *off))
        })
    }

    /// The mapping of `addr` in `pid`, else in its parent's (a forked child that exec'd
    /// before its record was read had its parent's layout when it made the call).
    fn mapping_in_tree(&mut self, pid: u32, addr: u64, refresh: bool) -> Option<Mapping> {
        let mut p = pid;
        for _ in 0..4 {
            if let Some(m) = self.mapping(p, addr, refresh) {
                return Some(m);
            }
            match self.parent.get(&p) {
                Some(&pp) if pp != p => p = pp,
                _ => break,
            }
        }
        self.exe_mapping(pid, addr)
    }

    /// `addr` in `pid`'s executable, from its text range (mm->start_code..end_code) and the
    /// executable's first executable segment (binfmt_elf sets start_code to its address):
    /// for a process gone before its maps were read.
    fn exe_mapping(&mut self, pid: u32, addr: u64) -> Option<Mapping> {
        let &(start, end) = self.code.get(&pid)?;
        if !(start..end).contains(&addr) {
            return None;
        }
        let path = self.exe.get(&pid)?.clone();
        let seg = *self
            .text_segment
            .entry(path.clone())
            .or_insert_with(|| text_segment(&path));
        let (_, offset) = seg?;
        Some(Mapping {
            start,
            end,
            offset,
            path,
        })
    }

    /// The mapping of `addr` in `pid`; `refresh`: read /proc/PID/maps again when the cached
    /// copy lacks it (not for the stack scan's words, most of which are data).
    fn mapping(&mut self, pid: u32, addr: u64, refresh: bool) -> Option<Mapping> {
        let find = |maps: &[Mapping]| {
            maps.iter()
                .find(|m| m.start <= addr && addr < m.end)
                .cloned()
        };
        if let Some(m) = self.maps.get(&pid).and_then(|maps| find(maps)) {
            return Some(m);
        }
        if !(8..USER_TOP).contains(&addr) || (!refresh && self.maps.contains_key(&pid)) {
            return None;
        }
        // Read again (a library loaded since); a process gone keeps what was read.
        let fresh = read_exec_maps(pid);
        let hit = find(&fresh);
        if !fresh.is_empty() {
            self.maps.insert(pid, fresh);
        }
        hit
    }

    fn name_frames(&mut self, stack: &mut [Frame]) {
        for f in stack.iter_mut() {
            let (Some(module), Some(offset)) = (&f.module, f.offset) else {
                continue;
            };
            let path = PathBuf::from(module);
            let syms = self
                .symbols
                .entry(path.clone())
                .or_insert_with(|| Symbols::load(&path).map(Arc::new));
            if let Some(s) = syms {
                f.symbol = s.name(offset);
                f.build_id.clone_from(&s.build_id);
                if let Some((file, line)) = s.line(offset) {
                    (f.file, f.line) = (Some(file), line);
                }
            }
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
    String::from_utf8_lossy(&crate::tracer::fdtarget::cstr(comm)).into_owned()
}

/// Whether the bytes before file offset `ret` of `module` end with a call instruction:
/// x86_64 `call rel32` (e8, 5 bytes) or an indirect `call` (ff /2: 2, 3, 6 or 7 bytes);
/// aarch64 `bl`/`blr` (the word before).
fn follows_call(module: &std::path::Path, ret: u64) -> bool {
    let mut b = [0u8; 8];
    let Some(at) = ret.checked_sub(8) else {
        return false;
    };
    let read = std::fs::File::open(module).and_then(|f| f.read_exact_at(&mut b, at));
    if read.is_err() {
        return false;
    }
    if cfg!(target_arch = "aarch64") {
        let w = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        return w & 0xfc00_0000 == 0x9400_0000 || w & 0xffff_fc1f == 0xd63f_0000;
    }
    let modrm_call = |i: usize| b[i] == 0xff && (b[i + 1] >> 3) & 7 == 2;
    b[3] == 0xe8 || modrm_call(6) || modrm_call(5) || modrm_call(2) || modrm_call(1)
}

/// (p_vaddr, p_offset) of the lowest executable PT_LOAD segment of ELF file `path`.
fn text_segment(path: &std::path::Path) -> Option<(u64, u64)> {
    use object::{Object as _, ObjectSegment as _};
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    file.segments()
        .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & 1 != 0))
        .map(|s| (s.address(), s.file_range().0))
        .min()
}

/// The executable file mappings of `pid` (empty once it is gone).
fn read_exec_maps(pid: u32) -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    text.lines().filter_map(parse_maps_line).collect()
}

/// One /proc/PID/maps line, if it is an executable mapping of a file.
fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let (range, perms, offset) = (it.next()?, it.next()?, it.next()?);
    let (_dev, _inode) = (it.next()?, it.next()?);
    let path = it.next()?.trim_start();
    if !perms.contains('x') || !path.starts_with('/') {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(a, 16).ok()?,
        end: u64::from_str_radix(b, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: PathBuf::from(path.trim_end_matches(" (deleted)")),
    })
}

/// DWARF of a module, over its bytes (kept for the session: a module is read once).
type Dwarf = addr2line::Context<gimli::EndianSlice<'static, gimli::RunTimeEndian>>;

/// A module's function symbols by file offset: (start, size, name), sorted; its sections
/// (file offset, size, address) to turn an offset into the address DWARF knows; its DWARF.
struct Symbols {
    funcs: Vec<(u64, u64, String)>,
    sections: Vec<(u64, u64, u64)>,
    dwarf: Option<Dwarf>,
    build_id: Option<String>,
}

impl Symbols {
    fn load(path: &std::path::Path) -> Option<Symbols> {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
        // Leaked on purpose: the DWARF context borrows the bytes for the session.
        let data: &'static [u8] = Box::leak(std::fs::read(path).ok()?.into_boxed_slice());
        let file = object::File::parse(data).ok()?;
        // Symbol values are virtual addresses; the mapping gives file offsets: convert
        // through the section that holds each address.
        let sections: Vec<(u64, u64, u64)> = file
            .sections()
            .filter(|s| s.address() != 0)
            .filter_map(|s| Some((s.file_range()?.0, s.size(), s.address())))
            .collect();
        let to_offset = |addr: u64| {
            sections
                .iter()
                .find(|&&(_, size, a)| a <= addr && addr < a + size)
                .map(|&(off, _, a)| addr - a + off)
        };
        let mut funcs: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((to_offset(s.address())?, s.size(), s.name().ok()?.to_owned())))
            .collect();
        funcs.sort_unstable();
        funcs.dedup_by_key(|f| f.0);
        let dwarf = file.section_by_name(".debug_info").and_then(|_| {
            let endian = if file.is_little_endian() {
                gimli::RunTimeEndian::Little
            } else {
                gimli::RunTimeEndian::Big
            };
            let load = |id: gimli::SectionId| -> Result<_, gimli::Error> {
                let d = file.section_by_name(id.name()).and_then(|s| s.data().ok());
                Ok(gimli::EndianSlice::new(d.unwrap_or(&[]), endian))
            };
            addr2line::Context::from_dwarf(gimli::Dwarf::load(load).ok()?).ok()
        });
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
        Some(Symbols {
            funcs,
            sections,
            dwarf,
            build_id,
        })
    }

    /// `name+0xoff` of the function holding file offset `off`.
    fn name(&self, off: u64) -> Option<String> {
        let i = self.funcs.partition_point(|f| f.0 <= off).checked_sub(1)?;
        let (start, size, name) = &self.funcs[i];
        (*size == 0 || off < start + size).then(|| format!("{name}+{:#x}", off - start))
    }

    /// The source file and line of the call that returns to file offset `ret` (DWARF
    /// line table; the byte before the return address is inside the call).
    fn line(&self, ret: u64) -> Option<(String, Option<u32>)> {
        let at = ret.checked_sub(1)?;
        let addr = self
            .sections
            .iter()
            .find(|&&(off, size, _)| off <= at && at < off + size)
            .map(|&(off, _, a)| at - off + a)?;
        let loc = self.dwarf.as_ref()?.find_location(addr).ok()??;
        Some((loc.file?.to_owned(), loc.line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pid: u32, parent: u32, fd: [i32; 2], ino: u64, time_ns: u64) -> OriginRecord {
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
        let mut o = Origins::default();
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
        o.record(&r);
        let Origin::Known(c) = o.find(100, 3, 55, 7, 30) else {
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
        o.record(&rec(100, 1, [4, -1], 60, 10));
        let mut set = flag_call(100, 4, 60, 20, OriginCall::Ioctl, FIOCLEX);
        set.header.flags = origin_flags::CLEARED;
        o.record(&set);
        assert!(matches!(
            o.find(100, 4, 60, 7, 25),
            Origin::Unknown { unknown: seen::NOT_SEEN, reason: Some(r) } if r.contains("ioctl(FIOCLEX)")
        ));
        o.record(&flag_call(100, 4, 60, 30, OriginCall::Fcntl, F_SETFD));
        let Origin::Known(c) = o.find(100, 4, 60, 7, 40) else {
            panic!("F_SETFD is the origin");
        };
        assert_eq!(c.syscall, "fcntl(F_SETFD)");
        assert_eq!(c.created_by.map(|m| m.syscall), Some("openat".into()));
    }

    #[test]
    fn before_tracing_is_only_an_fd_open_at_attach() {
        let mut o = Origins::default();
        o.seen.set_attached(100, HashMap::from([(7, 55)]));
        o.note_parent(200, 100);
        assert_eq!(
            o.find(200, 7, 55, 7, 20),
            Origin::Unknown {
                unknown: BEFORE_TRACING,
                reason: None
            }
        );
        assert!(matches!(
            o.find(200, 8, 56, 7, 20),
            Origin::Unknown {
                unknown: seen::NOT_SEEN,
                reason: Some(_)
            }
        ));
    }

    #[test]
    fn a_leaked_fd_matches_its_origin_only_with_the_same_file() {
        let mut o = Origins::default();
        o.record(&rec(100, 1, [3, -1], 55, 10));
        assert!(matches!(o.find(100, 3, 55, 7, 20), Origin::Known(c) if c.syscall == "openat"));
        // fd 3 reused for another file, or another dev: not this call's.
        assert_eq!(
            o.find(100, 3, 56, 7, 20),
            not_seen(o.seen.reason(&[100], 20))
        );
        assert_eq!(
            o.find(100, 3, 55, 8, 20),
            not_seen(o.seen.reason(&[100], 20))
        );
        // A call after the exec did not make the fd the exec saw.
        assert_eq!(
            o.find(100, 3, 55, 7, 5),
            not_seen(o.seen.reason(&[100], 20))
        );
    }

    #[test]
    fn an_inherited_fd_is_found_in_the_ancestors_tables() {
        let mut o = Origins::default();
        o.record(&rec(100, 1, [4, 5], 90, 10)); // a pair: both fds
        o.note_parent(200, 100);
        o.note_parent(300, 200);
        let Origin::Known(c) = o.find(300, 5, 91, 7, 50) else {
            panic!("fd 5 of the grandchild comes from pid 100's call");
        };
        assert_eq!((c.pid, c.syscall.as_str()), (100, "openat"));
        assert!(matches!(o.find(300, 4, 90, 7, 50), Origin::Known(_)));
    }

    #[test]
    fn a_gone_process_s_own_frames_are_found_from_its_text_range_and_executable() {
        use std::os::unix::ffi::OsStrExt as _;
        let exe = std::env::current_exe().expect("the test binary");
        let (vaddr, off) = text_segment(&exe).expect("an executable segment");
        let pid = 1 << 30; // no such process: no /proc/PID/maps
        let mut o = Origins::default();
        o.note_exec(pid, exe.as_os_str().as_bytes());
        let start = 0x5555_0000_0000 + vaddr;
        o.code.insert(pid, (start, start + 0x1000));
        let m = o
            .mapping_in_tree(pid, start + 0x10, true)
            .expect("found in the executable");
        assert_eq!((m.path, m.offset, m.start), (exe, off, start));
        assert!(o.mapping_in_tree(pid, start + 0x1000, true).is_none());
    }

    #[test]
    fn fcntl_is_named_with_its_command() {
        assert_eq!(syscall_name(OriginCall::Fcntl, F_DUPFD), "fcntl(F_DUPFD)");
        assert_eq!(syscall_name(OriginCall::Fcntl, F_SETFD), "fcntl(F_SETFD)");
        assert_eq!(syscall_name(OriginCall::Dup2, 0), "dup2");
    }

    #[test]
    fn maps_lines_give_executable_file_mappings_only() {
        let m = parse_maps_line(
            "7f00a000-7f00b000 r-xp 00002000 08:01 1234                       /usr/lib/libc.so.6",
        )
        .expect("an executable file mapping");
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f00_a000, 0x7f00_b000, 0x2000)
        );
        assert_eq!(m.path, PathBuf::from("/usr/lib/libc.so.6"));
        assert!(parse_maps_line("7f00a000-7f00b000 rw-p 00000000 00:00 0   [heap]").is_none());
        assert!(parse_maps_line("7f00a000-7f00b000 r--p 00000000 08:01 1 /usr/lib/x.so").is_none());
    }
}
