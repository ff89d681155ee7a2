//! `fdaudit trace --origin`, every path to an inheritable fd (issue #38 items 1 and 2):
//! ioctl(FIONCLEX) and the call that made the fd, FIOCLEX and F_SETFD(FD_CLOEXEC) taking it
//! back out, recvmsg/recvmmsg's SCM_RIGHTS fds, the other fd-making calls, "before tracing"
//! only for an fd open when fdaudit attached, and "not seen" with its reason for the rest.
//! Root only (eBPF); the C fixtures are compiled with gcc (the VM guests have none:
//! xtask/src/vm/build.rs leaves this file out there).

use fdaudit_tests::{records, require_root};
use serde_json::Value;

/// One trace at a time (frames are resolved while the fixture lives; see origin.rs).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `trace --origin --json -- CMD`: the spawn of /bin/true (asserting the run succeeded).
fn true_spawn(
    name: &str,
    cmd: &[&std::ffi::OsStr],
    prepare: impl FnOnce(&mut std::process::Command),
) -> Value {
    let (out, text) = fdaudit_tests::trace_to_file(name, |c| {
        c.args(["--origin", "--"]).args(cmd);
        prepare(c);
    });
    fdaudit_tests::assert_success(&out);
    records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"))
}

fn fixture_spawn(name: &str, source: &str) -> Value {
    let exe = fdaudit_tests::build_c_fixture(name, source);
    let spawn = true_spawn(&format!("{name}.jsonl"), &[exe.as_os_str()], |_| {});
    let _ = std::fs::remove_file(&exe);
    spawn
}

fn leaked(spawn: &Value, fd: u64) -> Option<&Value> {
    spawn["leaked_fds"]
        .as_array()
        .expect("leaked_fds")
        .iter()
        .find(|l| l["fd"] == fd)
}

fn origin_of(spawn: &Value, fd: u64) -> &Value {
    &leaked(spawn, fd).unwrap_or_else(|| panic!("fd {fd} did not leak: {spawn}"))["origin"]
}

/// What the fixtures share: fork, exec /bin/true, return its status; an ia32 syscall.
const COMMON: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int run_true(void) {
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* An ia32 syscall (int $0x80) from this 64-bit process. */
static long int80(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return ret;
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn python_s_set_inheritable_names_fionclex_and_the_open_that_made_the_fd() {
    require_root();
    let _serial = serial();
    let script = "import os,subprocess; fd=os.open('/etc/hostname', os.O_RDONLY); \
                  os.set_inheritable(fd, True); subprocess.run(['/bin/true'], close_fds=False)";
    let args: Vec<&std::ffi::OsStr> = ["python3", "-c", script]
        .into_iter()
        .map(std::ffi::OsStr::new)
        .collect();
    let (out, text) = fdaudit_tests::trace_to_file("origin-python.jsonl", |c| {
        c.args(["-v", "--origin", "--"]).args(&args);
    });
    fdaudit_tests::assert_success(&out);
    let summary = records(&text)
        .into_iter()
        .find(|r| r["type"] == "summary")
        .unwrap_or_default();
    let notes: Vec<Value> = records(&text)
        .into_iter()
        .filter(|r| r["type"] == "note")
        .collect();
    let fd = fdaudit_tests::leaked_fd(&text, "/bin/true", "/etc/hostname");
    let o = &fd["origin"];
    // What a failure needs to be told apart, in its last lines (CI keeps a failure's last
    // lines): fdaudit's -v lines (the ring grown? the origin records the kernel sent
    // against those decoded: never sent, or sent and not read), its notes (an origin
    // record come after the spawn?), the records lost and the programs' skipped runs, and
    // the leaked fd with its `not seen` reason (what fdaudit saw of fd 3) last.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let verbose: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("ring buffer") || l.contains("origin records"))
        .collect();
    let notes: Vec<&str> = notes.iter().filter_map(|n| n["message"].as_str()).collect();
    assert_eq!(
        o["syscall"], "ioctl(FIONCLEX)",
        "CPython clears O_CLOEXEC with FIONCLEX. fdaudit's stderr:\n{stderr}\n\
         {verbose:?}\nnotes: {notes:?}\nlost records {} (queue {}), skipped runs {}\n\
         the leaked fd: {fd}",
        summary["lost_records"], summary["queue_dropped_records"], summary["bpf_missed_runs"],
    );
    assert_eq!(o["created_by"]["syscall"], "openat(O_CLOEXEC)", "{o}");
    assert_eq!(o["created_by"]["pid"], o["pid"], "{o}");
    assert!(
        o["created_by"]["time_ns"].as_u64() < o["time_ns"].as_u64(),
        "opened before it was made inheritable: {o}"
    );
}

/// An origin made by an image that exec'd into a process whose earlier image made origins
/// too (a shell's redirection, then `exec python3`), and that is gone before fdaudit reads
/// its maps: the kernel sends the new image's modules with its first origin record, so its
/// frames are resolved. The script stops fdaudit until it has exited (a helper in a session
/// of its own sends SIGCONT a second later). When the old image's modules counted for the
/// new one, the innermost frame had no module (half the time here).
#[test]
#[ignore = "needs root and BTF"]
fn an_exec_d_image_gone_before_its_maps_are_read_has_its_frames_resolved() {
    require_root();
    let _serial = serial();
    let script = "import os,subprocess,signal\n\
                  p=os.getppid()\n\
                  subprocess.Popen(['sh','-c','sleep 1; kill -CONT %d'%p], start_new_session=True)\n\
                  os.kill(p, signal.SIGSTOP)\n\
                  fd=os.open('/etc/hostname', os.O_RDONLY); os.set_inheritable(fd, True)\n\
                  subprocess.run(['/bin/true'], close_fds=False)";
    let (out, text) = fdaudit_tests::trace_to_file("origin-exec-gone.jsonl", |c| {
        // LC_ALL=C: Debian's CPython then opens nothing without O_CLOEXEC at start-up, so
        // the ioctl is the image's first origin record.
        c.env("LC_ALL", "C")
            .args(["--origin", "--", "bash", "-c"])
            .arg(format!("exec 5</etc/passwd; exec python3 -c \"{script}\""));
    });
    fdaudit_tests::assert_success(&out);
    let fd = fdaudit_tests::leaked_fd(&text, "/bin/true", "/etc/hostname");
    let o = &fd["origin"];
    assert_eq!(o["syscall"], "ioctl(FIONCLEX)", "{fd}");
    let native = o["stack"]
        .as_array()
        .and_then(|s| s.iter().find(|f| f["found_by"] != "python"))
        .unwrap_or_else(|| panic!("no native frame: {o}"));
    assert!(
        native["module"]
            .as_str()
            .is_some_and(|m| m.ends_with("/libc.so.6")),
        "the ioctl's frame is in libc: {o}"
    );
    // (Its callers may stop short: the kernel's build ids cover the frames its own walk
    // found, and the stack stops there, saying so.)
    assert!(
        !o["stack_partial"]
            .as_str()
            .is_some_and(|p| p.contains("innermost")),
        "{o}"
    );
}

const FLAGS: &str = r#"
__attribute__((noinline)) int open_cloexec(void) { return open("/etc/hostname", O_RDONLY | O_CLOEXEC); }

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    /* 3: made with O_CLOEXEC in open_cloexec, then FIONCLEX: leaks. First, so that no
       return address of the calls below is left on the stack the open's frames are
       scanned from (a stack scan's known limit, #38 item 3). */
    int c = open_cloexec();
    if (c != 3 || ioctl(c, FIONCLEX)) return 12;
    /* 4: FIONCLEX then FIOCLEX: not inheritable. */
    int a = open_cloexec();
    if (a != 4 || ioctl(a, FIONCLEX) || ioctl(a, FIOCLEX)) return 10;
    /* 5: F_SETFD 0 then F_SETFD FD_CLOEXEC: not inheritable. */
    int b = open_cloexec();
    if (b != 5 || fcntl(b, F_SETFD, 0) || fcntl(b, F_SETFD, FD_CLOEXEC)) return 11;
    /* 6: opened without O_CLOEXEC, FIOCLEX, then made inheritable by an ia32
       fcntl(F_SETFD, 0) fdaudit does not follow: not the open's fault. */
    int d = open("/etc/hostname", O_RDONLY);
    if (d != 6 || ioctl(d, FIOCLEX)) return 13;
    if (int80(55, d, F_SETFD, 0) != 0) return 14;
    return run_true();
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn fionclex_is_an_origin_and_fioclex_or_f_setfd_take_the_fd_back_out() {
    require_root();
    let _serial = serial();
    let spawn = fixture_spawn("origin-flags", &format!("{COMMON}{FLAGS}"));
    assert!(
        leaked(&spawn, 4).is_none(),
        "FIONCLEX then FIOCLEX: {spawn}"
    );
    assert!(
        leaked(&spawn, 5).is_none(),
        "F_SETFD 0 then FD_CLOEXEC: {spawn}"
    );
    let o = origin_of(&spawn, 3);
    assert_eq!(o["syscall"], "ioctl(FIONCLEX)", "{o}");
    let made = &o["created_by"];
    assert_eq!(made["syscall"], "openat(O_CLOEXEC)", "{o}");
    let frames = made["stack"].as_array().expect("the open's stack");
    assert!(
        frames.iter().any(|f| f["symbol"]
            .as_str()
            .unwrap_or("")
            .starts_with("open_cloexec+")),
        "the creating call's frames name open_cloexec: {made}"
    );
    // The last call fdaudit saw on fd 6 set close-on-exec: the ia32 fcntl that cleared it
    // was not seen, and the open is not blamed.
    let o = origin_of(&spawn, 6);
    assert_eq!(o["unknown"], "not seen", "{o}");
    let why = o["reason"].as_str().unwrap_or("");
    assert!(
        why.contains("ioctl(FIOCLEX)") && why.contains("an ia32 call (fcntl)"),
        "{o}"
    );
}

const RECVMSG: &str = r#"
#include <string.h>
#include <sys/socket.h>

static int send_fd(int sock, int fd) {
    char byte = 'x', buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { &byte, 1 };
    struct msghdr m = { 0 };
    memset(buf, 0, sizeof buf);
    m.msg_iov = &iov; m.msg_iovlen = 1; m.msg_control = buf; m.msg_controllen = sizeof buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET; c->cmsg_type = SCM_RIGHTS; c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static void prepare(struct msghdr *m, struct iovec *iov, char *byte, char *buf, size_t len) {
    memset(m, 0, sizeof *m);
    iov->iov_base = byte; iov->iov_len = 1;
    m->msg_iov = iov; m->msg_iovlen = 1; m->msg_control = buf; m->msg_controllen = len;
}

static int recv_fd(int sock, int flags) {
    char byte, buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov; struct msghdr m;
    prepare(&m, &iov, &byte, buf, sizeof buf);
    if (recvmsg(sock, &m, flags) != 1) return -1;
    int fd; memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof fd);
    return fd;
}

static int recvm_fd(int sock) {
    char byte, buf[CMSG_SPACE(sizeof(int))];
    struct mmsghdr mm; memset(&mm, 0, sizeof mm);
    struct iovec iov;
    prepare(&mm.msg_hdr, &iov, &byte, buf, sizeof buf);
    if (recvmmsg(sock, &mm, 1, 0, 0) != 1) return -1;
    int fd; memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mm.msg_hdr)), sizeof fd);
    return fd;
}

int main(void) {
    int sv[2];
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv)) return 10;       /* 3, 4 */
    int f = open("/etc/hostname", O_RDONLY | O_CLOEXEC);                       /* 5 */
    if (f != 5) return 11;
    if (send_fd(sv[0], f) || recv_fd(sv[1], 0) != 6) return 12;                 /* leaks */
    if (send_fd(sv[0], f) || recv_fd(sv[1], MSG_CMSG_CLOEXEC) != 7) return 13;  /* not */
    if (send_fd(sv[0], f) || recvm_fd(sv[1]) != 8) return 14;                   /* leaks */
    return run_true();
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn fds_received_by_recvmsg_or_recvmmsg_without_msg_cmsg_cloexec_are_origins() {
    require_root();
    let _serial = serial();
    let spawn = fixture_spawn("origin-recvmsg", &format!("{COMMON}{RECVMSG}"));
    assert_eq!(origin_of(&spawn, 6)["syscall"], "recvmsg", "{spawn}");
    assert!(leaked(&spawn, 7).is_none(), "MSG_CMSG_CLOEXEC: {spawn}");
    assert_eq!(origin_of(&spawn, 8)["syscall"], "recvmmsg", "{spawn}");
    for fd in [3, 4, 5] {
        assert!(
            leaked(&spawn, fd).is_none(),
            "fd {fd} has close-on-exec: {spawn}"
        );
    }
}

const MAKERS: &str = r#"
#include <linux/perf_event.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    sigset_t mask; sigemptyset(&mask);
    struct perf_event_attr pe; memset(&pe, 0, sizeof pe);
    pe.size = sizeof pe; pe.type = PERF_TYPE_SOFTWARE; pe.config = PERF_COUNT_SW_DUMMY;
    int fds[] = {
        eventfd(0, 0),                                    /* 3 */
        memfd_create("origin", 0),                        /* 4 */
        timerfd_create(CLOCK_MONOTONIC, 0),               /* 5 */
        signalfd(-1, &mask, 0),                           /* 6 */
        epoll_create1(0),                                 /* 7 */
        inotify_init1(0),                                 /* 8 */
        (int)syscall(SYS_userfaultfd, 0),                 /* 9 */
        fanotify_init(FAN_CLASS_NOTIF, O_RDONLY),         /* 10 */
        (int)syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0), /* 11 */
        (int)syscall(SYS_pidfd_open, getpid(), 0),        /* 12, always close-on-exec */
        eventfd(0, EFD_CLOEXEC),                          /* 13 */
    };
    for (int i = 0; i < (int)(sizeof fds / sizeof fds[0]); i++)
        if (fds[i] != 3 + i) return 20 + i;
    if (ioctl(12, FIONCLEX)) return 40;
    return run_true();
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn every_fd_making_call_without_its_cloexec_flag_is_an_origin() {
    require_root();
    let _serial = serial();
    let spawn = fixture_spawn("origin-makers", &format!("{COMMON}{MAKERS}"));
    let want = [
        (3, "eventfd2"),
        (4, "memfd_create"),
        (5, "timerfd_create"),
        (6, "signalfd4"),
        (7, "epoll_create1"),
        (8, "inotify_init1"),
        (9, "userfaultfd"),
        (10, "fanotify_init"),
        (11, "perf_event_open"),
        (12, "ioctl(FIONCLEX)"),
    ];
    for (fd, call) in want {
        assert_eq!(origin_of(&spawn, fd)["syscall"], call, "fd {fd}: {spawn}");
    }
    assert_eq!(
        origin_of(&spawn, 12)["created_by"]["syscall"],
        "pidfd_open",
        "{spawn}"
    );
    assert!(leaked(&spawn, 13).is_none(), "EFD_CLOEXEC: {spawn}");
}

const IA32: &str = r#"
int main(void) {
    /* fd 7 came from fdaudit's caller: open before tracing. */
    if (fcntl(7, F_GETFD) != 0) return 10;
    int f = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
    if (f < 0 || int80(63, f, 30, 0) != 30) return 11;   /* i386 dup2 */
    return run_true();
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn before_tracing_is_an_fd_the_caller_passed_and_an_ia32_dup2_is_not_seen() {
    use std::os::unix::process::CommandExt as _;
    require_root();
    let _serial = serial();
    let exe = fdaudit_tests::build_c_fixture("origin-ia32", &format!("{COMMON}{IA32}"));
    let spawn = true_spawn("origin-ia32.jsonl", &[exe.as_os_str()], |c| {
        // fdaudit's caller holds /etc/hostname at fd 7 without close-on-exec.
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            c.pre_exec(|| {
                let fd = libc::open(c"/etc/hostname".as_ptr(), libc::O_RDONLY);
                if fd < 0 || libc::dup2(fd, 7) != 7 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let _ = std::fs::remove_file(&exe);
    fd_7_before_tracing_and_fd_30_not_seen(&spawn);
}

/// fd 7, open when fdaudit attached, is "before tracing"; fd 30, made since by an ia32
/// dup2, is "not seen" and says why.
fn fd_7_before_tracing_and_fd_30_not_seen(spawn: &Value) {
    let o = origin_of(spawn, 7);
    assert_eq!(o["unknown"], "before tracing", "{o}");
    assert!(o.get("reason").is_none(), "{o}");
    let o = origin_of(spawn, 30);
    assert_eq!(o["unknown"], "not seen", "{o}");
    assert!(
        o["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("an ia32 call (dup2) by pid "),
        "{o}"
    );
}

/// Holds /etc/hostname at fd 7 (open before fdaudit attaches), says `ready PID`, waits for
/// a line on stdin, then makes fd 30 by an ia32 dup2 and runs /bin/true.
const ATTACH: &str = r#"
#include <stdio.h>

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int f = open("/etc/hostname", O_RDONLY);
    if (f < 0 || dup2(f, 7) != 7 || close(f)) return 10;
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[8];
    if (!fgets(line, sizeof line, stdin)) return 11;
    if (int80(63, 7, 30, 0) != 30) return 12;   /* i386 dup2 */
    return run_true();
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn with_p_before_tracing_is_an_fd_open_at_attach_and_a_later_unseen_one_is_not() {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::process::{Command, Stdio};
    require_root();
    let _serial = serial();
    let exe = fdaudit_tests::build_c_fixture("origin-attach", &format!("{COMMON}{ATTACH}"));
    let mut fx = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture");
    let mut out = BufReader::new(fx.stdout.take().expect("stdout"));
    let mut ready = String::new();
    out.read_line(&mut ready).expect("the fixture's ready line");
    let pid = ready
        .trim()
        .strip_prefix("ready ")
        .expect("ready PID")
        .to_owned();
    // With -p and --json every record, the "tracing ..." note included, is on stdout.
    let mut tracer = Command::new(fdaudit_tests::fdaudit())
        .args(["trace", "--json", "--origin", "-p", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the tracer");
    let mut reader = BufReader::new(tracer.stdout.take().expect("stdout"));
    let mut text = String::new();
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).expect("read") > 0,
            "tracer ended: {text}"
        );
        text.push_str(&line);
        if line.contains("Ctrl-C to stop") {
            break;
        }
    }
    fx.stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("write");
    let status = fx.wait().expect("wait for the fixture");
    let _ = std::fs::remove_file(&exe);
    assert!(status.success(), "fixture: {status}");
    reader.read_to_string(&mut text).expect("read");
    assert!(tracer.wait().expect("wait").success(), "{text}");
    let spawn = records(&text)
        .into_iter()
        .find(|r| r["type"] == "spawn" && r["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {text}"));
    fd_7_before_tracing_and_fd_30_not_seen(&spawn);
}

/// An fd opened through io_uring (IORING_OP_OPENAT without O_CLOEXEC: no open syscall);
/// the ring's own fd is close-on-exec.
const URING: &str = r#"
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* One IORING_OP_OPENAT of /etc/hostname without O_CLOEXEC, through a ring: no open
   syscall. Returns the new fd. */
static int uring_open(void) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = (int)syscall(SYS_io_uring_setup, 4, &p);
    if (ring < 0) return -1;
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe),
        PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) return -2;
    unsigned tail = *(unsigned *)(sq + p.sq_off.tail);
    unsigned idx = tail & *(unsigned *)(sq + p.sq_off.ring_mask);
    struct io_uring_sqe *e = &sqes[idx];
    memset(e, 0, sizeof *e);
    e->opcode = IORING_OP_OPENAT;
    e->fd = AT_FDCWD;
    e->addr = (unsigned long)"/etc/hostname";
    e->open_flags = O_RDONLY;
    ((unsigned *)(sq + p.sq_off.array))[idx] = idx;
    __atomic_store_n((unsigned *)(sq + p.sq_off.tail), tail + 1, __ATOMIC_RELEASE);
    if (syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, 0, 0) != 1) return -3;
    unsigned head = __atomic_load_n((unsigned *)(cq + p.cq_off.head), __ATOMIC_ACQUIRE);
    struct io_uring_cqe *c = (struct io_uring_cqe *)(cq + p.cq_off.cqes) +
        (head & *(unsigned *)(cq + p.cq_off.ring_mask));
    return c->res;
}

int main(void) {
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int fd = uring_open();
    if (fd < 0) { fprintf(stderr, "io_uring open: %d\n", fd); return 10; }
    return run_true();
}
"#;

#[test]
#[ignore = "needs root and BTF"]
fn an_fd_opened_through_io_uring_is_not_seen_and_says_so() {
    require_root();
    let _serial = serial();
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .unwrap_or_else(|_| "0".into())
            .trim(),
        "0",
        "io_uring is disabled on this machine (kernel.io_uring_disabled)"
    );
    let spawn = fixture_spawn("origin-uring", &format!("{COMMON}{URING}"));
    let o = origin_of(&spawn, 4);
    assert_eq!(o["unknown"], "not seen", "{o}");
    assert!(
        o["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("io_uring (io_uring_setup by pid "),
        "{o}"
    );
    assert!(
        leaked(&spawn, 3).is_none(),
        "the ring's fd is close-on-exec: {spawn}"
    );
}
