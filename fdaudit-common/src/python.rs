//! `trace --origin` in a CPython process: where the interpreter keeps its frames
//! ([`PyProc`], written per process by userspace into [`crate::MAP_PY_PROCS`]) and the frames
//! the kernel copies at an origin ([`PyFramesRecord`], sent right after the origin record,
//! by a program of its own reached by tail call: `fdaudit-ebpf/src/python.rs`).

use crate::RecordHeader;

/// Python frames copied per origin (innermost first).
pub const PY_FRAMES: usize = 32;
/// Thread states looked at to find the current thread's (over all interpreters).
pub const PY_THREADS: usize = 64;
/// Processes with a [`PyProc`] entry.
pub const MAX_PY_PROCS: u32 = 1024;
/// Slots of [`crate::MAP_PY_CHAIN`]: the walk after an origin record, and after a call
/// that made fds with close-on-exec (kept in ORIGIN_MADE, for a later `created_by`).
pub const PY_CHAIN_AFTER_ORIGIN: u32 = 0;
pub const PY_CHAIN_AFTER_MADE: u32 = 1;
pub const PY_CHAIN_LEN: u32 = 2;
/// [`PyProc::cframe_frame`] when the thread state points at the frame itself (3.13).
pub const PY_DIRECT: u64 = u64::MAX;

/// Where one CPython process keeps its frames: the address of `_PyRuntime` and the
/// offsets to walk from it, for its version (userspace: `fdaudit::engine::pyframes`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PyProc {
    pub runtime: u64,
    /// `_PyRuntimeState.interpreters.head`.
    pub interpreters_head: u64,
    /// `PyInterpreterState.next`, `.threads.head`.
    pub interp_next: u64,
    pub interp_threads: u64,
    /// `PyThreadState.next`, `.native_thread_id`.
    pub tstate_next: u64,
    pub tstate_native_tid: u64,
    /// `PyThreadState.cframe` (3.11, 3.12) or `.current_frame` (3.13).
    pub tstate_frame: u64,
    /// `_PyCFrame.current_frame`, or [`PY_DIRECT`].
    pub cframe_frame: u64,
    /// `_PyInterpreterFrame.previous`, `.f_code` (`.f_executable`), `.prev_instr`
    /// (`.instr_ptr`), `.owner`.
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_instr: u64,
    pub frame_owner: u64,
}

/// [`PyFramesRecord::flags`] bits.
pub mod py_flags {
    /// No thread state of the process has the calling thread's id.
    pub const NO_THREAD: u32 = 1;
    /// A read of the process's memory failed during the walk.
    pub const READ_FAILED: u32 = 1 << 1;
    /// More frames than [`super::PY_FRAMES`]: the outer ones are cut.
    pub const CUT: u32 = 1 << 2;
    /// Follows a call that made fds with close-on-exec (no origin record): `time_ns` is
    /// the one ORIGIN_MADE keeps for them.
    pub const MADE: u32 = 1 << 3;
}

/// The Python frames of the thread that made the origin sent just before (same pid and
/// tid), or (flag `MADE`) of the close-on-exec call kept with `time_ns`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PyFramesRecord {
    pub header: RecordHeader,
    pub pid: u32,
    pub tid: u32,
    pub nframes: u32,
    pub flags: u32,
    pub time_ns: u64,
    /// Per frame: the code object's address and the instruction pointer.
    pub code: [u64; PY_FRAMES],
    pub instr: [u64; PY_FRAMES],
    /// Per frame: `owner` (3: the C stack's shim frame, not Python code).
    pub owner: [u8; PY_FRAMES],
}
