//! `trace --origin`: modules known by their GNU build id, so that the frames of a process
//! gone before fdaudit read its /proc/PID/maps are still resolved and unwound. With a
//! process's first origin record the kernel sends its stack's frames twice
//! ([`OriginModulesRecord`]): as addresses, and as (build id, file offset) of each frame's
//! module. [`BuildIds`] finds the file of a build id among the files fdaudit already knows
//! of (its own executable mappings, the mappings of traced processes read while they lived,
//! their exec'd images), and [`BuildIds::mappings`] turns a frame into its module's
//! executable segments at the address the process had them.
//!
//! A path comes from a traced process (hostile): it is opened by
//! [`untrusted::open_path`] (never through a symlink at its end, a regular file only, with
//! the identity maps gave when it gave one), read within [`LAYOUT_BUDGET`] bytes, and the
//! file is used only if its own build id is the one asked for. What is kept is bounded:
//! [`MAX_CANDIDATES`] paths to look at, [`MAX_KNOWN`] modules, [`MAX_LOOKS`] files opened
//! per build id asked.

use std::{
    collections::{HashSet, VecDeque},
    fs::File,
    sync::Arc,
};

use fdaudit_common::{OriginModulesRecord, BUILD_ID_VALID};

use super::proc_maps::{read_exec_maps, Mapping};
use super::unwind::USER_TOP;
use crate::untrusted::{self, Bounded, FileId};

/// A GNU build id as the kernel gives it: up to 20 bytes, zero-padded.
pub type BuildId = [u8; 20];

/// The most bytes read of a file for its headers, program headers and notes.
pub const LAYOUT_BUDGET: u64 = 1 << 20;
/// Paths waiting to be looked at.
pub const MAX_CANDIDATES: usize = 4096;
/// Modules kept by build id (and files whose build id was read).
pub const MAX_KNOWN: usize = 4096;
/// Files opened for one build id asked (the rest wait for the next).
pub const MAX_LOOKS: usize = 64;

/// A PT_LOAD segment of an ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub exec: bool,
}

/// An ELF file's build id (zero-padded as the kernel pads it) and loadable segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub build_id: Option<BuildId>,
    pub loads: Vec<Segment>,
}

/// The layout of ELF file `file` (`len` bytes when opened), within [`LAYOUT_BUDGET`]: its
/// program headers and their notes only (as the kernel reads the build id), no section or
/// symbol table.
pub fn layout(file: &File, len: u64) -> Option<Layout> {
    use object::{elf::FileHeader32, elf::FileHeader64, Endianness, FileKind};
    let data = Bounded::new(file.try_clone().ok()?, len, LAYOUT_BUDGET);
    match FileKind::parse(&data).ok()? {
        FileKind::Elf32 => layout_of::<FileHeader32<Endianness>>(&data),
        FileKind::Elf64 => layout_of::<FileHeader64<Endianness>>(&data),
        _ => None,
    }
}

fn layout_of<H>(data: &Bounded) -> Option<Layout>
where
    H: object::read::elf::FileHeader<Endian = object::Endianness>,
{
    use object::{
        elf::{NT_GNU_BUILD_ID, PF_X, PT_LOAD, PT_NOTE},
        read::elf::ProgramHeader as _,
    };
    let elf = H::parse(data).ok()?;
    let e = elf.endian().ok()?;
    let headers = elf.program_headers(e, data).ok()?;
    let loads = headers
        .iter()
        .filter(|p| p.p_type(e) == PT_LOAD)
        .take(64)
        .map(|p| Segment {
            vaddr: p.p_vaddr(e).into(),
            memsz: p.p_memsz(e).into(),
            offset: p.p_offset(e).into(),
            filesz: p.p_filesz(e).into(),
            exec: p.p_flags(e) & PF_X != 0,
        })
        .collect();
    let mut build_id = None;
    for p in headers.iter().filter(|p| p.p_type(e) == PT_NOTE).take(16) {
        let Ok(Some(mut notes)) = p.notes(e, data) else {
            continue;
        };
        while let Ok(Some(n)) = notes.next() {
            if n.name() == b"GNU" && n.n_type(e) == NT_GNU_BUILD_ID {
                // The kernel reads one of at most 20 bytes, zero-padded.
                let id = n.desc();
                let mut out = [0u8; 20];
                if !id.is_empty() && id.len() <= out.len() {
                    out[..id.len()].copy_from_slice(id);
                    build_id = Some(out);
                }
            }
        }
    }
    Some(Layout { build_id, loads })
}

/// A module found by its build id: the file (by path and identity, opened again when
/// named) and its segments.
#[derive(Debug, Clone)]
pub struct Module {
    pub path: Arc<str>,
    pub id: FileId,
    pub loads: Arc<[Segment]>,
}

/// Build ids to files, found among the files fdaudit knows of; every part bounded.
#[derive(Default)]
pub struct BuildIds {
    known: std::collections::HashMap<BuildId, Module>,
    /// Files whose build id was read, by identity.
    looked: HashSet<FileId>,
    candidates: VecDeque<(Arc<str>, Option<FileId>)>,
    offered: HashSet<(Arc<str>, Option<FileId>)>,
    /// Build ids looked for in vain since the last path offered.
    missing: HashSet<BuildId>,
    own_offered: bool,
}

impl BuildIds {
    /// A file worth looking at when a build id is asked (a traced process's mapping or
    /// exec'd image: the path it named, and the identity maps gave).
    pub fn offer(&mut self, path: &Arc<str>, id: Option<FileId>) {
        if id.is_some_and(|id| self.looked.contains(&id)) {
            return;
        }
        let key = (Arc::clone(path), id);
        if self.offered.contains(&key) {
            return;
        }
        if self.candidates.len() >= MAX_CANDIDATES {
            if let Some(old) = self.candidates.pop_front() {
                self.offered.remove(&old);
            }
        }
        self.offered.insert(key.clone());
        self.candidates.push_back(key);
        self.missing.clear();
    }

    /// The module whose build id is `bid`, if one of the files offered (or fdaudit's own
    /// mappings) has it.
    pub fn find(&mut self, bid: &BuildId) -> Option<Module> {
        if let Some(m) = self.known.get(bid) {
            return Some(m.clone());
        }
        if self.missing.contains(bid) {
            return None;
        }
        if !self.own_offered {
            // fdaudit's own libraries: most often the very libc the traced programs map.
            self.own_offered = true;
            for m in read_exec_maps(std::process::id(), 1 << 20, 1024).0 {
                self.offer(&m.path, m.id);
            }
        }
        for _ in 0..MAX_LOOKS {
            let Some((path, id)) = self.candidates.pop_front() else {
                break;
            };
            self.offered.remove(&(Arc::clone(&path), id));
            self.learn(&path, id);
            if let Some(m) = self.known.get(bid) {
                return Some(m.clone());
            }
        }
        if self.missing.len() >= MAX_KNOWN {
            self.missing.clear();
        }
        self.missing.insert(*bid);
        None
    }

    /// Reads the build id and segments of the file at `path` (still `id`, when given).
    fn learn(&mut self, path: &Arc<str>, id: Option<FileId>) {
        if id.is_some_and(|id| self.looked.contains(&id)) {
            return;
        }
        let Ok(o) = untrusted::open_path(path.as_bytes(), u64::MAX, id) else {
            return;
        };
        if self.looked.len() >= MAX_KNOWN {
            self.looked.clear();
        }
        if !self.looked.insert(o.id) {
            return;
        }
        let Some(Layout {
            build_id: Some(bid),
            loads,
        }) = layout(&o.file, o.len)
        else {
            return;
        };
        if self.known.len() >= MAX_KNOWN {
            self.known.clear();
        }
        let module = Module {
            path: Arc::clone(path),
            id: o.id,
            loads: loads.into(),
        };
        self.known.insert(bid, module);
    }

    /// The executable mappings `rec`'s frames give: for each frame whose module the kernel
    /// named and whose file is found, every executable segment of that module at the load
    /// address the frame implies (its address less its offset's address in the file).
    pub fn mappings(&mut self, rec: &OriginModulesRecord) -> Vec<Mapping> {
        let n = (rec.nips.min(rec.nmodules) as usize).min(rec.ips.len());
        let mut out: Vec<Mapping> = Vec::new();
        for (&ip, m) in rec.ips[..n].iter().zip(&rec.modules[..n]) {
            if m.status != BUILD_ID_VALID || ip == 0 || ip >= USER_TOP {
                continue;
            }
            let Some(module) = self.find(&m.build_id) else {
                continue;
            };
            for seg in segments_at(&module, ip, m.offset) {
                let fresh = !out.iter().any(|o| o.start < seg.end && seg.start < o.end);
                if fresh {
                    out.push(seg);
                }
            }
        }
        out
    }
}

/// `module`'s executable segments, loaded so that file offset `offset` is at `ip`.
fn segments_at(module: &Module, ip: u64, offset: u64) -> Vec<Mapping> {
    let holds = |s: &&Segment| {
        s.offset <= offset && offset - s.offset < s.filesz && offset - s.offset < s.memsz
    };
    let Some(seg) = module.loads.iter().find(holds) else {
        return Vec::new();
    };
    let Some(bias) = seg
        .vaddr
        .checked_add(offset - seg.offset)
        .and_then(|vaddr| ip.checked_sub(vaddr))
    else {
        return Vec::new();
    };
    module
        .loads
        .iter()
        .filter(|s| s.exec)
        .filter_map(|s| {
            let start = bias.checked_add(s.vaddr)?;
            let end = start.checked_add(s.filesz.min(s.memsz))?;
            (end <= USER_TOP && start < end).then(|| Mapping {
                start,
                end,
                offset: s.offset,
                path: Arc::clone(&module.path),
                id: Some(module.id),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdaudit_common::{OriginModule, RecordHeader, ORIGIN_STACK_DEPTH};

    /// A frame of this test binary, named as the kernel names it (build id and file
    /// offset), gives the mapping /proc/self/maps has for it.
    #[test]
    fn a_frame_s_build_id_and_offset_give_its_module_s_mapping() {
        let me = std::process::id();
        let ip = a_frame_s_build_id_and_offset_give_its_module_s_mapping as *const () as u64;
        let maps = read_exec_maps(me, 1 << 20, 1024).0;
        let real = maps
            .iter()
            .find(|m| m.start <= ip && ip < m.end)
            .expect("our text");
        let exe = untrusted::open_exe(me, u64::MAX).expect("our exe");
        let bid = layout(&exe.file, exe.len)
            .and_then(|l| l.build_id)
            .expect("rustc gives test binaries a build id");
        let mut rec = OriginModulesRecord {
            header: RecordHeader::default(),
            pid: me,
            tid: me,
            nips: 1,
            nmodules: 1,
            ips: [0; ORIGIN_STACK_DEPTH],
            modules: [OriginModule::default(); ORIGIN_STACK_DEPTH],
        };
        rec.ips[0] = ip;
        rec.modules[0] = OriginModule {
            status: BUILD_ID_VALID,
            build_id: bid,
            offset: ip - real.start + real.offset,
        };
        let mut ids = BuildIds::default();
        let got = ids.mappings(&rec);
        let m = got
            .iter()
            .find(|m| m.start <= ip && ip < m.end)
            .expect("the frame's segment");
        assert_eq!(m.id, real.id, "{got:?}");
        assert_eq!(ip - m.start + m.offset, ip - real.start + real.offset);
        // Another build id: nothing, however many files are offered.
        rec.modules[0].build_id[0] ^= 0xff;
        assert!(BuildIds::default().mappings(&rec).is_empty());
        // The kernel could not read it (status IP): nothing.
        rec.modules[0].status = 2;
        assert!(ids.mappings(&rec).is_empty());
    }

    /// A file offered whose build id is another's is never used, even at the path a
    /// process named for the build id asked.
    #[test]
    fn a_file_is_used_only_for_its_own_build_id() {
        let d = std::env::temp_dir().join(format!("fdaudit-buildid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let fake = d.join("libc.so.6");
        std::fs::write(&fake, b"\x7fELF not really").expect("write");
        let libc = read_exec_maps(std::process::id(), 1 << 20, 1024)
            .0
            .into_iter()
            .find(|m| m.path.contains("libc.so"))
            .expect("our libc");
        let o = untrusted::open_path(libc.path.as_bytes(), u64::MAX, libc.id).expect("libc");
        let bid = layout(&o.file, o.len).and_then(|l| l.build_id).expect("id");
        let mut ids = BuildIds {
            own_offered: true,
            ..BuildIds::default()
        };
        ids.offer(&Arc::from(fake.to_str().expect("utf-8")), None);
        assert!(ids.find(&bid).is_none());
        ids.offer(&libc.path, libc.id);
        assert_eq!(ids.find(&bid).map(|m| m.id), libc.id);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A record of a process gone before its maps were read (no such pid here) waits for
    /// its modules record, then its innermost frame is in its module (our own libc); without
    /// one, the leaked fd's lookup shows that frame alone and says the stack is partial.
    #[test]
    fn a_gone_process_s_record_waits_for_its_modules_and_is_never_guessed_without() {
        use crate::engine::{
            origin::{Origin, Origins},
            process::Processes,
            symbolize::partial,
        };
        use fdaudit_common::{OriginCall, OriginRecord, ORIGIN_FDS};
        let me = std::process::id();
        let libc = read_exec_maps(me, 1 << 20, 1024)
            .0
            .into_iter()
            .find(|m| m.path.contains("libc.so"))
            .expect("our libc");
        let o = untrusted::open_path(libc.path.as_bytes(), u64::MAX, libc.id).expect("libc");
        let bid = layout(&o.file, o.len).and_then(|l| l.build_id).expect("id");
        let ip = libc.start + 0x100;
        let gone = |pid: u32| {
            // SAFETY: OriginRecord is plain integers; all zero is valid.
            let mut r: OriginRecord = unsafe { std::mem::zeroed() };
            (r.pid, r.tid, r.call, r.nfd) = (pid, pid, OriginCall::Openat as u32, 1);
            r.fd = [-1; ORIGIN_FDS];
            (r.fd[0], r.ino[0], r.dev[0], r.time_ns) = (3, 55, 7, 10);
            (r.stack[0], r.nstack) = (ip, 1);
            r
        };
        let (mut origins, mut procs) = (Origins::default(), Processes::default());
        let pid = 1 << 30; // no such process
        origins.record(&mut procs, &gone(pid));
        let mut modules = OriginModulesRecord {
            header: RecordHeader::default(),
            pid,
            tid: pid,
            nips: 1,
            nmodules: 1,
            ips: [0; ORIGIN_STACK_DEPTH],
            modules: [OriginModule::default(); ORIGIN_STACK_DEPTH],
        };
        modules.ips[0] = ip;
        modules.modules[0] = OriginModule {
            status: BUILD_ID_VALID,
            build_id: bid,
            offset: ip - libc.start + libc.offset,
        };
        origins.modules_record(&procs, &modules);
        let Origin::Known(c) = origins.find(&procs, (pid, 3), 55, 7, 20) else {
            panic!("the open is the origin");
        };
        assert_eq!(c.stack[0].module.as_deref(), Some(&*libc.path), "{c:?}");
        assert_eq!(c.stack[0].offset, Some(0x100 + libc.offset), "{c:?}");
        // No modules record: the innermost frame alone, no module, the stack partial.
        let other = pid + 1;
        origins.record(&mut procs, &gone(other));
        let Origin::Known(c) = origins.find(&procs, (other, 3), 55, 7, 20) else {
            panic!("the open is the origin");
        };
        assert_eq!((c.stack.len(), c.stack[0].module.as_deref()), (1, None));
        assert_eq!(c.stack_partial, Some(partial::NO_MODULE));
    }
}
