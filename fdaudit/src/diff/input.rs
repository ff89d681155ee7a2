//! Reading one side of `fdaudit diff`: a `trace --json` or `bench --json` stream, made into
//! rows by group and the leaks by (exec path, fd, kind, target).

use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::normalise::Normaliser;
use crate::engine::strategy::Strategy;

/// Which subcommand wrote the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Trace,
    Bench,
}

/// What a row is matched by across the two runs: for `trace`, the parent and exec path of a
/// summary group (its container and strategy left out: container ids change from run to run,
/// and the strategy is what is compared); for `bench`, the cell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum Key {
    Trace {
        parent_comm: String,
        exec_path: String,
    },
    Bench {
        strategy: String,
        nofile: u64,
        open_fds: u64,
    },
    /// `bench -- CMD`: the user's spawner (its command line) at one NOFILE.
    Spawner { spawner: String, nofile: u64 },
}

impl Key {
    /// The key as two columns for people and CI reports: (parent or spawner or strategy,
    /// exec path or limit), unescaped.
    pub fn columns(&self) -> (String, String) {
        match self {
            Key::Trace {
                parent_comm,
                exec_path,
            } => (parent_comm.clone(), exec_path.clone()),
            Key::Bench {
                strategy,
                nofile,
                open_fds,
            } => (
                strategy.clone(),
                format!("nofile {nofile}, {open_fds} open fds"),
            ),
            Key::Spawner { spawner, nofile } => (spawner.clone(), format!("nofile {nofile}")),
        }
    }
}

/// One side's numbers for a key. Several trace groups of one key (the same parent and exec
/// path with several strategies) make one row with the worst of each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub spawns: u64,
    /// The strategy whose cost grows most (`bench`: the cell's).
    pub strategy: String,
    /// Every strategy of the key's groups, as in the input.
    pub strategies: Vec<String>,
    /// close() calls per spawn, the median (the largest of the groups'); null for a bench
    /// cell that was not traced and a `trace --no-syscalls`.
    #[serde(rename = "close_calls_median")]
    pub close_median: Option<u64>,
    /// Fork to exec, the median (`bench`: the wall time per spawn).
    pub window_median_ns: u64,
    /// Leaked fds per spawn (`bench`: the traced median).
    #[serde(serialize_with = "crate::output::round3")]
    pub leaked_fds_per_spawn: f64,
}

/// A leak, as far as it can be recognised in another run: its exec path and target
/// normalised ([`Normaliser`]: the run's pids, `mkstemp` suffixes, and a `socket:[N]` or
/// `pipe:[N]`'s inode number replaced by the socket's family and protocol, or nothing).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct LeakId {
    pub exec_path: String,
    pub fd: u32,
    pub kind: String,
    pub target: String,
}

/// One run, read.
#[derive(Debug, Clone)]
pub struct Side {
    pub kind: Kind,
    pub rows: BTreeMap<Key, Row>,
    /// Spawns that leaked each fd at their last image (the traced command's own
    /// inheritance left out).
    pub leaks: BTreeMap<LeakId, u64>,
    /// Where each leak came from, as far as the records say (`--sarif`).
    pub origins: BTreeMap<LeakId, LeakOrigin>,
}

/// What a trace's records say of a leak beyond its [`LeakId`]: the exec path as written,
/// whether it crossed a boundary, and the source lines of its origin's stack (`trace
/// --origin`), innermost first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeakOrigin {
    pub exec_path: String,
    pub critical: bool,
    pub syscall: Option<String>,
    pub frames: Vec<(String, Option<u32>)>,
    /// The stack's mapped files, innermost first.
    pub modules: Vec<String>,
}

/// Source frames kept per leak.
const MAX_FRAMES: usize = 32;

impl LeakOrigin {
    fn of(exec_path: &str, f: &FdIn) -> LeakOrigin {
        let call = f.origin.as_ref();
        let stacks = call
            .into_iter()
            .chain(call.and_then(|c| c.get("created_by")))
            .filter_map(|c| c.get("stack")?.as_array());
        let all: Vec<&serde_json::Value> = stacks.flatten().collect();
        let mut modules: Vec<String> = Vec::new();
        for m in all.iter().filter_map(|fr| fr.get("module")?.as_str()) {
            if modules.len() < MAX_FRAMES && !modules.iter().any(|x| x == m) {
                modules.push(m.to_string());
            }
        }
        let frames = all
            .into_iter()
            .filter_map(|fr| {
                let file = fr.get("file")?.as_str()?.to_string();
                let line = fr.get("line").and_then(serde_json::Value::as_u64);
                Some((file, line.and_then(|l| u32::try_from(l).ok())))
            })
            .take(MAX_FRAMES)
            .collect();
        LeakOrigin {
            exec_path: exec_path.to_string(),
            critical: f.critical,
            syscall: call
                .and_then(|c| c.get("syscall")?.as_str())
                .map(str::to_string),
            frames,
            modules,
        }
    }
}

#[derive(Deserialize)]
struct GroupIn {
    parent_comm: String,
    exec_path: String,
    spawns: u64,
    // Schema 2 names first, schema 1's as aliases: a diff reads runs of either.
    #[serde(rename = "close_calls_median", alias = "close_median")]
    close_median: u64,
    window_median_ns: u64,
    strategy: String,
    #[serde(rename = "leaked_fd_count", alias = "leaked_fds")]
    leaked_fds: u64,
}

#[derive(Deserialize)]
struct UserCellIn {
    spawner: String,
    nofile: u64,
    spawns: u64,
    strategy: Option<String>,
    window_median_ns: Option<u64>,
    close_calls_per_spawn: Option<u64>,
    leaked_fds_per_spawn: Option<u64>,
}

impl UserCellIn {
    fn row(self) -> (Key, Row) {
        let strategy = self.strategy.unwrap_or_else(|| "-".into());
        let key = Key::Spawner {
            spawner: self.spawner,
            nofile: self.nofile,
        };
        let row = Row {
            spawns: self.spawns,
            strategies: vec![strategy.clone()],
            strategy,
            close_median: self.close_calls_per_spawn,
            window_median_ns: self.window_median_ns.unwrap_or(0),
            leaked_fds_per_spawn: self.leaked_fds_per_spawn.unwrap_or(0) as f64,
        };
        (key, row)
    }
}

#[derive(Deserialize)]
struct CellIn {
    strategy: String,
    nofile: u64,
    open_fds: u64,
    spawns: u64,
    median_ns: u64,
    close_calls_per_spawn: Option<u64>,
    leaked_fds_per_spawn: Option<u64>,
}

#[derive(Deserialize)]
struct SpawnIn {
    pid: u32,
    exec_path: String,
    #[serde(default)]
    flags: Vec<String>,
    #[serde(default)]
    leaked_fds: Vec<FdIn>,
}

#[derive(Deserialize)]
struct FdIn {
    fd: u32,
    kind: String,
    target: String,
    family: Option<String>,
    protocol: Option<String>,
    #[serde(default)]
    inherited: bool,
    #[serde(default)]
    critical: bool,
    /// `trace --origin`'s call (or why it is unknown), read only for `--sarif`.
    #[serde(default)]
    origin: Option<serde_json::Value>,
}

/// Reads `path` (named in errors as given); `keep_paths`: `--keep-paths`.
pub fn read(path: &std::path::Path, keep_paths: bool) -> Result<Side> {
    let name = crate::output::text::escape_path(path);
    let text = std::fs::read_to_string(path).with_context(|| format!("failed to read {name}"))?;
    // One line: what is wrong with which file.
    parse(&text, keep_paths).map_err(|e| {
        anyhow::anyhow!("{name} is not the output of fdaudit trace --json or bench --json: {e:#}")
    })
}

/// A stream's records, made into a [`Side`], its paths normalised unless `keep_paths`.
pub fn parse(text: &str, keep_paths: bool) -> Result<Side> {
    let mut recs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("line {} is not a JSON object", i + 1))?;
        recs.push(v);
    }
    let Some(header) = recs.first().filter(|r| r["type"] == "header") else {
        bail!("its first line is not a header record");
    };
    // Schema 1 and 2 name the fields diff reads differently: both are read (see `GroupIn`).
    let newest = u64::from(crate::output::stream::SCHEMA_VERSION);
    if let Some(v) = header["schema_version"].as_u64().filter(|&v| v > newest) {
        bail!(
            "it has schema version {v}, and this fdaudit reads 1 to {newest}: use a newer fdaudit"
        );
    }
    match header["command"].as_str() {
        Some("trace") => trace_side(&recs, &Normaliser::from_records(&recs, keep_paths)),
        Some("bench") => bench_side(&recs),
        Some(other) => bail!("it was written by `fdaudit {other}`"),
        None => bail!("its header names no command"),
    }
}

fn of<'a>(
    recs: &'a [serde_json::Value],
    ty: &'a str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    recs.iter().filter(move |r| r["type"] == ty)
}

fn trace_side(recs: &[serde_json::Value], norm: &Normaliser) -> Result<Side> {
    let summary = of(recs, "summary")
        .last()
        .context("it has no summary record: the trace did not finish")?;
    let groups: Vec<GroupIn> = serde_json::from_value(summary["groups"].clone())
        .context("its summary's groups are not as fdaudit writes them")?;
    // `--no-syscalls` counted no syscalls: its 0 closes are unknown, not none.
    // `no_syscalls` in schema 2, `leaks_only` in schema 1.
    let counted = summary["no_syscalls"] != true && summary["leaks_only"] != true;
    let mut acc: BTreeMap<Key, (Row, u64)> = BTreeMap::new();
    for g in groups {
        let key = Key::Trace {
            parent_comm: g.parent_comm,
            exec_path: norm.path(&g.exec_path),
        };
        let (row, leaked) = acc.entry(key).or_insert_with(|| {
            let row = Row {
                spawns: 0,
                strategy: g.strategy.clone(),
                strategies: Vec::new(),
                close_median: Some(0),
                window_median_ns: 0,
                leaked_fds_per_spawn: 0.0,
            };
            (row, 0)
        });
        if rank(&g.strategy) > rank(&row.strategy) {
            row.strategy.clone_from(&g.strategy);
        }
        row.strategies.push(g.strategy);
        row.spawns += g.spawns;
        row.close_median = row
            .close_median
            .max(Some(g.close_median))
            .filter(|_| counted);
        row.window_median_ns = row.window_median_ns.max(g.window_median_ns);
        *leaked += g.leaked_fds;
    }
    let rows = acc
        .into_iter()
        .map(|(k, (mut row, leaked))| {
            row.leaked_fds_per_spawn = leaked as f64 / row.spawns.max(1) as f64;
            (k, row)
        })
        .collect();
    let (leaks, origins) = trace_leaks(recs, norm)?;
    Ok(Side {
        kind: Kind::Trace,
        rows,
        leaks,
        origins,
    })
}

/// A strategy's cost rank for choosing a key's worst (unknown names lowest).
pub fn rank(s: &str) -> Option<u8> {
    Strategy::from_name(s).and_then(Strategy::cost_rank)
}

/// The fds each spawn's last image got: a record flagged `reexec` replaces its process's
/// previous one (the image that exec'd again passed its fds on, it did not leak them).
type Leaks = (BTreeMap<LeakId, u64>, BTreeMap<LeakId, LeakOrigin>);

fn trace_leaks(recs: &[serde_json::Value], norm: &Normaliser) -> Result<Leaks> {
    let mut last: Vec<(u32, Vec<LeakId>)> = Vec::new();
    let mut origins: BTreeMap<LeakId, LeakOrigin> = BTreeMap::new();
    for r in of(recs, "spawn") {
        let s: SpawnIn = serde_json::from_value(r.clone())
            .context("a spawn record is not as fdaudit writes it")?;
        let exec_path = norm.path(&s.exec_path);
        let ids: Vec<LeakId> = s
            .leaked_fds
            .iter()
            .filter(|f| !f.inherited)
            .map(|f| {
                let id = LeakId {
                    exec_path: exec_path.clone(),
                    fd: f.fd,
                    kind: f.kind.clone(),
                    target: norm.target(&f.target, f.family.as_deref(), f.protocol.as_deref()),
                };
                // The first record with source lines names where the leak comes from.
                let o = origins.entry(id.clone()).or_default();
                if o.exec_path.is_empty() || (o.frames.is_empty() && f.origin.is_some()) {
                    *o = LeakOrigin::of(&s.exec_path, f);
                }
                id
            })
            .collect();
        let reexec = s.flags.iter().any(|f| f == "reexec");
        match last.iter_mut().rev().find(|(pid, _)| *pid == s.pid) {
            Some(prev) if reexec => prev.1 = ids,
            _ => last.push((s.pid, ids)),
        }
    }
    let mut leaks = BTreeMap::new();
    for (_, mut ids) in last {
        ids.sort();
        ids.dedup();
        for id in ids {
            *leaks.entry(id).or_insert(0) += 1;
        }
    }
    origins.retain(|id, _| leaks.contains_key(id));
    Ok((leaks, origins))
}

fn bench_side(recs: &[serde_json::Value]) -> Result<Side> {
    let mut rows = BTreeMap::new();
    for r in of(recs, "cell") {
        let c: CellIn = serde_json::from_value(r.clone())
            .context("a cell record is not as fdaudit writes it")?;
        let key = Key::Bench {
            strategy: c.strategy.clone(),
            nofile: c.nofile,
            open_fds: c.open_fds,
        };
        let row = Row {
            spawns: c.spawns,
            strategies: vec![c.strategy.clone()],
            strategy: c.strategy,
            close_median: c.close_calls_per_spawn,
            window_median_ns: c.median_ns,
            leaked_fds_per_spawn: c.leaked_fds_per_spawn.unwrap_or(0) as f64,
        };
        rows.insert(key, row);
    }
    for r in of(recs, "user_cell") {
        let c: UserCellIn = serde_json::from_value(r.clone())
            .context("a user_cell record is not as fdaudit writes it")?;
        let (key, row) = c.row();
        rows.insert(key, row);
    }
    if rows.is_empty() {
        bail!("it has no cell or user_cell records: the bench measured nothing");
    }
    Ok(Side {
        kind: Kind::Bench,
        rows,
        leaks: BTreeMap::new(),
        origins: BTreeMap::new(),
    })
}
