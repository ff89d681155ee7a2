//! A process's credentials, namespaces and root, read in the kernel at exec (and at a fork
//! whose parent's image is not known: a tree's root not seen exec'ing, an untraced parent):
//! a spawn whose exec'd image differs from the last exec'd image in its ancestry crossed a
//! privilege, namespace or root boundary (`boundary` in the spawn record; issues #22, #37).

/// Bits of [`CredNs::read`]: which groups of fields the kernel program could read.
pub mod read {
    /// Real, effective and saved uid and gid.
    pub const IDS: u32 = 1 << 0;
    /// Effective and permitted capabilities.
    pub const CAPS: u32 = 1 << 1;
    /// The no_new_privs bit.
    pub const NO_NEW_PRIVS: u32 = 1 << 2;
    pub const MNT_NS: u32 = 1 << 3;
    pub const PID_NS: u32 = 1 << 4;
    pub const USER_NS: u32 = 1 << 5;
    pub const NET_NS: u32 = 1 << 6;
    pub const CGROUP_NS: u32 = 1 << 7;
    /// The cgroup v2 id (bpf_get_current_cgroup_id).
    pub const CGROUP: u32 = 1 << 8;
    /// The root directory (fs->root: chroot, pivot_root): its inode and device.
    pub const ROOT: u32 = 1 << 9;
}

/// What a process runs as and in. Namespaces are their inode numbers (what
/// `/proc/PID/ns/*` links name), the cgroup is its cgroup2 id (the directory's inode), the
/// root its directory's inode and superblock device (what `/proc/PID/root` names).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CredNs {
    /// [`read`] bits of the fields below that hold what the kernel said (0: not read).
    pub read: u32,
    pub uid: u32,
    pub euid: u32,
    pub suid: u32,
    pub gid: u32,
    pub egid: u32,
    pub sgid: u32,
    /// 1 when the task has no_new_privs set.
    pub no_new_privs: u32,
    pub cap_effective: u64,
    pub cap_permitted: u64,
    pub mnt_ns: u32,
    pub pid_ns: u32,
    pub user_ns: u32,
    pub net_ns: u32,
    pub cgroup_ns: u32,
    pub _pad: u32,
    pub cgroup: u64,
    /// fs->root.dentry->d_inode->i_ino.
    pub root_ino: u64,
    /// ->i_sb->s_dev of the same inode (kernel encoding: major << 20 | minor).
    pub root_dev: u32,
    pub _pad2: u32,
}

const _: () = assert!(core::mem::size_of::<CredNs>() == 96);

/// Offsets (from BTF) the programs read [`CredNs`] through, in [`crate::Config::credns`];
/// [`crate::NO_OFFSET`] where the running kernel lacks the member (that group is not read).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CredNsOffsets {
    /// task_struct->cred (the subjective credentials exec installed).
    pub task_cred: u32,
    pub cred_uid: u32,
    pub cred_euid: u32,
    pub cred_suid: u32,
    pub cred_gid: u32,
    pub cred_egid: u32,
    pub cred_sgid: u32,
    pub cred_cap_effective: u32,
    pub cred_cap_permitted: u32,
    pub cred_user_ns: u32,
    /// user_namespace->ns.inum.
    pub user_ns_inum: u32,
    /// task_struct->atomic_flags (PFA_NO_NEW_PRIVS is bit 0).
    pub task_atomic_flags: u32,
    pub task_nsproxy: u32,
    pub nsproxy_mnt_ns: u32,
    pub nsproxy_net_ns: u32,
    pub nsproxy_cgroup_ns: u32,
    /// mnt_namespace->ns.inum, net->ns.inum, cgroup_namespace->ns.inum.
    pub mnt_ns_inum: u32,
    pub net_ns_inum: u32,
    pub cgroup_ns_inum: u32,
    /// The active pid namespace: task->thread_pid->numbers[level].ns->ns.inum.
    pub task_thread_pid: u32,
    pub pid_level: u32,
    pub pid_numbers: u32,
    /// sizeof(struct upid).
    pub upid_size: u32,
    pub upid_ns: u32,
    pub pid_ns_inum: u32,
    /// task_struct->fs, fs_struct->root.dentry, dentry->d_inode: the root directory's inode
    /// (its number and device through `Config::inode_ino`, `inode_sb` and `sb_dev`).
    pub task_fs: u32,
    pub fs_root_dentry: u32,
    pub dentry_inode: u32,
}

impl CredNsOffsets {
    pub const ZEROED: CredNsOffsets = CredNsOffsets {
        task_cred: 0,
        cred_uid: 0,
        cred_euid: 0,
        cred_suid: 0,
        cred_gid: 0,
        cred_egid: 0,
        cred_sgid: 0,
        cred_cap_effective: 0,
        cred_cap_permitted: 0,
        cred_user_ns: 0,
        user_ns_inum: 0,
        task_atomic_flags: 0,
        task_nsproxy: 0,
        nsproxy_mnt_ns: 0,
        nsproxy_net_ns: 0,
        nsproxy_cgroup_ns: 0,
        mnt_ns_inum: 0,
        net_ns_inum: 0,
        cgroup_ns_inum: 0,
        task_thread_pid: 0,
        pid_level: 0,
        pid_numbers: 0,
        upid_size: 0,
        upid_ns: 0,
        pid_ns_inum: 0,
        task_fs: 0,
        fs_root_dentry: 0,
        dentry_inode: 0,
    };
}
