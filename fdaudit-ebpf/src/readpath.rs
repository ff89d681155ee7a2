//! `--reads`: the path of a file read a byte at a time, walked while the file is open.
//!
//! A storm's process often exits before fdaudit reports (`python3 -c` reading 500 bytes one
//! at a time is gone in milliseconds), and then /proc can no longer name what it read. So
//! when a read counter reaches [`STORM_MIN_SMALL_READS`], the reading program walks the
//! file's path (the same bounded steps as a leaked fd's, [`fdwalk::path_step_once`]) into
//! READ_PATHS: once per storm, never on the hot path of ordinary reads.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use fdaudit_common::{fs_magic, FdPath, ReadKey, ReadStat, STORM_MIN_SMALL_READS};

use crate::{
    fdwalk::{self, PathCursor, PATH_STEPS},
    READ_PATHS,
};

const S_IFMT: u32 = 0o170000;
const S_IFSOCK: u32 = 0o140000;
const S_IFIFO: u32 = 0o010000;

/// A path walk in map memory: an FdPath is ~780 bytes, more than the stack holds.
#[repr(C)]
pub struct ReadWalk {
    cursor: PathCursor,
    path: FdPath,
}

#[map]
static READ_WALK: PerCpuArray<ReadWalk> = PerCpuArray::with_max_entries(1, 0);

/// After a read that made `stat` (the counter of `key`) a storm: walks the path of `file`
/// into READ_PATHS. Pipes, sockets and anonymous inodes are named by inode in user space.
#[inline(always)]
pub fn name_if_storm(key: &ReadKey, stat: &ReadStat, file: u64) {
    if stat.tiny_calls != STORM_MIN_SMALL_READS {
        return;
    }
    let pseudo = stat.mode & S_IFMT == S_IFSOCK
        || (stat.mode & S_IFMT == S_IFIFO && stat.magic == fs_magic::PIPEFS)
        || stat.magic == fs_magic::ANON_INODE_FS
        || stat.mode & S_IFMT == 0;
    if pseudo {
        return;
    }
    let Some(w) = READ_WALK.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: pointer from a per-CPU array lookup, valid for this program run; no reference
    // to it is held across the step calls, which take their own.
    unsafe {
        (*w).path.index = stat.fd;
        fdwalk::path_start(&mut (*w).cursor, &mut (*w).path, file);
    }
    let mut i = 0;
    while i < PATH_STEPS {
        // A call, not inlined code: LLVM would unroll the loop around it (see fdwalk).
        if read_path_step() != 0 {
            break;
        }
        i += 1;
    }
    if let Some(w) = READ_WALK.get_ptr(0) {
        // By reference: by value, the 784-byte path would be copied onto the 512-byte stack.
        // SAFETY: as above; the value is copied into the map.
        #[allow(clippy::needless_borrows_for_generic_args)]
        let _ = READ_PATHS.insert(key, unsafe { &(*w).path }, 0);
    }
}

/// One step of the read path walk; non-zero when it is over.
#[inline(never)]
fn read_path_step() -> i64 {
    let Some(w) = READ_WALK.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: as in name_if_storm.
    let w = unsafe { &mut *w };
    fdwalk::path_step_once(&mut w.cursor, &mut w.path);
    i64::from(w.cursor.done)
}
