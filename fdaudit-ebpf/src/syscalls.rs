//! The syscall counts of the window between fork and exec (sys_enter) and the read
//! counters of `--reads` (sys_exit), on raw tracepoints.

use aya_ebpf::{
    helpers::bpf_get_current_comm,
    macros::raw_tracepoint,
    programs::{RawTracePointContext, TracePointContext},
    EbpfContext,
};
use fdaudit_common::{flags, sysno, ReadKey, ReadStat, TaskState, MAX_RANGES};

use crate::{
    arch,
    compat::{compat_native, compat_read, counted_native, in_compat_syscall},
    configured, current_tgid, fdwalk,
    fork::fd_is_open,
    kernel::{self, conf, read_kernel, stat_add},
    EXEC_PENDING, HOT, READS, STATS, TRACKED,
};

// ---------------------------------------------------------------------------------------------
// raw_syscalls/sys_enter: TP_PROTO(struct pt_regs *regs, long id). Runs for every syscall on
// the machine while attached, so it leaves at the first check: the syscall id, then the
// tgid lookup. Arguments come from pt_regs (offsets from BTF, per architecture: arch.rs;
// bx/cx/dx for an x86_64 compat syscall).
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> i32 {
    let _ = try_sys_enter(&ctx);
    0
}

fn try_sys_enter(ctx: &RawTracePointContext) -> Result<(), i64> {
    let raw_id: i64 = ctx.arg(1);
    if !counted_native(raw_id) && compat_native(raw_id) < 0 {
        return Ok(());
    }
    on_syscall(raw_id, ctx.arg(0), true)
}

/// Counts syscall `raw_id` (one of those counted, native or, with `may_be_compat`, an
/// x86_64 compat number) of the current process; `regs` is the syscall's `struct pt_regs *`,
/// from the raw tracepoint or the fentry backend (which hooks the native entry points only).
#[inline(always)]
pub(crate) fn on_syscall(raw_id: i64, regs: u64, may_be_compat: bool) -> Result<(), i64> {
    on_counted(
        raw_id,
        || may_be_compat && in_compat_syscall(),
        |compat| Regs { regs, compat },
    )
}

/// Counts native syscall `id` of the current process from its own tracepoint
/// (`syscalls/sys_enter_<name>`, the tp backend), whose arguments are in the record.
#[inline(always)]
pub(crate) fn on_tracepoint(id: i64, ctx: &TracePointContext) -> Result<(), i64> {
    // Native syscall tracepoints never fire for an x86_64 compat syscall
    // (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS): the call is always native.
    on_counted(id, || false, |_| TpArgs(ctx))
}

/// The common part of [`on_syscall`] and [`on_tracepoint`]: `is_compat` says whether the
/// call is an x86_64 compat one (asked only of processes in a window), `args` gives its
/// arguments for that answer.
#[inline(always)]
fn on_counted<A: SyscallArgs>(
    raw_id: i64,
    is_compat: impl FnOnce() -> bool,
    args: impl FnOnce(bool) -> A,
) -> Result<(), i64> {
    // Every count is for a process inside its fork..exec window, and every such process
    // owns its HOT slot (or marked the slot as overflowed): one array access, no hashing,
    // tells all other processes on the machine to leave.
    let tgid = current_tgid();
    let Some(slot) = HOT.get_ptr_mut(tgid & conf!(hot_mask) as u32) else {
        return Ok(());
    };
    // SAFETY: pointer from an array lookup, valid for this program run.
    let slot = unsafe { &mut *slot };
    if slot.tgid != tgid && slot.overflow == 0 {
        return Ok(()); // nobody in a window hashes here: not traced
    }
    let compat = is_compat();
    let a = args(compat);
    if slot.tgid == tgid && raw_id == sysno::CLOSE && !compat {
        // The path a close loop takes 2^20 times.
        slot.close_calls += 1;
        let fd: u64 = a.arg0()?;
        if !fd_is_open(&mut slot.cache, fd as u32)? {
            slot.close_ebadf += 1;
        }
        return Ok(());
    }
    let Some(st) = TRACKED.get_ptr_mut(tgid) else {
        return Ok(());
    };
    // SAFETY: pointer from a map lookup, valid for this program run.
    let st = unsafe { &mut *st };
    if st.in_window == 0 {
        return Ok(());
    }
    // The call's x86_64 number.
    let id = if compat {
        st.flags |= flags::COMPAT_SYSCALLS;
        compat_native(raw_id)
    } else if counted_native(raw_id) {
        raw_id
    } else {
        return Ok(()); // an ia32 number made through the 64-bit entry: another call
    };
    count_in_window(st, id, &a)
}

/// A syscall's first three arguments.
pub(crate) trait SyscallArgs {
    fn arg0(&self) -> Result<u64, i64>;
    fn arg1(&self) -> Result<u64, i64>;
    fn arg2(&self) -> Result<u64, i64>;
    /// An x86_64 compat (ia32) call: 32-bit arguments.
    fn compat(&self) -> bool;
}

/// The arguments in the syscall's pt_regs (offsets from BTF): di, si, dx for the x86_64
/// ABI, bx, cx, dx for a compat one.
struct Regs {
    regs: u64,
    compat: bool,
}

impl SyscallArgs for Regs {
    #[inline(always)]
    fn arg0(&self) -> Result<u64, i64> {
        let off = if self.compat {
            conf!(regs_bx)
        } else {
            conf!(regs_arg0)
        };
        arch::arg(self.regs, off)
    }
    #[inline(always)]
    fn arg1(&self) -> Result<u64, i64> {
        let off = if self.compat {
            conf!(regs_cx)
        } else {
            conf!(regs_arg1)
        };
        arch::arg(self.regs, off)
    }
    #[inline(always)]
    fn arg2(&self) -> Result<u64, i64> {
        arch::arg(self.regs, conf!(regs_arg2)) // dx in both ABIs
    }
    #[inline(always)]
    fn compat(&self) -> bool {
        self.compat
    }
}

/// The arguments in a `syscalls/sys_enter_<name>` record: `struct syscall_trace_enter`
/// (kernel/trace/trace_syscalls.c, unchanged since 2.6.33): the 8-byte common header, int
/// `__syscall_nr` at 8, then `unsigned long args[]` from 16, as each event's tracefs
/// `format` file says (the loader checks it before it attaches: `fdaudit::engine::ebpf::tp`).
struct TpArgs<'a>(&'a TracePointContext);

/// Offset of a sys_enter record's first argument.
const TP_ARGS: usize = 16;

impl TpArgs<'_> {
    /// Argument `i` (0..3), loaded from the record directly: a tracepoint program may read
    /// its context at any 8-aligned offset from 8 (`tp_prog_is_valid_access`), so no
    /// bpf_probe_read_kernel call on the path a close loop takes 2^20 times.
    #[inline(always)]
    fn arg(&self, i: usize) -> u64 {
        // SAFETY: a u64 inside the tracepoint record, 8-aligned (the verifier checks it).
        unsafe {
            *(self.0.as_ptr() as *const u8)
                .add(TP_ARGS + 8 * i)
                .cast::<u64>()
        }
    }
}

impl SyscallArgs for TpArgs<'_> {
    #[inline(always)]
    fn arg0(&self) -> Result<u64, i64> {
        Ok(self.arg(0))
    }
    #[inline(always)]
    fn arg1(&self) -> Result<u64, i64> {
        Ok(self.arg(1))
    }
    #[inline(always)]
    fn arg2(&self) -> Result<u64, i64> {
        Ok(self.arg(2))
    }
    #[inline(always)]
    fn compat(&self) -> bool {
        false
    }
}

/// Counts one syscall of a process inside its fork..exec window (`id` is one of those
/// `try_sys_enter` lets through, as its x86_64 number). Adding a counter: a line in the
/// counter table (`fdaudit_common::counter_table!`) and its rule, an arm here.
#[allow(unreachable_patterns)] // sysno::NONE repeats on aarch64, as in counted_native
#[inline(always)]
fn count_in_window<A: SyscallArgs>(st: &mut TaskState, id: i64, a: &A) -> Result<(), i64> {
    let c = &mut st.counters;
    match id {
        sysno::CLOSE => {
            c.close_calls += 1;
            let fd: u64 = a.arg0()?;
            if !fd_is_open(&mut st.cache, fd as u32)? {
                st.counters.close_ebadf += 1;
            }
        }
        sysno::CLOSE_RANGE => {
            let i = c.close_range_calls as usize;
            if i < MAX_RANGES {
                let r = &mut c.ranges[i];
                r.first = a.arg0().unwrap_or(0) as u32;
                r.last = a.arg1().unwrap_or(0) as u32;
                r.flags = a.arg2().unwrap_or(0) as u32;
            }
            c.close_range_calls += 1;
        }
        sysno::FCNTL => {
            let cmd: u64 = a.arg1()?;
            match cmd as u32 {
                1 => c.fcntl_getfd_calls += 1, // F_GETFD
                2 => c.fcntl_setfd_calls += 1, // F_SETFD
                _ => {}
            }
        }
        sysno::POLL | sysno::PPOLL => {
            let nfds: u64 = a.arg1()?;
            let nfds = if a.compat() { nfds & 0xffff_ffff } else { nfds };
            c.poll_calls += 1;
            let nfds = if nfds > u32::MAX as u64 {
                u32::MAX
            } else {
                nfds as u32
            };
            if nfds > c.poll_nfds_max {
                c.poll_nfds_max = nfds;
            }
        }
        sysno::GETDENTS64 => {
            c.getdents64_calls += 1;
            // A listing of /proc/<pid>/fd (however it was opened: /proc/self/fd, /dev/fd,
            // /proc/thread-self/fd) that starts at offset 0 is a new fd walk. Checked here
            // rather than at open(), whose path string may sit in a page not yet faulted in.
            let fd: u64 = a.arg0()?;
            if fdwalk::is_procfd_listing(fd as u32).unwrap_or(false) {
                c.procfd_opens += 1;
            }
        }
        sysno::EXECVE | sysno::EXECVEAT => {
            c.exec_attempts += 1;
            // The path, should this exec fail (failed_exec): execve(filename, ...),
            // execveat(dirfd, filename, ...). Only the pointer: read only on failure. Not
            // for a compat exec: the syscall tracepoints ignore compat syscalls
            // (ARCH_TRACE_IGNORE_COMPAT_SYSCALLS), so no exit would take the pointer.
            if !a.compat() {
                let p = if id == sysno::EXECVEAT {
                    a.arg1()
                } else {
                    a.arg0()
                };
                if let Ok(p) = p {
                    let _ = EXEC_PENDING.insert(current_tgid(), p, 0);
                }
            }
        }
        sysno::DUP2 | sysno::DUP3 => c.dup_calls += 1,
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// raw_syscalls/sys_exit: TP_PROTO(struct pt_regs *regs, long ret). Attached only with
// `--reads`: counts read()/readv()/pread64() calls and bytes per (process, open file): the
// fd is looked up in task->files->fdt, still as it was for the read. The first checks are
// the return value and the option, so most syscalls leave at once.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> i32 {
    let _ = try_sys_exit(&ctx);
    0
}

fn try_sys_exit(ctx: &RawTracePointContext) -> Result<(), i64> {
    let ret: i64 = ctx.arg(1);
    let Some(tgid) = read_counter(ret) else {
        return Ok(());
    };
    let regs: u64 = ctx.arg(0);
    let raw_id = arch::exit_syscall_nr(arch::Regs::current(regs, kernel::Task::current()))?;
    if !matches!(raw_id, sysno::READ | sysno::READV | sysno::PREAD64) && !compat_read(raw_id) {
        return Ok(());
    }
    let (id, fd) = if in_compat_syscall() {
        (compat_native(raw_id), arch::arg(regs, conf!(regs_bx))?)
    } else {
        (raw_id, arch::exit_arg0(regs)?)
    };
    if id != sysno::READ && id != sysno::READV && id != sysno::PREAD64 {
        return Ok(());
    }
    count_read(tgid, fd, ret)
}

/// The process whose read returned `ret`, when that read is to be counted: it succeeded,
/// `--reads` is on, userspace filled the config and the process is traced. The first checks
/// are the cheap ones, so most syscalls leave at once.
#[inline(always)]
pub(crate) fn read_counter(ret: i64) -> Option<u32> {
    if ret < 0 || conf!(reads) == 0 || !configured() {
        return None;
    }
    let tgid = current_tgid();
    TRACKED.get_ptr(tgid)?;
    Some(tgid)
}

/// Counts one read()/readv()/pread64() of `tgid` on `fd` that returned `ret` >= 0 bytes.
#[inline(always)]
pub(crate) fn count_read(tgid: u32, fd: u64, ret: i64) -> Result<(), i64> {
    let file = fdwalk::task_file(crate::kernel::Task::current(), fd as u32)?;
    let inode: u64 = read_kernel(file + conf!(file_inode))?;
    let key = ReadKey {
        pid: tgid,
        _pad: 0,
        file,
        ino: read_kernel(inode + conf!(inode_ino))?,
    };
    let tiny = u64::from(ret > 0 && ret <= 2);
    if let Some(v) = READS.get_ptr_mut(key) {
        // SAFETY: pointer from a map lookup, valid for this program run.
        let v = unsafe { &mut *v };
        v.calls += 1;
        v.bytes += ret as u64;
        v.tiny_calls += tiny;
        crate::readpath::name_if_storm(&key, v, file);
    } else {
        let (ino, magic, mode) = fdwalk::file_identity(file).unwrap_or((0, 0, 0));
        let v = ReadStat {
            calls: 1,
            bytes: ret as u64,
            tiny_calls: tiny,
            ino,
            magic,
            mode,
            fd: fd as u32,
            comm: bpf_get_current_comm().unwrap_or_default(),
        };
        if READS.insert(key, v, 0).is_err() {
            stat_add(&STATS, |s| &mut s.reads_full);
        }
    }
    Ok(())
}
