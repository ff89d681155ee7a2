//! [`SpawnFlags`]: the partial-data markers of a spawn record, typed; named by
//! [`SpawnFlags::names`] (trace's JSON carries the list: `["fds_truncated", "no_fork"]`).

use fdaudit_common::flags as k;

bitflags::bitflags! {
    /// The kernel's [`fdaudit_common::flags`] bits, plus what userspace adds.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct SpawnFlags: u32 {
        const FDS_TRUNCATED = k::FDS_TRUNCATED;
        const READ_FAILED = k::READ_FAILED;
        const ARGV_TRUNCATED = k::ARGV_TRUNCATED;
        const RANGES_TRUNCATED = k::RANGES_TRUNCATED;
        const NO_FORK = k::NO_FORK;
        const FDTABLE_TRUNCATED = k::FDTABLE_TRUNCATED;
        const NO_SYSCALLS = k::NO_SYSCALLS;
        const PATH_PARTIAL = k::PATH_PARTIAL;
        const REEXEC = k::REEXEC;
        const BOUNDED_WALK = k::BOUNDED_WALK;
        const COMPAT_SYSCALLS = k::COMPAT_SYSCALLS;
        const EXEC_MISSED = k::EXEC_MISSED;
        /// Userspace's: this image exec'd again without forking (an exec chain's step,
        /// [`super::steps`]): its fds passed on to the next image, transient, not leaks.
        const EXECD_AGAIN = 1 << 30;
        /// Userspace's: the window ran a 32-bit (ia32) image and the backend counts native
        /// syscalls only ([`super::ia32`]): its counts are unknown, not 0.
        const IA32_UNSEEN = 1 << 29;
        /// Userspace's: a runtime's helper ([`super::steps`]): the spawner exec'd its own
        /// image (`/proc/self/exe`: `runc init`), this record crossed a boundary or
        /// re-exec'd a sealed copy of it, and it holds only plumbing (sockets, pipes,
        /// FIFOs). Its fds are the runtime's hand-off, transient,
        /// not leaks: what reaches the image its child execs next is judged there.
        const OWN_IMAGE = 1 << 28;
    }
}

impl SpawnFlags {
    /// Names in JSON and text, in bit order.
    const NAMES: [(SpawnFlags, &'static str); 15] = [
        (SpawnFlags::FDS_TRUNCATED, "fds_truncated"),
        (SpawnFlags::READ_FAILED, "read_failed"),
        (SpawnFlags::ARGV_TRUNCATED, "argv_truncated"),
        (SpawnFlags::RANGES_TRUNCATED, "ranges_truncated"),
        (SpawnFlags::NO_FORK, "no_fork"),
        (SpawnFlags::FDTABLE_TRUNCATED, "fdtable_truncated"),
        (SpawnFlags::NO_SYSCALLS, "no_syscalls"),
        (SpawnFlags::PATH_PARTIAL, "path_partial"),
        (SpawnFlags::REEXEC, "reexec"),
        (SpawnFlags::BOUNDED_WALK, "bounded_walk"),
        (SpawnFlags::COMPAT_SYSCALLS, "compat_syscalls"),
        (SpawnFlags::EXEC_MISSED, "exec_missed"),
        (SpawnFlags::OWN_IMAGE, "own_image"),
        (SpawnFlags::IA32_UNSEEN, "ia32_unseen"),
        (SpawnFlags::EXECD_AGAIN, "execd_again"),
    ];

    /// The image's fds are transient, not leaks: it exec'd again (an exec chain's step) or
    /// it is a runtime's own helper (`runc init`). The one test every front end makes.
    pub fn transient(self) -> bool {
        self.intersects(SpawnFlags::EXECD_AGAIN | SpawnFlags::OWN_IMAGE)
    }

    /// The names of the set flags, in bit order (unknown bits are dropped).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .into_iter()
            .filter(move |(f, _)| self.contains(*f))
            .map(|(_, n)| n)
    }

    /// Flags that mean data is missing, as opposed to facts about the spawn (`no_fork`,
    /// `reexec`, `execd_again`, `compat_syscalls`: counted by their meaning) or the run
    /// (`no_syscalls`).
    pub fn partial(self) -> SpawnFlags {
        self - (SpawnFlags::NO_FORK
            | SpawnFlags::REEXEC
            | SpawnFlags::EXECD_AGAIN
            | SpawnFlags::OWN_IMAGE
            | SpawnFlags::NO_SYSCALLS
            | SpawnFlags::COMPAT_SYSCALLS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialised_as_names_in_bit_order() {
        let f =
            SpawnFlags::NO_FORK | SpawnFlags::FDS_TRUNCATED | SpawnFlags::from_bits_retain(1 << 31);
        let names = |f: SpawnFlags| f.names().collect::<Vec<_>>();
        assert_eq!(names(f), ["fds_truncated", "no_fork"]);
        assert!(names(SpawnFlags::empty()).is_empty());
        assert_eq!(
            f.partial(),
            SpawnFlags::FDS_TRUNCATED | SpawnFlags::from_bits_retain(1 << 31)
        );
        // Every flag has a distinct name.
        let mut names: Vec<_> = SpawnFlags::all().names().collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SpawnFlags::all().iter().count());
    }
}
