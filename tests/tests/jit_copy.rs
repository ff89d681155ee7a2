//! JIT frames above a native call (issue #38 items 4 and 5): a file a Java method opens
//! through libc's `open64` (`FileInputStream`: the JNI code in libjava and libc keep no
//! frame pointers, so the kernel's frame-pointer walk ends there) is named by the method,
//! from the call site's stack copy: unwound by the unwind tables through libc and libjava
//! to the JVM's generated code, then on by its frame pointers
//! (`-XX:+PreserveFramePointer`). And a Node `fs.openSync` fd passed in `stdio`: libuv
//! opens with close-on-exec, so its origin is the child's `fcntl(F_SETFD)` in `uv_spawn`,
//! whose copy is unwound by `.eh_frame` to V8's CEntry builtin and on by V8's frame
//! pointers to the spawning JavaScript function; the open is its `created_by`. Root only
//! (eBPF); java/javac/jcmd, node.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::jit_origin::{leaked, origin_frame, trace_java};
use crate::unclosed_runtimes::{run_ok, Dir};
use fdaudit_tests::{guard, of_type, records, temp_path, StopOnDrop};
use serde_json::Value;

/// Warms `leakOne` (a `FileInputStream` of /etc/hostname: the JDK opens it without
/// close-on-exec) 20,000 times a round, then says its pid and the round in DIR/ready and
/// waits: for DIR/more-N (the test did not find leakOne compiled in the perf map: another
/// round) or DIR/go; then leaks one and starts a child (posix_spawn of jspawnhelper, which
/// inherits it), and stays until DIR/done (the test saw the spawn's record: fdaudit has
/// read its maps). Bounded rounds, not a loop until go: every open is an origin record
/// fdaudit reads before the spawn's.
const JAVA_OPEN: &str = r#"import java.io.FileInputStream;
import java.io.IOException;
import java.nio.file.*;
import java.util.*;

public class Open {
    static final List<FileInputStream> KEPT = new ArrayList<>();

    static void leakOne() throws IOException {
        KEPT.add(new FileInputStream("/etc/hostname"));
    }

    static void closeAll() throws IOException {
        for (FileInputStream f : KEPT) f.close();
        KEPT.clear();
    }

    public static void main(String[] args) throws Exception {
        // Every class the loops load, loaded before the warming: one loaded after it can
        // void what C2 assumed of the class hierarchy, and leakOne runs interpreted again.
        Path dir = Paths.get(args[0]);
        Files.exists(dir.resolve("go"));
        Files.writeString(dir.resolve("warming"), "");
        Thread.sleep(1);
        long pid = ProcessHandle.current().pid();
        for (int round = 0; ; round++) {
            for (int i = 0; i < 200; i++) {
                for (int j = 0; j < 100; j++) leakOne();
                closeAll();
            }
            Files.writeString(dir.resolve("ready.tmp"), pid + " " + round);
            Files.move(dir.resolve("ready.tmp"), dir.resolve("ready"),
                StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            Path more = dir.resolve("more-" + round);
            while (!Files.exists(dir.resolve("go")) && !Files.exists(more)) Thread.sleep(20);
            if (Files.exists(dir.resolve("go"))) break;
        }
        leakOne();
        new ProcessBuilder("/bin/true").start().waitFor();
        while (!Files.exists(dir.resolve("done"))) Thread.sleep(20);
    }
}
"#;

/// Waits (up to two minutes) for `what` to hold, polling every 50 ms.
fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The whole records fdaudit has written to `out` so far (read while it writes: the lines
/// up to the last newline), None before its header is there.
fn written(out: &std::path::Path) -> Option<Vec<Value>> {
    let whole = fdaudit_tests::whole_lines(out);
    (!whole.is_empty()).then(|| records(&whole))
}

/// The leaked fds of `text`'s spawns whose target is `path`.
fn leaked_path(all: &[Value], path: &str) -> Vec<Value> {
    leaked(all)
        .into_iter()
        .filter(|(_, l)| l["target"] == path)
        .map(|(_, l)| l.clone())
        .collect()
}

/// Whether the JVM `pid`'s perf map (written now, by jcmd) names `method` as compiled.
fn perf_map_names(pid: u32, method: &str) -> bool {
    run_ok(
        Command::new("jcmd")
            .args([&pid.to_string(), "Compiler.perfmap"])
            .stdout(Stdio::null()),
        "jcmd",
    );
    std::fs::read_to_string(format!("/tmp/perf-{pid}.map"))
        .is_ok_and(|m| m.lines().any(|l| l.contains(method)))
}

#[test]
#[ignore = "needs root"]
fn a_java_file_opened_through_open64_names_the_compiled_method() {
    let _g = guard();
    let (dir, out, mut tracer) = trace_java("jit-copy-java", "Open", JAVA_OPEN);
    // Warmed until C2 (or C1) compiled leakOne: the JVM writes its perf map when asked.
    let mut pid = 0;
    for round in 0..20 {
        let ready = |s: String| {
            let (p, r) = s.trim().split_once(' ')?;
            (r.parse::<u32>().ok()? == round).then(|| p.parse::<u32>().ok())?
        };
        pid = wait_until("Open ends a warming round", || {
            std::fs::read_to_string(dir.0.join("ready"))
                .ok()
                .and_then(ready)
        });
        if perf_map_names(pid, "void Open.leakOne()") {
            break;
        }
        assert!(round < 19, "leakOne not compiled after 20 rounds");
        std::fs::write(dir.0.join(format!("more-{round}")), b"").unwrap();
    }
    std::fs::write(dir.0.join("go"), b"").unwrap();
    // jspawnhelper's spawn record (the JVM's child, which execs /bin/true after it).
    let spawned = || {
        let all = written(&out)?;
        of_type(&all, "spawn")
            .iter()
            .any(|s| s["pid"] != pid && s["parent_pid"] == pid)
            .then_some(all)
    };
    wait_until("the JVM's spawn is reported", spawned);
    std::fs::write(dir.0.join("done"), b"").unwrap();
    let st = tracer.wait().unwrap();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    assert!(st.success(), "fdaudit trace: {st}");
    let all = records(&text);
    let found = leaked_path(&all, "/etc/hostname");
    check_named(&found, Path::new("/etc/hostname"), &all);
}

/// The leaked file's origin is the open, through libc's open64, and names the compiled
/// `leakOne`, found by the JVM's frame pointers past its generated code.
fn check_named(found: &[Value], path: &Path, all: &[Value]) {
    assert_eq!(found.len(), 1, "one {} leaked: {all:#?}", path.display());
    let l = &found[0];
    assert_eq!(l["origin"]["syscall"], "openat", "{l:#}");
    let stack = l["origin"]["stack"].as_array().expect("a stack");
    // A JVM's stack runs through libjvm, libjava and libc: none is left unread.
    assert!(
        !stack.iter().any(|f| f["unnamed"]
            .as_str()
            .is_some_and(|u| u.contains("record's time"))),
        "a module left unread: {l:#}"
    );
    assert!(
        stack.iter().any(|f| f["symbol"].as_str().is_some_and(|s| [
            "__open+",
            "open64+",
            "__libc_open64+"
        ]
        .iter()
        .any(|p| s.starts_with(p)))),
        "the origin is libc's open64 (Debian's symbol table names it __open): {l:#}"
    );
    let named = origin_frame(l, "void ", "Open.leakOne()")
        .unwrap_or_else(|| panic!("the origin names no Open.leakOne: {l:#}"));
    assert_eq!(named["code"], "jit", "{named}");
    assert_eq!(named["found_by"], "jit-frame-pointer", "{named}");
}

/// Opens /etc/hostname from `openIt` (optimized by V8 before), passes it to /bin/true at
/// its own number (libuv clears close-on-exec in the child: `fcntl(F_SETFD)`) from
/// `spawnWith`, and stays until DIR/done (the test saw the spawn's record).
const NODE_OPEN: &str = r#"const fs = require('fs');
const cp = require('child_process');
const path = require('path');
function openIt() {
  return fs.openSync('/etc/hostname', 'r');
}
function spawnWith(fd) {
  const stdio = ['ignore', 'ignore', 'ignore'];
  while (stdio.length < fd) stdio.push('ignore');
  stdio.push(fd);
  return cp.spawn('/bin/true', [], { stdio });
}
%PrepareFunctionForOptimization(openIt);
for (let i = 0; i < 3; i++) fs.closeSync(openIt());
%OptimizeFunctionOnNextCall(openIt);
const fd = openIt();
const done = path.join(process.argv[2], 'done');
spawnWith(fd).on('exit', () => {
  const t = setInterval(() => { if (fs.existsSync(done)) clearInterval(t); }, 20);
});
"#;

#[test]
#[ignore = "needs root"]
fn a_node_open_sync_fd_passed_in_stdio_names_the_spawning_function_and_the_open() {
    let _g = guard();
    let dir = Dir::new("jit-copy-node");
    let src = dir.write("open.js", NODE_OPEN);
    let out = temp_path("jit-copy-node.jsonl");
    let mut tracer = StopOnDrop(
        Command::new(fdaudit_tests::fdaudit())
            .args(["trace", "--origin", "--json", "-o"])
            .arg(&out)
            .args(["--", "node"])
            .args([
                "--perf-basic-prof",
                "--interpreted-frames-native-stack",
                "--allow-natives-syntax",
            ])
            .arg(&src)
            .arg(&dir.0)
            // V8's log (with --perf-basic-prof) goes to the directory.
            .current_dir(&dir.0)
            .stdin(Stdio::null())
            .spawn()
            .expect("run fdaudit trace"),
    );
    let found = wait_until("/bin/true's spawn is reported", || {
        let all = written(&out)?;
        let sp = of_type(&all, "spawn");
        let s = sp.iter().find(|s| s["exec_path"] == "/bin/true")?;
        Some((
            s["parent_pid"].clone(),
            leaked_path(&all, "/etc/hostname"),
            all,
        ))
    });
    std::fs::write(dir.0.join("done"), b"").unwrap();
    let st = tracer.wait().unwrap();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(format!("/tmp/perf-{}.map", found.0));
    assert!(st.success(), "fdaudit trace: {st}");
    let (_, files, all) = found;
    assert_eq!(files.len(), 1, "one /etc/hostname leaked: {all:#?}");
    let l = &files[0];
    assert_eq!(l["origin"]["syscall"], "fcntl(F_SETFD)", "{l:#}");
    let want = format!("spawnWith {}:", src.display());
    let f = origin_frame(l, "JS:", &want)
        .unwrap_or_else(|| panic!("the origin names no {want}: {l:#}"));
    assert_eq!(f["found_by"], "jit-frame-pointer", "{f}");
    let made = &l["origin"]["created_by"];
    assert_eq!(made["syscall"], "openat(O_CLOEXEC)", "{l:#}");
    assert!(
        made["stack"][0]["symbol"]
            .as_str()
            .is_some_and(|s| s.starts_with("__open+") || s.starts_with("open64+")),
        "the open is libc's open64: {l:#}"
    );
}
