//! JIT frames (issue #38 item 5) in `trace --origin` and against hostile perf maps: a Node
//! `child_process.spawn` that passes a listening socket as the child's fd 3 names the
//! JavaScript function that spawned it; a Java socket left without close-on-exec before
//! `ProcessBuilder.start` names the JIT-compiled method that made it (at jspawnhelper's
//! exec); and a service run as nobody whose perf map nobody replaced by a symlink to a
//! root-only file, a FIFO, a 10 GiB sparse file, garbage or another user's file: fdaudit
//! reads none of it (or a bounded part), never hangs, and each JIT frame says why it has no
//! name. Root only (eBPF); java/javac/jcmd, node, setpriv.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::jit_frames::{wait_for_stack, NODE};
use crate::unclosed::{attach_with, stop, Service};
use crate::unclosed_runtimes::{run_ok, Dir};
use fdaudit_tests::{
    assert_success, guard, of_type, records, temp_path, trace_to_file, StopOnDrop,
};
use serde_json::Value;

/// Every leaked fd of every spawn in a trace's records, with its spawn.
pub(crate) fn leaked(all: &[Value]) -> Vec<(&Value, &Value)> {
    of_type(all, "spawn")
        .into_iter()
        .flat_map(|s| {
            s["leaked_fds"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |l| (s, l))
        })
        .collect()
}

/// The origin frame of `l` whose symbol starts with `prefix` and holds `name`.
pub(crate) fn origin_frame<'a>(l: &'a Value, prefix: &str, name: &str) -> Option<&'a Value> {
    l["origin"]["stack"].as_array()?.iter().find(|f| {
        f["symbol"]
            .as_str()
            .is_some_and(|s| s.starts_with(prefix) && s.contains(name))
    })
}

/// Spawns three children with a listening socket as fd 3 from `leakOne`, optimized by
/// V8 before the third (`%OptimizeFunctionOnNextCall`); waits before exiting, so that
/// fdaudit reads its maps while it lives.
const NODE_SPAWN: &str = r#"const net = require('net');
const cp = require('child_process');
function leakOne(s) {
  return cp.spawn('/bin/true', [], { stdio: ['ignore', 'ignore', 'ignore', s._handle.fd] });
}
const s = net.createServer();
s.listen(0);
%PrepareFunctionForOptimization(leakOne);
let n = 0;
function next() {
  leakOne(s).on('exit', () => {
    n += 1;
    if (n === 2) %OptimizeFunctionOnNextCall(leakOne);
    if (n < 3) next();
    else setTimeout(() => s.close(), 1500);
  });
}
next();
"#;

#[test]
#[ignore = "needs root"]
fn a_node_spawn_that_passes_a_socket_names_the_javascript_function() {
    let _g = guard();
    let dir = Dir::new("jit-node-spawn");
    let src = dir.write("spawn.js", NODE_SPAWN);
    let (out, text) = trace_to_file("jit-node-spawn.jsonl", |c| {
        // V8's log (with --perf-basic-prof) goes to the directory.
        c.current_dir(&dir.0)
            .args(["--origin", "--", "node"])
            .args([
                "--perf-basic-prof",
                "--interpreted-frames-native-stack",
                "--allow-natives-syntax",
            ])
            .arg(&src);
    });
    assert_success(&out);
    let all = records(&text);
    let want = format!("leakOne {}:", src.display());
    let fd3: Vec<&Value> = leaked(&all)
        .into_iter()
        .filter(|(s, l)| s["exec_path"] == "/bin/true" && l["fd"] == 3)
        .map(|(_, l)| l)
        .collect();
    for s in of_type(&all, "spawn") {
        let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", s["parent_pid"]));
    }
    assert_eq!(fd3.len(), 3, "three spawns leak fd 3: {all:#?}");
    let mut jit = 0;
    for l in &fd3 {
        let f = origin_frame(l, "JS:", &want)
            .unwrap_or_else(|| panic!("the origin names no {want}: {:#}", l["origin"]));
        assert_eq!(f["found_by"], "jit-frame-pointer", "{f}");
        jit += usize::from(f["code"] == "jit");
    }
    assert!(jit >= 1, "the optimized leakOne is named as jit: {fd3:#?}");
}

/// Warms `leakOne` (a server socket, no close-on-exec: the JDK sets none) until C2
/// compiles it, says its pid in DIR/ready and waits for DIR/go, then leaks one socket and
/// starts a child (posix_spawn of jspawnhelper, which inherits it).
const JAVA_SPAWN: &str = r#"import java.io.IOException;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.*;
import java.util.*;

public class Spawn {
    static final List<ServerSocketChannel> KEPT = new ArrayList<>();

    static void leakOne() throws IOException {
        KEPT.add(ServerSocketChannel.open());
    }

    public static void main(String[] args) throws Exception {
        // Every class the wait loads, loaded before the warming: one loaded after it can
        // void what C2 assumed of the class hierarchy, and leakOne runs interpreted again.
        Path dir = Paths.get(args[0]);
        Files.writeString(dir.resolve("warming"), "");
        Files.exists(dir.resolve("go"));
        Thread.sleep(1);
        for (int i = 0; i < 20000; i++) {
            leakOne();
            if (KEPT.size() > 100) {
                for (ServerSocketChannel c : KEPT) c.close();
                KEPT.clear();
            }
        }
        for (ServerSocketChannel c : KEPT) c.close();
        KEPT.clear();
        Files.writeString(dir.resolve("ready"), Long.toString(ProcessHandle.current().pid()));
        while (!Files.exists(dir.resolve("go"))) Thread.sleep(20);
        leakOne();
        new ProcessBuilder("/bin/true").start().waitFor();
        // The warming made 20,000 origin records: the JVM stays while fdaudit, behind on
        // a loaded machine, may still read its maps for them (a process gone by then is
        // another test's: origin::the_caller_of_a_libc_wrapper_...).
        Thread.sleep(3000);
    }
}
"#;

/// Compiles `class` from `src` in a new directory `name` and runs it (with the directory as
/// its argument) under `fdaudit trace --origin --json -o OUT`, with the flags docs/advice.md
/// gives for Java frames and its `leakOne` kept from inlining: the directory, OUT and
/// fdaudit.
pub(crate) fn trace_java(name: &str, class: &str, src: &str) -> (Dir, PathBuf, StopOnDrop) {
    let dir = Dir::new(name);
    let file = dir.write(&format!("{class}.java"), src);
    run_ok(
        Command::new("javac").arg("-d").arg(&dir.0).arg(&file),
        "javac (Java 17)",
    );
    let out = temp_path(&format!("{name}.jsonl"));
    let tracer = Command::new(fdaudit_tests::fdaudit())
        .args(["trace", "--origin", "--json", "-o"])
        .arg(&out)
        .args(["--", "java", "-XX:+UnlockDiagnosticVMOptions"])
        .arg("-XX:CompileCommand=quiet")
        .arg(format!("-XX:CompileCommand=dontinline,{class}::leakOne"))
        .args(["-XX:+PreserveFramePointer", "-cp"])
        .arg(&dir.0)
        .arg(class)
        .arg(&dir.0)
        .stdin(Stdio::null())
        .spawn()
        .expect("run fdaudit trace");
    (dir, out, StopOnDrop(tracer))
}

#[test]
#[ignore = "needs root"]
fn a_java_socket_leaked_at_process_builder_start_names_the_compiled_method() {
    let _g = guard();
    let (dir, out, mut tracer) = trace_java("jit-java-spawn", "Spawn", JAVA_SPAWN);
    let ready = dir.0.join("ready");
    let t0 = Instant::now();
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&ready)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "Spawn never got ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The JVM writes its perf map when asked (or at exit, too late for the spawn record).
    run_ok(
        Command::new("jcmd")
            .args([&pid.to_string(), "Compiler.perfmap"])
            .stdout(Stdio::null()),
        "jcmd",
    );
    std::fs::write(dir.0.join("go"), b"").unwrap();
    let st = tracer.wait().unwrap();
    assert!(st.success(), "fdaudit trace: {st}");
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let all = records(&text);
    let sockets: Vec<&Value> = leaked(&all)
        .into_iter()
        .filter(|(_, l)| l["origin"]["syscall"] == "socket")
        .map(|(_, l)| l)
        .collect();
    let named = sockets
        .iter()
        .find_map(|l| origin_frame(l, "void ", "Spawn.leakOne()"))
        .unwrap_or_else(|| panic!("no socket's origin names Spawn.leakOne: {sockets:#?}"));
    assert_eq!(named["code"], "jit", "{named}");
    assert_eq!(named["found_by"], "jit-frame-pointer", "{named}");
}

/// Runs `sh -c SCRIPT` as nobody (the attacker).
fn as_nobody(script: &str) {
    let st = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args(["sh", "-c", script])
        .status()
        .expect("setpriv");
    assert!(st.success(), "as nobody: {script}: {st}");
}

#[test]
#[ignore = "needs root"]
fn a_hostile_perf_map_is_never_followed_nor_read_unbounded_and_frames_say_why() {
    use std::os::unix::process::CommandExt as _;
    let _g = guard();
    let dir = Dir::new("jit-hostile");
    let src = dir.write("leak.js", NODE);
    // No --perf-basic-prof: the map is the attacker's to make.
    let mut svc = Service::start(Command::new("node").arg(&src).uid(65534).gid(65534));
    let pid = svc.pid();
    let map = format!("/tmp/perf-{pid}.map");
    let _ = std::fs::remove_file(&map);
    let out = temp_path("jit-hostile.jsonl");
    let args = ["--interval", "1", "--top", "1000"].map(std::ffi::OsStr::new);
    let tracer = attach_with(pid, &out, &args);
    for _ in 0..3 {
        assert_eq!(svc.request(), "done");
    }
    let setups: [(&str, String); 6] = [
        ("", format!("no perf map {map}")),
        (
            &format!("ln -s /etc/shadow {map}"),
            format!("perf map {map} not opened"),
        ),
        (
            &format!("mkfifo {map}"),
            format!("perf map {map} is not a regular file"),
        ),
        (
            &format!("truncate -s 10G {map}"),
            format!("not in perf map {map} (read up to its bounds)"),
        ),
        (
            &format!("head -c 1000000 /dev/urandom > {map}; printf '1 zz\\n0x 1 x\\n' >> {map}"),
            format!("not in perf map {map}"),
        ),
        ("", format!("perf map {map} is owned by uid 1")),
    ];
    for (i, (script, why)) in setups.iter().enumerate() {
        let _ = std::fs::remove_file(&map);
        if i == 5 {
            // Another user's map (daemon's, uid 1), naming all its JIT code: not read.
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
            let lines: String = maps
                .lines()
                .filter(|l| l.contains(" rwxp ") || l.split_whitespace().count() == 5)
                .filter_map(|l| {
                    let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                    let (a, b) = (
                        u64::from_str_radix(a, 16).ok()?,
                        u64::from_str_radix(b, 16).ok()?,
                    );
                    Some(format!("{a:x} {:x} everything\n", b - a))
                })
                .collect();
            std::fs::write(&map, lines).unwrap();
            std::os::unix::fs::chown(&map, Some(1), Some(1)).unwrap();
        } else if !script.is_empty() {
            as_nobody(script);
        }
        let t0 = Instant::now();
        let s = wait_for_stack(&out, pid, |s| frames_say(s, why));
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{why}: took {:?}",
            t0.elapsed()
        );
        assert!(
            s["stack"].as_array().unwrap().iter().all(|f| !f["symbol"]
                .as_str()
                .is_some_and(|n| n.contains("everything"))),
            "{s:#}"
        );
    }
    let _ = std::fs::remove_file(&map);
    let all = stop(tracer, &out);
    assert!(!of_type(&all, "unclosed_report").is_empty());
    drop(svc);
}

/// Whether a JIT frame of `stack` is unnamed for a reason that starts with `why`.
fn frames_say(stack: &Value, why: &str) -> bool {
    stack["stack"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["symbol"].is_null() && f["unnamed"].as_str().is_some_and(|u| u.starts_with(why)))
}
