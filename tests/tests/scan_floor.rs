//! scan's own work per fd (#44 item 4): beyond the fdinfo read and the readlink, what it
//! asks the kernel per fd stays bounded, counted with strace on a `scan-fixture-hold`
//! process (files and directories half inheritable, pipes, unix socket pairs, TCP).
//! Root-only: `pidfd_getfd` on another process needs ptrace access to it. Loads no eBPF.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use serde_json::Value;

/// Whether this kernel answers a sock_diag dump of unix sockets (`CONFIG_UNIX_DIAG`):
/// the first reply is not an error.
fn kernel_lists_unix_sockets() -> bool {
    // SAFETY: plain socket(2), owned at once.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 4) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd was just created.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = [0u8; 40];
    req[0..4].copy_from_slice(&40u32.to_ne_bytes());
    req[4..6].copy_from_slice(&20u16.to_ne_bytes()); // SOCK_DIAG_BY_FAMILY
    req[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req[16] = libc::AF_UNIX as u8;
    req[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    // SAFETY: req is valid for its length.
    if unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
        return false;
    }
    let mut buf = [0u8; 8192];
    // SAFETY: buf is valid for its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    n >= 16 && u16::from_ne_bytes([buf[4], buf[5]]) != 2 // NLMSG_ERROR
}

/// How many calls of `name` the strace output `text` shows.
fn calls(text: &str, name: &str) -> usize {
    let open = format!("{name}(");
    text.lines()
        .filter(|l| l.split_once(' ').is_some_and(|(_, c)| c.starts_with(&open)))
        .count()
}

#[test]
#[ignore = "needs root"]
fn per_fd_work_beyond_the_floor_is_bounded() {
    let _g = fdaudit_tests::guard();
    fdaudit_tests::require_root();
    let holder = fdaudit_tests::hold_fds(600);
    let (stdout, text) =
        fdaudit_tests::strace_scan(holder.0.id(), &["-e", "trace=statx,openat2,pidfd_getfd"]);
    let records = fdaudit_tests::records(&stdout);
    let proc_ = records
        .iter()
        .find(|r| r["type"] == "process" && r["pid"].as_u64() == Some(u64::from(holder.0.id())))
        .expect("the holder's process record");
    let fds = proc_["fds"].as_array().expect("fds listed");
    let of = |pred: &dyn Fn(&Value) -> bool| fds.iter().filter(|f| pred(f)).count();
    let inheritable = |f: &Value| f["cloexec"] == false && f["fd"].as_u64() >= Some(3);
    let paths =
        of(&|f| inheritable(f) && matches!(f["kind"].as_str(), Some("regular" | "directory")));
    let unix = of(&|f| f["family"] == "unix");
    let other_sockets = of(&|f| f["kind"] == "socket" && f["family"] != "unix");
    assert!(
        paths >= 100 && unix >= 100,
        "the fixture has {paths} inheritable paths, {unix} unix sockets"
    );

    // One statx per inheritable path fd (its kind, its owner and the credentials check
    // share it), plus the walks of a few directories, each once.
    let statx = calls(&text, "statx");
    assert!(
        statx <= paths + 20,
        "{statx} statx for {paths} inheritable path fds:\n{text}"
    );
    // The renamers walk each directory of the table once, not once per file.
    let openat2 = calls(&text, "openat2");
    assert!(
        openat2 <= 20,
        "{openat2} openat2 for {paths} inheritable path fds:\n{text}"
    );
    // Unix sockets of the scanner's own namespace are known from sock_diag: only the
    // other sockets that no table lists are asked for their namespace.
    let asked = calls(&text, "pidfd_getfd");
    if kernel_lists_unix_sockets() {
        assert!(
            asked <= other_sockets,
            "{asked} sockets asked for their namespace; {unix} unix, {other_sockets} others"
        );
    } else {
        eprintln!("this kernel has no unix_diag: {asked} sockets asked, {unix} of them unix");
    }
}
