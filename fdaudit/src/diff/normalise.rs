//! What differs between two runs of the same program that did the same thing, taken out of
//! a path or an fd's target so that the two compare equal: a number equal to a pid of the
//! same run, the random suffix of an `mkstemp`-style name, and the inode number of a
//! `socket:[N]` or `pipe:[N]`. The rules, and what they leave alone, are docs/diff.md's
//! "Runs that compare cleanly"; `diff` uses them for its keys, and anything that names a
//! finding across runs (a fingerprint) can use the same [`Normaliser`]. The records keep
//! the raw values: only the names compared are normalised.

use std::collections::BTreeSet;

/// What a number equal to one of the run's pids becomes.
pub const PID: &str = "<pid>";
/// What the random part of an `mkstemp`-style name becomes.
pub const TEMP: &str = "XXXXXX";

/// How many random characters `mkstemp(3)` and `mkostemp(3)` put in a name.
const SUFFIX_LEN: usize = 6;

/// The rules for one run: its pids (every `pid` and `parent_pid` its records carry).
#[derive(Debug, Clone, Default)]
pub struct Normaliser {
    pids: BTreeSet<u64>,
    /// `--keep-paths`: paths stay as they are (inode numbers are still taken out).
    keep_paths: bool,
}

impl Normaliser {
    /// Rules for a run whose records carry `pids`. Pids 0 and 1 are left out: 0 is no
    /// process, and 1 (init, the parent of orphans) names no file of the run.
    pub fn new(pids: impl IntoIterator<Item = u64>, keep_paths: bool) -> Normaliser {
        Normaliser {
            pids: pids.into_iter().filter(|&p| p > 1).collect(),
            keep_paths,
        }
    }

    /// The pids of a stream's records: every top-level `pid` and `parent_pid`.
    pub fn from_records(recs: &[serde_json::Value], keep_paths: bool) -> Normaliser {
        let pids = recs
            .iter()
            .flat_map(|r| [&r["pid"], &r["parent_pid"]])
            .filter_map(serde_json::Value::as_u64);
        Normaliser::new(pids, keep_paths)
    }

    /// `path` with each of the run's pids (a whole number between non-alphanumeric
    /// characters) replaced by [`PID`] and each `mkstemp`-style suffix by [`TEMP`].
    pub fn path(&self, path: &str) -> String {
        if self.keep_paths {
            return path.to_string();
        }
        path.split('/')
            .map(|c| temp_suffix(&self.pids_in(c)))
            .collect::<Vec<_>>()
            .join("/")
    }

    /// An fd's target: a `socket:[N]` or `pipe:[N]` (an inode number, new in every run)
    /// becomes the socket's family and protocol (`inet tcp`), or nothing; a path, [`path`].
    ///
    /// [`path`]: Normaliser::path
    pub fn target(&self, target: &str, family: Option<&str>, protocol: Option<&str>) -> String {
        if let Some((_, rest)) = target.split_once(":[") {
            let digits = rest.strip_suffix(']').unwrap_or("");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                let parts: Vec<&str> = family.into_iter().chain(protocol).collect();
                return parts.join(" ");
            }
        }
        self.path(target)
    }

    /// `s` with every whole number that is one of the run's pids replaced by [`PID`].
    fn pids_in(&self, s: &str) -> String {
        let b = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < b.len() {
            let start = i;
            if !b[i].is_ascii_digit() {
                // Copy up to the next digit (char boundaries: digits are ASCII).
                while i < b.len() && !b[i].is_ascii_digit() {
                    i += 1;
                }
                out.push_str(&s[start..i]);
                continue;
            }
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let run = &s[start..i];
            let glued = |j: Option<usize>| {
                j.and_then(|j| b.get(j))
                    .is_some_and(u8::is_ascii_alphabetic)
            };
            let alone = !glued(start.checked_sub(1)) && !glued(Some(i));
            let pid = run.len() <= 10
                && !run.starts_with('0')
                && run.parse::<u64>().is_ok_and(|n| self.pids.contains(&n));
            out.push_str(if alone && pid { PID } else { run });
        }
        out
    }
}

/// One path component with an `mkstemp`-style suffix replaced by [`TEMP`]: a `.`, `-` or
/// `_`, then exactly six of `[A-Za-z0-9]` that end the component or come before a short
/// extension (`mkstemps(3)`: `.` and 1 to 8 alphanumerics), and look random: at least two
/// of upper case, lower case and digits, and not a word then a counter (`shard1`, `LOG42`).
fn temp_suffix(c: &str) -> String {
    let b = c.as_bytes();
    // Where the six characters start: before an extension, or at the end.
    let ext_start = b.iter().rposition(|&x| x == b'.').filter(|&d| {
        let ext = &b[d + 1..];
        (1..=8).contains(&ext.len()) && ext.iter().all(u8::is_ascii_alphanumeric)
    });
    for end in [ext_start, Some(b.len())].into_iter().flatten() {
        let Some(start) = end.checked_sub(SUFFIX_LEN) else {
            continue;
        };
        if start == 0 || !matches!(b[start - 1], b'.' | b'-' | b'_') {
            continue;
        }
        if looks_random(&b[start..end]) {
            return format!("{}{TEMP}{}", &c[..start], &c[end..]);
        }
    }
    c.to_string()
}

/// Whether six characters look like `mkstemp`'s: all `[A-Za-z0-9]`, at least two of the
/// three classes, and not letters of one case followed by digits (a word and a counter).
fn looks_random(s: &[u8]) -> bool {
    if !s.iter().all(u8::is_ascii_alphanumeric) {
        return false;
    }
    let upper = s.iter().any(u8::is_ascii_uppercase);
    let lower = s.iter().any(u8::is_ascii_lowercase);
    let digit = s.iter().any(u8::is_ascii_digit);
    if usize::from(upper) + usize::from(lower) + usize::from(digit) < 2 {
        return false;
    }
    let letters = s.iter().take_while(|c| c.is_ascii_alphabetic()).count();
    let counter = letters > 0 && !(upper && lower) && s[letters..].iter().all(u8::is_ascii_digit);
    !counter
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(pids: &[u64]) -> Normaliser {
        Normaliser::new(pids.iter().copied(), false)
    }

    #[test]
    fn a_pid_of_the_run_in_a_path_is_taken_out() {
        let r = n(&[13708, 26724]);
        assert_eq!(
            r.path("/tmp/fdaudit-demo-13708-credentials"),
            "/tmp/fdaudit-demo-<pid>-credentials"
        );
        assert_eq!(
            r.path("/run/user/26724/app.26724"),
            "/run/user/<pid>/app.<pid>"
        );
        // The same file in another run, with that run's pid: the same name.
        assert_eq!(
            n(&[26724]).path("/tmp/fdaudit-demo-26724-credentials"),
            r.path("/tmp/fdaudit-demo-13708-credentials")
        );
    }

    #[test]
    fn other_numbers_stay() {
        let r = n(&[13708]);
        // Numbers that are no pid of the run: two files stay two.
        assert_eq!(n(&[13708]).path("/data/shard-12"), "/data/shard-12");
        assert_ne!(
            n(&[13708]).path("/data/shard-12"),
            n(&[13708]).path("/data/shard-13")
        );
        // Part of a longer number, or glued to letters: not the pid.
        assert_eq!(r.path("/tmp/x137080"), "/tmp/x137080");
        assert_eq!(r.path("/tmp/v13708"), "/tmp/v13708");
        assert_eq!(r.path("/tmp/113708.log"), "/tmp/113708.log");
        assert_eq!(r.path("/tmp/013708"), "/tmp/013708");
        // Pids 0 and 1 are never taken out.
        assert_eq!(n(&[1]).path("/var/lib/1/db"), "/var/lib/1/db");
    }

    #[test]
    fn mkstemp_suffixes_are_taken_out() {
        let r = n(&[]);
        assert_eq!(r.path("/tmp/tmp.aB3xZ9"), "/tmp/tmp.XXXXXX");
        assert_eq!(r.path("/tmp/build-Q7fk2P/out"), "/tmp/build-XXXXXX/out");
        assert_eq!(r.path("/tmp/sock_4fGh2k.sock"), "/tmp/sock_XXXXXX.sock");
        assert_eq!(r.path("/tmp/a-0x9K2m"), "/tmp/a-XXXXXX");
        assert_eq!(r.path("/tmp/a-hs82kq"), "/tmp/a-XXXXXX");
    }

    #[test]
    fn names_that_only_look_like_a_suffix_stay() {
        let r = n(&[]);
        for p in [
            "/var/log/app-server",    // one case of letters: a word
            "/var/log/app-SERVER",    // the same in capitals
            "/srv/data-shard1",       // a word and a counter
            "/srv/data-LOGS42",       // the same in capitals
            "/srv/build-202612",      // digits only: a date, a number
            "/tmp/tmpaB3xZ9",         // no separator before it
            "/tmp/tmp.aB3xZ",         // five characters
            "/tmp/tmp.aB3xZ9q",       // seven
            "/tmp/tmp.aB3x+9",        // not alphanumeric
            "/tmp/x.aB3xZ9.tar.gz.x", // not at the end, nor before one extension
        ] {
            assert_eq!(r.path(p), p, "{p} was changed");
        }
        // Nothing is taken out with --keep-paths.
        let keep = Normaliser::new([13708], true);
        assert_eq!(
            keep.path("/tmp/fdaudit-demo-13708-credentials"),
            "/tmp/fdaudit-demo-13708-credentials"
        );
        assert_eq!(keep.path("/tmp/tmp.aB3xZ9"), "/tmp/tmp.aB3xZ9");
    }

    #[test]
    fn inode_numbers_are_taken_out_even_with_keep_paths() {
        let keep = Normaliser::new([], true);
        assert_eq!(
            keep.target("socket:[64069]", Some("inet"), Some("tcp")),
            "inet tcp"
        );
        assert_eq!(keep.target("pipe:[5]", None, None), "");
        // Not an inode number: stays.
        assert_eq!(
            keep.target("anon_inode:[eventfd]", None, None),
            "anon_inode:[eventfd]"
        );
    }

    #[test]
    fn from_records_takes_every_pid_and_parent_pid() {
        let recs: Vec<serde_json::Value> = [
            r#"{"type":"header"}"#,
            r#"{"type":"spawn","pid":40001,"parent_pid":40000}"#,
            r#"{"type":"spawn","pid":"x","parent_pid":1}"#,
        ]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
        let r = Normaliser::from_records(&recs, false);
        assert_eq!(r.path("/tmp/a-40000-40001-1"), "/tmp/a-<pid>-<pid>-1");
    }

    /// A trace stream of one spawn (pid `pid`, parent `pid - 1`) that leaked `target`.
    fn run(pid: u32, target: &str) -> String {
        format!(
            concat!(
                r#"{{"type":"header","command":"trace","schema_version":2}}"#,
                "\n",
                r#"{{"type":"spawn","pid":{},"parent_pid":{},"exec_path":"/bin/true","#,
                r#""leaked_fds":[{{"fd":7,"kind":"regular","target":"{}"}}]}}"#,
                "\n",
                r#"{{"type":"summary","groups":[{{"parent_comm":"sh","exec_path":"/bin/true","#,
                r#""spawns":1,"close_calls_median":0,"window_median_ns":1,"strategy":"none","#,
                r#""leaked_fd_count":1}}]}}"#,
                "\n"
            ),
            pid,
            pid - 1,
            target
        )
    }

    fn new_and_fixed(a: &str, b: &str, keep_paths: bool) -> (u64, u64) {
        use super::super::{compare, input};
        let tol = compare::Tolerances {
            closes_pct: 10.0,
            window_pct: None,
        };
        let (a, b) = (
            input::parse(a, keep_paths).unwrap(),
            input::parse(b, keep_paths).unwrap(),
        );
        let d = compare::compare(&a, &b, tol);
        (
            d.leak_count(compare::LeakChange::New),
            d.leak_count(compare::LeakChange::Fixed),
        )
    }

    #[test]
    fn diff_matches_leaks_by_normalised_names() {
        // The same file named by each run's pid: the same leak.
        let (a, b) = (
            run(13708, "/tmp/fdaudit-demo-13707-credentials"),
            run(26724, "/tmp/fdaudit-demo-26723-credentials"),
        );
        assert_eq!(new_and_fixed(&a, &b, false), (0, 0));
        assert_eq!(new_and_fixed(&a, &b, true), (1, 1), "--keep-paths");
        // Two temporary files of mkstemp: the same leak.
        let (a, b) = (run(500, "/tmp/tmp.aB3xZ9"), run(600, "/tmp/tmp.Q7fk2P"));
        assert_eq!(new_and_fixed(&a, &b, false), (0, 0));
        // shard-12 and shard-13 are two files: one new, one fixed.
        let (a, b) = (run(500, "/data/shard-12"), run(600, "/data/shard-13"));
        assert_eq!(new_and_fixed(&a, &b, false), (1, 1));
    }
}
