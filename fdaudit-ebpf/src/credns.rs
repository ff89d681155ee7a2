//! Credentials, namespaces and root of a task ([`CredNs`]), read at exec (the new image's)
//! and at a fork whose parent's image is not known yet, so that userspace can tell a spawn
//! that crossed a privilege, namespace or root boundary. Every offset comes from BTF through
//! `Config::credns`; a group whose offsets the kernel lacks ([`NO_OFFSET`]) or whose read
//! faults is left out of `read`.

use aya_ebpf::helpers::bpf_get_current_cgroup_id;
use fdaudit_common::{credns::read as bit, CredNs, NO_OFFSET};

use crate::kernel::{conf, read_kernel};

/// Whether a group's first offset is known (userspace sets it to [`NO_OFFSET`] when any
/// member of the group is missing from the kernel's BTF).
#[inline(always)]
fn known(gate: u64) -> bool {
    gate != NO_OFFSET as u64
}

/// `ptr + off`, then the u32 at `+ inum` of what that points to: a namespace's ns.inum.
#[inline(always)]
fn ns_inum(ptr: u64, off: u64, inum: u64) -> Result<u32, i64> {
    let ns: u64 = read_kernel(ptr + off)?;
    read_kernel(ns + inum)
}

/// Fills `out` with the current task's credentials and namespaces (`task` is current: the
/// cgroup comes from the helper, which reads current only).
#[inline(always)]
pub fn read_current(task: u64, out: &mut CredNs) {
    out.read = 0;
    read_creds(task, out);
    read_namespaces(task, out);
    read_root(task, out);
    // SAFETY: the helper only reads current's css_set (since 4.18).
    out.cgroup = unsafe { bpf_get_current_cgroup_id() };
    if out.cgroup != 0 {
        out.read |= bit::CGROUP;
    }
}

// struct cred (include/linux/cred.h): kuid_t/kgid_t are one u32; kernel_cap_t is 8 bytes
// (a u64 since 6.3, two u32 words before, low word first: the same little-endian mask).
#[inline(always)]
fn read_creds(task: u64, out: &mut CredNs) {
    if !known(conf!(credns.task_cred)) {
        return;
    }
    let Ok(cred) = read_kernel::<u64>(task + conf!(credns.task_cred)) else {
        return;
    };
    let ids = (|| -> Result<(), i64> {
        out.uid = read_kernel(cred + conf!(credns.cred_uid))?;
        out.euid = read_kernel(cred + conf!(credns.cred_euid))?;
        out.suid = read_kernel(cred + conf!(credns.cred_suid))?;
        out.gid = read_kernel(cred + conf!(credns.cred_gid))?;
        out.egid = read_kernel(cred + conf!(credns.cred_egid))?;
        out.sgid = read_kernel(cred + conf!(credns.cred_sgid))?;
        Ok(())
    })();
    if ids.is_ok() {
        out.read |= bit::IDS;
    }
    let caps = (|| -> Result<(), i64> {
        out.cap_effective = read_kernel(cred + conf!(credns.cred_cap_effective))?;
        out.cap_permitted = read_kernel(cred + conf!(credns.cred_cap_permitted))?;
        Ok(())
    })();
    if caps.is_ok() {
        out.read |= bit::CAPS;
    }
    if let Ok(inum) = ns_inum(cred, conf!(credns.cred_user_ns), conf!(credns.user_ns_inum)) {
        out.user_ns = inum;
        out.read |= bit::USER_NS;
    }
    // PFA_NO_NEW_PRIVS is bit 0 of task_struct->atomic_flags (include/linux/sched.h).
    if let Ok(f) = read_kernel::<u64>(task + conf!(credns.task_atomic_flags)) {
        out.no_new_privs = (f & 1) as u32;
        out.read |= bit::NO_NEW_PRIVS;
    }
}

// struct nsproxy (include/linux/nsproxy.h) and the active pid namespace, which is not the
// nsproxy's pid_ns_for_children but task_active_pid_ns(): thread_pid->numbers[level].ns.
#[inline(always)]
fn read_namespaces(task: u64, out: &mut CredNs) {
    if !known(conf!(credns.task_nsproxy)) {
        return;
    }
    if let Ok(nsproxy) = read_kernel::<u64>(task + conf!(credns.task_nsproxy)) {
        if let Ok(i) = ns_inum(
            nsproxy,
            conf!(credns.nsproxy_mnt_ns),
            conf!(credns.mnt_ns_inum),
        ) {
            out.mnt_ns = i;
            out.read |= bit::MNT_NS;
        }
        if let Ok(i) = ns_inum(
            nsproxy,
            conf!(credns.nsproxy_net_ns),
            conf!(credns.net_ns_inum),
        ) {
            out.net_ns = i;
            out.read |= bit::NET_NS;
        }
        if let Ok(i) = ns_inum(
            nsproxy,
            conf!(credns.nsproxy_cgroup_ns),
            conf!(credns.cgroup_ns_inum),
        ) {
            out.cgroup_ns = i;
            out.read |= bit::CGROUP_NS;
        }
    }
    let pid_ns = (|| -> Result<u32, i64> {
        let pid: u64 = read_kernel(task + conf!(credns.task_thread_pid))?;
        let level: u32 = read_kernel(pid + conf!(credns.pid_level))?;
        // A pid namespace is at most 32 levels deep (MAX_PID_NS_LEVEL).
        let upid =
            pid + conf!(credns.pid_numbers) + u64::from(level.min(32)) * conf!(credns.upid_size);
        ns_inum(upid, conf!(credns.upid_ns), conf!(credns.pid_ns_inum))
    })();
    if let Ok(i) = pid_ns {
        out.pid_ns = i;
        out.read |= bit::PID_NS;
    }
}

// struct fs_struct (include/linux/fs_struct.h): root is the struct path chroot(2) and
// pivot_root(2) set (set_fs_root), read here without fs->seq: a thread of the task that
// chroots at this moment may give the old root or the new one, either a real one.
#[inline(always)]
fn read_root(task: u64, out: &mut CredNs) {
    if !known(conf!(credns.task_fs)) {
        return;
    }
    let root = (|| -> Result<(u64, u32), i64> {
        let fs: u64 = read_kernel(task + conf!(credns.task_fs))?;
        let dentry: u64 = read_kernel(fs + conf!(credns.fs_root_dentry))?;
        let inode: u64 = read_kernel(dentry + conf!(credns.dentry_inode))?;
        let sb: u64 = read_kernel(inode + conf!(inode_sb))?;
        Ok((
            read_kernel(inode + conf!(inode_ino))?,
            read_kernel(sb + conf!(sb_dev))?,
        ))
    })();
    if let Ok((ino, dev)) = root {
        out.root_ino = ino;
        out.root_dev = dev;
        out.read |= bit::ROOT;
    }
}
