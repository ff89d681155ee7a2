//! Scanner tests on the checked-in fixture procfs trees (tests/fixtures/procfs/...): no
//! privileges, no live processes.

use std::path::PathBuf;

use super::findings::{FindingKind, Severity};
use super::scanner::{scan, Outcome, ProcReport, ScanOptions};
use crate::fdkind::FdKind;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/procfs")
        .join(name)
}

/// Bytes the fixtures hold as UTF-8, as a string.
fn u(b: &[u8]) -> &str {
    std::str::from_utf8(b).expect("fixture text is UTF-8")
}

fn opt<F>(l: &Option<crate::output::text::Lossless<Vec<u8>, F>>) -> Option<&str> {
    l.as_ref().map(|l| u(l))
}

fn run(cfg: ScanOptions) -> (Vec<ProcReport>, Outcome) {
    let mut reports = Vec::new();
    let outcome = scan(&cfg, |r| r, |r| reports.push(r)).expect("fixture scan failed");
    (reports, outcome)
}

fn basic(full_fds: bool, threads: usize) -> ScanOptions {
    ScanOptions {
        root: fixture("basic"),
        pids: None,
        uid: None,
        full_fds,
        close_ns: 100.0,
        threads,
        // What the tree's fdaudit-arch file says (the scan command reads it; see oflags).
        arch: super::oflags::Arch::X86_64,
        stop: Default::default(),
    }
}

#[test]
fn basic_tree_processes_in_pid_order() {
    for threads in [1, 2, 4] {
        let (reports, outcome) = run(basic(true, threads));
        let pids: Vec<u32> = reports.iter().map(|r| r.pid).collect();
        // 2 is a kernel thread (skipped), 300 lost its fd dir and 500 its status (vanished).
        assert_eq!(pids, [100, 200, 400], "threads={threads}");
        let t = &outcome.totals;
        assert_eq!(
            (t.processes, t.vanished, t.unreadable),
            (3, 2, 0),
            "totals {t:?}"
        );
        assert_eq!(t.fds, 11 + 7, "fd 5 of pid 200 vanished: {t:?}");
        assert_eq!(t.vanished_fds, 1);
        assert_eq!(t.kcmp_calls, 0, "never kcmp on a fixture tree");
    }
}

#[test]
fn basic_tree_fds_exactly() {
    let (reports, _) = run(basic(true, 2));
    let server = &reports[0];
    assert_eq!(server.comm, b"server");
    assert_eq!(server.ppid, Some(1));
    assert_eq!(server.uid, Some(0));
    let lim = server.nofile.expect("limits parsed");
    assert_eq!((lim.soft, lim.hard), (Some(1024), Some(4096)));
    assert_eq!(
        (server.fd_count, server.max_fd, server.no_cloexec),
        (11, Some(10), 9)
    );
    type Row<'a> = (u32, FdKind, &'a str, Option<&'a str>, Option<bool>);
    let got: Vec<Row> = server
        .fds
        .iter()
        .map(|f| (f.fd, f.kind, u(&f.target), f.mode, f.cloexec))
        .collect();
    assert_eq!(
        got,
        [
            (0, FdKind::Device, "/dev/null", Some("r"), Some(false)),
            (1, FdKind::Pipe, "pipe:[1001]", Some("w"), Some(false)),
            (2, FdKind::Pipe, "pipe:[1001]", Some("w"), Some(false)),
            (3, FdKind::Socket, "socket:[5001]", Some("rw"), Some(false)),
            (4, FdKind::Directory, "/srv/data", Some("r"), Some(false)),
            (
                5,
                FdKind::Regular,
                "/var/log/app.log",
                Some("w"),
                Some(false)
            ),
            (
                6,
                FdKind::Regular,
                "/etc/ssl/private/server.key",
                Some("r"),
                Some(false)
            ),
            (7, FdKind::Socket, "socket:[5002]", Some("rw"), Some(true)),
            (
                8,
                FdKind::Eventfd,
                "anon_inode:[eventfd]",
                Some("rw"),
                Some(true)
            ),
            (
                9,
                FdKind::Memfd,
                "/memfd:cache (deleted)",
                Some("rw"),
                Some(false)
            ),
            (10, FdKind::Socket, "socket:[5003]", Some("rw"), Some(false)),
        ]
    );
    let s3 = &server.fds[3];
    assert_eq!(
        (s3.family, s3.proto.as_deref()),
        (Some("inet"), Some("tcp"))
    );
    assert_eq!(
        (opt(&s3.local), opt(&s3.remote), s3.listening),
        (Some("127.0.0.1:8080"), None, true)
    );
    let s7 = &server.fds[7];
    assert_eq!(
        (s7.family, s7.proto.as_deref(), opt(&s7.local), s7.listening),
        (Some("unix"), Some("stream"), Some("@app"), true)
    );
    let s10 = &server.fds[10];
    assert_eq!(
        (opt(&s10.local), opt(&s10.remote), s10.listening),
        (Some("127.0.0.1:40000"), Some("127.0.0.1:8080"), false)
    );
}

#[test]
fn malformed_truncated_and_vanished_entries() {
    let (reports, _) = run(basic(true, 1));
    let worker = &reports[1];
    assert_eq!(
        (worker.pid, u(&worker.comm), worker.uid),
        (200, "worker", Some(65534))
    );
    let fds: Vec<u32> = worker.fds.iter().map(|f| f.fd).collect();
    assert_eq!(fds, [0, 1, 2, 3, 4, 6, 7], "fd 5 has no fdinfo: vanished");
    assert_eq!(worker.vanished_fds, 1);
    // Malformed (fd 6) and truncated (fd 7) fdinfo: close-on-exec unknown, no finding.
    assert_eq!(worker.unknown_fds, 2);
    let f6 = &worker.fds[5];
    assert_eq!(
        (u(&f6.target), f6.cloexec, f6.mode),
        ("/tmp/odd\nname", None, None)
    );
    let f7 = &worker.fds[6];
    assert_eq!(
        (f7.kind, f7.family, f7.cloexec),
        (FdKind::Socket, None, None),
        "socket no table lists"
    );
    assert!(worker
        .findings
        .iter()
        .all(|f| f.fd != Some(6) && f.fd != Some(7)));
    // Truncated status and limits: reported, with what could be parsed.
    let bro = &reports[2];
    assert_eq!(
        (bro.pid, u(&bro.comm), bro.ppid, bro.uid, bro.nofile),
        (400, "bro", None, None, None)
    );
    assert_eq!((bro.fd_count, bro.max_fd), (0, None));
}

#[test]
fn findings_ranked_worst_first() {
    let (reports, outcome) = run(basic(false, 2));
    assert!(
        reports.iter().all(|r| r.fds.is_empty()),
        "no fd records without full_fds"
    );
    let server: Vec<(Option<u32>, Severity)> = reports[0]
        .findings
        .iter()
        .map(|f| (f.fd, f.severity))
        .collect();
    assert_eq!(
        server,
        [
            (Some(3), Severity::Critical), // listening socket
            (Some(4), Severity::High),     // directory
            (Some(5), Severity::Medium),   // writable file
            (Some(9), Severity::Medium),   // writable memfd
            (Some(6), Severity::Medium),   // looks secret
            (Some(10), Severity::Low),     // connected socket
        ]
    );
    let worker = &reports[1].findings;
    assert_eq!(worker.len(), 2, "{worker:?}");
    assert_eq!(
        (worker[0].fd, worker[0].severity),
        (Some(3), Severity::Critical)
    );
    assert_eq!(
        (worker[1].fd, worker[1].kind, worker[1].severity),
        (None, FindingKind::NofileLimit, Severity::High)
    );
    assert!(
        worker[1].reason.contains("1048576") && worker[1].reason.contains("104.86 ms"),
        "{}",
        worker[1].reason
    );
    // Shared description: worker fd 3 matches server fd 3 by file and flags (unverified).
    assert_eq!(outcome.shared.len(), 1, "{:?}", outcome.shared);
    let s = &outcome.shared[0];
    assert_eq!(
        (s.pid, s.fd, s.kind, s.severity),
        (200, Some(3), FindingKind::SharedDescription, Severity::Info)
    );
    assert!(s.reason.contains("parent 100 (server)"), "{}", s.reason);
}

#[test]
fn filters_by_pid_and_uid() {
    let (reports, outcome) = run(ScanOptions {
        pids: Some(vec![200, 999]),
        ..basic(true, 2)
    });
    assert_eq!(reports.iter().map(|r| r.pid).collect::<Vec<_>>(), [200]);
    assert_eq!(outcome.missing, [999]);
    let (reports, _) = run(ScanOptions {
        uid: Some(65534),
        ..basic(false, 2)
    });
    assert_eq!(reports.iter().map(|r| r.pid).collect::<Vec<_>>(), [200]);
}

#[test]
fn missing_root_is_an_error() {
    let err = scan(
        &ScanOptions {
            root: fixture("does-not-exist"),
            ..basic(false, 1)
        },
        |r| r,
        |_| {},
    )
    .expect_err("a missing root must fail");
    assert!(err.to_string().contains("does-not-exist"), "{err}");
}

#[test]
fn human_output_groups_many_alike_findings() {
    use super::findings::Finding;
    let f = |fd: u32, sev: Severity, rank: u8| {
        Finding::new(
            7,
            b"x",
            Some(fd),
            sev,
            FindingKind::InheritableFd,
            rank,
            format!("fd {fd}"),
        )
    };
    let mut v: Vec<Finding> = (10..20).map(|fd| f(fd, Severity::Low, 4)).collect();
    v.extend((30..33).map(|fd| f(fd, Severity::High, 1)));
    v.push(Finding::new(
        7,
        b"x",
        None,
        Severity::Medium,
        FindingKind::NofileLimit,
        0,
        "limit".into(),
    ));
    let g = super::report::group_findings(v);
    let got: Vec<(Option<u32>, Severity)> = g.iter().map(|f| (f.fd, f.severity)).collect();
    assert_eq!(
        got,
        [
            (Some(30), Severity::High),
            (Some(31), Severity::High),
            (Some(32), Severity::High),
            (None, Severity::Medium),
            (None, Severity::Low),
        ]
    );
    assert!(
        g[4].reason
            .starts_with("10 fds like this (fds 10,11,12,13,14,15,16,17,...), e.g. fd 10: fd 10"),
        "{}",
        g[4].reason
    );
}

/// Root is never told to run as root: an fd table root cannot read was refused by the
/// kernel's ptrace access check.
#[test]
fn an_unreadable_process_is_explained_for_root_and_for_others() {
    let root = super::unreadable_as(1, 0);
    assert!(
        root.contains("even as root") && !root.contains("or as root"),
        "{root}"
    );
    let user = super::unreadable_as(1, 65534);
    assert!(
        user.contains("run fdaudit as its user or as root"),
        "{user}"
    );
}
