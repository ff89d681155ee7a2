//! For people: findings that say the same thing about processes running the same program
//! (same severity, reason and comm: sixteen workers with the same NOFILE limit, three
//! copies of a server holding the same directory) print once, with the count and the pids.
//! Info-level findings, the noise of an idle machine (`/dev/null` without close-on-exec in
//! every shell), group across programs too. JSON keeps one finding per process, except the
//! NOFILE findings, which fold everywhere ([`super::fold`]): here they come with their pids.

use std::collections::HashMap;

use super::Finding;

/// Pids named in a grouped finding before `…`.
const PIDS_SHOWN: usize = 10;

/// A finding and every process it applies to.
#[derive(Debug, Clone)]
pub struct Alike {
    /// The first (lowest pid) of the group.
    pub finding: Finding,
    /// Every pid, ascending (the first is `finding.pid`).
    pub pids: Vec<u32>,
    /// The fd, when every process has it at the same number.
    pub fd: Option<u32>,
    /// The programs (comms) of the group, in first-seen order: several only for info.
    pub comms: Vec<Vec<u8>>,
}

impl Alike {
    /// The reason, with the count and pids when the finding applies to several processes.
    pub fn reason(&self) -> String {
        if self.pids.len() < 2 {
            return self.finding.reason.clone();
        }
        let mut pids: Vec<String> = self
            .pids
            .iter()
            .take(PIDS_SHOWN)
            .map(u32::to_string)
            .collect();
        if self.pids.len() > PIDS_SHOWN {
            pids.push("…".into());
        }
        let programs = match self.comms.len() {
            1 => String::new(),
            n => format!(" of {n} programs"),
        };
        format!(
            "{} ({} processes{programs}: pids {})",
            self.finding.reason,
            self.pids.len(),
            pids.join(", ")
        )
    }
}

/// The processes a finding stands for: its own, or a folded finding's (`scan::fold`).
fn pids_of(f: &Finding) -> Vec<u32> {
    if f.pids.is_empty() {
        vec![f.pid]
    } else {
        f.pids.clone()
    }
}

/// Groups alike findings, keeping the order of each group's first finding (`v` comes
/// sorted worst first).
pub fn group_alike(v: Vec<Finding>) -> Vec<Alike> {
    let mut out: Vec<Alike> = Vec::new();
    let mut index: HashMap<(super::Severity, String, Vec<u8>), usize> = HashMap::new();
    for f in v {
        let comm = if f.severity == super::Severity::Info {
            Vec::new()
        } else {
            f.comm.raw.clone()
        };
        let key = (f.severity, f.reason.clone(), comm);
        match index.get(&key) {
            Some(&i) => {
                let a = &mut out[i];
                a.pids.extend(pids_of(&f));
                if !a.comms.contains(&f.comm.raw) {
                    a.comms.push(f.comm.raw.clone());
                }
                if a.fd != f.fd {
                    a.fd = None;
                }
            }
            None => {
                index.insert(key, out.len());
                out.push(Alike {
                    fd: f.fd,
                    pids: pids_of(&f),
                    comms: vec![f.comm.raw.clone()],
                    finding: f,
                });
            }
        }
    }
    for a in &mut out {
        a.pids.sort_unstable();
        a.pids.dedup();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::findings::{FindingKind, Severity};
    use super::*;

    fn f(pid: u32, comm: &str, fd: Option<u32>, sev: Severity, reason: &str) -> Finding {
        Finding::new(
            pid,
            comm.as_bytes(),
            fd,
            sev,
            FindingKind::NofileLimit,
            0,
            reason.into(),
        )
    }

    #[test]
    fn same_program_same_reason_once() {
        let limit = "NOFILE soft limit 20000: costly";
        let mut v = vec![f(30, "nginx", Some(8), Severity::High, "directory /srv")];
        v.extend((1..=16).map(|p| f(100 + p, "worker", None, Severity::Medium, limit)));
        v.push(f(20, "nginx", Some(8), Severity::High, "directory /srv"));
        v.push(f(40, "other", None, Severity::Medium, limit));
        v.push(f(21, "nginx", Some(9), Severity::Low, "pipe pipe:[1]"));
        let g = group_alike(v);
        assert_eq!(g.len(), 4, "{g:#?}");
        assert_eq!(g[0].pids, [20, 30]);
        assert_eq!(g[0].fd, Some(8), "the same fd in each");
        assert_eq!(g[0].finding.pid, 30, "order of the first kept");
        assert!(
            g[0].reason().ends_with("(2 processes: pids 20, 30)"),
            "{}",
            g[0].reason()
        );
        assert_eq!(g[1].pids.len(), 16);
        assert!(g[1].reason().contains("16 processes") && g[1].reason().ends_with(", …)"));
        assert_eq!(g[2].pids, [40], "another program is another line");
        assert_eq!(g[2].reason(), limit);
        assert_eq!(g[3].fd, Some(9));
        let mixed = group_alike(vec![
            f(1, "a", Some(3), Severity::Low, "x"),
            f(2, "a", Some(4), Severity::Low, "x"),
        ]);
        assert_eq!(
            (mixed.len(), mixed[0].fd),
            (1, None),
            "fds differ: none shown"
        );
    }

    #[test]
    fn info_noise_groups_across_programs_and_nothing_worse_does() {
        let null = "device /dev/null has no close-on-exec";
        let g = group_alike(vec![
            f(1, "bash", Some(10), Severity::Info, null),
            f(2, "cargo", Some(10), Severity::Info, null),
            f(3, "bash", Some(10), Severity::Info, null),
            f(4, "a", Some(7), Severity::Low, "pipe"),
            f(5, "b", Some(7), Severity::Low, "pipe"),
        ]);
        assert_eq!(g.len(), 3, "{g:#?}");
        assert_eq!(g[0].pids, [1, 2, 3]);
        assert_eq!(g[0].comms.len(), 2);
        assert!(
            g[0].reason()
                .ends_with("(3 processes of 2 programs: pids 1, 2, 3)"),
            "{}",
            g[0].reason()
        );
        assert_eq!((g[1].pids.len(), g[2].pids.len()), (1, 1));
    }
}
