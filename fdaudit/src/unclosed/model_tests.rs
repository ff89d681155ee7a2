use fdaudit_common::UnclosedLive;

use super::*;

pub(in crate::unclosed) fn e(
    pid: u32,
    fd: i32,
    stack_id: i32,
    call: OriginCall,
    time_ns: u64,
) -> LiveEntry {
    LiveEntry {
        pid,
        fd,
        live: UnclosedLive {
            time_ns,
            stack_id,
            call: call as u32,
            cloexec: 0,
            execs: 0,
            ..Default::default()
        },
    }
}

fn table(fds: &[i32]) -> ProcTable {
    ProcTable {
        comm: "svc".into(),
        fds: fds.iter().copied().collect(),
        nofile_soft: Some(64),
        execs: 0,
    }
}

#[test]
fn an_fd_is_outstanding_before_tracing_or_not_seen_by_the_table() {
    let entries = [
        e(10, 3, 1, OriginCall::Openat, 5),
        // Closed by close_range (no close() seen): gone from the table.
        e(10, 9, 1, OriginCall::Openat, 6),
    ];
    let tables = BTreeMap::from([(10, table(&[0, 1, 2, 3, 4]))]);
    let at_attach = HashMap::from([(10, HashSet::from([0, 1, 2]))]);
    let r = reconcile(&entries, &tables, &at_attach);
    assert_eq!(r.outstanding.len(), 1, "only fd 3 is outstanding: {r:?}");
    assert_eq!(r.outstanding[0].fd, 3);
    assert_eq!(r.forget, vec![(10, 9)], "the closed fd's entry is dropped");
    let p = &r.procs[0];
    assert_eq!(
        (p.open, p.outstanding, p.before_tracing, p.not_seen),
        (5, 1, 3, 1),
        "fds 0-2 before tracing, fd 4 not seen: {p:?}"
    );
    assert_eq!(p.headroom(), Some(59));
}

#[test]
fn a_close_on_exec_entry_older_than_the_last_exec_is_stale() {
    let mut old = e(10, 3, 1, OriginCall::Openat, 5);
    old.live.cloexec = 1;
    let mut kept = e(10, 4, 1, OriginCall::Openat, 5);
    kept.live.cloexec = 0;
    let mut t = table(&[3, 4]);
    t.execs = 1;
    let r = reconcile(&[old, kept], &BTreeMap::from([(10, t)]), &HashMap::new());
    assert_eq!(r.outstanding.len(), 1, "{r:?}");
    assert_eq!(
        r.outstanding[0].fd, 4,
        "the inheritable fd survived the exec"
    );
    assert_eq!(r.forget, vec![(10, 3)]);
    assert_eq!(r.procs[0].not_seen, 1, "fd 3 is another file now, unseen");
}

#[test]
fn an_exited_process_reports_its_entries_and_drops_them() {
    let entries = [
        e(11, 5, 2, OriginCall::Socket, 1),
        e(11, 6, 2, OriginCall::Socket, 2),
    ];
    let r = reconcile(&entries, &BTreeMap::new(), &HashMap::new());
    assert_eq!(r.outstanding.len(), 2);
    assert!(r.outstanding.iter().all(|o| o.exited));
    assert_eq!(r.forget.len(), 2);
    assert!(r.procs[0].exited && r.procs[0].outstanding == 2);
}

#[test]
fn an_exited_process_s_stdio_is_not_what_it_held() {
    // A command substitution's subshell: its stdout dup2'd onto the pipe, then exit; and
    // one that also kept fd 7.
    let entries = [
        e(12, 1, 3, OriginCall::Dup2, 1),
        e(13, 1, 3, OriginCall::Dup2, 2),
        e(13, 7, 4, OriginCall::Open, 3),
    ];
    let r = reconcile(&entries, &BTreeMap::new(), &HashMap::new());
    assert_eq!(r.outstanding.len(), 1, "{:?}", r.outstanding);
    assert_eq!((r.outstanding[0].pid, r.outstanding[0].fd), (13, 7));
    assert_eq!(
        r.procs.len(),
        1,
        "no row for a process that held nothing of its own"
    );
    assert_eq!((r.procs[0].pid, r.procs[0].outstanding), (13, 1));
    assert_eq!(
        r.forget.len(),
        3,
        "every entry of a gone process is dropped"
    );
}

#[test]
fn groups_are_worst_first_with_calls_samples_and_age() {
    let out: Vec<Outstanding> = [
        e(1, 3, 7, OriginCall::Openat, 100),
        e(1, 4, 7, OriginCall::Openat, 200),
        e(1, 5, 7, OriginCall::Socket, 300),
        e(1, 6, 8, OriginCall::Pipe2, 50),
        e(1, 7, 9, OriginCall::Dup, 990),
    ]
    .iter()
    .map(|e| Outstanding {
        pid: e.pid,
        fd: e.fd,
        call: OriginCall::from_u32(e.live.call),
        stack_id: e.live.stack_id,
        time_ns: e.live.time_ns,
        exited: false,
    })
    .collect();
    let g = group(&out, 1000, 0);
    assert_eq!(
        g.iter().map(|g| g.stack_id).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    assert_eq!(g[0].count, 3);
    assert_eq!(g[0].calls, BTreeMap::from([("openat", 2), ("socket", 1)]));
    assert_eq!(g[0].samples, vec![(1, 5), (1, 4), (1, 3)], "newest first");
    assert_eq!(g[0].oldest_ns, 100);
    // --min-age hides the fds younger than it.
    let g = group(&out, 1000, 750);
    assert_eq!(g.len(), 2, "only fds made at or before 250: {g:?}");
    assert_eq!(g[0].count, 2);
}

#[test]
fn folded_stacks_are_outermost_first_with_the_count() {
    use crate::engine::origin::Frame;
    let frame = |s: Option<&str>, addr| Frame {
        addr,
        symbol: s.map(str::to_owned),
        ..Frame::default()
    };
    let stacks = vec![
        (
            vec![
                frame(Some("__open+0x51"), 1),
                frame(Some("leak one;x"), 2),
                frame(None, 0xabc),
            ],
            30,
        ),
        (Vec::new(), 2),
    ];
    assert_eq!(
        crate::unclosed::report::folded(&stacks),
        "0xabc;leak_one_x;__open+0x51 30\n[no user stack] 2\n"
    );
}
