//! Which fd-closing strategy a child's pre-exec syscalls imply.

use super::counts::SyscallCounts;

/// A sweep touches at least this many fds; fewer calls are targeted closes (pipe ends, ...).
pub const SWEEP_MIN: u32 = 64;

/// The strategy a child used between fork and exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Strategy {
    /// close_range(2): one call, whatever the limit.
    CloseRange,
    /// opendir(/proc/self/fd) + getdents64, closing only what is open.
    ProcfdWalk,
    /// One poll() over every possible fd, then close the open ones (D's std.process).
    PollScan,
    /// fcntl(F_GETFD/F_SETFD) on every fd up to a bound.
    FcntlScan,
    /// close() on every fd up to a bound.
    CloseLoop,
    /// No sweep: fds not marked close-on-exec cross the exec.
    None,
    /// Syscalls were not traced (`--no-syscalls`).
    Unknown,
}

impl Strategy {
    /// Its name (`close-loop`): clap's, from the variant ([`super::names`]).
    pub fn as_str(self) -> &'static str {
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        super::names::value_names::<Strategy>(&NAMES)[self as usize]
    }

    /// The strategy a record names (`close-loop`, ...), as [`Strategy::as_str`] spells it.
    pub fn from_name(s: &str) -> Option<Strategy> {
        <Strategy as clap::ValueEnum>::value_variants()
            .iter()
            .copied()
            .find(|v| v.as_str() == s)
    }

    /// How the pre-exec work grows, for comparing runs (`fdaudit diff`): 0 it does not
    /// (close-range, none), 1 with the open fds (procfd-walk), 2 with NOFILE in one call
    /// (poll-scan), 3 one call per fd up to NOFILE (fcntl-scan, close-loop); `None` for
    /// unknown (syscalls not traced).
    pub fn cost_rank(self) -> Option<u8> {
        match self {
            Strategy::CloseRange | Strategy::None => Some(0),
            Strategy::ProcfdWalk => Some(1),
            Strategy::PollScan => Some(2),
            Strategy::FcntlScan | Strategy::CloseLoop => Some(3),
            Strategy::Unknown => None,
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The strategy, and for a close loop its bound (the loop closes 3..bound).
///
/// Order matters: a runtime that walks /proc/self/fd closes each open fd after the walk, and
/// one that polls closes the open ones after the poll, so those come before the close loop;
/// close_range wins over everything since it is what makes the others unnecessary.
pub fn classify(c: &SyscallCounts) -> (Strategy, Option<u32>) {
    if c.close_range_calls > 0 {
        (Strategy::CloseRange, None)
    } else if c.procfd_opens > 0 && c.getdents64_calls > 0 {
        (Strategy::ProcfdWalk, None)
    } else if c.poll_calls > 0 && c.poll_nfds_max >= u64::from(SWEEP_MIN) {
        (Strategy::PollScan, None)
    } else if c.fcntl_calls() >= u64::from(SWEEP_MIN) {
        (Strategy::FcntlScan, None)
    } else if c.close_calls >= u64::from(SWEEP_MIN) {
        let bound = u32::try_from(c.close_calls.saturating_add(3)).unwrap_or(u32::MAX);
        (Strategy::CloseLoop, Some(bound))
    } else {
        (Strategy::None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_strategy_from_its_signature() {
        let loop_ = SyscallCounts {
            close_calls: 19_997,
            close_ebadf: 19_990,
            ..Default::default()
        };
        assert_eq!(classify(&loop_), (Strategy::CloseLoop, Some(20_000)));
        let range = SyscallCounts {
            close_range_calls: 1,
            close_calls: 2,
            ..Default::default()
        };
        assert_eq!(classify(&range).0, Strategy::CloseRange);
        let walk = SyscallCounts {
            procfd_opens: 1,
            getdents64_calls: 2,
            close_calls: 5,
            ..Default::default()
        };
        assert_eq!(classify(&walk).0, Strategy::ProcfdWalk);
        let poll = SyscallCounts {
            poll_calls: 1,
            poll_nfds_max: 20_000,
            close_calls: 4,
            ..Default::default()
        };
        assert_eq!(classify(&poll).0, Strategy::PollScan);
        let fcntl = SyscallCounts {
            fcntl_setfd_calls: 19_997,
            ..Default::default()
        };
        assert_eq!(classify(&fcntl).0, Strategy::FcntlScan);
        let targeted = SyscallCounts {
            close_calls: 3,
            ..Default::default()
        };
        assert_eq!(classify(&targeted).0, Strategy::None);
        assert_eq!(classify(&SyscallCounts::default()).0, Strategy::None);
        // A small poll (an event loop, not a scan) is not a poll scan.
        let small_poll = SyscallCounts {
            poll_calls: 3,
            poll_nfds_max: 2,
            ..Default::default()
        };
        assert_eq!(classify(&small_poll).0, Strategy::None);
    }

    #[test]
    fn names_round_trip_and_match_the_command_line() {
        use clap::ValueEnum as _;
        for s in Strategy::value_variants() {
            assert_eq!(Strategy::from_name(s.as_str()), Some(*s));
            let v = s.to_possible_value().unwrap();
            assert_eq!(
                v.get_name(),
                s.as_str(),
                "--fail-on-strategy spells it as JSON does"
            );
        }
        assert_eq!(Strategy::from_name("fcntl-loop"), None);
    }
}
