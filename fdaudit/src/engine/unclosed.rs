//! `fdaudit unclosed`'s kernel state read back: the live set (UNCLOSED_LIVE, one entry per
//! (process, fd) the followed processes made and did not close), the creating stacks
//! (UNCLOSED_STACKS, one per call site) with the words kept at each site's first sight
//! (UNCLOSED_SITES), and the EMFILE/ENFILE moments (UNCLOSED_FULL). Plain values out; the
//! front end (`crate::unclosed`) reconciles them with the fd tables and groups them.
//!
//! The live set is read with one `BPF_MAP_LOOKUP_BATCH` command per 4096 entries (a raw
//! bpf(2) call: aya 0.14 does not wrap it; Linux 5.6+), else, where the kernel refuses it,
//! with aya's get-next-key + lookup walk. A stack is resolved to modules and offsets the
//! first time its site is seen ([`LiveMaps::resolve_new_sites`], while the process that
//! made it most likely lives) and named when a report shows it.

use std::collections::HashMap as StdHashMap;
use std::os::fd::{AsFd as _, AsRawFd as _};

use anyhow::Result;
use aya::maps::{HashMap, Map, MapData, StackTraceMap};
use fdaudit_common::{
    OriginRecord, UnclosedFull, UnclosedLive, UnclosedSite, MAP_UNCLOSED_FULL, MAP_UNCLOSED_LIVE,
    MAP_UNCLOSED_SITES, MAP_UNCLOSED_STACKS, ORIGIN_STACK_DEPTH,
};

use super::process::Processes;
use super::session::Session;
use super::symbolize::{Frame, Symbolizer};

/// Entries asked for per batch.
const BATCH: usize = 4096;
/// Stacks resolved and kept (their frames), at most.
const MAX_RESOLVED: usize = 4096;

/// One live entry: the process, the fd, what the kernel kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveEntry {
    pub pid: u32,
    pub fd: i32,
    pub live: UnclosedLive,
}

/// The live set as read, and how.
#[derive(Debug, Default)]
pub struct LiveRead {
    pub entries: Vec<LiveEntry>,
    /// Read with BPF_MAP_LOOKUP_BATCH (else the get-next-key walk).
    pub batched: bool,
}

/// The maps of `unclosed`, taken out of the session's object.
pub struct LiveMaps {
    live: Map,
    stacks: StackTraceMap<MapData>,
    sites: HashMap<MapData, u32, UnclosedSite>,
    full: HashMap<MapData, u32, UnclosedFull>,
    sym: Symbolizer,
    /// Stack id -> its frames, resolved (named once a report showed them: `named`).
    resolved: StdHashMap<u32, Vec<Frame>>,
    named: std::collections::HashSet<u32>,
}

impl LiveMaps {
    /// Takes the maps from a session started with `SessionOptions::unclosed`.
    pub fn take(session: &mut Session) -> Result<LiveMaps> {
        Ok(LiveMaps {
            live: session.take_map(MAP_UNCLOSED_LIVE)?,
            stacks: StackTraceMap::try_from(session.take_map(MAP_UNCLOSED_STACKS)?)?,
            sites: HashMap::try_from(session.take_map(MAP_UNCLOSED_SITES)?)?,
            full: HashMap::try_from(session.take_map(MAP_UNCLOSED_FULL)?)?,
            sym: Symbolizer::default(),
            resolved: StdHashMap::new(),
            named: Default::default(),
        })
    }

    /// Every entry of the live set.
    pub fn read(&self) -> Result<LiveRead> {
        let fd = match &self.live {
            Map::HashMap(d) => d.fd().as_fd().as_raw_fd(),
            _ => anyhow::bail!("{MAP_UNCLOSED_LIVE} is not a hash map"),
        };
        if let Ok(entries) = lookup_batch(fd) {
            return Ok(LiveRead {
                entries,
                batched: true,
            });
        }
        let map: HashMap<&MapData, u64, UnclosedLive> = HashMap::try_from(&self.live)?;
        let entries = map
            .iter()
            .filter_map(|r| r.ok())
            .map(|(k, live)| entry(k, live))
            .collect();
        Ok(LiveRead {
            entries,
            batched: false,
        })
    }

    /// Drops the entries of `pids` (processes gone: their report is made).
    pub fn forget(&mut self, keys: &[(u32, i32)]) {
        let Ok(mut map) = HashMap::<&mut MapData, u64, UnclosedLive>::try_from(&mut self.live)
        else {
            return;
        };
        for &(pid, fd) in keys {
            let _ = map.remove(&(u64::from(pid) << 32 | u64::from(fd as u32)));
        }
    }

    /// The processes whose fd-making calls failed with EMFILE/ENFILE.
    pub fn full(&self) -> Vec<(u32, UnclosedFull)> {
        self.full.iter().filter_map(|r| r.ok()).collect()
    }

    /// Resolves the stacks of sites not seen before against their process (now, while it
    /// most likely lives).
    pub fn resolve_new_sites(&mut self) {
        let ids: Vec<u32> = self
            .sites
            .keys()
            .filter_map(|k| k.ok())
            .filter(|id| !self.resolved.contains_key(id))
            .take(MAX_RESOLVED.saturating_sub(self.resolved.len()))
            .collect();
        for id in ids {
            let frames = self.resolve(id, None);
            self.resolved.insert(id, frames);
        }
    }

    /// The named frames of stack `id` (resolved against `pid` if not yet).
    pub fn frames(&mut self, id: i32, pid: u32) -> Vec<Frame> {
        if id < 0 {
            return Vec::new();
        }
        let id = id as u32;
        if self.named.contains(&id) {
            if let Some(f) = self.resolved.get(&id) {
                return f.clone();
            }
        }
        let mut frames = match self.resolved.get(&id) {
            Some(f) if !f.is_empty() => f.clone(),
            _ => self.resolve(id, Some(pid)),
        };
        self.sym.name_frames(&mut frames);
        // Named once: the folded stacks, the gates and later reports take the same names;
        // except a JIT frame its perf map does not name yet (the JVM writes it at exit, or
        // when asked): named again at each report, from the map as it is then.
        let pending = frames
            .iter()
            .any(|f| f.jit_pid.is_some() && f.symbol.is_none());
        if !frames.is_empty()
            && (self.resolved.contains_key(&id) || self.resolved.len() < MAX_RESOLVED)
        {
            self.resolved.insert(id, frames.clone());
            if !pending {
                self.named.insert(id);
            }
        }
        frames
    }

    /// A report is being made: the perf maps naming JIT frames are checked again.
    pub fn begin_report(&mut self) {
        self.sym.begin_report();
    }

    /// Stack `id`'s frames resolved to modules and offsets, against the process that made
    /// the site (or `pid`).
    fn resolve(&mut self, id: u32, pid: Option<u32>) -> Vec<Frame> {
        let Ok(trace) = self.stacks.get(&id, 0) else {
            return Vec::new();
        };
        let site = self.sites.get(&id, 0).ok();
        // SAFETY: OriginRecord is plain integers; all zero is valid.
        let mut rec: OriginRecord = unsafe { std::mem::zeroed() };
        rec.pid = pid.or(site.map(|s| s.pid)).unwrap_or(0);
        let ips: Vec<u64> = trace.frames().iter().map(|f| f.ip).collect();
        let n = ips.len().min(ORIGIN_STACK_DEPTH);
        rec.stack[..n].copy_from_slice(&ips[..n]);
        rec.nstack = n as u32;
        if let Some(s) = site {
            rec.sp = s.sp;
            rec.sp_words = s.sp_words;
            rec.nsp_words = s.nsp_words;
        }
        // No parent links: unclosed reads the live process itself.
        self.sym.frames(&rec, &Processes::default())
    }
}

fn entry(key: u64, live: UnclosedLive) -> LiveEntry {
    LiveEntry {
        pid: (key >> 32) as u32,
        fd: key as u32 as i32,
        live,
    }
}

/// `union bpf_attr`'s batch part (BPF_MAP_*_BATCH).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// The whole hash map at `fd` by BPF_MAP_LOOKUP_BATCH (Linux 5.6).
fn lookup_batch(fd: i32) -> std::io::Result<Vec<LiveEntry>> {
    let mut keys = vec![0u64; BATCH];
    let mut values = vec![UnclosedLive::default(); BATCH];
    // The batch tokens: a hash map's is a bucket index (u32); room for more.
    let (mut token_in, mut token_out) = (0u64, 0u64);
    let mut out = Vec::new();
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                std::ptr::addr_of!(token_in) as u64
            },
            out_batch: std::ptr::addr_of_mut!(token_out) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH as u32,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: the attr points at buffers of BATCH keys and values of the map's sizes,
        // and at two tokens, all alive for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                std::ptr::addr_of_mut!(attr),
                size_of::<BatchAttr>(),
            )
        };
        let err = (rc < 0).then(std::io::Error::last_os_error);
        if err
            .as_ref()
            .is_some_and(|e| e.raw_os_error() != Some(libc::ENOENT))
        {
            return Err(err.unwrap_or_else(|| std::io::Error::other("bpf")));
        }
        let n = (attr.count as usize).min(BATCH);
        out.extend((0..n).map(|i| entry(keys[i], values[i])));
        if err.is_some() {
            return Ok(out);
        }
        token_in = token_out;
        first = false;
    }
}

/// `pid`'s execs the kernel counted (its TRACKED entry), if it is followed.
pub fn execs_of(session: &Session, pid: u32) -> Option<u32> {
    session.task_state(pid).map(|s| s.execs)
}
