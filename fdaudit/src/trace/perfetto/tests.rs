//! The timeline of fixed spawns, read back with the same prost messages (the root test
//! `tests/tests/perfetto.rs` reads a real one with upstream's generated Python classes).

use prost::Message as _;

use super::proto::{self, Trace, TrackEvent};
use super::*;
use crate::fdkind::FdKind;
use crate::output::text::Lossless;
use crate::trace::report::tests::spawn;

fn leaked(fd: u32, target: &str) -> LeakedFd {
    LeakedFd {
        fd,
        kind: FdKind::Regular,
        target: Lossless::new(target.as_bytes().to_vec()),
        access: "r",
        family: None,
        protocol: None,
        ino: 42,
        dev: 0,
        origin: None,
        critical: false,
        deleted: false,
        partial: false,
    }
}

fn timeline(spawns: &[(Spawn, bool)]) -> Trace {
    let mut p = Perfetto::new(Vec::new()).unwrap();
    for (s, exited) in spawns {
        p.spawn(s, &|_| false).unwrap();
        if *exited {
            p.exit(s.pid);
        }
    }
    Trace::decode(p.finish().unwrap().as_slice()).unwrap()
}

/// (ts, event) of every track event.
fn events(t: &Trace) -> Vec<(u64, &TrackEvent)> {
    t.packet
        .iter()
        .filter_map(|p| Some((p.timestamp?, p.track_event.as_ref()?)))
        .collect()
}

fn annotation<'a>(e: &'a TrackEvent, name: &str) -> &'a proto::DebugAnnotation {
    let found = e
        .debug_annotations
        .iter()
        .find(|a| a.name.as_deref() == Some(name));
    found.unwrap_or_else(|| panic!("no {name} in {e:?}"))
}

#[test]
fn a_spawn_is_a_slice_from_fork_to_exec_with_counters_and_leaks() {
    let mut s = spawn("sh", "/bin/true", 3, 1_000_000, 1);
    s.exec_ns = 5_000_000;
    s.leaked_fds = vec![leaked(7, "/etc/secret")];
    let t = timeline(&[(s, false)]);
    let first = &t.packet[0];
    let clocks = &first
        .clock_snapshot
        .as_ref()
        .expect("clock snapshot first")
        .clocks;
    let ids: Vec<_> = clocks.iter().filter_map(|c| c.clock_id).collect();
    assert_eq!(ids, [proto::CLOCK_MONOTONIC, proto::CLOCK_BOOTTIME]);
    assert!(t
        .packet
        .iter()
        .all(|p| p.trusted_packet_sequence_id == Some(SEQUENCE)));
    assert!(t
        .packet
        .iter()
        .all(|p| p.timestamp.is_none() || p.timestamp_clock_id == Some(proto::CLOCK_MONOTONIC)));

    let tracks: Vec<_> = t
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref())
        .collect();
    let process = tracks
        .iter()
        .find(|d| d.process.is_some())
        .expect("a process track");
    let pd = process.process.as_ref().unwrap();
    assert_eq!(
        (pd.pid, pd.process_name.as_deref()),
        (Some(2), Some("true"))
    );
    assert_eq!(pd.cmdline, ["/bin/true", "-x"]);

    let ev = events(&t);
    let on = |uuid| ev.iter().filter(move |(_, e)| e.track_uuid == uuid);
    let slice: Vec<_> = on(process.uuid)
        .filter(|(_, e)| e.r#type != Some(proto::TYPE_INSTANT))
        .collect();
    assert_eq!(slice.len(), 2, "{slice:?}");
    let (begin, b) = *slice[0];
    let (end, e) = *slice[1];
    assert_eq!(
        (b.r#type, e.r#type),
        (Some(proto::TYPE_SLICE_BEGIN), Some(proto::TYPE_SLICE_END))
    );
    assert_eq!((begin, end), (4_000_000, 5_000_000), "fork to exec");
    assert_eq!(b.name.as_deref(), Some("fork → exec true"));
    assert_eq!(annotation(b, "window_ns").uint_value, Some(1_000_000));
    assert_eq!(annotation(b, "close_calls").int_value, Some(3));

    let closes = tracks
        .iter()
        .find(|d| d.name.as_deref() == Some("close_calls"))
        .expect("close_calls counter track");
    assert_eq!(closes.parent_uuid, process.uuid);
    let values: Vec<_> = on(closes.uuid)
        .map(|(ts, e)| (*ts, e.counter_value))
        .collect();
    assert_eq!(values, [(4_000_000, Some(3)), (5_000_000, Some(0))]);

    let leaks: Vec<_> = on(process.uuid)
        .filter(|(_, e)| e.r#type == Some(proto::TYPE_INSTANT))
        .collect();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert_eq!(leaks[0].0, 5_000_000, "at the exec");
    assert_eq!(leaks[0].1.name.as_deref(), Some("leaked fd 7: /etc/secret"));
    assert_eq!(annotation(leaks[0].1, "fd").uint_value, Some(7));
    assert_eq!(
        annotation(leaks[0].1, "kind").string_value.as_deref(),
        Some("regular")
    );
}

#[test]
fn an_exec_chain_is_one_track_and_one_flow() {
    let mut helper = spawn("sh", "/usr/lib/helper", 0, 1000, 1);
    helper.exec_ns = 10_000;
    let mut last = spawn("sh", "/bin/true", 0, 500, 0);
    last.exec_ns = 10_500;
    last.flags = SpawnFlags::REEXEC;
    // The same pid after an exit: a new process.
    let mut again = spawn("sh", "/bin/true", 0, 700, 0);
    again.exec_ns = 20_000;
    let t = timeline(&[(helper, false), (last, true), (again, false)]);
    let processes = t
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref()?.process.as_ref())
        .count();
    assert_eq!(processes, 2, "the chain's two records share a track");
    let begins: Vec<_> = events(&t)
        .into_iter()
        .filter(|(_, e)| e.r#type == Some(proto::TYPE_SLICE_BEGIN))
        .map(|(ts, e)| {
            (
                ts,
                e.track_uuid,
                e.flow_ids.clone(),
                e.name.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(begins.len(), 3, "{begins:?}");
    assert_eq!(
        begins[1].0, 10_000,
        "a re-exec's slice starts at the previous exec"
    );
    assert_eq!(begins[1].3, "exec → exec true");
    assert_eq!(begins[0].1, begins[1].1);
    assert_eq!(begins[0].2, begins[1].2, "one flow links the chain");
    assert_eq!(begins[0].2.len(), 1);
    assert_ne!(begins[2].1, begins[0].1);
    assert_ne!(begins[2].2, begins[0].2, "a new process, a new flow");
}

#[test]
fn a_failed_exec_ends_at_the_exit_and_says_why() {
    let mut s = spawn("sh", "", 0, 2000, 0);
    s.exec_ok = false;
    s.exec_error = Some("ENOENT");
    assert_eq!(slice_name(&s), "fork → exit (exec failed: ENOENT)");
}
