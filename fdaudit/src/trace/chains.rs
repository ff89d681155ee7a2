//! Exec chains: a child that execs more than once without forking again (`env CMD`, a
//! shell's `exec`, Java's jspawnhelper) is one spawn. Its records (the second one flagged
//! `reexec`) are joined here for the summary: one spawn, one table row `first → last`, its
//! close calls and window summed, the fds of its last image counted as leaks and those of
//! the images that exec'd again as transient. Names and paths stay bytes, as the kernel
//! gave them (JSON writes them losslessly); `--fail-on-leak`'s count of the leaks that are
//! not the traced command's own inheritance is kept per chain, too.

use std::collections::{BTreeMap, HashMap};

use crate::engine::maker::{judge, Maker, SpawnerCode};
use crate::engine::origin::Call;
use crate::runtime::{Nofile, Runtime};
use crate::stats;

/// What the advice needs from a spawn: who spawned it and what its strategy walked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spawner {
    /// The parent's runtime (`None` where runtimes are not identified).
    pub runtime: Option<Runtime>,
    pub nofile: Option<Nofile>,
    /// `nofile` is the child's at its exec, read by the exec program (not the parent's,
    /// read from /proc with its runtime).
    pub nofile_at_exec: bool,
    /// fds the strategy walked: a close loop's bound, a poll's nfds, the fcntl calls.
    pub walked: u64,
    /// `--origin`: the frame that made the first leaked fd inheritable (`main at x.c:12`).
    pub origin: Option<String>,
    /// `--origin`: that fd was made by another process (or an earlier image of the
    /// spawner's), which the spawner only passed on ([`crate::engine::maker`]).
    pub made_by: Option<MadeBy>,
}

/// The process that made a leaked fd the spawner passed on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MadeBy {
    pub pid: u32,
    pub comm: String,
    /// The maker's runtime, when it spawned something traced (its remedies are the ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
}

/// What the summary needs from one exec record.
#[derive(Debug, Clone)]
pub struct Link<'a> {
    pub pid: u32,
    /// The record continues this process's previous exec (flag `reexec`).
    pub reexec: bool,
    /// This image exec'd again (flag `execd_again`, [`crate::engine::steps`]): its fds are
    /// transient.
    pub execd_again: bool,
    /// A runtime's own helper (flag `own_image`, [`crate::engine::steps`]): its fds are
    /// transient, and what its next exec gets is judged there.
    pub own_image: bool,
    /// The container it runs in (`docker:0123456789ab`), if any: its own rows.
    pub container: Option<String>,
    pub parent_comm: &'a [u8],
    pub exec_path: &'a [u8],
    pub strategy: &'a str,
    /// Whether the strategy says the child closed fds (anything but `none`/`unknown`).
    pub closed_fds: bool,
    pub close_calls: u64,
    /// Window less the probes' cost, ns.
    pub window_ns: u64,
    /// fds that crossed, less the traced command's own inheritance.
    pub leaked: u32,
    /// fds the traced command itself inherited from fdaudit's caller that crossed.
    pub inherited: u32,
    /// Of `leaked`, the fds `--fail-on-leak` counts (see `report::LeakPolicy`).
    pub new_leaks: u64,
    /// Of `leaked`, the fds that crossed a privilege or namespace boundary.
    pub critical: u32,
    pub spawner: Spawner,
    /// Where the spawner's own code ran, and the call that made the first counted leaked
    /// fd with a known origin: who made it is judged against the chain's first spawner.
    pub code: SpawnerCode,
    pub leak_call: Option<&'a Call>,
}

/// The maker of `call`'s fd when the spawner whose code ran in `code` only passed it on.
fn made_by(code: SpawnerCode, call: Option<&Call>) -> Option<MadeBy> {
    match judge(code, call?) {
        Maker::Spawner => None,
        Maker::PassedOn(c) => Some(MadeBy {
            pid: c.pid,
            comm: c.comm.clone(),
            runtime: None,
        }),
    }
}

/// One spawn, as far as it has exec'd.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Chain {
    container: Option<String>,
    parent_comm: Vec<u8>,
    /// Exec paths in order (consecutive repeats once).
    paths: Vec<Vec<u8>>,
    strategy: String,
    closed_fds: bool,
    close_calls: u64,
    window_ns: u64,
    /// fds of the latest image.
    leaked: u32,
    /// Inherited fds of the latest image.
    inherited: u32,
    /// Of those, the ones `--fail-on-leak` counts.
    new_leaks: u64,
    /// Of `leaked`, the critical ones (across a boundary).
    critical: u32,
    /// fds of images that exec'd again.
    transient: u64,
    /// The latest image's fds were judged final, not transient (it exec'd again only after
    /// [`crate::engine::steps::GRACE`]): a later exec starts a spawn of its own.
    judged_final: bool,
    /// The first record's spawner (the runtime that spawned it), the walk of the image that
    /// closed fds, the first leak's origin.
    spawner: Spawner,
    /// The first record's spawner's code (who made a leaked fd is judged against it).
    code: SpawnerCode,
}

impl Chain {
    fn new(l: &Link<'_>) -> Chain {
        let mut c = Chain {
            container: l.container.clone(),
            parent_comm: l.parent_comm.to_vec(),
            paths: vec![l.exec_path.to_vec()],
            strategy: l.strategy.to_string(),
            closed_fds: l.closed_fds,
            close_calls: l.close_calls,
            window_ns: l.window_ns,
            leaked: l.leaked,
            inherited: l.inherited,
            new_leaks: l.new_leaks,
            critical: l.critical,
            transient: 0,
            judged_final: l.leaked + l.inherited > 0 && !l.execd_again,
            spawner: Spawner {
                made_by: made_by(l.code, l.leak_call),
                ..l.spawner.clone()
            },
            code: l.code,
        };
        c.own_image_fds(l);
        c
    }

    /// A runtime's helper's fds are transient at once: it may exec nothing more (runc init
    /// hands on to a child of its own), so no next image takes them over.
    fn own_image_fds(&mut self, l: &Link<'_>) {
        if l.own_image {
            self.transient += u64::from(self.leaked);
            (self.leaked, self.inherited, self.new_leaks, self.critical) = (0, 0, 0, 0);
            self.judged_final = false;
        }
    }

    fn extend(&mut self, l: &Link<'_>) {
        if self.paths.last().map(Vec::as_slice) != Some(l.exec_path) {
            self.paths.push(l.exec_path.to_vec());
        }
        // The strategy that tells is the one that closed fds; else the latest.
        if l.closed_fds || !self.closed_fds {
            self.strategy = l.strategy.to_string();
            self.spawner.walked = l.spawner.walked;
            self.closed_fds |= l.closed_fds;
        }
        self.close_calls += l.close_calls;
        self.window_ns += l.window_ns;
        self.transient += u64::from(self.leaked);
        self.leaked = l.leaked;
        self.inherited = l.inherited;
        self.new_leaks = l.new_leaks;
        self.critical = l.critical;
        self.judged_final = l.leaked + l.inherited > 0 && !l.execd_again;
        if l.leaked > 0 {
            self.spawner.origin.clone_from(&l.spawner.origin);
            self.spawner.made_by = made_by(self.code, l.leak_call);
        }
        self.own_image_fds(l);
    }

    /// `first → last` (`first → … → last` for longer chains).
    fn exec_label(&self) -> Vec<u8> {
        let join = |parts: &[&[u8]]| parts.join(" → ".as_bytes());
        match self.paths.as_slice() {
            [] => Vec::new(),
            [one] => one.clone(),
            [first, last] => join(&[first, last]),
            [first, .., last] => join(&[first, "…".as_bytes(), last]),
        }
    }
}

/// Per-spawn numbers of one summary row.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Acc {
    closes: Vec<u64>,
    windows: Vec<u64>,
    leaked: u64,
    inherited: u64,
    transient: u64,
    walked: Vec<u64>,
    /// The first spawn's spawner.
    spawner: Spawner,
}

impl Acc {
    fn add(&mut self, c: &Chain) {
        if self.closes.is_empty() {
            self.spawner = c.spawner.clone();
        }
        if self.spawner.origin.is_none() {
            self.spawner.origin.clone_from(&c.spawner.origin);
            self.spawner.made_by.clone_from(&c.spawner.made_by);
        }
        self.closes.push(c.close_calls);
        self.windows.push(c.window_ns);
        self.walked.push(c.spawner.walked);
        self.leaked += u64::from(c.leaked);
        self.inherited += u64::from(c.inherited);
        self.transient += c.transient;
    }
}

/// One summary row: spawns grouped by parent, exec chain and strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub container: Option<String>,
    pub parent_comm: Vec<u8>,
    /// The exec path, or `first → last` for an exec chain.
    pub exec_path: Vec<u8>,
    pub strategy: String,
    pub spawns: u64,
    pub close_median: u64,
    pub close_max: u64,
    pub window_median_ns: u64,
    pub window_p95_ns: u64,
    /// fds that reached the last image of each spawn.
    pub leaked_fds: u64,
    /// Inherited fds that reached the last image of each spawn.
    pub inherited_fds: u64,
    /// fds that crossed into images that exec'd again.
    pub transient_fds: u64,
    /// The first spawn's spawner, with the median walk.
    pub spawner: Spawner,
}

/// (container, parent, runtime, exec chain, strategy).
type GroupKey = (Option<String>, Vec<u8>, String, Vec<u8>, String);

impl Chain {
    fn key(&self) -> GroupKey {
        (
            self.container.clone(),
            self.parent_comm.clone(),
            self.spawner
                .runtime
                .as_ref()
                .map(Runtime::label)
                .unwrap_or_default(),
            self.exec_label(),
            self.strategy.clone(),
        )
    }
}

/// Joins exec records into spawns and groups them.
#[derive(Debug, Default)]
pub struct Chains {
    /// Processes still running, by pid: their chain so far.
    open: HashMap<u32, Chain>,
    done: BTreeMap<GroupKey, Acc>,
    spawns: u64,
    /// [`Chains::leak_totals`] of the chains closed so far.
    done_totals: LeakTotals,
}

/// Leaks over the spawns, each counted at its last image.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LeakTotals {
    /// Spawns whose last image got fds.
    pub spawns_with_leaks: u64,
    /// Those fds.
    pub leaked_fds: u64,
    /// Inherited fds that reached last images.
    pub inherited_fds: u64,
    /// fds that crossed into images that exec'd again.
    pub transient_fds: u64,
    /// Spawns whose last image got fds that `--fail-on-leak` counts.
    pub spawns_with_new_leaks: u64,
    /// Leaked fds (as `leaked_fds`) that crossed a privilege or namespace boundary.
    pub critical_fds: u64,
}

impl LeakTotals {
    fn add(&mut self, c: &Chain) {
        self.spawns_with_leaks += u64::from(c.leaked > 0);
        self.leaked_fds += u64::from(c.leaked);
        self.inherited_fds += u64::from(c.inherited);
        self.transient_fds += c.transient;
        self.spawns_with_new_leaks += u64::from(c.new_leaks > 0);
        self.critical_fds += u64::from(c.critical);
    }
}

impl Chains {
    /// Adds an exec record.
    pub fn add(&mut self, l: &Link<'_>) {
        if l.reexec {
            if let Some(c) = self.open.get_mut(&l.pid).filter(|c| !c.judged_final) {
                c.extend(l);
                return;
            }
        }
        self.spawns += 1;
        // A new spawn with a pid seen before: the earlier process is over.
        if let Some(prev) = self.open.insert(l.pid, Chain::new(l)) {
            self.close(prev);
        }
    }

    /// A traced process exited: its chain is complete.
    pub fn exit(&mut self, pid: u32) {
        if let Some(c) = self.open.remove(&pid) {
            self.close(c);
        }
    }

    fn close(&mut self, c: Chain) {
        self.done_totals.add(&c);
        self.done.entry(c.key()).or_default().add(&c);
    }

    /// Spawns seen: exec records that were not re-execs of a process already counted.
    pub fn spawns(&self) -> u64 {
        self.spawns
    }

    /// The leaks of every spawn, running ones included.
    pub fn leak_totals(&self) -> LeakTotals {
        let mut t = self.done_totals;
        for c in self.open.values() {
            t.add(c);
        }
        t
    }

    /// The summary rows, running processes' chains included as they stand.
    pub fn rows(&self) -> Vec<Row> {
        let mut all = self.done.clone();
        for c in self.open.values() {
            all.entry(c.key()).or_default().add(c);
        }
        all.into_iter()
            .map(
                |((container, parent_comm, _, exec_path, strategy), acc)| Row {
                    container,
                    parent_comm,
                    exec_path,
                    strategy,
                    spawns: acc.closes.len() as u64,
                    close_median: stats::median(&acc.closes).unwrap_or(0),
                    close_max: acc.closes.iter().copied().max().unwrap_or(0),
                    window_median_ns: stats::median(&acc.windows).unwrap_or(0),
                    window_p95_ns: stats::percentile(&acc.windows, 95.0).unwrap_or(0),
                    leaked_fds: acc.leaked,
                    inherited_fds: acc.inherited,
                    transient_fds: acc.transient,
                    spawner: Spawner {
                        walked: stats::median(&acc.walked).unwrap_or(0),
                        ..acc.spawner
                    },
                },
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link<'a>(pid: u32, reexec: bool, path: &'a str, strategy: &'a str, leaked: u32) -> Link<'a> {
        Link {
            pid,
            reexec,
            // Steps judged as trace judges them: each exec'd again soon after.
            execd_again: true,
            own_image: false,
            container: None,
            parent_comm: b"sh",
            exec_path: path.as_bytes(),
            strategy,
            closed_fds: strategy != "none",
            close_calls: if strategy == "close-loop" { 100 } else { 0 },
            window_ns: 1000,
            leaked,
            inherited: 0,
            new_leaks: leaked.into(),
            critical: 0,
            spawner: Spawner::default(),
            code: SpawnerCode::default(),
            leak_call: None,
        }
    }

    fn totals(c: &Chains) -> (u64, u64, u64) {
        let t = c.leak_totals();
        (t.spawns_with_leaks, t.leaked_fds, t.transient_fds)
    }

    #[test]
    fn env_then_true_is_one_spawn_with_transient_fds() {
        let mut c = Chains::default();
        c.add(&link(10, false, "/usr/bin/env", "none", 2));
        c.add(&link(10, true, "/bin/true", "none", 2));
        assert_eq!(c.spawns(), 1);
        assert_eq!(totals(&c), (1, 2, 2));
        let rows = c.rows();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(r.exec_path, "/usr/bin/env → /bin/true".as_bytes());
        assert_eq!((r.spawns, r.leaked_fds, r.transient_fds), (1, 2, 2));
        assert_eq!(r.window_median_ns, 2000, "fork to the last exec");
        c.exit(10);
        assert_eq!(c.rows(), rows, "an exit changes nothing but memory");
        assert_eq!(totals(&c), (1, 2, 2), "exited chains still count");
    }

    #[test]
    fn fail_on_leak_counts_the_last_images_new_leaks() {
        let mut c = Chains::default();
        // The helper got 3 fds, 1 of them not inherited by the traced command; the image
        // it exec'd got 2, both inherited: nothing for --fail-on-leak.
        c.add(&Link {
            new_leaks: 1,
            ..link(30, false, "/usr/bin/env", "none", 3)
        });
        c.add(&Link {
            new_leaks: 0,
            ..link(30, true, "/bin/true", "none", 2)
        });
        let t = c.leak_totals();
        assert_eq!((t.spawns_with_leaks, t.spawns_with_new_leaks), (1, 0));
        c.add(&Link {
            new_leaks: 1,
            ..link(31, false, "/bin/cat", "none", 1)
        });
        c.exit(31);
        assert_eq!(c.leak_totals().spawns_with_new_leaks, 1);
    }

    #[test]
    fn the_helper_that_closes_names_the_strategy() {
        let mut c = Chains::default();
        c.add(&link(
            20,
            false,
            "/usr/lib/jvm/lib/jspawnhelper",
            "none",
            14,
        ));
        c.add(&link(20, true, "/bin/true", "close-loop", 0));
        let r = &c.rows()[0];
        assert_eq!(r.strategy, "close-loop");
        assert_eq!((r.leaked_fds, r.transient_fds, r.close_max), (0, 14, 100));
    }

    #[test]
    fn a_step_judged_final_is_a_spawn_of_its_own() {
        let mut c = Chains::default();
        // Its fds were judged leaks (it exec'd again only after the grace): one verdict.
        c.add(&Link {
            execd_again: false,
            ..link(40, false, "/usr/bin/slow-wrapper", "none", 2)
        });
        c.add(&link(40, true, "/bin/true", "none", 0));
        assert_eq!(c.spawns(), 2);
        assert_eq!(totals(&c), (1, 2, 0));
    }

    #[test]
    fn separate_spawns_stay_separate() {
        let mut c = Chains::default();
        c.add(&link(1, false, "/bin/true", "none", 0));
        c.add(&link(2, false, "/bin/true", "none", 1));
        c.add(&link(1, false, "/bin/true", "none", 0)); // pid reused
        c.add(&link(3, true, "/bin/true", "none", 0)); // a re-exec with no start seen
        assert_eq!(c.spawns(), 4);
        let rows = c.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].spawns, rows[0].leaked_fds), (4, 1));
        let mut long = Chains::default();
        long.add(&link(5, false, "/a", "none", 0));
        long.add(&link(5, true, "/b", "none", 0));
        long.add(&link(5, true, "/c", "none", 0));
        assert_eq!(long.rows()[0].exec_path, "/a → … → /c".as_bytes());
    }
}
