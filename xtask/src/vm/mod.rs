//! `cargo xtask vm-test`: boots Debian's kernels in QEMU (software emulation) with an
//! initramfs that carries fdaudit, its integration-test binaries and the tools they run, and
//! runs `fdaudit doctor`, the demo, a fd-7 leak check and the root test suite in each guest.
//!
//! Everything is cached under `target/vm/`: the private apt state and downloaded packages,
//! the unpacked kernels, the initramfs and one console log per kernel (`out/`).

pub mod apt;
pub(crate) mod build;
pub mod guest;
mod image;
pub mod initramfs;
pub mod kernels;
mod outcome;
pub mod provision;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

pub use build::TEST_BINARY;
pub use guest::{GuestTest, Plan, Step};
pub use kernels::{Arch, Kernel};
pub use outcome::{table, Outcome, ProgramFigures};

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
    /// Install, fetch and build only: no guest is booted (the outcomes are empty).
    pub build_only: bool,
    /// Every guest module on any architecture, not an architecture's default subset.
    pub all_tests: bool,
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
    /// Count guest time in instructions (deterministic load times; see [`Arch::qemu`]).
    pub icount: bool,
    /// Guests booted at once; 0: one per host core.
    pub jobs: usize,
    /// How many times each guest loads every program for the table's load figures.
    pub doctor_runs: u32,
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

/// Boots `kernel` with `initrd`; the console goes to `log_path`.
fn boot(
    opts: &Options,
    kernel: &Kernel,
    initrd: &Path,
    log_path: &Path,
    plan: Plan,
) -> Result<Outcome> {
    let _ = std::fs::remove_file(log_path);
    let (qemu, machine) = opts.arch.qemu(opts.icount);
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
        .with_context(|| format!("failed to start {qemu}"))?;
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
    provision::vm_test(root, opts.arch).context("failed to install what the VM matrix needs")?;
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
    let built = build::build(root, opts)?;
    if opts.build_only {
        return Ok(Vec::new());
    }
    let tests: Vec<GuestTest> = built
        .tests
        .iter()
        .map(|(n, p, filter)| GuestTest {
            name: n.clone(),
            path: p.to_string_lossy().into_owned(),
            filter: filter.clone(),
        })
        .collect();
    let mut plan = Plan::standard(
        &built.profile_dir.to_string_lossy(),
        &tests,
        opts.doctor_runs,
    );
    plan.env.extend(opts.guest_env.iter().cloned());
    for (i, c) in opts.guest_cmds.iter().enumerate() {
        plan.steps
            .push(Step::new(format!("extra-{}", i + 1), c.clone(), 600));
    }
    plan.check_kernel_log();
    let initrd = image::build_initramfs(root, &vm_dir, opts, &built, &plan)?;
    let size = std::fs::metadata(&initrd).map(|m| m.len()).unwrap_or(0);
    // A TCG guest runs its vCPUs on one host thread (`thread=single`), so guests booted side
    // by side each keep one core busy and do not slow each other down.
    let jobs = match opts.jobs {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
    .min(kernels.len())
    .max(1);
    eprintln!(
        "vm-test: initramfs {} MiB, {} test modules; {} kernels, {jobs} at a time",
        size >> 20,
        built.tests.len(),
        kernels.len()
    );
    // Each worker takes the next kernel until none is left; the outcomes come back in
    // the kernels' order. A panicking worker panics the scope (and vm-test) with it.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<Outcome>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(k) = kernels.get(i) else { break mine };
                        mine.push((i, boot_and_report(opts, &vm_dir, k, &initrd, plan.clone())));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}

/// Boots one kernel and prints its verdict (and, when it failed, which tests and why) as
/// soon as it is known.
fn boot_and_report(
    opts: &Options,
    vm_dir: &Path,
    k: &Kernel,
    initrd: &Path,
    plan: Plan,
) -> Result<Outcome> {
    eprintln!("vm-test: booting {} ({})", k.label, k.image.display());
    let log = vm_dir.join("out").join(format!(
        "{}-{}.log",
        opts.arch.name(),
        k.label.replace('/', "_")
    ));
    let o = boot(opts, k, initrd, &log, plan)?;
    let mut out = vec![o.verdict_line()];
    if !o.failures().is_empty() {
        // CI keeps only what is printed: the failed tests and why, not just the log's path.
        let text = std::fs::read_to_string(&o.log_path).unwrap_or_default();
        out.extend(
            outcome::failure_excerpt(&text)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    println!("{}", out.join("\n"));
    Ok(o)
}
