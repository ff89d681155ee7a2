//! `trace --origin` in a CPython process: the interpreter's frames at the origin. Two
//! programs of their own, never attached, reached by tail call (PY_CHAIN, bpf_tail_call
//! since 4.2) from origin_exit for a process userspace put in PY_PROCS only, so that the
//! origin programs' verification does not grow and other processes pay one lookup on
//! their origin paths: `python_after_origin` after an origin record,
//! `python_after_made` after a call that made fds with close-on-exec (kept in ORIGIN_MADE
//! for a later FIONCLEX's `created_by`).
//!
//! The walk (as py-spy and the OTel eBPF profiler read it): `_PyRuntime` →
//! `interpreters.head` → each interpreter's `threads.head` → `next`, up to [`PY_THREADS`]
//! thread states in all, the one whose `native_thread_id` is the calling thread's → its
//! current frame (through `cframe` before 3.13) → `previous`, up to [`PY_FRAMES`] frames,
//! copying each frame's code object address, instruction pointer and owner. Every address
//! comes from the process: each read is bpf_probe_read_user (5.5), which fails instead of
//! faulting; userspace names the frames (`fdaudit::engine::pyframes`).

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use fdaudit_common::{
    py_flags, PyFramesRecord, PyProc, RecordHeader, RecordKind, PY_DIRECT, PY_FRAMES, PY_THREADS,
};

use crate::{ORIGIN_MADE_SCRATCH, PY_CHAIN, PY_PROCS};

/// From origin_exit: the walk (PY_CHAIN's `slot`) for a process in PY_PROCS; any other
/// pays this one lookup.
#[inline(always)]
pub fn walk(ctx: &RawTracePointContext, tgid: u32, slot: u32) {
    if PY_PROCS.get_ptr(tgid).is_some() {
        // SAFETY: PY_CHAIN holds programs of this program's type, filled by the loader.
        unsafe { PY_CHAIN.tail_call(ctx, slot) };
    }
}

// Never attached: PY_CHAIN slot PY_CHAIN_AFTER_ORIGIN, tail-called by origin_exit
// (raw_syscalls/sys_exit, whose context it shares) right after it sent an origin record.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn python_after_origin(_ctx: RawTracePointContext) -> i32 {
    let _ = try_python::<false>();
    0
}

// Never attached: PY_CHAIN slot PY_CHAIN_AFTER_MADE, tail-called by origin_exit after it
// kept a close-on-exec call in ORIGIN_MADE.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn python_after_made(_ctx: RawTracePointContext) -> i32 {
    let _ = try_python::<true>();
    0
}

#[inline(always)]
fn read<T>(addr: u64) -> Result<T, i64> {
    // SAFETY: the helper tolerates any address; it fails instead of faulting.
    unsafe { aya_ebpf::helpers::bpf_probe_read_user(addr as *const T) }.map_err(|e| e as i64)
}

/// The calling thread's thread state in the process `p` describes; 0 if none.
#[inline(always)]
fn thread_state(p: &PyProc, tid: u32) -> Result<u64, i64> {
    let mut interp: u64 = read(p.runtime.wrapping_add(p.interpreters_head))?;
    let mut ts: u64 = if interp == 0 {
        0
    } else {
        read(interp.wrapping_add(p.interp_threads))?
    };
    for _ in 0..PY_THREADS {
        if ts == 0 {
            // This interpreter's threads are done: the next interpreter's.
            if interp == 0 {
                return Ok(0);
            }
            interp = read(interp.wrapping_add(p.interp_next))?;
            if interp == 0 {
                return Ok(0);
            }
            ts = read(interp.wrapping_add(p.interp_threads))?;
            continue;
        }
        let native: u64 = read(ts.wrapping_add(p.tstate_native_tid))?;
        if native == u64::from(tid) {
            return Ok(ts);
        }
        ts = read(ts.wrapping_add(p.tstate_next))?;
    }
    Ok(0)
}

/// The calling thread's current frame (0: none) and the flags that say why there is none.
#[inline(always)]
fn current_frame(p: &PyProc, tid: u32) -> (u64, u32) {
    match thread_state(p, tid) {
        Ok(0) => (0, py_flags::NO_THREAD),
        Ok(ts) => {
            let frame = match read::<u64>(ts.wrapping_add(p.tstate_frame)) {
                Ok(f) if p.cframe_frame == PY_DIRECT => f,
                Ok(0) | Err(_) => 0,
                Ok(cf) => read::<u64>(cf.wrapping_add(p.cframe_frame)).unwrap_or(0),
            };
            (frame, 0)
        }
        Err(_) => (0, py_flags::READ_FAILED),
    }
}

#[inline(always)]
fn try_python<const MADE: bool>() -> Result<(), i64> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    let Some(p) = PY_PROCS.get_ptr(tgid) else {
        return Ok(());
    };
    // SAFETY: pointer from a map lookup, valid for this program run.
    let p = unsafe { &*p };
    let time_ns = if MADE {
        match ORIGIN_MADE_SCRATCH.get_ptr(0) {
            // SAFETY: a per-CPU array value, written by origin_exit just before.
            Some(m) => unsafe { (*m).time_ns },
            None => return Ok(()),
        }
    } else {
        // SAFETY: a helper without arguments.
        unsafe { bpf_ktime_get_ns() }
    };
    let ring = crate::Ring::now();
    let Some(mut entry) = ring.reserve::<PyFramesRecord>() else {
        // Lost to a full ring like any record: said with the others.
        crate::kernel::stat_add(&crate::STATS, |s| &mut s.lost_records);
        return Ok(());
    };
    let rec = entry.as_mut_ptr();
    let (mut frame, mut flags) = current_frame(p, tid);
    if MADE {
        flags |= py_flags::MADE;
    }
    let mut n = 0u32;
    for i in 0..PY_FRAMES {
        if frame == 0 {
            break;
        }
        let (Ok(code), Ok(instr), Ok(owner), Ok(prev)) = (
            read::<u64>(frame.wrapping_add(p.frame_code)),
            read::<u64>(frame.wrapping_add(p.frame_instr)),
            read::<u8>(frame.wrapping_add(p.frame_owner)),
            read::<u64>(frame.wrapping_add(p.frame_previous)),
        ) else {
            flags |= py_flags::READ_FAILED;
            break;
        };
        // SAFETY: `rec` points at the reserved record; `i` < PY_FRAMES.
        unsafe {
            (*rec).code[i] = code;
            (*rec).instr[i] = instr;
            (*rec).owner[i] = owner;
        }
        n += 1;
        frame = prev;
    }
    if frame != 0 && n as usize == PY_FRAMES {
        flags |= py_flags::CUT;
    }
    // SAFETY: as above; the frames past `n` are not read.
    unsafe {
        (*rec).header = RecordHeader {
            kind: RecordKind::PyFrames as u32,
            flags: 0,
        };
        (*rec).pid = tgid;
        (*rec).tid = tid;
        (*rec).nframes = n;
        (*rec).flags = flags;
        (*rec).time_ns = time_ns;
    }
    entry.submit(if MADE {
        crate::wake::quiet_unless_filling(ring)
    } else {
        crate::wake::NOW
    });
    Ok(())
}
