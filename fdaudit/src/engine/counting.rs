//! What the kernel counts in each spawn's fork..exec window, chosen once per run by the
//! front end (`trace --no-syscalls` / `--reads`, `watch --syscalls`) and handed to the
//! session, which hands it to everything below: one value where each part once carried its
//! own flag.

/// What the kernel counts between fork and exec. Leaked fds are always reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Counting {
    /// Leaked fds only: the scheduler tracepoints, no syscall hooked, no strategy.
    Nothing,
    /// The counted syscalls (closes, fcntl, poll, …) and the strategy they imply.
    #[default]
    Syscalls,
    /// The counted syscalls, and read()/readv()/pread64() calls per process and open file.
    SyscallsAndReads,
}

impl Counting {
    /// From a front end's flags: reads are counted only with the syscalls.
    pub fn new(syscalls: bool, reads: bool) -> Counting {
        match (syscalls, reads) {
            (false, _) => Counting::Nothing,
            (true, false) => Counting::Syscalls,
            (true, true) => Counting::SyscallsAndReads,
        }
    }

    /// The counted syscalls are hooked (false: leaked fds only).
    pub fn syscalls(self) -> bool {
        self != Counting::Nothing
    }

    /// Reads are counted per process and open file.
    pub fn reads(self) -> bool {
        self == Counting::SyscallsAndReads
    }
}

#[cfg(test)]
mod tests {
    use super::Counting;

    #[test]
    fn reads_are_counted_only_with_the_syscalls() {
        assert_eq!(Counting::new(false, true), Counting::Nothing, "no syscalls");
        assert!(!Counting::new(false, false).syscalls(), "no syscalls");
        assert!(Counting::new(true, false).syscalls(), "syscalls");
        assert!(!Counting::new(true, false).reads(), "no reads");
        assert!(Counting::new(true, true).reads(), "reads");
        assert_eq!(Counting::default(), Counting::Syscalls, "the default");
    }
}
