//! `fdaudit unclosed` (issue #40) on real leaking services of four more runtimes: C built
//! `-O2 -fomit-frame-pointer`, Go, Java and Node. Each leaks K fds per request (a line on
//! stdin, answered `done`) from one named function and opens and closes another file
//! correctly, keeping a reference to every leaked object (Go's `os.File` finalizer and
//! Java's Cleaner close unreachable files). A runtime opens fds of its own (the JVM
//! dozens), so what is compared is the growth between two interval reports taken while the
//! service waits: /proc/PID/fd counted just before and just after each report, equal, is
//! the table that report saw. The outstanding count grows by exactly the table's growth,
//! K fds per request; the closed file never appears. Root only (eBPF); gcc, go (golang-go),
//! javac/java (Java 17) and node build and run the services.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use crate::unclosed::{attach_with, c_service_with, process, stop, symbols, Service};
use fdaudit_tests::{guard, of_type, temp_path};
use serde_json::Value;

/// Fds leaked per request, and the requests made between the two reports.
pub(crate) const K: usize = 3;
pub(crate) const REQUESTS: usize = 10;

/// `main.leakOne` leaks, `main.okOne` closes; the files kept in a slice.
const GO: &str = r#"package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
)

var kept []*os.File

//go:noinline
func leakOne() {
	f, err := os.Open("/etc/hostname")
	if err == nil {
		kept = append(kept, f)
	}
}

//go:noinline
func okOne() {
	f, err := os.Open("/etc/passwd")
	if err == nil {
		f.Close()
	}
}

func main() {
	k, _ := strconv.Atoi(os.Args[1])
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for in.Scan() {
		for i := 0; i < k; i++ {
			leakOne()
		}
		okOne()
		fmt.Println("done")
	}
}
"#;

/// `Leak.leakOne` leaks `FileInputStream`s kept in a list; `Leak.okOne` closes its own.
const JAVA: &str = r#"import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;

public class Leak {
    static final List<FileInputStream> KEPT = new ArrayList<>();

    static void leakOne() throws IOException {
        KEPT.add(new FileInputStream("/etc/hostname"));
    }

    static void okOne() throws IOException {
        try (FileInputStream f = new FileInputStream("/etc/passwd")) {
            f.read();
        }
    }

    public static void main(String[] args) throws IOException {
        int k = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        while (in.readLine() != null) {
            for (int i = 0; i < k; i++) {
                leakOne();
            }
            okOne();
            System.out.println("done");
            System.out.flush();
        }
    }
}
"#;

/// `leakOne` leaks `fs.openSync` fds kept in an array; `okOne` closes its own.
const NODE: &str = r#"const fs = require('fs');
const readline = require('readline');
const kept = [];
function leakOne() {
  kept.push(fs.openSync('/etc/hostname', 'r'));
}
function okOne() {
  fs.closeSync(fs.openSync('/etc/passwd', 'r'));
}
const k = Number(process.argv[2]);
readline.createInterface({ input: process.stdin }).on('line', () => {
  for (let i = 0; i < k; i++) leakOne();
  okOne();
  process.stdout.write('done\n');
});
process.stdout.write('ready\n');
"#;

/// A temporary directory holding a service's source and build, removed on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(name: &str) -> Dir {
        let d = temp_path(name);
        std::fs::create_dir_all(&d).expect("create the service's directory");
        Dir(d)
    }

    pub(crate) fn write(&self, file: &str, text: &str) -> PathBuf {
        let p = self.0.join(file);
        std::fs::write(&p, text).expect("write the service's source");
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn run_ok(cmd: &mut Command, what: &str) {
    let st = cmd
        .status()
        .unwrap_or_else(|e| panic!("{what} is not installed ({e}): .ci/setup installs it"));
    assert!(st.success(), "{what}: {st}");
}

/// The records of each complete report in `out` (a report ends with its processes).
pub(crate) fn reports(out: &Path, pid: u32) -> (usize, Vec<Vec<Value>>) {
    let whole = fdaudit_tests::whole_lines(out);
    let mut all: Vec<Vec<Value>> = Vec::new();
    for line in whole.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v["type"] == "unclosed_report" {
            all.push(Vec::new());
        }
        if let Some(r) = all.last_mut() {
            r.push(v);
        }
    }
    let started = all.len();
    all.retain(|r| {
        r.iter()
            .any(|v| v["type"] == "unclosed_process" && v["pid"] == pid)
    });
    (started, all)
}

/// The next interval report whose reading of the tables is known to fall between two
/// counts of /proc/PID/fd, and that count. A report begun before the first count may have
/// read before it: the one after that has not. Equal counts around it (the service idle)
/// are the table it saw; a runtime's own thread changing its table in between is retried.
fn moment(svc: &Service, out: &Path) -> (usize, Vec<Value>) {
    for _ in 0..5 {
        let before = svc.open_fds();
        let (started, _) = reports(out, svc.pid());
        let t0 = Instant::now();
        let report = loop {
            if let Some(r) = reports(out, svc.pid()).1.into_iter().nth(started + 1) {
                break r;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no interval report");
            std::thread::sleep(Duration::from_millis(50));
        };
        if svc.open_fds() == before {
            return (before, report);
        }
    }
    panic!("the service's fd table never held still across a report");
}

/// Attaches to a started service after `warm` requests (a runtime opens some fds at first
/// use, once), then makes `REQUESTS` between two reports and checks the counts. Returns the
/// later report's stacks.
fn leaks_exactly(name: &str, svc: Service, warm: usize) -> Vec<Value> {
    leaks_exactly_then(name, svc, warm, &mut |_, _| {})
}

/// [`leaks_exactly`], with `between(out, pid)` run after the requests, before the later
/// report is taken.
pub(crate) fn leaks_exactly_then(
    name: &str,
    mut svc: Service,
    warm: usize,
    between: &mut dyn FnMut(&Path, u32),
) -> Vec<Value> {
    for _ in 0..warm {
        assert_eq!(svc.request(), "done", "{name}");
    }
    let out = temp_path(&format!("unclosed-{name}.jsonl"));
    let args = ["--interval", "1", "--top", "1000"].map(std::ffi::OsStr::new);
    let tracer = attach_with(svc.pid(), &out, &args);
    let (fds1, r1) = moment(&svc, &out);
    for _ in 0..REQUESTS {
        assert_eq!(svc.request(), "done", "{name}");
    }
    between(&out, svc.pid());
    let (fds2, r2) = moment(&svc, &out);
    // Every record of the run, checked against the schema.
    let all = stop(tracer, &out);
    assert!(
        of_type(&all, "unclosed_report").len() >= 4,
        "{name}: {all:#?}"
    );
    let pid = svc.pid();
    drop(svc);
    let grown = fds2 as i64 - fds1 as i64;
    assert_eq!(
        grown,
        (K * REQUESTS) as i64,
        "{name}: /proc/{pid}/fd grew by K a request"
    );
    let outstanding = |r: &[Value]| process(r, pid)["outstanding"].as_i64().unwrap();
    let (o1, o2) = (outstanding(&r1), outstanding(&r2));
    assert_eq!(
        o2 - o1,
        grown,
        "{name}: outstanding grew as /proc/PID/fd did: {:#?}",
        process(&r2, pid)
    );
    let stacks: Vec<Value> = of_type(&r2, "unclosed_stack")
        .into_iter()
        .cloned()
        .collect();
    let sum: i64 = stacks.iter().map(|s| s["count"].as_i64().unwrap()).sum();
    assert_eq!(
        sum, o2,
        "{name}: every outstanding fd is in a stack: {stacks:#?}"
    );
    for s in &stacks {
        assert!(
            !s["samples"].to_string().contains("/etc/passwd"),
            "{name}: a closed file appears: {s}"
        );
    }
    stacks
}

/// The stacks holding the leaked file (an interpreter or a JIT may give one call site
/// several stacks, as a function moves from tier to tier), largest first.
fn leak_stacks<'a>(name: &str, stacks: &'a [Value]) -> Vec<&'a Value> {
    let leak: Vec<&Value> = stacks
        .iter()
        .filter(|s| s["samples"].to_string().contains("/etc/hostname"))
        .collect();
    let sum: usize = leak
        .iter()
        .map(|s| s["count"].as_u64().unwrap() as usize)
        .sum();
    assert_eq!(sum, K * REQUESTS, "{name}: the leak's stacks: {stacks:#?}");
    leak
}

/// A stack's frames as `symbol in module` (no offsets, the module's file name).
pub(crate) fn frames(stack: &Value) -> Vec<String> {
    stack["stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let sym = f["symbol"].as_str().unwrap_or("?");
            let module = f["module"].as_str().unwrap_or("?");
            format!(
                "{} in {}",
                sym.split("+0x").next().unwrap_or(sym),
                module.rsplit('/').next().unwrap_or(module)
            )
        })
        .collect()
}

/// The stack's innermost frames are `want`.
fn innermost(stack: &Value, want: &[&str]) {
    let got = frames(stack);
    assert!(
        got.len() >= want.len() && got[..want.len()] == *want,
        "innermost frames {got:?}, not {want:?}: {stack}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_c_service_built_o2_without_frame_pointers_is_counted_exactly() {
    let _g = guard();
    let exe = c_service_with("unclosed-o2", &["-O2", "-fomit-frame-pointer"]);
    let svc = Service::start(Command::new(&exe).arg(K.to_string()));
    let stacks = leaks_exactly("c-O2", svc, 1);
    let _ = std::fs::remove_file(&exe);
    // Without frame pointers the kernel's walk keeps libc's wrapper alone; `.eh_frame`
    // (libc's, then the service's own) finds `leak_one` and `main` above it.
    let top = &stacks[0];
    assert_eq!(top["count"], K * REQUESTS, "{top}");
    let syms = symbols(top);
    assert!(syms.iter().any(|s| s.starts_with("leak_one")), "{syms:?}");
    for s in &stacks {
        assert!(!symbols(s).iter().any(|f| f.starts_with("ok_one")), "{s}");
    }
}

/// Two call sites in one function, each through libc's `open64`: the first leaks one fd
/// per request (`/etc/hostname`), the second two in a loop (`/etc/hosts`); `ok_one` opens
/// and closes `/etc/passwd`. Built `-O2 -fomit-frame-pointer -g` (the line table only).
const TWO_SITES: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static int kept[1 << 16];
static int nkept;

__attribute__((noinline)) void leak_two(int a, int b) {
    for (int i = 0; i < a; i++) {
        int fd = open("/etc/hostname", O_RDONLY); /* site A */
        if (fd >= 0) kept[nkept++] = fd;
    }
    for (int i = 0; i < b; i++) {
        int fd = open("/etc/hosts", O_RDONLY); /* site B */
        if (fd >= 0) kept[nkept++] = fd;
    }
}

__attribute__((noinline)) void ok_one(void) {
    int fd = open("/etc/passwd", O_RDONLY);
    if (fd >= 0) close(fd);
}

int main(void) {
    char buf[64];
    printf("ready\n"); fflush(stdout);
    while (fgets(buf, sizeof buf, stdin)) {
        leak_two(1, 2);
        ok_one();
        printf("done\n"); fflush(stdout);
    }
    sleep(1);
    return 0;
}
"#;

/// The line of `TWO_SITES` that holds `marker` (1-based, as DWARF counts).
fn line_of(marker: &str) -> u64 {
    let i = TWO_SITES.lines().position(|l| l.contains(marker));
    i.expect("the marker is in the fixture") as u64 + 1
}

/// The one stack holding `path` (a site in a loop is one site): its count and the line
/// of its `leak_two` frame.
fn site_of(stacks: &[Value], path: &str) -> (u64, u64) {
    let held: Vec<&Value> = stacks
        .iter()
        .filter(|s| s["samples"].to_string().contains(path))
        .collect();
    assert_eq!(held.len(), 1, "one stack holds {path}: {stacks:#?}");
    (held[0]["count"].as_u64().unwrap(), leak_two_line(held[0]))
}

/// The line of `stack`'s `leak_two` frame.
fn leak_two_line(stack: &Value) -> u64 {
    let frame = stack["stack"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["symbol"]
                .as_str()
                .is_some_and(|s| s.starts_with("leak_two+"))
        })
        .unwrap_or_else(|| panic!("the stack names leak_two: {stack}"));
    frame["line"].as_u64().unwrap_or(0)
}

/// The kernel's frame-pointer walk stops in libc's wrapper (no frame pointers): the two
/// sites share its innermost frame, ip, sp and the function above them; they differ in the
/// return address the wrapper's frame holds and in the path (Debian's `open64` keeps it in
/// rbp, so the walk's second frame is the path's bytes: what gives each its own stack id;
/// two opens of one path share one, docs/unclosed.md). Each gets its own count and line,
/// and a site in a loop is one site (what a cache of stack ids must neither merge nor
/// split).
#[test]
#[ignore = "needs root"]
fn two_call_sites_in_one_function_through_open64_keep_their_own_counts_and_lines() {
    let _g = guard();
    let exe = fdaudit_tests::build_c_fixture_with(
        "unclosed-two-sites",
        TWO_SITES,
        &["-O2", "-fomit-frame-pointer", "-g"],
    );
    let svc = Service::start(&mut Command::new(&exe));
    let stacks = leaks_exactly("two-sites", svc, 1);
    let _ = std::fs::remove_file(&exe);
    assert_eq!(
        site_of(&stacks, "/etc/hostname"),
        (REQUESTS as u64, line_of("site A")),
        "site A: {stacks:#?}"
    );
    assert_eq!(
        site_of(&stacks, "\"/etc/hosts\""),
        (2 * REQUESTS as u64, line_of("site B")),
        "site B: {stacks:#?}"
    );
}

/// The same two sites opening one path: the kernel's walk gives both one stack id (the
/// path's bytes in rbp); the caller's return address, read at the slot fdaudit learns from
/// the wrapper's unwind rule, tells them apart. The first request's calls come before the
/// slot is learned (their own words are read), the later ones after.
#[test]
#[ignore = "needs root"]
fn two_call_sites_in_one_function_opening_one_path_keep_their_own_counts_and_lines() {
    let _g = guard();
    let src = TWO_SITES.replace("\"/etc/hosts\"", "\"/etc/hostname\"");
    let exe = fdaudit_tests::build_c_fixture_with(
        "unclosed-two-sites-one-path",
        &src,
        &["-O2", "-fomit-frame-pointer", "-g"],
    );
    let svc = Service::start(&mut Command::new(&exe));
    let stacks = leaks_exactly("two-sites-one-path", svc, 1);
    let _ = std::fs::remove_file(&exe);
    let mut sites: Vec<(u64, u64)> = stacks
        .iter()
        .map(|s| (leak_two_line(s), s["count"].as_u64().unwrap()))
        .collect();
    sites.sort_unstable();
    assert_eq!(
        sites,
        [
            (line_of("site A"), REQUESTS as u64),
            (line_of("site B"), 2 * REQUESTS as u64)
        ],
        "{stacks:#?}"
    );
}

/// Call sites of one path in `MANY_SITES`: more than fdaudit gives ids of their own (4096).
const SITES: usize = 5000;

/// `SITES` opens of one path, each its own call site (`-O0`: no two are merged), every fd
/// kept open to the exit. Through Debian's `open64` they share one stack id and differ in
/// the return address: a process choosing as many sites as it likes. After the first it
/// waits a second, so that fdaudit has learned the stack id's return-address slot (every
/// 20 ms) before the others: a process gone before that has its calls at the stack id
/// grouped by the stack id alone (docs/unclosed.md), which a starved reader (CI's load) met.
fn many_sites() -> String {
    let mut c = String::from(
        "#include <fcntl.h>\n#include <unistd.h>\nstatic int kept[SITES];\n\
         __attribute__((noinline)) int many(void) {\n",
    )
    .replace("SITES", &SITES.to_string());
    for i in 0..SITES {
        c += &format!("    kept[{i}] = open(\"/etc/hostname\", O_RDONLY);\n");
        if i == 0 {
            c += "    sleep(1);\n";
        }
    }
    c + "    return 0;\n}\nint main(void) { return many(); }\n"
}

/// Hostile input: a process (as nobody) whose calls differ in their return address more
/// often than fdaudit keeps sites apart. Every fd is counted; sites past the bound share one
/// group per stack id, its caller `[unknown]` and said why; the report ends promptly.
#[test]
#[ignore = "needs root"]
fn a_process_with_more_call_sites_than_fdaudit_keeps_is_counted_exactly_as_nobody() {
    let _g = guard();
    let exe = fdaudit_tests::build_c_fixture_with("unclosed-many-sites", &many_sites(), &["-O0"]);
    let out = temp_path("unclosed-many-sites.jsonl");
    let start = Instant::now();
    let st = Command::new(fdaudit_tests::fdaudit())
        .args(["unclosed", "--json", "--top", "100000", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "ulimit -n {} && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \"$0\"",
            SITES + 64
        ))
        .arg(&exe)
        .status()
        .unwrap();
    let took = start.elapsed();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&exe);
    assert!(st.success(), "{st}: {text}");
    assert!(took < Duration::from_secs(120), "took {took:?}");
    let recs = fdaudit_tests::records(&text);
    // One process: sh, then setpriv, then the fixture, by exec.
    let procs = of_type(&recs, "unclosed_process");
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(procs[0]["outstanding"], SITES as u64, "{}", procs[0]);
    // The sites kept apart, one fd each (their names need the process alive when they are
    // resolved: this one exits at once), and the rest in one group.
    let stacks = of_type(&recs, "unclosed_stack");
    let (together, apart): (Vec<&Value>, Vec<&Value>) = stacks
        .iter()
        .partition(|s| s["stack"].to_string().contains("caller not told apart"));
    assert_eq!(together.len(), 1, "{together:?}");
    let rest = together[0]["count"].as_u64().unwrap();
    assert!(apart.iter().all(|s| s["count"] == 1), "{apart:?}");
    assert_eq!(apart.len() as u64 + rest, SITES as u64, "{together:?}");
    assert!(
        (SITES - 4096..SITES - 4000).contains(&(rest as usize)),
        "{rest}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_go_service_s_leaks_are_counted_exactly_and_named_by_main_leak_one() {
    go_service("go", &[]);
}

/// Built `-ldflags=-s -w`, as release images often are: no ELF symbol table, no DWARF;
/// the names come from the `.gopclntab` Go's runtime keeps for its own tracebacks.
#[test]
#[ignore = "needs root"]
fn a_stripped_go_service_s_leaking_function_is_named_from_its_pclntab() {
    go_service("go-stripped", &["-ldflags=-s -w"]);
}

fn go_service(name: &str, flags: &[&str]) {
    let _g = guard();
    let dir = Dir::new(&format!("unclosed-{name}"));
    let src = dir.write("leak.go", GO);
    let exe = dir.0.join("leak");
    run_ok(
        Command::new("go")
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .env("GOCACHE", std::env::temp_dir().join("fdaudit-test-gocache"))
            .env("GOPATH", dir.0.join("gopath"))
            .env("GOFLAGS", "")
            .env("GO111MODULE", "off"),
        "go build (golang-go)",
    );
    let svc = Service::start(Command::new(&exe).arg(K.to_string()));
    let stacks = leaks_exactly(name, svc, 1);
    let top = &stacks[0];
    assert_eq!(top["count"], K * REQUESTS, "{top}");
    let syms = symbols(top);
    assert!(
        syms.iter().any(|s| s.starts_with("main.leakOne")),
        "{syms:?}"
    );
    for s in &stacks {
        assert!(
            !symbols(s).iter().any(|f| f.starts_with("main.okOne")),
            "{s}"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_java_service_s_unclosed_file_input_streams_are_counted_exactly() {
    let _g = guard();
    let dir = Dir::new("unclosed-java");
    let src = dir.write("Leak.java", JAVA);
    run_ok(
        Command::new("javac").arg("-d").arg(&dir.0).arg(&src),
        "javac (Java 17)",
    );
    let svc = Service::start(
        Command::new("java")
            .arg("-cp")
            .arg(&dir.0)
            .args(["Leak", &K.to_string()]),
    );
    let stacks = leaks_exactly("java", svc, 2);
    // The Java frames (interpreted or JIT-compiled) have no names the kernel or ELF can
    // give: what shows is libc's wrapper and, by `.eh_frame`, libjava's `handleOpen`
    // (every `FileInputStream` open, leaked or not, shares that stack).
    for s in leak_stacks("java", &stacks) {
        innermost(s, &["__open in libc.so.6", "handleOpen in libjava.so"]);
    }
}

#[test]
#[ignore = "needs root"]
fn a_node_service_s_open_sync_fds_are_counted_exactly() {
    let _g = guard();
    let dir = Dir::new("unclosed-node");
    let src = dir.write("leak.js", NODE);
    let svc = Service::start(Command::new("node").arg(&src).arg(K.to_string()));
    let stacks = leaks_exactly("node", svc, 2);
    // `fs.openSync` runs libuv's `uv__fs_work` on the JavaScript thread: that and libc's
    // wrapper are what shows, never the JavaScript function.
    for s in leak_stacks("node", &stacks) {
        innermost(s, &["__open in libc.so.6", "uv__fs_work in node"]);
    }
}
