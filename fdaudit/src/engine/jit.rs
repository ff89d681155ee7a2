//! Frames in a JIT runtime's generated code (the JVM, V8 in Node): named from the
//! process's perf map ([`super::perfmap`]) when a report is made, not when the record is
//! decoded (the JVM writes its map at exit, or when `jcmd PID Compiler.perfmap` asks), and
//! read again when the map changed. A frame the map does not name keeps its address and
//! says why (no map, not in it, the map refused), never a guess.
//!
//! While the process lives (its first such frame) fdaudit keeps what finding its map later
//! needs: its root directory held `O_PATH` (the map is looked up beneath it, in the
//! process's own mount namespace, by the pid it has in its own pid namespace), its user
//! (the map must be that user's or root's), and whether its runtime keeps frame pointers
//! in generated code (V8 does; the JVM with `-XX:+PreserveFramePointer` on its command
//! line): only then are the kernel's frame-pointer frames kept through that code. At most
//! [`MAX_PROCS`] processes are kept (their root fds), and [`MAPS_BUDGET`] bytes of maps.

use std::{
    collections::HashMap,
    os::fd::OwnedFd,
    sync::Arc,
    time::{Duration, Instant},
};

use super::perfmap::{self, PerfMap, Refused, Stamp};
use crate::runtime::read_proc;

/// Processes whose perf map is kept track of.
pub const MAX_PROCS: usize = 256;
/// Bytes of parsed perf maps kept in all (the least recently used dropped).
pub const MAPS_BUDGET: u64 = 64 << 20;

/// A map is checked for changes at most this often, unless a report begins.
const RECHECK: Duration = Duration::from_millis(250);

/// What a JIT frame's name says of how its code runs.
pub const INTERPRETED: &str = "interpreted";
pub const JIT: &str = "jit";

/// A process with generated code.
struct Proc {
    root: Option<Arc<OwnedFd>>,
    /// Its pid in its own pid namespace (what names its map), and its user.
    nspid: u32,
    uid: u32,
    /// Whether its runtime keeps frame pointers in generated code.
    keeps_fp: bool,
    map: Result<(Stamp, Arc<PerfMap>), Refused>,
    /// The report generation the map was last checked in, and when.
    checked: u64,
    checked_at: Option<Instant>,
    tick: u64,
}

/// The perf maps of the processes with JIT frames.
#[derive(Default)]
pub struct JitProcs {
    procs: HashMap<u32, Proc>,
    cost: u64,
    generation: u64,
    tick: u64,
}

/// A frame's name from a perf map: the map's name plus the offset, the map's path, and how
/// the code runs when the name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitName {
    pub symbol: String,
    pub map: String,
    pub code: Option<&'static str>,
}

impl JitProcs {
    /// Notes `pid` (a frame of it lies in generated code), while it lives; `exe`: its exec
    /// path from its spawn record, if fdaudit saw one.
    pub fn note(&mut self, pid: u32, exe: Option<&str>) {
        self.tick += 1;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.tick = self.tick;
            return;
        }
        if self.procs.len() >= MAX_PROCS {
            let oldest = self
                .procs
                .iter()
                .min_by_key(|(_, p)| p.tick)
                .map(|(&k, _)| k);
            if let Some(p) = oldest.and_then(|k| self.procs.remove(&k)) {
                self.cost -= map_cost(&p.map);
            }
        }
        let root = open_root(pid).map(Arc::new);
        let status = read_proc(pid, "status").unwrap_or_default();
        let status = String::from_utf8_lossy(&status);
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        // NSpid lists the pid in each namespace, the process's own last.
        let nspid = field("NSpid:")
            .last()
            .and_then(|v| v.parse().ok())
            .unwrap_or(pid);
        let uid = field("Uid:")
            .first()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let map = match root {
            Some(_) => Err(Refused::Missing(format!("/tmp/perf-{nspid}.map"))),
            None => Err(Refused::Open(
                format!("/tmp/perf-{nspid}.map"),
                "the process was gone before its root was held".into(),
            )),
        };
        let p = Proc {
            root,
            nspid,
            uid,
            keeps_fp: keeps_frame_pointers(pid, exe),
            map,
            checked: 0,
            checked_at: None,
            tick: self.tick,
        };
        self.procs.insert(pid, p);
    }

    /// Whether `pid`'s runtime keeps frame pointers in its generated code.
    pub fn keeps_fp(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.keeps_fp)
    }

    /// A report is being made: each map is checked again (once) for changes.
    pub fn begin_report(&mut self) {
        self.generation += 1;
    }

    /// The name of `addr` in `pid`'s generated code, or why there is none.
    pub fn name(&mut self, pid: u32, addr: u64) -> Result<JitName, String> {
        self.refresh(pid);
        let Some(p) = self.procs.get(&pid) else {
            return Err("no perf map (the process was not noted while it lived)".into());
        };
        let shown = format!("/tmp/perf-{}.map", p.nspid);
        let (_, map) = p.map.as_ref().map_err(ToString::to_string)?;
        let Some(e) = map.lookup(addr) else {
            let cut = if map.truncated {
                " (read up to its bounds)"
            } else {
                ""
            };
            return Err(format!("not in perf map {shown}{cut}"));
        };
        Ok(JitName {
            symbol: format!("{}+{:#x}", e.name, addr - e.start),
            map: shown,
            code: code_kind(&e.name),
        })
    }

    /// Reads `pid`'s map again if this report has not checked it and it changed.
    fn refresh(&mut self, pid: u32) {
        let generation = self.generation;
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let recent = p.checked_at.is_some_and(|t| t.elapsed() < RECHECK);
        if p.checked == generation && recent {
            return;
        }
        p.checked = generation;
        p.checked_at = Some(Instant::now());
        let Some(root) = p.root.clone() else {
            return;
        };
        let shown = format!("/tmp/perf-{}.map", p.nspid);
        let fresh = match perfmap::open(&root, p.nspid, p.uid) {
            Ok((_, stamp)) if p.map.as_ref().is_ok_and(|(s, _)| *s == stamp) => return,
            Ok((file, stamp)) => perfmap::read(file, &shown).map(|m| (stamp, Arc::new(m))),
            Err(e) => Err(e),
        };
        let old = std::mem::replace(&mut p.map, fresh);
        let new_cost = map_cost(&p.map);
        self.cost = self.cost - map_cost(&old) + new_cost;
        self.drop_over_budget(pid);
    }

    /// Drops the least recently used maps (not `keep`'s) while over [`MAPS_BUDGET`].
    fn drop_over_budget(&mut self, keep: u32) {
        while self.cost > MAPS_BUDGET {
            let oldest = self
                .procs
                .iter()
                .filter(|(&k, p)| k != keep && p.map.is_ok())
                .min_by_key(|(_, p)| p.tick)
                .map(|(&k, _)| k);
            let Some(p) = oldest.and_then(|k| self.procs.get_mut(&k)) else {
                break;
            };
            let old = std::mem::replace(&mut p.map, Err(Refused::Missing(String::new())));
            p.checked_at = None;
            self.cost -= map_cost(&old);
        }
    }
}

fn map_cost(m: &Result<(Stamp, Arc<PerfMap>), Refused>) -> u64 {
    m.as_ref().map_or(0, |(_, m)| m.cost())
}

/// `/proc/PID/root` held `O_PATH`: the process's root directory, which stays valid after
/// it exits.
fn open_root(pid: u32) -> Option<OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let path = std::ffi::CString::new(format!("/proc/{pid}/root")).ok()?;
    // SAFETY: a valid C string; open returns a new fd or -1.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: a fresh fd we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `pid`'s runtime keeps frame pointers in generated code: Node (V8 always does on
/// x86_64), the JVM when its command line says `-XX:+PreserveFramePointer` (the process
/// writes its own command line: a process that lies about it only garbles its own frames).
/// A process gone is told by `exe`, its exec path (a JVM's command line is gone with it).
fn keeps_frame_pointers(pid: u32, exe: Option<&str>) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .unwrap_or_else(|_| exe.unwrap_or_default().into());
    let base = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    if base.is_some_and(|b| b == "node" || b.starts_with("node")) {
        return true;
    }
    let cmdline = read_proc(pid, "cmdline").unwrap_or_default();
    let mut preserve = false;
    for arg in cmdline.split(|&b| b == 0) {
        match arg {
            b"-XX:+PreserveFramePointer" => preserve = true,
            b"-XX:-PreserveFramePointer" => preserve = false,
            _ => {}
        }
    }
    preserve
}

/// How a perf map entry's code runs, where its name tells: V8 marks a JavaScript
/// function's tier after `JS:` (or `LazyCompile:`, `Function:` before Node 20): `~`
/// interpreted (Ignition), `^` `+` `*` compiled (Sparkplug, Maglev, TurboFan); its
/// bytecode handlers are the interpreter's. The JVM names its template interpreter
/// `Interpreter`; its other entries are compiled methods and stubs.
pub fn code_kind(name: &str) -> Option<&'static str> {
    if name == "Interpreter" || name.starts_with("BytecodeHandler:") {
        return Some(INTERPRETED);
    }
    let rest = ["JS:", "LazyCompile:", "Function:"]
        .iter()
        .find_map(|p| name.strip_prefix(p));
    match rest.and_then(|r| r.chars().next()) {
        Some('~') => Some(INTERPRETED),
        Some('^' | '+' | '*') => Some(JIT),
        _ if rest.is_none() && name.contains('(') => Some(JIT),
        _ => None,
    }
}

/// The kernel's frame-pointer frames (`walk`) that continue the stack past `last`, the
/// last frame the unwind tables reached, when `last` is also in the kernel's walk: one
/// for each function on the way that keeps a frame pointer (`keeps_fp`, asked of the
/// return address into it).
pub fn frames_past(walk: &[u64], last: u64, keeps_fp: impl FnMut(u64) -> bool) -> Vec<u64> {
    let Some(i) = walk.iter().position(|&a| a == last) else {
        return Vec::new();
    };
    super::unwind::kept_while(&walk[i + 1..], last, keeps_fp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_says_how_the_code_runs() {
        assert_eq!(code_kind("JS:~leakOne /tmp/l.js:2:17"), Some(INTERPRETED));
        assert_eq!(code_kind("JS:*leakOne /tmp/l.js:2:17"), Some(JIT));
        assert_eq!(code_kind("JS:^leakOne /tmp/l.js:2:17"), Some(JIT));
        assert_eq!(code_kind("LazyCompile:*f a.js:1"), Some(JIT));
        assert_eq!(code_kind("BytecodeHandler:Ldar"), Some(INTERPRETED));
        assert_eq!(code_kind("Interpreter"), Some(INTERPRETED));
        assert_eq!(code_kind("void Leak.leakOne()"), Some(JIT));
        assert_eq!(code_kind("Builtin:CallApiCallback"), None);
        assert_eq!(code_kind("StubRoutines (1)"), Some(JIT));
    }

    #[test]
    fn the_kernel_s_frames_continue_past_the_last_unwound_one_only_through_frame_pointers() {
        let walk = [0x10, 0x20, 0x30, 0x40, 0x50];
        assert_eq!(frames_past(&walk, 0x20, |_| true), [0x30, 0x40, 0x50]);
        assert_eq!(frames_past(&walk, 0x20, |a| a != 0x40), [0x30, 0x40]);
        assert!(
            frames_past(&walk, 0x99, |_| true).is_empty(),
            "not in the walk"
        );
        assert!(frames_past(&walk, 0x50, |_| true).is_empty());
    }

    #[test]
    fn a_process_s_map_is_found_beneath_its_root_by_its_own_pid() {
        let me = std::process::id();
        let mut j = JitProcs::default();
        j.note(me, None);
        assert!(!j.keeps_fp(me), "the test binary is no JIT runtime");
        let want = format!("/tmp/perf-{me}.map");
        let _ = std::fs::remove_file(&want);
        j.begin_report();
        let why = j.name(me, 0x1000).unwrap_err();
        assert_eq!(why, format!("no perf map {want}"));
        std::fs::write(&want, b"1000 10 void A.b()\n").unwrap();
        j.begin_report();
        let n = j.name(me, 0x1004).expect("named");
        assert_eq!(
            n,
            JitName {
                symbol: "void A.b()+0x4".into(),
                map: want.clone(),
                code: Some(JIT)
            }
        );
        assert_eq!(
            j.name(me, 0x1010).unwrap_err(),
            format!("not in perf map {want}")
        );
        // Changed: read again at the next report.
        std::fs::write(&want, b"1000 20 Interpreter\n").unwrap();
        j.begin_report();
        assert_eq!(j.name(me, 0x1010).unwrap().code, Some(INTERPRETED));
        let _ = std::fs::remove_file(&want);
    }
}
