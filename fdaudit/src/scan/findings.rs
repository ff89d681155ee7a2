//! Findings: what `scan` flags, and how bad it is.

use serde::Serialize;

use crate::{
    fdkind::FdKind,
    output::text::{fields, Lossless},
};

/// How bad a finding is; `--fail-on` takes one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Low,
    Medium,
    High,
    Critical,
}

impl Severity {
    /// Every severity, lowest first (`Severity as usize` indexes it).
    pub const ALL: [Severity; 5] = [
        Severity::Info,
        Severity::Low,
        Severity::Medium,
        Severity::High,
        Severity::Critical,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// An fd >= 3 without close-on-exec.
    InheritableFd,
    /// A NOFILE soft limit that makes a close-to-limit loop expensive.
    NofileLimit,
    /// An fd that is the same open file description as one in the parent or a child.
    SharedDescription,
    /// An fd >= 3 on a mount outside the process's root or mount namespace.
    OutsideRoot,
}

/// One finding, as printed and as emitted in `--json` (`"type":"finding"`).
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub pid: u32,
    #[serde(flatten)]
    pub comm: Lossless<Vec<u8>, fields::Comm>,
    /// `null` for findings about the whole process (limits).
    pub fd: Option<u32>,
    /// The thread whose own fd table holds `fd`, when `/proc/PID/fd` does not show it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    pub severity: Severity,
    /// `rule` in JSON (schema 2): `kind` is an fd's type everywhere else.
    #[serde(rename = "rule")]
    pub kind: FindingKind,
    pub reason: String,
    /// A folded finding (`nofile_limit`, see [`super::fold`]): every process it stands for,
    /// ascending; `pid` is the first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    /// A folded finding: how many processes (the length of `pids`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<usize>,
    /// Orders findings of the same severity: lower is worse.
    #[serde(skip)]
    pub rank: u8,
}

impl Finding {
    pub fn new(
        pid: u32,
        comm: &[u8],
        fd: Option<u32>,
        severity: Severity,
        kind: FindingKind,
        rank: u8,
        reason: String,
    ) -> Finding {
        Finding {
            pid,
            comm: Lossless::new(comm.to_vec()),
            fd,
            tid: None,
            severity,
            kind,
            reason,
            pids: Vec::new(),
            processes: None,
            rank,
        }
    }

    /// Worst first, then by pid and fd.
    pub fn order(a: &Finding, b: &Finding) -> std::cmp::Ordering {
        b.severity
            .cmp(&a.severity)
            .then(a.rank.cmp(&b.rank))
            .then(a.pid.cmp(&b.pid))
            .then(a.fd.cmp(&b.fd))
    }
}

/// Does this path look like it holds secrets (keys, credentials, password hashes)?
pub fn looks_secret(path: &[u8]) -> bool {
    const NEEDLES: &[&[u8]] = &[
        b"shadow",
        b"gshadow",
        b"id_rsa",
        b"id_dsa",
        b"id_ecdsa",
        b"id_ed25519",
        b"/.ssh/",
        b".pem",
        b".key",
        b".p12",
        b".pfx",
        b".keytab",
        b"private",
        b"secret",
        b"credential",
        b"password",
        b"passwd-",
        b"token",
        b".netrc",
        b".pgpass",
        b".aws/",
        b".kube/config",
        b".docker/config.json",
        b"/etc/ssl/private",
        b"sudoers",
    ];
    // Called for every inheritable fd: no allocation, and a first-byte filter before
    // comparing (needles are lowercase; the path is compared case-insensitively): for each
    // byte, the set of needles that start with it, so most bytes cost one lookup.
    const FIRST: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < NEEDLES.len() {
            let c = NEEDLES[i][0];
            t[c as usize] |= 1 << i;
            t[c.to_ascii_uppercase() as usize] |= 1 << i;
            i += 1;
        }
        t
    };
    const _: () = assert!(NEEDLES.len() <= 32);
    (0..path.len()).any(|i| {
        let mut set = FIRST[path[i] as usize];
        while set != 0 {
            let n = NEEDLES[set.trailing_zeros() as usize];
            set &= set - 1;
            if path.len() - i >= n.len()
                && path[i + 1..i + n.len()]
                    .iter()
                    .zip(&n[1..])
                    .all(|(a, b)| a.to_ascii_lowercase() == *b)
            {
                return true;
            }
        }
        false
    })
}

/// What is known about an inheritable fd when judging it.
pub struct FdFacts<'a> {
    pub kind: FdKind,
    /// The link target (lossy UTF-8: reasons carry real characters; people get them
    /// escaped when printed).
    pub target: &'a str,
    pub raw_target: &'a [u8],
    pub writable: bool,
    /// A listening socket (TCP LISTEN or a unix socket that accepts), with its address.
    pub listening: Option<&'a str>,
    pub proto: Option<&'a str>,
    /// A socket whose entry could not be read in its own network namespace (listening or
    /// not is unknown).
    pub unresolved: bool,
    /// The path is not known whole (past PATH_MAX): it could look secret.
    pub partial: bool,
    /// Someone other than root and the process's own user can rename an entry on the path
    /// (described): the name is theirs to choose, so it is rated as if it looked secret.
    pub renamed_by: Option<String>,
    /// A unix socket's fds in flight: sent with SCM_RIGHTS, waiting in its receive queue
    /// (fdinfo's `scm_fds:`); `None` where the kernel does not say (before 5.14) or the
    /// fd is no unix socket.
    pub in_flight: Option<u32>,
}

/// The end of an inheritable fd's reason.
const TAIL: &str = "has no close-on-exec: it leaks into every child spawned without closing it";

/// Whether a socket of protocol `proto` (the kernel's or the table's name; `None`: not
/// known) can listen: the worst an unresolved socket could be.
fn can_listen(proto: Option<&str>) -> bool {
    proto.is_none_or(|p| {
        matches!(
            p,
            "tcp" | "stream" | "seqpacket" | "unix" | "mptcp" | "sctp"
        )
    })
}

/// Why a path's text is not what its verdict rests on, if it is not: a path not known whole
/// could be any path, and a name another user can choose could have been any name; both
/// are rated as if they looked secret.
fn name_note(f: &FdFacts<'_>) -> String {
    if f.partial {
        " (path too long to read: rated as if it looked secret)".to_owned()
    } else if let Some(who) = &f.renamed_by {
        format!(" ({who} can rename an entry on its path: rated as if the path looked secret)")
    } else {
        String::new()
    }
}

/// The finding for an inheritable fd >= 3: severity, rank within it, reason.
pub fn inheritable(f: &FdFacts<'_>) -> (Severity, u8, String) {
    if let Some(n) = f.in_flight.filter(|&n| n > 0 && f.listening.is_none()) {
        let p = f.proto.unwrap_or("unix");
        let n = fd_count(n);
        return (
            Severity::Critical,
            0,
            format!(
                "{p} socket {} {TAIL}, and {n} in flight wait in its receive queue (sent with \
                 SCM_RIGHTS, not yet received: in no fd table), which a child can receive; \
                 scan does not know what they are (it never receives them), so they are rated \
                 as the worst they could be: a listening socket, a directory outside the root",
                f.target
            ),
        );
    }
    rate(f, TAIL)
}

/// "1 fd", "N fds", or "fds" for a count fdinfo did not give as a number (`u32::MAX`).
pub fn fd_count(n: u32) -> String {
    match n {
        u32::MAX => "fds".to_owned(),
        n => format!("{n} fd{}", if n == 1 { "" } else { "s" }),
    }
}

/// An fd's severity, rank and reason, `tail` saying how it reaches a child.
fn rate(f: &FdFacts<'_>, tail: &str) -> (Severity, u8, String) {
    let what = match (f.kind, f.proto) {
        (FdKind::Socket, Some(p)) => format!("{p} socket {}", f.target),
        _ => format!("{} {}", f.kind, f.target),
    };
    if f.kind == FdKind::Socket && f.unresolved && f.listening.is_none() && can_listen(f.proto) {
        let p = f.proto.unwrap_or("socket");
        return (
            Severity::Critical,
            0,
            format!(
                "{p} socket {} {tail}; it could not be looked up in its own network namespace, \
                 so it may be listening (a child could accept its connections)",
                f.target
            ),
        );
    }
    let secret = |t: &[u8]| f.partial || f.renamed_by.is_some() || looks_secret(t);
    let partial = name_note(f);
    if let Some(addr) = f.listening {
        let p = f.proto.unwrap_or("socket");
        return (
            Severity::Critical,
            0,
            format!("listening {p} socket {addr} {tail} (a child can accept its connections)"),
        );
    }
    match f.kind {
        FdKind::Directory => (
            Severity::High,
            1,
            format!(
                "directory {} {tail} (a child can openat() anything below it){partial}",
                f.target
            ),
        ),
        FdKind::Regular | FdKind::Memfd | FdKind::Other if f.writable => {
            let secret = secret(f.raw_target);
            let note = match partial.is_empty() && secret {
                true => " (path looks secret)",
                false => partial.as_str(),
            };
            (
                if secret {
                    Severity::High
                } else {
                    Severity::Medium
                },
                2,
                format!("writable {what} {tail}{note}"),
            )
        }
        _ if (f.raw_target.starts_with(b"/") || f.partial) && secret(f.raw_target) => (
            Severity::Medium,
            3,
            format!(
                "{what} {} and {tail}{partial}",
                if looks_secret(f.raw_target) {
                    "looks secret"
                } else {
                    "could be secret"
                }
            ),
        ),
        FdKind::Device if f.raw_target == b"/dev/null" => {
            (Severity::Info, 5, format!("{what} {tail}"))
        }
        _ => (Severity::Low, 4, format!("{what} {tail}")),
    }
}

/// A file registered in an io_uring instance (a fixed file), as far as the ring's fdinfo
/// says: its slot, and what its path text tells (see [`registered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredFile {
    pub slot: u32,
    /// `None`: the text names no kind (an older kernel's last path component).
    pub kind: Option<FdKind>,
    pub target: String,
    pub raw_target: Vec<u8>,
    /// A socket's protocol, from its namespace's tables.
    pub proto: Option<String>,
    /// A listening socket's address.
    pub listening: Option<String>,
    /// A socket its process's tables do not list (another namespace): it may listen.
    pub unresolved: bool,
}

/// An io_uring instance's registered files (`complete`: the list was read whole).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registered {
    pub files: Vec<RegisteredFile>,
    pub complete: bool,
}

/// The finding for an inheritable io_uring fd `ring` (fd `fd`) from the files registered
/// in it, rated as if each were an inheritable fd of its own: a child that inherits the
/// ring uses them through it, though they are in no fd table. `None` when it holds none.
///
/// The fdinfo gives a path, not a type or access mode: a path is rated as a directory
/// (the worst a path can be); a socket as its tables say, and as possibly listening when
/// they do not list it; a text that names no kind, or a list not read whole, as the worst
/// anything could be (a listening socket).
pub fn registered(fd: u32, ring: &str, reg: &Registered) -> Option<(Severity, u8, String)> {
    let tail = format!(
        "is registered in io_uring fd {fd} ({ring}), which has no close-on-exec: every child \
         spawned without closing it can use it through the ring (a fixed file is in no fd table)"
    );
    if !reg.complete {
        return Some((
            Severity::Critical,
            0,
            format!(
                "io_uring {ring} {TAIL}; the files registered in it, which a child can use \
                 through it, could not be read (its fdinfo lists them only while the ring is \
                 idle), so they are rated as the worst they could be: a listening socket"
            ),
        ));
    }
    let worst = reg
        .files
        .iter()
        .map(|r| {
            let (sev, rank, reason) = match r.kind {
                None => (
                    Severity::Critical,
                    0,
                    format!(
                        "{:?} {tail}; this kernel's fdinfo gives only its last path component, \
                         so it could be anything, a listening socket included",
                        r.target
                    ),
                ),
                Some(kind) => rate(&registered_facts(r, kind), &tail),
            };
            let as_dir = r.raw_target.starts_with(b"/")
                && matches!(
                    r.kind,
                    Some(FdKind::Regular | FdKind::Device | FdKind::Other | FdKind::Directory)
                );
            let note = match as_dir {
                true => {
                    " (io_uring's fdinfo gives a path, not its type: rated as a directory, \
                         the worst a path can be)"
                }
                false => "",
            };
            (sev, rank, format!("slot {}: {reason}{note}", r.slot))
        })
        .min_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)))?;
    let n = reg.files.len();
    let (sev, rank, reason) = worst;
    Some((
        sev,
        rank,
        format!(
            "{reason}; {n} file{} registered in all",
            if n == 1 { "" } else { "s" }
        ),
    ))
}

/// What a registered file's text says, as an fd's facts: a path as a directory, access
/// mode as writable (not known: the worst).
fn registered_facts(r: &RegisteredFile, kind: FdKind) -> FdFacts<'_> {
    let kind = match kind {
        FdKind::Regular | FdKind::Device | FdKind::Other if r.raw_target.starts_with(b"/") => {
            FdKind::Directory
        }
        k => k,
    };
    FdFacts {
        kind,
        target: &r.target,
        raw_target: &r.raw_target,
        writable: true,
        listening: r.listening.as_deref(),
        proto: r.proto.as_deref(),
        unresolved: r.unresolved,
        partial: false,
        renamed_by: None,
        in_flight: None,
    }
}

/// The cost model's price of one close() of an unopened fd in a close-to-limit loop, ns.
///
/// Fixed so that `--fail-on` gives the same answer under any load: a figure measured at run
/// time varied several times over on a busy machine. The value sits between a published
/// SBCL figure and `fdaudit bench`'s close-loop fit (docs/performance.md).
/// `--close-cost-ns` overrides it.
pub const DEFAULT_CLOSE_COST_NS: u64 = 250;

/// Severity of a NOFILE soft limit at `close_ns` per close() (the cost model); `None` when
/// cheap.
pub fn nofile(soft: u64, close_ns: f64) -> Option<(Severity, String)> {
    let cost_ms = soft as f64 * close_ns / 1e6;
    let sev = if cost_ms >= 10.0 || soft >= 1 << 20 {
        Severity::High
    } else if cost_ms >= 1.0 || soft >= 65536 {
        Severity::Medium
    } else {
        return None;
    };
    Some((
        sev,
        format!(
            "NOFILE soft limit {soft}: a close-to-limit loop before exec costs ~{cost_ms:.2} ms per spawn \
             (at {close_ns:.0} ns per close())"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(kind: FdKind, target: &'a str, writable: bool) -> FdFacts<'a> {
        FdFacts {
            kind,
            target,
            raw_target: target.as_bytes(),
            writable,
            listening: None,
            proto: None,
            unresolved: false,
            partial: false,
            renamed_by: None,
            in_flight: None,
        }
    }

    #[test]
    fn ranks_worst_first() {
        let listen = FdFacts {
            listening: Some("0.0.0.0:80"),
            proto: Some("tcp"),
            ..facts(FdKind::Socket, "socket:[1]", true)
        };
        let l = inheritable(&listen);
        let d = inheritable(&facts(FdKind::Directory, "/srv", false));
        let w = inheritable(&facts(FdKind::Regular, "/var/log/x.log", true));
        let s = inheritable(&facts(FdKind::Regular, "/etc/shadow", false));
        let p = inheritable(&facts(FdKind::Pipe, "pipe:[3]", false));
        let n = inheritable(&facts(FdKind::Device, "/dev/null", true));
        let mut all = [&l, &d, &w, &s, &p, &n];
        all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        assert_eq!(all, [&l, &d, &w, &s, &p, &n]);
        assert_eq!(l.0, Severity::Critical);
        assert!(l.2.contains("0.0.0.0:80"), "{}", l.2);
        assert_eq!(
            inheritable(&facts(FdKind::Regular, "/root/.ssh/id_ed25519", true)).0,
            Severity::High
        );
    }

    #[test]
    fn fds_in_flight_are_rated_at_their_worst() {
        let sock = |n| FdFacts {
            proto: Some("stream"),
            in_flight: n,
            ..facts(FdKind::Socket, "socket:[9]", true)
        };
        assert_eq!(inheritable(&sock(None)).0, Severity::Low);
        assert_eq!(inheritable(&sock(Some(0))).0, Severity::Low);
        let (sev, _, reason) = inheritable(&sock(Some(2)));
        assert_eq!(sev, Severity::Critical);
        assert!(
            reason.contains("2 fds in flight") && reason.contains("does not know"),
            "{reason}"
        );
        assert!(inheritable(&sock(Some(u32::MAX)))
            .2
            .contains(", and fds in flight"));
    }

    fn reg(target: &str, kind: Option<FdKind>) -> RegisteredFile {
        RegisteredFile {
            slot: 3,
            kind,
            target: target.into(),
            raw_target: target.as_bytes().to_vec(),
            proto: None,
            listening: None,
            unresolved: false,
        }
    }

    #[test]
    fn registered_files_are_rated_as_held() {
        let ring = "anon_inode:[io_uring]";
        let of = |files: Vec<RegisteredFile>| {
            registered(
                7,
                ring,
                &Registered {
                    files,
                    complete: true,
                },
            )
        };
        assert_eq!(of(vec![]), None);
        let pipe = of(vec![reg("pipe:[5]", Some(FdKind::Pipe))]).unwrap();
        assert_eq!(pipe.0, Severity::Low);
        let dir = of(vec![reg("/", Some(FdKind::Regular))]).unwrap();
        assert_eq!(dir.0, Severity::High);
        assert!(dir.2.contains("slot 3: directory /") && dir.2.contains("not its type"));
        let listening = RegisteredFile {
            proto: Some("tcp".into()),
            listening: Some("0.0.0.0:80".into()),
            ..reg("socket:[8]", Some(FdKind::Socket))
        };
        let l = of(vec![reg("/", Some(FdKind::Regular)), listening]).unwrap();
        assert_eq!(l.0, Severity::Critical);
        assert!(
            l.2.contains("0.0.0.0:80") && l.2.contains("2 files registered"),
            "{}",
            l.2
        );
        let elsewhere = RegisteredFile {
            unresolved: true,
            ..reg("socket:[8]", Some(FdKind::Socket))
        };
        assert_eq!(of(vec![elsewhere]).unwrap().0, Severity::Critical);
        assert_eq!(
            of(vec![reg("libc.so.6", None)]).unwrap().0,
            Severity::Critical
        );
        let unread = registered(7, ring, &Registered::default()).unwrap();
        assert_eq!(unread.0, Severity::Critical);
        assert!(unread.2.contains("could not be read"), "{}", unread.2);
    }

    #[test]
    fn secrets() {
        assert!(looks_secret(b"/etc/shadow"));
        assert!(looks_secret(b"/home/a/.ssh/ID_RSA"));
        assert!(looks_secret(b"/run/secrets/db"));
        assert!(!looks_secret(b"/etc/passwd"));
        assert!(!looks_secret(b"/usr/lib/libc.so.6"));
        assert!(looks_secret(b"/A/B/PRIVATE.KEY"));
        assert!(looks_secret(b"/x/.SSH/"));
        assert!(!looks_secret(b"/x/.ssh"));
        assert!(!looks_secret(b"\xff/tokeN\xc3"[..6].as_ref()));
        assert!(looks_secret(b"\xff/tokeN\xc3"));
    }

    #[test]
    fn nofile_thresholds() {
        assert_eq!(nofile(1024, 100.0), None);
        assert_eq!(nofile(65536, 1.0).unwrap().0, Severity::Medium);
        assert_eq!(nofile(20000, 100.0).unwrap().0, Severity::Medium);
        let (sev, reason) = nofile(1 << 20, 50.0).unwrap();
        assert_eq!(sev, Severity::High);
        assert!(
            reason.contains("1048576") && reason.contains("52.43 ms"),
            "{reason}"
        );
    }
}
