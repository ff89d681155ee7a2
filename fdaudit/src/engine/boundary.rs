//! Spawn boundaries (issues #22, #37): what differs between a spawn's new image right after
//! exec and what the code that made its inherited fds ran as: the last exec'd image in its
//! ancestry when it was forked (kept across its exec chain) and, for a re-exec, the chain's
//! previous image, from the [`CredNs`] the kernel programs read. Comparing with those rather
//! than with the parent at the fork sees a privilege drop, unshare or chroot followed by any
//! number of forks before the exec, and a setuid helper that drops back before its exec. A leak into an image that runs as and where that code did is a
//! hygiene bug; one across a credential, namespace or root change is the runc
//! CVE-2024-21626 shape (a host directory fd surviving into a container or chroot) or a
//! privilege-escalation path, and its fds are critical.

use std::fmt;

use fdaudit_common::{credns::read as bit, CredNs};

/// A compared field: its JSON key, the [`bit`] that says it was read, and its value.
type Field = (&'static str, u32, fn(&CredNs) -> u64);

/// Every compared field, once: the order of the JSON object and of the text.
const FIELDS: &[Field] = &[
    ("uid", bit::IDS, |c| c.uid.into()),
    ("euid", bit::IDS, |c| c.euid.into()),
    ("suid", bit::IDS, |c| c.suid.into()),
    ("gid", bit::IDS, |c| c.gid.into()),
    ("egid", bit::IDS, |c| c.egid.into()),
    ("sgid", bit::IDS, |c| c.sgid.into()),
    ("cap_effective", bit::CAPS, |c| c.cap_effective),
    ("cap_permitted", bit::CAPS, |c| c.cap_permitted),
    ("no_new_privs", bit::NO_NEW_PRIVS, |c| c.no_new_privs.into()),
    ("mnt_namespace", bit::MNT_NS, |c| c.mnt_ns.into()),
    ("pid_namespace", bit::PID_NS, |c| c.pid_ns.into()),
    ("user_namespace", bit::USER_NS, |c| c.user_ns.into()),
    ("net_namespace", bit::NET_NS, |c| c.net_ns.into()),
    ("cgroup_namespace", bit::CGROUP_NS, |c| c.cgroup_ns.into()),
    ("root_dev", bit::ROOT, |c| user_dev(c.root_dev)),
    ("root_inode", bit::ROOT, |c| c.root_ino),
    ("cgroup2_id", bit::CGROUP, |c| c.cgroup),
];

/// A kernel `dev_t` (major << 20 | minor) in the encoding stat(2)'s `st_dev` gives, which
/// `stat -c %d` prints: what a reader compares `root_dev` with.
fn user_dev(kernel: u32) -> u64 {
    libc::makedev(kernel >> 20, kernel & 0xf_ffff)
}

/// One field that changed: (key, in the earlier image, after exec).
pub type Crossing = (&'static str, u64, u64);

/// What a spawn crossed; never empty (trace's JSON: `{"uid": [0, 65534], "mnt_namespace": [A, B]}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundary(Vec<Crossing>);

impl Boundary {
    /// The fields in which `exec` (the new image) differs from any of `before` (the
    /// ancestry's image at the fork, then the image that exec'd), each paired with the first
    /// it differs from, compared only where both sides were read; `None` when nothing
    /// differs (or nothing could be compared).
    pub fn across(before: &[&CredNs], exec: &CredNs) -> Option<Boundary> {
        let crossed: Vec<Crossing> = FIELDS
            .iter()
            .filter_map(|&(k, b, get)| {
                before
                    .iter()
                    .filter(|c| c.read & exec.read & b != 0)
                    .map(|c| (k, get(c), get(exec)))
                    .find(|&(_, a, b)| a != b)
            })
            .collect();
        (!crossed.is_empty()).then_some(Boundary(crossed))
    }

    /// The changed keys joined with `+` (`uid+euid+mnt_namespace`): the `boundary` metric label,
    /// a bounded set (subsets of [`FIELDS`] in table order).
    pub fn keys(&self) -> String {
        let keys: Vec<&str> = self.0.iter().map(|c| c.0).collect();
        keys.join("+")
    }

    /// Each changed field, in table order.
    pub fn crossings(&self) -> &[Crossing] {
        &self.0
    }
}

/// `uid 0→65534, mnt_namespace 4026531841→4026532500` (capabilities in hex).
impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, a, b)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            if k.starts_with("cap_") {
                write!(f, "{sep}{k} {a:#x}→{b:#x}")?;
            } else {
                write!(f, "{sep}{k} {a}→{b}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The crossings by key, each `[before, after]`, as trace's JSON writes them
    /// (`trace/report/json.rs` checks its record against this shape).
    fn pairs(b: &Boundary) -> BTreeMap<&'static str, [u64; 2]> {
        b.crossings().iter().map(|&(k, a, b)| (k, [a, b])).collect()
    }

    fn root() -> CredNs {
        CredNs {
            read: u32::MAX,
            cap_effective: 0x1ff_ffff_ffff,
            cap_permitted: 0x1ff_ffff_ffff,
            mnt_ns: 4026531841,
            pid_ns: 4026531836,
            user_ns: 4026531837,
            net_ns: 4026531840,
            cgroup_ns: 4026531835,
            cgroup: 1234,
            ..Default::default()
        }
    }

    #[test]
    fn the_same_identity_crosses_nothing() {
        assert_eq!(Boundary::across(&[&root()], &root()), None);
    }

    #[test]
    fn a_uid_drop_and_a_new_mount_namespace_are_named_in_table_order() {
        let mut exec = root();
        exec.uid = 65534;
        exec.euid = 65534;
        exec.suid = 65534;
        exec.cap_effective = 0;
        exec.cap_permitted = 0;
        exec.mnt_ns = 4026532500;
        let b = Boundary::across(&[&root()], &exec).unwrap();
        assert_eq!(
            b.keys(),
            "uid+euid+suid+cap_effective+cap_permitted+mnt_namespace"
        );
        assert_eq!(
            pairs(&b),
            BTreeMap::from([
                ("uid", [0, 65534]),
                ("euid", [0, 65534]),
                ("suid", [0, 65534]),
                ("cap_effective", [0x1ff_ffff_ffff, 0]),
                ("cap_permitted", [0x1ff_ffff_ffff, 0]),
                ("mnt_namespace", [4026531841, 4026532500]),
            ])
        );
        assert!(b.to_string().starts_with("uid 0→65534, euid 0→65534"));
        assert!(b.to_string().contains("cap_effective 0x1ffffffffff→0x0"));
    }

    #[test]
    fn a_chroot_is_a_changed_root_with_the_device_as_stat_gives_it() {
        let mut before = root();
        before.root_ino = 2;
        before.root_dev = (8 << 20) | 1; // sda1
        let mut exec = before;
        exec.root_ino = 1;
        exec.root_dev = 42; // an anonymous device (tmpfs): major 0
        let b = Boundary::across(&[&before], &exec).unwrap();
        assert_eq!(b.keys(), "root_dev+root_inode");
        assert_eq!(
            pairs(&b),
            BTreeMap::from([("root_dev", [0x801, 42]), ("root_inode", [2, 1])])
        );
        exec.root_dev = before.root_dev;
        let b = Boundary::across(&[&before], &exec).unwrap();
        assert_eq!(b.to_string(), "root_inode 2→1");
        before.read &= !bit::ROOT;
        assert_eq!(Boundary::across(&[&before], &exec), None, "root not read");
    }

    #[test]
    fn a_re_exec_is_compared_with_the_ancestry_and_with_the_image_that_execd() {
        let ancestry = root();
        let mut setuid = root(); // a setuid-root helper run by 1000
        setuid.uid = 1000;
        let mut dropped = setuid; // which drops back to 1000 before its next exec
        dropped.euid = 1000;
        dropped.suid = 1000;
        dropped.cap_effective = 0;
        let b = Boundary::across(&[&ancestry, &setuid], &dropped).unwrap();
        assert_eq!(b.keys(), "uid+euid+suid+cap_effective");
        assert_eq!(
            pairs(&b)["uid"],
            [0, 1000],
            "the ancestry's pair comes first"
        );
        assert_eq!(pairs(&b)["euid"], [0, 1000]);
        // The ancestry ran as 1000 too: only the helper's image tells.
        let mut user = setuid;
        user.euid = 1000;
        user.suid = 1000;
        let b = Boundary::across(&[&user, &setuid], &user).unwrap();
        assert_eq!(b.to_string(), "euid 0→1000, suid 0→1000");
        assert_eq!(Boundary::across(&[&user, &user], &user), None);
    }

    #[test]
    fn only_fields_read_on_both_sides_are_compared() {
        let mut fork = root();
        fork.read &= !bit::MNT_NS;
        let mut exec = root();
        exec.mnt_ns = 1;
        assert_eq!(Boundary::across(&[&fork], &exec), None);
        exec.net_ns = 2;
        assert_eq!(
            Boundary::across(&[&fork], &exec).unwrap().keys(),
            "net_namespace"
        );
        assert_eq!(Boundary::across(&[&CredNs::default()], &exec), None);
    }
}
