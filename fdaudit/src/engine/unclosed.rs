//! `fdaudit unclosed`'s kernel state read back: the live set (UNCLOSED_LIVE, one entry per
//! (process, fd) the followed processes made and did not close), the creating stacks
//! (UNCLOSED_STACKS) with the words kept at each call site's first sight (UNCLOSED_SITES),
//! and the EMFILE/ENFILE moments (UNCLOSED_FULL). Plain values out; the front end
//! (`crate::unclosed`) reconciles them with the fd tables and groups them by site.
//!
//! A site is a stack id and, where the stack's innermost frame keeps no frame pointer, its
//! caller's return address (the kernel's walk skips that caller). Userspace tells the
//! kernel which stack word holds it, per stack id, from the innermost frame's unwind rule
//! ([`super::unwind::ra_word`], into UNCLOSED_RA_SLOTS); the calls made before it did kept
//! their own words (UNCLOSED_PENDING), from which their return address is read here. Each
//! site gets the id the front end groups by: its stack id for the first site of a stack
//! id, a number from [`MAX_UNCLOSED_STACKS`] up for each other.
//!
//! The live set is read with one `BPF_MAP_LOOKUP_BATCH` command per 4096 entries (a raw
//! bpf(2) call: aya 0.14 does not wrap it; Linux 5.6+), else, where the kernel refuses it,
//! with aya's get-next-key + lookup walk. A stack is resolved to modules and offsets the
//! first time its site is seen ([`LiveMaps::resolve_new_sites`], while the process that
//! made it most likely lives) and named when a report shows it.

use std::collections::HashMap as StdHashMap;
use std::os::fd::{AsFd as _, AsRawFd as _};

use anyhow::Result;
use aya::maps::{Array, HashMap, IterableMap as _, Map, MapData, StackTraceMap};
use fdaudit_common::{
    ra_from, ra_slot, LiveState, OriginRecord, UnclosedFull, UnclosedLive, UnclosedPending,
    UnclosedSite, UnclosedSiteKey, MAP_UNCLOSED_FULL, MAP_UNCLOSED_LIVE, MAP_UNCLOSED_PENDING,
    MAP_UNCLOSED_RA_SLOTS, MAP_UNCLOSED_SITES, MAP_UNCLOSED_STACKS, MAX_RA_SLOT,
    MAX_UNCLOSED_STACKS, ORIGIN_STACK_DEPTH,
};

use super::process::Processes;
use super::session::Session;
use super::symbolize::{Frame, Symbolizer};

/// Entries asked for per batch.
const BATCH: usize = 4096;
/// Sites asked for per batch (each holds its call's stack words).
const SITES_BATCH: usize = 1024;
/// Sites resolved and kept (their frames), at most.
const MAX_RESOLVED: usize = 8192;
/// The "return address" of a site whose call's words were not kept (evicted from
/// UNCLOSED_PENDING, or its slot beyond them): no user address is this.
const CALLER_UNKNOWN: u64 = u64::MAX;
/// The "return address" of the sites past [`MAX_SITES`].
const CALLER_SITES_FULL: u64 = u64::MAX - 1;
/// Sites given an id of their own, at most (a process chooses its stack words, so its
/// return addresses: the ids are bounded, not the process's choices). Past it, one more
/// id per stack id: with them at most [`MAX_RESOLVED`] ids, every one's frames kept.
const MAX_SITES: usize = MAX_UNCLOSED_STACKS as usize;
/// What a site's stack says in place of a caller it does not know.
const CALLER_NOT_KEPT: &str = "caller not known: the call came before fdaudit had read its \
    wrapper's unwind rule, and its stack words were no longer kept when the live set was read";

/// A call site: a stack id and its caller's return address (0: the stack id alone).
type SiteKey = (u32, u64);

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
    /// Keys the set held when read, closed ones included (those of gone processes are
    /// removed by this read).
    pub keys: usize,
}

/// The maps of `unclosed`, taken out of the session's object.
pub struct LiveMaps {
    live: Map,
    stacks: StackTraceMap<MapData>,
    sites: HashMap<MapData, UnclosedSiteKey, UnclosedSite>,
    slots: Array<MapData, u32>,
    pending: HashMap<MapData, u64, UnclosedPending>,
    full: HashMap<MapData, u32, UnclosedFull>,
    sym: Symbolizer,
    /// Site id -> its frames, resolved (named once a report showed them: `named`).
    resolved: StdHashMap<i32, Vec<Frame>>,
    named: std::collections::HashSet<i32>,
    /// The sites and the ids they are grouped by, both ways.
    ids: StdHashMap<SiteKey, i32>,
    keys: StdHashMap<i32, SiteKey>,
    /// Words of the sites known only from a pending call's copy.
    words: StdHashMap<SiteKey, UnclosedSite>,
    /// Stack id -> the slot written for it.
    learned: StdHashMap<u32, u32>,
    /// A pending call's site, by (pid, fd, time), for the entries of the last read.
    pending_sites: StdHashMap<(u32, i32, u64), i32>,
    /// The kernel's count of sites kept when they were last looked for.
    sites_seen: Option<u64>,
}

impl LiveMaps {
    /// Takes the maps from a session started with `SessionOptions::unclosed`.
    pub fn take(session: &mut Session) -> Result<LiveMaps> {
        Ok(LiveMaps {
            live: session.take_map(MAP_UNCLOSED_LIVE)?,
            stacks: StackTraceMap::try_from(session.take_map(MAP_UNCLOSED_STACKS)?)?,
            sites: HashMap::try_from(session.take_map(MAP_UNCLOSED_SITES)?)?,
            slots: Array::try_from(session.take_map(MAP_UNCLOSED_RA_SLOTS)?)?,
            pending: HashMap::try_from(session.take_map(MAP_UNCLOSED_PENDING)?)?,
            full: HashMap::try_from(session.take_map(MAP_UNCLOSED_FULL)?)?,
            sym: Symbolizer::default(),
            resolved: StdHashMap::new(),
            named: Default::default(),
            ids: StdHashMap::new(),
            keys: StdHashMap::new(),
            words: StdHashMap::new(),
            learned: StdHashMap::new(),
            pending_sites: StdHashMap::new(),
            sites_seen: None,
        })
    }

    /// Every entry of the live set, each with its site's id in `live.stack_id`.
    pub fn read(&mut self) -> Result<LiveRead> {
        let mut read = self.read_raw()?;
        let mut pending_sites = StdHashMap::new();
        for e in &mut read.entries {
            let l = e.live;
            e.live.stack_id = if l.ra_from == ra_from::PENDING {
                let key = (e.pid, e.fd, l.time_ns);
                let site = match self.pending_sites.get(&key) {
                    Some(&site) => site,
                    None => self.site_of(e.pid, l.stack_id, l.ra_from, l.ra, l.time_ns),
                };
                pending_sites.insert(key, site);
                site
            } else {
                self.site_of(e.pid, l.stack_id, l.ra_from, l.ra, l.time_ns)
            };
        }
        self.pending_sites = pending_sites;
        Ok(read)
    }

    /// The id of the site of `pid`'s call made at `time_ns`: `stack_id`, and `ra` as
    /// `from` says (for a pending call, the fd its words are kept under).
    fn site_of(&mut self, pid: u32, stack_id: i32, from: u32, ra: u64, time_ns: u64) -> i32 {
        if stack_id < 0 {
            return stack_id;
        }
        match from {
            ra_from::PENDING => self.pending_site(pid, stack_id as u32, ra as u32, time_ns),
            ra_from::WORD => self.site_id((stack_id as u32, ra)),
            _ => self.site_id((stack_id as u32, 0)),
        }
    }

    /// The id of a pending call's site: its return address read from its own words, at
    /// the slot learned for its stack id.
    fn pending_site(&mut self, pid: u32, id: u32, fd: u32, time_ns: u64) -> i32 {
        let words = self
            .pending
            .get(&(u64::from(pid) << 32 | u64::from(fd)), 0)
            .ok()
            .filter(|p| p.time_ns == time_ns)
            .map(|p| p.site);
        let Some(site) = words else {
            return self.site_id((id, CALLER_UNKNOWN));
        };
        let slot = match self.learned.get(&id) {
            Some(&slot) => slot,
            None => self.learn_slot(id, &site),
        };
        let ra = match slot {
            ra_slot::NONE => 0,
            k => match site.sp_words.get((k as usize).wrapping_sub(1)) {
                Some(&ra) if k as usize <= site.nsp_words as usize => ra,
                _ => CALLER_UNKNOWN,
            },
        };
        let site_id = self.site_id((id, ra));
        if ra != CALLER_UNKNOWN && ra != 0 && self.keys.get(&site_id) == Some(&(id, ra)) {
            self.words.entry((id, ra)).or_insert(site);
        }
        site_id
    }

    /// The id `key` is grouped by (given the first time).
    fn site_id(&mut self, mut key: SiteKey) -> i32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        if self.ids.len() >= MAX_SITES {
            key.1 = CALLER_SITES_FULL;
            if let Some(&id) = self.ids.get(&key) {
                return id;
            }
        }
        let id = if self.keys.contains_key(&(key.0 as i32)) {
            MAX_UNCLOSED_STACKS as i32 + (self.ids.len() as i32)
        } else {
            key.0 as i32
        };
        self.ids.insert(key, id);
        self.keys.insert(id, key);
        id
    }

    /// Learns where stack `id`'s caller's return address is, from the unwind rule of its
    /// innermost frame in the process that made `site`, and tells the kernel. A process gone
    /// before its rule was read teaches nothing: the slot stays to be learned from a later
    /// call (this call's site is then its stack id alone).
    fn learn_slot(&mut self, id: u32, site: &UnclosedSite) -> u32 {
        let ip = self
            .stacks
            .get(&id, 0)
            .ok()
            .and_then(|t| t.frames().first().map(|f| f.ip));
        self.sym.begin_record();
        let rule = ip.and_then(|ip| self.sym.frame_rule(site.pid, ip, &Processes::default()));
        if rule.is_none() && !std::path::Path::new(&format!("/proc/{}", site.pid)).exists() {
            return ra_slot::NONE;
        }
        let slot = rule
            .and_then(super::unwind::ra_word)
            .filter(|&w| w < MAX_RA_SLOT)
            .map_or(ra_slot::NONE, |w| w + 1);
        let _ = self.slots.set(id, slot, 0);
        self.learned.insert(id, slot);
        slot
    }

    /// Every live entry of the live set as the kernel keeps it. Copies made while the
    /// kernel rewrote an entry in place are read again, a few times; an entry closed is
    /// not live, and a gone process's closed entries are removed.
    fn read_raw(&mut self) -> Result<LiveRead> {
        let fd = match &self.live {
            Map::HashMap(d) => d.fd().as_fd().as_raw_fd(),
            _ => anyhow::bail!("{MAP_UNCLOSED_LIVE} is not a hash map"),
        };
        let map: HashMap<&MapData, u64, UnclosedLive> = HashMap::try_from(&self.live)?;
        let (all, batched) = match lookup_batch::<u64, UnclosedLive>(fd, BATCH) {
            Ok(all) => (all, true),
            Err(_) => (map.iter().filter_map(|r| r.ok()).collect(), false),
        };
        let sorted = sort_live(all, |key| map.get(&key, 0).ok());
        self.sweep_closed(&sorted.closed);
        Ok(LiveRead {
            keys: sorted.live.len() + sorted.closed.len(),
            entries: sorted.live.into_iter().map(|(k, l)| entry(k, l)).collect(),
            batched,
        })
    }

    /// Removes the closed entries of processes that are gone or zombies (a running
    /// process's closed entries stay: its next fd of that number rewrites them in place).
    fn sweep_closed(&mut self, closed: &[u64]) {
        let mut gone: StdHashMap<u32, bool> = StdHashMap::new();
        let Ok(mut map) = HashMap::<&mut MapData, u64, UnclosedLive>::try_from(&mut self.live)
        else {
            return;
        };
        for &key in closed {
            let pid = (key >> 32) as u32;
            let is_gone = *gone
                .entry(pid)
                .or_insert_with(|| !crate::procfs_util::alive(pid));
            if is_gone {
                let _ = map.remove(&key);
            }
        }
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

    /// The processes whose fd-making calls failed with EMFILE/ENFILE, each with its site's
    /// id in `stack_id`.
    pub fn full(&mut self) -> Vec<(u32, UnclosedFull)> {
        let mut full: Vec<(u32, UnclosedFull)> = self.full.iter().filter_map(|r| r.ok()).collect();
        for (pid, f) in &mut full {
            f.stack_id = self.site_of(*pid, f.stack_id, f.ra_from, f.ra, f.time_ns);
        }
        full
    }

    /// Learns the return-address slots of new stack ids and resolves the stacks of sites
    /// not seen before against their process (now, while it most likely lives); nothing
    /// when the kernel's count of sites (`sites_kept`, its STATS) is unchanged.
    pub fn resolve_new_sites(&mut self, sites_kept: u64) {
        if self.sites_seen == Some(sites_kept) {
            return;
        }
        self.sites_seen = Some(sites_kept);
        for (k, site) in self.sites_now() {
            let slot = match self.learned.get(&k.stack_id) {
                Some(&slot) => slot,
                None => self.learn_slot(k.stack_id, &site),
            };
            if k.ra == 0 && slot != ra_slot::NONE {
                // The words of the first call before the slot was known: that call's own
                // site is read from its own words (`pending_site`).
                continue;
            }
            let id = self.site_id((k.stack_id, k.ra));
            if !self.resolved.contains_key(&id) && self.resolved.len() < MAX_RESOLVED {
                let frames = self.resolve(id, None);
                self.resolved.insert(id, frames);
            }
        }
    }

    /// The sites the kernel keeps, with their words: by BPF_MAP_LOOKUP_BATCH (a few bpf(2)
    /// commands however many: a process that makes a new site at every look would otherwise
    /// cost a get-next-key command per site kept, each time), else by aya's walk.
    fn sites_now(&self) -> Vec<(UnclosedSiteKey, UnclosedSite)> {
        let fd = self.sites.map().fd().as_fd().as_raw_fd();
        lookup_batch(fd, SITES_BATCH)
            .unwrap_or_else(|_| self.sites.iter().filter_map(|r| r.ok()).collect())
    }

    /// The named frames of site `id` (resolved against `pid` if not yet).
    pub fn frames(&mut self, id: i32, pid: u32) -> Vec<Frame> {
        if id < 0 {
            return Vec::new();
        }
        if self.named.contains(&id) {
            if let Some(f) = self.resolved.get(&id) {
                return f.clone();
            }
        }
        let mut frames = match self.resolved.get(&id) {
            Some(f) if !f.is_empty() => f.clone(),
            _ => self.resolve(id, Some(pid)),
        };
        // Each stack has its own time to read modules in: a report names many, and one
        // module read for an earlier stack (a JVM's libjvm) must not leave this one unnamed.
        self.sym.begin_record();
        let deferred = self.sym.name_frames(&mut frames);
        // Named once: the folded stacks, the gates and later reports take the same names;
        // except a JIT frame its perf map does not name yet (the JVM writes it at exit, or
        // when asked), or a frame whose module was left for a later record: named again at
        // each report.
        let pending = deferred
            || frames
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

    /// Site `id`'s frames resolved to modules and offsets, against the process that made
    /// the site (or `pid`).
    fn resolve(&mut self, id: i32, pid: Option<u32>) -> Vec<Frame> {
        let Some(&(stack_id, ra)) = self.keys.get(&id) else {
            return Vec::new();
        };
        let Ok(trace) = self.stacks.get(&stack_id, 0) else {
            return Vec::new();
        };
        let key = UnclosedSiteKey {
            stack_id,
            _pad: 0,
            ra,
        };
        let site = match self.sites.get(&key, 0) {
            Ok(site) => Some(site),
            Err(_) => self.words.get(&(stack_id, ra)).copied(),
        };
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
            // Resolved only in the maps of the image the call was made in.
            (rec.start_code, rec.end_code) = (s.start_code, s.end_code);
            rec.nsp_words = s.nsp_words;
        }
        if ra == CALLER_UNKNOWN || ra == CALLER_SITES_FULL {
            // Only the innermost frame is known; its caller is said to be unknown.
            rec.nstack = rec.nstack.min(1);
            rec.nsp_words = 0;
            let mut frames = self.sym.frames(&rec, &Processes::default());
            frames.truncate(1);
            let why = match ra {
                CALLER_UNKNOWN => CALLER_NOT_KEPT.to_string(),
                _ => format!("caller not told apart: more than {MAX_SITES} call sites were seen"),
            };
            frames.push(Frame {
                unnamed: Some(why),
                ..Frame::default()
            });
            return frames;
        }
        // No parent links: unclosed reads the live process itself.
        self.sym.frames(&rec, &Processes::default())
    }
}

/// Copies of a torn entry read again, at most, before it is left out of this read.
const TORN_READS: usize = 3;

/// The live set's copies sorted by [`UnclosedLive::state`]; one still torn after
/// [`TORN_READS`] reads (the kernel rewrote it each time) is in neither.
#[derive(Debug, Default, PartialEq)]
struct Sorted {
    live: Vec<(u64, UnclosedLive)>,
    closed: Vec<u64>,
}

/// Sorts `all` (key, copy) by state, reading a torn copy again with `again`.
fn sort_live(all: Vec<(u64, UnclosedLive)>, again: impl Fn(u64) -> Option<UnclosedLive>) -> Sorted {
    let mut out = Sorted::default();
    for (key, mut copy) in all {
        let mut reads = 0;
        while copy.state() == LiveState::Torn && reads < TORN_READS {
            reads += 1;
            match again(key) {
                Some(c) => copy = c,
                None => break,
            }
        }
        match copy.state() {
            LiveState::Live => out.live.push((key, copy)),
            LiveState::Closed => out.closed.push(key),
            LiveState::Torn => {}
        }
    }
    out
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

/// The whole hash map at `fd` by BPF_MAP_LOOKUP_BATCH (Linux 5.6), `batch` entries per
/// command. `K` and `V` must be the map's key and value types.
fn lookup_batch<K: aya::Pod, V: aya::Pod>(fd: i32, batch: usize) -> std::io::Result<Vec<(K, V)>> {
    // SAFETY: Pod types are plain data, valid all-zero.
    let (mut keys, mut values) = unsafe {
        (
            vec![std::mem::zeroed::<K>(); batch],
            vec![std::mem::zeroed::<V>(); batch],
        )
    };
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
            count: batch as u32,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: the attr points at buffers of `batch` keys and values of the map's sizes,
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
        let n = (attr.count as usize).min(batch);
        out.extend((0..n).map(|i| (keys[i], values[i])));
        if err.is_some() {
            return Ok(out);
        }
        token_in = token_out;
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(time_ns: u64, stack_id: i32) -> UnclosedLive {
        let mut l = UnclosedLive {
            time_ns,
            stack_id,
            call: 3,
            cloexec: 1,
            execs: 2,
            ra: 0x5555_0000_0000 + stack_id as u64,
            ra_from: ra_from::WORD,
            check: 0,
        };
        l.check = l.check_of();
        l
    }

    #[test]
    fn a_copy_mixing_two_writes_of_an_entry_is_torn_and_read_again() {
        let (old, new) = (live(100, 7), live(200, 9));
        assert_eq!(old.state(), LiveState::Live);
        // The kernel's order: the fields, the check, the time. A copy taken at any point of
        // it, field by field in any order, is torn or one of the two (closed, if the old
        // entry was).
        let mut closed = old;
        closed.time_ns = 0;
        assert_eq!(closed.state(), LiveState::Closed);
        for (what, copy) in [
            ("new stack, old check", UnclosedLive { stack_id: 9, ..old }),
            (
                "new check, old fields",
                UnclosedLive {
                    check: new.check,
                    ..old
                },
            ),
            ("new time, old ra", UnclosedLive { ra: old.ra, ..new }),
            (
                "cloexec changed, old check",
                UnclosedLive { cloexec: 0, ..old },
            ),
            (
                "new time only",
                UnclosedLive {
                    time_ns: 200,
                    ..old
                },
            ),
        ] {
            assert_eq!(copy.state(), LiveState::Torn, "{what}");
        }
        let reads = std::cell::Cell::new(0);
        let torn = UnclosedLive { stack_id: 9, ..old };
        let sorted = sort_live(vec![(1 << 32 | 3, torn), (1 << 32 | 4, closed)], |key| {
            assert_eq!(key, 1 << 32 | 3);
            reads.set(reads.get() + 1);
            Some(if reads.get() < 2 { torn } else { new })
        });
        assert_eq!(sorted.live, vec![(1 << 32 | 3, new)]);
        assert_eq!(sorted.closed, vec![1 << 32 | 4]);
        assert_eq!(reads.get(), 2);
        // One that stays torn is left out of the read, not counted as a live fd.
        let reads = std::cell::Cell::new(0);
        let sorted = sort_live(vec![(5, torn)], |_| {
            reads.set(reads.get() + 1);
            Some(torn)
        });
        assert_eq!(sorted, Sorted::default());
        assert_eq!(reads.get(), TORN_READS);
    }
}
