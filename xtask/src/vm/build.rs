//! Building fdaudit, its fixtures and the integration-test binary for the guest's
//! architecture, and picking which of its modules (one per file of tests/tests) run in the
//! guests.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

use super::{Arch, Options};

/// What the guest carries from the build.
pub(super) struct Built {
    pub(super) fdaudit: PathBuf,
    /// target/<triple>/release: packed at this same path (test binaries have it compiled in).
    pub(super) profile_dir: PathBuf,
    pub(super) bins: Vec<PathBuf>,
    /// Each module that runs in the guests: its name, the test binary, and the libtest
    /// arguments that select exactly its tests ([`module_filter`]).
    pub(super) tests: Vec<(String, PathBuf, Vec<String>)>,
}

/// The integration tests' one test binary (`[[test]]` in tests/Cargo.toml).
pub const TEST_BINARY: &str = "integration";
/// Its source: a `mod NAME;` line per file of tests/tests.
const TEST_MAIN: &str = "tests/tests/main.rs";
/// The module of helpers, which holds no test.
const HELPER_MODULES: [&str; 1] = ["common"];

/// The test modules of the integration-test binary (the `mod NAME;` lines of
/// tests/tests/main.rs, without the helpers), in its order.
pub fn test_modules(root: &Path) -> Result<Vec<String>> {
    let path = root.join(TEST_MAIN);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .filter(|m| !HELPER_MODULES.contains(m))
        .map(str::to_string)
        .collect())
}

/// The libtest arguments that run exactly module `name`'s tests (`name::`), given every
/// module: a filter matches a substring, so `trace::` would also take `hostile_trace::fn`
/// (a test's name is `module::function`, no deeper), and each module whose name ends with
/// `name` is skipped.
pub fn module_filter(name: &str, modules: &[String]) -> Vec<String> {
    let mut args = vec![format!("{name}::")];
    for m in modules {
        if m != name && m.ends_with(name) {
            args.push("--skip".to_string());
            args.push(format!("{m}::"));
        }
    }
    args
}

#[derive(Deserialize)]
struct Artifact {
    reason: String,
    #[serde(default)]
    executable: Option<PathBuf>,
    #[serde(default)]
    target: Option<ArtifactTarget>,
}

#[derive(Deserialize)]
struct ArtifactTarget {
    name: String,
    kind: Vec<String>,
}

/// Runs cargo with JSON messages and returns the (kind, name, executable) of what it built.
pub(crate) fn cargo_artifacts(
    root: &Path,
    arch: Arch,
    args: &[&str],
) -> Result<Vec<(String, String, PathBuf)>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(args)
        .args([
            "--release",
            "--locked",
            "--message-format=json-render-diagnostics",
        ])
        // A fixed target directory: the test binaries have its absolute paths compiled in
        // (CARGO_BIN_EXE_*, CARGO_MANIFEST_DIR) and are packed at the same paths.
        .env("CARGO_TARGET_DIR", root.join("target"))
        .stderr(Stdio::inherit());
    // What cargo set for the program that runs this (`cargo xtask`, a test binary that runs
    // `cargo xtask dist`) is not passed on: a build script that reruns when one changes
    // (ring's, on CARGO_PKG_NAME and CARGO_MANIFEST_DIR, which cargo compares in its own
    // environment) would build again for each caller, and one release build serves
    // `.ci/run`'s dist test, its guests' build beside the host tests and vm-test.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_for_a_program) {
            cmd.env_remove(key);
        }
    }
    if Some(arch) != Arch::host() {
        let triple = arch.rust_target();
        cmd.args(["--target", &triple]);
        let var = format!(
            "CARGO_TARGET_{}_LINKER",
            triple.to_uppercase().replace('-', "_")
        );
        if std::env::var_os(&var).is_none() {
            cmd.env(var, format!("{}-gcc", arch.multiarch()));
        }
    }
    let out = cmd.output().context("failed to run cargo")?;
    if !out.status.success() {
        bail!("cargo {} failed ({})", args.join(" "), out.status);
    }
    let mut arts = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(a) = serde_json::from_str::<Artifact>(line) else {
            continue;
        };
        if a.reason != "compiler-artifact" {
            continue;
        }
        if let (Some(exe), Some(t)) = (a.executable, a.target) {
            let kind = t.kind.first().cloned().unwrap_or_default();
            arts.push((kind, t.name, exe));
        }
    }
    Ok(arts)
}

/// Whether `key` is one cargo sets for the program it runs (`cargo run`, `cargo test`), not
/// one a user sets to configure cargo (CARGO_HOME, CARGO_TARGET_*_LINKER, CARGO_BUILD_*...).
fn set_by_cargo_for_a_program(key: &str) -> bool {
    const EXACT: [&str; 7] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ];
    EXACT.contains(&key) || key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_")
}

pub(super) fn build(root: &Path, opts: &Options) -> Result<Built> {
    eprintln!(
        "vm-test: building fdaudit and the test binaries for {}",
        opts.arch.name()
    );
    let bins = cargo_artifacts(
        root,
        opts.arch,
        &["build", "-p", "fdaudit", "-p", "fdaudit-tests", "--bins"],
    )?;
    let fdaudit = bins
        .iter()
        .find(|(k, n, _)| k == "bin" && n == "fdaudit")
        .map(|(_, _, p)| p.clone())
        .context("cargo built no fdaudit binary")?;
    let profile_dir = fdaudit
        .parent()
        .context("fdaudit has no parent directory")?
        .to_path_buf();
    let mut tests = Vec::new();
    if !opts.no_tests {
        let arts = cargo_artifacts(
            root,
            opts.arch,
            &["test", "-p", "fdaudit-tests", "--no-run"],
        )?;
        let exe = arts
            .into_iter()
            .find(|(k, n, _)| k == "test" && n == TEST_BINARY)
            .map(|(_, _, p)| p)
            .with_context(|| format!("cargo built no {TEST_BINARY} test binary"))?;
        let modules = test_modules(root)?;
        for want in &opts.tests {
            if !modules.contains(want) {
                bail!("no integration test module named {want:?} in {TEST_MAIN}");
            }
        }
        let subset = arch_subset(opts);
        if let Some(s) = subset {
            eprintln!(
                "vm-test: {} guests run the architecture-sensitive modules only ({} of them; \
                 --all-tests for every one): {}",
                opts.arch.name(),
                s.len(),
                s.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            );
        }
        for name in &modules {
            let wanted = if !opts.tests.is_empty() {
                opts.tests.contains(name)
            } else if let Some((_, why)) = HOST_ONLY_TESTS.iter().find(|(n, _)| n == name) {
                eprintln!("vm-test: not in the guests by default: {name} ({why}; --test {name} to run it)");
                false
            } else {
                subset.is_none_or(|s| s.iter().any(|(n, _)| n == name))
            };
            if wanted {
                tests.push((name.clone(), exe.clone(), module_filter(name, &modules)));
            }
        }
    }
    Ok(Built {
        fdaudit,
        profile_dir,
        bins: bins
            .into_iter()
            .filter(|(k, _, _)| k == "bin")
            .map(|(_, _, p)| p)
            .collect(),
        tests,
    })
}

/// The modules an `arch` guest runs when no `--test` names any: `None` for every module that
/// runs in guests (x86_64, or `--all-tests`), else that architecture's subset.
fn arch_subset(opts: &Options) -> Option<&'static [(&'static str, &'static str)]> {
    match opts.arch {
        Arch::Aarch64 if !opts.all_tests => Some(AARCH64_TESTS),
        _ => None,
    }
}

/// What an aarch64 guest runs by default, and why each: the modules whose outcome depends on
/// the architecture (its syscall table and entry points, its `O_*` values, how its kernel
/// attaches and refuses programs), so that `.ci/run` can boot an arm64 guest beside the
/// x86_64 ones within its time (a whole aarch64 suite runs about three times as long as an
/// x86_64 one under emulation: docs/kernels.md). The guest's standard steps (doctor, the
/// demo, the fd-7 leak check, `--origin`'s user stack) run as on x86_64. What is left out
/// (output formats, bench, gates, signals, hostile bursts) is the same code on both,
/// covered by the x86_64 guests and the host.
pub const AARCH64_TESTS: &[(&str, &str)] = &[
    (
        "backends",
        "the syscall hooks are per architecture (__arm64_sys_* for fentry) and so is where a \
         kernel refuses one: arm64 6.1 refuses fentry at attach, x86_64 at BPF_PROG_LOAD",
    ),
    (
        "trace",
        "every event of a spawn through arm64's syscall table, which has no fork, vfork, dup2, \
         open or pipe: glibc and the fixtures reach them through clone, dup3, openat, pipe2",
    ),
    (
        "trace_attach",
        "attaching to running processes and detaching on bad input, with arm64's program \
         loading and JIT",
    ),
    (
        "doctor",
        "each probe of a kernel feature, the capabilities and the entry points doctor names \
         are the architecture's",
    ),
    (
        "boundary",
        "credentials, namespaces and root read from the kernel's structs (BTF offsets of the \
         arm64 kernel) at each exec of a spawn chain",
    ),
    (
        "ci_output",
        "the x86_64-recorded procfs fixture read on arm64: fdinfo's octal flags are O_* bits \
         that differ between the two, and the fixture says which it comes from",
    ),
    (
        "scan",
        "fdinfo's flags of live processes decoded with the running architecture's O_* values",
    ),
    (
        "scan_boundary",
        "scan's boundary finding from fdinfo's flags (O_DIRECTORY, O_NOFOLLOW, O_DIRECT and \
         O_LARGEFILE are other bits on arm64)",
    ),
    (
        "scan_creds",
        "whether a holder's credentials could open its fd, from the fd's access mode in \
         fdinfo's flags",
    ),
];

/// Integration-test modules left out of the guests unless asked for with `--test`, and why:
/// they check the host's deployment rather than the kernel, with tools the initramfs lacks.
const HOST_ONLY_TESTS: &[(&str, &str)] = &[
    (
        "jit_copy",
        "runs Java (javac, java, jcmd), which the initramfs lacks",
    ),
    (
        "jit_frames",
        "runs Java (javac, java, jcmd) and Node services, which the initramfs lacks",
    ),
    (
        "jit_origin",
        "runs Java (javac, java, jcmd) and Node, which the initramfs lacks",
    ),
    (
        "scan_floor",
        "counts scan's syscalls with strace, which the initramfs lacks",
    ),
    (
        "unclosed_exit",
        "runs unclosed under strace, which the initramfs lacks",
    ),
    (
        "scan_inflight",
        "compiles its C attacker with gcc, which the initramfs lacks",
    ),
    (
        "watch_textfile",
        "checks the textfile writer's file handling, not the kernel, with an attacker run as \
         nobody through setpriv and ln",
    ),
    (
        "chains",
        "compiles and runs Java (javac, java), which the initramfs lacks",
    ),
    (
        "ia32",
        "compiles its -m32 fixture with gcc, which the initramfs lacks",
    ),
    (
        "ci_native",
        "runs make, docs/ci.md's jobs and junitparser from a Python venv, none of which the \
         initramfs carries",
    ),
    (
        "deploy",
        "validates deployment files with promtool, systemd-analyze and kubernetes-validate",
    ),
    (
        "watch",
        "scrapes with a real prometheus and runs coreutils' cat under unshare",
    ),
    (
        "watch_hostile",
        "checks the agent's HTTP endpoint, not the kernel: its client runs as nobody through \
         util-linux's setpriv, which the initramfs lacks",
    ),
    (
        "terminal",
        "checks rendering in tmux, script's pty, man and bash completion, none of which the \
         initramfs carries",
    ),
    (
        "readme",
        "compares the README's sample outputs with the source tree's README.md, which the \
         initramfs lacks",
    ),
    (
        "dist",
        "builds the release packages with cargo and installs the .deb with dpkg on the host",
    ),
    (
        "unclosed",
        "compiles its C services with gcc and runs python3, which the initramfs lacks",
    ),
    (
        "unclosed_exports",
        "compiles its C service with gcc and reads its profile with go tool pprof, which the \
         initramfs lacks",
    ),
    (
        "unclosed_runtimes",
        "builds and runs leaking C, Go, Java and Node services (gcc, go, javac, java, node), \
         which the initramfs lacks",
    ),
    (
        "sarif",
        "builds its leaking C program with gcc inside a git repository; the initramfs has \
         neither",
    ),
    (
        "watch_tls",
        "checks the endpoint's TLS and basic auth with openssl, curl and a real prometheus, \
         none of which the initramfs carries",
    ),
    (
        "watch_exhaustion",
        "builds its fd holder and leaker with gcc and scrapes with a real prometheus, neither \
         of which the initramfs carries",
    ),
    (
        "scan_fold",
        "runs coreutils' sleep under a second name; the initramfs's sleep is busybox's, which \
         runs the applet its name says",
    ),
    (
        "containers",
        "runs podman and runc on an imported busybox image; the initramfs has neither",
    ),
    (
        "boundary_cve",
        "compiles its C fixture with gcc, which the initramfs lacks",
    ),
    (
        "bench_user",
        "benchmarks CPython's subprocess as the user's spawner; the initramfs has no Python",
    ),
    (
        "runtime",
        "runs the spawners of docs/spawners.md (Java, Node, Go, Ruby, SBCL, gdc) and a gcc \
         fixture, none of which the initramfs carries",
    ),
    (
        "perfetto",
        "reads the trace with upstream's generated schema in a Python venv the initramfs lacks",
    ),
    (
        "origin",
        "compiles its C fixture with gcc (-g -fno-omit-frame-pointer), which the initramfs lacks",
    ),
    (
        "origin_gdb",
        "compares with gdb on gcc-built and Debian's python3.11 and perl, which the initramfs \
         lacks",
    ),
    (
        "origin_sites",
        "compiles its C fixture with gcc (-g -fno-omit-frame-pointer), which the initramfs lacks",
    ),
    (
        "origin_paths",
        "compiles its C fixtures with gcc and runs python3, which the initramfs lacks",
    ),
    (
        "origin_python",
        "runs pyenv's and Debian's CPython interpreters and compiles a C fixture with gcc, \
         none of which the initramfs carries",
    ),
    (
        "hostile_files",
        "compiles its C fixtures with gcc, which the initramfs lacks, and runs them as nobody \
         through setpriv",
    ),
    (
        "scan_hostile",
        "mounts a FUSE file system (no /dev/fuse in the guests) and holds files the \
         initramfs lacks",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cargo_sets_for_a_program_is_left_out_of_the_build() {
        let set = set_by_cargo_for_a_program;
        for k in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_BIN_EXE_fdaudit",
            "OUT_DIR",
        ] {
            assert!(set(k), "{k}");
        }
        for k in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "PATH",
        ] {
            assert!(!set(k), "{k}");
        }
        assert!(!set("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"));
    }

    #[test]
    fn a_module_filter_takes_its_own_tests_only() {
        let modules: Vec<String> = ["trace", "hostile_trace", "watch", "watch_hostile"]
            .map(String::from)
            .into();
        assert_eq!(
            module_filter("trace", &modules),
            ["trace::", "--skip", "hostile_trace::"]
        );
        assert_eq!(module_filter("watch", &modules), ["watch::"]);
        assert_eq!(
            module_filter("hostile_trace", &modules),
            ["hostile_trace::"]
        );
    }

    #[test]
    fn every_host_only_module_exists() {
        let modules = test_modules(&crate::workspace_root()).expect("read tests/tests/main.rs");
        assert!(
            modules.len() > 30 && !modules.iter().any(|m| m == "common"),
            "{modules:?}"
        );
        for (name, _) in HOST_ONLY_TESTS {
            assert!(
                modules.iter().any(|m| m == name),
                "{name} is no module of {TEST_MAIN}"
            );
        }
        for (name, _) in AARCH64_TESTS {
            assert!(
                modules.iter().any(|m| m == name),
                "{name} is no module of {TEST_MAIN}"
            );
            assert!(
                !HOST_ONLY_TESTS.iter().any(|(h, _)| h == name),
                "{name} is in AARCH64_TESTS but does not run in guests"
            );
        }
    }
}
