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
    process::{Command, Stdio},
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
    /// fdaudit's peak RSS (KiB), from wait4's rusage.
    max_rss_kib: i64,
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
    let mut c = Command::new(fdaudit());
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
        // SAFETY: our own child, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
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
        max_rss_kib: ru.ru_maxrss,
        stderr,
        records: if ended { records(&text) } else { Vec::new() },
    }
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

/// Writes an ELF header whose `.rodata` spans 96 MiB of a sparse file named libc.so.6,
/// then, while a child truncates it to 4 KiB and grows it back in a loop, forks 60
/// children that each map it (below the real libc, so it is the first libc.so.6 of their
/// maps) and spawn /bin/true: fdaudit names each spawn's runtime from its parent's libc.
const TRUNCATE: &str = r#"
#define _GNU_SOURCE
#include <elf.h>
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
    e->e_shnum = 3;
    e->e_shstrndx = 2;
    Elf64_Shdr *s = (Elf64_Shdr *)(h + 64);
    s[1].sh_name = 1;
    s[1].sh_type = SHT_PROGBITS;
    s[1].sh_flags = SHF_ALLOC;
    s[1].sh_addr = 4096;
    s[1].sh_offset = 4096;
    s[1].sh_size = BIG - 4096;
    s[2].sh_name = 9;
    s[2].sh_type = SHT_STRTAB;
    s[2].sh_offset = 512;
    s[2].sh_size = 19;
    memcpy(h + 512, "\0.rodata\0.shstrtab\0", 19);
    if (pwrite(fd, h, sizeof h, 0) != sizeof h || ftruncate(fd, BIG) != 0) return 4;
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
    let exe = scene.program("truncating-libc", TRUNCATE);
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
