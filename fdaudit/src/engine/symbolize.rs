//! `trace --origin`'s frames: each address resolved to its module (a mapped file, known by
//! the device and inode /proc/PID/maps gives) and file offset when the record is decoded,
//! while the process lives; named later, when a leaked fd needs it.
//!
//! What a traced process controls is read as hostile ([`crate::untrusted`]): a module is
//! opened through `/proc/PID/map_files/START-END` (the mapped file itself, whatever its path
//! is now) when its record is decoded, and that fd kept for naming ([`MAX_OPEN_MODULES`] of
//! them, least recently used dropped); else by its path, never through a symlink at its end,
//! never anything but a regular file, and only if it is still the device and inode maps
//! named. Modules on file systems that may not answer (FUSE, NFS, ...: the process's
//! mountinfo) are not opened. Per record, /proc/PID/maps is read at most
//! [`MAPS_READS_PER_RECORD`] times and [`MAPS_MAX_BYTES`] of it; [`MAX_MAPPINGS_PER_PID`]
//! executable mappings are kept per process and [`MAPS_BUDGET`] bytes of them in all; the
//! symbols kept stay within [`SYMBOLS_BUDGET`] (least recently used dropped), so that with a
//! module being read ([`super::symbols::LOAD_BUDGET`]) symbolization holds at most 64 MiB.

use std::{collections::HashMap, fs::File, sync::Arc, time::Duration};

use fdaudit_common::{OriginRecord, ORIGIN_STACK_DEPTH};

use super::proc_maps::{read_exec_maps, Mapping};
use super::process::Processes;
use super::symbols::{self, Symbols};
use super::unwind::{self, kernel_frames_kept, unwind, FrameRule, USER_TOP};
use crate::{
    runtime::read_proc,
    untrusted::{self, FileId},
};

/// Reads of /proc/PID/maps per record (its process, and one ancestor).
pub const MAPS_READS_PER_RECORD: u32 = 2;
/// The most bytes of /proc/PID/maps read.
pub const MAPS_MAX_BYTES: usize = 1 << 20;
/// Executable file mappings kept per process.
pub const MAX_MAPPINGS_PER_PID: usize = 1024;
/// Bytes of mappings kept in all (oldest processes' dropped first).
pub const MAPS_BUDGET: u64 = 8 << 20;
/// Module files kept open.
pub const MAX_OPEN_MODULES: usize = 64;
/// Bytes of symbols kept in all.
pub const SYMBOLS_BUDGET: u64 = 32 << 20;
/// Processes whose executable and text range are kept.
const MAX_PIDS: usize = 1 << 16;
/// Unwind rules (from modules' unwind tables) kept, by module and offset.
const MAX_RULES: usize = 1 << 16;
/// Answers of the stack scan's call check kept.
const MAX_FOLLOWS: usize = 1 << 16;
/// Bytes of modules' unwind tables kept (emptied when a module would go over).
const TABLES_BUDGET: u64 = 32 << 20;
/// After this much of a record's CPU time, no second module is read for it (its frames keep
/// their module and offset, unnamed; a later record reads the module): what bounds a
/// record's CPU (50 ms) when a process maps many modules with large symbol tables.
pub const LOAD_TIME_PER_RECORD: Duration = Duration::from_millis(30);

/// One user stack frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// The ELF symbol containing `addr` with the offset into it (`open_hostname+0x1c`).
    pub symbol: Option<String>,
    /// Source file and line of the call (DWARF), when the module has them.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The mapped file `addr` is in, and the offset into that file.
    pub module: Option<String>,
    pub offset: Option<u64>,
    /// The module's GNU build id (hex), to find its debug file elsewhere.
    pub build_id: Option<String>,
    /// `eh_frame`: the return address the frame-pointer walk skips (a libc wrapper keeps no
    /// frame pointer), read from the stack where the module's unwind table says it is.
    /// Absent: the frame-pointer walk's (the first frame: the instruction pointer).
    pub found_by: Option<&'static str>,
    /// The module's identity (device and inode, as maps gave them): what names it.
    pub module_id: Option<crate::untrusted::FileId>,
}

/// A process's executable mappings, what they cost and when they were read.
struct Maps {
    list: Vec<Mapping>,
    cost: u64,
    tick: u64,
}

/// Which files may not answer: remote file systems' devices, by mount namespace.
#[derive(Default)]
struct Remote {
    by_ns: HashMap<u64, Vec<(u32, u32)>>,
    /// fdaudit's own mountinfo, for paths (read once).
    own: Option<String>,
}

impl Remote {
    /// Whether a path lies on one, in fdaudit's own view.
    fn path_on_remote(&mut self, path: &[u8]) -> bool {
        let own = self.own.get_or_insert_with(|| {
            let text = read_proc(std::process::id(), "mountinfo").unwrap_or_default();
            String::from_utf8_lossy(&text).into_owned()
        });
        crate::runtime::on_remote(path, own)
    }

    /// Whether `id` (of `pid`'s mapping; fdaudit's own view without a pid) is on one.
    fn has(&mut self, pid: Option<u32>, id: FileId) -> bool {
        let me = std::process::id();
        let who = pid.unwrap_or(me);
        let ns = std::fs::metadata(format!("/proc/{who}/ns/mnt")).map_or(0, |m| {
            use std::os::unix::fs::MetadataExt as _;
            m.ino()
        });
        if self.by_ns.len() > 256 {
            self.by_ns.clear();
        }
        let devs = self.by_ns.entry(ns).or_insert_with(|| {
            // Bounded reads (a namespace can hold thousands of mounts).
            let text = read_proc(who, "mountinfo")
                .or_else(|| read_proc(me, "mountinfo"))
                .unwrap_or_default();
            crate::runtime::image::remote_devs(&String::from_utf8_lossy(&text))
        });
        devs.contains(&id.major_minor())
    }
}

/// The symbolizer's state for a session, every part of it bounded.
#[derive(Default)]
pub(super) struct Symbolizer {
    maps: HashMap<u32, Maps>,
    maps_cost: u64,
    /// Open module files: (file, its size, last use).
    files: HashMap<FileId, (Arc<File>, u64, u64)>,
    /// Symbols by module (None: unreadable), with their last use.
    symbols: HashMap<FileId, (Option<Arc<Symbols>>, u64)>,
    symbols_cost: u64,
    /// Whether a call instruction ends before (module, file offset): the stack scan asks
    /// for the same return addresses again and again.
    follows_call: HashMap<(FileId, u64), bool>,
    /// The unwind rule at (module, file offset): a call site asks again and again.
    frame_rules: HashMap<(FileId, u64), Option<FrameRule>>,
    /// Modules' unwind tables (None: the module has none), within [`TABLES_BUDGET`].
    tables: HashMap<FileId, Option<Arc<unwind::Tables>>>,
    tables_cost: u64,
    /// Each process's executable (from its spawn) and text (from its origin records): its
    /// own frames are found there once /proc/PID/maps is gone.
    exe: HashMap<u32, (Arc<str>, Option<FileId>)>,
    code: HashMap<u32, (u64, u64)>,
    /// (p_vaddr, p_offset) of an executable's first executable segment, by its identity.
    text_segment: HashMap<FileId, Option<(u64, u64)>>,
    remote: Remote,
    tick: u64,
    /// Reads of maps left for the record being decoded, and the pids read for it.
    reads_left: u32,
    read_now: Vec<u32>,
    /// The decoding thread's CPU time when the record being decoded began, and the modules
    /// read for it.
    record_start: Option<Duration>,
    loads_now: u32,
}

/// The calling thread's CPU time (what a record costs, whatever else runs on the CPUs).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Inserts into a map kept under `max` entries (emptied when full: the entries are hints).
fn insert_bounded<K: std::hash::Hash + Eq, V>(m: &mut HashMap<K, V>, max: usize, k: K, v: V) {
    if m.len() >= max && !m.contains_key(&k) {
        m.clear();
    }
    m.insert(k, v);
}

impl Symbolizer {
    /// The frames of `rec`, each resolved to its module and file offset now (the module's
    /// file opened while the process lives).
    pub fn frames(&mut self, rec: &OriginRecord, parent: &Processes) -> Vec<Frame> {
        self.begin_record();
        if rec.start_code < rec.end_code {
            let range = (rec.start_code, rec.end_code);
            insert_bounded(&mut self.code, MAX_PIDS, rec.pid, range);
        }
        let n = (rec.nstack as usize).min(rec.stack.len());
        // A walk through a frame without a frame pointer ends in garbage: stop at the
        // first word that is no user address.
        let walk: Vec<u64> = rec.stack[..n]
            .iter()
            .copied()
            .take_while(|&a| a != 0 && a < USER_TOP)
            .collect();
        let words = &rec.sp_words[..(rec.nsp_words as usize).min(rec.sp_words.len())];
        let Some(&ip) = walk.first() else {
            return Vec::new();
        };
        // The innermost frame first: resolving it reads the process's maps.
        let innermost = self.frame(rec.pid, ip, None, parent);
        let rest = self.callers(rec, &walk, words, parent);
        let mut out = vec![innermost];
        for (a, how) in rest {
            out.push(self.frame(rec.pid, a, how, parent));
        }
        out
    }

    /// The frames above the innermost one (`walk[0]`), each with how it was found, before
    /// any is resolved: only those shown are.
    fn callers(
        &mut self,
        rec: &OriginRecord,
        walk: &[u64],
        words: &[u64],
        parent: &Processes,
    ) -> Vec<(u64, Option<&'static str>)> {
        let ip = walk[0];
        let kernel = |frames: &[u64]| frames.iter().map(|&a| (a, None)).collect::<Vec<_>>();
        if self.mapping_in_tree(rec.pid, ip, false, parent).is_none() {
            // The process was gone before its maps were read: no module, no unwind table
            // for the innermost frame. The caller is then guessed from the stack words,
            // and says so.
            let mut rest = kernel(&walk[1..]);
            if let Some(found) = self.scan_return_address(rec.pid, words, parent) {
                if walk.get(1) != Some(&found) {
                    rest.insert(0, (found, Some("stack-scan")));
                }
            }
            return rest;
        }
        let callers = unwind(ip, rec.sp, words, |at| self.frame_rule(rec.pid, at, parent));
        let Some(&first) = callers.first() else {
            return kernel(&walk[1..]);
        };
        if walk.len() > 1 && callers.len() == 1 {
            // The copy ended after one caller, and the kernel's walk went on from the frame
            // pointer at the call: its frames hold only while each function on the way
            // keeps a frame pointer (rbp is a plain register elsewhere).
            let kept = kernel_frames_kept(walk, first, |at| self.frame_rule(rec.pid, at, parent));
            let mut rest = vec![(first, Some("eh_frame"))];
            rest.extend(kernel(&kept));
            return rest;
        }
        // The unwind table's walk, as far as the copied words reach, in place of the
        // kernel's (which a frame without a frame pointer derails).
        callers
            .iter()
            .take(ORIGIN_STACK_DEPTH)
            .map(|&ret| (ret, Some("eh_frame")))
            .collect()
    }

    /// A record begins: its maps reads and module loads are counted from now.
    pub fn begin_record(&mut self) {
        self.tick += 1;
        self.reads_left = MAPS_READS_PER_RECORD;
        self.read_now.clear();
        self.record_start = Some(thread_cpu());
        self.loads_now = 0;
    }

    /// Forgets what is kept of `pid` (the session's process table forgot it).
    pub fn forget(&mut self, pid: u32) {
        if let Some(old) = self.maps.remove(&pid) {
            self.maps_cost -= old.cost;
        }
        self.exe.remove(&pid);
        self.code.remove(&pid);
    }

    /// Learns that `pid` runs `path` (from its spawn record), if absolute.
    pub fn note_exec(&mut self, pid: u32, path: &[u8]) {
        if path.first() == Some(&b'/') {
            let path: Arc<str> = String::from_utf8_lossy(path).into();
            insert_bounded(&mut self.exe, MAX_PIDS, pid, (path, None));
        }
    }

    fn frame(
        &mut self,
        pid: u32,
        addr: u64,
        found_by: Option<&'static str>,
        parent: &Processes,
    ) -> Frame {
        let m = self.mapping_in_tree(pid, addr, true, parent);
        let id = m.as_ref().and_then(|(m, live)| {
            // Opened now, while the process may live: naming it later needs no process.
            self.module_file(m, *live)?;
            m.id
        });
        Frame {
            addr,
            symbol: None,
            file: None,
            line: None,
            module: m.as_ref().map(|(m, _)| m.path.to_string()),
            offset: m.as_ref().map(|(m, _)| addr - m.start + m.offset),
            build_id: None,
            found_by,
            module_id: id,
        }
    }

    /// The first word that is a return address: in an executable mapping, just after a
    /// call instruction (read from the mapped file, so it works once the process is gone).
    fn scan_return_address(&mut self, pid: u32, words: &[u64], parent: &Processes) -> Option<u64> {
        words.iter().copied().find(|&w| {
            let Some((m, live)) = self.mapping_in_tree(pid, w, false, parent) else {
                return false;
            };
            let Some(id) = m.id else {
                return false;
            };
            let off = w - m.start + m.offset;
            if let Some(&known) = self.follows_call.get(&(id, off)) {
                return known;
            }
            let yes = self
                .module_file(&m, live)
                .is_some_and(|(f, _, _)| symbols::follows_call(&f, off));
            insert_bounded(&mut self.follows_call, MAX_FOLLOWS, (id, off), yes);
            yes
        })
    }

    /// The unwind rule of the frame executing at `ip` (the innermost frame, or a caller's
    /// call instruction), from its module's unwind table, cached by module and offset. The
    /// addresses are real frames' (unlike the stack scan's words): the maps may be read
    /// again for one.
    fn frame_rule(&mut self, pid: u32, ip: u64, parent: &Processes) -> Option<FrameRule> {
        let (m, live) = self.mapping_in_tree(pid, ip, true, parent)?;
        let id = m.id?;
        let off = ip - m.start + m.offset;
        if let Some(&known) = self.frame_rules.get(&(id, off)) {
            return known;
        }
        if !self.tables.contains_key(&id) {
            let tables = self
                .module_file(&m, live)
                .and_then(|(f, len, _)| unwind::Tables::load(&f, len));
            let cost = tables.as_ref().map_or(64, unwind::Tables::cost);
            if self.tables_cost + cost > TABLES_BUDGET {
                self.tables.clear();
                self.tables_cost = 0;
            }
            self.tables_cost += cost;
            self.tables.insert(id, tables.map(Arc::new));
        }
        let rule = self.tables.get(&id)?.as_ref().and_then(|t| t.rule(off));
        insert_bounded(&mut self.frame_rules, MAX_RULES, (id, off), rule);
        rule
    }

    /// The mapping of `addr` in `pid`, else in its parent's (a forked child that exec'd
    /// before its record was read had its parent's layout when it made the call), with the
    /// pid whose maps had it.
    fn mapping_in_tree(
        &mut self,
        pid: u32,
        addr: u64,
        refresh: bool,
        parent: &Processes,
    ) -> Option<(Mapping, Option<u32>)> {
        let mut p = pid;
        for _ in 0..4 {
            if let Some(m) = self.mapping(p, addr, refresh) {
                return Some((m, Some(p)));
            }
            match parent.parent(p) {
                Some(pp) if pp != p => p = pp,
                _ => break,
            }
        }
        self.exe_mapping(pid, addr).map(|m| (m, None))
    }

    /// `addr` in `pid`'s executable, from its text range (mm->start_code..end_code) and the
    /// executable's first executable segment (binfmt_elf sets start_code to its address):
    /// for a process gone before its maps were read. The executable is then only known
    /// by its exec path: the file there now, if regular and not a symlink.
    fn exe_mapping(&mut self, pid: u32, addr: u64) -> Option<Mapping> {
        let &(start, end) = self.code.get(&pid)?;
        if !(start..end).contains(&addr) {
            return None;
        }
        let (path, id) = self.exe.get(&pid)?.clone();
        let mut m = Mapping {
            start,
            end,
            offset: 0,
            path,
            id,
        };
        let (file, len, id) = self.module_file(&m, None)?;
        if let Some(e) = self.exe.get_mut(&pid) {
            e.1 = Some(id); // the same file from now on
        }
        m.id = Some(id);
        let seg = *self
            .text_segment
            .entry(id)
            .or_insert_with(|| symbols::text_segment(&file, len));
        m.offset = seg?.1;
        Some(m)
    }

    /// The mapping of `addr` in `pid`; `refresh`: read /proc/PID/maps again when the cached
    /// copy lacks it (not for the stack scan's words, most of which are data), at most once
    /// per record and process.
    fn mapping(&mut self, pid: u32, addr: u64, refresh: bool) -> Option<Mapping> {
        let find = |maps: &[Mapping]| {
            maps.iter()
                .find(|m| m.start <= addr && addr < m.end)
                .cloned()
        };
        if let Some(m) = self.maps.get(&pid).and_then(|maps| find(&maps.list)) {
            return Some(m);
        }
        let known = self.maps.contains_key(&pid);
        if !(8..USER_TOP).contains(&addr)
            || (!refresh && known)
            || self.read_now.contains(&pid)
            || self.reads_left == 0
        {
            return None;
        }
        self.reads_left -= 1;
        self.read_now.push(pid);
        // Read again (a library loaded since); a process gone keeps what was read.
        let fresh = read_exec_maps(pid, MAPS_MAX_BYTES, MAX_MAPPINGS_PER_PID);
        let hit = find(&fresh);
        if !fresh.is_empty() {
            self.keep_maps(pid, fresh);
        }
        hit
    }

    /// Keeps `pid`'s mappings, dropping the least recently read processes' over
    /// [`MAPS_BUDGET`].
    fn keep_maps(&mut self, pid: u32, list: Vec<Mapping>) {
        let cost = list.iter().map(Mapping::cost).sum();
        if let Some(old) = self.maps.remove(&pid) {
            self.maps_cost -= old.cost;
        }
        while self.maps_cost + cost > MAPS_BUDGET {
            let Some(oldest) = self
                .maps
                .iter()
                .min_by_key(|(_, m)| m.tick)
                .map(|(&p, _)| p)
            else {
                break;
            };
            if let Some(m) = self.maps.remove(&oldest) {
                self.maps_cost -= m.cost;
            }
        }
        self.maps_cost += cost;
        let tick = self.tick;
        self.maps.insert(pid, Maps { list, cost, tick });
    }

    /// The open file of a mapping's module, its size and identity: kept from an earlier
    /// record, or opened now through the process's map_files while `live` (its pid) runs,
    /// else by its path if that is still the same file (an executable known only by its
    /// exec path: the file there, if on a local file system).
    fn module_file(&mut self, m: &Mapping, live: Option<u32>) -> Option<(Arc<File>, u64, FileId)> {
        let tick = self.tick;
        if let Some(id) = m.id {
            if let Some(e) = self.files.get_mut(&id) {
                e.2 = tick;
                return Some((Arc::clone(&e.0), e.1, id));
            }
            if self.remote.has(live, id) {
                return None;
            }
        } else if self.remote.path_on_remote(m.path.as_bytes()) {
            return None;
        }
        let by_link = live.and_then(|p| untrusted::open_mapped(p, m.start, m.end, MAX_MODULE).ok());
        let opened = match by_link {
            Some(o) => o,
            None => untrusted::open_path(m.path.as_bytes(), MAX_MODULE, m.id).ok()?,
        };
        let id = m.id.unwrap_or(opened.id);
        if self.files.len() >= MAX_OPEN_MODULES {
            let oldest = self.files.iter().min_by_key(|(_, e)| e.2).map(|(&k, _)| k);
            oldest.map(|k| self.files.remove(&k));
        }
        let file = Arc::new(opened.file);
        self.files.insert(id, (Arc::clone(&file), opened.len, tick));
        Some((file, opened.len, id))
    }

    /// Names each frame from its module's symbols (read once, kept within
    /// [`SYMBOLS_BUDGET`]).
    pub fn name_frames(&mut self, stack: &mut [Frame]) {
        for f in stack.iter_mut() {
            let (Some(id), Some(module), Some(offset)) = (f.module_id, &f.module, f.offset) else {
                continue;
            };
            let Some(s) = self.symbols_of(id, module) else {
                continue;
            };
            f.symbol = s.name(offset);
            f.build_id.clone_from(&s.build_id);
            if let Some((file, line)) = s.line(offset) {
                (f.file, f.line) = (Some(file), line);
            }
        }
    }

    fn symbols_of(&mut self, id: FileId, path: &str) -> Option<Arc<Symbols>> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.symbols.get_mut(&id) {
            e.1 = tick;
            return e.0.clone();
        }
        let spent = self.record_start.map(|t| thread_cpu().saturating_sub(t));
        if self.loads_now > 0 && spent.is_some_and(|d| d > LOAD_TIME_PER_RECORD) {
            return None;
        }
        self.loads_now += 1;
        let m = Mapping {
            start: 0,
            end: 0,
            offset: 0,
            path: path.into(),
            id: Some(id),
        };
        let loaded = self
            .module_file(&m, None)
            .and_then(|(f, len, _)| Symbols::load(&f, len))
            .map(Arc::new);
        let cost = loaded.as_ref().map_or(64, |s| s.cost);
        while self.symbols_cost + cost > SYMBOLS_BUDGET {
            let Some(oldest) = self
                .symbols
                .iter()
                .min_by_key(|(_, e)| e.1)
                .map(|(&k, _)| k)
            else {
                break;
            };
            if let Some((s, _)) = self.symbols.remove(&oldest) {
                self.symbols_cost -= s.map_or(64, |s| s.cost);
            }
        }
        self.symbols_cost += cost;
        self.symbols.insert(id, (loaded.clone(), tick));
        loaded
    }

    /// Bytes of symbolization state kept now (mappings and symbols).
    #[cfg(test)]
    pub fn kept(&self) -> u64 {
        self.maps_cost + self.symbols_cost
    }
}

/// The largest module file opened: none, as only its headers, symbols and debug sections
/// are read, within their budgets (a large sparse file costs no more than a small one).
const MAX_MODULE: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::proc_maps::parse_maps_line;

    #[test]
    fn a_gone_process_s_own_frames_are_found_from_its_text_range_and_executable() {
        use std::os::unix::ffi::OsStrExt as _;
        let exe = std::env::current_exe().expect("the test binary");
        let o = untrusted::open_exe(std::process::id(), u64::MAX).expect("our exe");
        let (vaddr, off) = symbols::text_segment(&o.file, o.len).expect("a segment");
        let pid = 1 << 30; // no such process: no /proc/PID/maps
        let mut s = Symbolizer::default();
        s.note_exec(pid, exe.as_os_str().as_bytes());
        let start = 0x5555_0000_0000 + vaddr;
        s.code.insert(pid, (start, start + 0x1000));
        let none = Processes::default();
        let (m, live) = s
            .mapping_in_tree(pid, start + 0x10, true, &none)
            .expect("found in the executable");
        assert_eq!(
            (&*m.path, m.offset, m.start, live),
            (exe.to_str().unwrap(), off, start, None)
        );
        assert!(s
            .mapping_in_tree(pid, start + 0x1000, true, &none)
            .is_none());
    }

    #[test]
    fn a_module_s_path_is_opened_only_if_it_is_still_the_file_maps_named() {
        let d = std::env::temp_dir().join(format!("fdaudit-symbolize-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let (lib, other) = (d.join("lib.so"), d.join("other"));
        std::fs::copy(std::env::current_exe().unwrap(), &lib).unwrap();
        std::fs::write(&other, b"x").unwrap();
        let id_of = |p: &std::path::Path| {
            use std::os::unix::fs::MetadataExt as _;
            let m = std::fs::metadata(p).unwrap();
            FileId {
                dev: m.dev(),
                ino: m.ino(),
            }
        };
        let mapping = |path: &std::path::Path, id| Mapping {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            path: path.to_str().unwrap().into(),
            id: Some(id),
        };
        let mut s = Symbolizer::default();
        let lib_id = id_of(&lib);
        assert!(s.module_file(&mapping(&lib, lib_id), None).is_some());
        // Replaced since maps named it: another inode at the path.
        let other_id = id_of(&other);
        std::fs::rename(&other, d.join("lib2.so")).unwrap();
        let (lib2, fifo) = (d.join("lib2.so"), d.join("fifo"));
        // (Known by its identity, the file opened above is still the module.)
        assert!(s.module_file(&mapping(&lib2, lib_id), None).is_some());
        let mut s = Symbolizer::default();
        assert!(s.module_file(&mapping(&lib2, lib_id), None).is_none());
        // A FIFO or a symlink where the module was: refused at once, never opened.
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(s.module_file(&mapping(&fifo, other_id), None).is_none());
        let link = d.join("link");
        std::os::unix::fs::symlink(&lib2, &link).unwrap();
        assert!(s.module_file(&mapping(&link, other_id), None).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn maps_lines_give_executable_file_mappings_only() {
        let mut paths = HashMap::new();
        let m = parse_maps_line(
            "7f00a000-7f00b000 r-xp 00002000 08:01 1234                       /usr/lib/libc.so.6",
            &mut paths,
        )
        .expect("an executable file mapping");
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f00_a000, 0x7f00_b000, 0x2000)
        );
        assert_eq!(&*m.path, "/usr/lib/libc.so.6");
        assert_eq!(m.id, FileId::from_maps(b"08:01", b"1234"));
        let line = "7f00a000-7f00b000 rw-p 00000000 00:00 0   [heap]";
        assert!(parse_maps_line(line, &mut paths).is_none());
        let line = "7f00a000-7f00b000 r--p 00000000 08:01 1 /usr/lib/x.so";
        assert!(parse_maps_line(line, &mut paths).is_none());
    }

    #[test]
    fn maps_are_read_at_most_twice_per_record_and_kept_within_budget() {
        let mut s = Symbolizer {
            reads_left: MAPS_READS_PER_RECORD,
            ..Default::default()
        };
        let me = std::process::id();
        // Addresses in no mapping: one read of our maps, then none again for this record.
        assert!(s.mapping(me, 0x10, true).is_none());
        assert_eq!(s.read_now, vec![me]);
        assert!(s.mapping(me, 0x20, true).is_none());
        assert_eq!(s.reads_left, MAPS_READS_PER_RECORD - 1);
        let many: Vec<Mapping> = (0..MAX_MAPPINGS_PER_PID as u64)
            .map(|i| Mapping {
                start: i << 12,
                end: (i + 1) << 12,
                offset: 0,
                path: "x".repeat(4000).into(),
                id: None,
            })
            .collect();
        for pid in 0..4 {
            s.keep_maps(pid, many.clone());
        }
        assert!(s.kept() <= MAPS_BUDGET, "{}", s.kept());
        assert!(s.maps.len() < 4, "the oldest processes' maps were dropped");
    }
}
