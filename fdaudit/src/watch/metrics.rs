//! `watch`'s metrics: spawn records and scan results folded into Prometheus families with
//! bounded cardinality.
//!
//! Labels say where a spawn happened and what it ran — container (or cgroup), parent and
//! child executable, closing strategy — never a pid or an argument vector, so the series
//! count follows the number of services, not of processes. Even so a node running throwaway
//! executables (`/tmp/tmp.XXXX/script`) could make new label sets without end: past
//! `max_series` distinct label sets, new ones are folded into one set whose labels are all
//! [`OVERFLOW`], and `fdaudit_series_overflow_total` counts what was folded.

use std::collections::{BTreeMap, HashSet};

use super::labels::non_empty;
pub use super::labels::OVERFLOW;
use prometheus_client::{
    encoding::{EncodeLabelSet, LabelSetEncoder},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{exponential_buckets, Histogram},
    },
    registry::Registry,
};

/// Default cap on distinct spawn label sets.
pub const DEFAULT_MAX_SERIES: usize = 2000;

/// An eBPF program of fdaudit's, by its name in the object.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgramLabels {
    pub program: String,
}

/// `EncodeLabelSet` through [`non_empty`] for a struct of `String` labels.
macro_rules! non_empty_labels {
    ($t:ty: $($field:ident),+) => {
        impl EncodeLabelSet for $t {
            fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
                non_empty(&[$((stringify!($field), self.$field.as_str())),+], encoder)
            }
        }
    };
}

non_empty_labels!(SpawnLabels: container_id, cgroup, parent, child, strategy);
non_empty_labels!(WindowLabels: container_id, cgroup, strategy);
non_empty_labels!(
    LeakLabels: container_id,
    cgroup,
    parent,
    child,
    strategy,
    kind,
    origin,
    boundary
);
non_empty_labels!(ProcessLabels: container_id, cgroup, child);

/// Where a spawn happened and what it ran.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct SpawnLabels {
    /// The container id ("" outside containers).
    pub container_id: String,
    /// The cgroup path on the unified hierarchy ("" when unknown).
    pub cgroup: String,
    /// The parent's command name.
    pub parent: String,
    /// The child's executable's file name.
    pub child: String,
    /// How the child closed fds before exec ("" without `--syscalls`: not counted, omitted).
    pub strategy: String,
}

impl SpawnLabels {
    fn overflow() -> Self {
        SpawnLabels {
            container_id: OVERFLOW.into(),
            cgroup: OVERFLOW.into(),
            parent: OVERFLOW.into(),
            child: OVERFLOW.into(),
            strategy: OVERFLOW.into(),
        }
    }
}

/// Labels of the window histogram: fewer than a spawn's, since each histogram label set is
/// 14 series (11 buckets, +Inf, sum, count). Derived from admitted spawn label sets, so the
/// cap bounds them too.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct WindowLabels {
    container_id: String,
    cgroup: String,
    strategy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LeakLabels {
    container_id: String,
    cgroup: String,
    parent: String,
    child: String,
    strategy: String,
    /// The leaked fd's kind (regular, pipe, socket, eventfd, ...).
    kind: String,
    /// `watch --origin`: the syscall that made it inheritable.
    origin: String,
    /// What the spawn crossed (`uid+mnt_namespace`: the changed fields in a fixed order, a
    /// bounded set); absent when it ran as and where its parent did. Such leaks are critical.
    boundary: String,
}

/// Labels of scan gauges: a process's container and executable, named as in the spawn
/// labels so that the two join (`child`: the file name of the image the process runs).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ProcessLabels {
    pub container_id: String,
    pub cgroup: String,
    /// The file name of `/proc/PID/exe`, as a spawn's `child` is its exec path's.
    pub child: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeverityLabels {
    severity: String,
}

/// What the metrics need from one spawn record.
#[derive(Debug, Clone)]
pub struct SpawnObservation {
    pub labels: SpawnLabels,
    /// Kind of each leaked fd (one entry per fd; truncated lists are topped up by the caller).
    pub leaked_kinds: Vec<String>,
    /// `--origin`: the syscall that made each of them inheritable, in the same order
    /// ("unknown" when none was seen; empty without the option).
    pub leaked_origins: Vec<String>,
    /// fds of an exec chain's step (its image exec'd again): passed on, not leaks.
    pub transient_fds: u64,
    /// Each leaked fd's file, for `fdaudit_leaked_files_total` (files.rs).
    pub leaked_files: Vec<super::files::LeakedFile>,
    /// The spawn's boundary as its changed keys (`uid+mnt_namespace`), empty when none.
    pub boundary: String,
    /// close() calls between fork and exec; `None` with --no-syscalls.
    pub close_calls: Option<u64>,
    /// Fork to exec, seconds; `None` when the fork was not seen.
    pub window_seconds: Option<f64>,
}

/// What the metrics need from one scanned process.
#[derive(Debug, Clone)]
pub struct ProcessObservation {
    pub labels: ProcessLabels,
    pub inheritable_fds: u64,
    /// Open fds the scan saw (`ProcReport::fd_count`).
    pub open_fds: u64,
    pub nofile_soft: Option<u64>,
}

/// Every metric `watch` exports, with the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    max_series: usize,
    admitted: HashSet<SpawnLabels>,
    admitted_processes: HashSet<ProcessLabels>,
    spawns: Family<SpawnLabels, Counter>,
    spawns_with_leaks: Family<SpawnLabels, Counter>,
    leaked_fds: Family<LeakLabels, Counter>,
    transient_fds: Family<SpawnLabels, Counter>,
    close_calls: Family<SpawnLabels, Counter>,
    window: Family<WindowLabels, Histogram, fn() -> Histogram>,
    lost_records: Counter,
    untracked_forks: Counter,
    bpf_missed_runs: Family<ProgramLabels, Counter>,
    /// The skipped runs already counted, per program.
    missed_seen: BTreeMap<String, u64>,
    overflow: Counter,
    inheritable_fds: Family<ProcessLabels, Gauge>,
    open_fds: Family<ProcessLabels, Gauge>,
    nofile_soft: Family<ProcessLabels, Gauge>,
    findings: Family<SeverityLabels, Gauge>,
    scans: Counter,
    auth_failures: Counter,
    files: super::files::LeakedFiles,
    kernel_seen: (u64, u64),
}

fn window_histogram() -> Histogram {
    // 10 µs .. ~10 s by factors of 4: a posix_spawn, a fork+exec, a close loop to 2^20.
    Histogram::new(exponential_buckets(1e-5, 4.0, 11))
}

impl Metrics {
    pub fn new(max_series: usize) -> Metrics {
        let mut registry = Registry::with_prefix("fdaudit");
        let m = Metrics {
            max_series,
            admitted: HashSet::new(),
            admitted_processes: HashSet::new(),
            spawns: Family::default(),
            spawns_with_leaks: Family::default(),
            leaked_fds: Family::default(),
            transient_fds: Family::default(),
            close_calls: Family::default(),
            window: Family::new_with_constructor(window_histogram),
            lost_records: Counter::default(),
            untracked_forks: Counter::default(),
            bpf_missed_runs: Family::default(),
            missed_seen: BTreeMap::new(),
            overflow: Counter::default(),
            inheritable_fds: Family::default(),
            open_fds: Family::default(),
            nofile_soft: Family::default(),
            findings: Family::default(),
            scans: Counter::default(),
            auth_failures: Counter::default(),
            files: super::files::LeakedFiles::new(),
            kernel_seen: (0, 0),
            registry: Registry::default(),
        };
        m.register_spawn_metrics(&mut registry);
        m.register_scan_metrics(&mut registry);
        m.files.register(&mut registry);
        Metrics { registry, ..m }
    }

    /// The metrics `trace`'s records and the kernel's counters feed.
    fn register_spawn_metrics(&self, registry: &mut Registry) {
        registry.register(
            "spawns",
            "Processes that completed an exec (spawns)",
            self.spawns.clone(),
        );
        registry.register(
            "spawns_with_leaks",
            "Spawns whose new image inherited at least one fd >= 3",
            self.spawns_with_leaks.clone(),
        );
        registry.register(
            "leaked_fds",
            "File descriptors >= 3 that crossed execve, by kind",
            self.leaked_fds.clone(),
        );
        registry.register(
            "transient_fds",
            "File descriptors >= 3 that crossed into an image that exec'd again without forking (an exec chain's step, such as jspawnhelper): passed on, not leaks",
            self.transient_fds.clone(),
        );
        registry.register(
            "preexec_close_calls",
            "close() calls made between fork and exec (counted with --syscalls only)",
            self.close_calls.clone(),
        );
        registry.register(
            "spawn_window_seconds",
            "Time from fork to exec of a spawn, probes included",
            self.window.clone(),
        );
        registry.register(
            "lost_records",
            "Spawn and exit records the kernel could not hand over (ring buffer full)",
            self.lost_records.clone(),
        );
        registry.register(
            "untracked_forks",
            "Forks not followed because the kernel's process table was full",
            self.untracked_forks.clone(),
        );
        registry.register(
            "bpf_missed_runs",
            "Runs of an eBPF program the kernel skipped (preempted, and its hook fired again on that CPU): a skipped exec, fork or exit program loses a record, a syscall program a count. Absent before Linux 5.12",
            self.bpf_missed_runs.clone(),
        );
        registry.register(
            "http_auth_failures",
            "Requests refused with 401 for lack of the right basic auth credentials (--web-config)",
            self.auth_failures.clone(),
        );
        registry.register(
            "series_overflow",
            "Spawns folded into the _overflow label set because the label-set cap was reached",
            self.overflow.clone(),
        );
    }

    /// The counter the endpoint moves on each request refused with 401.
    pub fn auth_failures(&self) -> Counter {
        self.auth_failures.clone()
    }

    /// The metrics the periodic scan of /proc sets.
    fn register_scan_metrics(&self, registry: &mut Registry) {
        registry.register(
            "inheritable_fds",
            "fds >= 3 without close-on-exec held by processes, at the last scan",
            self.inheritable_fds.clone(),
        );
        // The same label set as nofile_soft, so that an alert divides or compares the two
        // one to one (deploy/prometheus/fdaudit-rules.yml).
        registry.register(
            "open_fds",
            "Most open fds of any one process of a program in a container, at the last scan",
            self.open_fds.clone(),
        );
        registry.register(
            "nofile_soft",
            "Highest RLIMIT_NOFILE soft limit among processes, at the last scan",
            self.nofile_soft.clone(),
        );
        registry.register(
            "findings",
            "Scan findings at the last scan, by severity",
            self.findings.clone(),
        );
        registry.register("scans", "Scans of /proc completed", self.scans.clone());
    }

    /// The label set to count under: `labels` when it is known or there is room, else the
    /// overflow set (counted).
    fn admit(&mut self, labels: SpawnLabels) -> SpawnLabels {
        if self.admitted.contains(&labels) {
            return labels;
        }
        if self.admitted.len() < self.max_series {
            self.admitted.insert(labels.clone());
            return labels;
        }
        self.overflow.inc();
        SpawnLabels::overflow()
    }

    pub fn observe_spawn(&mut self, obs: SpawnObservation) {
        let (container, parent) = (&obs.labels.container_id, &obs.labels.parent);
        self.files.observe(container, parent, &obs.leaked_files);
        let l = self.admit(obs.labels);
        self.spawns.get_or_create(&l).inc();
        if !obs.leaked_kinds.is_empty() {
            self.spawns_with_leaks.get_or_create(&l).inc();
        }
        for (i, kind) in obs.leaked_kinds.into_iter().enumerate() {
            // Kinds are a closed set (fdkind::FdKind), so this multiplies series by at most it.
            let ll = LeakLabels {
                container_id: l.container_id.clone(),
                cgroup: l.cgroup.clone(),
                parent: l.parent.clone(),
                child: l.child.clone(),
                strategy: l.strategy.clone(),
                kind,
                // A closed set too (the origin table's syscalls and "unknown").
                origin: obs.leaked_origins.get(i).cloned().unwrap_or_default(),
                boundary: obs.boundary.clone(),
            };
            self.leaked_fds.get_or_create(&ll).inc();
        }
        if obs.transient_fds > 0 {
            self.transient_fds
                .get_or_create(&l)
                .inc_by(obs.transient_fds);
        }
        if let Some(c) = obs.close_calls {
            self.close_calls.get_or_create(&l).inc_by(c);
        }
        if let Some(w) = obs.window_seconds {
            let wl = WindowLabels {
                container_id: l.container_id.clone(),
                cgroup: l.cgroup.clone(),
                strategy: l.strategy.clone(),
            };
            self.window.get_or_create(&wl).observe(w);
        }
    }

    /// The kernel's own totals since the programs were loaded (lost records, untracked forks):
    /// the counters advance by what is new.
    pub fn set_kernel_totals(&mut self, lost_records: u64, untracked_forks: u64) {
        let (lost0, forks0) = self.kernel_seen;
        self.lost_records.inc_by(lost_records.saturating_sub(lost0));
        self.untracked_forks
            .inc_by(untracked_forks.saturating_sub(forks0));
        self.kernel_seen = (lost_records.max(lost0), untracked_forks.max(forks0));
    }

    /// The programs' skipped runs since they were loaded: the counters advance by what is
    /// new. A kernel without the counter (before 5.12) exports no series.
    pub fn set_missed_runs(&mut self, missed: &crate::engine::ebpf::MissedRuns) {
        let crate::engine::ebpf::MissedRuns::Known(counts) = missed else {
            return;
        };
        for (program, &n) in counts {
            let seen = self.missed_seen.entry(program.clone()).or_default();
            self.bpf_missed_runs
                .get_or_create(&ProgramLabels {
                    program: program.clone(),
                })
                .inc_by(n.saturating_sub(*seen));
            *seen = n.max(*seen);
        }
    }

    /// Replaces the scan gauges with one scan's results. Processes are summed (inheritable
    /// fds) or maxed (open fds, limits) per label set; label sets past the cap go to the
    /// overflow set.
    pub fn set_scan(&mut self, processes: &[ProcessObservation], findings: &[(String, u64)]) {
        self.inheritable_fds.clear();
        self.open_fds.clear();
        self.nofile_soft.clear();
        self.findings.clear();
        // Scans replace each other: only this scan's label sets count against the cap.
        self.admitted_processes.clear();
        for p in processes {
            let labels = if self.admitted_processes.contains(&p.labels)
                || self.admitted_processes.len() < self.max_series
            {
                self.admitted_processes.insert(p.labels.clone());
                p.labels.clone()
            } else {
                ProcessLabels {
                    container_id: OVERFLOW.into(),
                    cgroup: OVERFLOW.into(),
                    child: OVERFLOW.into(),
                }
            };
            self.inheritable_fds
                .get_or_create(&labels)
                .inc_by(i64::try_from(p.inheritable_fds).unwrap_or(i64::MAX));
            set_max(&self.open_fds, &labels, p.open_fds);
            if let Some(n) = p.nofile_soft {
                set_max(&self.nofile_soft, &labels, n);
            }
        }
        for (severity, n) in findings {
            self.findings
                .get_or_create(&SeverityLabels {
                    severity: severity.clone(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        self.scans.inc();
    }

    /// OpenMetrics text (ends with `# EOF`): fdaudit's families, then the agent's own
    /// (`process_*`, `fdaudit_build_info`), in a stable order ([`super::exposition`]).
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &super::exposition::self_metrics()))
            .and_then(|()| encode_eof(&mut out))
            .expect("writing to a String does not fail");
        super::exposition::tidy(&out)
    }
}

/// Raises `family`'s gauge for `labels` to `n` (created at `n` when new: a family's gauge
/// starts at 0, and `n` is never negative).
fn set_max(family: &Family<ProcessLabels, Gauge>, labels: &ProcessLabels, n: u64) {
    let g = family.get_or_create(labels);
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    if n > g.get() {
        g.set(n);
    }
}

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    impl Metrics {
        /// Distinct spawn label sets currently exported (at most the cap, plus the overflow set).
        fn spawn_series(&self) -> usize {
            self.admitted.len() + usize::from(self.overflow.get() > 0)
        }
    }

    fn labels(container: &str, child: &str) -> SpawnLabels {
        SpawnLabels {
            container_id: container.into(),
            cgroup: format!("/system.slice/docker-{container}.scope"),
            parent: "sh".into(),
            child: child.into(),
            strategy: "none".into(),
        }
    }

    fn spawn(container: &str, child: &str, kinds: &[&str]) -> SpawnObservation {
        SpawnObservation {
            labels: labels(container, child),
            leaked_kinds: kinds.iter().map(|k| k.to_string()).collect(),
            leaked_origins: Vec::new(),
            leaked_files: Vec::new(),
            transient_fds: 0,
            boundary: String::new(),
            close_calls: Some(5),
            window_seconds: Some(0.002),
        }
    }

    fn value(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn a_leak_across_a_boundary_is_labelled_with_what_changed() {
        let mut m = Metrics::new(10);
        let mut obs = spawn("abc", "true", &["directory"]);
        obs.boundary = "mnt_namespace".into();
        m.observe_spawn(obs);
        m.observe_spawn(spawn("abc", "cat", &["file"]));
        let t = m.encode();
        assert!(
            t.lines().any(|l| l.starts_with("fdaudit_leaked_fds_total{")
                && l.contains("child=\"true\"")
                && l.contains("boundary=\"mnt_namespace\"")),
            "{t}"
        );
        assert!(
            t.lines().any(|l| l.starts_with("fdaudit_leaked_fds_total{")
                && l.contains("child=\"cat\"")
                && !l.contains("boundary=")),
            "{t}"
        );
    }

    #[test]
    fn with_origin_each_leak_is_labelled_by_its_syscall() {
        let mut m = Metrics::new(10);
        let mut obs = spawn("abc", "cat", &["file", "file"]);
        obs.leaked_origins = vec!["openat".into(), "unknown".into()];
        m.observe_spawn(obs);
        let t = m.encode();
        for origin in ["openat", "unknown"] {
            let l = format!("kind=\"file\",origin=\"{origin}\"}} 1");
            assert!(t.lines().any(|x| x.ends_with(&l)), "no {origin} leak: {t}");
        }
        // Without --origin: no origin label at all.
        let mut m = Metrics::new(10);
        m.observe_spawn(spawn("abc", "cat", &["file"]));
        assert!(!m.encode().contains("origin="));
    }

    #[test]
    fn spawns_leaks_and_windows_are_counted_per_label_set() {
        let mut m = Metrics::new(10);
        m.observe_spawn(spawn("abc", "cat", &["file", "file", "socket-inet"]));
        m.observe_spawn(spawn("abc", "cat", &[]));
        m.observe_spawn(spawn("def", "ls", &["pipe"]));
        m.set_kernel_totals(3, 0);
        m.set_kernel_totals(5, 1);
        let missed = |exec: u64| {
            crate::engine::ebpf::MissedRuns::Known(
                [("sched_process_exec", exec), ("sys_enter", 0)]
                    .map(|(p, n)| (p.to_string(), n))
                    .into(),
            )
        };
        m.set_missed_runs(&missed(200));
        m.set_missed_runs(&missed(236));
        m.set_missed_runs(&crate::engine::ebpf::MissedRuns::Unknown);
        let t = m.encode();
        let sel = r#"{container_id="abc",cgroup="/system.slice/docker-abc.scope",parent="sh",child="cat",strategy="none""#;
        assert_eq!(
            value(&t, &format!("fdaudit_spawns_total{sel}}}")),
            Some(2.0),
            "{t}"
        );
        assert_eq!(
            value(&t, &format!("fdaudit_spawns_with_leaks_total{sel}}}")),
            Some(1.0)
        );
        assert_eq!(
            value(
                &t,
                &format!("fdaudit_leaked_fds_total{sel},kind=\"file\"}}")
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &t,
                &format!("fdaudit_leaked_fds_total{sel},kind=\"socket-inet\"}}")
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&t, &format!("fdaudit_preexec_close_calls_total{sel}}}")),
            Some(10.0)
        );
        let wsel =
            r#"{container_id="abc",cgroup="/system.slice/docker-abc.scope",strategy="none"}"#;
        assert_eq!(
            value(&t, &format!("fdaudit_spawn_window_seconds_count{wsel}")),
            Some(2.0),
            "{t}"
        );
        assert_eq!(value(&t, "fdaudit_lost_records_total"), Some(5.0));
        assert_eq!(value(&t, "fdaudit_untracked_forks_total"), Some(1.0));
        assert_eq!(
            value(
                &t,
                r#"fdaudit_bpf_missed_runs_total{program="sched_process_exec"}"#
            ),
            Some(236.0),
            "{t}"
        );
        assert_eq!(
            value(&t, r#"fdaudit_bpf_missed_runs_total{program="sys_enter"}"#),
            Some(0.0),
            "{t}"
        );
        assert_eq!(value(&t, "fdaudit_series_overflow_total"), Some(0.0));
        assert!(t.ends_with("# EOF\n"));
        assert!(!t.contains("pid="), "no per-process labels");
    }

    #[test]
    fn label_sets_past_the_cap_fold_into_overflow() {
        let mut m = Metrics::new(3);
        for i in 0..1000 {
            m.observe_spawn(spawn("c", &format!("tmp{i}"), &["file"]));
        }
        // 3 admitted + the overflow set; the first ones keep counting.
        assert_eq!(m.spawn_series(), 4);
        m.observe_spawn(spawn("c", "tmp0", &[]));
        let t = m.encode();
        assert_eq!(value(&t, "fdaudit_series_overflow_total"), Some(997.0));
        let over = r#"fdaudit_spawns_total{container_id="_overflow",cgroup="_overflow",parent="_overflow",child="_overflow",strategy="_overflow"}"#;
        assert_eq!(value(&t, over), Some(997.0), "{t}");
        assert!(t.contains(r#"child="tmp0""#) && !t.contains(r#"child="tmp3""#));
        assert_eq!(t.matches("fdaudit_spawns_total{").count(), 4);
    }

    #[test]
    fn scans_replace_the_gauges() {
        let mut m = Metrics::new(2);
        let p = |child: &str, fds, lim| ProcessObservation {
            labels: ProcessLabels {
                container_id: String::new(),
                cgroup: "/".into(),
                child: child.into(),
            },
            inheritable_fds: fds,
            open_fds: fds + 3,
            nofile_soft: Some(lim),
        };
        m.set_scan(
            &[
                p("nginx", 3, 1024),
                p("nginx", 4, 65536),
                p("a", 1, 1),
                p("b", 1, 1),
            ],
            &[("high".into(), 2), ("low".into(), 5)],
        );
        let t = m.encode();
        // No empty label: container_id is left out for a host process.
        let sel = r#"{cgroup="/",child="nginx"}"#;
        assert_eq!(
            value(&t, &format!("fdaudit_inheritable_fds{sel}")),
            Some(7.0),
            "{t}"
        );
        assert_eq!(
            value(&t, &format!("fdaudit_nofile_soft{sel}")),
            Some(65536.0)
        );
        assert_eq!(
            value(
                &t,
                r#"fdaudit_inheritable_fds{container_id="_overflow",cgroup="_overflow",child="_overflow"}"#
            ),
            Some(1.0)
        );
        assert_eq!(value(&t, r#"fdaudit_findings{severity="high"}"#), Some(2.0));
        m.set_scan(&[p("a", 0, 1)], &[]);
        let t = m.encode();
        assert!(
            !t.contains("nginx"),
            "the previous scan's series are gone: {t}"
        );
        assert!(!t.contains("severity="));
        assert_eq!(value(&t, "fdaudit_scans_total"), Some(2.0));
    }

    /// `fdaudit_open_fds` is the most fds of any one process of a label set (not their sum:
    /// each process has its own limit), with exactly `fdaudit_nofile_soft`'s label sets, so
    /// that `predict_linear(fdaudit_open_fds[1h], ...) > fdaudit_nofile_soft` matches one to
    /// one; the scan cap bounds it as it bounds the other scan gauges.
    #[test]
    fn open_fds_is_the_most_of_any_process_with_nofile_softs_labels() {
        let mut m = Metrics::new(3);
        let p = |container: &str, child: &str, open_fds, soft| ProcessObservation {
            labels: ProcessLabels {
                container_id: container.into(),
                cgroup: format!("/system.slice/docker-{container}.scope"),
                child: child.into(),
            },
            inheritable_fds: 0,
            open_fds,
            nofile_soft: Some(soft),
        };
        let mut procs = vec![
            p("c1", "nginx", 40, 1024),
            p("c1", "nginx", 900, 1024),
            p("c1", "nginx", 7, 1024),
            p("c2", "nginx", 12, 4096),
            p("c1", "idle", 0, 1024),
        ];
        // Past the cap of 3 label sets: two more programs, folded into the overflow set.
        procs.extend([p("c3", "x", 50, 1024), p("c3", "y", 60, 2048)]);
        m.set_scan(&procs, &[]);
        let t = m.encode();
        let sel = |c: &str, child: &str| {
            format!(
                r#"{{container_id="{c}",cgroup="/system.slice/docker-{c}.scope",child="{child}"}}"#
            )
        };
        let open = |sel: &str| value(&t, &format!("fdaudit_open_fds{sel} "));
        assert_eq!(open(&sel("c1", "nginx")), Some(900.0), "{t}");
        assert_eq!(open(&sel("c2", "nginx")), Some(12.0), "{t}");
        // A process with no fd open still has its series (0 is a value, not an absence).
        assert_eq!(open(&sel("c1", "idle")), Some(0.0), "{t}");
        let over = r#"{container_id="_overflow",cgroup="_overflow",child="_overflow"}"#;
        assert_eq!(open(over), Some(60.0), "{t}");
        let label_sets = |family: &str| -> Vec<String> {
            t.lines()
                .filter_map(|l| l.strip_prefix(family)?.strip_prefix('{'))
                .map(|l| l.rsplit_once(' ').map_or(l, |(k, _)| k).to_owned())
                .collect()
        };
        let open_sets = label_sets("fdaudit_open_fds");
        assert_eq!(open_sets.len(), 4, "3 admitted and the overflow set: {t}");
        assert_eq!(open_sets, label_sets("fdaudit_nofile_soft"), "{t}");
        assert!(!t.contains("pid="), "no per-process labels");
        // The next scan replaces the values: a process that closed its fds drops.
        m.set_scan(&[p("c1", "nginx", 41, 1024)], &[]);
        let t = m.encode();
        assert_eq!(
            value(&t, &format!("fdaudit_open_fds{} ", sel("c1", "nginx"))),
            Some(41.0),
            "{t}"
        );
        assert_eq!(t.matches("fdaudit_open_fds{").count(), 1, "{t}");
    }
}
