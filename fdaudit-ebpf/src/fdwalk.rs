//! Walks the current task's fd table (task->files->fdt) right after exec.
//!
//! The table is walked one 64-fd word of `open_fds` at a time under bpf_loop (kernel 5.17+),
//! so a table of 2^20 fds costs one helper call per word, and empty words cost nothing more.

use core::ffi::c_void;

use aya_ebpf::helpers::{bpf_loop, bpf_probe_read_kernel_str_bytes};
use fdaudit_common::{
    fd_flags, flags, fs_magic, FdInfo, FdPath, PathsRecord, SpawnRecord, COMP_LEN, MAX_DEPTH,
    MAX_FDS, MAX_FD_WORDS, MAX_PATHS, NAME_LEN,
};

use crate::kernel::{conf, current_task, read_kernel, was_cut};

const S_IFMT: u32 = 0o170000;
const S_IFSOCK: u32 = 0o140000;
const S_IFIFO: u32 = 0o010000;

struct Walk {
    rec: *mut SpawnRecord,
    paths: *mut PathsRecord,
    open_fds: u64,
    fd_array: u64,
    /// Files whose paths are built after the walk.
    files: [u64; MAX_PATHS],
    /// The open_fds word of the fd being looked at.
    word: u64,
    /// Path walk state: where the walk of the current path is.
    dentry: u64,
    vfsmnt: u64,
    mnt: u64,
    depth: u32,
    done: u32,
}

/// Steps each path walk may take: a component or a mount crossing per step.
const PATH_STEPS: u32 = MAX_DEPTH as u32 + 8;

/// Fills `rec.fds`, `rec.nfds`, `rec.stdio` and `rec.stdio_mask` from the current fd table,
/// and `paths.paths[..rec.npaths]` with the paths of the first leaked files.
#[inline(always)]
pub fn walk_fds(rec: &mut SpawnRecord, paths: &mut PathsRecord) {
    rec.nfds = 0;
    rec.stdio_mask = 0;
    let Ok((fdt, max_fds)) = current_fdt() else {
        rec.header.flags |= flags::READ_FAILED;
        return;
    };
    let (Ok(open_fds), Ok(fd_array)) = (
        read_kernel::<u64>(fdt + conf!(fdt_open_fds)),
        read_kernel::<u64>(fdt + conf!(fdt_fd)),
    ) else {
        rec.header.flags |= flags::READ_FAILED;
        return;
    };
    let mut nfds = max_fds;
    if nfds > MAX_FD_WORDS * 64 {
        nfds = MAX_FD_WORDS * 64;
        rec.header.flags |= flags::FDTABLE_TRUNCATED;
    }
    // Stdio first, with constant indices (the verifier wants provable bounds).
    if let Ok(word0) = read_kernel::<u64>(open_fds) {
        if word0 & 1 != 0 && fill_fd(&mut rec.stdio[0], fd_array, 0).is_ok() {
            rec.stdio_mask |= 1;
        }
        if word0 & 2 != 0 && fill_fd(&mut rec.stdio[1], fd_array, 1).is_ok() {
            rec.stdio_mask |= 2;
        }
        if word0 & 4 != 0 && fill_fd(&mut rec.stdio[2], fd_array, 2).is_ok() {
            rec.stdio_mask |= 4;
        }
    }
    rec.npaths = 0;
    let mut walk = Walk {
        rec: rec as *mut SpawnRecord,
        paths: paths as *mut PathsRecord,
        open_fds,
        fd_array,
        files: [0; MAX_PATHS],
        word: 0,
        dentry: 0,
        vfsmnt: 0,
        mnt: 0,
        depth: 0,
        done: 0,
    };
    // SAFETY: the callbacks only dereference `walk`, which outlives the calls.
    unsafe {
        // One callback per fd of the table (max_fds is the table's allocated size, 64..1024
        // for most processes, not RLIMIT_NOFILE); a word of open_fds is read every 64.
        bpf_loop(
            nfds,
            walk_fd as *mut c_void,
            &mut walk as *mut Walk as *mut c_void,
            0,
        );
        // Paths: one flat loop of PATH_STEPS steps per path (no nested loops: the verifier
        // checks each callback once).
        let n = (*walk.rec).npaths;
        bpf_loop(
            n * PATH_STEPS,
            path_step as *mut c_void,
            &mut walk as *mut Walk as *mut c_void,
            0,
        );
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

extern "C" fn walk_fd(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` passed to bpf_loop by walk_fds.
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    let bit = index % 64;
    if bit == 0 {
        match read_kernel::<u64>(walk.open_fds + (index / 64) * 8) {
            Ok(w) => walk.word = w,
            Err(_) => {
                // SAFETY: the record lives in the SCRATCH map for the whole program run.
                unsafe { (*walk.rec).header.flags |= flags::READ_FAILED };
                return 1;
            }
        }
    }
    if index < 3 || (walk.word >> bit) & 1 == 0 {
        return 0; // stdio was recorded by walk_fds; closed fds are skipped
    }
    // SAFETY: as above.
    let rec = unsafe { &mut *walk.rec };
    record_fd(rec, walk, index as u32);
    0
}

/// Records a leaked fd (>= 3), and queues files with a name in the tree for a path.
#[inline(always)]
fn record_fd(rec: &mut SpawnRecord, walk: &mut Walk, fd: u32) {
    let n = rec.nfds as usize;
    rec.nfds += 1;
    if n >= MAX_FDS {
        rec.header.flags |= flags::FDS_TRUNCATED;
        return;
    }
    let slot = &mut rec.fds[n & (MAX_FDS - 1)];
    match fill_fd(slot, walk.fd_array, fd) {
        Ok(file) => {
            let pseudo = slot.mode & S_IFMT == S_IFSOCK
                || (slot.mode & S_IFMT == S_IFIFO && slot.magic == fs_magic::PIPEFS)
                || slot.magic == fs_magic::ANON_INODE_FS
                || slot.mode & S_IFMT == 0;
            if !pseudo {
                let p = rec.npaths as usize;
                if p < MAX_PATHS {
                    walk.files[p & (MAX_PATHS - 1)] = file;
                    // SAFETY: the paths record lives in the SCRATCH map for the program run.
                    unsafe { (*walk.paths).paths[p & (MAX_PATHS - 1)].index = n as u32 };
                    rec.npaths += 1;
                } else {
                    rec.header.flags |= flags::PATH_PARTIAL;
                }
            }
        }
        Err(_) => rec.header.flags |= flags::READ_FAILED,
    }
}

extern "C" fn path_step(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` passed to bpf_loop by walk_fds.
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    // SAFETY: the record lives in the SCRATCH map for the whole program run.
    let rec = unsafe { &mut *walk.rec };
    let i = ((index / u64::from(PATH_STEPS)) as usize) & (MAX_PATHS - 1);
    let first = index.is_multiple_of(u64::from(PATH_STEPS));
    let last = index % u64::from(PATH_STEPS) == u64::from(PATH_STEPS) - 1;
    // SAFETY: as above.
    let p = unsafe { &mut (*walk.paths).paths[i] };
    if first {
        p.depth = 0;
        p.complete = 0;
        walk.depth = 0;
        walk.done = 0;
        if path_start(walk, walk.files[i]).is_err() {
            walk.done = 1;
        }
    }
    if walk.done == 0 {
        match path_one_step(walk, p) {
            Ok(true) => walk.done = 1,
            Ok(false) => {}
            Err(_) => walk.done = 1,
        }
    }
    if last && p.complete == 0 {
        rec.header.flags |= flags::PATH_PARTIAL;
    }
    0
}

#[inline(always)]
fn path_start(walk: &mut Walk, file: u64) -> Result<(), i64> {
    walk.dentry = read_kernel(file + conf!(file_dentry))?;
    walk.vfsmnt = read_kernel(file + conf!(file_mnt))?;
    walk.mnt = walk.vfsmnt - conf!(mount_mnt);
    Ok(())
}

/// One step of the kernel's d_path(), bounded: record a name and go to the parent, or cross
/// from a mount's root to its mount point. Ok(true) when the walk is over.
#[inline(always)]
fn path_one_step(walk: &mut Walk, p: &mut FdPath) -> Result<bool, i64> {
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
    out.family = 0;
    out.sock_type = 0;
    out.ino = 0;
    out.magic = 0;
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

/// The current task's `struct file` at `fd`, where `fd` was just used successfully (so it
/// is inside the table): task->files->fdt->fd as direct loads through the BTF-typed task
/// pointer (bpf_get_current_task_btf, 5.11+; the offsets come from the read-only CONFIG, so
/// the verifier knows them and checks each load against the kernel's types), then one
/// probe-read of the slot. On the `--reads` path, where it runs for every read().
#[inline(always)]
pub fn current_file_of_used_fd(fd: u32) -> Result<u64, i64> {
    let (files_off, fdt_off, fd_off) = (
        conf!(task_files) as usize,
        conf!(files_fdt) as usize,
        conf!(fdt_fd) as usize,
    );
    // SAFETY: current's task_struct, valid for this program run; every load is at a BTF
    // offset of the type it reads, which the verifier checks (faults read as 0).
    let fd_array = unsafe {
        let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
        let files = core::ptr::read_volatile(task.add(files_off).cast::<*const u8>());
        let fdt = core::ptr::read_volatile(files.add(fdt_off).cast::<*const u8>());
        core::ptr::read_volatile(fdt.add(fd_off).cast::<u64>())
    };
    let file: u64 = read_kernel(fd_array + u64::from(fd) * 8)?;
    if file == 0 {
        return Err(-1);
    }
    Ok(file)
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
