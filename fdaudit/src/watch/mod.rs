//! `fdaudit watch`: a long-running node agent. Traces every spawn on the host (or in one
//! cgroup), scans /proc now and then, and exports what it saw as Prometheus metrics: on
//! `--listen` (OpenMetrics over HTTP) and/or as a node_exporter textfile.

mod auth;
mod exposition;
mod files;
mod http;
mod labels;
pub mod metrics;
#[cfg(test)]
mod same_spawn;
mod textfile;
mod webconfig;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::{
    engine::{
        counting::Counting,
        follow::{follow, Sink, Until},
        session::{Session, SessionOptions},
        spawn::{Event, Spawn},
        steps::Steps,
        wait::Waiter,
    },
    scan::{self, Severity},
    signals::{Action, CallerIgnored},
};
use metrics::{Metrics, ProcessLabels, ProcessObservation, SpawnLabels, SpawnObservation};

/// Arguments of `fdaudit watch`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Runs until SIGTERM or SIGINT (exit status 0, every program detached). SIGHUP \
rewrites the --textfile at once, reopening its directory."
)]
pub struct WatchArgs {
    /// Serve OpenMetrics on this address at /metrics.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9749")]
    pub listen: SocketAddr,

    /// TLS and basic auth for --listen, in node_exporter's web configuration format
    /// (tls_server_config, basic_auth_users with bcrypt hashes); see docs/fleet.md.
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,

    /// Do not serve HTTP (use with --textfile).
    #[arg(long, conflicts_with_all = ["listen", "web_config"], requires = "textfile")]
    pub no_listen: bool,

    /// Also write the metrics to DIR/fdaudit.prom for node_exporter's textfile collector
    /// (written to a new temporary file of an unguessable name, then renamed over the old
    /// one; a DIR that is a symbolic link is refused).
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,

    /// Seconds between textfile writes.
    #[arg(long, value_name = "SECONDS", default_value_t = 15.0)]
    pub textfile_interval: f64,

    /// Only spawns and scanned processes in this cgroup and the cgroups below it (a path on
    /// the cgroup2 hierarchy or under its mount point); default: the whole host.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Also trace the syscalls between fork and exec: close counts and strategies (attaches
    /// the syscall tracepoints to the whole host; see the README's trace overhead). Default:
    /// leaks only, the scheduler tracepoints alone.
    // `--full` is the old spelling, kept hidden for one release (#25 item 5).
    #[arg(long = "syscalls", alias = "full")]
    pub syscalls: bool,

    /// Label each leaked fd with the syscall that made it inheritable (trace --origin).
    #[arg(long)]
    pub origin: bool,

    /// Seconds between scans of /proc (inheritable fds, findings, NOFILE limits); 0: none.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub scan_interval: f64,

    /// Cap on distinct spawn label sets (and, apart, on scan label sets); spawns beyond it
    /// are counted under `_overflow` labels and in fdaudit_series_overflow_total.
    #[arg(long, value_name = "N", default_value_t = metrics::DEFAULT_MAX_SERIES)]
    pub max_series: usize,

    /// Stop after this many seconds (tests, measurements).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
}

/// The metric labels and values of one spawn. Pure: unit-tested with made-up spawns.
pub fn observation(s: &Spawn, counting: Counting) -> SpawnObservation {
    let path = s.exec_path.escaped();
    let child = path
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("?");
    // An exec chain's step (engine::steps): its fds passed on to the next image, whose
    // own record says which of them crossed. Transient, as trace's summary counts them.
    let transient = s.flags.transient();
    let mut leaked_kinds: Vec<String> = s
        .leaked_fds
        .iter()
        .map(|f| f.kind.as_str().to_owned())
        .collect();
    // A truncated list: the rest are counted, of unknown kind.
    leaked_kinds.resize(
        leaked_kinds.len().max(s.leaked_count as usize),
        "unknown".into(),
    );
    let transient_fds = if transient {
        std::mem::take(&mut leaked_kinds).len() as u64
    } else {
        0
    };
    SpawnObservation {
        labels: SpawnLabels {
            container_id: s
                .identity
                .container
                .container_id
                .clone()
                .unwrap_or_default(),
            cgroup: s.identity.cgroup.clone().unwrap_or_default(),
            parent: s.parent_comm.escaped(),
            child: if s.exec_ok {
                child.to_owned()
            } else {
                "(exec failed)".into()
            },
            // Not counted without --syscalls: no label rather than a constant "unknown".
            strategy: if counting.syscalls() {
                s.strategy.as_str().to_owned()
            } else {
                String::new()
            },
        },
        leaked_origins: if transient {
            Vec::new()
        } else {
            s.origin_labels()
        },
        leaked_kinds,
        leaked_files: if transient {
            Vec::new()
        } else {
            files::of_spawn(s)
        },
        transient_fds,
        boundary: s.boundary.as_ref().map(|b| b.keys()).unwrap_or_default(),
        close_calls: counting.syscalls().then_some(s.calls.close_calls),
        // Without the probes' own cost, as trace reports it ("untraced").
        window_seconds: (s.window_ns > 0).then(|| s.window_corrected_ns as f64 / 1e9),
    }
}

/// OpenMetrics text turned into the Prometheus text format 0.0.4 that node_exporter's
/// textfile collector and older scrapers read: counters are named with their `_total`
/// suffix in HELP and TYPE, and the `# EOF` and `# UNIT` lines go.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The scan gauges' `child`: the file name of `/proc/PID/exe` (less ` (deleted)`), as a
/// spawn's is its exec path's, so the two join; `[comm]` when unreadable (a kernel thread).
fn exe_name(pid: u32, comm: &[u8]) -> String {
    let Some(exe) = crate::procfs_util::exe_of(pid) else {
        return format!("[{}]", crate::output::escape_bytes(comm));
    };
    let exe = exe.strip_suffix(b" (deleted)").unwrap_or(&exe);
    crate::output::escape_bytes(exe.rsplit(|&b| b == b'/').next().unwrap_or_default())
}

/// One scan of /proc folded into the metrics' gauges: of the processes in `cgroup`'s tree
/// (`--cgroup`, listed again at each scan), else of every process.
fn scan_once(metrics: &Mutex<Metrics>, close_ns: f64, cgroup: Option<&Path>) -> Result<()> {
    let cfg = scan::ScanOptions {
        root: "/proc".into(),
        // fdaudit itself, when it runs there, is not one of them (as a whole-host scan skips it).
        pids: cgroup.map(|d| {
            let mut m = crate::cgroup::members(d);
            m.retain(|&p| p != std::process::id());
            m
        }),
        uid: None,
        full_fds: false,
        close_ns,
        threads: 1,
        arch: scan::oflags::Arch::host(),
        stop: Default::default(),
    };
    const SEVERITIES: [Severity; 5] = Severity::ALL;
    let found = Mutex::new((
        Vec::new(),
        [0u64; SEVERITIES.len()],
        scan::fold::NofileFold::default(),
    ));
    let severity_index = |s: Severity| SEVERITIES.iter().position(|&x| x == s).unwrap_or(0);
    let outcome = scan::scan(
        &cfg,
        |r| {
            let obs = ProcessObservation {
                labels: ProcessLabels {
                    container_id: r
                        .identity
                        .container
                        .container_id
                        .clone()
                        .unwrap_or_default(),
                    cgroup: r.identity.cgroup.clone().unwrap_or_default(),
                    child: exe_name(r.pid, &r.comm),
                },
                inheritable_fds: u64::from(r.inheritable),
                open_fds: u64::from(r.fd_count),
                nofile_soft: r.nofile.and_then(|l| l.soft),
            };
            // NOFILE findings count once per program and limit, as scan's (scan::fold).
            let (nofile, rest) = scan::fold::split(r.findings);
            let sev: Vec<Severity> = rest.iter().map(|f| f.severity).collect();
            (obs, sev, nofile)
        },
        |(obs, sev, nofile)| {
            let mut g = found.lock().unwrap_or_else(|p| p.into_inner());
            g.0.push(obs);
            for s in sev {
                g.1[severity_index(s)] += 1;
            }
            for f in nofile {
                g.2.add(f);
            }
        },
    )
    .context("failed to scan /proc")?;
    let (procs, mut counts, fold) = found.into_inner().unwrap_or_else(|p| p.into_inner());
    for f in fold.into_findings().iter().chain(&outcome.shared) {
        counts[severity_index(f.severity)] += 1;
    }
    let findings: Vec<(String, u64)> = SEVERITIES
        .into_iter()
        .map(|s| (s.as_str().to_owned(), counts[severity_index(s)]))
        .collect();
    metrics
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .set_scan(&procs, &findings);
    Ok(())
}

/// The cgroup whose spawns are watched: its id, level and path on the hierarchy, and its
/// directory.
type Filter = (u64, u32, String, PathBuf);

pub fn run(args: WatchArgs) -> Result<u8> {
    check_args(&args)?;
    // Everything that can fail on bad input fails before a program is loaded.
    let server = listen(&args)?;
    let filter = watched_cgroup(&args)?;
    crate::signals::install(
        &[
            (libc::SIGINT, Action::Stop),
            (libc::SIGTERM, Action::Stop),
            (libc::SIGHUP, Action::Reload),
        ],
        CallerIgnored::Catch,
    );
    let mut session = start_session(&args, filter.as_ref())?;
    let metrics = Arc::new(Mutex::new(Metrics::new(args.max_series)));
    let scheme = match &server {
        Some((_, web)) if web.tls.is_some() => "https",
        _ => "http",
    };
    let http = server.map(|(s, web)| s.start(metrics.clone(), http::connection_cap(), web));
    crate::diag!(
        "fdaudit: watching {}{}; {}",
        match &filter {
            Some((_, _, p, _)) if p != "/" => format!("cgroup {p}"),
            _ => "the whole host".into(),
        },
        if session.counting().syscalls() {
            ""
        } else {
            " (leaks only)"
        },
        if args.no_listen {
            "no HTTP listener".to_owned()
        } else {
            format!("metrics on {scheme}://{}/metrics", args.listen)
        }
    );

    let result = watch_loop(&args, &mut session, &metrics);
    drop(session); // detach every program before anything else
    if let Some(h) = http {
        h.stop();
    }
    result?;
    if let Some(dir) = &args.textfile {
        let text = metrics.lock().unwrap_or_else(|p| p.into_inner()).encode();
        textfile::write(dir, &prometheus_text(&text))?;
    }
    if crate::signals::received().is_some() {
        crate::diag!("fdaudit: stopped, every program detached");
    }
    Ok(0)
}

/// Refuses arguments no run could use: a --textfile that is not a directory, negative or
/// non-finite intervals, no series allowed.
fn check_args(args: &WatchArgs) -> Result<()> {
    if let Some(dir) = &args.textfile {
        match textfile::check_dir(dir) {
            Ok(()) => {}
            // Refused by O_NOFOLLOW (ENOTDIR with O_DIRECTORY): not followed, on purpose.
            Err(_) if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) => bail!(
                "--textfile {}: a symbolic link; give the directory it points to ({})",
                dir.display(),
                std::fs::canonicalize(dir).map_or_else(|_| "unresolved".into(), |p| p.display().to_string())
            ),
            Err(_) => bail!(
                "--textfile {}: not a directory; give node_exporter's --collector.textfile.directory",
                dir.display()
            ),
        }
    }
    for (name, v) in [
        ("--scan-interval", args.scan_interval),
        ("--textfile-interval", args.textfile_interval),
    ] {
        if !v.is_finite() || v < 0.0 {
            bail!("{name} {v}: give a number of seconds, 0 or more");
        }
    }
    if args.max_series == 0 {
        bail!("--max-series 0: give at least 1");
    }
    Ok(())
}

/// The HTTP server on --listen and its --web-config, unless --no-listen.
fn listen(args: &WatchArgs) -> Result<Option<(http::Bound, webconfig::WebConfig)>> {
    if args.no_listen {
        return Ok(None);
    }
    let web = match &args.web_config {
        // One line: the file's errors name it, and what is wrong in it.
        Some(p) => webconfig::load(p).map_err(|e| anyhow::anyhow!("--web-config: {e:#}"))?,
        None => webconfig::WebConfig::default(),
    };
    let server = http::bind(args.listen).with_context(|| {
        format!(
            "failed to listen on {}: is another fdaudit watch running? pick another --listen",
            args.listen
        )
    })?;
    Ok(Some((server, web)))
}

/// The cgroup to filter on: --cgroup, else the hierarchy's root (the whole host); none
/// without a cgroup2 hierarchy.
fn watched_cgroup(args: &WatchArgs) -> Result<Option<Filter>> {
    let hierarchy = crate::cgroup::Hierarchy::open();
    Ok(match (&args.cgroup, &hierarchy) {
        (Some(p), _) => {
            let f = crate::cgroup::Followed::find(p)?;
            Some((f.id, f.level, f.path, f.dir))
        }
        // The whole host: every process is below the root cgroup.
        (None, Some(h)) => {
            let (id, _) = h
                .id_of(h.root())
                .with_context(|| format!("failed to stat {}", h.root().display()))?;
            Some((id, 0, "/".to_owned(), h.root().to_path_buf()))
        }
        (None, None) => None,
    })
}

/// Loads and attaches the tracer for `filter`, or for init's tree without one.
fn start_session(args: &WatchArgs, filter: Option<&Filter>) -> Result<Session> {
    let opts = SessionOptions {
        counting: Counting::new(args.syscalls, false),
        origin: args.origin,
        cgroup: filter.map(|f| (f.0, f.1)),
        cgroup_dir: filter.map(|f| f.3.clone()),
        // Nothing read per spawn that the metrics do not carry; records read in batches.
        agent: true,
        // fentry where the kernel takes it (FDAUDIT_BACKEND to choose): a whole host's
        // other syscalls then pay nothing for --syscalls.
        backend: crate::engine::ebpf::BackendChoice::from_env().map_err(anyhow::Error::msg)?,
        ..Default::default()
    };
    let mut session = Session::start(&opts)?;
    if filter.is_none() {
        // No cgroup2 to filter on: follow init's tree (kernel usermode helpers are missed).
        session
            .track_tree(1)
            .context("failed to trace PID 1's tree")?;
    }
    Ok(session)
}

/// Traces and scans until SIGTERM/SIGINT or --duration, keeping `metrics` up to date.
fn watch_loop(
    args: &WatchArgs,
    session: &mut Session,
    metrics: &Arc<Mutex<Metrics>>,
) -> Result<()> {
    let until = Until {
        deadline: args
            .duration
            .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0))),
        ..Until::default()
    };
    // No roots: the whole host (or cgroup) is followed until a signal or --duration.
    let mut waiter = Waiter::new(crate::signals::wake_pipe()?, &[]);
    let mut sink = WatchSink {
        args,
        metrics,
        jobs: Periodic::new(args),
        steps: Steps::default(),
    };
    follow(session, &mut waiter, &until, &mut sink)?;
    observe(metrics, sink.steps.finish(), session.counting());
    sink.jobs.finish();
    Ok(())
}

/// `watch` as a sink of the follow loop: spawns into the metrics, and its periodic jobs.
struct WatchSink<'a> {
    args: &'a WatchArgs,
    metrics: &'a Arc<Mutex<Metrics>>,
    jobs: Periodic,
    /// Each exec chain step's verdict, as `trace` judges it.
    steps: Steps,
}

impl Sink for WatchSink<'_> {
    fn events(&mut self, session: &mut Session, events: Vec<Event>) -> Result<()> {
        let judged = self.steps.push(events, Instant::now());
        observe(self.metrics, judged, session.counting());
        Ok(())
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(TICK)
    }

    fn tick(&mut self, session: &mut Session, now: Instant) -> Result<bool> {
        observe(self.metrics, self.steps.release(now), session.counting());
        self.jobs.kernel_totals(now, session, self.metrics)?;
        self.jobs.scan(now, self.metrics);
        if let Some(dir) = &self.args.textfile {
            self.jobs.textfile(now, dir, self.metrics);
        }
        Ok(false)
    }
}

/// How often the watch loop runs its periodic jobs at the latest.
const TICK: Duration = Duration::from_millis(200);

/// Counts the spawns among `events` (a failed exec counts when its process exits), each
/// exec chain step with its verdict ([`Steps`]).
fn observe(metrics: &Mutex<Metrics>, events: Vec<Event>, counting: Counting) {
    let mut m = metrics.lock().unwrap_or_else(|p| p.into_inner());
    for ev in events {
        match ev {
            Event::Spawn(s) => m.observe_spawn(observation(&s, counting)),
            Event::Exit(e) => {
                if let Some(s) = e.failed_exec {
                    m.observe_spawn(observation(&s, counting));
                }
            }
        }
    }
}

/// The watch loop's periodic jobs (kernel counters, /proc scans, textfile writes) and when
/// each is next due.
struct Periodic {
    /// What one close(2) costs here, for the scans' estimates.
    close_ns: f64,
    scan_every: Option<Duration>,
    /// `--cgroup`'s directory: the scans see only its processes.
    scan_cgroup: Option<PathBuf>,
    text_every: Duration,
    next_scan: Instant,
    next_text: Instant,
    next_stats: Instant,
    /// The scan under way, on its own thread.
    scanner: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Periodic {
    fn new(args: &WatchArgs) -> Periodic {
        let close_ns = crate::sys::close_cost_ns(10_000);
        let scan_every =
            (args.scan_interval > 0.0).then(|| Duration::from_secs_f64(args.scan_interval));
        let text_every = Duration::from_secs_f64(args.textfile_interval.max(1.0));
        // Resolved before the programs were loaded (watched_cgroup); a cgroup removed since
        // lists no process.
        let scan_cgroup = args
            .cgroup
            .as_ref()
            .map(|p| crate::cgroup::Followed::find(p).map_or_else(|_| p.clone(), |f| f.dir));
        Periodic {
            close_ns,
            scan_every,
            scan_cgroup,
            text_every,
            next_scan: Instant::now(),
            next_text: Instant::now() + text_every,
            next_stats: Instant::now(),
            scanner: None,
        }
    }

    /// Once a second: the kernel's lost-record and tracked-table-full counters, and the
    /// programs' skipped runs.
    fn kernel_totals(
        &mut self,
        now: Instant,
        session: &Session,
        metrics: &Mutex<Metrics>,
    ) -> Result<()> {
        if now >= self.next_stats {
            let st = session.stats()?;
            let missed = session.missed_runs();
            let mut m = metrics.lock().unwrap_or_else(|p| p.into_inner());
            m.set_kernel_totals(st.lost_records, st.tracked_full);
            m.set_missed_runs(&missed);
            self.next_stats = now + Duration::from_secs(1);
        }
        Ok(())
    }

    /// Every --scan-interval: a scan of /proc on its own thread (one at a time; a failed
    /// one is a warning).
    fn scan(&mut self, now: Instant, metrics: &Arc<Mutex<Metrics>>) {
        let Some(every) = self.scan_every else {
            return;
        };
        if self.scanner.as_ref().is_some_and(|h| h.is_finished()) {
            if let Err(e) = self
                .scanner
                .take()
                .expect("checked")
                .join()
                .expect("scan thread")
            {
                crate::diag!("warning: {e:#}");
            }
        }
        if now >= self.next_scan && self.scanner.is_none() {
            let m = metrics.clone();
            let close_ns = self.close_ns;
            let cgroup = self.scan_cgroup.clone();
            self.scanner = Some(std::thread::spawn(move || {
                scan_once(&m, close_ns, cgroup.as_deref())
            }));
            self.next_scan = now + every;
        }
    }

    /// Every --textfile-interval, or at once on SIGHUP: the metrics into `dir`.
    fn textfile(&mut self, now: Instant, dir: &Path, metrics: &Mutex<Metrics>) {
        let hup = crate::signals::take_reload();
        if hup || now >= self.next_text {
            if hup {
                crate::diag!("fdaudit: SIGHUP: rewriting {}/fdaudit.prom", dir.display());
            }
            let text = metrics.lock().unwrap_or_else(|p| p.into_inner()).encode();
            // A vanished directory is reported and retried, not fatal: it may be remounted.
            if let Err(e) = textfile::write(dir, &prometheus_text(&text)) {
                crate::diag!("warning: {e:#}");
            }
            self.next_text = now + self.text_every;
        }
    }

    /// Waits for the scan under way, if any.
    fn finish(self) {
        if let Some(h) = self.scanner {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::flags::SpawnFlags;

    #[test]
    fn a_runtime_s_own_helper_counts_transient_fds_not_a_leak() {
        let mut s = crate::trace::report::tests::spawn("runc", "/proc/self/exe", 0, 9, 3);
        s.flags = SpawnFlags::OWN_IMAGE;
        let o = observation(&s, Counting::Nothing);
        assert!(o.leaked_kinds.is_empty(), "{:?}", o.leaked_kinds);
        assert_eq!(o.transient_fds, 3);
    }

    #[test]
    fn an_exec_chains_step_counts_transient_fds_not_a_leak() {
        let mut s =
            crate::trace::report::tests::spawn("java", "/usr/lib/jvm/lib/jspawnhelper", 0, 9, 11);
        s.flags = SpawnFlags::EXECD_AGAIN;
        let o = observation(&s, Counting::Nothing);
        assert!(o.leaked_kinds.is_empty(), "{:?}", o.leaked_kinds);
        assert_eq!(o.transient_fds, 11);
        let mut m = Metrics::new(5);
        m.observe_spawn(o);
        let om = m.encode();
        assert!(
            om.contains("fdaudit_transient_fds_total{") && om.contains("child=\"jspawnhelper\""),
            "{om}"
        );
        assert!(!om.contains("fdaudit_spawns_with_leaks_total{"), "{om}");
        assert!(!om.contains("fdaudit_leaked_fds_total{"), "{om}");
        assert!(!om.contains("fdaudit_leaked_files_total{"), "{om}");
    }

    #[test]
    fn prometheus_text_names_counters_with_total() {
        let mut m = Metrics::new(5);
        m.observe_spawn(SpawnObservation {
            labels: SpawnLabels {
                container_id: "c".into(),
                cgroup: "/x".into(),
                parent: "sh".into(),
                child: "cat".into(),
                strategy: "none".into(),
            },
            leaked_kinds: vec!["regular".into()],
            leaked_origins: vec!["openat".into()],
            leaked_files: Vec::new(),
            transient_fds: 0,
            boundary: String::new(),
            close_calls: None,
            window_seconds: Some(1e-4),
        });
        let om = m.encode();
        assert!(om.contains("# TYPE fdaudit_spawns counter\n"), "{om}");
        let text = prometheus_text(&om);
        assert!(
            text.contains("# TYPE fdaudit_spawns_total counter\n"),
            "{text}"
        );
        assert!(text.contains("# HELP fdaudit_spawns_total "), "{text}");
        assert!(text.contains("# TYPE fdaudit_spawn_window_seconds histogram\n"));
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
        assert_eq!(
            om.lines().filter(|l| !l.starts_with('#')).count(),
            text.lines().filter(|l| !l.starts_with('#')).count(),
            "samples are unchanged"
        );
    }
}
