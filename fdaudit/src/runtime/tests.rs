//! The rules on fake executables and maps: no process, no file read.

use std::collections::HashMap;

use super::image::{go_buildinfo_version, remote_devs, token_after};
use super::rules::{Images, Which};
use super::*;

/// (file: None for the executable, section, needle).
type Key = (Option<Vec<u8>>, String, Vec<u8>);
/// (exe, mapped, answers, name, version).
type Case<'a> = (&'a str, &'a [&'a str], Fake, &'a str, Option<&'a str>);

/// Fixed answers: (file, section, needle) → token; the Go version; text files.
#[derive(Default)]
struct Fake {
    found: HashMap<Key, String>,
    go: Option<String>,
    text: HashMap<Vec<u8>, String>,
}

impl Fake {
    fn with(mut self, file: Option<&str>, section: &str, needle: &str, token: &str) -> Fake {
        let key = (
            file.map(|f| f.as_bytes().to_vec()),
            section.to_string(),
            needle.as_bytes().to_vec(),
        );
        self.found.insert(key, token.to_string());
        self
    }
}

impl Images for Fake {
    fn find(&mut self, file: Which<'_>, section: &str, needle: &[u8]) -> Option<String> {
        let f = match file {
            Which::Exe => None,
            Which::Mapped(p) => Some(p.to_vec()),
        };
        self.found
            .get(&(f, section.to_string(), needle.to_vec()))
            .cloned()
    }
    fn go_version(&mut self) -> Option<String> {
        self.go.clone()
    }
    fn text_file(&mut self, path: &[u8]) -> Option<String> {
        self.text.get(path).cloned()
    }
}

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

fn glibc() -> Fake {
    Fake::default().with(Some(LIBC), ".rodata", "release version ", "2.36")
}

fn run(exe: &str, mapped: &[&str], mut images: Fake) -> Runtime {
    let mut all = vec![exe.as_bytes().to_vec()];
    all.extend(mapped.iter().map(|m| m.as_bytes().to_vec()));
    identify(Some(exe.as_bytes()), &all, &mut images)
}

#[test]
fn a_c_program_named_python3_is_glibc_not_cpython() {
    // comm and argv[0] say python3; the image is a C program with libc.
    let rt = run(
        "/tmp/fixture/renamer",
        &[LIBC, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"],
        glibc(),
    );
    assert_eq!((rt.name, rt.version.as_deref()), ("glibc", Some("2.36")));
    assert_eq!(rt.evidence, format!("mapped {LIBC}"));
    assert_eq!(rt.exe.as_deref(), Some("/tmp/fixture/renamer"));
}

#[test]
fn cpython_from_the_interpreter_or_libpython() {
    let rt = run("/usr/bin/python3.11", &[LIBC], glibc());
    assert_eq!((rt.name, rt.version.as_deref()), ("cpython", Some("3.11")));
    assert_eq!(rt.evidence, "exe /usr/bin/python3.11");
    assert_eq!(rt.libc.as_ref().map(|l| l.name), Some("glibc"));
    let lib = "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0";
    let rt = run(
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
        &[lib, LIBC],
        glibc(),
    );
    assert_eq!((rt.name, rt.version.as_deref()), ("cpython", Some("3.12")));
    assert_eq!(rt.evidence, format!("mapped {lib}"));
}

#[test]
fn openjdk_version_from_the_release_file() {
    let jvm = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
    let mut f = glibc();
    f.text.insert(
        b"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/release".to_vec(),
        "wrong".into(),
    );
    f.text.insert(
        b"/usr/lib/jvm/java-17-openjdk-amd64/release".to_vec(),
        "IMPLEMENTOR=\"Debian\"\nJAVA_VERSION=\"17.0.15\"\n".into(),
    );
    let rt = run(
        "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        &[jvm, LIBC],
        f,
    );
    assert_eq!(
        (rt.name, rt.version.as_deref()),
        ("openjdk", Some("17.0.15"))
    );
    // jspawnhelper, gone: its path alone.
    let rt = identify(
        Some(b"/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper"),
        &[],
        &mut image::NoImages,
    );
    assert_eq!((rt.name, rt.version), ("openjdk", None));
}

#[test]
fn go_and_rust_from_their_sections_before_libc() {
    let f = Fake {
        go: Some("1.19.8".into()),
        ..glibc().with(None, ".go.buildinfo", "", "")
    };
    let rt = run("/opt/go_spawn", &[LIBC], f);
    assert_eq!((rt.name, rt.version.as_deref()), ("go", Some("1.19.8")));
    assert_eq!(rt.evidence, "exe /opt/go_spawn has .go.buildinfo");
    let f = glibc()
        .with(None, ".comment", "rustc version ", "1.95.0")
        .with(None, ".comment", "rustc version ", "1.95.0");
    let rt = run("/usr/local/bin/fdaudit", &[LIBC], f);
    assert_eq!((rt.name, rt.version.as_deref()), ("rust", Some("1.95.0")));
}

#[test]
fn interpreters_and_tools_by_image_and_version_string() {
    let cases: &[Case<'_>] = &[
        (
            "/usr/bin/perl",
            &[LIBC],
            glibc().with(None, ".rodata", "/perl/5.", "36.0"),
            "perl",
            Some("5.36.0"),
        ),
        (
            "/usr/bin/bash",
            &[LIBC],
            glibc().with(None, ".rodata", "Bash version ", "5.2.15"),
            "bash",
            Some("5.2.15"),
        ),
        ("/usr/bin/dash", &[LIBC], glibc(), "dash", None),
        (
            "/usr/bin/node",
            &[LIBC],
            glibc().with(None, ".rodata", "node.js/v", "20.20.2"),
            "node",
            Some("20.20.2"),
        ),
        (
            "/usr/bin/ruby3.1",
            &["/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1", LIBC],
            glibc(),
            "ruby",
            Some("3.1"),
        ),
        (
            "/usr/lib/sbcl/sbcl",
            &["/usr/lib/sbcl/sbcl.core", LIBC],
            glibc(),
            "sbcl",
            None,
        ),
        (
            "/tmp/d_spawn",
            &["/usr/lib/x86_64-linux-gnu/libgphobos.so.3", LIBC],
            glibc(),
            "phobos",
            Some("3"),
        ),
        (
            "/tmp/d_static",
            &[LIBC],
            glibc().with(None, ".strtab", "_D3std7process", ""),
            "phobos",
            None,
        ),
        (
            "/usr/lib/systemd/systemd",
            &[
                "/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so",
                LIBC,
            ],
            glibc(),
            "systemd",
            Some("252"),
        ),
        (
            "/usr/sbin/sshd",
            &[LIBC],
            glibc().with(None, ".rodata", "OpenSSH_", "9.2p1"),
            "openssh",
            Some("9.2p1"),
        ),
        ("/usr/bin/sudo", &[LIBC], glibc(), "sudo", None),
        (
            "/usr/bin/rpm",
            &["/usr/lib64/librpm.so.9", LIBC],
            glibc(),
            "rpm",
            None,
        ),
        (
            "/bin/busybox",
            &["/lib/ld-musl-x86_64.so.1"],
            Fake::default(),
            "musl",
            None,
        ),
    ];
    for (exe, mapped, f, name, version) in cases {
        let rt = run(exe, mapped, Fake::default().merge(f));
        assert_eq!(
            (rt.name, rt.version.as_deref()),
            (*name, *version),
            "{exe}: {rt:?}"
        );
    }
}

impl Fake {
    fn merge(mut self, other: &Fake) -> Fake {
        self.found.extend(other.found.clone());
        self.go = other.go.clone();
        self.text.extend(other.text.clone());
        self
    }
}

#[test]
fn nothing_known_is_unknown_with_the_exe() {
    let rt = run("/opt/static-thing", &[], Fake::default());
    assert_eq!(rt.name, "unknown");
    assert_eq!(rt.exe.as_deref(), Some("/opt/static-thing"));
    assert_eq!(rt.label(), "unknown");
}

#[test]
fn maps_limits_and_mountinfo_parse() {
    let maps = b"55d0-55d1 r--p 00000000 fd:01 1234 /usr/bin/python3.11\n\
55d1-55d2 r-xp 00001000 fd:01 1234 /usr/bin/python3.11\n\
7f00-7f01 r--p 00000000 00:2f 99 /mnt/fuse/lib with space.so\n\
7f01-7f02 rw-p 00000000 00:00 0 [heap]\n\
7f02-7f03 r--p 00000000 fd:01 77 /tmp/gone.so (deleted)\n";
    let m = mapped_paths(maps);
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(m[0].dev, (0xfd, 1));
    assert_eq!(m[1].path, b"/mnt/fuse/lib with space.so");
    assert_eq!(m[1].dev, (0, 0x2f));
    let mi = "36 35 98:0 / /mnt1 rw - ext4 /dev/root rw\n\
40 35 0:47 / /mnt/fuse rw,nosuid - fuse.sshfs host:/ rw\n\
41 35 0:48 / /net rw - nfs4 srv:/ rw\n";
    assert_eq!(remote_devs(mi), vec![(0, 47), (0, 48)]);
    let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
Max open files            20000                1048576              files\n";
    assert_eq!(
        parse_nofile(limits),
        Some(Nofile {
            soft: 20000,
            hard: 1_048_576
        })
    );
}

#[test]
fn version_strings_and_go_buildinfo_decode() {
    let libc = b"xxGNU C Library (Debian GLIBC 2.36-9) stable release version 2.36.\n";
    assert_eq!(
        token_after(libc, b"release version ").as_deref(),
        Some("2.36")
    );
    assert_eq!(
        token_after(b"@(#)Bash version 5.2.15(1) release", b"Bash version ").as_deref(),
        Some("5.2.15")
    );
    assert_eq!(token_after(b"abc", b"zzz"), None);
    let mut sec = b"\xff Go buildinf:".to_vec();
    sec.extend([8u8, 2]);
    sec.resize(32, 0);
    sec.push(8);
    sec.extend(b"go1.19.8");
    assert_eq!(go_buildinfo_version(&sec).as_deref(), Some("1.19.8"));
    sec[15] = 0;
    assert_eq!(
        go_buildinfo_version(&sec),
        None,
        "pre-1.18 layout: pointers"
    );
    assert_eq!(parse_major_minor("3.11.7"), Some((3, 11)));
    assert_eq!(parse_major_minor("17"), Some((17, 0)));
}

#[test]
fn this_test_binary_is_rust_on_glibc() {
    // A live process read through /proc: the test binary itself.
    let (rt, nofile) = of_pid(std::process::id()).expect("own /proc entry");
    assert_eq!(rt.name, "rust", "{rt:?}");
    assert!(
        rt.version.as_deref().is_some_and(|v| v.starts_with("1.")),
        "{rt:?}"
    );
    let libc = rt.libc.expect("glibc mapped");
    assert_eq!(libc.name, "glibc");
    assert!(parse_major_minor(libc.version.as_deref().unwrap()).is_some_and(|v| v >= (2, 17)));
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    assert_eq!(nofile.map(|n| n.soft), Some(lim.rlim_cur));
}
