//! Container identity from cgroup paths, and the cgroup2 hierarchy on this machine.
//!
//! Container runtimes name the cgroup of each container after the container: a systemd
//! scope (`docker-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
//! `libpod-<id>.scope`), or a plain directory (`/docker/<id>`, `/kubepods/…/pod<uid>/<id>`,
//! `/lxc/<name>`, `/lxc.payload.<name>`). The same names appear on cgroup v1 controllers and
//! on the v2 unified hierarchy, so one parser of paths serves both; [`parse_path`] is pure
//! and table-tested with the shapes each runtime writes.
//!
//! Shapes as written by the runtimes (and matched the same way by Falco's container engine
//! and tracee's cgroup parser): runc's systemd driver (`<prefix>-<id>.scope`), runc's cgroupfs
//! driver (`<parent>/<id>`), kubelet's systemd and cgroupfs drivers (`kubepods-<qos>-pod<uid
//! with _>.slice` and `kubepods/<qos>/pod<uid>`), systemd-machined (`machine-<name>.scope`,
//! `systemd-nspawn@<name>.service`), LXC 4+ (`lxc.payload.<name>`, earlier `lxc/<name>`).

use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

/// Which runtime made a container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    Docker,
    /// containerd, through its CRI plugin (Kubernetes) or nerdctl.
    Containerd,
    CriO,
    /// Podman (libpod).
    Podman,
    SystemdNspawn,
    Lxc,
    /// A Kubernetes container whose cgroup (cgroupfs driver: a bare id) does not name the
    /// runtime.
    Cri,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
            Runtime::SystemdNspawn => "systemd-nspawn",
            Runtime::Lxc => "lxc",
            Runtime::Cri => "cri",
        }
    }
}

/// What a cgroup path says about the container its processes run in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Container {
    /// The runtime's id: 64 hex digits for OCI runtimes, the machine or container name for
    /// systemd-nspawn and LXC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<Runtime>,
    /// The Kubernetes pod's UID (with dashes), from a kubepods slice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
}

impl Container {
    pub fn is_empty(&self) -> bool {
        self.container_id.is_none() && self.pod_uid.is_none()
    }

    /// A short label for tables: `docker:0123456789ab`, `lxc:web`, `pod:1a2b…`.
    pub fn short(&self) -> Option<String> {
        match (&self.container_id, self.container_runtime) {
            (Some(id), Some(rt)) => {
                let id = if is_hex_id(id) {
                    &id[..12]
                } else {
                    id.as_str()
                };
                Some(format!("{}:{id}", rt.as_str()))
            }
            _ => self.pod_uid.as_ref().map(|u| format!("pod:{u}")),
        }
    }
}

fn is_hex_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `docker-<id>.scope`-like: the id after `prefix`, before `.scope`, when it is 64 hex.
fn scope_id<'a>(comp: &'a str, prefix: &str) -> Option<&'a str> {
    let id = comp.strip_prefix(prefix)?.strip_suffix(".scope")?;
    is_hex_id(id).then_some(id)
}

/// A pod UID from `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_with_underscores>.slice`.
fn pod_uid(comp: &str) -> Option<String> {
    let rest = if let Some(slice) = comp.strip_suffix(".slice") {
        let i = slice.rfind("-pod")?;
        if !slice.starts_with("kubepods") {
            return None;
        }
        &slice[i + 4..]
    } else {
        comp.strip_prefix("pod")?
    };
    let uid = rest.replace('_', "-");
    // A UID is 36 characters (8-4-4-4-12); static pods use a 32-hex config hash instead.
    let ok = (uid.len() == 36 || uid.len() == 32)
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// Undoes systemd's unit-name escaping (`\x2d` for `-`) in a machine name.
fn unescape_unit(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("\\x") {
        out.push_str(&rest[..i]);
        let hex = rest.get(i + 2..i + 4);
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(b) if b.is_ascii() => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            _ => {
                out.push_str("\\x");
                rest = &rest[i + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// One path component's container, if it names one.
fn component(comp: &str, under_pod: bool) -> Option<(Runtime, String)> {
    const SCOPES: [(&str, Runtime); 6] = [
        ("docker-", Runtime::Docker),
        ("cri-containerd-", Runtime::Containerd),
        ("nerdctl-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
        ("libpod-", Runtime::Podman),
        // kubelet + dockershim/cri-dockerd with the systemd driver also use docker-<id>.scope.
        ("cri-dockerd-", Runtime::Docker),
    ];
    for (prefix, rt) in SCOPES {
        if let Some(id) = scope_id(comp, prefix) {
            return Some((rt, id.to_owned()));
        }
    }
    // CRI-O with the cgroupfs driver: `crio-<id>` (no .scope).
    if let Some(id) = comp.strip_prefix("crio-").filter(|id| is_hex_id(id)) {
        return Some((Runtime::CriO, id.to_owned()));
    }
    // podman with the cgroupfs driver: `/libpod_parent/libpod-<id>`.
    if let Some(id) = comp.strip_prefix("libpod-").filter(|id| is_hex_id(id)) {
        return Some((Runtime::Podman, id.to_owned()));
    }
    if let Some(name) = comp
        .strip_prefix("systemd-nspawn@")
        .and_then(|c| c.strip_suffix(".service"))
    {
        return Some((Runtime::SystemdNspawn, unescape_unit(name)));
    }
    if let Some(name) = comp
        .strip_prefix("machine-")
        .and_then(|c| c.strip_suffix(".scope"))
    {
        let name = unescape_unit(name);
        // libvirt registers its VMs with machined too (machine-qemu-1-vm.scope): not containers.
        if !name.starts_with("qemu-") && !name.starts_with("lxc-") {
            return Some((Runtime::SystemdNspawn, name));
        }
    }
    if let Some(name) = comp.strip_prefix("lxc.payload.") {
        return (!name.is_empty()).then(|| (Runtime::Lxc, name.to_owned()));
    }
    // cgroupfs drivers: the bare id, under a pod or under /docker.
    if under_pod && is_hex_id(comp) {
        return Some((Runtime::Cri, comp.to_owned()));
    }
    None
}

/// What `path` (a cgroup path as in /proc/PID/cgroup, v1 or v2) says about its container.
///
/// The outermost container wins: a container's own nested cgroups (`…/docker-<id>.scope/
/// init.scope`, a systemd inside the container) belong to it.
pub fn parse_path(path: &str) -> Container {
    let mut out = Container::default();
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut under_pod = false;
    for (i, comp) in comps.iter().enumerate() {
        if out.pod_uid.is_none() {
            if let Some(uid) = pod_uid(comp) {
                out.pod_uid = Some(uid);
                under_pod = true;
                continue;
            }
        }
        // cgroupfs parents that hold containers by bare id or name.
        let parent = i.checked_sub(1).map(|j| comps[j]);
        let bare = match parent {
            Some("docker") if is_hex_id(comp) => Some((Runtime::Docker, comp.to_string())),
            Some("lxc" | "lxc.payload") if !comp.starts_with("lxc.monitor") => {
                Some((Runtime::Lxc, comp.to_string()))
            }
            _ => None,
        };
        if let Some((rt, id)) = bare.or_else(|| component(comp, under_pod)) {
            out.container_runtime = Some(rt);
            out.container_id = Some(id);
            return out;
        }
    }
    out
}

/// The cgroup path of a process from its /proc/PID/cgroup text: the unified hierarchy's
/// (`0::PATH`) when it has one, else the `name=systemd` v1 hierarchy's, else the first one's.
pub fn proc_cgroup_path(text: &str) -> Option<&str> {
    let mut v1_systemd = None;
    let mut first = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrl.is_empty() {
            // A process on a hybrid machine with every v2 controller unused still has "0::/";
            // prefer a v1 path that says more only when the v2 one is the root.
            if path != "/" {
                return Some(path);
            }
            first.get_or_insert(path);
            continue;
        }
        if ctrl == "name=systemd" {
            v1_systemd = Some(path);
        }
        if first.is_none() || first == Some("/") && path != "/" {
            first = Some(path);
        }
    }
    v1_systemd.filter(|p| *p != "/").or(first)
}

/// The unified-hierarchy path (`0::PATH` line) of /proc/PID/cgroup text.
pub fn unified_path(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The last pid of the `NSpid:` line of /proc/PID/status: the pid as the process's own pid
/// namespace sees it (the first is the host's). None for 0, what a process that is being
/// reaped shows (its pids are already detached).
pub fn ns_pid_from_status(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line["NSpid:".len()..]
        .split_whitespace()
        .last()?
        .parse()
        .ok()
        .filter(|&n| n != 0)
}

/// Where cgroup2 is mounted, from /proc/self/mountinfo text (fstype after the ` - `).
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mount_point = left.split_whitespace().nth(4)?;
        Some(PathBuf::from(unescape_mountinfo(mount_point)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why a cgroup cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "no cgroup2 hierarchy is mounted (see /proc/self/mountinfo): --cgroup needs one, \
         e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`"
    )]
    NoCgroup2,
    #[error(
        "no cgroup {path}: give a path under {root} or relative to it \
         (e.g. /system.slice/foo.service)"
    )]
    NotFound {
        path: String,
        root: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not on the cgroup2 hierarchy, which is mounted at {root} (a cgroup v1 \
         hierarchy is not followed): give the cgroup's path under {root} or relative to it"
    )]
    NotOnCgroup2 { path: String, root: String },
}

/// A cgroup followed with `trace --cgroup` / `watch --cgroup`.
#[derive(Debug, Clone)]
pub struct Followed {
    /// Its id on the cgroup2 hierarchy (the directory's inode number).
    pub id: u64,
    /// Its depth below the root (root = 0): the level bpf_get_current_ancestor_cgroup_id
    /// is asked for.
    pub level: u32,
    /// Its path on the hierarchy (`/system.slice/foo.service`).
    pub path: String,
    /// Its directory, to notice its removal.
    pub dir: PathBuf,
}

impl Followed {
    /// The cgroup at `path` (absolute under the cgroup2 mount, or relative to the hierarchy)
    /// on this machine's cgroup2 hierarchy.
    pub fn find(path: &Path) -> Result<Followed, CgroupError> {
        let h = Hierarchy::open().ok_or(CgroupError::NoCgroup2)?;
        h.follow(path)
    }
}

/// Where a process runs: its cgroup and container, and its pid inside its own pid namespace.
/// Flattened into spawn (trace) and process (scan) records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// The cgroup's id on the unified hierarchy (trace: from the kernel at exec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// The cgroup's path on the unified hierarchy (`/system.slice/foo.service`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(flatten)]
    pub container: Container,
    /// The pid as the process's own pid namespace sees it, when that is not the host's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<u32>,
}

impl Identity {
    /// From a process's /proc/PID/cgroup and /proc/PID/status texts (scan). The `cgroup`
    /// field is the unified hierarchy's path; the container comes from it, or from the v1
    /// paths when the unified one says nothing (hybrid machines).
    pub fn from_proc(pid: u32, cgroup_text: Option<&str>, status_text: Option<&str>) -> Identity {
        let unified = cgroup_text.and_then(unified_path);
        let mut container = unified.map(parse_path).unwrap_or_default();
        if container.is_empty() {
            if let Some(p) = cgroup_text.and_then(proc_cgroup_path) {
                container = parse_path(p);
            }
        }
        Identity {
            cgroup_id: None,
            cgroup: unified.map(str::to_owned),
            container,
            ns_pid: status_text
                .and_then(ns_pid_from_status)
                .filter(|&n| n != pid),
        }
    }

    /// Label for a table column: the container, else nothing.
    pub fn container_label(&self) -> Option<String> {
        self.container.short()
    }
}

/// The cgroup2 hierarchy of this machine: turns the kernel's cgroup ids
/// (bpf_get_current_cgroup_id: the cgroup directory's inode number on cgroup2, see
/// kernfs_node id) into paths.
pub struct Hierarchy {
    root: PathBuf,
    by_id: HashMap<u64, String>,
    /// Ids a walk did not find (cgroups removed before we looked), not to walk for again.
    missing: std::collections::HashSet<u64>,
}

impl Hierarchy {
    /// Finds the cgroup2 mount in /proc/self/mountinfo (never assumed: hybrid machines mount it
    /// at /sys/fs/cgroup/unified, pure v2 ones at /sys/fs/cgroup).
    pub fn open() -> Option<Hierarchy> {
        let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        Some(Hierarchy::at(cgroup2_mount(&mi)?))
    }

    pub fn at(root: PathBuf) -> Hierarchy {
        Hierarchy {
            root,
            by_id: HashMap::new(),
            missing: Default::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path (relative to the hierarchy, starting with `/`) of cgroup `id`. Walks the
    /// hierarchy once per unknown id and caches every directory it sees; `None` when the
    /// cgroup is gone (removed before we looked).
    pub fn path_of(&mut self, id: u64) -> Option<String> {
        if let Some(p) = self.by_id.get(&id) {
            return Some(p.clone());
        }
        if self.missing.contains(&id) {
            return None;
        }
        // Cgroups come and go on a busy node; re-walk from scratch (bounded: a cap keeps a
        // node with churning containers from growing the caches without end).
        if self.by_id.len() > 65536 || self.missing.len() > 65536 {
            self.by_id.clear();
            self.missing.clear();
        }
        let mut stack = vec![(self.root.clone(), String::from("/"))];
        while let Some((dir, rel)) = stack.pop() {
            let Ok(md) = std::fs::metadata(&dir) else {
                continue;
            };
            self.by_id.insert(md.ino(), rel.clone());
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if rel == "/" {
                        format!("/{name}")
                    } else {
                        format!("{rel}/{name}")
                    };
                    stack.push((e.path(), child));
                }
            }
        }
        let found = self.by_id.get(&id).cloned();
        if found.is_none() {
            self.missing.insert(id);
        }
        found
    }

    /// The identity of a spawn: cgroup `id` (from the kernel) resolved to its path and
    /// container, and the pid's namespace pid read from /proc while it still runs.
    pub fn identity(&mut self, id: u64, pid: u32) -> Identity {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
        Identity {
            ns_pid: status
                .as_deref()
                .and_then(ns_pid_from_status)
                .filter(|&n| n != pid),
            ..self.cgroup_identity(id)
        }
    }

    /// What cgroup `id` says of every process in it: its path and container (no
    /// namespace pid, which is the process's own).
    pub fn cgroup_identity(&mut self, id: u64) -> Identity {
        let cgroup = (id != 0).then(|| self.path_of(id)).flatten();
        Identity {
            cgroup_id: (id != 0).then_some(id),
            container: cgroup.as_deref().map(parse_path).unwrap_or_default(),
            cgroup,
            ns_pid: None,
        }
    }

    /// The cgroup at `path` in this hierarchy, with its id and depth.
    pub fn follow(&self, path: &Path) -> Result<Followed, CgroupError> {
        let (id, rel) = self.id_of(path).map_err(|source| {
            let (shown, root) = (path.display().to_string(), self.root.display().to_string());
            // A directory elsewhere (a v1 controller's, on a hybrid machine), not a typo.
            if path.is_absolute() && !path.starts_with(&self.root) && path.is_dir() {
                return CgroupError::NotOnCgroup2 { path: shown, root };
            }
            CgroupError::NotFound {
                path: shown,
                root,
                source,
            }
        })?;
        Ok(Followed {
            id,
            level: rel.split('/').filter(|c| !c.is_empty()).count() as u32,
            dir: self.root.join(rel.trim_start_matches('/')),
            path: rel,
        })
    }

    /// The id (inode number) of the cgroup at `path`: an absolute path under the mount, or a
    /// path relative to the hierarchy (`/system.slice/foo.service`).
    pub fn id_of(&self, path: &Path) -> std::io::Result<(u64, String)> {
        let abs = if path.starts_with(&self.root) {
            path.to_path_buf()
        } else {
            self.root.join(path.strip_prefix("/").unwrap_or(path))
        };
        let md = std::fs::metadata(&abs)?;
        if !md.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "not a cgroup directory",
            ));
        }
        let rel = abs
            .strip_prefix(&self.root)
            .map(|r| format!("/{}", r.display()))
            .unwrap_or_else(|_| "/".into());
        Ok((md.ino(), rel))
    }
}

/// Processes listed in a cgroup's tree (`unclosed --cgroup`, `watch --cgroup`'s scans): `cgroup.procs` of `dir` and of the
/// directories below it. A delegated subtree's owner chooses its names and depth: the walk
/// takes at most [`MAX_CGROUPS`] directories, reads [`PROCS_BYTES`] of each list, keeps
/// [`MAX_MEMBERS`] pids, and follows no link (cgroupfs has none; a directory entry that is
/// not a directory is skipped, a list is opened `O_NOFOLLOW | O_NONBLOCK` and read only
/// when it is a regular file).
pub fn members(dir: &std::path::Path) -> Vec<u32> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = todo.pop() {
        seen += 1;
        if seen > MAX_CGROUPS {
            break;
        }
        let mut text = String::new();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(d.join("cgroup.procs"));
        if let Ok(f) = f.and_then(|f| Ok((f.metadata()?.is_file(), f))) {
            if f.0 {
                let _ = f.1.take(PROCS_BYTES).read_to_string(&mut text);
            }
        }
        out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        if out.len() >= MAX_MEMBERS {
            out.truncate(MAX_MEMBERS);
            break;
        }
        if let Ok(rd) = std::fs::read_dir(&d) {
            todo.extend(
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Directories of a followed cgroup's tree read at attach.
pub const MAX_CGROUPS: usize = 4096;
/// Bytes of one `cgroup.procs` read.
pub const PROCS_BYTES: u64 = 1 << 20;
/// Processes of a followed cgroup tracked at attach.
pub const MAX_MEMBERS: usize = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a";
    const UID: &str = "8a5f6e1c-2b3d-4e5f-9a0b-1c2d3e4f5a6b";
    const UID_: &str = "8a5f6e1c_2b3d_4e5f_9a0b_1c2d3e4f5a6b";

    #[test]
    fn container_paths_of_every_runtime() {
        use Runtime::*;
        // (path, runtime, id, pod uid)
        type Case<'a> = (String, Option<Runtime>, Option<&'a str>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            // Docker, systemd cgroup driver (v2 and v1 name=systemd/controllers).
            (format!("/system.slice/docker-{ID}.scope"), Some(Docker), Some(ID), None),
            // Docker, cgroupfs driver (v1 controllers, v2 with cgroupfs).
            (format!("/docker/{ID}"), Some(Docker), Some(ID), None),
            // A container's own nested cgroup (cgroupns, systemd inside): the outer one wins.
            (format!("/system.slice/docker-{ID}.scope/init.scope"), Some(Docker), Some(ID), None),
            // Kubernetes + containerd, systemd driver, burstable and guaranteed QoS.
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Some(Containerd), Some(ID), Some(UID),
            ),
            (
                format!("/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Some(Containerd), Some(ID), Some(UID),
            ),
            // Kubernetes, cgroupfs driver: the runtime is not in the path.
            (format!("/kubepods/besteffort/pod{UID}/{ID}"), Some(Cri), Some(ID), Some(UID)),
            (format!("/kubepods/pod{UID}/{ID}"), Some(Cri), Some(ID), Some(UID)),
            // The pod's sandbox-less level: a pod, no container yet.
            (format!("/kubepods/burstable/pod{UID}"), None, None, Some(UID)),
            // CRI-O, systemd and cgroupfs drivers; conmon's own scope is not the container.
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{ID}.scope"),
                Some(CriO), Some(ID), Some(UID),
            ),
            (format!("/kubepods/burstable/pod{UID}/crio-{ID}"), Some(CriO), Some(ID), Some(UID)),
            (
                format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{ID}.scope"),
                None, None, Some(UID),
            ),
            // Podman: rootful systemd, rootless (user slice), cgroupfs; conmon is not the container.
            (format!("/machine.slice/libpod-{ID}.scope"), Some(Podman), Some(ID), None),
            (format!("/machine.slice/libpod-{ID}.scope/container"), Some(Podman), Some(ID), None),
            (
                format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"),
                Some(Podman), Some(ID), None,
            ),
            (format!("/libpod_parent/libpod-{ID}"), Some(Podman), Some(ID), None),
            (format!("/machine.slice/libpod-conmon-{ID}.scope"), None, None, None),
            // nerdctl (containerd without Kubernetes).
            (format!("/system.slice/nerdctl-{ID}.scope"), Some(Containerd), Some(ID), None),
            // systemd-nspawn: as a service, and registered as a machine scope.
            ("/machine.slice/systemd-nspawn@debian\\x2dbuild.service/payload".into(), Some(SystemdNspawn), Some("debian-build"), None),
            ("/machine.slice/machine-web1.scope".into(), Some(SystemdNspawn), Some("web1"), None),
            // libvirt VMs register with machined too: not containers.
            ("/machine.slice/machine-qemu\\x2d1\\x2dvm.scope/libvirt/emulator".into(), None, None, None),
            // LXC 4+/LXD (v2), LXC 3 (v1 and v2), and the monitor process (not the container).
            ("/lxc.payload.web".into(), Some(Lxc), Some("web"), None),
            ("/lxc.payload.web/system.slice/cron.service".into(), Some(Lxc), Some("web"), None),
            ("/lxc/web".into(), Some(Lxc), Some("web"), None),
            ("/lxc.payload/web".into(), Some(Lxc), Some("web"), None),
            ("/lxc.monitor.web".into(), None, None, None),
            // Seen from inside a private cgroup namespace (an agent in a pod): relative paths.
            (
                format!("/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
                Some(Containerd), Some(ID), Some(UID),
            ),
            // Not containers.
            ("/".into(), None, None, None),
            ("/user.slice/user-1000.slice/session-2.scope".into(), None, None, None),
            ("/system.slice/docker.service".into(), None, None, None),
            ("/system.slice/containerd.service".into(), None, None, None),
            (format!("/system.slice/docker-{}.scope", &ID[..12]), None, None, None),
            ("/docker/not-an-id".into(), None, None, None),
        ];
        for (path, rt, id, pod) in cases {
            let c = parse_path(&path);
            assert_eq!(c.container_runtime, rt, "runtime of {path}");
            assert_eq!(c.container_id.as_deref(), id, "id of {path}");
            assert_eq!(c.pod_uid.as_deref(), pod, "pod uid of {path}");
        }
    }

    #[test]
    fn proc_cgroup_files_v1_v2_and_hybrid() {
        // Pure v2.
        let v2 = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(
            proc_cgroup_path(&v2),
            Some(format!("/system.slice/docker-{ID}.scope").as_str())
        );
        // Pure v1 (docker cgroupfs driver): name=systemd first.
        let v1 =
            format!("12:pids:/docker/{ID}\n11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n");
        assert_eq!(
            proc_cgroup_path(&v1),
            Some(format!("/docker/{ID}").as_str())
        );
        // Hybrid: the unified line carries the path.
        let hybrid = "4:memory:/x\n1:name=systemd:/system.slice/a.service\n0::/lxc.payload.web\n";
        assert_eq!(proc_cgroup_path(hybrid), Some("/lxc.payload.web"));
        // Hybrid with the unified root only (as on this test machine): the v1 path says more.
        let root_v2 = "4:memory:/process_api/399c\n1:name=systemd:/\n0::/\n";
        assert_eq!(proc_cgroup_path(root_v2), Some("/process_api/399c"));
        assert_eq!(proc_cgroup_path("1:name=systemd:/\n0::/\n"), Some("/"));
        assert_eq!(proc_cgroup_path(""), None);
        assert_eq!(unified_path(root_v2), Some("/"));
        assert_eq!(unified_path(&v1), None);
    }

    #[test]
    fn ns_pid_and_mount_and_short_labels() {
        assert_eq!(
            ns_pid_from_status("Name:\tx\nNSpid:\t4321\t7\nNSpgid:\t1\n"),
            Some(7)
        );
        assert_eq!(ns_pid_from_status("NSpid:\t4321\n"), Some(4321));
        assert_eq!(ns_pid_from_status("Name:\tx\n"), None);
        assert_eq!(
            ns_pid_from_status("NSpid:\t0\n"),
            None,
            "a process being reaped"
        );
        let mi = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                  40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let mi = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_mount(mi), Some(PathBuf::from("/sys/fs/cgroup")));
        let mi = "30 23 0:26 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mount(mi), Some(PathBuf::from("/mnt/my cg")));
        assert_eq!(
            cgroup2_mount("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"),
            None
        );
        let c = parse_path(&format!("/docker/{ID}"));
        assert_eq!(c.short().as_deref(), Some("docker:3f2a0b9c8d7e"));
        assert_eq!(
            parse_path("/lxc.payload.web").short().as_deref(),
            Some("lxc:web")
        );
        let p = parse_path(&format!("/kubepods/pod{UID}"));
        assert_eq!(p.short(), Some(format!("pod:{UID}")));
        assert!(parse_path("/").is_empty());
    }

    #[test]
    fn identity_from_proc_texts() {
        let id = Identity::from_proc(
            4321,
            Some(&format!(
                "1:name=systemd:/docker/{ID}\n0::/system.slice/docker-{ID}.scope\n"
            )),
            Some("NSpid:\t4321\t1\n"),
        );
        assert_eq!(
            id.cgroup.as_deref(),
            Some(format!("/system.slice/docker-{ID}.scope").as_str())
        );
        assert_eq!(id.container.container_runtime, Some(Runtime::Docker));
        assert_eq!(id.ns_pid, Some(1));
        let json = serde_json::to_value(&id).unwrap();
        assert_eq!(json["container_id"], ID);
        assert_eq!(json["container_runtime"], "docker");
        assert_eq!(json["ns_pid"], 1);
        assert!(json.get("pod_uid").is_none() && json.get("cgroup_id").is_none());
        // Hybrid machine, unified root: the v1 path names the container; cgroup stays "/".
        let id = Identity::from_proc(7, Some(&format!("4:memory:/docker/{ID}\n0::/\n")), None);
        assert_eq!(id.cgroup.as_deref(), Some("/"));
        assert_eq!(id.container.container_id.as_deref(), Some(ID));
        let id = Identity::from_proc(7, None, Some("NSpid:\t7\n"));
        assert_eq!(id, Identity::default());
    }

    #[test]
    fn hierarchy_resolves_ids_by_inode() {
        let dir = std::env::temp_dir().join(format!("fdaudit-cg-{}", std::process::id()));
        let leaf = dir.join("system.slice").join(format!("docker-{ID}.scope"));
        std::fs::create_dir_all(&leaf).unwrap();
        let ino = std::fs::metadata(&leaf).unwrap().ino();
        let mut h = Hierarchy::at(dir.clone());
        let want = format!("/system.slice/docker-{ID}.scope");
        assert_eq!(h.path_of(ino).as_deref(), Some(want.as_str()));
        assert_eq!(h.id_of(Path::new(&want)).unwrap(), (ino, want.clone()));
        assert_eq!(h.id_of(&leaf).unwrap(), (ino, want));
        assert_eq!(
            h.path_of(std::fs::metadata(&dir).unwrap().ino()).as_deref(),
            Some("/")
        );
        assert_eq!(h.path_of(u64::MAX), None);
        assert!(h.missing.contains(&u64::MAX));
        let me = h.identity(ino, std::process::id());
        assert_eq!(me.container.container_id.as_deref(), Some(ID));
        assert_eq!(me.cgroup_id, Some(ino));
        assert_eq!(me.ns_pid, None, "the test runs in the host's pid namespace");
        assert!(h.id_of(Path::new("/no/such")).is_err());
        let f = h.follow(Path::new("system.slice")).unwrap();
        assert_eq!((f.level, f.path.as_str()), (1, "/system.slice"));
        assert_eq!(f.dir, dir.join("system.slice"));
        let f = h.follow(&leaf).unwrap();
        assert_eq!((f.id, f.level), (ino, 2));
        assert_eq!(h.follow(Path::new("/")).unwrap().level, 0);
        let e = h.follow(Path::new("/no/such")).unwrap_err().to_string();
        assert!(
            e.starts_with("no cgroup /no/such: give a path under "),
            "{e}"
        );
        // An existing directory off the hierarchy (a v1 controller's on a hybrid machine):
        // said as such, not "no cgroup".
        let v1 = std::env::temp_dir().join(format!("fdaudit-cg-v1-{}", std::process::id()));
        std::fs::create_dir_all(&v1).unwrap();
        let e = h.follow(&v1).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{} is not on the cgroup2 hierarchy", v1.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&v1).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
