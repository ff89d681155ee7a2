//! The kernel offsets and run options userspace passes to the programs.

/// Kernel struct offsets (bytes) read from /sys/kernel/btf/vmlinux at load time, plus run
/// options. Passed to the programs as the global [`GLOBAL_CONFIG`](crate::GLOBAL_CONFIG).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_files: u32,
    pub task_mm: u32,
    pub task_comm: u32,
    pub task_signal: u32,
    pub task_exit_code: u32,
    pub signal_live: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    pub fdt_open_fds: u32,
    pub file_inode: u32,
    pub file_flags: u32,
    pub file_dentry: u32,
    pub file_private: u32,
    pub dentry_name: u32,
    pub inode_mode: u32,
    pub inode_ino: u32,
    pub inode_sb: u32,
    pub inode_rdev: u32,
    pub sb_magic: u32,
    pub sb_dev: u32,
    pub socket_sk: u32,
    pub socket_type: u32,
    pub sk_family: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    pub bprm_filename: u32,
    /// pt_regs offsets of the first three syscall arguments at syscall entry (x86_64: di,
    /// si, dx; aarch64: regs[0..3]).
    pub regs_arg0: u32,
    pub regs_arg1: u32,
    pub regs_arg2: u32,
    /// pt_regs offset of the syscall number (x86_64: orig_ax, 8 bytes; aarch64: syscallno,
    /// 4 bytes).
    pub regs_nr: u32,
    /// pt_regs offset of the first argument at syscall exit, where aarch64 has overwritten
    /// x0 with the return value (x86_64: di; aarch64: orig_x0).
    pub regs_exit_arg0: u32,
    /// `HOT` array size - 1.
    pub hot_mask: u32,
    pub file_mnt: u32,
    pub file_pos: u32,
    pub dentry_parent: u32,
    pub vfsmount_root: u32,
    pub mount_mnt: u32,
    pub mount_parent: u32,
    pub mount_mountpoint: u32,
    /// Non-zero: count reads per fd (`trace --reads`).
    pub reads: u32,
    /// `thread_info.status` in task_struct ([`NO_OFFSET`] where the kernel has no compat
    /// syscalls to tell apart).
    pub task_ti_status: u32,
    /// pt_regs bx and cx: a compat syscall's first two arguments ([`NO_OFFSET`] off x86).
    pub regs_bx: u32,
    pub regs_cx: u32,
    /// inode->__i_nlink: 0 for a deleted file.
    pub inode_nlink: u32,
    /// task_struct->self_exec_id and ->parent_exec_id: a forked child starts with both
    /// equal and every exec increments the first, so an exit can tell that the process
    /// exec'd although the exec program did not run (the kernel skipped it).
    pub task_self_exec_id: u32,
    pub task_parent_exec_id: u32,
    /// [`CONFIG_MAGIC`] once userspace filled the config; the programs count nothing while
    /// it is anything else (zero: the loader did not set the global).
    pub magic: u32,
    /// `trace --cgroup`: depth of the followed cgroup below the cgroup2 root (root = 0).
    pub cgroup_level: u32,
    /// Which BTF-typed task helpers the programs may call ([`task_btf`]): from
    /// bpf_get_current_task_btf (5.11+) the compat check and the mm's fields are direct
    /// loads, from bpf_task_pt_regs (5.15+) the syscall's saved registers too; below, each
    /// is a probe-read. Also keeps `cgroup_id` 8-aligned.
    pub task_btf: u32,
    /// `trace --cgroup`: id of the followed cgroup, 0 to follow only the tracked trees. A
    /// process whose ancestor at `cgroup_level` is this cgroup is traced at its fork or exec.
    pub cgroup_id: u64,
    /// Non-zero: `trace --origin` runs (its own programs are attached; no program reads
    /// this word, the loader sizes the origin maps by it).
    pub origin: u32,
    /// pt_regs offset of the fourth syscall argument (x86_64: r10; aarch64: regs[3]).
    pub regs_arg3: u32,
    /// pt_regs offset of the user stack pointer (x86_64: sp; aarch64: sp).
    pub regs_sp: u32,
    /// mm_struct->start_code and ->end_code: the main executable's text (`--origin`).
    pub mm_start_code: u32,
    pub mm_end_code: u32,
    /// pt_regs offset of the fifth syscall argument (x86_64: r8; aarch64: regs[4]):
    /// perf_event_open's flags (`--origin`).
    pub regs_arg4: u32,
    /// signal_struct->rlim: the process's resource limits (the spawn's NOFILE at exec).
    pub signal_rlim: u32,
    /// Non-zero: `fdaudit unclosed` runs (its own programs keep the live set of fds in the
    /// UNCLOSED_* maps; the loader sizes those maps by it, and the fork program counts a
    /// thread with an fd table of its own only then).
    pub unclosed: u32,
    /// task_struct->group_leader and ->start_time (CLOCK_MONOTONIC at fork; an exec by
    /// another thread gives the new leader the old one's): when the process began
    /// (`unclosed`'s close, on 5.11+).
    pub task_group_leader: u32,
    pub task_start_time: u32,
    /// Where the credentials and namespaces are (spawn boundaries).
    pub credns: crate::CredNsOffsets,
    /// Non-zero: a node agent's session (`watch`), whose reader needs no record at once:
    /// spawn records do not wake it (its drain thread's tick, or a filling ring, does).
    /// A u64: the struct has no padding.
    pub quiet_spawns: u64,
    /// How the fork and exec programs tell a process of the followed cgroup
    /// ([`cgroup_filter`]): the loader picks the way the kernel offers. A u64: the struct
    /// has no padding.
    pub cgroup_filter: u64,
    /// io_kiocb->opcode, where `unclosed_io_uring` runs (`fdaudit unclosed` on a kernel
    /// with the io_uring_submit_req tracepoint, 6.0+), else [`NO_OFFSET`]: `unclosed_exit`
    /// then counts each io_uring_setup instead. A u64: the struct has no padding.
    pub io_kiocb_opcode: u64,
}

/// Values of [`Config::cgroup_filter`]. The programs reach only the helper the value names
/// (CONFIG is read-only: the verifier knows the value and skips the other paths, so a kernel
/// without a helper never sees the call).
pub mod cgroup_filter {
    /// No cgroup is followed: only the tracked trees.
    pub const NONE: u64 = 0;
    /// Every process: the followed cgroup is the hierarchy's root (whole-host `watch`).
    pub const ALL: u64 = 1;
    /// bpf_get_current_ancestor_cgroup_id(`cgroup_level`) == `cgroup_id` (raw tracepoints
    /// since 5.14).
    pub const ANCESTOR: u64 = 2;
    /// bpf_current_task_under_cgroup on the cgroup in [`MAP_FOLLOWED_CGROUP`]'s slot 0
    /// (tracing programs since 4.9): before 5.14.
    ///
    /// [`MAP_FOLLOWED_CGROUP`]: crate::MAP_FOLLOWED_CGROUP
    pub const UNDER: u64 = 3;
}

/// Values of [`Config::task_btf`], each including the ones below it. The programs reach only
/// the helpers the value names (CONFIG is read-only: the verifier skips the other paths).
pub mod task_btf {
    /// Neither helper (before 5.11): probe-reads.
    pub const NONE: u32 = 0;
    /// bpf_get_current_task_btf (5.11+): current's task_struct by direct loads.
    pub const TASK: u32 = 1;
    /// bpf_task_pt_regs too (5.15+): the syscall's saved user registers by direct loads.
    pub const REGS: u32 = 2;
}

/// A [`Config`] offset the running kernel does not have: the programs skip what needs it.
pub const NO_OFFSET: u32 = u32::MAX;

/// Value userspace puts in [`Config::magic`].
pub const CONFIG_MAGIC: u32 = 0xfda0_0001;

impl Config {
    /// All offsets zero and no magic: the eBPF side's initial value of the global, which
    /// the loader overrides.
    pub const ZEROED: Config = Config {
        task_pid: 0,
        task_tgid: 0,
        task_files: 0,
        task_mm: 0,
        task_comm: 0,
        task_signal: 0,
        task_exit_code: 0,
        signal_live: 0,
        files_fdt: 0,
        fdt_max_fds: 0,
        fdt_fd: 0,
        fdt_open_fds: 0,
        file_inode: 0,
        file_flags: 0,
        file_dentry: 0,
        file_private: 0,
        dentry_name: 0,
        inode_mode: 0,
        inode_ino: 0,
        inode_sb: 0,
        inode_rdev: 0,
        sb_magic: 0,
        sb_dev: 0,
        socket_sk: 0,
        socket_type: 0,
        sk_family: 0,
        mm_arg_start: 0,
        mm_arg_end: 0,
        bprm_filename: 0,
        regs_arg0: 0,
        regs_arg1: 0,
        regs_arg2: 0,
        regs_nr: 0,
        regs_exit_arg0: 0,
        hot_mask: 0,
        file_mnt: 0,
        file_pos: 0,
        dentry_parent: 0,
        vfsmount_root: 0,
        mount_mnt: 0,
        mount_parent: 0,
        mount_mountpoint: 0,
        reads: 0,
        task_ti_status: 0,
        regs_bx: 0,
        regs_cx: 0,
        inode_nlink: 0,
        task_self_exec_id: 0,
        task_parent_exec_id: 0,
        magic: 0,
        cgroup_level: 0,
        task_btf: 0,
        cgroup_id: 0,
        origin: 0,
        regs_arg3: 0,
        regs_sp: 0,
        mm_start_code: 0,
        mm_end_code: 0,
        regs_arg4: 0,
        signal_rlim: 0,
        unclosed: 0,
        task_group_leader: 0,
        task_start_time: 0,
        credns: crate::CredNsOffsets::ZEROED,
        quiet_spawns: 0,
        cgroup_filter: cgroup_filter::NONE,
        io_kiocb_opcode: 0,
    };
}
