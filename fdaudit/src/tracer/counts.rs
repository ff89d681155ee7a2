//! [`SyscallCounts`]: the user-side view of the kernel's per-window [`Counters`], the one
//! struct every consumer (a spawn, the totals, the bench's traced pass, the strategy
//! classifier) uses. A new counter is a field here, a field in `Counters` and a match arm
//! in the eBPF program: nothing else.

use fdaudit_common::Counters;
use serde::Serialize;

/// What a child did between fork and exec, counted in the kernel. Serialised flattened into
/// the records that carry it (one JSON key per counter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SyscallCounts {
    pub close_calls: u64,
    /// close() calls that failed with EBADF (the fd was not open).
    pub close_ebadf: u64,
    pub close_range_calls: u64,
    pub fcntl_setfd_calls: u64,
    pub fcntl_getfd_calls: u64,
    pub poll_calls: u64,
    /// The largest nfds of a poll()/ppoll() call (a maximum, not a sum, when added up).
    pub poll_nfds_max: u64,
    pub getdents64_calls: u64,
    /// Opens of /proc/self/fd (or /proc/PID/fd, /dev/fd).
    pub procfd_opens: u64,
    /// dup2()/dup3() calls: shells and posix_spawn file actions redirect fds with them.
    pub dup_calls: u64,
}

impl From<&Counters> for SyscallCounts {
    fn from(c: &Counters) -> Self {
        SyscallCounts {
            close_calls: c.close_calls.into(),
            close_ebadf: c.close_ebadf.into(),
            close_range_calls: c.close_range_calls.into(),
            fcntl_setfd_calls: c.fcntl_setfd_calls.into(),
            fcntl_getfd_calls: c.fcntl_getfd_calls.into(),
            poll_calls: c.poll_calls.into(),
            poll_nfds_max: c.poll_nfds_max.into(),
            getdents64_calls: c.getdents64_calls.into(),
            procfd_opens: c.procfd_opens.into(),
            dup_calls: c.dup_calls.into(),
        }
    }
}

impl SyscallCounts {
    /// Syscalls that went through a counting probe (each costs the probe's time once).
    /// `poll_nfds_max` and `close_ebadf` are not calls of their own.
    pub fn probed(&self) -> u64 {
        self.close_calls
            + self.close_range_calls
            + self.fcntl_setfd_calls
            + self.fcntl_getfd_calls
            + self.poll_calls
            + self.getdents64_calls
            + self.procfd_opens
            + self.dup_calls
    }

    /// fcntl() calls of either kind (F_GETFD probes and F_SETFD marks).
    pub fn fcntl_calls(&self) -> u64 {
        self.fcntl_setfd_calls + self.fcntl_getfd_calls
    }
}

impl std::ops::AddAssign for SyscallCounts {
    /// Sums every counter; `poll_nfds_max` keeps the largest.
    fn add_assign(&mut self, o: Self) {
        self.close_calls += o.close_calls;
        self.close_ebadf += o.close_ebadf;
        self.close_range_calls += o.close_range_calls;
        self.fcntl_setfd_calls += o.fcntl_setfd_calls;
        self.fcntl_getfd_calls += o.fcntl_getfd_calls;
        self.poll_calls += o.poll_calls;
        self.poll_nfds_max = self.poll_nfds_max.max(o.poll_nfds_max);
        self.getdents64_calls += o.getdents64_calls;
        self.procfd_opens += o.procfd_opens;
        self.dup_calls += o.dup_calls;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_counter_is_carried_added_and_serialised() {
        let c = Counters {
            close_calls: 1,
            close_ebadf: 2,
            close_range_calls: 3,
            fcntl_setfd_calls: 4,
            fcntl_getfd_calls: 5,
            poll_calls: 6,
            poll_nfds_max: 7,
            getdents64_calls: 8,
            procfd_opens: 9,
            dup_calls: 10,
            exec_attempts: 11,
            ..Default::default()
        };
        let mut s = SyscallCounts::from(&c);
        assert_eq!(s.probed(), 1 + 3 + 4 + 5 + 6 + 8 + 9 + 10);
        s += SyscallCounts::from(&c);
        assert_eq!((s.close_calls, s.dup_calls, s.poll_nfds_max), (2, 20, 7));
        let j = serde_json::to_value(s).unwrap();
        assert_eq!(j.as_object().unwrap().len(), 10, "{j}");
        assert_eq!(j["dup_calls"], 20);
    }
}
