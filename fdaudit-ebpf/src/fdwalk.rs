//! Walks the current task's fd table (task->files->fdt) right after exec.
//!
//! The table is walked one 64-fd word of `open_fds` at a time under bpf_loop (kernel 5.17+),
//! so a table of 2^20 fds costs one helper call per word, and empty words cost nothing more.

use core::ffi::c_void;

use aya_ebpf::helpers::{bpf_loop, bpf_probe_read_kernel_str_bytes};
use fdaudit_common::{flags, FdInfo, SpawnRecord, MAX_FDS, MAX_FD_WORDS};

use crate::kernel::{conf, current_task, read_kernel};

const S_IFMT: u32 = 0o170000;
const S_IFSOCK: u32 = 0o140000;

struct Walk {
    rec: *mut SpawnRecord,
    open_fds: u64,
    fd_array: u64,
}

/// Fills `rec.fds`, `rec.nfds`, `rec.stdio` and `rec.stdio_mask` from the current fd table.
#[inline(always)]
pub fn walk_fds(rec: &mut SpawnRecord) {
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
    let mut words = max_fds.div_ceil(64);
    if words > MAX_FD_WORDS {
        words = MAX_FD_WORDS;
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
    let mut walk = Walk {
        rec: rec as *mut SpawnRecord,
        open_fds,
        fd_array,
    };
    // SAFETY: the callback only dereferences `walk`, which outlives the call.
    unsafe {
        bpf_loop(
            words,
            walk_word as *mut c_void,
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

extern "C" fn walk_word(index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the `Walk` passed to bpf_loop by walk_fds.
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    // SAFETY: the record lives in the SCRATCH map for the whole program run.
    let rec = unsafe { &mut *walk.rec };
    let Ok(mut word) = read_kernel::<u64>(walk.open_fds + index * 8) else {
        rec.header.flags |= flags::READ_FAILED;
        return 1;
    };
    if index == 0 {
        word &= !7; // stdio was recorded by walk_fds
    }
    if word == 0 {
        return 0;
    }
    let mut bit = 0u32;
    while bit < 64 {
        if (word >> bit) & 1 != 0 {
            let fd = (index as u32) * 64 + bit;
            record_fd(rec, walk.fd_array, fd);
        }
        bit += 1;
    }
    0
}

/// Records a leaked fd (>= 3).
#[inline(always)]
fn record_fd(rec: &mut SpawnRecord, fd_array: u64, fd: u32) {
    let n = rec.nfds as usize;
    rec.nfds += 1;
    if n >= MAX_FDS {
        rec.header.flags |= flags::FDS_TRUNCATED;
        return;
    }
    let slot = &mut rec.fds[n & (MAX_FDS - 1)];
    if fill_fd(slot, fd_array, fd).is_err() {
        rec.header.flags |= flags::READ_FAILED;
    }
}

#[inline(always)]
fn fill_fd(out: &mut FdInfo, fd_array: u64, fd: u32) -> Result<(), i64> {
    out.fd = fd;
    out.mode = 0;
    out.family = 0;
    out.sock_type = 0;
    out.ino = 0;
    out.magic = 0;
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
    unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut out.name) }
        .map_err(|e| e as i64)?;
    if out.mode & S_IFMT == S_IFSOCK {
        let sock: u64 = read_kernel(file + conf!(file_private))?;
        out.sock_type = read_kernel::<i16>(sock + conf!(socket_type))? as u16;
        let sk: u64 = read_kernel(sock + conf!(socket_sk))?;
        out.family = read_kernel(sk + conf!(sk_family))?;
    }
    Ok(())
}

/// (inode number, superblock magic, mode) of the current task's `fd`, to name the file
/// after its reader is gone.
#[inline(always)]
pub fn fd_file(fd: u32) -> Result<(u64, u64, u32), i64> {
    let (fdt, max_fds) = current_fdt()?;
    if fd >= max_fds {
        return Err(-1);
    }
    let fd_array: u64 = read_kernel(fdt + conf!(fdt_fd))?;
    let file: u64 = read_kernel(fd_array + u64::from(fd) * 8)?;
    let inode: u64 = read_kernel(file + conf!(file_inode))?;
    let ino = read_kernel(inode + conf!(inode_ino))?;
    let mode = u32::from(read_kernel::<u16>(inode + conf!(inode_mode))?);
    let sb: u64 = read_kernel(inode + conf!(inode_sb))?;
    let magic = read_kernel(sb + conf!(sb_magic))?;
    Ok((ino, magic, mode))
}
