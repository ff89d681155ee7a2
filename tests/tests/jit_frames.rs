//! Java and JavaScript frames named from the runtimes' perf maps (issue #38 item 5): real
//! Java 17 and Node 20 services whose leaking function is JIT-compiled, run with the flags
//! docs/advice.md gives (the JVM: `-XX:+PreserveFramePointer`, its map written by `jcmd PID
//! Compiler.perfmap`; Node: `--perf-basic-prof --interpreted-frames-native-stack`). Each
//! leaks sockets, whose libc wrapper leaves the frame pointer alone, so the kernel's
//! frame-pointer walk reaches the generated code (a file's `open` in libc uses rbp as a
//! plain register, and the 32 words an origin record copies end inside libjava or libuv:
//! docs/unclosed.md). Counts stay exact ([`leaks_exactly_then`]); the top stack names the
//! leaking Java method or JavaScript function, marked `jit`, its frames past the native
//! ones `found_by: "jit-frame-pointer"`. Root only (eBPF); javac/java and node.

use std::{path::Path, process::Command, time::Duration};

use crate::unclosed::Service;
use crate::unclosed_runtimes::{frames, leaks_exactly_then, reports, run_ok, Dir, K, REQUESTS};
use fdaudit_tests::{guard, of_type};
use serde_json::Value;

/// `Leak.leakOne` leaks server socket channels (one socket each), kept in a list; warmed at
/// start until C2 compiles it; `okOne` closes its file.
const JAVA: &str = r#"import java.io.*;
import java.nio.channels.ServerSocketChannel;
import java.util.*;

public class Leak {
    static final List<ServerSocketChannel> KEPT = new ArrayList<>();

    static void leakOne() throws IOException {
        KEPT.add(ServerSocketChannel.open());
    }

    static void okOne() throws IOException {
        try (FileInputStream f = new FileInputStream("/etc/passwd")) {
            f.read();
        }
    }

    public static void main(String[] args) throws IOException {
        for (int i = 0; i < 20000; i++) {
            leakOne();
            if (KEPT.size() > 100) {
                for (ServerSocketChannel c : KEPT) c.close();
                KEPT.clear();
            }
        }
        for (ServerSocketChannel c : KEPT) c.close();
        KEPT.clear();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        while (in.readLine() != null) {
            for (int i = 0; i < 3; i++) leakOne();
            okOne();
            System.out.println("done");
            System.out.flush();
        }
    }
}
"#;

/// `leakOne` leaks listening servers (one socket each), warmed at start until V8 optimizes
/// it; `okOne` closes its file.
pub(crate) const NODE: &str = r#"const fs = require('fs');
const net = require('net');
const readline = require('readline');
const kept = [];
function leakOne() {
  const s = net.createServer();
  s.listen(0);
  kept.push(s);
}
function okOne() {
  fs.closeSync(fs.openSync('/etc/passwd', 'r'));
}
for (let i = 0; i < 3000; i++) leakOne();
for (const s of kept) s.close();
kept.length = 0;
readline.createInterface({ input: process.stdin }).on('line', () => {
  for (let i = 0; i < 3; i++) leakOne();
  okOne();
  process.stdout.write('done\n');
});
process.stdout.write('ready\n');
"#;

/// The stacks of the leaked sockets: they hold every one, the largest first.
fn socket_stacks<'a>(name: &str, stacks: &'a [Value]) -> Vec<&'a Value> {
    let leak: Vec<&Value> = stacks
        .iter()
        .filter(|s| s["by_syscall"]["socket"].as_u64().is_some())
        .collect();
    let sum: u64 = leak.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    assert_eq!(sum, (K * REQUESTS) as u64, "{name}: {stacks:#?}");
    leak
}

/// The frame of `stack` whose symbol starts with `prefix` and holds `name`.
fn frame_named<'a>(stack: &'a Value, prefix: &str, name: &str) -> Option<&'a Value> {
    stack["stack"].as_array().unwrap().iter().find(|f| {
        f["symbol"]
            .as_str()
            .is_some_and(|s| s.starts_with(prefix) && s.contains(name))
    })
}

/// The leaking function's frame is named, JIT-compiled, found past the native frames
/// through JIT frame pointers, and the stack begins in libc's `socket`.
fn names_the_leaking_function(name: &str, stacks: &[Value], prefix: &str, function: &str) {
    let leak = socket_stacks(name, stacks);
    let top = leak[0];
    assert_eq!(
        frames(top).first().map(String::as_str),
        Some("__socket in libc.so.6"),
        "{name}: {top:#}"
    );
    let f = frame_named(top, prefix, function)
        .unwrap_or_else(|| panic!("{name}: no frame names {function}: {:#?}", frames(top)));
    assert_eq!(f["code"], "jit", "{name}: {f}");
    assert_eq!(f["found_by"], "jit-frame-pointer", "{name}: {f}");
    let map = f["module"].as_str().unwrap();
    assert!(
        map.starts_with("/tmp/perf-") && map.ends_with(".map"),
        "{name}: {f}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_jit_compiled_java_method_is_named_once_its_perf_map_is_written() {
    let _g = guard();
    let dir = Dir::new("jit-java");
    let src = dir.write("Leak.java", JAVA);
    run_ok(
        Command::new("javac").arg("-d").arg(&dir.0).arg(&src),
        "javac (Java 17)",
    );
    // leakOne kept a method of its own (not inlined into main's loop), so that C2 compiles
    // it as one.
    let svc = Service::start(Command::new("java").arg("-cp").arg(&dir.0).args([
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,Leak::leakOne",
        "-XX:+UnlockDiagnosticVMOptions",
        "-XX:+PreserveFramePointer",
        "Leak",
    ]));
    let map = format!("/tmp/perf-{}.map", svc.pid());
    let _ = std::fs::remove_file(&map); // another process's, of the same pid
                                        // The attach listener (its socket, one fd) started before the counts: jcmd uses it.
    run_ok(
        Command::new("jcmd")
            .args([&svc.pid().to_string(), "VM.version"])
            .stdout(std::process::Stdio::null()),
        "jcmd",
    );
    // Before the map is written, a report shows the stack with its JIT frames unnamed and
    // why; `jcmd` then writes it, and the next report names them.
    let mut between = |out: &Path, pid: u32| {
        let unnamed = wait_for_stack(out, pid, |s| {
            s["stack"].as_array().unwrap().iter().any(|f| {
                f["unnamed"]
                    .as_str()
                    .is_some_and(|u| u == format!("no perf map {map}"))
            })
        });
        assert!(
            frame_named(&unnamed, "void ", "Leak.leakOne()").is_none(),
            "named before any map: {unnamed:#}"
        );
        run_ok(
            Command::new("jcmd")
                .args([&pid.to_string(), "Compiler.perfmap"])
                .stdout(std::process::Stdio::null()),
            "jcmd",
        );
    };
    let stacks = leaks_exactly_then("java", svc, 2, &mut between);
    names_the_leaking_function("java", &stacks, "void ", "Leak.leakOne()");
    let _ = std::fs::remove_file(&map);
}

#[test]
#[ignore = "needs root"]
fn a_jit_compiled_javascript_function_is_named_from_node_s_perf_map() {
    let _g = guard();
    let dir = Dir::new("jit-node");
    let src = dir.write("leak.js", NODE);
    let svc = Service::start(
        Command::new("node")
            .args(["--perf-basic-prof", "--interpreted-frames-native-stack"])
            .arg(&src)
            .current_dir(&dir.0), // where V8's log goes with --perf-basic-prof
    );
    let map = format!("/tmp/perf-{}.map", svc.pid());
    let stacks = leaks_exactly_then("node", svc, 2, &mut |_, _| {});
    let want = format!("leakOne {}:", src.display());
    names_the_leaking_function("node", &stacks, "JS:", &want);
    let _ = std::fs::remove_file(&map);
}

/// Waits (30 s at most) for a report in `out` with a socket stack of `pid` that `ok` accepts.
pub(crate) fn wait_for_stack(out: &Path, pid: u32, ok: impl Fn(&Value) -> bool) -> Value {
    let t0 = std::time::Instant::now();
    loop {
        let (_, all) = reports(out, pid);
        if let Some(s) = all.iter().rev().find_map(|r| {
            of_type(r, "unclosed_stack")
                .into_iter()
                .find(|s| s["by_syscall"]["socket"].as_u64().is_some() && ok(s))
                .cloned()
        }) {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no such stack: {all:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
