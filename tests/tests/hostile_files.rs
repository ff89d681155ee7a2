//! Files a traced program controls, thrown at `fdaudit trace` by an unprivileged user
//! (nobody, through setpriv): a "libc.so.6" it truncates while runtime identification reads
//! it (a mapping of it would kill fdaudit with SIGBUS), an executable replaced by a FIFO or by
//! a symlink to a root-only file while `--origin` symbolizes its frames (a blocking open would
//! hang the trace, a followed link would make root read the target), and mappings, hard links
//! to a large sparse file and forged frame chains that would multiply fdaudit's memory and
//! CPU. Root only (eBPF and setpriv); the C fixtures are compiled here with gcc.

use std::{
    os::unix::{ffi::OsStrExt as _, fs::PermissionsExt as _},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use fdaudit_tests::{build_c_fixture, fdaudit, guard, of_type, records, temp_path};
use serde_json::Value;

const NOBODY: u32 = 65534;

/// A fresh directory that nobody owns (the attacker writes there), under a root-only one
/// that also holds what the attack must never reach.
struct Scene {
    root: PathBuf,
    dir: PathBuf,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let root = temp_path(name);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("create the scene");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
            .expect("chmod the scene");
        let dir = root.join("nobody");
        std::fs::create_dir(&dir).expect("create nobody's directory");
        chown_nobody(&dir);
        Scene { root, dir }
    }

    /// Compiles `source` and puts the program in nobody's directory, nobody's.
    fn program(&self, name: &str, source: &str) -> PathBuf {
        let built = build_c_fixture(name, source);
        let exe = self.dir.join(name);
        std::fs::copy(&built, &exe).expect("copy the fixture");
        let _ = std::fs::remove_file(&built);
        chown_nobody(&exe);
        exe
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn chown_nobody(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("a path");
    // SAFETY: a valid path.
    let rc = unsafe { libc::chown(c.as_ptr(), NOBODY, NOBODY) };
    assert_eq!(rc, 0, "chown {} to nobody", p.display());
}

/// How a bounded run of fdaudit ended.
struct Run {
    /// The wait status (None: killed at the deadline).
    status: Option<i32>,
    elapsed: Duration,
    /// fdaudit's peak RSS (KiB, from `time`) and CPU time (user and system, wait4's
    /// rusage).
    max_rss_kib: i64,
    cpu: Duration,
    stderr: String,
    records: Vec<Value>,
}

/// `fdaudit trace --json -o FILE ARGS -- setpriv (as nobody) -- CMD...`, killed after
/// `limit` if it has not ended.
#[expect(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also gives its rusage"
)]
fn trace_as_nobody(args: &[&str], cmd: &[&std::ffi::OsStr], limit: Duration) -> Run {
    let out = temp_path("hostile-files.jsonl");
    let err = temp_path("hostile-files.stderr");
    let (mut c, rss_file) = fdaudit_tests::measured(&fdaudit());
    c.args(["trace", "--json", "-o"])
        .arg(&out)
        .args(args)
        .args([
            "--",
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
        ])
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("create the stderr file"));
    let child = c.spawn().expect("start fdaudit");
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let mut status = 0;
    // SAFETY: rusage is plain integers.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut ended = false;
    while start.elapsed() < limit {
        // SAFETY: our own child; status and ru are valid.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        if rc == pid {
            ended = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed();
    if !ended {
        // SAFETY: the group `measured` made (time and fdaudit), our own child not yet reaped.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::wait4(pid, &mut status, 0, &mut ru);
        }
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&err);
    Run {
        status: ended.then_some(status),
        elapsed,
        max_rss_kib: if ended {
            fdaudit_tests::peak_rss_kib(&rss_file)
        } else {
            0
        },
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        stderr,
        records: if ended { records(&text) } else { Vec::new() },
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
}

impl Run {
    /// Panics unless fdaudit ended by itself, with its own status and its summary.
    fn assert_finished(&self, what: &str) -> &Value {
        let status = self.status.unwrap_or_else(|| {
            panic!(
                "{what}: fdaudit still ran after {:?} (hung): {}",
                self.elapsed, self.stderr
            )
        });
        assert!(
            libc::WIFEXITED(status),
            "{what}: fdaudit died of signal {} (135 = SIGBUS): {}",
            libc::WTERMSIG(status),
            self.stderr
        );
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "{what}: fdaudit's status is not the command's 0: {}",
            self.stderr
        );
        // The unit's MemoryMax (deploy/): whatever the traced processes map.
        assert!(
            self.max_rss_kib < 256 << 10,
            "{what}: fdaudit's peak RSS was {} MiB, over 256 MiB",
            self.max_rss_kib >> 10
        );
        of_type(&self.records, "summary")
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{what}: no summary record: {}", self.stderr))
    }
}

/// C shared by the fixtures: `write_elf` makes `fd` a sparse ELF64 file of `size` bytes
/// whose headers say what `sections` (n of them, the first the null one, the last the
/// names') say; the names at offset 1024.
const ELF_WRITER: &str = r#"
#define _GNU_SOURCE
#include <elf.h>
#include <string.h>
#include <unistd.h>

static int write_elf(int fd, long size, Elf64_Shdr *sections, int n, const char *names, size_t len) {
    unsigned char h[4096];
    memset(h, 0, sizeof h);
    Elf64_Ehdr *e = (Elf64_Ehdr *)h;
    memcpy(e->e_ident, ELFMAG, SELFMAG);
    e->e_ident[EI_CLASS] = ELFCLASS64;
    e->e_ident[EI_DATA] = ELFDATA2LSB;
    e->e_ident[EI_VERSION] = EV_CURRENT;
    e->e_type = ET_DYN;
    e->e_machine = EM_X86_64;
    e->e_version = EV_CURRENT;
    e->e_ehsize = sizeof(Elf64_Ehdr);
    e->e_shoff = 64;
    e->e_shentsize = sizeof(Elf64_Shdr);
    e->e_shnum = n;
    e->e_shstrndx = n - 1;
    sections[n - 1].sh_type = SHT_STRTAB;
    sections[n - 1].sh_offset = 1024;
    sections[n - 1].sh_size = len;
    memcpy(h + 64, sections, n * sizeof *sections);
    memcpy(h + 1024, names, len);
    return pwrite(fd, h, sizeof h, 0) == sizeof h && ftruncate(fd, size) == 0 ? 0 : -1;
}
"#;

/// Writes an ELF header whose `.rodata` spans 96 MiB of a sparse file named libc.so.6,
/// then, while a child truncates it to 4 KiB and grows it back in a loop, forks 60
/// children that each map it (below the real libc, so it is the first libc.so.6 of their
/// maps) and spawn /bin/true: fdaudit names each spawn's runtime from its parent's libc.
const TRUNCATE: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (96L << 20)

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 3;
    Elf64_Shdr s[3] = {{0},
                       {.sh_name = 1, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC,
                        .sh_addr = 4096, .sh_offset = 4096, .sh_size = BIG - 4096},
                       {.sh_name = 9}};
    if (write_elf(fd, BIG, s, 3, "\0.rodata\0.shstrtab", 19) != 0) return 4;
    pid_t cutter = fork();
    if (cutter == 0) {
        for (;;) {
            ftruncate(fd, 4096);
            usleep(500);
            ftruncate(fd, BIG);
            usleep(500);
        }
    }
    for (int i = 0; i < 60; i++) {
        pid_t c = fork();
        if (c == 0) {
            void *want = (void *)0x10000000;
            if (mmap(want, BIG, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0) != want)
                _exit(5);
            pid_t t = fork();
            if (t == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
            waitpid(t, 0, 0);
            _exit(0);
        }
        int st;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { kill(cutter, SIGKILL); return 6; }
    }
    kill(cutter, SIGKILL);
    waitpid(cutter, 0, 0);
    return 0;
}
"#;

#[test]
#[ignore = "needs root"]
fn a_libc_truncated_while_it_is_read_does_not_kill_the_trace() {
    let _g = guard();
    let scene = Scene::new("truncate");
    let exe = scene.program("truncating-libc", &format!("{ELF_WRITER}{TRUNCATE}"));
    let lib = scene.dir.join("libc.so.6");
    let run = trace_as_nobody(
        &[],
        &[exe.as_os_str(), lib.as_os_str()],
        Duration::from_secs(120),
    );
    let summary = run.assert_finished("a truncated libc.so.6");
    let spawns = of_type(&run.records, "spawn");
    let trues = spawns
        .iter()
        .filter(|s| s["exec_path"] == "/bin/true")
        .count();
    assert_eq!(trues, 60, "every spawn is reported: {summary}");
    // Named from the attacker's file (a glibc without a version: the file holds none).
    assert!(
        spawns.iter().any(|s| s["runtime"]["libc"] == "glibc"),
        "the mapped libc.so.6 is what names the C library: {:?}",
        spawns.first()
    );
}

/// Opens /etc/hostname without O_CLOEXEC in a named function, then deletes its own
/// executable and puts at that path a FIFO (`fifo`) or a symlink to argv[2] (`symlink`):
/// what /proc/PID/maps names "PATH (deleted)" is now something else. Then it forks and
/// execs /bin/true (fd 3 leaks into it), and lives a little longer.
const SWAP_EXE: &str = r#"
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) int open_it(void) { return open("/etc/hostname", O_RDONLY); }

int main(int argc, char **argv) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (argc < 2 || n <= 0) return 2;
    self[n] = 0;
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (open_it() != 3) return 10;
    if (unlink(self) != 0) return 11;
    if (strcmp(argv[1], "fifo") == 0) {
        if (mkfifo(self, 0644) != 0) return 12;
    } else if (argc < 3 || symlink(argv[2], self) != 0) {
        return 13;
    }
    usleep(300000);
    pid_t pid = fork();
    if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(pid, &st, 0);
    usleep(500000);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

/// The origin of the fd 3 that /bin/true got.
fn origin_of_fd3(run: &Run) -> &Value {
    let spawn = of_type(&run.records, "spawn")
        .into_iter()
        .find(|s| s["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {}", run.stderr));
    let leaked = spawn["leaked_fds"].as_array().expect("leaked_fds");
    let fd3 = leaked
        .iter()
        .find(|l| l["fd"] == 3)
        .unwrap_or_else(|| panic!("fd 3 did not leak: {spawn}"));
    &fd3["origin"]
}

/// Whether a frame of `origin` names the fixture's `open_it`.
fn names_open_it(origin: &Value) -> bool {
    origin["stack"].as_array().is_some_and(|frames| {
        frames
            .iter()
            .any(|f| f["symbol"].as_str().unwrap_or("").starts_with("open_it+"))
    })
}

#[test]
#[ignore = "needs root"]
fn an_executable_replaced_by_a_fifo_neither_hangs_origin_nor_gets_a_reader() {
    let _g = guard();
    let scene = Scene::new("fifo");
    let exe = scene.program("swap-exe-fifo", SWAP_EXE);
    // A writer opens a FIFO without blocking only while it has a reader: fdaudit must never
    // be one.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let (stop, path) = (std::sync::Arc::clone(&stop), exe.clone());
        std::thread::spawn(move || {
            let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path");
            let mut readers = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Only once the path is the FIFO (a write open of the executable before that
                // would make its exec fail with ETXTBSY).
                let is_fifo = std::fs::symlink_metadata(&path).is_ok_and(|m| {
                    use std::os::unix::fs::FileTypeExt as _;
                    m.file_type().is_fifo()
                });
                if !is_fifo {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                // SAFETY: a valid path; the fd is closed at once.
                let fd = unsafe {
                    libc::open(
                        c.as_ptr(),
                        libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
                    )
                };
                if fd >= 0 {
                    readers += 1;
                    // SAFETY: our fd.
                    unsafe { libc::close(fd) };
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            readers
        })
    };
    let run = trace_as_nobody(
        &["--origin"],
        &[exe.as_os_str(), "fifo".as_ref()],
        Duration::from_secs(60),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let readers = probe.join().expect("the probe thread");
    assert_eq!(readers, 0, "the FIFO at the executable's path got a reader");
    run.assert_finished("an executable replaced by a FIFO");
    let origin = origin_of_fd3(&run);
    assert_eq!(origin["syscall"], "openat", "{origin}");
    // Named from the mapped file itself (map_files), not from what its path is now.
    assert!(names_open_it(origin), "{origin}");
}

#[test]
#[ignore = "needs root"]
fn an_executable_replaced_by_a_symlink_does_not_make_root_read_its_target() {
    let _g = guard();
    let scene = Scene::new("symlink");
    let exe = scene.program("swap-exe-link", SWAP_EXE);
    // Root's, unreadable to nobody; watched for any open or read.
    let secret = scene.root.join("secret");
    std::fs::copy(&exe, &secret).expect("write the secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600))
        .expect("chmod the secret");
    // SAFETY: plain calls; the fd is ours.
    let ino = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(ino >= 0, "inotify_init1");
    let c = std::ffi::CString::new(secret.as_os_str().as_bytes()).expect("a path");
    // SAFETY: a valid fd and path.
    let wd = unsafe { libc::inotify_add_watch(ino, c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS) };
    assert!(wd >= 0, "inotify_add_watch");
    let run = trace_as_nobody(
        &["--origin"],
        &[exe.as_os_str(), "symlink".as_ref(), secret.as_os_str()],
        Duration::from_secs(60),
    );
    let mut buf = [0u8; 4096];
    // SAFETY: reads into our buffer from our fd.
    let n = unsafe { libc::read(ino, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: our fd.
    unsafe { libc::close(ino) };
    assert!(
        n <= 0,
        "fdaudit opened or read the symlink's root-only target ({n} bytes of inotify events)"
    );
    run.assert_finished("an executable replaced by a symlink");
    let origin = origin_of_fd3(&run);
    assert_eq!(origin["syscall"], "openat", "{origin}");
    assert!(names_open_it(origin), "{origin}");
}

/// Maps three hard links to one 320 MiB sparse ELF file (its headers claim a symbol table
/// and DWARF of hundreds of MiB) and 60,000 small executable mappings of another file, then
/// makes 200 openat calls (no O_CLOEXEC) with a forged frame chain (rbp pointing at a chain
/// whose return addresses are in the three links, then in no mapping at all), and forks
/// and execs /bin/true: every fd leaks and each origin's 16 frames are named. It stays
/// alive meanwhile, so that its maps (60,000 lines) are there to be read for each frame.
const MULTIPLY: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG (320L << 20)
#define LINKS 3
#define MAPS 60000
#define CALLS 200

/* Headers that claim a symbol table and DWARF of hundreds of MiB. */
static int write_big_elf(int fd) {
    const char names[] = "\0.text\0.symtab\0.strtab\0.debug_info\0.shstrtab";
    Elf64_Shdr s[6] = {
        {0},
        {.sh_name = 1, .sh_type = SHT_PROGBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
         .sh_addr = 0x1000, .sh_offset = 0x1000, .sh_size = 0x100000},
        {.sh_name = 7, .sh_type = SHT_SYMTAB, .sh_offset = 0x200000, .sh_size = BIG - 0x400000,
         .sh_link = 3, .sh_entsize = sizeof(Elf64_Sym)},
        {.sh_name = 15, .sh_type = SHT_STRTAB, .sh_offset = 0x200000, .sh_size = 0x100000},
        {.sh_name = 23, .sh_type = SHT_PROGBITS, .sh_offset = 0x200000, .sh_size = BIG - 0x200000},
        {.sh_name = 35},
    };
    return write_elf(fd, BIG, s, 6, names, sizeof names);
}

struct frame { struct frame *next; unsigned long ret; };
static struct frame chain[17];

/* openat(AT_FDCWD, path, O_RDONLY) with rbp at the forged chain. */
static long forged_openat(const char *path) {
    long ret;
    __asm__ volatile(
        "sub $128, %%rsp\n\t"
        "push %%rbp\n\t"
        "mov %[chain], %%rbp\n\t"
        "mov $257, %%eax\n\t"
        "mov $-100, %%rdi\n\t"
        "mov %[path], %%rsi\n\t"
        "xor %%edx, %%edx\n\t"
        "syscall\n\t"
        "pop %%rbp\n\t"
        "add $128, %%rsp\n\t"
        : "=&a"(ret)
        : [chain] "r"(chain), [path] "r"(path)
        : "rdi", "rsi", "rdx", "rcx", "r11", "memory", "cc");
    return ret;
}

int main(int argc, char **argv) {
    char big[4096], link_path[4096], many[4096];
    if (argc < 2) return 2;
    snprintf(big, sizeof big, "%s/big", argv[1]);
    int fd = open(big, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (fd < 0 || write_big_elf(fd) != 0) return 3;
    unsigned long base[LINKS];
    for (int i = 0; i < LINKS; i++) {
        snprintf(link_path, sizeof link_path, "%s/lib%d.so", argv[1], i);
        unlink(link_path);
        if (link(big, link_path) != 0) return 4;
        int lf = open(link_path, O_RDONLY | O_CLOEXEC);
        /* Low, so that they come first in maps, before the many mappings below. */
        void *want = (void *)(0x200000000UL + i * 0x10000000UL);
        void *m = mmap(want, 1 << 20, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED_NOREPLACE, lf, 0);
        if (lf < 0 || m != want) return 5;
        base[i] = (unsigned long)m;
        close(lf);
    }
    /* A long name: each of its maps lines is ~300 bytes, 18 MB in all. */
    char name[201];
    memset(name, 'm', 200);
    name[200] = 0;
    snprintf(many, sizeof many, "%s/%s", argv[1], name);
    int mf = open(many, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (mf < 0 || ftruncate(mf, 2L * MAPS * 4096) != 0) return 6;
    for (long i = 0; i < MAPS; i++)
        if (mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, mf, i * 2 * 4096) == MAP_FAILED) return 7;
    for (int i = 0; i < 16; i++) {
        chain[i].next = &chain[i + 1];
        chain[i].ret = i < LINKS ? base[i] + 0x1000 + 16 * i : 0x1000 + 64 * i;
    }
    for (int i = 0; i < CALLS; i++)
        if (forged_openat("/etc/hostname") < 0) return 8;
    /* Alive while fdaudit decodes the records: it reads this process's maps for them. */
    sleep(2);
    pid_t p = fork();
    if (p == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
"#;

#[test]
#[ignore = "needs root"]
fn mappings_hard_links_and_forged_frames_do_not_multiply_memory_or_cpu() {
    let _g = guard();
    let scene = Scene::new("multiply");
    let exe = scene.program("multiply", &format!("{ELF_WRITER}{MULTIPLY}"));
    let run = trace_as_nobody(
        &["--origin"],
        &[exe.as_os_str(), scene.dir.as_os_str()],
        Duration::from_secs(180),
    );
    // assert_finished checks the peak RSS against the unit's 256 MiB.
    run.assert_finished("many mappings, hard links and forged frames");
    eprintln!(
        "fdaudit: peak RSS {} MiB, CPU {:?}, {:?} in all",
        run.max_rss_kib >> 10,
        run.cpu,
        run.elapsed
    );
    let spawn = of_type(&run.records, "spawn")
        .into_iter()
        .find(|s| s["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no spawn of /bin/true: {}", run.stderr));
    let leaked = spawn["leaked_fds"].as_array().expect("leaked_fds");
    assert!(
        leaked.len() >= 64,
        "the forged calls' fds leak: {}",
        leaked.len()
    );
    let forged = leaked
        .iter()
        .filter(|l| l["origin"]["syscall"] == "openat")
        .count();
    assert!(
        forged >= 60,
        "each has its origin: {forged} of {}",
        leaked.len()
    );
    // 200 records of 16 frames each: at most 50 ms of CPU per record, fdaudit's own start
    // (loading and attaching its programs, the probes' calibration) included.
    assert!(
        run.cpu < Duration::from_secs(10),
        "fdaudit used {:?} of CPU for 200 origin records",
        run.cpu
    );
}
