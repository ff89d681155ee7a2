//! `fdaudit_leaked_files_total`: leaks counted per leaked file, so that an alert fires once
//! per leak rather than once per child it reached (#42 item 5). A socket that `leaky` leaks
//! into `sh`, which passes it on to `ls` and `sleep`, is three spawns with a leak but one
//! file: its series is keyed by the file's identity (`socket:[INODE]`, `pipe:[INODE]`,
//! `MAJOR:MINOR:INODE` for the rest) and named after the process that made it, the origin's
//! command with `--origin`, else the parent of the first spawn it leaked into. Each spawn
//! it reaches adds 1.
//!
//! File identities are not bounded as the other labels are (every leaked socket is a new
//! inode), so at most [`MAX_FILES`] files get series of their own; later ones are counted
//! under one set whose `file` and `maker` are `_overflow`, and the series stay until the
//! agent restarts (a counter must not vanish between scrapes).

use std::collections::HashMap;

use prometheus_client::{
    encoding::{EncodeLabelSet, LabelSetEncoder},
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

use super::labels::{non_empty, OVERFLOW};

/// Leaked files with series of their own, at most.
pub const MAX_FILES: usize = 1000;

/// One leaked fd of a spawn, as this metric keys it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakedFile {
    /// `socket:[INODE]`, `pipe:[INODE]` or `MAJOR:MINOR:INODE`.
    pub file: String,
    pub kind: String,
    /// The command of the process whose call made it inheritable (`--origin`), if known.
    pub origin_comm: Option<String>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct FileLabels {
    /// Absent outside containers, as on the other metrics.
    container_id: String,
    maker: String,
    kind: String,
    file: String,
}

impl EncodeLabelSet for FileLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        let pairs = [
            ("container_id", self.container_id.as_str()),
            ("maker", &self.maker),
            ("kind", &self.kind),
            ("file", &self.file),
        ];
        non_empty(&pairs, encoder)
    }
}

/// The family and which file got which label set.
pub struct LeakedFiles {
    family: Family<FileLabels, Counter>,
    /// (container, file) → its label set, fixed at its first leak.
    seen: HashMap<(String, String), FileLabels>,
}

impl LeakedFiles {
    pub fn new() -> LeakedFiles {
        LeakedFiles {
            family: Family::default(),
            seen: HashMap::new(),
        }
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leaked_files",
            "Spawns each leaked file reached, per file (socket:[inode], pipe:[inode] or major:minor:inode), named after the process that made it (the origin's command with --origin, else the first leaking parent): one series per leak, however many children it passed through",
            self.family.clone(),
        );
    }

    /// Counts the files one spawn (in `container_id`, child of `parent`) leaked.
    pub fn observe(&mut self, container_id: &str, parent: &str, files: &[LeakedFile]) {
        for f in files {
            let key = (container_id.to_owned(), f.file.clone());
            let labels = match self.seen.get(&key) {
                Some(l) => l.clone(),
                None if self.seen.len() < MAX_FILES => {
                    let l = FileLabels {
                        container_id: container_id.to_owned(),
                        maker: f.origin_comm.clone().unwrap_or_else(|| parent.to_owned()),
                        kind: f.kind.clone(),
                        file: f.file.clone(),
                    };
                    self.seen.insert(key, l.clone());
                    l
                }
                None => FileLabels {
                    container_id: container_id.to_owned(),
                    maker: OVERFLOW.into(),
                    kind: f.kind.clone(),
                    file: OVERFLOW.into(),
                },
            };
            self.family.get_or_create(&labels).inc();
        }
    }
}

/// The leaked files of a spawn (every listed leaked fd; an exec chain's step has none).
pub fn of_spawn(s: &crate::engine::spawn::Spawn) -> Vec<LeakedFile> {
    s.leaked_fds
        .iter()
        .map(|f| LeakedFile {
            file: identity(f.kind.as_str(), f.dev, f.ino),
            kind: f.kind.as_str().to_owned(),
            origin_comm: match &f.origin {
                // Escaped as the `parent` label is (a comm is the process's to choose).
                Some(crate::engine::origin::Origin::Known(c)) => {
                    Some(crate::output::text::escape(&c.comm))
                }
                _ => None,
            },
        })
        .collect()
}

/// The identity label of a leaked fd: its kind's own namespace for sockets and pipes (the
/// inode `/proc/PID/fd` shows), the device and inode for the rest.
pub fn identity(kind: &str, dev: u32, ino: u64) -> String {
    match kind {
        "socket" | "pipe" => format!("{kind}:[{ino}]"),
        // The kernel's dev_t encoding (major << 20 | minor).
        _ => format!("{}:{}:{ino}", dev >> 20, dev & 0xf_ffff),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u64, origin: Option<&str>) -> LeakedFile {
        LeakedFile {
            file: identity("socket", 9, ino),
            kind: "socket".into(),
            origin_comm: origin.map(str::to_owned),
        }
    }

    fn encode(files: &LeakedFiles) -> String {
        let mut r = Registry::with_prefix("fdaudit");
        files.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        text
    }

    #[test]
    fn a_file_passed_through_children_is_one_series_named_after_its_maker() {
        let mut f = LeakedFiles::new();
        // leaky → sh, then sh → ls and sh → sleep: the same socket.
        f.observe("c1", "leaky", &[file(77, None)]);
        f.observe("c1", "sh", &[file(77, None)]);
        f.observe("c1", "sh", &[file(77, None)]);
        let text = encode(&f);
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("fdaudit_leaked_files_total{"))
            .collect();
        assert_eq!(series.len(), 1, "{text}");
        assert!(series[0].contains("maker=\"leaky\"") && series[0].ends_with(" 3"));
        assert!(series[0].contains("file=\"socket:[77]\""), "{text}");
        // With --origin the maker is the process whose call made it inheritable.
        f.observe("c1", "sh", &[file(78, Some("server"))]);
        assert!(encode(&f).contains("maker=\"server\""));
    }

    #[test]
    fn files_past_the_cap_fold_into_overflow() {
        let mut f = LeakedFiles::new();
        for ino in 0..(MAX_FILES as u64 + 10) {
            f.observe("", "p", &[file(ino, None)]);
        }
        let text = encode(&f);
        let n = text
            .lines()
            .filter(|l| l.starts_with("fdaudit_leaked_files_total{"))
            .count();
        assert_eq!(n, MAX_FILES + 1, "the cap and one overflow set");
        assert!(text.contains("file=\"_overflow\""));
        assert_eq!(identity("regular", (8 << 20) | 1, 5), "8:1:5");
    }
}
