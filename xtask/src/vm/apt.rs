//! Debian packages fetched with the host's own apt tools into a private apt state under
//! `target/vm/apt/`: `apt-get update`, `apt-cache search` and `apt-get download` with
//! `Dir::State::Lists`, `Dir::Cache` and the source list pointed there, so nothing in the
//! host's apt state, /boot or dpkg database changes. Packages are unpacked with `dpkg-deb`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// One Debian suite for one architecture, with its own lists and package cache.
pub struct Apt {
    dir: PathBuf,
    suite: String,
    arch: &'static str,
}

impl Apt {
    /// The private apt state for `suite`/`arch` under `vm_dir`, created and updated on first
    /// use (or when `refresh` is set).
    pub fn open(vm_dir: &Path, suite: &str, arch: &'static str, refresh: bool) -> Result<Self> {
        let dir = vm_dir.join("apt").join(format!("{suite}-{arch}"));
        let apt = Self {
            dir,
            suite: suite.to_string(),
            arch,
        };
        let lists = apt.dir.join("lists");
        let fresh = lists
            .read_dir()
            .map(|mut d| {
                d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().contains("_Packages")))
            })
            .unwrap_or(false);
        if !fresh || refresh {
            for d in ["lists/partial", "cache/archives/partial"] {
                std::fs::create_dir_all(apt.dir.join(d))
                    .with_context(|| format!("failed to create {}", apt.dir.join(d).display()))?;
            }
            let mirror = host_mirror();
            let mut list = format!("deb [signed-by={KEYRING}] {mirror}/debian {suite} main\n");
            if suite != "sid" && suite != "unstable" {
                // Kernel updates of a stable release land in its security suite first.
                list.push_str(&format!(
                    "deb [signed-by={KEYRING}] {mirror}/debian-security {suite}-security main\n"
                ));
            }
            std::fs::write(apt.dir.join("sources.list"), list)
                .context("failed to write the private sources.list")?;
            eprintln!("vm-test: apt-get update for {suite} ({arch})");
            let out = apt
                .command("apt-get")
                .args(["-q", "update"])
                .stdout(Stdio::null())
                .output()
                .context("failed to run apt-get update (is apt installed?)")?;
            if !out.status.success() {
                bail!(
                    "apt-get update for {suite}/{arch} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(apt)
    }

    /// `apt-get`/`apt-cache` with every state directory pointed into the private one.
    fn command(&self, tool: &str) -> Command {
        let d = self.dir.display();
        let mut c = Command::new(tool);
        c.args(["-o", &format!("Dir::Etc::SourceList={d}/sources.list")])
            .args(["-o", "Dir::Etc::SourceParts=-"])
            .args(["-o", &format!("Dir::State::Lists={d}/lists")])
            .args(["-o", &format!("Dir::Cache={d}/cache")])
            .args(["-o", "APT::Get::List-Cleanup=0"])
            .args(["-o", "APT::Sandbox::User=root"])
            .args(["-o", &format!("APT::Architecture={}", self.arch)])
            .args(["-o", &format!("APT::Architectures::={}", self.arch)])
            .env("LC_ALL", "C");
        c
    }

    /// The names of every package whose name starts with `prefix`.
    pub fn names_with_prefix(&self, prefix: &str) -> Result<Vec<String>> {
        let out = self
            .command("apt-cache")
            .args([
                "search",
                "--names-only",
                &format!("^{}", prefix.replace('.', "\\.")),
            ])
            .output()
            .context("failed to run apt-cache search")?;
        if !out.status.success() {
            bail!(
                "apt-cache search in {} failed: {}",
                self.suite,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split(" - ").next())
            .map(|s| s.trim().to_string())
            .filter(|n| n.starts_with(prefix))
            .collect())
    }

    /// Downloads `pkg` (the candidate version) into `into`; returns the .deb's path.
    pub fn download(&self, pkg: &str, into: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(into)
            .with_context(|| format!("failed to create {}", into.display()))?;
        let name_prefix = format!("{}_", pkg.split(':').next().unwrap_or(pkg));
        if let Some(p) = find_deb(into, &name_prefix) {
            return Ok(p);
        }
        let out = self
            .command("apt-get")
            .args(["-q", "download", pkg])
            .current_dir(into)
            .output()
            .context("failed to run apt-get download")?;
        if !out.status.success() {
            bail!(
                "apt-get download {pkg} ({}, {}) failed: {}",
                self.suite,
                self.arch,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        find_deb(into, &name_prefix)
            .with_context(|| format!("apt-get download {pkg} left no .deb in {}", into.display()))
    }
}

fn find_deb(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".deb"))
        })
        .collect();
    debs.sort();
    debs.pop()
}

/// Unpacks the files of `deb` that match the tar wildcards (all when empty) into `dest`.
pub fn unpack(deb: &Path, dest: &Path, wildcards: &[&str]) -> Result<()> {
    std::fs::create_dir_all(dest)
        .with_context(|| format!("failed to create {}", dest.display()))?;
    let mut dpkg = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("failed to run dpkg-deb")?;
    let stdout = dpkg.stdout.take().expect("piped stdout");
    let mut tar = Command::new("tar");
    tar.arg("-C")
        .arg(dest)
        .arg("-x")
        .stdin(stdout)
        .stderr(Stdio::null());
    if !wildcards.is_empty() {
        tar.arg("--wildcards").args(wildcards);
    }
    let st = tar.status().context("failed to run tar")?;
    let dst = dpkg.wait().context("failed to wait for dpkg-deb")?;
    if !dst.success() || !st.success() {
        bail!(
            "failed to unpack {} (dpkg-deb {dst}, tar {st})",
            deb.display()
        );
    }
    Ok(())
}

/// The Debian mirror the host's apt uses (its first non-security `debian` source), without
/// the trailing `/debian`; the public one when none is configured.
pub fn host_mirror() -> String {
    let mut texts = vec![std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default()];
    if let Ok(d) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<PathBuf> = d.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        files.sort();
        for f in files {
            texts.push(std::fs::read_to_string(f).unwrap_or_default());
        }
    }
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| {
            let l = l.trim();
            if let Some(rest) = l.strip_prefix("URIs:") {
                return Some(rest.trim().to_string());
            }
            let rest = l.strip_prefix("deb ")?;
            rest.split_whitespace()
                .find(|w| w.contains("://"))
                .map(str::to_string)
        })
        .find(|u| u.trim_end_matches('/').ends_with("/debian"))
        .map(|u| {
            u.trim_end_matches('/')
                .trim_end_matches("/debian")
                .to_string()
        })
        .unwrap_or_else(|| "http://deb.debian.org".to_string())
}

/// Orders Debian-style version strings by their numeric runs ("6.12.9" < "6.12.38").
pub fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(s: &str) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        let mut num = String::new();
        let mut text = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                if !text.is_empty() && num.is_empty() {
                    out.push((0, std::mem::take(&mut text)));
                }
                num.push(c);
            } else {
                if !num.is_empty() {
                    out.push((num.parse().unwrap_or(u64::MAX), String::new()));
                    num.clear();
                }
                text.push(c);
            }
        }
        if !num.is_empty() {
            out.push((num.parse().unwrap_or(u64::MAX), String::new()));
        }
        out
    }
    parts(a).cmp(&parts(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically() {
        use std::cmp::Ordering::*;
        assert_eq!(
            version_cmp("6.12.9+deb12-amd64", "6.12.38+deb12-amd64"),
            Less
        );
        assert_eq!(version_cmp("5.10.0-46-amd64", "5.10.0-9-amd64"), Greater);
        assert_eq!(version_cmp("6.1.0-40", "6.1.0-40"), Equal);
    }
}
