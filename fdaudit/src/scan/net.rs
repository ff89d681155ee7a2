//! Socket tables from `/proc/PID/net/*`: family, addresses and listening state by inode.
//! Read once per network namespace, and only when a socket needs them.

use std::collections::HashMap;
use std::ffi::CStr;
use std::io::Read as _;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use crate::fdkind::family_name;

/// A socket's address as the tables give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Inet(SocketAddr),
    /// A unix socket's path (`@name` for abstract ones), raw bytes.
    Unix(Box<[u8]>),
}

impl Addr {
    /// The exact bytes (for JSON).
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Addr::Inet(a) => a.to_string().into_bytes(),
            Addr::Unix(p) => p.to_vec(),
        }
    }
}

/// What the tables say about one socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SockInfo {
    /// Address family as `family_name` prints it: "inet", "inet6", "unix", "netlink", ...
    pub family: &'static str,
    /// "tcp", "udp", "raw", "stream", "dgram", "seqpacket", "netlink", "packet".
    pub proto: &'static str,
    pub local: Option<Addr>,
    pub remote: Option<Addr>,
    pub listening: bool,
}

/// A socket as the kernel names its protocol (the `system.sockprotoname` xattr of the fd):
/// the family, the protocol, and the one table that may list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProto {
    pub family: &'static str,
    /// "tcp", "udp", "raw", ... for inet; "stream" or "unix" (datagram or seqpacket, which
    /// the kernel names "UNIX"; before 5.15 it named stream sockets "UNIX" too) for unix;
    /// the lowercased name otherwise.
    pub proto: String,
    /// The `net/` table that lists sockets of this protocol, if fdaudit reads one.
    pub table: Option<&'static str>,
}

impl KernelProto {
    /// A unix socket of a type the kernel did not say (fdinfo's `scm_fds:` line).
    pub fn unix() -> KernelProto {
        KernelProto {
            family: "unix",
            proto: "unix".into(),
            table: Some("unix"),
        }
    }

    /// From the xattr's value: "TCP", "TCPv6", "UDP", "UDPv6", "RAW", "RAWv6", "UNIX",
    /// "UNIX-STREAM", "NETLINK", "PACKET", "PING", "SCTP", "MPTCP", "AF_VSOCK", ...
    pub fn from_name(name: &str) -> KernelProto {
        let (family, proto, table): (&'static str, &str, Option<&'static str>) = match name {
            "TCP" => ("inet", "tcp", Some("tcp")),
            "TCPv6" => ("inet6", "tcp", Some("tcp6")),
            "UDP" => ("inet", "udp", Some("udp")),
            "UDPv6" => ("inet6", "udp", Some("udp6")),
            "RAW" => ("inet", "raw", Some("raw")),
            "RAWv6" => ("inet6", "raw", Some("raw6")),
            "UNIX-STREAM" => ("unix", "stream", Some("unix")),
            "UNIX" => ("unix", "unix", Some("unix")),
            "NETLINK" => ("netlink", "netlink", Some("netlink")),
            "PACKET" => ("packet", "packet", Some("packet")),
            "AF_VSOCK" => ("vsock", "vsock", None),
            _ => match name.strip_suffix("v6") {
                Some(base) => ("inet6", base, None),
                None if matches!(name, "PING" | "SCTP" | "MPTCP" | "UDP-Lite" | "UDPLITE") => {
                    ("inet", name, None)
                }
                None => ("other", name, None),
            },
        };
        KernelProto {
            family,
            proto: proto.to_ascii_lowercase(),
            table,
        }
    }
}

/// One line of the unix table, or an inode the table lists more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum UnixEntry {
    One(SockInfo),
    /// The kernel lists every unix socket exactly once; a second line with the same inode
    /// is text from some socket's path (paths are printed raw, newlines included), and
    /// nothing tells which line is the real one. `listening` is set if any line says so
    /// (a forged line can raise a finding, never hide one).
    Ambiguous {
        stream: bool,
        listening: bool,
    },
}

/// All sockets of one network namespace, by inode.
#[derive(Debug, Default)]
pub struct NetTables {
    /// tcp, tcp6, udp, udp6, raw, raw6, netlink, packet: their lines hold no text a user
    /// chooses, so each names a real socket (by table, for the lookup by protocol).
    by_inode: HashMap<u64, (&'static str, SockInfo)>,
    /// The unix table, whose paths are raw bytes a user chooses.
    unix: HashMap<u64, UnixEntry>,
    /// Tables that exist but could not be read (not a regular file, too large, ...).
    pub unreadable: u32,
}

/// The most of one `net/` table that is read (a real one lists ~150 bytes per socket:
/// over a million sockets).
pub const MAX_TABLE: u64 = 256 << 20;
/// Longer lines are skipped: no line the kernel writes in these tables comes near it.
const MAX_LINE: usize = 4096;

const TABLES: &[(&str, Kind)] = &[
    ("tcp", Kind::Inet(libc::AF_INET, "tcp")),
    ("tcp6", Kind::Inet(libc::AF_INET6, "tcp")),
    ("udp", Kind::Inet(libc::AF_INET, "udp")),
    ("udp6", Kind::Inet(libc::AF_INET6, "udp")),
    ("raw", Kind::Inet(libc::AF_INET, "raw")),
    ("raw6", Kind::Inet(libc::AF_INET6, "raw")),
    ("unix", Kind::Unix),
    ("netlink", Kind::Other(libc::AF_NETLINK, "netlink", 9)),
    ("packet", Kind::Other(libc::AF_PACKET, "packet", 8)),
];

#[derive(Clone, Copy)]
enum Kind {
    Inet(i32, &'static str),
    Unix,
    /// Family, protocol name, index of the inode column.
    Other(i32, &'static str, usize),
}

/// The byte order /proc/net/{tcp,udp,raw}* print addresses in: the host's.
static SYSTEM: procfs_core::ExplicitSystemInfo = procfs_core::ExplicitSystemInfo {
    boot_time_secs: 0,
    ticks_per_second: 100,
    page_size: 4096,
    is_little_endian: cfg!(target_endian = "little"),
};

impl NetTables {
    /// Streams every table found in the `net` directory `dir`; missing tables are skipped,
    /// unreadable ones counted, malformed lines ignored.
    pub fn load(dir: RawFd) -> NetTables {
        let mut t = NetTables::default();
        let mut line = Vec::with_capacity(256);
        for (name, kind) in TABLES {
            let cname = std::ffi::CString::new(*name).expect("no NUL in table names");
            let f = match crate::procfs_util::at::Stream::open(dir, &cname, MAX_TABLE) {
                Ok(f) => f,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(_) => {
                    t.unreadable += 1;
                    continue;
                }
            };
            let mut r = std::io::BufReader::with_capacity(64 * 1024, f);
            let res = crate::procfs_util::at::for_each_line(&mut r, &mut line, MAX_LINE, |l| {
                t.add_line(name, *kind, l)
            });
            if res.is_err() {
                t.unreadable += 1;
            }
        }
        t
    }

    /// One line (`n` counts from 0, the header); the header and malformed lines are skipped.
    fn add_line(&mut self, table: &'static str, kind: Kind, (n, line): (usize, &[u8])) {
        if n == 0 {
            return;
        }
        let parsed = match kind {
            Kind::Inet(af, proto) => parse_inet_line(line, af, proto),
            Kind::Unix => {
                if let Some((ino, info)) = parse_unix_line(line) {
                    self.add_unix(ino, info);
                }
                return;
            }
            Kind::Other(af, proto, col) => parse_other_line(line, af, proto, col),
        };
        if let Some((ino, info)) = parsed {
            if ino != 0 {
                self.by_inode.insert(ino, (table, info));
            }
        }
    }

    fn add_unix(&mut self, ino: u64, info: SockInfo) {
        use std::collections::hash_map::Entry;
        match self.unix.entry(ino) {
            Entry::Vacant(v) => {
                v.insert(UnixEntry::One(info));
            }
            Entry::Occupied(mut o) => {
                let e = o.get_mut();
                let (stream, listening) = match e {
                    UnixEntry::One(first) => (first.proto == "stream", first.listening),
                    UnixEntry::Ambiguous { stream, listening } => (*stream, *listening),
                };
                *e = UnixEntry::Ambiguous {
                    stream: stream && info.proto == "stream",
                    listening: listening || info.listening,
                };
            }
        }
    }

    /// What the tables say about socket `ino`.
    ///
    /// With the kernel's protocol (`kp`, on a live system), only the table of that protocol
    /// is asked, so no line of another table (a forged unix line above all) changes what
    /// the socket is; a unix line whose type contradicts the kernel is not taken.
    ///
    /// Without it (a fixture tree), a socket listed in a table other than unix is that;
    /// a unix line counts only where no other table lists the inode.
    pub fn lookup(&self, ino: u64, kp: Option<&KernelProto>) -> Option<SockInfo> {
        match kp {
            Some(kp) => match kp.table? {
                // "UNIX-STREAM" (5.15+) says stream; "UNIX" says not stream only from
                // 5.15 on: before, the kernel named stream sockets "UNIX" too (5.10's
                // listener was then "not found").
                "unix" => self.unix_lookup(ino, (kp.proto == "stream").then_some(true)),
                table => self
                    .by_inode
                    .get(&ino)
                    .filter(|(t, _)| *t == table)
                    .map(|(_, i)| i.clone()),
            },
            None => match self.by_inode.get(&ino) {
                Some((_, i)) => Some(i.clone()),
                None => self.unix_lookup(ino, None),
            },
        }
    }

    /// Socket `ino` in a table other than unix: those lines hold no text a user chooses,
    /// so a socket listed there is of that table's protocol (the kernel's word, as good as
    /// asking it).
    pub fn listed(&self, ino: u64) -> Option<SockInfo> {
        self.by_inode.get(&ino).map(|(_, i)| i.clone())
    }

    /// Socket `ino` in the unix table, for a socket the kernel says is unix; `stream` when
    /// the kernel also said whether it is a stream socket.
    pub fn unix_lookup(&self, ino: u64, stream: Option<bool>) -> Option<SockInfo> {
        match self.unix.get(&ino)? {
            UnixEntry::One(i) => {
                (stream.is_none_or(|s| s == (i.proto == "stream"))).then(|| i.clone())
            }
            UnixEntry::Ambiguous {
                stream: s,
                listening,
            } => Some(SockInfo {
                family: family_name(libc::AF_UNIX as u16),
                proto: if stream.unwrap_or(*s) {
                    "stream"
                } else {
                    "unix"
                },
                local: None,
                remote: None,
                listening: *listening,
            }),
        }
    }
}

fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(u8::is_ascii_whitespace)
        .filter(|s| !s.is_empty())
}

/// A tcp/udp/raw line, parsed by procfs-core (one line at a time, so one odd line costs
/// only itself). Its addresses are in host byte order, the port in plain hex.
fn parse_inet_line(line: &[u8], af: i32, proto: &'static str) -> Option<(u64, SockInfo)> {
    use procfs_core::FromBufReadSI as _;
    // procfs-core skips the first line as the header.
    let text = (&b"\n"[..]).chain(line);
    let (ino, local, remote, listening) = if proto == "tcp" {
        let e = procfs_core::net::TcpNetEntries::from_buf_read(text, &SYSTEM)
            .ok()?
            .0
            .pop()?;
        let listening = matches!(e.state, procfs_core::net::TcpState::Listen);
        (e.inode, e.local_address, e.remote_address, listening)
    } else {
        // udp and raw tables have the same columns.
        let e = procfs_core::net::UdpNetEntries::from_buf_read(text, &SYSTEM)
            .ok()?
            .0
            .pop()?;
        (e.inode, e.local_address, e.remote_address, false)
    };
    let v6 = af == libc::AF_INET6;
    if local.is_ipv6() != v6 || remote.is_ipv6() != v6 {
        return None;
    }
    let remote =
        (remote.port() != 0 || !remote.ip().is_unspecified()).then_some(Addr::Inet(remote));
    Some((
        ino,
        SockInfo {
            family: family_name(af as u16),
            proto,
            local: Some(Addr::Inet(local)),
            remote,
            listening,
        },
    ))
}

/// Splits off `n` bytes that all satisfy `ok`, then one byte `sep`.
fn take_field(s: &[u8], n: usize, ok: fn(&u8) -> bool, sep: u8) -> Option<(&[u8], &[u8])> {
    if s.len() <= n || !s[..n].iter().all(ok) || s[n] != sep {
        return None;
    }
    Some((&s[..n], &s[n + 1..]))
}

fn upper_hex(b: &u8) -> bool {
    b.is_ascii_digit() || (b'A'..=b'F').contains(b)
}

fn lower_hex(b: &u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(b)
}

/// A line of `/proc/net/unix`, exactly as the kernel prints it (`unix_seq_show`):
/// `"%pK: %08X %08X %08X %04X %02X %5lu"`, then, for a bound socket, a space and the path
/// up to the end of the line. The path is raw bytes the socket's owner chose (an abstract
/// name may hold newlines), so the fixed columns are checked strictly and the inode is the
/// last column before the path; a line that is not in this shape is not a unix entry
/// (procfs-core's parser splits the path at white space and needs UTF-8, so it is not used
/// here).
fn parse_unix_line(line: &[u8]) -> Option<(u64, SockInfo)> {
    // %pK: 16 hex digits on 64-bit kernels, 8 on 32-bit ones.
    let colon = line.iter().position(|&b| b == b':')?;
    if !matches!(colon, 8 | 16) || !line[..colon].iter().all(lower_hex) {
        return None;
    }
    let rest = line.get(colon + 1..)?.strip_prefix(b" ")?;
    let (_refs, rest) = take_field(rest, 8, upper_hex, b' ')?;
    let (_proto, rest) = take_field(rest, 8, upper_hex, b' ')?;
    let (flags, rest) = take_field(rest, 8, upper_hex, b' ')?;
    let (ty, rest) = take_field(rest, 4, upper_hex, b' ')?;
    let (_st, rest) = take_field(rest, 2, upper_hex, b' ')?;
    // %5lu: right-aligned in at least 5 columns.
    let pad = rest.iter().take_while(|&&b| b == b' ').count();
    let digits = rest[pad..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > 20 || pad != 5usize.saturating_sub(digits) {
        return None;
    }
    let ino: u64 = std::str::from_utf8(&rest[pad..pad + digits])
        .ok()?
        .parse()
        .ok()?;
    let path = match &rest[pad + digits..] {
        [] => None,
        [b' ', path @ ..] if !path.is_empty() => Some(path),
        _ => return None,
    };
    let flags = u32::from_str_radix(std::str::from_utf8(flags).ok()?, 16).ok()?;
    let ty = u16::from_str_radix(std::str::from_utf8(ty).ok()?, 16).ok()?;
    let proto = match ty {
        1 => "stream",
        2 => "dgram",
        5 => "seqpacket",
        _ => return None,
    };
    Some((
        ino,
        SockInfo {
            family: family_name(libc::AF_UNIX as u16),
            proto,
            local: path.map(|p| Addr::Unix(p.into())),
            remote: None,
            // __SO_ACCEPTCON
            listening: flags & 0x0001_0000 != 0,
        },
    ))
}

fn parse_other_line(
    line: &[u8],
    af: i32,
    proto: &'static str,
    col: usize,
) -> Option<(u64, SockInfo)> {
    let ino = fields(line).nth(col)?;
    let ino = std::str::from_utf8(ino).ok()?.parse().ok()?;
    Some((
        ino,
        SockInfo {
            family: family_name(af as u16),
            proto,
            local: None,
            remote: None,
            listening: false,
        },
    ))
}

/// `getxattrat(2)` (Linux 6.13): the same number on every architecture (new system calls
/// share one table since 5.1).
const SYS_GETXATTRAT: libc::c_long = 464;
/// Set once `getxattrat` said ENOSYS: use the path-based call from then on.
static NO_GETXATTRAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The kernel's protocol name of the socket behind the fd link `name` in the fd directory
/// `fd_dir` (`path` is the same link from the root, for kernels before 6.13): the
/// `system.sockprotoname` xattr, which sockfs answers from the socket itself; no file
/// system behind the fd is asked. Called only for fds whose link says socket.
pub fn sockprotoname(
    fd_dir: RawFd,
    name: &CStr,
    path: impl FnOnce() -> Option<std::ffi::CString>,
) -> Option<KernelProto> {
    use std::sync::atomic::Ordering;
    let mut buf = [0u8; 64];
    let mut n = -1;
    if !NO_GETXATTRAT.load(Ordering::Relaxed) {
        // struct xattr_args { __aligned_u64 value; __u32 size; __u32 flags; }
        #[repr(C)]
        struct XattrArgs {
            value: u64,
            size: u32,
            flags: u32,
        }
        let mut args = XattrArgs {
            value: buf.as_mut_ptr() as u64,
            size: buf.len() as u32,
            flags: 0,
        };
        // SAFETY: name and the attribute name are NUL-terminated; args points at buf,
        // valid for its length, and the kernel reads size_of::<XattrArgs>() bytes of args.
        n = unsafe {
            libc::syscall(
                SYS_GETXATTRAT,
                fd_dir,
                name.as_ptr(),
                0 as libc::c_uint,
                c"system.sockprotoname".as_ptr(),
                &mut args as *mut XattrArgs,
                std::mem::size_of::<XattrArgs>(),
            )
        } as isize;
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            NO_GETXATTRAT.store(true, Ordering::Relaxed);
        }
    }
    if n < 0 && NO_GETXATTRAT.load(Ordering::Relaxed) {
        let path = path()?;
        // SAFETY: path is NUL-terminated; buf valid for its length.
        n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                c"system.sockprotoname".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
    }
    if n <= 0 {
        return None;
    }
    let s = &buf[..n as usize];
    let s = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
    Some(KernelProto::from_name(std::str::from_utf8(s).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    impl NetTables {
        /// Parses one table's whole text, header line first.
        fn add(&mut self, table: &str, data: &[u8]) {
            if let Some((name, kind)) = TABLES.iter().find(|(n, _)| *n == table) {
                let mut r = data;
                let mut line = Vec::new();
                crate::procfs_util::at::for_each_line(&mut r, &mut line, MAX_LINE, |l| {
                    self.add_line(name, *kind, l)
                })
                .expect("reading a slice cannot fail");
            }
        }
    }

    impl Addr {
        /// For people: a unix path escaped.
        fn render(&self) -> String {
            match self {
                Addr::Inet(a) => a.to_string(),
                Addr::Unix(p) => crate::output::escape_bytes(p),
            }
        }
    }

    const TCP: &[u8] = b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 12346 1\n\
   2: garbage\n";

    const UNIX_HEADER: &str = "Num       RefCount Protocol Flags    Type St Inode Path\n";

    fn get(t: &NetTables, ino: u64) -> SockInfo {
        t.lookup(ino, None)
            .unwrap_or_else(|| panic!("inode {ino} not found"))
    }

    #[test]
    fn tcp_and_tcp6() {
        let mut t = NetTables::default();
        t.add("tcp", TCP);
        t.add(
            "tcp6",
            b"header\n   0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1\n",
        );
        let l = get(&t, 12345);
        assert_eq!((l.family, l.proto, l.listening), ("inet", "tcp", true));
        assert_eq!(l.local.as_ref().unwrap().render(), "127.0.0.1:8080");
        assert_eq!(l.remote, None);
        let c = get(&t, 12346);
        assert!(!c.listening);
        assert_eq!(c.remote.as_ref().unwrap().render(), "127.0.0.1:8080");
        let six = get(&t, 777);
        assert_eq!(six.family, "inet6");
        assert_eq!(six.local.as_ref().unwrap().render(), "[::1]:22");
        assert_eq!(t.by_inode.len(), 3);
        // The kernel's protocol picks the table: a TCPv6 socket is not looked up in tcp.
        let tcp6 = KernelProto::from_name("TCPv6");
        assert_eq!(t.lookup(777, Some(&tcp6)), Some(six));
        assert_eq!(t.lookup(12345, Some(&tcp6)), None);
        assert_eq!(t.lookup(12345, Some(&KernelProto::from_name("UDP"))), None);
    }

    #[test]
    fn unix_table() {
        let mut t = NetTables::default();
        let text = format!(
            "{UNIX_HEADER}\
0000000000000000: 00000002 00000000 00010000 0001 01 24383 @abs name\n\
0000000000000000: 00000003 00000000 00000000 0001 03 24924\n\
ffff8a0b4c3d2e00: 00000002 00000000 00000000 0002 01   999 /run/x\n\
0000000000000000: 00000003 00000000 0000\n"
        );
        t.add("unix", text.as_bytes());
        let l = get(&t, 24383);
        assert!(l.listening);
        assert_eq!(l.proto, "stream");
        assert_eq!(l.local.as_ref().unwrap().render(), "@abs name");
        let c = get(&t, 24924);
        assert!(!c.listening);
        assert_eq!(c.local, None);
        let d = get(&t, 999);
        assert_eq!(
            (d.proto, d.local.unwrap().render()),
            ("dgram", "/run/x".into())
        );
        assert_eq!(t.unix.len(), 3);
        // The kernel says stream, the line says dgram: not this socket's line.
        assert_eq!(
            t.lookup(999, Some(&KernelProto::from_name("UNIX-STREAM"))),
            None
        );
        assert!(t
            .lookup(999, Some(&KernelProto::from_name("UNIX")))
            .is_some());
        // Before 5.15 the kernel named stream sockets "UNIX" as well.
        let s = get(&t, 24383);
        assert_eq!(s.proto, "stream");
        assert!(t
            .lookup(24383, Some(&KernelProto::from_name("UNIX")))
            .is_some());
    }

    #[test]
    fn unix_lines_are_parsed_strictly() {
        let ok = b"0000000000000000: 00000002 00000000 00010000 0001 01 24383 @x";
        assert!(parse_unix_line(ok).is_some());
        // A path may be anything, a single space too.
        let space =
            parse_unix_line(b"0000000000000000: 00000002 00000000 00010000 0001 01 24383  ");
        assert_eq!(space.unwrap().1.local, Some(Addr::Unix((*b" ").into())));
        for bad in [
            // Inode padded to 5 columns: "   99" is right, " 99" and "24383" with a pad are not.
            &b"0000000000000000: 00000002 00000000 00010000 0001 01 99"[..],
            b"0000000000000000: 00000002 00000000 00010000 0001 01  24383",
            b"000000000000000: 00000002 00000000 00010000 0001 01 24383",
            b"0000000000000000: 0000002 00000000 00010000 0001 01 24383",
            b"0000000000000000: 00000002 00000000 00010000 001 01 24383",
            b"0000000000000000:  00000002 00000000 00010000 0001 01 24383",
            b"0000000000000000: 00000002 00000000 00010000 0009 01 24383",
            b"0000000000000000: 00000002 00000000 0001000g 0001 01 24383",
            b"Num       RefCount Protocol Flags    Type St Inode Path",
            b"",
        ] {
            assert_eq!(
                parse_unix_line(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let (ino, i) =
            parse_unix_line(b"0000000000000000: 00000002 00000000 00000000 0005 01    42").unwrap();
        assert_eq!((ino, i.proto, i.local), (42, "seqpacket", None));
    }

    /// The attack of issue #11: an abstract unix socket whose name holds a newline and a
    /// well-formed unix line naming another socket's inode.
    #[test]
    fn forged_unix_lines_change_no_other_socket() {
        let mut t = NetTables::default();
        t.add("tcp", TCP);
        let forged = format!(
            "{UNIX_HEADER}\
0000000000000000: 00000002 00000000 00000000 0002 01 50001 @x\n\
0000000000000000: 00000002 00000000 00000000 0002 01 12345 /run/harmless\n\
0000000000000000: 00000002 00000000 00000000 0002 01 50002 @y\n\
0000000000000000: 00000002 00000000 00010000 0001 01 60000 @z\n\
0000000000000000: 00000002 00000000 00000000 0001 01 60000 /run/victim\n\
0000000000000000: 00000002 00000000 00000000 0001 01 60001 /run/quiet\n\
0000000000000000: 00000002 00000000 00000000 0001 01 60001 /run/loud\n"
        );
        t.add("unix", forged.as_bytes());
        // A socket listed in tcp stays tcp and listening, with or without the kernel's word.
        let l = get(&t, 12345);
        assert_eq!((l.family, l.proto, l.listening), ("inet", "tcp", true));
        let l = t
            .lookup(12345, Some(&KernelProto::from_name("TCP")))
            .unwrap();
        assert_eq!((l.family, l.listening), ("inet", true));
        // And a TCP socket no table lists (not bound) is found nowhere, not as unix.
        assert_eq!(t.lookup(50002, Some(&KernelProto::from_name("TCP"))), None);
        // An inode listed twice: no address is believed; listening if any line says so.
        let a = t
            .lookup(60000, Some(&KernelProto::from_name("UNIX-STREAM")))
            .unwrap();
        assert_eq!((a.local, a.listening, a.proto), (None, true, "stream"));
        let q = get(&t, 60001);
        assert_eq!((q.local, q.listening), (None, false));
    }

    #[test]
    fn kernel_protocol_names() {
        for (name, family, proto, table) in [
            ("TCP", "inet", "tcp", Some("tcp")),
            ("TCPv6", "inet6", "tcp", Some("tcp6")),
            ("UDP", "inet", "udp", Some("udp")),
            ("UDPv6", "inet6", "udp", Some("udp6")),
            ("RAW", "inet", "raw", Some("raw")),
            ("RAWv6", "inet6", "raw", Some("raw6")),
            ("UNIX", "unix", "unix", Some("unix")),
            ("UNIX-STREAM", "unix", "stream", Some("unix")),
            ("NETLINK", "netlink", "netlink", Some("netlink")),
            ("PACKET", "packet", "packet", Some("packet")),
            ("PING", "inet", "ping", None),
            ("PINGv6", "inet6", "ping", None),
            ("MPTCP", "inet", "mptcp", None),
            ("AF_VSOCK", "vsock", "vsock", None),
            ("CAN_RAW", "other", "can_raw", None),
        ] {
            let k = KernelProto::from_name(name);
            assert_eq!(
                (k.family, k.proto.as_str(), k.table),
                (family, proto, table),
                "{name}"
            );
        }
    }

    #[test]
    fn long_lines_are_skipped_whole() {
        let mut t = NetTables::default();
        let mut text = UNIX_HEADER.as_bytes().to_vec();
        text.extend_from_slice(b"0000000000000000: 00000002 00000000 00000000 0002 01 70000 @");
        text.extend(std::iter::repeat_n(b'a', 10_000));
        text.extend_from_slice(
            b"\n0000000000000000: 00000002 00000000 00000000 0002 01 70001 @b\n",
        );
        t.add("unix", &text);
        assert_eq!(t.lookup(70000, None), None);
        assert!(t.lookup(70001, None).is_some());
    }
}
