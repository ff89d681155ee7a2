//! `trace --perfetto FILE`: the spawns as a Perfetto timeline (the protobuf trace format
//! Perfetto UI and trace_processor read), written as they come, from the same completed
//! spawns the reporter prints:
//! - one process track per traced process (pid, name, command line; its parent in a
//!   `ProcessTree` packet);
//! - per spawn a slice from fork (from the previous exec for a re-exec) to exec, or to the
//!   exit for an exec that never succeeded: its duration is the record's `window_ns`;
//! - the window's syscall counters as counter tracks under the process (`close_calls`, …):
//!   the count from fork, back to 0 at exec;
//! - each leaked fd an instant event at the exec, with the fd, its kind and target;
//! - the records of one exec chain (a process that exec'd again) linked by one flow.
//!
//! Timestamps are CLOCK_MONOTONIC ns (the kernel's `bpf_ktime_get_ns()`), said on every
//! packet (`timestamp_clock_id`) and in a clock snapshot with CLOCK_BOOTTIME at the start.

mod proto;

use std::{collections::HashMap, fs::File, io::Write, path::Path};

use anyhow::{Context as _, Result};
use prost::Message as _;

use crate::engine::{
    flags::SpawnFlags,
    spawn::{LeakedFd, Spawn},
};
use crate::output::text::{escape_bytes, escape_path};
use proto::{
    Clock, ClockSnapshot, CounterDescriptor, DebugAnnotation, Process, ProcessDescriptor,
    ProcessTree, Trace, TracePacket, TrackDescriptor, TrackEvent,
};

/// The one packet sequence of the file.
const SEQUENCE: u32 = 1;
/// Every event's category.
const CATEGORY: &str = "fdaudit";

/// A traced process as the timeline has it.
struct Track {
    uuid: u64,
    /// The flow that links its exec chain's slices.
    flow: u64,
    /// Its counter tracks, by counter name.
    counters: HashMap<String, u64>,
}

/// Writes the timeline to a file (or any writer, for the tests).
pub struct Perfetto<W: Write = std::io::BufWriter<File>> {
    out: W,
    /// Running processes by pid.
    tracks: HashMap<u32, Track>,
    /// The last uuid or flow id handed out.
    last_id: u64,
}

impl Perfetto {
    /// Creates FILE and writes the clock snapshot.
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path)
            .with_context(|| format!("failed to create {}", escape_path(path)))?;
        Perfetto::new(std::io::BufWriter::new(file))
            .with_context(|| format!("failed to write the Perfetto trace {}", escape_path(path)))
    }
}

impl<W: Write> Perfetto<W> {
    /// Starts the sequence: its first packet says the clocks (MONOTONIC, which every
    /// timestamp uses, and BOOTTIME now).
    pub fn new(out: W) -> std::io::Result<Self> {
        let mut p = Perfetto {
            out,
            tracks: HashMap::new(),
            last_id: 0,
        };
        let clock = |clock_id, timestamp| Clock {
            clock_id: Some(clock_id),
            timestamp: Some(timestamp),
        };
        let first = TracePacket {
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    clock(proto::CLOCK_MONOTONIC, clock_ns(libc::CLOCK_MONOTONIC)),
                    clock(proto::CLOCK_BOOTTIME, clock_ns(libc::CLOCK_BOOTTIME)),
                ],
                primary_trace_clock: Some(proto::CLOCK_MONOTONIC as i32),
            }),
            sequence_flags: Some(proto::SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: Some(true),
            ..packet(None)
        };
        p.write(first)?;
        Ok(p)
    }

    fn id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    fn write(&mut self, packet: TracePacket) -> std::io::Result<()> {
        let bytes = Trace {
            packet: vec![packet],
        }
        .encode_to_vec();
        self.out.write_all(&bytes)
    }

    fn event(&mut self, ts: u64, event: TrackEvent) -> std::io::Result<()> {
        self.write(TracePacket {
            track_event: Some(event),
            ..packet(Some(ts))
        })
    }

    /// A spawn: its process's track (new unless it continues an exec chain), its slice,
    /// counters and leaks; `inherited` says which leaked fds the traced command itself
    /// inherited.
    pub fn spawn(
        &mut self,
        s: &Spawn,
        inherited: &dyn Fn(&LeakedFd) -> bool,
    ) -> std::io::Result<()> {
        let continues = s.flags.contains(SpawnFlags::REEXEC) && self.tracks.contains_key(&s.pid);
        if !continues {
            self.new_track(s)?;
        }
        let (uuid, flow) = {
            let t = &self.tracks[&s.pid];
            (t.uuid, t.flow)
        };
        let end = s.exec_ns;
        let begin = end.saturating_sub(s.window_ns);
        self.event(
            begin,
            TrackEvent {
                name: Some(slice_name(s)),
                r#type: Some(proto::TYPE_SLICE_BEGIN),
                debug_annotations: spawn_annotations(s),
                flow_ids: vec![flow],
                ..track_event(uuid)
            },
        )?;
        self.event(
            end,
            TrackEvent {
                r#type: Some(proto::TYPE_SLICE_END),
                ..track_event(uuid)
            },
        )?;
        if s.window_ns > 0 {
            self.counters(s, begin, end)?;
        }
        for f in &s.leaked_fds {
            self.event(
                end,
                TrackEvent {
                    name: Some(format!("leaked fd {}: {}", f.fd, f.target.escaped())),
                    r#type: Some(proto::TYPE_INSTANT),
                    debug_annotations: leak_annotations(f, inherited(f)),
                    ..track_event(uuid)
                },
            )?;
        }
        Ok(())
    }

    /// A new process track (and the process's parent, for the process tree).
    fn new_track(&mut self, s: &Spawn) -> std::io::Result<()> {
        let uuid = self.id();
        let flow = self.id();
        let cmdline: Vec<String> = s.argv.iter().map(|a| escape_bytes(a)).collect();
        let name = s.exec_path.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
        self.write(TracePacket {
            process_tree: Some(ProcessTree {
                processes: vec![Process {
                    pid: Some(s.pid as i32),
                    ppid: Some(s.parent_pid as i32),
                    cmdline: cmdline.clone(),
                }],
            }),
            ..packet(Some(s.exec_ns.saturating_sub(s.window_ns)))
        })?;
        self.write(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(uuid),
                process: Some(ProcessDescriptor {
                    pid: Some(s.pid as i32),
                    cmdline,
                    process_name: Some(escape_bytes(name)),
                }),
                ..Default::default()
            }),
            ..packet(None)
        })?;
        let track = Track {
            uuid,
            flow,
            counters: HashMap::new(),
        };
        self.tracks.insert(s.pid, track);
        Ok(())
    }

    /// Each counter the window counted: its value from `begin`, 0 again at `end`.
    fn counters(&mut self, s: &Spawn, begin: u64, end: u64) -> std::io::Result<()> {
        for (name, value) in counter_values(s) {
            let uuid = self.counter_track(s.pid, &name)?;
            for (ts, v) in [(begin, value), (end, 0)] {
                self.event(
                    ts,
                    TrackEvent {
                        r#type: Some(proto::TYPE_COUNTER),
                        counter_value: Some(v),
                        ..track_event(uuid)
                    },
                )?;
            }
        }
        Ok(())
    }

    /// The process's counter track of this name, described the first time.
    fn counter_track(&mut self, pid: u32, name: &str) -> std::io::Result<u64> {
        if let Some(&uuid) = self.tracks[&pid].counters.get(name) {
            return Ok(uuid);
        }
        let uuid = self.id();
        let parent = self.tracks[&pid].uuid;
        self.write(TracePacket {
            track_descriptor: Some(TrackDescriptor {
                uuid: Some(uuid),
                parent_uuid: Some(parent),
                name: Some(name.to_owned()),
                counter: Some(CounterDescriptor {
                    unit: Some(proto::UNIT_COUNT),
                    unit_name: Some("calls".into()),
                }),
                ..Default::default()
            }),
            ..packet(None)
        })?;
        if let Some(t) = self.tracks.get_mut(&pid) {
            t.counters.insert(name.to_owned(), uuid);
        }
        Ok(uuid)
    }

    /// A traced process exited: its pid's next spawn gets a new track.
    pub fn exit(&mut self, pid: u32) {
        self.tracks.remove(&pid);
    }

    /// Flushes the file.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A packet of the sequence, at `ts` on CLOCK_MONOTONIC.
fn packet(ts: Option<u64>) -> TracePacket {
    TracePacket {
        timestamp: ts,
        timestamp_clock_id: ts.map(|_| proto::CLOCK_MONOTONIC),
        trusted_packet_sequence_id: Some(SEQUENCE),
        ..Default::default()
    }
}

fn track_event(track: u64) -> TrackEvent {
    TrackEvent {
        categories: vec![CATEGORY.into()],
        track_uuid: Some(track),
        ..Default::default()
    }
}

/// "fork → exec true", "exec → exec true" (a re-exec), "fork → exit (exec failed: ENOENT)".
fn slice_name(s: &Spawn) -> String {
    let from = if s.flags.contains(SpawnFlags::REEXEC) {
        "exec"
    } else {
        "fork"
    };
    if !s.exec_ok {
        let why = s.exec_error.unwrap_or("?");
        return format!("{from} → exit (exec failed: {why})");
    }
    if s.flags.contains(SpawnFlags::EXEC_MISSED) {
        return format!("{from} → exec (missed)");
    }
    let name = s.exec_path.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
    format!("{from} → exec {}", escape_bytes(name))
}

/// The window's non-zero counters, by their JSON keys in name order.
fn counter_values(s: &Spawn) -> Vec<(String, i64)> {
    let mut values: Vec<(String, i64)> = (s.calls.fields().into_iter())
        .filter_map(|(k, v)| Some((k.to_owned(), i64::try_from(v).ok()?)))
        .filter(|&(_, v)| v > 0)
        .collect();
    values.sort_unstable();
    values
}

fn string(name: &str, v: String) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        string_value: Some(v),
        ..Default::default()
    }
}

fn uint(name: &str, v: u64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        uint_value: Some(v),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        int_value: Some(v),
        ..Default::default()
    }
}

fn boolean(name: &str, v: bool) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.into()),
        bool_value: Some(v),
        ..Default::default()
    }
}

/// What the slice's details show: the spawn record's main fields, named as in JSON.
fn spawn_annotations(s: &Spawn) -> Vec<DebugAnnotation> {
    let mut a = vec![
        string("exec_path", s.exec_path.escaped()),
        uint("parent_pid", s.parent_pid.into()),
        string("parent_comm", s.parent_comm.escaped()),
        boolean("exec_ok", s.exec_ok),
        string("strategy", s.strategy.as_str().into()),
        uint("window_ns", s.window_ns),
        uint("window_corrected_ns", s.window_corrected_ns),
        uint("leaked_fd_count", s.leaked_count.into()),
    ];
    if let Some(e) = s.exec_error {
        a.push(string("exec_error", e.into()));
    }
    if let Some(b) = s.close_loop_bound {
        a.push(uint("close_loop_bound", b.into()));
    }
    let flags: Vec<&str> = s.flags.names().collect();
    if !flags.is_empty() {
        a.push(string("flags", flags.join(",")));
    }
    if let Some(c) = s.identity.container_label() {
        a.push(string("container", c));
    }
    if let Some(b) = &s.boundary {
        a.push(string("boundary", b.to_string()));
    }
    a.extend(counter_values(s).into_iter().map(|(k, v)| int(&k, v)));
    a
}

fn leak_annotations(f: &LeakedFd, inherited: bool) -> Vec<DebugAnnotation> {
    let mut a = vec![
        uint("fd", f.fd.into()),
        string("kind", f.kind.as_str().into()),
        string("target", f.target.escaped()),
        string("access", f.access.into()),
        uint("ino", f.ino),
        boolean("inherited", inherited),
        boolean("critical", f.critical),
    ];
    if let Some(fam) = f.family {
        a.push(string("family", fam.into()));
    }
    if let Some(p) = f.protocol {
        a.push(string("protocol", p.into()));
    }
    if let Some(o) = &f.origin {
        a.push(string("origin", o.label().into()));
    }
    a
}

/// A clock's time now, ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is valid storage.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests;
