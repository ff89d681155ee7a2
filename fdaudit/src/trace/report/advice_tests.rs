//! The advice table on fixed groups: which remedy, and the projection's arithmetic.

use super::*;
use crate::output::table::Term;
use crate::runtime::{identify, Libc};
use crate::trace::chains::MadeBy;
use crate::trace::report::{tests::spawn, Collector};

fn runtime(name: &'static str, version: Option<&str>, glibc: Option<&str>) -> Runtime {
    let mut rt = identify(Some(b"/x"), &[], &mut NoFiles);
    rt.name = name;
    rt.version = version.map(str::to_string);
    rt.libc = glibc.map(|v| Libc {
        name: "glibc",
        version: Some(v.to_string()),
        path: String::new(),
    });
    rt
}

struct NoFiles;
impl crate::runtime::rules::Images for NoFiles {
    fn find(&mut self, _: crate::runtime::rules::Which<'_>, _: &str, _: &[u8]) -> Option<String> {
        None
    }
    fn go_version(&mut self) -> Option<String> {
        None
    }
    fn text_file(&mut self, _: &[u8]) -> Option<String> {
        None
    }
}

/// One group of `n` spawns like `s`.
fn group(
    rt: Runtime,
    nofile: Option<(u64, u64)>,
    close: u32,
    window_ns: u64,
    leaked: u32,
) -> Group {
    let mut c = Collector::default();
    let mut s = spawn("python3", "/bin/true", close, window_ns, leaked);
    s.runtime = Some(rt);
    s.parent_nofile = nofile.map(|(soft, hard)| Nofile { soft, hard });
    c.add(&s);
    c.groups().remove(0)
}

fn ids(a: &Advice) -> Vec<&str> {
    a.remedies.iter().map(|r| r.id.as_str()).collect()
}

#[test]
fn the_table_parses_and_every_kind_has_a_fallback() {
    let t = table();
    for kind in ["sweep", "limit", "leak"] {
        let last = t.iter().rfind(|e| e.kind == kind).expect(kind);
        assert!(
            last.runtime.is_none() && last.libc.is_none(),
            "{kind}: {}",
            last.id
        );
    }
    assert!(t.iter().all(|e| !e.source.is_empty() && !e.fix.is_empty()));
}

#[test]
fn a_c_close_loop_on_new_glibc_gets_close_range_and_the_soft_limit() {
    // A C program named python3: its runtime is glibc, not CPython.
    let g = group(
        runtime("glibc", Some("2.36"), Some("2.36")),
        Some((20_000, 1_048_576)),
        19_997,
        5_000_000,
        0,
    );
    let a = advise(&[g], 200.0);
    assert_eq!(a.len(), 1);
    assert_eq!(ids(&a[0]), ["glibc-close-range", "soft-limit"]);
    assert!(
        a[0].remedies[0].text.contains("closefrom(3)"),
        "{:?}",
        a[0].remedies
    );
    assert!(
        a[0].remedies[1].text.contains("LimitNOFILE=1024:1048576"),
        "{:?}",
        a[0].remedies
    );
    let p = a[0].projection.as_ref().unwrap();
    assert_eq!((p.walked_fds, p.per_fd_from), (20_000, "close_cost"));
    assert_eq!(p.rest_ns, 1_000_000, "5 ms less 20000 x 200 ns");
    assert_eq!(p.at_soft_ns, Some(5_000_000));
    assert_eq!(p.at_hard_ns, Some(1_000_000 + 209_715_200));
    let line = projection_line(&a[0]).unwrap();
    assert_eq!(
        line,
        "close-loop to 20000: the walk costs ~4.00 ms per spawn here (200 ns per fd, measured close(); of a ~5.00 ms window); at the hard limit 1048576: ~210 ms; close_range saves ~4.00 ms per spawn"
    );
    let text = advice_text(&a, Term::plain());
    assert!(
        text.starts_with(&format!(
            "\nwhat to change:\npython3 (glibc 2.36) -> /bin/true, {line}\n  close_range: "
        )),
        "{text}"
    );
}

#[test]
fn remedies_follow_the_runtime_and_its_version() {
    let old_py = group(
        runtime("cpython", Some("3.9"), Some("2.31")),
        None,
        1021,
        1_000_000,
        0,
    );
    let new_py_leak = group(
        runtime("cpython", Some("3.11"), Some("2.36")),
        None,
        0,
        1_000,
        1,
    );
    let old_glibc = group(
        runtime("glibc", Some("2.31"), Some("2.31")),
        None,
        1021,
        1_000_000,
        0,
    );
    let unknown = group(Runtime::unknown(None, "gone"), None, 1021, 1_000_000, 0);
    let tidy = group(runtime("go", Some("1.19.8"), None), None, 0, 1_000, 0);
    let a = advise(&[old_py, new_py_leak, old_glibc, unknown, tidy], 0.0);
    assert_eq!(
        a.len(),
        4,
        "a group that neither leaks nor sweeps gets none"
    );
    // Their parents were gone (no NOFILE read): the walk stands for the soft limit.
    assert_eq!(ids(&a[0]), ["cpython-old-close-fds", "soft-limit"]);
    assert!(
        a[0].remedies[1]
            .text
            .contains("LimitNOFILE=1024:1024 in its systemd unit"),
        "{:?}",
        a[0]
    );
    assert_eq!(ids(&a[1]), ["cpython-inheritable"]);
    assert!(a[1].remedies[0]
        .text
        .contains("trace --origin names that call"));
    assert_eq!(ids(&a[2]), ["glibc-old", "soft-limit"]);
    assert!(a[2].remedies[0]
        .text
        .contains("glibc 2.31 has no close_range"));
    assert_eq!(ids(&a[3]), ["any-close-range", "soft-limit"]);
    // No measured close(): the per-fd cost is the group's own window over its walk.
    let p = a[0].projection.as_ref().unwrap();
    assert_eq!((p.per_fd_from, p.walked_fds), ("window", 1024));
    assert_eq!(
        (p.nofile_soft, p.nofile_hard, p.nofile_from),
        (Some(1024), None, Some("walk"))
    );
    assert_eq!((p.at_soft_ns, p.at_hard_ns), (Some(1_000_000), None));
}

#[test]
fn a_leak_with_an_origin_names_the_frame() {
    let mut g = group(
        runtime("glibc", Some("2.36"), Some("2.36")),
        None,
        0,
        1_000,
        1,
    );
    g.spawner.origin = Some("openat in main at fixture.c:12".into());
    let a = advise(&[g], 200.0);
    assert_eq!(ids(&a[0]), ["posix-spawn-closefrom"]);
    assert!(
        a[0].remedies[0]
            .text
            .contains("(openat in main at fixture.c:12)"),
        "{:?}",
        a[0].remedies
    );
    let json = serde_json::to_value(&a[0]).unwrap();
    assert_eq!(json["runtime"]["name"], "glibc");
    assert_eq!(
        json["remedies"][0]["fix"],
        "O_CLOEXEC / posix_spawn_file_actions_addclosefrom_np"
    );
    assert!(json["projection"].is_null());
}

#[test]
fn a_pass_through_is_not_told_to_change_what_it_did_not_make() {
    let leak = |made_by: Option<MadeBy>| {
        let mut g = group(runtime("dash", None, Some("2.36")), None, 0, 1_000, 1);
        g.spawner.origin = Some("openat in load_key at svc.c:21".into());
        g.spawner.made_by = made_by;
        advise(&[g], 200.0).remove(0)
    };
    // The shell made the fd itself (a redirection): the shell's remedy.
    assert_eq!(ids(&leak(None)), ["dash-redirection"]);
    // A service made it and the shell only passed it on: the maker's call is named.
    let a = leak(Some(MadeBy {
        pid: 7,
        comm: "svc".into(),
        runtime: None,
    }));
    assert_eq!(ids(&a), ["any-cloexec"]);
    assert!(
        a.remedies[0].text.contains(
            "(openat in load_key at svc.c:21, by svc[7]; python3 passed it on and did not make it)"
        ),
        "{:?}",
        a.remedies
    );
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(
        json["made_by"],
        serde_json::json!({"pid": 7, "comm": "svc"})
    );
    assert!(serde_json::to_value(leak(None))
        .unwrap()
        .get("made_by")
        .is_none());
}

#[test]
fn a_remedy_already_given_is_named_not_repeated() {
    let rt = || runtime("glibc", Some("2.36"), Some("2.36"));
    let groups = [
        group(rt(), Some((20_000, 20_000)), 19_997, 5_000_000, 0),
        group(rt(), Some((20_000, 20_000)), 19_997, 6_000_000, 0),
    ];
    let text = advice_text(&advise(&groups, 200.0), Term::plain());
    assert_eq!(text.matches("closefrom(3)").count(), 1, "{text}");
    assert!(
        text.ends_with("\n  as above: close_range; LimitNOFILE= / ulimit -Sn\n"),
        "{text}"
    );
}

#[test]
fn the_limits_read_at_exec_come_before_the_parents_and_the_walk() {
    let g = |exec: Option<(u64, u64)>, parent: Option<(u64, u64)>| {
        let mut c = Collector::default();
        let mut s = spawn("python3", "/bin/true", 1021, 1_000_000, 0);
        s.runtime = Some(runtime("glibc", Some("2.31"), Some("2.31")));
        s.nofile = exec.map(|(soft, hard)| Nofile { soft, hard });
        s.parent_nofile = parent.map(|(soft, hard)| Nofile { soft, hard });
        c.add(&s);
        c.groups().remove(0)
    };
    let from = |g: Group| {
        let a = advise(&[g], 0.0);
        let p = a[0].projection.clone().expect("a sweep has a projection");
        (p.nofile_soft, p.nofile_hard, p.nofile_from)
    };
    // The child's own limits at exec win over a parent read later (which may differ).
    assert_eq!(
        from(g(Some((1024, 4096)), Some((2048, 8192)))),
        (Some(1024), Some(4096), Some("exec"))
    );
    assert_eq!(
        from(g(None, Some((2048, 8192)))),
        (Some(2048), Some(8192), Some("parent"))
    );
    assert_eq!(from(g(None, None)), (Some(1024), None, Some("walk")));
}
