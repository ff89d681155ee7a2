//! The rules that name a spawning process's runtime from its executable and the objects it
//! has mapped (never from `comm` or argv, which a process sets itself): one table, the
//! first rule that matches wins; the C library is named apart.

use super::{Libc, Runtime};

/// Which file a rule reads: the process's executable, or a mapped object (its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which<'a> {
    Exe,
    Mapped(&'a [u8]),
}

/// Bounded reads of the files a rule names (the real one reads the process's images, see
/// `image.rs`; unit tests give fixed answers).
pub trait Images {
    /// The version-like token after `needle` in `section` of `file` (`Some("")` when the
    /// needle is there with no token after it), `None` when absent or unreadable.
    fn find(&mut self, file: Which<'_>, section: &str, needle: &[u8]) -> Option<String>;
    /// The Go version in the executable's `.go.buildinfo`.
    fn go_version(&mut self) -> Option<String>;
    /// A small text file (a JDK's `release`), by its path in the process's view.
    fn text_file(&mut self, path: &[u8]) -> Option<String>;
}

/// When a rule applies.
#[derive(Clone, Copy)]
enum Match {
    /// The executable's file name.
    Exe(fn(&[u8]) -> bool),
    /// A mapped object's file name.
    Mapped(fn(&[u8]) -> bool),
    /// The executable has this section (with this string in it, when given).
    ExeHas(&'static str, Option<&'static [u8]>),
}

/// Where a rule finds the version.
#[derive(Clone, Copy)]
enum Version {
    None,
    /// From the matched file's name.
    Name(fn(&[u8]) -> Option<String>),
    /// The token after a needle in a section of the matched file, prefixed.
    Find(&'static str, &'static [u8], &'static str),
    Go,
    /// `JAVA_VERSION` in the JDK's `release` file.
    JavaRelease,
}

struct Rule {
    name: &'static str,
    when: &'static [Match],
    version: Version,
}

const RULES: &[Rule] = &[
    Rule {
        name: "openjdk",
        when: &[
            Match::Mapped(|f| f == b"libjvm.so"),
            Match::Exe(|f| f == b"jspawnhelper" || f == b"java"),
        ],
        version: Version::JavaRelease,
    },
    Rule {
        name: "cpython",
        when: &[
            Match::Mapped(|f| f.starts_with(b"libpython3.") || f.starts_with(b"libpython2.")),
            Match::Exe(|f| python_version(f).is_some() || f == b"python3" || f == b"python"),
        ],
        version: Version::Name(python_version),
    },
    Rule {
        name: "node",
        when: &[
            Match::Exe(|f| f == b"node" || f == b"nodejs"),
            Match::Mapped(|f| f.starts_with(b"libnode.so")),
        ],
        version: Version::Find(".rodata", b"node.js/v", ""),
    },
    Rule {
        name: "ruby",
        when: &[
            Match::Mapped(|f| f.starts_with(b"libruby")),
            Match::Exe(|f| f.starts_with(b"ruby")),
        ],
        version: Version::Name(ruby_version),
    },
    Rule {
        name: "perl",
        when: &[
            Match::Mapped(|f| f.starts_with(b"libperl.so")),
            Match::Exe(|f| f.starts_with(b"perl")),
        ],
        version: Version::Find(".rodata", b"/perl/5.", "5."),
    },
    Rule {
        name: "sbcl",
        when: &[
            Match::Exe(|f| f == b"sbcl"),
            Match::Mapped(|f| f == b"sbcl.core"),
        ],
        version: Version::None,
    },
    Rule {
        name: "go",
        when: &[Match::ExeHas(".go.buildinfo", None)],
        version: Version::Go,
    },
    Rule {
        name: "rust",
        when: &[Match::ExeHas(".comment", Some(b"rustc version "))],
        version: Version::Find(".comment", b"rustc version ", ""),
    },
    Rule {
        name: "phobos",
        when: &[
            Match::Mapped(|f| f.starts_with(b"libgphobos.so") || f.starts_with(b"libphobos2")),
            Match::ExeHas(".strtab", Some(b"_D3std7process")),
        ],
        version: Version::Name(soname_version),
    },
    Rule {
        name: "bash",
        when: &[Match::Exe(|f| f == b"bash")],
        version: Version::Find(".rodata", b"Bash version ", ""),
    },
    Rule {
        name: "dash",
        when: &[Match::Exe(|f| f == b"dash")],
        version: Version::None,
    },
    Rule {
        name: "systemd",
        when: &[
            Match::Mapped(|f| f.starts_with(b"libsystemd-shared-")),
            Match::Exe(|f| f == b"systemd"),
        ],
        version: Version::Name(systemd_version),
    },
    Rule {
        name: "sudo",
        when: &[Match::Exe(|f| f == b"sudo")],
        version: Version::Find(".rodata", b"Sudo version ", ""),
    },
    Rule {
        name: "openssh",
        when: &[Match::Exe(|f| {
            matches!(f, b"sshd" | b"ssh" | b"sshd-session" | b"sshd-auth")
        })],
        version: Version::Find(".rodata", b"OpenSSH_", ""),
    },
    Rule {
        name: "rpm",
        when: &[
            Match::Exe(|f| f == b"rpm"),
            Match::Mapped(|f| f.starts_with(b"librpm.so")),
        ],
        version: Version::None,
    },
];

/// The file name of a path.
pub fn base(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// `3.11` from `python3.11`, `libpython3.11.so.1.0`, `python3.11d`.
fn python_version(f: &[u8]) -> Option<String> {
    let i = find(f, b"python")? + 6;
    leading_version(&f[i..]).filter(|v| v.contains('.'))
}

/// `3.1` from `libruby-3.1.so.3.1` or `libruby.so.3.1`, `ruby3.1`.
fn ruby_version(f: &[u8]) -> Option<String> {
    let rest = &f[find(f, b"ruby")? + 4..];
    let rest = rest.strip_prefix(b"-").unwrap_or(rest);
    let rest = rest.strip_prefix(b".so.").unwrap_or(rest);
    leading_version(rest)
}

/// `252` from `libsystemd-shared-252.so` (`252.19-1` style suffixes kept).
fn systemd_version(f: &[u8]) -> Option<String> {
    let rest = &f[find(f, b"libsystemd-shared-")? + 18..];
    leading_version(rest)
}

/// The soname's number: `5` from `libgphobos.so.5`.
fn soname_version(f: &[u8]) -> Option<String> {
    leading_version(&f[find(f, b".so.")? + 4..])
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The version-like token at the start of `s`: digits, dots and then letters, digits, `+`,
/// `-`, `~` (`2.36`, `9.2p1`, `1.21.6`), trailing dots dropped.
pub fn leading_version(s: &[u8]) -> Option<String> {
    if !s.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let n = s
        .iter()
        .take(40)
        .take_while(|b| b.is_ascii_alphanumeric() || b"._+~-".contains(b))
        .count();
    let v = String::from_utf8_lossy(&s[..n]);
    // A file name's version ends at its suffix: `3.11` of `3.11.so.1.0`.
    let v = v.split(".so").next().unwrap_or_default();
    Some(v.trim_end_matches(['.', '-']).to_string())
}

/// Names the runtime of a process from its executable's path and its mapped objects'
/// paths, asking `images` for the versions.
pub fn identify(exe: Option<&[u8]>, mapped: &[Vec<u8>], images: &mut dyn Images) -> Runtime {
    let libc = libc_of(mapped, images);
    for rule in RULES {
        for m in rule.when {
            if let Some((file, path, evidence)) = matches(*m, exe, mapped, images) {
                let version = version_of(rule.version, file, path, images);
                return Runtime::new(rule.name, version, evidence, exe, libc);
            }
        }
    }
    match &libc {
        Some(l) => {
            let evidence = format!("mapped {}", l.path);
            Runtime::new(l.name, l.version.clone(), evidence, exe, libc)
        }
        None => Runtime::unknown(exe, "no rule matched the executable or its mapped objects"),
    }
}

fn matches<'a>(
    m: Match,
    exe: Option<&'a [u8]>,
    mapped: &'a [Vec<u8>],
    images: &mut dyn Images,
) -> Option<(Which<'a>, &'a [u8], String)> {
    let lossy = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    match m {
        Match::Exe(f) => {
            let e = exe.filter(|e| f(base(e)))?;
            Some((Which::Exe, e, format!("exe {}", lossy(e))))
        }
        Match::Mapped(f) => {
            let p = mapped.iter().find(|p| f(base(p)))?;
            Some((Which::Mapped(p), p, format!("mapped {}", lossy(p))))
        }
        Match::ExeHas(section, needle) => {
            let e = exe?;
            images.find(Which::Exe, section, needle.unwrap_or(b""))?;
            let what = match needle {
                Some(n) => format!("{section} holds {:?}", lossy(n).trim()),
                None => format!("has {section}"),
            };
            Some((Which::Exe, e, format!("exe {} {what}", lossy(e))))
        }
    }
}

fn version_of(v: Version, file: Which<'_>, path: &[u8], images: &mut dyn Images) -> Option<String> {
    match v {
        Version::None => None,
        Version::Name(f) => f(base(path)),
        Version::Find(section, needle, prefix) => images
            .find(file, section, needle)
            .filter(|t| !t.is_empty())
            .map(|t| format!("{prefix}{t}")),
        Version::Go => images.go_version(),
        Version::JavaRelease => java_version(path, images),
    }
}

/// JAVA_VERSION from `<java home>/release`: the home is above `lib/` of libjvm.so, or of
/// `lib/jspawnhelper`.
fn java_version(p: &[u8], images: &mut dyn Images) -> Option<String> {
    // `<home>/bin/java`, `<home>/lib/jspawnhelper`, `<home>/lib/server/libjvm.so`.
    let home = match p.strip_suffix(b"/bin/java") {
        Some(home) => home,
        None => &p[..memchr::memmem::rfind(p, b"/lib/")?],
    };
    let mut release = home.to_vec();
    release.extend_from_slice(b"/release");
    let text = images.text_file(&release)?;
    let line = text.lines().find(|l| l.starts_with("JAVA_VERSION="))?;
    Some(line[13..].trim_matches('"').to_string())
}

/// glibc (libc.so.6, its version from `gnu_get_libc_version`'s string) or musl.
fn libc_of(mapped: &[Vec<u8>], images: &mut dyn Images) -> Option<Libc> {
    if let Some(p) = mapped.iter().find(|p| base(p) == b"libc.so.6") {
        let version = images
            .find(Which::Mapped(p), ".rodata", b"release version ")
            .filter(|v| !v.is_empty());
        return Some(Libc::new("glibc", version, p));
    }
    let musl = |f: &[u8]| f.starts_with(b"ld-musl-") || f.starts_with(b"libc.musl-");
    let p = mapped.iter().find(|p| musl(base(p)))?;
    Some(Libc::new("musl", None, p))
}
