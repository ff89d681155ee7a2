//! `cargo xtask vm-test`: boots Debian's kernels in QEMU (software emulation) with an
//! initramfs that carries fdaudit, its integration-test binaries and the tools they run, and
//! runs `fdaudit doctor`, the demo, a fd-7 leak check and the root test suite in each guest.
//!
//! Everything is cached under `target/vm/`: the private apt state and downloaded packages,
//! the unpacked kernels, the initramfs and one console log per kernel (`out/`).

pub mod apt;
pub mod guest;
pub mod initramfs;
pub mod kernels;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

pub use guest::{Plan, Step};
pub use kernels::{Arch, Kernel};

/// Options of one matrix run.
#[derive(Debug, Clone)]
pub struct Options {
    pub arch: Arch,
    /// Kernel series aliases or image paths; empty: every series of the architecture.
    pub kernels: Vec<String>,
    /// Test binaries to run in the guest (`trace`, `scan`...); empty: every one.
    pub tests: Vec<String>,
    /// Skip the integration tests (doctor, demo and leak check only).
    pub no_tests: bool,
    /// Extra environment for every guest step.
    pub guest_env: Vec<(String, String)>,
    /// Extra shell commands run in every guest after the standard steps.
    pub guest_cmds: Vec<String>,
    /// Extra kernel command-line arguments.
    pub kernel_args: Vec<String>,
    pub smp: u32,
    pub mem: String,
    /// Limit on one guest's whole run.
    pub timeout: Duration,
    /// Re-read the Debian package lists.
    pub refresh: bool,
}

/// The kernels a run boots by default for `arch`.
pub fn default_kernels(arch: Arch) -> Vec<String> {
    match arch {
        Arch::X86_64 => kernels::SERIES
            .iter()
            .map(|s| s.alias.to_string())
            .collect(),
        // bookworm's 6.1 is what Graviton and Ampere users run on Debian; sid for the newest.
        Arch::Aarch64 => vec!["6.1".into()],
    }
}

/// The result of one kernel.
#[derive(Debug)]
pub struct Outcome {
    pub kernel: Kernel,
    pub log_path: PathBuf,
    pub log: guest::GuestLog,
    pub plan: Plan,
    pub wall: Duration,
    pub timed_out: bool,
    pub qemu_status: Option<std::process::ExitStatus>,
}

/// Per-program verifier figures from `fdaudit doctor --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ProgramFigures {
    pub name: String,
    pub verified_insns: Option<u64>,
    pub load_ms: Option<f64>,
}

impl Outcome {
    /// Why the kernel fails, or empty when it passes.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.log.booted.is_none() {
            why.push(match self.qemu_status {
                Some(s) => format!("no boot (qemu {s})"),
                None => "no boot".into(),
            });
            return why;
        }
        if self.timed_out {
            why.push(format!("timed out after {:.0}s", self.wall.as_secs_f64()));
        }
        for step in self.plan.steps.iter().filter(|s| s.required) {
            match self.log.step(&step.name).and_then(|r| r.rc) {
                Some(0) => {}
                Some(rc) => why.push(format!("{} exit {rc}", step.name)),
                None => why.push(format!("{} did not finish", step.name)),
            }
        }
        if self.plan.steps.iter().any(|s| s.name == guest::LEAK_STEP) && !self.log.leak7() {
            why.push("fd 7 not reported".into());
        }
        let (_, failed, all) = self.log.test_counts();
        if failed > 0 {
            why.push(format!("{failed} tests failed"));
        } else if !all {
            why.push("a test binary printed no result".into());
        }
        why
    }

    /// Each program's verifier figures: its fastest load over the doctor runs.
    pub fn programs(&self) -> Vec<ProgramFigures> {
        fastest(
            self.log
                .json(guest::DOCTOR_JSON_STEP)
                .into_iter()
                .filter(|v| v["type"] == "program")
                .filter_map(|v| serde_json::from_value(v).ok()),
        )
    }

    fn rc(&self, step: &str) -> String {
        match self.log.step(step).and_then(|s| s.rc) {
            Some(0) => "ok".into(),
            Some(rc) => format!("exit {rc}"),
            None => "-".into(),
        }
    }

    /// The one-line verdict.
    pub fn verdict_line(&self) -> String {
        let fails = self.failures();
        let (p, f, _) = self.log.test_counts();
        let exec = exec_figures(&self.programs());
        format!(
            "VERDICT {} {} {} doctor={} demo={} leak7={} tests={p} passed/{f} failed exec-prog={} boot={}s total={:.1}s{}",
            self.kernel.label,
            self.log.uname.as_deref().unwrap_or(&self.kernel.release),
            if fails.is_empty() { "PASS" } else { "FAIL" },
            self.rc("doctor"),
            self.rc("demo"),
            if self.log.leak7() { "yes" } else { "no" },
            exec.as_ref().map(figures).unwrap_or_else(|| "-".into()),
            self.log.booted.map(|b| format!("{b:.1}")).unwrap_or_else(|| "?".into()),
            self.wall.as_secs_f64(),
            if fails.is_empty() {
                String::new()
            } else {
                format!(" ({}; log: {})", fails.join(", "), self.log_path.display())
            }
        )
    }
}

/// One entry per program name, in first-seen order, with the least load time seen.
fn fastest(all: impl Iterator<Item = ProgramFigures>) -> Vec<ProgramFigures> {
    let mut out: Vec<ProgramFigures> = Vec::new();
    for p in all {
        match out.iter_mut().find(|q| q.name == p.name) {
            Some(q) => {
                if let (Some(a), Some(b)) = (p.load_ms, q.load_ms) {
                    if a < b {
                        *q = p;
                    }
                }
            }
            None => out.push(p),
        }
    }
    out
}

/// The exec program's figures: `sched_process_exec`, or the bounded walk's entry and
/// tail-call stages summed (kernels without bpf_loop).
fn exec_figures(progs: &[ProgramFigures]) -> Option<ProgramFigures> {
    let parts: Vec<&ProgramFigures> = progs
        .iter()
        .filter(|p| p.name.starts_with("sched_process_exec") || p.name.starts_with("exec_walk_"))
        .collect();
    sum_figures("exec", &parts)
}

/// Figures of several programs as one: instruction counts only when every one has its own.
fn sum_figures(name: &str, parts: &[&ProgramFigures]) -> Option<ProgramFigures> {
    if parts.is_empty() {
        return None;
    }
    Some(ProgramFigures {
        name: name.into(),
        verified_insns: parts.iter().map(|p| p.verified_insns).sum(),
        load_ms: parts.iter().map(|p| p.load_ms).sum(),
    })
}

fn figures(p: &ProgramFigures) -> String {
    format!(
        "{} insns/{}",
        p.verified_insns
            .map(|n| n.to_string())
            // bpf_prog_info.verified_insns is 5.16+.
            .unwrap_or_else(|| "n/a".into()),
        p.load_ms
            .map(|ms| format!("{ms:.0} ms"))
            .unwrap_or_else(|| "?".into())
    )
}

/// The result table (markdown-like, for README and CI logs).
pub fn table(arch: Arch, outcomes: &[Outcome]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(vec![
        "kernel",
        "release",
        "verdict",
        "doctor",
        "demo",
        "fd-7 leak",
        "root tests",
        "exec prog: insns / load",
        "all progs: insns / load",
        "guest wall",
    ]);
    for o in outcomes {
        let (p, f, _) = o.log.test_counts();
        let progs = o.programs();
        let exec = exec_figures(&progs);
        let all = sum_figures("all", &progs.iter().collect::<Vec<_>>());
        t.add_row(vec![
            format!("{} {}", arch.name(), o.kernel.label),
            o.log
                .uname
                .clone()
                .unwrap_or_else(|| o.kernel.release.clone()),
            if o.failures().is_empty() {
                "PASS".into()
            } else {
                "FAIL".into()
            },
            o.rc("doctor"),
            o.rc("demo"),
            if o.log.leak7() { "yes" } else { "no" }.into(),
            if o.plan
                .steps
                .iter()
                .any(|s| s.name.starts_with(guest::TEST_STEP_PREFIX))
            {
                format!("{p} passed, {f} failed")
            } else {
                "not run".into()
            },
            exec.as_ref().map(figures).unwrap_or_else(|| "-".into()),
            all.as_ref().map(figures).unwrap_or_else(|| "-".into()),
            format!("{:.0} s", o.wall.as_secs_f64()),
        ]);
    }
    t
}

/// What the guest carries from the build.
struct Built {
    fdaudit: PathBuf,
    /// target/<triple>/release: packed at this same path (test binaries have it compiled in).
    profile_dir: PathBuf,
    bins: Vec<PathBuf>,
    tests: Vec<(String, PathBuf)>,
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
fn cargo_artifacts(
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

fn build(root: &Path, opts: &Options) -> Result<Built> {
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
        for (kind, name, exe) in arts {
            if kind != "test" {
                continue;
            }
            let wanted = if opts.tests.is_empty() {
                match HOST_ONLY_TESTS.iter().find(|(n, _)| *n == name) {
                    Some((_, why)) => {
                        eprintln!("vm-test: not in the guests by default: {name} ({why}; --test {name} to run it)");
                        false
                    }
                    None => true,
                }
            } else {
                opts.tests.contains(&name)
            };
            if wanted {
                tests.push((name, exe));
            }
        }
        for want in &opts.tests {
            if !tests.iter().any(|(n, _)| n == want) {
                bail!("no integration test binary named {want:?} in fdaudit-tests");
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

/// Integration-test binaries left out of the guests unless asked for with `--test`, and why:
/// they check the host's deployment rather than the kernel, with tools the initramfs lacks.
const HOST_ONLY_TESTS: &[(&str, &str)] = &[
    (
        "deploy",
        "validates deployment files with promtool, systemd-analyze and kubernetes-validate",
    ),
    (
        "watch",
        "scrapes with a real prometheus and runs coreutils' cat under unshare",
    ),
    (
        "terminal",
        "checks rendering in tmux, script's pty, man and bash completion, none of which the \
         initramfs carries",
    ),
    (
        "scan_hostile",
        "mounts a FUSE file system (no /dev/fuse in the guests) and holds files the \
         initramfs lacks",
    ),
];

/// Host tools put into an x86_64 guest, from the host itself (Debian packages installed by
/// .ci/setup): (guest path, host path).
const HOST_TOOLS: &[(&str, &str)] = &[
    ("/bin/busybox", "/bin/busybox"),
    ("/bin/true", "/bin/true"),
    ("/bin/echo", "/bin/echo"),
    ("/usr/bin/printenv", "/usr/bin/printenv"),
    ("/bin/dash", "/bin/dash"),
    ("/bin/bash", "/bin/bash"),
    ("/usr/bin/setpriv", "/usr/bin/setpriv"),
    ("/usr/bin/strace", "/usr/bin/strace"),
    ("/usr/sbin/bpftool", "/usr/sbin/bpftool"),
];

/// The font `fdaudit bench` draws its plot with (fonts-dejavu-core, from .ci/setup).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Debian packages whose files make up a foreign-architecture guest's userland, and the
/// libraries those tools link against.
const GUEST_DEBS: &[&str] = &[
    "busybox-static",
    "coreutils",
    "dash",
    "bash",
    "util-linux",
    "strace",
    "bpftool",
    "libc6",
    "libgcc-s1",
    "libtinfo6",
    "libcap-ng0",
    "libcap2",
    "libelf1",
    "zlib1g",
    "libzstd1",
    "libunwind8",
    "liblzma5",
    "libdw1",
    "libbz2-1.0",
    "libselinux1",
    "libpcre2-8-0",
    "libaudit1",
    "libsmartcols1",
    "libsystemd0",
    "libmount1",
    "libblkid1",
    "libacl1",
    "libattr1",
    "libgmp10",
    "libssl3",
    "liblz4-1",
    "libgcrypt20",
    "libgpg-error0",
    "libbpf1",
];

/// A sysroot of Debian bookworm packages for `arch` (cached under target/vm/sysroot).
fn foreign_sysroot(vm_dir: &Path, arch: Arch, refresh: bool) -> Result<PathBuf> {
    let dir = vm_dir.join("sysroot").join(arch.deb());
    let stamp = dir.join(".complete");
    if stamp.exists() && !refresh {
        return Ok(dir);
    }
    let apt = apt::Apt::open(vm_dir, "bookworm", arch.deb(), refresh)?;
    let debs = vm_dir.join("debs").join(arch.deb());
    for pkg in GUEST_DEBS {
        let deb = apt.download(pkg, &debs)?;
        apt::unpack(&deb, &dir, &[])?;
    }
    std::fs::write(&stamp, b"").context("failed to mark the sysroot complete")?;
    Ok(dir)
}

/// Builds the guest's initramfs for `built` and `plan`; returns its path.
fn build_initramfs(
    root: &Path,
    vm_dir: &Path,
    opts: &Options,
    built: &Built,
    plan: &Plan,
) -> Result<PathBuf> {
    let mut tree = initramfs::Tree::default();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/root",
        "/etc",
        "/usr/local/bin",
    ] {
        tree.dir(d);
    }
    let libs = if Some(opts.arch) == Arch::host() {
        for (guest, host) in HOST_TOOLS {
            let p = Path::new(host);
            if !p.exists() {
                bail!("{host} is missing on this machine: run `bash .ci/setup`");
            }
            tree.file(guest, p);
        }
        initramfs::Libs {
            sysroot: PathBuf::from("/"),
            multiarch: opts.arch.multiarch().into(),
        }
    } else {
        let sys = foreign_sysroot(vm_dir, opts.arch, opts.refresh)?;
        for (guest, _) in HOST_TOOLS {
            let name = Path::new(guest).file_name().expect("tool paths have names");
            let src = ["bin", "usr/bin", "sbin", "usr/sbin"]
                .iter()
                .map(|d| sys.join(d).join(name))
                .find(|p| p.is_file())
                .with_context(|| format!("{} is not in the {} sysroot", guest, opts.arch.deb()))?;
            tree.file(guest, &src);
        }
        initramfs::Libs {
            sysroot: sys,
            multiarch: opts.arch.multiarch().into(),
        }
    };
    tree.symlink("/bin/sh", "busybox");
    // The bench plot's font (architecture-independent: the host's own).
    let font = Path::new(FONT);
    if font.exists() {
        let bytes = std::fs::read(font).with_context(|| format!("failed to read {FONT}"))?;
        tree.data(FONT, bytes, 0o644);
    }
    tree.file("/usr/local/bin/fdaudit", &built.fdaudit);
    // Test binaries and fixtures at the absolute paths they were built for.
    let pd = built.profile_dir.to_string_lossy().into_owned();
    for b in &built.bins {
        let name = b
            .file_name()
            .expect("binaries have names")
            .to_string_lossy();
        tree.file(&format!("{pd}/{name}"), b);
    }
    for (_, t) in &built.tests {
        tree.file(&t.to_string_lossy(), t);
    }
    let fixtures = root.join("tests/fixtures");
    if !built.tests.is_empty() && fixtures.is_dir() {
        tree.copy_dir(&fixtures.to_string_lossy(), &fixtures)?;
    }
    tree.add_shared_libs(&libs)?;
    tree.data("/etc/hostname", "guest\n", 0o644);
    tree.data(
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        0o644,
    );
    tree.data("/etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644);
    tree.data("/checks.sh", plan.script(), 0o755);
    tree.data("/init", guest::init_script("/checks.sh"), 0o755);
    let out = vm_dir.join(format!("initramfs-{}.cpio", opts.arch.name()));
    tree.write_cpio(&out)?;
    Ok(out)
}

/// Boots `kernel` with `initrd`; the console goes to `log_path`.
fn boot(
    opts: &Options,
    kernel: &Kernel,
    initrd: &Path,
    log_path: &Path,
    plan: Plan,
) -> Result<Outcome> {
    let _ = std::fs::remove_file(log_path);
    let (qemu, machine) = opts.arch.qemu();
    let start = Instant::now();
    let mut child = Command::new(qemu)
        .args(&machine)
        .args(["-smp", &opts.smp.to_string(), "-m", &opts.mem])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-kernel")
        .arg(&kernel.image)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            &format!(
                "console={} panic=-1 quiet {}",
                opts.arch.console(),
                opts.kernel_args.join(" ")
            ),
        ])
        .arg("-serial")
        .arg(format!("file:{}", log_path.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to start {qemu}: run `bash .ci/setup`"))?;
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().context("failed to wait for qemu")? {
            break Some(st);
        }
        if start.elapsed() > opts.timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let wall = start.elapsed();
    let text = std::fs::read(log_path).unwrap_or_default();
    let log = guest::GuestLog::parse(&String::from_utf8_lossy(&text));
    if log.booted.is_none() {
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read as _;
            let mut s = String::new();
            let _ = e.read_to_string(&mut s);
            if !s.trim().is_empty() {
                eprintln!("vm-test: {qemu}: {}", s.trim());
            }
        }
    }
    Ok(Outcome {
        kernel: kernel.clone(),
        log_path: log_path.to_path_buf(),
        log,
        plan,
        wall,
        timed_out,
        qemu_status: status,
    })
}

/// Runs the matrix; returns every kernel's outcome (the caller prints and decides).
pub fn run(root: &Path, opts: &Options) -> Result<Vec<Outcome>> {
    let vm_dir = root.join("target").join("vm");
    std::fs::create_dir_all(vm_dir.join("out")).context("failed to create target/vm")?;
    let specs = if opts.kernels.is_empty() {
        default_kernels(opts.arch)
    } else {
        opts.kernels.clone()
    };
    // Fetch first: a bad --kernel fails before the long build.
    let mut kernels = Vec::new();
    for s in &specs {
        kernels.push(kernels::resolve(&vm_dir, opts.arch, s, opts.refresh)?);
    }
    let built = build(root, opts)?;
    let tests: Vec<(String, String)> = built
        .tests
        .iter()
        .map(|(n, p)| (n.clone(), p.to_string_lossy().into_owned()))
        .collect();
    let mut plan = Plan::standard(&built.profile_dir.to_string_lossy(), &tests);
    plan.env.extend(opts.guest_env.iter().cloned());
    for (i, c) in opts.guest_cmds.iter().enumerate() {
        plan.steps
            .push(Step::new(format!("extra-{}", i + 1), c.clone(), 600));
    }
    let initrd = build_initramfs(root, &vm_dir, opts, &built, &plan)?;
    let size = std::fs::metadata(&initrd).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "vm-test: initramfs {} MiB, {} test binaries; {} kernels, one at a time",
        size >> 20,
        built.tests.len(),
        kernels.len()
    );
    let mut outcomes = Vec::new();
    for k in &kernels {
        eprintln!("vm-test: booting {} ({})", k.label, k.image.display());
        let log = vm_dir.join("out").join(format!(
            "{}-{}.log",
            opts.arch.name(),
            k.label.replace('/', "_")
        ));
        let o = boot(opts, k, &initrd, &log, plan.clone())?;
        println!("{}", o.verdict_line());
        outcomes.push(o);
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastest_load_per_program() {
        let p = |name: &str, ms: f64| ProgramFigures {
            name: name.into(),
            verified_insns: Some(10),
            load_ms: Some(ms),
        };
        let got = fastest([p("a", 5.0), p("b", 2.0), p("a", 3.0), p("a", 4.0)].into_iter());
        assert_eq!(got, vec![p("a", 3.0), p("b", 2.0)]);
    }
}
