//! NOFILE findings fold to one per program and limit (issue #43): sixteen workers of one
//! server with the same soft limit are one finding, not sixteen, in the text, in `--json`,
//! in the summary's count, for `--fail-on` and in `watch`'s gauge. The finding carries the
//! processes it stands for (`pids`, `processes`); its `pid` is the lowest of them. A limit
//! is a property of a program's configuration (its unit, its container), so one line per
//! program and limit is what someone fixes; one per process was most of a quiet machine's
//! findings.

use std::collections::HashMap;

use super::{findings::FindingKind, Finding, Severity};

/// Whether `f` is a finding that folds (about a process's limit, not one of its fds).
pub fn folds(f: &Finding) -> bool {
    f.kind == FindingKind::NofileLimit
}

/// A process's findings split into those that fold and the rest.
pub fn split(v: Vec<Finding>) -> (Vec<Finding>, Vec<Finding>) {
    v.into_iter().partition(folds)
}

/// NOFILE findings gathered from every process, folded by program (comm) and limit (the
/// reason names the soft limit and the severity follows from it).
#[derive(Debug, Default)]
pub struct NofileFold {
    index: HashMap<(Vec<u8>, Severity, String), usize>,
    folded: Vec<Finding>,
}

impl NofileFold {
    pub fn add(&mut self, f: Finding) {
        let key = (f.comm.raw.clone(), f.severity, f.reason.clone());
        match self.index.get(&key) {
            Some(&i) => self.folded[i].pids.push(f.pid),
            None => {
                self.index.insert(key, self.folded.len());
                let mut f = f;
                f.pids = vec![f.pid];
                self.folded.push(f);
            }
        }
    }

    /// One finding per program and limit, worst first; each one's `pids` ascending, `pid`
    /// the first of them and `processes` their count.
    pub fn into_findings(self) -> Vec<Finding> {
        let mut v = self.folded;
        for f in &mut v {
            f.pids.sort_unstable();
            f.pids.dedup();
            f.pid = f.pids[0];
            f.processes = Some(f.pids.len());
        }
        v.sort_by(Finding::order);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nofile(pid: u32, comm: &str, soft: u64) -> Finding {
        let (sev, reason) = super::super::findings::nofile(soft, 250.0).expect("a finding");
        Finding::new(
            pid,
            comm.as_bytes(),
            None,
            sev,
            FindingKind::NofileLimit,
            0,
            reason,
        )
    }

    #[test]
    fn one_finding_per_program_and_limit_with_its_pids() {
        let mut fold = NofileFold::default();
        let mut v: Vec<Finding> = [105, 101, 104, 102, 103]
            .into_iter()
            .map(|p| nofile(p, "worker", 20000))
            .collect();
        v.push(nofile(7, "worker", 1 << 20));
        v.push(nofile(8, "other", 20000));
        v.push(Finding::new(
            9,
            b"worker",
            Some(3),
            Severity::Low,
            FindingKind::InheritableFd,
            0,
            "pipe".into(),
        ));
        let (nofile, rest) = split(v);
        assert_eq!(rest.len(), 1, "the fd finding stays: {rest:?}");
        for f in nofile {
            fold.add(f);
        }
        let f = fold.into_findings();
        type Row<'a> = (&'a [u8], Severity, &'a [u32], Option<usize>, u32);
        let got: Vec<Row> = f
            .iter()
            .map(|f| (&f.comm.raw[..], f.severity, &f.pids[..], f.processes, f.pid))
            .collect();
        assert_eq!(
            got,
            [
                (&b"worker"[..], Severity::High, &[7][..], Some(1), 7),
                (&b"other"[..], Severity::Medium, &[8][..], Some(1), 8),
                (
                    &b"worker"[..],
                    Severity::Medium,
                    &[101, 102, 103, 104, 105][..],
                    Some(5),
                    101
                ),
            ]
        );
    }
}
