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

use super::buildid::BuildIds;
use super::jit::JitProcs;
use super::proc_maps::{read_exec_maps, Mapping};
use super::process::Processes;
use super::symbols::{self, Symbols};
use super::unwind::{self, kernel_frames_kept, unwind_reading, FrameRule, USER_TOP};
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
/// Bytes of modules' unwind tables kept (emptied when a module would go over).
const TABLES_BUDGET: u64 = 32 << 20;
/// After this much of a record's CPU time, no second module is read for it (its frames keep
/// their module and offset, unnamed; a later record reads the module): what bounds a
/// record's CPU (50 ms) when a process maps many modules with large symbol tables.
pub const LOAD_TIME_PER_RECORD: Duration = Duration::from_millis(30);

pub use super::stack::{partial, FoundBy, Frame, Stack};

/// A process's executable mappings, what they cost, when they were read, and the text
/// range of the image they are of (None: not known).
struct Maps {
    list: Vec<Mapping>,
    cost: u64,
    tick: u64,
    image: Option<Image>,
}

/// An image a process ran: its executable's text range, mm->start_code..end_code (the
/// origin record's, /proc/PID/stat's).
type Image = (u64, u64);

/// Whether mappings of image `of` may resolve a record made in image `want` (either not
/// known: they may).
fn same_image(want: Option<Image>, of: Option<Image>) -> bool {
    want.zip(of).is_none_or(|(a, b)| a == b)
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
    /// Modules by build id: a gone process's frames the kernel named so.
    build_ids: BuildIds,
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
    /// The image the record being decoded was made in: a process's maps resolve it only
    /// while the process runs that image (not after an exec the reader had not yet seen).
    image_now: Option<Image>,
    /// A maps read for the record being decoded found another image there.
    image_gone: bool,
    read_now: Vec<u32>,
    /// The decoding thread's CPU time when the record being decoded began, and the modules
    /// read for it.
    record_start: Option<Duration>,
    loads_now: u32,
    /// Each process's anonymous executable ranges (JIT code), and the perf maps naming them.
    anon_exec: HashMap<u32, Vec<(u64, u64)>>,
    jit: JitProcs,
    /// The copied stack words the last [`Symbolizer::stack`] read (bit i: word i).
    words_read: u64,
    /// Call sites' stacks unwound over a copy of their top ([`sites`]).
    sites: sites::Sites,
}

mod bounds;
mod jit_frames;
mod learned;
mod naming;
pub use naming::LEFT_FOR_LATER;
mod sites;

use bounds::{insert_bounded, thread_cpu};

impl Symbolizer {
    /// The frames of `rec`, each resolved to its module and file offset now (the module's
    /// file opened while the process lives); never None (a frame without module is shown
    /// alone, the stack said partial).
    pub fn frames(&mut self, rec: &OriginRecord, parent: &Processes) -> Vec<Frame> {
        let Some(Stack {
            mut frames,
            partial,
        }) = self.stack(rec, parent, true)
        else {
            return Vec::new();
        };
        // Said on the frame itself, where only frames are shown (`unclosed`).
        if let (Some(first), Some(why @ partial::IMAGE_GONE)) = (frames.first_mut(), partial) {
            first.unnamed.get_or_insert_with(|| why.to_string());
        }
        frames
    }

    /// [`Symbolizer::frames`] with why the stack is partial; None when the innermost frame
    /// has no module yet and `last` is false (its modules record may still come:
    /// [`Symbolizer::learn_modules`]).
    pub fn stack(&mut self, rec: &OriginRecord, parent: &Processes, last: bool) -> Option<Stack> {
        self.begin_record();
        self.note_code(rec);
        self.image_now = (rec.start_code < rec.end_code).then_some((rec.start_code, rec.end_code));
        self.words_read = 0;
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
            return Some(Stack {
                frames: Vec::new(),
                partial: Some(partial::NO_STACK),
            });
        };
        // The innermost frame first: resolving it reads the process's maps.
        let innermost = self.frame(rec.pid, ip, None, parent);
        if innermost.module.is_none() {
            // No module, no unwind table: no caller is known. Nothing is guessed.
            let why = if self.image_gone {
                partial::IMAGE_GONE
            } else {
                partial::NO_MODULE
            };
            return last.then(|| Stack {
                frames: vec![innermost],
                partial: Some(why),
            });
        }
        let (mut rest, mut partial) = self.callers(rec, &walk, words, parent);
        // The site's stack unwound over its copy, where it goes further and agrees with
        // what this record's own words gave: two call sites can share a frame-pointer walk
        // and an sp (two calls in one function, through a libc wrapper without a frame
        // pointer), and then only the return addresses in the words tell them apart.
        if let Some((more, why)) = self.site_callers(rec.pid, &walk, rec.sp) {
            let further = more.len() > rest.len() || (more.len() == rest.len() && why.is_none());
            let agrees = rest.iter().zip(&more).all(|(a, b)| a.0 == b.0);
            if further && agrees {
                (rest, partial) = (more, why);
            }
        }
        let mut frames = vec![innermost];
        for (a, how) in rest {
            frames.push(self.frame(rec.pid, a, Some(how), parent));
        }
        Some(Stack { frames, partial })
    }

    /// The frames above the innermost one (`walk[0]`), each with how it was found, before
    /// any is resolved (only those shown are), and why they stop short, if they do.
    fn callers(
        &mut self,
        rec: &OriginRecord,
        walk: &[u64],
        words: &[u64],
        parent: &Processes,
    ) -> (Vec<(u64, FoundBy)>, Option<&'static str>) {
        let ip = walk[0];
        let kernel = |frames: &[u64]| {
            let fp = frames
                .iter()
                .map(|&a| (a, FoundBy::FramePointers))
                .collect::<Vec<_>>();
            // The walk ends with rbp 0 (the outermost frame clears it) unless it was cut.
            let cut = walk.len() >= ORIGIN_STACK_DEPTH;
            (fp, cut.then_some(partial::FP_ENDS))
        };
        let mut read = 0;
        let (callers, whole) = unwind_reading(
            ip,
            rec.sp,
            words,
            |at| self.frame_rule(rec.pid, at, parent),
            &mut read,
        );
        self.words_read = read;
        let Some(&first) = callers.first() else {
            if whole {
                return (Vec::new(), None);
            }
            // The innermost frame's module has no unwind rule for it: the kernel's walk,
            // which says how it was found.
            return kernel(&walk[1..]);
        };
        if walk.len() > 1 && callers.len() == 1 && !whole {
            // The copy ended after one caller, and the kernel's walk went on from the frame
            // pointer at the call: its frames hold only while each function on the way
            // keeps a frame pointer (rbp is a plain register elsewhere).
            let kept = kernel_frames_kept(walk, first, |at| self.frame_rule(rec.pid, at, parent));
            // (kernel_frames_kept's frames: those after `first`, or after the innermost)
            let after = if walk[1] == first { 2 } else { 1 };
            let all_kept = kept.len() == walk.len().saturating_sub(after);
            let (fp, cut) = kernel(&kept);
            let mut rest = vec![(first, FoundBy::EhFrame)];
            rest.extend(fp);
            let mut partial = if all_kept && !kept.is_empty() {
                cut
            } else {
                Some(partial::UNWIND_ENDS)
            };
            if let Some(p) = self.through_jit(rec.pid, walk, &mut rest, parent) {
                partial = p;
            }
            return (rest, partial);
        }
        // The unwind table's walk, as far as the copied words reach, in place of the
        // kernel's (which a frame without a frame pointer derails).
        let mut frames = callers
            .iter()
            .take(ORIGIN_STACK_DEPTH)
            .map(|&ret| (ret, FoundBy::EhFrame))
            .collect();
        let mut partial = (!whole).then_some(partial::UNWIND_ENDS);
        if let Some(p) = self.through_jit(rec.pid, walk, &mut frames, parent) {
            partial = p;
        }
        (frames, partial)
    }

    /// A record begins: its maps reads and module loads are counted from now.
    pub fn begin_record(&mut self) {
        self.tick += 1;
        self.reads_left = MAPS_READS_PER_RECORD;
        self.read_now.clear();
        self.image_now = None;
        self.image_gone = false;
        self.record_start = Some(thread_cpu());
        self.loads_now = 0;
    }

    /// Forgets what is kept of `pid` (the session's process table forgot it).
    pub fn forget(&mut self, pid: u32) {
        self.forget_image(pid);
        self.exe.remove(&pid);
        self.code.remove(&pid);
    }

    /// Forgets `pid`'s mappings and call sites: its image's.
    fn forget_image(&mut self, pid: u32) {
        if let Some(old) = self.maps.remove(&pid) {
            self.maps_cost -= old.cost;
        }
        self.anon_exec.remove(&pid);
        self.sites.forget(pid);
    }

    /// Learns that `pid` runs `path` (from its spawn record), if absolute; the old image's
    /// mappings go (they would name the new image's frames, and keep out its modules).
    pub fn note_exec(&mut self, pid: u32, path: &[u8]) {
        self.forget_image(pid);
        if path.first() == Some(&b'/') {
            let path: Arc<str> = String::from_utf8_lossy(path).into();
            self.build_ids.offer(&path, None);
            insert_bounded(&mut self.exe, MAX_PIDS, pid, (path, None));
        }
    }

    fn frame(
        &mut self,
        pid: u32,
        addr: u64,
        found_by: Option<FoundBy>,
        parent: &Processes,
    ) -> Frame {
        let m = self.mapping_in_tree(pid, addr, true, parent);
        let id = m.as_ref().and_then(|(m, live)| {
            // Opened now, while the process may live: naming it later needs no process.
            self.module_file(m, *live)?;
            m.id
        });
        let jit_pid = match m {
            Some(_) => None,
            None => self.jit_code_pid(pid, addr, parent),
        };
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
            jit_pid,
            code: None,
            unnamed: None,
        }
    }

    /// The unwind rule of the frame executing at `ip` (the innermost frame, or a caller's
    /// call instruction), from its module's unwind table, cached by module and offset (the
    /// maps may be read again for one).
    pub(super) fn frame_rule(&mut self, pid: u32, ip: u64, tree: &Processes) -> Option<FrameRule> {
        let (m, live) = self.mapping_in_tree(pid, ip, true, tree)?;
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
    /// copy lacks it, at most once per record and process.
    fn mapping(&mut self, pid: u32, addr: u64, refresh: bool) -> Option<Mapping> {
        let find = |maps: &[Mapping]| {
            maps.iter()
                .find(|m| m.start <= addr && addr < m.end)
                .cloned()
        };
        let want = self.image_now;
        let kept = self.maps.get(&pid).filter(|m| same_image(want, m.image));
        if let Some(m) = kept.and_then(|maps| find(&maps.list)) {
            return Some(m);
        }
        let known = kept.is_some();
        if !(8..USER_TOP).contains(&addr)
            || (!refresh && known)
            || self.read_now.contains(&pid)
            || self.reads_left == 0
        {
            return None;
        }
        self.reads_left -= 1;
        self.read_now.push(pid);
        // Read again (a library loaded since); a process gone keeps what was read, and so
        // does one exiting (its maps read while they were torn down may lack any module).
        let (fresh, anon) = read_exec_maps(pid, MAPS_MAX_BYTES, MAX_MAPPINGS_PER_PID);
        // They are the record's only if the process runs the record's image after the read:
        // one that exec'd since the call (its exec record not yet read), or another process
        // under the pid, would name the record's addresses in another image's modules.
        let image = crate::procfs_util::code_range(pid);
        if want.is_some() && image != want {
            self.image_gone = true;
            return None;
        }
        let hit = find(&fresh);
        if known && crate::procfs_util::exiting(pid) {
            return hit;
        }
        if !anon.is_empty() {
            insert_bounded(&mut self.anon_exec, MAX_PIDS, pid, anon);
        }
        if !fresh.is_empty() {
            self.keep_maps(pid, fresh, image);
        }
        hit
    }

    /// Keeps `pid`'s mappings; over [`MAPS_BUDGET`], the least recently read processes' go.
    fn keep_maps(&mut self, pid: u32, list: Vec<Mapping>, image: Option<Image>) {
        // Each module a traced process maps may be another's by build id, once that one
        // is gone.
        for m in &list {
            self.build_ids.offer(&m.path, m.id);
        }
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
        let maps = Maps {
            list,
            cost,
            tick,
            image,
        };
        self.maps.insert(pid, maps);
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
        let range = (m.start, m.end);
        let by_link = live.and_then(|p| untrusted::open_mapped(p, range, MAX_MODULE, m.id).ok());
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
    fn an_exec_drops_the_old_image_s_mappings() {
        let pid = 1 << 30; // no such process: maps cannot be read again
        let mut s = Symbolizer::default();
        let m = Mapping {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0010_0000,
            offset: 0,
            path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            id: None,
        };
        s.keep_maps(pid, vec![m], None);
        assert!(s.mapping(pid, 0x7f00_0000_1000, false).is_some());
        s.note_exec(pid, b"/usr/bin/python3.11");
        assert!(
            s.mapping(pid, 0x7f00_0000_1000, false).is_none(),
            "the new image's frame named in the old image's libc"
        );
        assert_eq!(s.kept(), 0);
    }

    #[test]
    fn a_record_of_another_image_neither_uses_nor_keeps_the_process_s_maps() {
        let me = std::process::id();
        let ours = crate::procfs_util::code_range(me).expect("our text range");
        let addr = libc::getppid as *const () as u64; // in our libc
        let mut s = Symbolizer::default();
        // Made before an exec the reader has not seen: the maps now are another image's.
        s.begin_record();
        s.image_now = Some((ours.0 + 0x1000, ours.1 + 0x1000));
        assert!(s.mapping(me, addr, true).is_none());
        assert_eq!(s.kept(), 0, "another image's maps were kept");
        // The image the process runs: read, kept, and not used for the other image's record.
        s.begin_record();
        s.image_now = Some(ours);
        assert!(s.mapping(me, addr, true).is_some());
        assert!(s.kept() > 0);
        s.begin_record();
        s.image_now = Some((1, 2));
        assert!(s.mapping(me, addr, false).is_none());
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
    fn a_module_left_unread_for_a_record_s_time_is_said_so_and_read_in_the_next() {
        use std::os::unix::fs::MetadataExt as _;
        let exe = std::env::current_exe().unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let id = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let frame = || Frame {
            module: Some(exe.to_str().unwrap().into()),
            offset: Some(0),
            module_id: Some(id),
            ..Frame::default()
        };
        let mut s = Symbolizer::default();
        s.begin_record();
        // A record that already read one module and spent its time.
        while thread_cpu() <= LOAD_TIME_PER_RECORD {
            std::hint::black_box(0u64);
        }
        s.record_start = Some(Duration::ZERO);
        s.loads_now = 1;
        let mut left = [frame()];
        assert!(s.name_frames(&mut left), "the module was read anyway");
        assert!(!s.symbols.contains_key(&id), "kept as unreadable");
        assert_eq!(
            left[0].unnamed.as_deref(),
            Some(LEFT_FOR_LATER),
            "and says why"
        );
        s.begin_record();
        assert!(!s.name_frames(&mut left));
        assert!(s.symbols.contains_key(&id));
        assert_eq!(left[0].unnamed, None, "named now: {:?}", left[0]);
        // A frame named before is kept as it is, its module not read again.
        let mut named = [Frame {
            symbol: Some("kept+0x1".into()),
            module_id: Some(FileId { dev: 0, ino: 1 }),
            ..frame()
        }];
        assert!(!s.name_frames(&mut named));
        assert_eq!(named[0].symbol.as_deref(), Some("kept+0x1"));
        assert!(!s.symbols.contains_key(&FileId { dev: 0, ino: 1 }));
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
        // A JIT's code: anonymous executable memory, not [vdso] nor a file.
        use crate::engine::proc_maps::parse_anon_exec;
        let jit = "7f435cec0000-7f435d130000 rwxp 00000000 00:00 0 ";
        assert_eq!(
            parse_anon_exec(jit),
            Some((0x7f43_5cec_0000, 0x7f43_5d13_0000))
        );
        assert_eq!(
            parse_anon_exec("7f00-7f01 r-xp 00000000 00:00 0    [vdso]"),
            None
        );
        assert_eq!(parse_anon_exec("7f00-7f01 rw-p 00000000 00:00 0"), None);
        assert_eq!(
            parse_anon_exec("7f00a000-7f00b000 r-xp 0 08:01 1 /usr/lib/x.so"),
            None
        );
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
            s.keep_maps(pid, many.clone(), None);
        }
        assert!(s.kept() <= MAPS_BUDGET, "{}", s.kept());
        assert!(s.maps.len() < 4, "the oldest processes' maps were dropped");
    }
}
