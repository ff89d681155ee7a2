//! Fds in flight against `fdaudit scan` (#37 finding 4): a listening socket, or a directory
//! fd of `/`, that an unprivileged process holds in no fd table, yet can hand to a child:
//! queued with SCM_RIGHTS in an inheritable unix socket and never received, or registered
//! as an io_uring fixed file behind an inheritable ring. The attacker (`nobody`, via
//! setpriv) is a small C program; scan must rate the carrier as the fd it carries, and
//! `--fail-on` must fail. After the scan, the process still receives exactly what was
//! sent (scan took nothing out of the queue).
//!
//! Root-only: `nobody` runs the attack and only root can read its fds. No eBPF is loaded.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use fdaudit_tests::{build_c_fixture, fdaudit, require_root};
use serde_json::Value;

/// The attacker. `scm PAYLOAD` queues PAYLOAD in an inheritable unix socket
/// (`scm-cloexec`: one with close-on-exec, the process's own); `uring
/// PAYLOAD` registers it in an inheritable io_uring and closes its own fd. PAYLOAD is
/// `listener` (TCP, 127.0.0.1), `root` (`/`: O_PATH|O_DIRECTORY for scm, O_DIRECTORY for
/// io_uring, which refuses O_PATH files) or `both`. Prints `ready CARRIER_FD PORT`, then
/// on each stdin line `recv` receives (scm) and prints what came; exits at EOF.
const ATTACKER: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void die(const char *what) { perror(what); exit(1); }

static int listener(int *port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (void *)&a, sizeof a) || listen(s, 8)) die("listener");
    if (getsockname(s, (void *)&a, &len)) die("getsockname");
    *port = ntohs(a.sin_port);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int scm = !strncmp(argv[1], "scm", 3), keep = !strcmp(argv[1], "scm-cloexec");
    int want_l = strcmp(argv[2], "root") != 0, want_r = strcmp(argv[2], "listener") != 0;
    int port = 0, fds[2], n = 0;
    if (want_l) fds[n++] = listener(&port);
    if (want_r) fds[n++] = open("/", (scm ? O_PATH : O_RDONLY) | O_DIRECTORY | O_CLOEXEC);
    if (fds[n - 1] < 0) die("open /");
    int carrier;
    if (scm) {
        int sv[2];
        /* sv[0] inheritable (no SOCK_CLOEXEC); the sending end closes on exec. */
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair");
        if (fcntl(sv[1], F_SETFD, FD_CLOEXEC)) die("fcntl");
        if (keep && fcntl(sv[0], F_SETFD, FD_CLOEXEC)) die("fcntl");
        char cbuf[CMSG_SPACE(sizeof(int) * 2)];
        memset(cbuf, 0, sizeof cbuf);
        struct iovec io = { .iov_base = "x", .iov_len = 1 };
        struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
                            .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
        if (sendmsg(sv[1], &m, 0) != 1) die("sendmsg");
        carrier = sv[0];
    } else {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        carrier = syscall(__NR_io_uring_setup, 4, &p);
        if (carrier < 0) die("io_uring_setup");
        /* io_uring_setup always sets close-on-exec: the attacker clears it. */
        if (fcntl(carrier, F_SETFD, 0)) die("fcntl");
        if (syscall(__NR_io_uring_register, carrier, IORING_REGISTER_FILES, fds, n))
            die("io_uring_register");
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    printf("ready %d %d\n", carrier, port);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "recv", 4) || !scm) continue;
        char cbuf[CMSG_SPACE(sizeof(int) * 8)], b;
        struct iovec io = { .iov_base = &b, .iov_len = 1 };
        struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
                            .msg_controllen = sizeof cbuf };
        ssize_t got = recvmsg(carrier, &m, MSG_DONTWAIT);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        int k = (got == 1 && c && c->cmsg_type == SCM_RIGHTS)
                    ? (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;
        printf("received %d:", k);
        for (int i = 0; i < k; i++) {
            int fd = ((int *)CMSG_DATA(c))[i], acc = 0;
            socklen_t l = sizeof acc;
            struct stat st;
            if (!getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) && acc) printf(" listener");
            else if (!fstat(fd, &st) && S_ISDIR(st.st_mode)) printf(" directory");
            else printf(" other");
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
"#;

/// The attacker, run as nobody, once ready.
struct Attacker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    carrier: u32,
    port: u16,
}

impl Attacker {
    fn start(mode: &str, payload: &str) -> Attacker {
        Attacker::start_in(&[], mode, payload)
    }

    /// The attacker under `wrap` (a command that runs the rest of its arguments).
    fn start_in(wrap: &[&str], mode: &str, payload: &str) -> Attacker {
        static EXE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
        let exe = EXE.get_or_init(|| build_c_fixture("inflight-attacker", ATTACKER));
        let (prog, pre) = match wrap.split_first() {
            Some((p, rest)) => (*p, rest),
            None => ("setpriv", &[][..]),
        };
        let mut cmd = Command::new(prog);
        cmd.args(pre);
        if !wrap.is_empty() {
            cmd.arg("setpriv");
        }
        let mut child = cmd
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(exe)
            .args([mode, payload])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the attacker as nobody with setpriv");
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("read the attacker's line");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert!(f.len() == 3 && f[0] == "ready", "attacker failed: {line:?}");
        Attacker {
            child,
            stdin,
            stdout,
            carrier: f[1].parse().expect("carrier fd"),
            port: f[2].parse().expect("port"),
        }
    }

    /// Asks the attacker to receive what its queue holds; its answer.
    fn receive(&mut self) -> String {
        writeln!(self.stdin, "recv").expect("write to the attacker");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read the attacker");
        line.trim().to_owned()
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `scan -p PID --json --fail-on SEVERITY`: exit status and the carrier's finding.
fn scan_carrier(a: &Attacker, fail_on: &str) -> (Option<i32>, Value) {
    let (code, f) = scan_findings(a, fail_on);
    let f = f.unwrap_or_else(|| panic!("no finding for carrier fd {}", a.carrier));
    (code, f)
}

/// `scan -p PID --json --fail-on SEVERITY`: exit status and the carrier's finding, if any.
fn scan_findings(a: &Attacker, fail_on: &str) -> (Option<i32>, Option<Value>) {
    let pid = a.child.id().to_string();
    let out = Command::new(fdaudit())
        .args(["scan", "-p", &pid, "--json", "--fail-on", fail_on])
        .output()
        .expect("run fdaudit scan");
    let text = String::from_utf8_lossy(&out.stdout);
    let records = fdaudit_tests::records(&text);
    assert!(
        text.contains("\"type\":\"summary\""),
        "scan gave no summary: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let finding = records
        .iter()
        .find(|r| r["type"] == "finding" && r["fd"] == a.carrier)
        .cloned();
    (out.status.code(), finding)
}

/// The severity and reason of a finding.
fn rated(f: &Value) -> (&str, &str) {
    (
        f["severity"].as_str().expect("severity"),
        f["reason"].as_str().expect("reason"),
    )
}

#[test]
#[ignore = "needs root"]
fn a_listener_queued_in_an_inheritable_unix_socket_is_rated_as_held() {
    require_root();
    for payload in ["listener", "root", "both"] {
        let mut a = Attacker::start("scm", payload);
        let (code, f) = scan_carrier(&a, "high");
        let (sev, reason) = rated(&f);
        assert_eq!(sev, "critical", "{payload}: {f}");
        assert!(
            reason.contains("in flight") && reason.contains("not know what they are"),
            "{payload}: the reason says the payload is not known: {reason}"
        );
        assert_eq!(code, Some(3), "{payload}: --fail-on high fails: {f}");
        let (code, _) = scan_carrier(&a, "critical");
        assert_eq!(code, Some(3), "{payload}: --fail-on critical fails");
        // Scan took nothing from the queue: the process receives all it was sent.
        let want = match payload {
            "listener" => "received 1: listener",
            "root" => "received 1: directory",
            _ => "received 2: listener directory",
        };
        assert_eq!(a.receive(), want, "{payload}");
    }
}

#[test]
#[ignore = "needs root"]
fn files_registered_in_an_inheritable_io_uring_are_rated_as_held() {
    require_root();
    let a = Attacker::start("uring", "listener");
    let (code, f) = scan_carrier(&a, "critical");
    let (sev, reason) = rated(&f);
    assert_eq!(sev, "critical", "{f}");
    assert!(
        reason.contains(&format!("127.0.0.1:{}", a.port)) && reason.contains("io_uring"),
        "the reason names the registered listener: {reason}"
    );
    assert_eq!(code, Some(3), "--fail-on critical fails: {f}");
    drop(a);

    let a = Attacker::start("uring", "root");
    let (code, f) = scan_carrier(&a, "high");
    let (sev, reason) = rated(&f);
    assert_eq!(sev, "high", "{f}");
    assert!(
        reason.contains("directory /") && reason.contains("slot 0"),
        "the reason names the registered directory: {reason}"
    );
    assert_eq!(code, Some(3), "--fail-on high fails: {f}");
}

#[test]
#[ignore = "needs root"]
fn a_host_directory_in_flight_in_a_private_mount_namespace_is_outside_the_root() {
    require_root();
    // The process's own (close-on-exec) socket, in the scanner's mount namespace: nothing
    // it receives can be outside, no finding.
    let a = Attacker::start("scm-cloexec", "root");
    let (code, f) = scan_findings(&a, "high");
    assert!(f.is_none(), "no finding on the host: {f:?}");
    assert_eq!(code, Some(0));
    drop(a);
    // The same in a mount namespace of its own (a container's shape): the `/` it can
    // receive is the host's.
    let mut a = Attacker::start_in(
        &["unshare", "--mount", "--propagation", "private", "--"],
        "scm-cloexec",
        "root",
    );
    let (code, f) = scan_carrier(&a, "high");
    let (sev, reason) = rated(&f);
    assert_eq!(
        (sev, f["rule"].as_str()),
        ("high", Some("outside_root")),
        "{f}"
    );
    assert!(reason.contains("in flight"), "{reason}");
    assert_eq!(code, Some(3), "--fail-on high fails: {f}");
    assert_eq!(a.receive(), "received 1: directory");
}
