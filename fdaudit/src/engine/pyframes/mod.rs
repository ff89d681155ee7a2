//! `trace --origin`: Python frames at the origin of an fd made by CPython code (3.11,
//! 3.12, 3.13; any other version says it is unsupported).
//!
//! ```text
//!  exec record ──▶ Registry::exec(pid) ──thread──▶ detect::find (exe / libpython symbols)
//!                                         │        Py_Version, layout (offsets.rs)
//!                                         ▼
//!                                 PY_PROCS[pid] = PyProc (the kernel's walk)
//!  origin_exit ──tail call──▶ python_after_origin / python_after_made
//!                                         │ PyFramesRecord (code object, instruction)
//!                                         ▼
//!  Resolver::frames ──▶ /proc/PID/mem (memory.rs): qualname, file, line (linetable.rs)
//! ```
//!
//! A process is registered by a short-lived thread per exec'd process (a shared libpython
//! is mapped by the dynamic loader after the exec: the thread waits for it, within
//! [`WAIT_FOR_LIBPYTHON`]); its code objects are read once per (process, address) and
//! kept within [`CODE_BUDGET`]. Everything read is the process's own bytes: bounded,
//! and a frame that cannot be read says why.

mod attach;
mod code;
mod detect;
#[cfg(test)]
mod freed_tests;
pub mod linetable;
mod memory;
pub mod offsets;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use aya::maps::{HashMap as BpfHashMap, MapData};
use fdaudit_common::{py_flags, PyFramesRecord, PyProc, PY_FRAMES};

use super::symbolize::{FoundBy, Frame};
pub use attach::PyOrigins;
use code::{Code, NotRead};
use detect::Types;
use memory::{Mem, MAX_LINETABLE};
use offsets::{CodeLayout, Layout};

/// How long a registration waits for a process's libpython to be mapped.
const WAIT_FOR_LIBPYTHON: Duration = Duration::from_secs(2);
/// Registrations running at once; an exec past them is not looked at.
const MAX_REGISTERING: usize = 16;
/// Bytes of code objects kept per session (names and location tables).
const CODE_BUDGET: u64 = 32 << 20;
/// `owner` of a C-stack shim frame (3.12+): not Python code.
const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// What a process is to the walk.
#[derive(Debug, Clone)]
enum Status {
    Python {
        code: CodeLayout,
        types: Types,
    },
    /// CPython, but not read: the statement to show on its origins.
    Unsupported(String),
}

/// The processes found to be CPython, the PY_PROCS map they are written to, and their
/// statuses (shared with the registration threads).
#[derive(Clone, Default)]
pub struct Registry {
    map: Option<Arc<Mutex<BpfHashMap<MapData, u32, PyProc>>>>,
    status: Arc<Mutex<HashMap<u32, Status>>>,
    running: Arc<AtomicUsize>,
}

impl Registry {
    pub fn new(map: BpfHashMap<MapData, u32, PyProc>) -> Registry {
        Registry {
            map: Some(Arc::new(Mutex::new(map))),
            ..Registry::default()
        }
    }

    /// `pid` exec'd: forgets what it was, and looks at what it is now (in a thread).
    pub fn exec(&self, pid: u32) {
        self.forget(pid);
        let Some(map) = self.map.clone() else {
            return;
        };
        if self.running.fetch_add(1, Ordering::SeqCst) >= MAX_REGISTERING {
            self.running.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let (status, running) = (Arc::clone(&self.status), Arc::clone(&self.running));
        let spawned = std::thread::Builder::new()
            .name("fdaudit-python".into())
            .spawn(move || {
                if let Some(s) = register(pid, &map) {
                    let mut st = status.lock().unwrap_or_else(|e| e.into_inner());
                    if st.len() < fdaudit_common::MAX_PY_PROCS as usize {
                        st.insert(pid, s);
                    }
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.running.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// `pid` is gone (or exec'd): its entry goes.
    pub fn forget(&self, pid: u32) {
        let known = self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pid);
        if known.is_some() {
            if let Some(map) = &self.map {
                let _ = map.lock().unwrap_or_else(|e| e.into_inner()).remove(&pid);
            }
        }
    }

    fn status(&self, pid: u32) -> Option<Status> {
        let st = self.status.lock().unwrap_or_else(|e| e.into_inner());
        st.get(&pid).cloned()
    }

    /// The statement for a CPython process whose frames are not read, if `pid` is one.
    pub fn unsupported(&self, pid: u32) -> Option<Frame> {
        match self.status(pid)? {
            Status::Unsupported(why) => Some(note_frame(why)),
            Status::Python { .. } => None,
        }
    }
}

/// Finds what `pid` is (waiting for its libpython) and, for a supported CPython, writes its
/// PY_PROCS entry. None: not CPython, or gone.
fn register(pid: u32, map: &Mutex<BpfHashMap<MapData, u32, PyProc>>) -> Option<Status> {
    let deadline = Instant::now() + WAIT_FOR_LIBPYTHON;
    let (runtime, version, types) = loop {
        match detect::find(pid) {
            detect::Found::NotPython => return None,
            detect::Found::Python {
                runtime,
                version,
                types: Some(types),
            } => break (runtime, version, types),
            detect::Found::Python { types: None, .. } => {
                return Some(Status::Unsupported(
                    "Python frames not read: the interpreter exports no PyCode_Type, \
                     PyBytes_Type or PyUnicode_Type (what tells a live code object)"
                        .into(),
                ))
            }
            detect::Found::Wait if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            detect::Found::Wait => return None,
            detect::Found::Older(image) => {
                return Some(Status::Unsupported(format!(
                    "Python frames unsupported: a CPython before 3.11 ({} exports no Py_Version; \
                     fdaudit reads 3.11, 3.12 and 3.13)",
                    image.rsplit('/').next().unwrap_or(&image)
                )))
            }
        }
    };
    let mem = Mem::open(pid).ok()?;
    let hex = mem.u32_at(version).ok()?;
    let layout = if offsets::needs_debug_offsets(hex) {
        mem.read(runtime, offsets::DEBUG_OFFSETS_LEN)
            .map_err(|e| format!("Python frames not read: _PyRuntime: {e}"))
            .and_then(|b| offsets::from_debug_offsets(&b, hex))
    } else {
        offsets::table(hex)
    };
    let Layout { mut walk, code } = match layout {
        Ok(l) => l,
        Err(why) => return Some(Status::Unsupported(why)),
    };
    walk.runtime = runtime;
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    match m.insert(pid, walk, 0) {
        Ok(()) => Some(Status::Python { code, types }),
        Err(e) => Some(Status::Unsupported(format!(
            "Python frames not read: the PY_PROCS map: {e}"
        ))),
    }
}

/// A frame that only says why Python frames are missing.
fn note_frame(why: String) -> Frame {
    Frame {
        found_by: Some(FoundBy::Python),
        unnamed: Some(why),
        ..Frame::default()
    }
}

/// Names the frames of [`PyFramesRecord`]s, keeping each code object read.
#[derive(Default)]
pub struct Resolver {
    code: HashMap<(u32, u64), Kept>,
    kept: u64,
}

/// What the cache keeps of an address.
enum Kept {
    /// A code object read and checked, or why it could not be read.
    Read(Result<Arc<Code>, String>),
    /// A code object found freed at `at_ns` (CLOCK_MONOTONIC): it was freed for a record
    /// made before then; a later record's code object may be a new one at that address,
    /// read again.
    Freed { why: String, at_ns: u64 },
}

/// CLOCK_MONOTONIC now, in ns: the clock of the kernel's record times.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

impl Resolver {
    /// The Python frames of `rec` (innermost first), named from the live process; a frame
    /// that cannot be read says why.
    pub fn frames(&mut self, reg: &Registry, rec: &PyFramesRecord) -> Vec<Frame> {
        let Some(Status::Python {
            code: layout,
            types,
        }) = reg.status(rec.pid)
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if rec.flags & py_flags::NO_THREAD != 0 {
            out.push(note_frame(format!(
                "Python frames not found: no thread state of the process has thread id {}",
                rec.tid
            )));
        }
        let mem = Mem::open(rec.pid);
        let n = (rec.nframes as usize).min(PY_FRAMES);
        for i in 0..n {
            if rec.owner[i] == FRAME_OWNED_BY_CSTACK {
                continue;
            }
            let (code, instr) = (rec.code[i], rec.instr[i]);
            let named = match &mem {
                Ok(m) => self.code(m, (&layout, &types), rec, code),
                Err(e) => Err(memory::gone_or(e, "/proc/PID/mem")),
            };
            // A code object whose code units do not hold the frame's instruction is not
            // the one the frame ran: not named either.
            let named = named.and_then(|c| {
                let line = c.line(&layout, code, instr).map_err(|e| e.why())?;
                Ok((c, line))
            });
            out.push(match named {
                Ok((c, line)) => Frame {
                    addr: code,
                    symbol: Some(c.qualname.clone()),
                    file: Some(c.filename.clone()),
                    line,
                    found_by: Some(FoundBy::Python),
                    ..Frame::default()
                },
                Err(why) => Frame {
                    addr: code,
                    unnamed: Some(format!("Python frame not read: {why}")),
                    found_by: Some(FoundBy::Python),
                    ..Frame::default()
                },
            });
        }
        if rec.flags & py_flags::READ_FAILED != 0 {
            out.push(note_frame(
                "Python frames cut: a read of the process's memory failed during the walk".into(),
            ));
        } else if rec.flags & py_flags::CUT != 0 {
            out.push(note_frame(format!(
                "Python frames cut: only the innermost {PY_FRAMES} were copied"
            )));
        }
        out
    }

    /// The code object at `addr` for `rec`'s frame: kept, or read and checked
    /// ([`code::read_code`]); one found freed is kept only for the records made before.
    fn code(
        &mut self,
        m: &Mem,
        (l, types): (&CodeLayout, &Types),
        rec: &PyFramesRecord,
        addr: u64,
    ) -> Result<Arc<Code>, String> {
        match self.code.get(&(rec.pid, addr)) {
            Some(Kept::Read(c)) => return c.clone(),
            Some(Kept::Freed { why, at_ns }) if rec.time_ns < *at_ns => return Err(why.clone()),
            _ => {}
        }
        let read = code::read_code(m, l, types, addr);
        let (kept, out) = match read {
            Ok(c) => {
                let c = Arc::new(c);
                (Kept::Read(Ok(Arc::clone(&c))), Ok(c))
            }
            Err(NotRead::Bad(why)) => (Kept::Read(Err(why.clone())), Err(why)),
            Err(freed) => {
                let why = freed.why();
                let at_ns = monotonic_ns();
                (
                    Kept::Freed {
                        why: why.clone(),
                        at_ns,
                    },
                    Err(why),
                )
            }
        };
        let cost = 64
            + match &kept {
                Kept::Read(Ok(c)) => {
                    (c.qualname.len() + c.filename.len() + c.linetable.len()) as u64
                }
                Kept::Read(Err(e)) | Kept::Freed { why: e, .. } => e.len() as u64,
            };
        if self.kept + cost + MAX_LINETABLE > CODE_BUDGET {
            self.code.clear();
            self.kept = 0;
        }
        self.kept += cost;
        self.code.insert((rec.pid, addr), kept);
        out
    }

    /// Forgets what was read of `pid`'s code objects.
    pub fn forget(&mut self, pid: u32) {
        self.code.retain(|(p, _), _| *p != pid);
    }
}
