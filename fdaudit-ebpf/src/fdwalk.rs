//! Walks the current task's fd table (task->files->fdt) right after exec.
//!
//! The table is walked one 64-fd word of `open_fds` at a time under bpf_loop (kernel 5.17+),
//! so a table of 2^20 fds costs one helper call per word, and empty words cost nothing more.
//! Kernels without bpf_loop get [`bounded`]: the same steps in bounded loops, chained by tail
//! calls, over the first `BOUNDED_MAX_FDS` fds.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_loop, bpf_probe_read_kernel_str_bytes},
    macros::map,
    maps::PerCpuArray,
};
use fdaudit_common::{
    fd_flags, flags, fs_magic, task_btf, FdInfo, FdPath, PathsRecord, SpawnRecord, COMP_LEN,
    MAX_DEPTH, MAX_FDS, MAX_FD_WORDS, MAX_PATHS, NAME_LEN,
};

use crate::kernel::{conf, current_task, read_kernel, was_cut, Task};

const S_IFMT: u32 = 0o170000;
const S_IFSOCK: u32 = 0o140000;
const S_IFIFO: u32 = 0o010000;

/// The walk of one exec's fd table, in the WALK per-CPU map rather than on the stack: the
/// verifier does not track values in map memory, so the bpf_loop callbacks' states converge
/// after an iteration or two. (On the stack, kernels from 6.7 on, which verify a callback
/// until its state stops changing, followed every depth and flag value: sid's 7.x took
/// sixty times as long as 6.12 to load the program, docs/performance.md.)
#[repr(C)]
pub struct Walk {
    open_fds: u64,
    fd_array: u64,
    /// Files whose paths are built after the walk.
    files: [u64; MAX_PATHS],
    /// The open_fds word of the fd being looked at.
    word: u64,
    /// Where the walk of the current path is.
    cursor: PathCursor,
    /// fds to look at in all.
    nfds: u32,
    /// Bounded walk: the first fd of the next stage.
    next: u32,
}

/// Where a path walk ([`path_start`], [`path_one_step`]) is.
#[repr(C)]
pub struct PathCursor {
    dentry: u64,
    vfsmnt: u64,
    mnt: u64,
    depth: u32,
    /// 1 when the walk is over.
    pub done: u32,
}

#[map]
static WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);

/// The current exec's record (SCRATCH) and walk (WALK). Tracepoint programs run with
/// preemption off, so this CPU's entries belong to the current exec for the whole run,
/// tail calls included.
#[inline(always)]
fn state() -> Option<(
    &'static mut SpawnRecord,
    &'static mut PathsRecord,
    &'static mut Walk,
)> {
    let s = crate::SCRATCH.get_ptr_mut(0)?;
    let walk = WALK.get_ptr_mut(0)?;
    // SAFETY: pointers from per-CPU array lookups, valid for this program run.
    Some(unsafe { (&mut (*s).spawn, &mut (*s).paths, &mut *walk) })
}

/// Steps each path walk may take: a component or a mount crossing per step.
pub const PATH_STEPS: u32 = MAX_DEPTH as u32 + 8;

/// Fills the current exec's record in SCRATCH (`fds`, `nfds`, `stdio`, `stdio_mask`, and in
/// the paths record the paths of the first leaked files) from the current fd table.
///
/// The bpf_loop callbacks write the record through lookups of their own, so no reference to
/// it may be held across a bpf_loop call: a `&mut SpawnRecord` is exclusive, and LLVM, given
/// one across the calls, folded `rec.npaths` after the fd walk to the 0 `prepare` stores, so
/// the path loop ran no step (and the verifier, seeing 0 iterations, dropped the callback
/// and then failed: "verifier bug: No program to jit"). The record is looked up again after
/// each walk, and the caller sends it from a lookup of its own.
#[inline(always)]
pub fn walk_fds() {
    let Some(nfds) = state().and_then(|(rec, _, _)| prepare(rec, MAX_FD_WORDS * 64)) else {
        return;
    };
    // SAFETY: the callbacks take their state from the maps; no context is passed.
    unsafe {
        // One callback per fd of the table (max_fds is the table's allocated size, 64..1024
        // for most processes, not RLIMIT_NOFILE); a word of open_fds is read every 64.
        bpf_loop(nfds, walk_fd as *mut c_void, core::ptr::null_mut(), 0);
    }
    let Some((rec, _, _)) = state() else {
        return;
    };
    let steps = rec.npaths * PATH_STEPS;
    // SAFETY: as above.
    unsafe {
        // Paths: one flat loop of PATH_STEPS steps per path (no nested loops: the verifier
        // checks each callback once).
        bpf_loop(steps, path_step as *mut c_void, core::ptr::null_mut(), 0);
    }
}

/// Clears the record's fd lists and sets up the walk of the table in WALK, up to `limit`
/// fds: the number of fds to look at, or None when the table cannot be read.
#[inline(always)]
fn prepare(rec: &mut SpawnRecord, limit: u32) -> Option<u32> {
    rec.nfds = 0;
    rec.stdio_mask = 0;
    rec.npaths = 0;
    let walk = WALK.get_ptr_mut(0)?;
    // SAFETY: pointer from a per-CPU array lookup, valid for this program run.
    let walk = unsafe { &mut *walk };
    walk.nfds = 0;
    walk.next = 0;
    let Ok((fdt, max_fds)) = current_fdt() else {
        rec.header.flags |= flags::READ_FAILED;
        return None;
    };
    let (Ok(open_fds), Ok(fd_array)) = (
        read_kernel::<u64>(fdt + conf!(fdt_open_fds)),
        read_kernel::<u64>(fdt + conf!(fdt_fd)),
    ) else {
        rec.header.flags |= flags::READ_FAILED;
        return None;
    };
    let mut nfds = max_fds;
    if nfds > limit {
        nfds = limit;
        rec.header.flags |= flags::FDTABLE_TRUNCATED;
    }
    walk.open_fds = open_fds;
    walk.fd_array = fd_array;
    walk.word = 0;
    walk.nfds = nfds;
    Some(nfds)
}

/// [`super::EXEC_CHAIN`] slot of the fd stage of the bounded walk.
pub const CHAIN_FDS: u32 = 0;
/// [`super::EXEC_CHAIN`] slot of the path stage of the bounded walk.
pub const CHAIN_PATHS: u32 = 1;

/// The exec walk for kernels without bpf_loop (5.10, 5.15). Their verifier rejects the
/// bpf_loop program outright: its callbacks are `BPF_PSEUDO_FUNC` references, which before
/// 5.13 do not count as subprograms, so the program's BTF func_info has more functions than
/// the verifier finds ("number of funcs in func_info doesn't match number of subprogs").
///
/// Here the same per-fd and per-path-step code runs in bounded loops (verified one
/// iteration at a time, 5.3+) of [`BOUNDED_CHUNK_FDS`] fds per program; each stage tail-calls
/// the next (4.2+); the walk stays in WALK between stages.
pub mod bounded {
    use aya_ebpf::{maps::ProgramArray, programs::RawTracePointContext};
    use fdaudit_common::{BOUNDED_CHUNK_FDS, BOUNDED_MAX_FDS};

    use super::*;

    /// Sets up the walk in the current exec's record; the caller
    /// tail-calls the first fd stage.
    #[inline(always)]
    pub fn start(rec: &mut SpawnRecord) {
        let _ = prepare(rec, BOUNDED_MAX_FDS);
        if rec.header.flags & flags::FDTABLE_TRUNCATED != 0 {
            // Cut at the bounded walk's limit, not at the bpf_loop walk's.
            rec.header.flags |= flags::BOUNDED_WALK;
        }
    }

    /// Looks at the next [`BOUNDED_CHUNK_FDS`] fds, then tail-calls itself for the next
    /// chunk or the path stage; sends the record itself if no tail call is left.
    #[inline(always)]
    pub fn fds_stage(ctx: &RawTracePointContext, chain: &ProgramArray) {
        let Some((rec, paths, walk)) = state() else {
            return;
        };
        let base = walk.next;
        let mut i = 0;
        while i < BOUNDED_CHUNK_FDS {
            let fd = base + i;
            if fd >= walk.nfds {
                break;
            }
            if bounded_walk_fd(u64::from(fd)) != 0 {
                walk.nfds = 0; // a read failed (flagged): stop
                break;
            }
            i += 1;
        }
        walk.next = base + BOUNDED_CHUNK_FDS;
        if walk.next < walk.nfds {
            // SAFETY: EXEC_CHAIN holds programs of this type, filled by the loader.
            unsafe { chain.tail_call(ctx, CHAIN_FDS) };
            // Out of tail calls.
            rec.header.flags |= flags::FDTABLE_TRUNCATED | flags::BOUNDED_WALK;
        }
        // SAFETY: as above.
        unsafe { chain.tail_call(ctx, CHAIN_PATHS) };
        if rec.npaths > 0 {
            rec.header.flags |= flags::PATH_PARTIAL;
        }
        crate::output_spawn(rec, paths);
    }

    /// Builds the queued paths, one bounded loop of PATH_STEPS steps per path, and sends
    /// the record.
    #[inline(always)]
    pub fn paths_stage() {
        let Some((rec, paths, _)) = state() else {
            return;
        };
        let steps = rec.npaths * PATH_STEPS;
        let mut i = 0;
        while i < MAX_PATHS as u32 * PATH_STEPS {
            if i >= steps {
                break;
            }
            bounded_path_step(u64::from(i));
            i += 1;
        }
        crate::output_spawn(rec, paths);
    }

    /// [`walk_fd`] as a global function. The verifier checks a global function once, on
    /// its own (5.6+), where it follows a static one into each iteration of the loop that
    /// calls it: this keeps the fd stage's verification to one step's instructions instead
    /// of [`BOUNDED_CHUNK_FDS`] of them (inlined code would be worse: LLVM unrolls the loop
    /// around it). Its one argument is a scalar, as 5.10's verifier requires of a global
    /// function's.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn bounded_walk_fd(index: u64) -> i64 {
        walk_fd(index, core::ptr::null_mut())
    }

    /// [`path_step`] as a global function, for the same reason as [`bounded_walk_fd`].
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn bounded_path_step(index: u64) -> i64 {
        path_step(index, core::ptr::null_mut())
    }
}

/// (fdt, max_fds) of the current task.
#[inline(always)]
fn current_fdt() -> Result<(u64, u32), i64> {
    let files: u64 = read_kernel(current_task() + conf!(task_files))?;
    let fdt: u64 = read_kernel(files + conf!(files_fdt))?;
    let max_fds: u32 = read_kernel(fdt + conf!(fdt_max_fds))?;
    Ok((fdt, max_fds))
}

/// bpf_loop callback: fd `index` of the table.
extern "C" fn walk_fd(index: u64, _ctx: *mut c_void) -> i64 {
    match state() {
        Some((rec, paths, walk)) => fd_step(index, rec, paths, walk),
        None => 1,
    }
}

/// Looks at fd `index`: reads a word of open_fds every 64 fds, records open fds from 3 up.
/// Non-zero when the walk must stop.
#[inline(always)]
fn fd_step(index: u64, rec: &mut SpawnRecord, paths: &mut PathsRecord, walk: &mut Walk) -> i64 {
    let bit = index % 64;
    if bit == 0 {
        match read_kernel::<u64>(walk.open_fds + (index / 64) * 8) {
            Ok(w) => walk.word = w,
            Err(_) => {
                rec.header.flags |= flags::READ_FAILED;
                return 1;
            }
        }
    }
    if (walk.word >> bit) & 1 == 0 {
        return 0; // closed
    }
    record_fd(rec, paths, walk, index as u32);
    0
}

/// Records an open fd: stdio in its own slots; a leaked fd (>= 3) in `fds`, with files
/// that have a name in the tree queued for a path. Stdio goes through the same fill_fd as
/// the others, so that the program holds it once: verifiers from 6.19 run a stack liveness
/// pass over every instruction of a program before verifying it, at a cost per instruction
/// 5 to 7 times what 6.12 spends verifying one (see README, Kernel matrix).
#[inline(always)]
fn record_fd(rec: &mut SpawnRecord, paths: &mut PathsRecord, walk: &mut Walk, fd: u32) {
    let stdio = fd < 3;
    let n = rec.nfds as usize;
    let slot = if stdio {
        &mut rec.stdio[fd as usize]
    } else {
        rec.nfds += 1;
        if n >= MAX_FDS {
            rec.header.flags |= flags::FDS_TRUNCATED;
            return;
        }
        &mut rec.fds[n & (MAX_FDS - 1)]
    };
    // The file's address, 0 when a read failed (a `Result` would be kept on the stack).
    let file = fill_fd(slot, walk.fd_array, fd).unwrap_or(0);
    // Opaque to LLVM, which would otherwise copy fill_fd into both arms of `stdio`.
    if core::hint::black_box(stdio) {
        if file != 0 {
            rec.stdio_mask |= 1 << fd;
        }
        return;
    }
    match file {
        0 => rec.header.flags |= flags::READ_FAILED,
        file => {
            let pseudo = slot.mode & S_IFMT == S_IFSOCK
                || (slot.mode & S_IFMT == S_IFIFO && slot.magic == fs_magic::PIPEFS)
                || slot.magic == fs_magic::ANON_INODE_FS
                || slot.mode & S_IFMT == 0;
            if !pseudo {
                let p = rec.npaths as usize;
                if p < MAX_PATHS {
                    walk.files[p & (MAX_PATHS - 1)] = file;
                    paths.paths[p & (MAX_PATHS - 1)].index = n as u32;
                    rec.npaths += 1;
                } else {
                    rec.header.flags |= flags::PATH_PARTIAL;
                }
            }
        }
    }
}

/// bpf_loop callback: step `index` of the path walks (PATH_STEPS per path).
extern "C" fn path_step(index: u64, _ctx: *mut c_void) -> i64 {
    if let Some((rec, paths, walk)) = state() {
        one_path_step(index, rec, paths, walk);
    }
    0
}

#[inline(always)]
fn one_path_step(index: u64, rec: &mut SpawnRecord, paths: &mut PathsRecord, walk: &mut Walk) {
    let i = ((index / u64::from(PATH_STEPS)) as usize) & (MAX_PATHS - 1);
    let first = index.is_multiple_of(u64::from(PATH_STEPS));
    let last = index % u64::from(PATH_STEPS) == u64::from(PATH_STEPS) - 1;
    let p = &mut paths.paths[i];
    if first {
        path_start(&mut walk.cursor, p, walk.files[i]);
    }
    path_step_once(&mut walk.cursor, p);
    if last && p.complete == 0 {
        rec.header.flags |= flags::PATH_PARTIAL;
    }
}

/// Starts the walk of `file`'s path into `p` (empty, not complete).
#[inline(always)]
pub fn path_start(walk: &mut PathCursor, p: &mut FdPath, file: u64) {
    p.depth = 0;
    p.complete = 0;
    walk.depth = 0;
    walk.done = u32::from(path_cursor_at(walk, file).is_err());
}

#[inline(always)]
fn path_cursor_at(walk: &mut PathCursor, file: u64) -> Result<(), i64> {
    walk.dentry = read_kernel(file + conf!(file_dentry))?;
    walk.vfsmnt = read_kernel(file + conf!(file_mnt))?;
    walk.mnt = walk.vfsmnt - conf!(mount_mnt);
    Ok(())
}

/// One step of the walk unless it is over; sets `done` when it is.
#[inline(always)]
pub fn path_step_once(walk: &mut PathCursor, p: &mut FdPath) {
    if walk.done == 0 {
        match path_one_step(walk, p) {
            Ok(true) => walk.done = 1,
            Ok(false) => {}
            Err(_) => walk.done = 1,
        }
    }
}

/// One step of the kernel's d_path(), bounded: record a name and go to the parent, or cross
/// from a mount's root to its mount point. Ok(true) when the walk is over.
#[inline(always)]
fn path_one_step(walk: &mut PathCursor, p: &mut FdPath) -> Result<bool, i64> {
    let parent: u64 = read_kernel(walk.dentry + conf!(dentry_parent))?;
    let root: u64 = read_kernel(walk.vfsmnt + conf!(vfsmount_root))?;
    if walk.dentry == root || walk.dentry == parent {
        let mnt_parent: u64 = read_kernel(walk.mnt + conf!(mount_parent))?;
        if mnt_parent == walk.mnt || walk.dentry != root {
            p.complete = 1; // the root of the root mount (or of a detached tree)
            return Ok(true);
        }
        walk.dentry = read_kernel(walk.mnt + conf!(mount_mountpoint))?;
        walk.mnt = mnt_parent;
        walk.vfsmnt = mnt_parent + conf!(mount_mnt);
        return Ok(false);
    }
    let d = walk.depth as usize;
    if d >= MAX_DEPTH {
        return Ok(true); // cut: complete stays 0
    }
    let name: u64 = read_kernel(walk.dentry + conf!(dentry_name))?;
    // SAFETY: bounded read of a kernel string.
    let len = unsafe {
        bpf_probe_read_kernel_str_bytes(name as *const u8, &mut p.comps[d & (MAX_DEPTH - 1)])
    }
    .map_err(|e| e as i64)?
    .len();
    walk.depth += 1;
    p.depth = walk.depth;
    if was_cut(name, len, COMP_LEN) {
        return Ok(true); // a component longer than its slot: cut, complete stays 0
    }
    walk.dentry = parent;
    Ok(false)
}

/// Fills `out` from the file at `fd`; returns the file's address.
#[inline(always)]
fn fill_fd(out: &mut FdInfo, fd_array: u64, fd: u32) -> Result<u64, i64> {
    out.fd = fd;
    out.mode = 0;
    // Volatile: LLVM would merge these adjacent stores into a call of the target's
    // byte-at-a-time memset, 20 iterations the verifier walks at every visit of the callback.
    // SAFETY: plain stores to fields of `out`.
    unsafe {
        core::ptr::write_volatile(&mut out.family, 0);
        core::ptr::write_volatile(&mut out.sock_type, 0);
        core::ptr::write_volatile(&mut out.ino, 0);
        core::ptr::write_volatile(&mut out.magic, 0);
    }
    out.fd_flags = 0;
    out.name[0] = 0;
    let file: u64 = read_kernel(fd_array + u64::from(fd) * 8)?;
    if file == 0 {
        return Err(-1);
    }
    out.f_flags = read_kernel(file + conf!(file_flags))?;
    let inode: u64 = read_kernel(file + conf!(file_inode))?;
    out.mode = u32::from(read_kernel::<u16>(inode + conf!(inode_mode))?);
    out.ino = read_kernel(inode + conf!(inode_ino))?;
    out.rdev = read_kernel(inode + conf!(inode_rdev))?;
    let sb: u64 = read_kernel(inode + conf!(inode_sb))?;
    out.magic = read_kernel(sb + conf!(sb_magic))?;
    out.dev = read_kernel(sb + conf!(sb_dev))?;
    let dentry: u64 = read_kernel(file + conf!(file_dentry))?;
    let name: u64 = read_kernel(dentry + conf!(dentry_name))?;
    // SAFETY: bounded read of a kernel string; failure is reported.
    let len = unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut out.name) }
        .map_err(|e| e as i64)?
        .len();
    if was_cut(name, len, NAME_LEN) {
        out.fd_flags |= fd_flags::NAME_CUT;
    }
    if read_kernel::<u32>(inode + conf!(inode_nlink)).is_ok_and(|n| n == 0) {
        out.fd_flags |= fd_flags::DELETED;
    }
    if out.mode & S_IFMT == S_IFSOCK {
        let sock: u64 = read_kernel(file + conf!(file_private))?;
        out.sock_type = read_kernel::<i16>(sock + conf!(socket_type))? as u16;
        let sk: u64 = read_kernel(sock + conf!(socket_sk))?;
        out.family = read_kernel(sk + conf!(sk_family))?;
    }
    Ok(file)
}

/// The current task's `struct file` at `fd`.
#[inline(always)]
pub fn current_file(fd: u32) -> Result<u64, i64> {
    let (fdt, max_fds) = current_fdt()?;
    if fd >= max_fds {
        return Err(-1);
    }
    let fd_array: u64 = read_kernel(fdt + conf!(fdt_fd))?;
    let file: u64 = read_kernel(fd_array + u64::from(fd) * 8)?;
    if file == 0 {
        return Err(-1);
    }
    Ok(file)
}

/// The current task's fd table: its size and its array of `struct file` pointers, read once
/// per program run and kept as plain numbers, so that a call that made several fds walks
/// the task's pointers once.
#[derive(Clone, Copy)]
pub struct FdTable {
    max_fds: u32,
    fd_array: u64,
}

impl FdTable {
    /// `task`'s (current's) table: task->files->fdt's `max_fds` and fd array as direct
    /// loads through the BTF-typed task pointer (bpf_get_current_task_btf, 5.11+; the
    /// offsets come from the read-only CONFIG, so the verifier knows them and checks each
    /// load against the kernel's types, a fault reading as 0); before 5.11
    /// (CONFIG.task_btf is NONE, a constant to the verifier, which then never visits the
    /// loads) probe-reads.
    #[inline(always)]
    pub fn of(task: Task) -> Result<Self, i64> {
        if conf!(task_btf) == u64::from(task_btf::NONE) {
            return Self::probed();
        }
        let (files_off, fdt_off, max_off, fd_off) = (
            conf!(task_files) as usize,
            conf!(files_fdt) as usize,
            conf!(fdt_max_fds) as usize,
            conf!(fdt_fd) as usize,
        );
        // SAFETY: current's task_struct, valid for this program run; every load is at a
        // BTF offset of the type it reads, which the verifier checks (faults read as 0).
        unsafe {
            let files = core::ptr::read_volatile(task.btf().add(files_off).cast::<*const u8>());
            let fdt = core::ptr::read_volatile(files.add(fdt_off).cast::<*const u8>());
            Ok(FdTable {
                max_fds: core::ptr::read_volatile(fdt.add(max_off).cast::<u32>()),
                fd_array: core::ptr::read_volatile(fdt.add(fd_off).cast::<u64>()),
            })
        }
    }

    /// The current task's table by probe-reads (four helper calls). For a program whose
    /// verification is its start-up's cost (`--origin`'s sys_exit): each pointer load through
    /// the BTF task pointer has the verifier search the kernel's BTF by name (whether the
    /// member is a trusted one), some milliseconds per load instruction.
    #[inline(always)]
    pub fn probed() -> Result<Self, i64> {
        let (fdt, max_fds) = current_fdt()?;
        let fd_array: u64 = read_kernel(fdt + conf!(fdt_fd))?;
        Ok(FdTable { max_fds, fd_array })
    }

    /// The `struct file` at `fd` (one probe-read of the slot). `fd` is checked against
    /// `max_fds`: recvmsg's fds are read back from user memory, which the process may
    /// have rewritten.
    #[inline(always)]
    pub fn file(self, fd: u32) -> Result<u64, i64> {
        if fd >= self.max_fds {
            return Err(-1);
        }
        let file: u64 = read_kernel(self.fd_array + u64::from(fd) * 8)?;
        if file == 0 {
            return Err(-1);
        }
        Ok(file)
    }
}

/// The `struct file` at `fd` of `task` (current): on `--reads`'s every read().
#[inline(always)]
pub fn task_file(task: Task, fd: u32) -> Result<u64, i64> {
    FdTable::of(task)?.file(fd)
}

/// Whether `fd` is a procfs "fd" directory (/proc/<pid>/fd) read from its start.
#[inline(always)]
pub fn is_procfd_listing(fd: u32) -> Result<bool, i64> {
    let file = current_file(fd)?;
    let pos: i64 = read_kernel(file + conf!(file_pos))?;
    if pos != 0 {
        return Ok(false);
    }
    let inode: u64 = read_kernel(file + conf!(file_inode))?;
    let sb: u64 = read_kernel(inode + conf!(inode_sb))?;
    if read_kernel::<u64>(sb + conf!(sb_magic))? != fs_magic::PROC_SUPER {
        return Ok(false);
    }
    let dentry: u64 = read_kernel(file + conf!(file_dentry))?;
    let name: u64 = read_kernel(dentry + conf!(dentry_name))?;
    let mut buf = [0u8; 4];
    // SAFETY: bounded read of a kernel string.
    let n = unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut buf) }
        .map_err(|e| e as i64)?
        .len();
    Ok(n == 2 && buf[0] == b'f' && buf[1] == b'd')
}

/// (inode number, superblock magic, mode) of an open file, to name it after its reader is
/// gone.
#[inline(always)]
pub fn file_identity(file: u64) -> Result<(u64, u64, u32), i64> {
    let inode: u64 = read_kernel(file + conf!(file_inode))?;
    let ino = read_kernel(inode + conf!(inode_ino))?;
    let mode = u32::from(read_kernel::<u16>(inode + conf!(inode_mode))?);
    let sb: u64 = read_kernel(inode + conf!(inode_sb))?;
    let magic = read_kernel(sb + conf!(sb_magic))?;
    Ok((ino, magic, mode))
}
