//! Parsers for the procfs text files the scanner reads. They take bytes and never fail
//! hard: a malformed or truncated file gives `None` fields, not an error.
//!
//! procfs-core parses the tcp/udp/raw tables (scan/net.rs) and /proc/PID/stat (trace);
//! `status`, `limits` and `fdinfo` stay here, because a process chooses part of what they
//! hold and procfs-core's parsers give up on the whole file where that part is odd:
//! `Status` fails on a comm that is not UTF-8 (any process can set one with
//! `PR_SET_NAME`, and would then drop out of `--user`) and cuts a comm at its first `:`;
//! `Limits` needs all sixteen lines and reads past the start of a short line (an overflow
//! panic in debug builds); neither has a field for `Kthread`, and procfs-core has no
//! fdinfo parser (fdinfo is also the per-fd hot path, read 126k times in the benchmark).

/// What `scan` uses from `/proc/PID/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcStatus {
    /// `Name:` (the comm), its bytes as the process set them: the kernel's escapes (`\n`,
    /// `\\`, `\t`...) undone, spaces at either end kept.
    pub name: Option<Vec<u8>>,
    pub ppid: Option<u32>,
    /// Effective uid (second field of `Uid:`).
    pub euid: Option<u32>,
    /// `Kthread: 1`; on kernels without that line, no memory (`VmSize`) and a parent of 0
    /// or 2 (kthreadd) gives a kernel thread.
    pub kthread: bool,
    /// Last field of `NSpid:`: the pid in the process's own pid namespace.
    pub ns_pid: Option<u32>,
    /// What the kernel checks a file's mode against when the process opens it: fsuid and
    /// fsgid (fourth fields of `Uid:` and `Gid:`), `Groups:` and `CapEff:`. `None` when a
    /// line is missing or does not parse.
    pub creds: Option<Creds>,
}

/// A process's file-access credentials, as `/proc/PID/status` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Creds {
    pub fsuid: u32,
    pub fsgid: u32,
    pub groups: Vec<u32>,
    /// Effective capabilities (`CapEff:`, hex).
    pub cap_eff: u64,
}

/// Supplementary groups kept per process; the kernel allows 65536, a process past this
/// many is judged with the first ones only (a group missed can only raise a finding).
const MAX_GROUPS: usize = 1024;

pub fn parse_status(data: &[u8]) -> ProcStatus {
    let mut st = ProcStatus::default();
    let (mut kthread_line, mut vm) = (false, false);
    let (mut fsuid, mut fsgid, mut groups, mut cap_eff) = (None, None, None, None);
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, val) = (&line[..colon], trim(&line[colon + 1..]));
        match key {
            b"Name" => {
                let raw = &line[colon + 1..];
                st.name = Some(unescape_comm(raw.strip_prefix(b"\t").unwrap_or(raw)));
            }
            b"PPid" => st.ppid = first_u32(val),
            b"Uid" => {
                st.euid = nth_u32(val, 1);
                fsuid = nth_u32(val, 3);
            }
            b"Gid" => fsgid = nth_u32(val, 3),
            b"Groups" => {
                let mut ids = Vec::new();
                for w in val.split(u8::is_ascii_whitespace).filter(|s| !s.is_empty()) {
                    let Some(id) = crate::procfs_util::at::parse_u32(w) else {
                        ids.clear();
                        break;
                    };
                    if ids.len() < MAX_GROUPS {
                        ids.push(id);
                    }
                }
                groups = Some(ids);
            }
            b"CapEff" => {
                cap_eff = std::str::from_utf8(val)
                    .ok()
                    .filter(|v| !v.is_empty() && v.len() <= 16)
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
            }
            b"Kthread" => {
                kthread_line = true;
                st.kthread = val == b"1";
            }
            b"VmSize" => vm = true,
            b"NSpid" => {
                st.ns_pid = val
                    .split(u8::is_ascii_whitespace)
                    .rfind(|s| !s.is_empty())
                    .and_then(crate::procfs_util::at::parse_u32)
                    .filter(|&n| n != 0) // a process being reaped
            }
            _ => {}
        }
    }
    if !kthread_line && !vm && matches!(st.ppid, Some(0) | Some(2)) && st.name.is_some() {
        st.kthread = true;
    }
    if let (Some(fsuid), Some(fsgid), Some(groups), Some(cap_eff)) = (fsuid, fsgid, groups, cap_eff)
    {
        st.creds = Some(Creds {
            fsuid,
            fsgid,
            groups,
            cap_eff,
        });
    }
    st
}

/// The `n`th white-space separated number of a status value.
fn nth_u32(val: &[u8], n: usize) -> Option<u32> {
    val.split(u8::is_ascii_whitespace)
        .filter(|s| !s.is_empty())
        .nth(n)
        .and_then(crate::procfs_util::at::parse_u32)
}

/// NOFILE limits from `/proc/PID/limits`: `(soft, hard)`, `None` for "unlimited".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimits {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

pub fn parse_limits(data: &[u8]) -> Option<NofileLimits> {
    let line = data
        .split(|&b| b == b'\n')
        .find(|l| l.starts_with(b"Max open files"))?;
    let mut fields = line[b"Max open files".len()..]
        .split(u8::is_ascii_whitespace)
        .filter(|s| !s.is_empty());
    let soft = limit_value(fields.next()?)?;
    let hard = limit_value(fields.next()?)?;
    Some(NofileLimits { soft, hard })
}

fn limit_value(s: &[u8]) -> Option<Option<u64>> {
    if s == b"unlimited" {
        return Some(None);
    }
    std::str::from_utf8(s).ok()?.parse().ok().map(Some)
}

/// What `scan` uses from `/proc/PID/fdinfo/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FdinfoEntry {
    /// `flags:` in octal: access mode, O_CLOEXEC, O_DIRECTORY, O_PATH...
    pub flags: u32,
    pub mnt_id: Option<u32>,
    pub ino: Option<u64>,
    /// An `scm_fds:` line follows `ino:`: the kernel prints it for unix sockets, and only
    /// for them (`unix_show_fdinfo`, Linux 5.14+).
    pub scm_fds: bool,
    /// Its value: how many fds sent with SCM_RIGHTS wait in the socket's receive queue, in
    /// no fd table until someone receives them (a value that does not parse counts as
    /// `u32::MAX`: not known, so at its worst).
    pub in_flight: u32,
}

impl FdinfoEntry {
    pub fn cloexec(&self) -> bool {
        self.flags & libc::O_CLOEXEC as u32 != 0
    }

    /// Access mode as people read it: "r", "w", "rw" or "path" (O_PATH).
    pub fn access(&self) -> &'static str {
        if self.flags & libc::O_PATH as u32 != 0 {
            return "path";
        }
        match self.flags as i32 & libc::O_ACCMODE {
            libc::O_RDONLY => "r",
            libc::O_WRONLY => "w",
            _ => "rw",
        }
    }

    pub fn writable(&self) -> bool {
        matches!(self.access(), "w" | "rw")
    }
}

/// Parses an fdinfo file; `None` if it has no readable `flags:` line (truncated or
/// malformed), since without flags neither close-on-exec nor the access mode is known.
pub fn parse_fdinfo(data: &[u8]) -> Option<FdinfoEntry> {
    let mut flags = None;
    let mut info = FdinfoEntry::default();
    let mut rest = data;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n');
        let line = &rest[..end.unwrap_or(rest.len())];
        rest = end.map_or(&[][..], |e| &rest[e + 1..]);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, val) = (&line[..colon], trim(&line[colon + 1..]));
        match key {
            b"flags" => {
                if val.is_empty() || val.len() > 11 {
                    return None;
                }
                let mut v: u32 = 0;
                for &b in val {
                    if !(b'0'..=b'7').contains(&b) {
                        return None;
                    }
                    v = v.checked_mul(8)?.checked_add(u32::from(b - b'0'))?;
                }
                flags = Some(v);
            }
            b"mnt_id" => info.mnt_id = first_u32(val),
            b"ino" => {
                info.ino = parse_u64(val);
                if let Some(v) = rest.strip_prefix(b"scm_fds:") {
                    info.scm_fds = true;
                    let v = v.split(|&b| b == b'\n').next().unwrap_or_default();
                    info.in_flight = first_u32(trim(v)).unwrap_or(u32::MAX);
                }
                break; // the last line we need
            }
            _ => {}
        }
    }
    info.flags = flags?;
    Some(info)
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// Undoes the escapes of `Name:` in `/proc/PID/status` (`seq_escape_str` with ESCAPE_SPACE
/// and ESCAPE_SPECIAL: a backslash is itself escaped, so each `\X` pair is unambiguous).
fn unescape_comm(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut it = s.iter().copied();
    while let Some(b) = it.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match it.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(b'r') => out.push(b'\r'),
            Some(b'v') => out.push(0x0b),
            Some(b'f') => out.push(0x0c),
            Some(b'a') => out.push(0x07),
            Some(b'e') => out.push(0x1b),
            Some(c) => out.push(c), // `\\`, `\"`
            None => out.push(b'\\'),
        }
    }
    out
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

fn first_u32(s: &[u8]) -> Option<u32> {
    let end = s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    crate::procfs_util::at::parse_u32(&s[..end])
}

pub use crate::procfs_util::bracket_inode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_credentials() {
        let st = parse_status(
            b"Name:\tx\nUid:\t0\t0\t0\t65534\nGid:\t0\t0\t0\t65533\nGroups:\t4 27 \nCapEff:\t0000000000000006\n",
        );
        let c = st.creds.expect("all four lines are there");
        assert_eq!(
            (c.fsuid, c.fsgid, &c.groups[..], c.cap_eff),
            (65534, 65533, &[4, 27][..], 6)
        );
        let none = parse_status(b"Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\tzz\n");
        assert_eq!(none.creds, None, "a CapEff that does not parse");
        let no_groups =
            parse_status(b"Uid:\t5\t5\t5\t5\nGid:\t5\t5\t5\t5\nGroups:\t\nCapEff:\t0\n");
        assert_eq!(no_groups.creds.map(|c| c.groups), Some(vec![]));
    }

    #[test]
    fn status_fields() {
        let st = parse_status(
            b"Name:\tsleep\nUmask:\t0022\nState:\tS\nPPid:\t12\nUid:\t1000\t1001\t1000\t1000\nKthread:\t0\n",
        );
        assert_eq!(st.name.as_deref(), Some(&b"sleep"[..]));
        assert_eq!(st.ppid, Some(12));
        assert_eq!(st.euid, Some(1001));
        assert!(!st.kthread);
        assert_eq!(
            parse_status(b"Name:\tx\nPPid:\tgarbage\nUid:\t1\n").ppid,
            None
        );
        assert_eq!(
            parse_status(b"Name:\tx\nPPid:\tgarbage\nUid:\t1\n").euid,
            None
        );
        assert_eq!(parse_status(b"").name, None);
        assert!(parse_status(b"Kthread:\t1\n").kthread);
        assert!(parse_status(b"Name:\tkworker/0:1\nPPid:\t2\n").kthread);
        assert!(!parse_status(b"Name:\tsh\nPPid:\t2\nVmSize:\t100 kB\n").kthread);
        assert!(!parse_status(b"Name:\tsh\nPPid:\t2\nKthread:\t0\n").kthread);
        assert_eq!(parse_status(b"NSpid:\t4321\t12\t1\n").ns_pid, Some(1));
        assert_eq!(parse_status(b"NSpid:\t4321\n").ns_pid, Some(4321));
        assert_eq!(st.ns_pid, None);
    }

    /// A comm with a newline, a tab, a backslash and spaces at its ends, as the kernel
    /// prints it in `status`, comes back as the process set it.
    #[test]
    fn the_kernels_escapes_in_the_comm_are_undone() {
        let st = parse_status(b"Name:\t a\\nb\\tc\\\\d \nPPid:\t1\n");
        assert_eq!(st.name.as_deref(), Some(&b" a\nb\tc\\d "[..]));
    }

    /// Why `status` is not handed to procfs-core (see the module doc).
    #[test]
    fn a_non_utf8_comm_is_kept_where_procfs_core_gives_up() {
        use procfs_core::FromRead as _;
        let status = b"Name:\tev\xffl:x\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t7\nNgid:\t0\nPid:\t7\nPPid:\t1\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t\nThreads:\t1\nSigQ:\t0/1\nSigPnd:\t0\nShdPnd:\t0\nSigBlk:\t0\nSigIgn:\t0\nSigCgt:\t0\nCapInh:\t0\nCapPrm:\t0\nCapEff:\t0\n";
        assert!(procfs_core::process::Status::from_read(&status[..]).is_err());
        let st = parse_status(status);
        assert_eq!(st.name.as_deref(), Some(&b"ev\xffl:x"[..]));
        assert_eq!((st.ppid, st.euid), (Some(1), Some(1000)));
    }

    #[test]
    fn limits() {
        let l = b"Limit                     Soft Limit           Hard Limit           Units     \n\
Max processes             96364                96364                processes \n\
Max open files            1024                 524288               files     \n";
        assert_eq!(
            parse_limits(l),
            Some(NofileLimits {
                soft: Some(1024),
                hard: Some(524288)
            })
        );
        assert_eq!(
            parse_limits(b"Max open files  unlimited unlimited files\n"),
            Some(NofileLimits {
                soft: None,
                hard: None
            })
        );
        assert_eq!(parse_limits(b"Max open files            1024"), None);
        assert_eq!(parse_limits(b"Max open files  12x 13 files\n"), None);
        assert_eq!(parse_limits(b""), None);
    }

    #[test]
    fn fdinfo() {
        let i = parse_fdinfo(b"pos:\t0\nflags:\t02100002\nmnt_id:\t27\nino:\t246951\n").unwrap();
        assert!(i.cloexec());
        assert_eq!(i.access(), "rw");
        assert_eq!(i.mnt_id, Some(27));
        assert_eq!(i.ino, Some(246951));
        let i = parse_fdinfo(b"pos:\t0\nflags:\t01\n").unwrap();
        assert!(!i.cloexec());
        assert_eq!(i.access(), "w");
        assert_eq!(i.ino, None);
        assert!(!i.scm_fds);
        let u = parse_fdinfo(b"pos:\t0\nflags:\t02\nmnt_id:\t10\nino:\t7\nscm_fds: 0\n").unwrap();
        assert!(u.scm_fds);
        assert_eq!(u.in_flight, 0);
        let u = parse_fdinfo(b"flags:\t02\nino:\t7\nscm_fds: 2\n").unwrap();
        assert_eq!((u.scm_fds, u.in_flight), (true, 2));
        let u = parse_fdinfo(b"flags:\t02\nino:\t7\nscm_fds: x").unwrap();
        assert_eq!((u.scm_fds, u.in_flight), (true, u32::MAX));
        assert_eq!(parse_fdinfo(b"pos:\t0\nfla"), None);
        assert_eq!(parse_fdinfo(b"pos:\t0\nflags:\t09\n"), None);
        assert_eq!(parse_fdinfo(b"flags:\t\n"), None);
        assert_eq!(
            parse_fdinfo(b"flags:\t010000000\n").unwrap().access(),
            "path"
        );
    }

    #[test]
    fn inodes_in_brackets() {
        assert_eq!(bracket_inode(b"socket:[12345]"), Some(12345));
        assert_eq!(bracket_inode(b"net:[4026531833]"), Some(4026531833));
        assert_eq!(bracket_inode(b"socket:[12"), None);
        assert_eq!(bracket_inode(b"/tmp"), None);
    }
}
