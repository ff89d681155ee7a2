//! `cargo xtask build-ebpf` builds the eBPF object and copies it to target/fdaudit-ebpf.o;
//! `cargo xtask man` regenerates the manual pages in docs/man from fdaudit's clap definition;
//! `cargo xtask vm-test` runs fdaudit on Debian's kernels in QEMU (see `xtask::vm`);
//! `cargo xtask sizes` checks file and function lengths and import cycles (see `xtask::layout`).

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};
use xtask::{dist, ebpf, layout, oci, vm};

/// Build and test tasks for fdaudit.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build the eBPF objects (bpfel-unknown-none, with BTF), one per machine architecture,
    /// into fdaudit/ebpf/ (the committed objects a build without the eBPF toolchain embeds)
    /// with the sources' fingerprint; also copied to target/fdaudit-ebpf.o for the host.
    BuildEbpf {
        /// Only this machine architecture (whose syscalls the programs read); default: all.
        #[arg(long, value_enum)]
        arch: Option<vm::Arch>,
        /// Write nothing: exit 1 when a committed object differs, byte for byte, from what
        /// the sources build, or the recorded fingerprint from the sources'.
        #[arg(long)]
        check: bool,
    },
    /// Build release packages into target/dist: fdaudit_VERSION_DEBARCH.deb and
    /// fdaudit-VERSION-ARCH-linux.tar.gz (binary, man pages, bash/zsh/fish completions,
    /// systemd unit, README, licences). A foreign architecture is cross-built (its toolchain
    /// is installed when missing).
    Dist {
        /// Only this architecture (repeatable); default: x86_64 and aarch64.
        #[arg(long = "arch", value_enum)]
        arches: Vec<vm::Arch>,
        /// Also build this machine's architecture's OCI image with buildah, from
        /// deploy/Containerfile: localhost/fdaudit:VERSION in the local containers storage
        /// and target/dist/fdaudit-VERSION-ARCH.oci.tar.
        #[arg(long)]
        oci: bool,
    },
    /// Regenerate the manual pages in docs/man from fdaudit's clap definition.
    Man,
    /// Rewrite the README's sample outputs (the blocks after `<!-- sample: NAME -->`) with
    /// what the current binary prints; root (the trace sample loads the programs). The root
    /// test `readme` fails while they differ.
    Readme,
    /// Boot Debian kernels in QEMU (software emulation) and run doctor, the demo, a fd-7
    /// leak check and the root integration tests in each; one verdict line per kernel, then
    /// a table. Exits 1 when any kernel fails. Kernels, packages and logs are cached under
    /// target/vm/.
    VmTest(VmTestArgs),
    /// List the largest files and functions outside tests and the import cycles between
    /// sibling modules; exits 1 when a file is over 600 lines, a function over 80, or any
    /// modules import each other round a loop.
    Sizes {
        /// How many of the largest files and functions to list.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
}

/// Issue #9's limits: lines a file (before its tests), lines a function.
const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 80;

#[derive(Debug, clap::Args)]
struct VmTestArgs {
    /// A kernel to boot: a series (5.10, 6.1, 6.12, sid) fetched from Debian, or the path of
    /// a kernel image. Repeat for several; default: every series of the architecture
    /// (aarch64: 6.1).
    #[arg(long = "kernel", value_name = "VER|PATH")]
    kernels: Vec<String>,
    /// Guest architecture (aarch64 cross-builds fdaudit and its tests).
    #[arg(long, value_enum, default_value = "x86_64")]
    arch: vm::Arch,
    /// Run only these integration-test modules (trace, scan, doctor...: the files of
    /// tests/tests); repeatable.
    #[arg(long = "test", value_name = "NAME")]
    tests: Vec<String>,
    /// Only doctor, the demo and the leak check: no integration tests.
    #[arg(long, conflicts_with = "tests")]
    no_tests: bool,
    /// Install what the guests need, fetch their kernels and build fdaudit and the test
    /// binaries, then stop without booting any: `.ci/run` runs this beside the host tests,
    /// so that the guests boot at once after them.
    #[arg(long)]
    build_only: bool,
    /// Every integration-test module that runs in guests, on any architecture (an aarch64
    /// guest runs the architecture-sensitive ones by default: xtask/src/vm/build.rs
    /// `AARCH64_TESTS`).
    #[arg(long, conflicts_with_all = ["tests", "no_tests"])]
    all_tests: bool,
    /// Environment for every step in the guest, KEY=VALUE; repeatable.
    #[arg(long = "guest-env", value_name = "KEY=VALUE", value_parser = parse_env)]
    guest_env: Vec<(String, String)>,
    /// An extra shell command run in every guest after the standard steps; it must exit 0.
    #[arg(long = "guest-cmd", value_name = "CMD")]
    guest_cmds: Vec<String>,
    /// An extra kernel command-line argument (`mitigations=off`, `lockdown=integrity`...);
    /// repeatable.
    #[arg(long = "kernel-arg", value_name = "ARG")]
    kernel_args: Vec<String>,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    smp: u32,
    /// Guest memory (QEMU syntax).
    #[arg(long, default_value = "1G")]
    mem: String,
    /// Seconds one guest may run before it is stopped and failed.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Re-read Debian's package lists (to pick up newer kernels).
    #[arg(long)]
    refresh: bool,
    /// Run the guest's clock on its instruction count (QEMU -icount, one host thread): the
    /// verifier figures become deterministic (1 ms = 1 M guest instructions) however busy
    /// the host is. Slow; meant for comparing load times, with --no-tests.
    #[arg(long)]
    icount: bool,
    /// Guests booted at once (each TCG guest keeps one host core busy); 0: one per host
    /// core.
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// How many times each guest loads every program (`doctor --json`) for the table's load
    /// figures, which are each program's fastest: one when only the verdict matters (CI).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    doctor_runs: u32,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("{k:?} is not a variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

fn main() {
    let code = match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("caused by: {cause}");
            }
            1
        }
    };
    std::process::exit(code);
}

/// `cargo xtask sizes`: two tables and the cycles; 1 when anything is over its limit.
fn sizes(root: &std::path::Path, top: usize) -> Result<i32> {
    let mut files = Vec::new();
    let mut fns = Vec::new();
    let mut cycles = Vec::new();
    for krate in layout::CRATES {
        let sources = layout::sources(root, krate)?;
        for s in &sources {
            files.push((layout::line_count(&s.code), s.path.clone()));
            fns.extend(layout::functions(&s.path, &s.code));
        }
        cycles.extend(layout::cycles(&sources).into_iter().map(|c| (krate, c)));
    }
    files.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    fns.sort_by(|a, b| b.lines.cmp(&a.lines).then(a.path.cmp(&b.path)));
    let over = |n: usize, max: usize| if n > max { "over" } else { "" };
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(vec!["file (outside tests)", "lines", ""]);
    for (n, path) in files.iter().take(top) {
        let row = vec![path.display().to_string(), n.to_string()];
        t.add_row([row, vec![over(*n, MAX_FILE_LINES).into()]].concat());
    }
    println!("{t}\n");
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    t.set_header(vec!["function", "file", "lines", ""]);
    for f in fns.iter().take(top) {
        let at = format!("{}:{}", f.path.display(), f.line);
        let row = vec![f.name.clone(), at, f.lines.to_string()];
        t.add_row([row, vec![over(f.lines, MAX_FN_LINES).into()]].concat());
    }
    println!("{t}\n");
    for (krate, c) in &cycles {
        let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
        println!("import cycle in {krate}: {}", names.join(" <-> "));
    }
    let big_files = files.iter().filter(|f| f.0 > MAX_FILE_LINES).count();
    let big_fns = fns.iter().filter(|f| f.lines > MAX_FN_LINES).count();
    println!(
        "{big_files} files over {MAX_FILE_LINES} lines, {big_fns} functions over {MAX_FN_LINES}, \
         {} import cycles",
        cycles.len()
    );
    Ok(i32::from(big_files + big_fns + cycles.len() > 0))
}

/// `cargo xtask readme`: the readme test, told to write what the binary prints.
fn readme(root: &std::path::Path) -> Result<i32> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .current_dir(root)
        .args([
            "test",
            "--quiet",
            "-p",
            "fdaudit-tests",
            "--test",
            xtask::vm::TEST_BINARY,
            "--",
            "readme::",
        ])
        .arg("--include-ignored")
        .env("FDAUDIT_BLESS", "1")
        .status()
        .context("failed to run cargo")?;
    if !status.success() {
        bail!("the readme test failed ({status})");
    }
    println!("{}", root.join("README.md").display());
    Ok(0)
}

fn run(cli: Cli) -> Result<i32> {
    let root = xtask::workspace_root();
    match cli.cmd {
        Cmd::Sizes { top } => sizes(&root, top),
        Cmd::BuildEbpf { arch, check } => {
            let arches: Vec<vm::Arch> = match arch {
                Some(a) => vec![a],
                None => vec![vm::Arch::X86_64, vm::Arch::Aarch64],
            };
            ebpf::build(&root, &arches, check)
        }
        Cmd::Dist { arches, oci } => dist_cmd(&root, arches, oci),
        Cmd::Readme => readme(&root),
        Cmd::Man => {
            // The pages come from fdaudit's own clap definition, rendered by its hidden
            // `__man` command (xtask cannot depend on fdaudit: fdaudit's build uses xtask).
            let dir = root.join("docs/man");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = std::process::Command::new(cargo)
                .current_dir(&root)
                .args(["run", "--quiet", "-p", "fdaudit", "--", "__man"])
                .arg(&dir)
                .status()
                .context("failed to run cargo")?;
            if !status.success() {
                bail!("`fdaudit __man` failed ({status})");
            }
            println!("{}", dir.display());
            Ok(0)
        }
        Cmd::VmTest(a) => {
            if a.timeout == 0 {
                bail!("--timeout must be more than 0 seconds");
            }
            let opts = vm::Options {
                arch: a.arch,
                kernels: a.kernels,
                tests: a.tests,
                no_tests: a.no_tests,
                build_only: a.build_only,
                all_tests: a.all_tests,
                guest_env: a.guest_env,
                guest_cmds: a.guest_cmds,
                kernel_args: a.kernel_args,
                smp: a.smp,
                mem: a.mem,
                timeout: Duration::from_secs(a.timeout),
                refresh: a.refresh,
                icount: a.icount,
                jobs: a.jobs,
                doctor_runs: a.doctor_runs,
            };
            let outcomes = vm::run(&root, &opts).context("failed to run the VM kernel matrix")?;
            if opts.build_only {
                eprintln!("vm-test: built; no guest booted (--build-only)");
                return Ok(0);
            }
            println!();
            println!("{}", vm::table(opts.arch, &outcomes));
            let failed = outcomes.iter().filter(|o| !o.failures().is_empty()).count();
            if failed > 0 {
                eprintln!("vm-test: {failed} of {} kernels failed", outcomes.len());
                return Ok(1);
            }
            Ok(0)
        }
    }
}

/// `cargo xtask dist`: the packages of `arches` (default: both), and with `oci` this
/// machine's image.
fn dist_cmd(root: &std::path::Path, arches: Vec<vm::Arch>, oci: bool) -> Result<i32> {
    let arches = if arches.is_empty() {
        vec![vm::Arch::X86_64, vm::Arch::Aarch64]
    } else {
        arches
    };
    let host = vm::Arch::host().context("cargo xtask dist runs on x86_64 or aarch64")?;
    if oci && !arches.contains(&host) {
        bail!(
            "--oci builds the image of this machine's architecture: add --arch {}",
            host.name()
        );
    }
    let packages = dist::run(root, &arches).context("failed to build the packages")?;
    if let Some(p) = packages.iter().find(|p| oci && p.arch == host) {
        let dist = root.join("target/dist");
        let stage = dist.join("stage").join(host.name()).join("oci");
        let image = oci::build(root, host, &p.bin, &stage, &dist)?;
        println!("{}\n{}", image.display(), oci::tag());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn guest_env_needs_a_name() {
        assert_eq!(parse_env("A_1=x=y"), Ok(("A_1".into(), "x=y".into())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("noequals").is_err());
    }
}
