//! `cargo xtask dist`'s packages work where users put them: the .deb installs with
//! `dpkg -i` (its Depends satisfied), and `fdaudit doctor`, `man fdaudit-trace` and the bash
//! completion work from the installed files; removing it leaves none of them. The tarball
//! carries the same files, runnable from where it is unpacked. The OCI image runs under
//! podman as the DaemonSet runs it, and sees the host's spawns.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn deb_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no package for {other}"),
    }
}

/// `cargo xtask dist --oci --arch HOST`, once per test binary; the two package paths (the
/// image is `localhost/fdaudit:VERSION` in the local containers storage).
fn packages() -> (PathBuf, PathBuf) {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(repo())
            .args([
                "run", "--quiet", "-p", "xtask", "--", "dist", "--oci", "--arch",
            ])
            .arg(std::env::consts::ARCH)
            .status()
            .expect("failed to run cargo xtask dist");
        assert!(st.success(), "cargo xtask dist failed: {st}");
    });
    let dist = repo().join("target/dist");
    let deb = dist.join(format!("fdaudit_{VERSION}_{}.deb", deb_arch()));
    let tgz = dist.join(format!(
        "fdaudit-{VERSION}-{}-linux.tar.gz",
        std::env::consts::ARCH
    ));
    for p in [&deb, &tgz] {
        assert!(p.is_file(), "cargo xtask dist wrote no {}", p.display());
    }
    (deb, tgz)
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "fdaudit"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// Purges the package when the test ends, passed or not.
struct Purge;
impl Drop for Purge {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "fdaudit"]).output();
    }
}

/// The files the package must install (and remove).
const INSTALLED: [&str; 7] = [
    "/usr/bin/fdaudit",
    "/usr/share/man/man1/fdaudit-trace.1.gz",
    "/usr/share/bash-completion/completions/fdaudit",
    "/usr/share/zsh/vendor-completions/_fdaudit",
    "/usr/share/fish/vendor_completions.d/fdaudit.fish",
    "/lib/systemd/system/fdaudit.service",
    "/usr/share/doc/fdaudit/copyright",
];

#[test]
#[ignore = "needs root: installs the .deb with dpkg -i"]
fn the_deb_installs_works_from_its_files_and_removes_cleanly() {
    let (deb, _) = packages();
    assert!(
        !installed(),
        "a package named fdaudit is already installed: dpkg --purge fdaudit first"
    );
    // The Depends line is computed (dpkg-shlibdeps) and names the C library.
    let depends = stdout(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&deb)
            .arg("Depends"),
    );
    assert!(depends.contains("libc6 (>= 2."), "Depends: {depends}");
    let _purge = Purge;
    run(Command::new("dpkg").arg("-i").arg(&deb));
    assert!(installed(), "dpkg -i did not leave fdaudit installed");
    for f in INSTALLED {
        assert!(Path::new(f).exists(), "the package did not install {f}");
    }
    let doctor = stdout(Command::new("/usr/bin/fdaudit").arg("doctor"));
    assert!(
        doctor.contains("program sched_process_exec") && doctor.contains("ok"),
        "{doctor}"
    );
    let man = stdout(
        Command::new("man")
            .args(["-P", "cat", "fdaudit-trace"])
            .env("MANWIDTH", "80"),
    );
    assert!(man.contains("fdaudit-trace"), "man fdaudit-trace:\n{man}");
    let complete = stdout(Command::new("bash").args([
        "-c",
        "source /usr/share/bash-completion/completions/fdaudit && complete -p fdaudit",
    ]));
    assert!(
        complete.starts_with("complete ") && complete.trim_end().ends_with(" fdaudit"),
        "complete -p fdaudit: {complete}"
    );
    run(Command::new("systemd-analyze")
        .arg("verify")
        .arg("/lib/systemd/system/fdaudit.service"));
    run(Command::new("dpkg").args(["--purge", "fdaudit"]));
    assert!(!installed(), "dpkg --purge left fdaudit installed");
    for f in INSTALLED {
        assert!(!Path::new(f).exists(), "removing the package left {f}");
    }
}

#[test]
fn the_tarball_runs_from_where_it_is_unpacked() {
    let (_, tgz) = packages();
    let dir = std::env::temp_dir().join(format!("fdaudit-tgz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("failed to create a temp dir");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&tgz)
        .arg("-C")
        .arg(&dir));
    let top = dir.join(format!(
        "fdaudit-{VERSION}-{}-linux",
        std::env::consts::ARCH
    ));
    let version = stdout(Command::new(top.join("fdaudit")).arg("--version"));
    assert_eq!(version.trim(), format!("fdaudit {VERSION}"));
    for f in [
        "man/man1/fdaudit.1",
        "man/man1/fdaudit-trace.1",
        "completions/fdaudit.bash",
        "completions/_fdaudit",
        "completions/fdaudit.fish",
        "fdaudit.service",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        assert!(top.join(f).is_file(), "the tarball has no {f}");
    }
    let man = stdout(
        Command::new("man")
            .args(["-P", "cat", "-l"])
            .arg(top.join("man/man1/fdaudit-trace.1"))
            .env("MANWIDTH", "80"),
    );
    assert!(man.contains("fdaudit-trace"), "{man}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A directory whose `toolchains/` holds the stable toolchain alone, for RUSTUP_HOME.
fn stable_only_rustup_home(dir: &Path) -> PathBuf {
    let out = run(Command::new("rustc")
        .args(["--print", "sysroot"])
        .env("RUSTUP_TOOLCHAIN", "stable"));
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let home = dir.join("rustup");
    let chains = home.join("toolchains");
    std::fs::create_dir_all(&chains).expect("failed to create toolchains/");
    let name = sysroot.file_name().expect("the sysroot has a name");
    std::os::unix::fs::symlink(&sysroot, chains.join(name)).expect("link the toolchain");
    let settings = format!(
        "version = \"12\"\ndefault_toolchain = \"{}\"\nauto_self_update = \"disable\"\n",
        name.to_string_lossy()
    );
    std::fs::write(home.join("settings.toml"), settings).expect("write settings.toml");
    home
}

#[test]
#[ignore = "needs root: traces the leak with the binary it builds"]
fn stable_rust_alone_builds_a_binary_that_traces_a_leak() {
    let dir = std::env::temp_dir().join(format!("fdaudit-stable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("failed to create a temp dir");
    // cargo, rustc and rustup (rustup's proxies) and the system's tools: no bpf-linker.
    let proxies = PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cargo/bin");
    for tool in ["cargo", "rustc", "rustup"] {
        std::os::unix::fs::symlink(proxies.join(tool), bin.join(tool)).expect("link a tool");
    }
    let rustup_home = stable_only_rustup_home(&dir);
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let env = |c: &mut Command| {
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("CARGO") && k != "CARGO_HOME" || k.starts_with("RUSTC") {
                c.env_remove(k);
            }
        }
        c.env("PATH", &path)
            .env("RUSTUP_HOME", &rustup_home)
            .env("RUSTUP_TOOLCHAIN", "stable")
            .env_remove("FDAUDIT_EBPF")
            .env_remove("FDAUDIT_SKIP_EBPF");
    };
    // The conditions hold: no bpf-linker on PATH, no nightly toolchain.
    let mut which = Command::new("sh");
    which.args(["-c", "command -v bpf-linker"]);
    env(&mut which);
    assert!(
        !which.status().unwrap().success(),
        "bpf-linker is on {path}"
    );
    let mut nightly = Command::new(bin.join("rustup"));
    nightly.args(["run", "nightly", "rustc", "--version"]);
    env(&mut nightly);
    let out = nightly.output().expect("run rustup");
    assert!(!out.status.success(), "nightly is visible: {out:?}");

    // The build keeps its own target directory (kept between runs, so a re-run is quick).
    // A debug build, a developer's first: what is tested is build.rs without bpf-linker or
    // nightly, and it takes 1m45 s of CPU from nothing against release's 3m49 s (CI's
    // 30 minutes).
    let target = repo().join("target/stable-only");
    let mut build = Command::new(bin.join("cargo"));
    build
        .current_dir(repo())
        .args(["build", "--locked", "-p", "fdaudit", "--bin", "fdaudit"])
        .env("CARGO_TARGET_DIR", &target);
    env(&mut build);
    let out = run(&mut build);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("eBPF sources changed"),
        "the committed object is stale:\n{stderr}"
    );
    let fdaudit = target.join("debug/fdaudit");
    let file = dir.join("trace.jsonl");
    let out = run(Command::new(&fdaudit)
        .args(["trace", "--json", "-o"])
        .arg(&file)
        .args(["--", "bash", "-c", "exec 7</etc/hostname; /bin/true"])
        .stdin(std::process::Stdio::null()));
    let text = std::fs::read_to_string(&file).expect("trace wrote its records");
    let records = fdaudit_tests::records(&text);
    let spawn = fdaudit_tests::of_type(&records, "spawn")
        .into_iter()
        .find(|s| s["exec_path"] == "/bin/true")
        .unwrap_or_else(|| panic!("no /bin/true spawn: {text}\n{out:?}"));
    let fd7 = spawn["leaked_fds"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["fd"] == 7))
        .unwrap_or_else(|| panic!("fd 7 did not leak: {spawn}"));
    assert_eq!(fd7["target"], "/etc/hostname", "{spawn}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A container `podman run -d` started (its id on stdout), removed however the test ends.
struct Container(String);

impl Container {
    fn started(out: Output) -> Container {
        assert!(
            out.status.success(),
            "podman run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Container(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", &self.0])
            .output();
    }
}

/// The capabilities deploy/kubernetes/daemonset.yaml adds (its `add:` list).
fn daemonset_capabilities() -> Vec<String> {
    let yaml = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml"))
        .expect("read the DaemonSet");
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "add:").skip(1);
    let mut caps = Vec::new();
    while let Some(cap) = lines.next().and_then(|l| l.trim().strip_prefix("- ")) {
        caps.push(format!("CAP_{cap}"));
    }
    assert!(
        !caps.is_empty(),
        "no capabilities.add list in the DaemonSet"
    );
    caps
}

#[test]
#[ignore = "needs root: runs the image under podman"]
fn the_oci_image_runs_as_the_daemonset_does_and_sees_a_host_spawn() {
    packages();
    let yaml = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml"))
        .expect("read the DaemonSet");
    let tag = format!("localhost/fdaudit:{VERSION}");
    assert!(
        yaml.contains(&format!("image: {tag}")),
        "the DaemonSet names {tag}"
    );
    let archive = repo().join(format!(
        "target/dist/fdaudit-{VERSION}-{}.oci.tar",
        std::env::consts::ARCH
    ));
    assert!(archive.is_file(), "no {}", archive.display());
    let port = 19_700 + (std::process::id() % 200) as u16;
    let name = format!("fdaudit-oci-test-{}", std::process::id());
    // As the DaemonSet: the host's pid namespace, only its capabilities, no privilege
    // escalation, a read-only root, the host's BTF and cgroups read-only. The host network
    // stands for the pod's address (the test scrapes it on loopback). podman's own limits
    // exceed this machine's (docs/fleet.md).
    let caps = daemonset_capabilities().join(",");
    let out = Command::new("podman")
        .args(["--runtime", "runc", "run", "-d", "--rm", "--name", &name])
        .args(["--pid=host", "--network=host", "--cap-drop=ALL"])
        .arg(format!("--cap-add={caps}"))
        .args([
            "--security-opt",
            "seccomp=unconfined",
            "--security-opt",
            "no-new-privileges",
        ])
        .args(["--read-only", "-v", "/sys/kernel/btf:/sys/kernel/btf:ro"])
        .args(["-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro"])
        .args([
            "--ulimit",
            "nofile=1024:20000",
            "--ulimit",
            "nproc=32768:32768",
        ])
        .arg(&tag)
        .args(["watch", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .expect("podman run");
    let _remove = Container::started(out);
    let metrics = || {
        Command::new("curl")
            .args(["-sf", &format!("http://127.0.0.1:{port}/metrics")])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let t0 = std::time::Instant::now();
    while metrics().is_none() {
        assert!(
            t0.elapsed().as_secs() < 30,
            "the image's watch never listened: {}",
            logs(&name)
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // A host spawn with a leak, named so that no other spawn has its name.
    let child = std::env::temp_dir().join(format!("fdaudit-oci-{}", std::process::id()));
    std::fs::copy("/bin/true", &child).expect("copy /bin/true");
    let script = format!("exec 7</etc/hostname; {}", child.display());
    let st = Command::new("bash")
        .args(["-c", &script])
        .status()
        .expect("bash");
    assert!(st.success());
    let want = format!("child=\"{}\"", child.file_name().unwrap().to_string_lossy());
    let t0 = std::time::Instant::now();
    let body = loop {
        let body = metrics().unwrap_or_default();
        if body
            .lines()
            .any(|l| l.starts_with("fdaudit_spawns_with_leaks_total{") && l.contains(&want))
        {
            break body;
        }
        assert!(
            t0.elapsed().as_secs() < 30,
            "no host spawn in the image's metrics: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = std::fs::remove_file(&child);
    assert!(body.contains("fdaudit_spawns_total{"), "{body}");
}

fn logs(name: &str) -> String {
    Command::new("podman")
        .args(["logs", name])
        .output()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default()
}

/// The fds of the process records in a `scan --json` output, by pid.
fn scanned_fds(json: &str) -> Vec<(u64, String, serde_json::Value)> {
    json.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["type"] == "process")
        .map(|r| {
            let comm = r["comm"].as_str().unwrap_or("").to_string();
            (r["pid"].as_u64().unwrap_or(0), comm, r["fds"].clone())
        })
        .collect()
}

#[test]
#[ignore = "needs root: runs containers under podman"]
fn scan_inside_and_outside_a_container_agree_on_what_it_holds() {
    packages();
    let tag = format!("localhost/fdaudit:{VERSION}");
    let limits = [
        "--ulimit",
        "nofile=1024:20000",
        "--ulimit",
        "nproc=32768:32768",
    ];
    // A container of fdaudit's own image whose pid 1 (its spawner, waiting on the stdin
    // `-i` keeps open) holds fds 3-5 without close-on-exec: a socket pair and /dev/null.
    let out = Command::new("podman")
        .args(["--runtime", "runc", "run", "-d", "-i", "--rm"])
        .args(limits)
        .args([
            &tag,
            "__spawner",
            "--strategy",
            "none",
            "--open-fds",
            "6",
            "--wait-stdin",
        ])
        .output()
        .expect("podman run");
    let container = Container::started(out);
    let id = container.0.clone();
    let pid = stdout(Command::new("podman").args(["inspect", "--format", "{{.State.Pid}}", &id]));
    // Ready once its fds are open (it prints `ready` to the container's log, not to us).
    let t0 = std::time::Instant::now();
    while std::fs::read_dir(format!("/proc/{}/fd", pid.trim())).map_or(0, |d| d.count()) < 6 {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the container's spawner never held its fds"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let outside = stdout(Command::new(repo().join("target/release/fdaudit")).args([
        "scan",
        "--json",
        "-p",
        pid.trim(),
    ]));
    // Inside: fdaudit's image in the container's pid namespace, pid 1 as it sees it.
    let inside = stdout(
        Command::new("podman")
            .args(["--runtime", "runc", "run", "--rm"])
            .arg(format!("--pid=container:{id}"))
            .args([
                "--cap-drop=ALL",
                "--cap-add=CAP_SYS_PTRACE,CAP_DAC_READ_SEARCH",
                "--read-only",
            ])
            .args(limits)
            .args([&tag, "scan", "--json", "-p", "1"]),
    );
    let (o, i) = (scanned_fds(&outside), scanned_fds(&inside));
    assert_eq!(o.len(), 1, "{outside}");
    assert_eq!(i.len(), 1, "{inside}");
    assert_eq!(i[0].0, 1, "pid 1 inside: {inside}");
    assert_eq!(
        o[0].0.to_string(),
        pid.trim(),
        "the host pid outside: {outside}"
    );
    assert_eq!(o[0].1, i[0].1, "the same process");
    assert_eq!(o[0].2, i[0].2, "the same fds, kinds, targets and flags");
    assert!(
        o[0].2
            .as_array()
            .is_some_and(|fds| fds.iter().any(|f| f["fd"] == 5)),
        "{outside}"
    );
}
