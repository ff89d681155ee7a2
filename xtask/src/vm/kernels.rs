//! Which kernels the matrix boots, per architecture, and fetching them from Debian.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use super::apt::{self, Apt};

/// Guest architectures: each has its Debian name, Rust target, QEMU and console.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    #[value(name = "aarch64")]
    Aarch64,
}

impl Arch {
    pub fn host() -> Option<Self> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Self::X86_64),
            "aarch64" => Some(Self::Aarch64),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }
    /// Debian's architecture name.
    pub fn deb(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Aarch64 => "arm64",
        }
    }
    pub fn rust_target(self) -> String {
        format!("{}-unknown-linux-gnu", self.name())
    }
    /// The multiarch library directory name (`/lib/<this>`).
    pub fn multiarch(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64-linux-gnu",
            Self::Aarch64 => "aarch64-linux-gnu",
        }
    }
    /// The QEMU system emulator and the machine arguments (software emulation: /dev/kvm on
    /// these machines is PVM, which cannot boot stock kernels). With `icount`, the guest's
    /// clock counts its instructions (one host thread, 1 ns per instruction, no sleeping):
    /// times measured in the guest are then instruction counts, the same from run to run
    /// however busy the host is.
    ///
    /// x86_64 guests run every vCPU on one host thread, taking turns (`thread=single`):
    /// under multi-threaded TCG (QEMU 7.2) Debian's kernels die of `Oops: int3` when they
    /// patch their own text while another vCPU runs it (text_poke_bp's int3 is seen after
    /// the patch is done: at boot, on BPF trampoline updates, when the raw_syscalls
    /// tracepoint is switched; docs/kernels.md has the runs). With one thread the patch and
    /// the other vCPU's next instruction are ordered.
    pub fn qemu(self, icount: bool) -> (&'static str, Vec<&'static str>) {
        let mut args = match self {
            Self::X86_64 => vec![],
            Self::Aarch64 => vec!["-M", "virt"],
        };
        if icount {
            args.extend([
                "-accel",
                "tcg,thread=single",
                "-icount",
                "shift=0,sleep=off",
            ]);
        } else if self == Self::X86_64 {
            args.extend(["-accel", "tcg,thread=single"]);
        } else {
            args.extend(["-accel", "tcg,thread=multi"]);
        }
        args.extend(["-cpu", "max"]);
        let qemu = match self {
            Self::X86_64 => "qemu-system-x86_64",
            Self::Aarch64 => "qemu-system-aarch64",
        };
        (qemu, args)
    }
    /// The serial console device of the guest kernel.
    pub fn console(self) -> &'static str {
        match self {
            Self::X86_64 => "ttyS0",
            Self::Aarch64 => "ttyAMA0",
        }
    }
}

/// A Debian kernel series the matrix knows by a short name.
#[derive(Debug, Clone, Copy)]
pub struct Series {
    /// What `--kernel` accepts: `5.10`, `6.1`, `6.12`, `sid`.
    pub alias: &'static str,
    pub suite: &'static str,
    /// `linux-image-<prefix><digits><suffix>-<debarch>`.
    prefix: &'static str,
    suffix: &'static str,
}

/// Every series, oldest first.
pub const SERIES: [Series; 4] = [
    Series {
        alias: "5.10",
        suite: "bullseye",
        prefix: "5.10.0-",
        suffix: "",
    },
    Series {
        alias: "6.1",
        suite: "bookworm",
        prefix: "6.1.0-",
        suffix: "",
    },
    Series {
        alias: "6.12",
        suite: "bookworm",
        prefix: "6.12.",
        suffix: "+deb12",
    },
    Series {
        alias: "sid",
        suite: "sid",
        prefix: "",
        suffix: "",
    },
];

impl Series {
    pub fn find(alias: &str) -> Option<Self> {
        let alias = if alias == "newest" { "sid" } else { alias };
        SERIES.iter().copied().find(|s| s.alias == alias)
    }

    /// Whether `pkg` is this series' stock kernel image for `arch` (not -cloud, -rt, -dbg).
    fn matches(&self, pkg: &str, arch: Arch) -> bool {
        let Some(rest) = pkg.strip_prefix("linux-image-") else {
            return false;
        };
        let Some(rest) = rest.strip_suffix(&format!("-{}", arch.deb())) else {
            return false;
        };
        let Some(mid) = rest.strip_prefix(self.prefix) else {
            return false;
        };
        if self.alias == "sid" {
            // 7.2.13+deb14: digits and dots, then +deb and digits.
            let Some((ver, deb)) = mid.split_once("+deb") else {
                return false;
            };
            return ver.starts_with(|c: char| c.is_ascii_digit())
                && ver.chars().all(|c| c.is_ascii_digit() || c == '.')
                && !deb.is_empty()
                && deb.chars().all(|c| c.is_ascii_digit());
        }
        let Some(num) = mid.strip_suffix(self.suffix) else {
            return false;
        };
        !num.is_empty() && num.chars().all(|c| c.is_ascii_digit())
    }
}

/// A kernel ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The short name in the table: `5.10`, `sid`, or the file name of a given path.
    pub label: String,
    /// The kernel release (`uname -r`), when known before booting.
    pub release: String,
    pub image: PathBuf,
}

/// Resolves one `--kernel` argument: a path to a kernel image, or a series alias fetched
/// from Debian (the newest image of that series, cached under `vm_dir/kernels`).
pub fn resolve(vm_dir: &Path, arch: Arch, spec: &str, refresh: bool) -> Result<Kernel> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(Kernel {
            label: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| spec.to_string()),
            release: String::new(),
            image: path.to_path_buf(),
        });
    }
    let Some(series) = Series::find(spec) else {
        let known: Vec<&str> = SERIES.iter().map(|s| s.alias).collect();
        bail!(
            "unknown kernel {spec:?}: give a kernel image path or one of {}",
            known.join(", ")
        );
    };
    match fetch(vm_dir, arch, series, refresh) {
        // Debian drops superseded kernels from its mirrors (sid's within days): with lists
        // read earlier, the package may be gone; read them again once.
        Err(e) if !refresh => {
            eprintln!("vm-test: {e:#}; re-reading Debian's package lists");
            fetch(vm_dir, arch, series, true)
        }
        other => other,
    }
}

/// The newest image of `series` from Debian (cached under `vm_dir/kernels`).
fn fetch(vm_dir: &Path, arch: Arch, series: Series, refresh: bool) -> Result<Kernel> {
    let apt = Apt::open(vm_dir, series.suite, arch.deb(), refresh)?;
    let mut pkgs: Vec<String> = apt
        .names_with_prefix("linux-image-")?
        .into_iter()
        .filter(|p| series.matches(p, arch))
        .collect();
    pkgs.sort_by(|a, b| apt::version_cmp(a, b));
    let Some(pkg) = pkgs.pop() else {
        bail!(
            "no {} kernel image for {} in Debian {}: try --refresh",
            series.alias,
            arch.deb(),
            series.suite
        );
    };
    let release = pkg.trim_start_matches("linux-image-").to_string();
    let dir = vm_dir.join("kernels").join(&release);
    if let Some(image) = find_image(&dir) {
        return Ok(Kernel {
            label: series.alias.to_string(),
            release,
            image,
        });
    }
    eprintln!("vm-test: downloading {pkg} from {}", series.suite);
    let debs = vm_dir.join("debs").join(arch.deb());
    let mut got = vec![apt.download(&pkg, &debs)?];
    // From trixie on, linux-image-X is a small package and the image is in linux-binary-X.
    if let Ok(d) = apt.download(&format!("linux-binary-{release}"), &debs) {
        got.push(d);
    }
    let tmp = vm_dir.join("kernels").join(format!("{release}.partial"));
    let _ = std::fs::remove_dir_all(&tmp);
    // Only the image; one of the two packages may have none (tar says so).
    let mut errors = Vec::new();
    for deb in &got {
        if let Err(e) = apt::unpack(deb, &tmp, &["*vmlinuz*"]) {
            errors.push(format!("{e:#}"));
        }
    }
    if find_image(&tmp).is_none() {
        bail!("{pkg} has no vmlinuz: {}", errors.join("; "));
    }
    std::fs::rename(&tmp, &dir)
        .with_context(|| format!("failed to move {} into place", tmp.display()))?;
    let image = find_image(&dir)
        .with_context(|| format!("{pkg} has no vmlinuz (looked in {})", dir.display()))?;
    Ok(Kernel {
        label: series.alias.to_string(),
        release,
        image,
    })
}

/// The `vmlinuz*` file under `dir` (boot/ or usr/lib/modules/<ver>/).
fn find_image(dir: &Path) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.filter_map(|e| e.ok()) {
            let p = e.path();
            let ft = e.file_type().ok()?;
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz"))
            {
                return Some(p);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_pick_stock_images_only() {
        let s510 = Series::find("5.10").unwrap();
        assert!(s510.matches("linux-image-5.10.0-46-amd64", Arch::X86_64));
        assert!(!s510.matches("linux-image-5.10.0-46-cloud-amd64", Arch::X86_64));
        assert!(!s510.matches("linux-image-5.10.0-46-amd64", Arch::Aarch64));
        let s612 = Series::find("6.12").unwrap();
        assert!(s612.matches("linux-image-6.12.38+deb12-amd64", Arch::X86_64));
        assert!(!s612.matches("linux-image-6.1.0-40-amd64", Arch::X86_64));
        let s61 = Series::find("6.1").unwrap();
        assert!(s61.matches("linux-image-6.1.0-40-arm64", Arch::Aarch64));
        assert!(!s61.matches("linux-image-6.12.38+deb12-arm64", Arch::Aarch64));
        let sid = Series::find("newest").unwrap();
        assert!(sid.matches("linux-image-7.2.13+deb14-amd64", Arch::X86_64));
        assert!(!sid.matches("linux-image-7.2.13+deb14-rt-amd64", Arch::X86_64));
        assert!(!sid.matches("linux-image-amd64", Arch::X86_64));
    }
}
