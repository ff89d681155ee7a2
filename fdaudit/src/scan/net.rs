//! Socket tables from `/proc/PID/net/*`: family, addresses and listening state by inode.
//! Read once per network namespace, and only when a socket needs them.

use std::collections::HashMap;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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
    pub fn render(&self) -> String {
        match self {
            Addr::Inet(a) => a.to_string(),
            Addr::Unix(p) => crate::output::escape_bytes(p),
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

/// All sockets of one network namespace, by inode.
#[derive(Debug, Default)]
pub struct NetTables {
    pub by_inode: HashMap<u64, SockInfo>,
}

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

impl NetTables {
    /// Reads every table found in the `net` directory `dir`; missing or unreadable tables
    /// are skipped, malformed lines ignored.
    pub fn load(dir: RawFd) -> NetTables {
        let mut t = NetTables::default();
        let mut buf = Vec::new();
        for (name, kind) in TABLES {
            let cname = std::ffi::CString::new(*name).expect("no NUL in table names");
            if crate::procfs_util::at::read_file_at(dir, &cname, &mut buf).is_err() {
                continue;
            }
            t.add_table(*kind, &buf);
        }
        t
    }

    /// Parses one table's text (for tests and `load`).
    pub fn add(&mut self, table: &str, data: &[u8]) {
        if let Some((_, kind)) = TABLES.iter().find(|(n, _)| *n == table) {
            self.add_table(*kind, data);
        }
    }

    fn add_table(&mut self, kind: Kind, data: &[u8]) {
        for line in data.split(|&b| b == b'\n').skip(1) {
            let parsed = match kind {
                Kind::Inet(af, proto) => parse_inet_line(line, af, proto),
                Kind::Unix => parse_unix_line(line),
                Kind::Other(af, proto, col) => parse_other_line(line, af, proto, col),
            };
            if let Some((ino, info)) = parsed {
                if ino != 0 {
                    self.by_inode.insert(ino, info);
                }
            }
        }
    }
}

fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(u8::is_ascii_whitespace)
        .filter(|s| !s.is_empty())
}

fn parse_inet_line(line: &[u8], af: i32, proto: &'static str) -> Option<(u64, SockInfo)> {
    // sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode ...
    let f: Vec<&[u8]> = fields(line).take(10).collect();
    if f.len() < 10 {
        return None;
    }
    let local = parse_inet_addr(f[1], af)?;
    let remote = parse_inet_addr(f[2], af)?;
    let state = u8::from_str_radix(std::str::from_utf8(f[3]).ok()?, 16).ok()?;
    let ino = std::str::from_utf8(f[9]).ok()?.parse().ok()?;
    let remote =
        (remote.port() != 0 || !remote.ip().is_unspecified()).then_some(Addr::Inet(remote));
    Some((
        ino,
        SockInfo {
            family: family_name(af as u16),
            proto,
            local: Some(Addr::Inet(local)),
            remote,
            // TCP_LISTEN
            listening: proto == "tcp" && state == 0x0a,
        },
    ))
}

/// "0100007F:1F90" (IPv4) or 32 hex digits ":PORT" (IPv6): each 32-bit word is printed in
/// host byte order, the port in plain hex.
fn parse_inet_addr(s: &[u8], af: i32) -> Option<SocketAddr> {
    let s = std::str::from_utf8(s).ok()?;
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = if af == libc::AF_INET {
        if addr.len() != 8 {
            return None;
        }
        let w = u32::from_str_radix(addr, 16).ok()?;
        IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes()))
    } else {
        if addr.len() != 32 {
            return None;
        }
        let mut b = [0u8; 16];
        for i in 0..4 {
            let w = u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).ok()?;
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
        IpAddr::V6(Ipv6Addr::from(b))
    };
    Some(SocketAddr::new(ip, port))
}

fn parse_unix_line(line: &[u8]) -> Option<(u64, SockInfo)> {
    // Num: RefCount Protocol Flags Type St Inode [Path]
    let mut it = fields(line);
    let _num = it.next()?;
    let _refs = it.next()?;
    let _proto = it.next()?;
    let flags = u32::from_str_radix(std::str::from_utf8(it.next()?).ok()?, 16).ok()?;
    let ty = u16::from_str_radix(std::str::from_utf8(it.next()?).ok()?, 16).ok()?;
    let _st = it.next()?;
    let ino_field = it.next()?;
    let ino: u64 = std::str::from_utf8(ino_field).ok()?.parse().ok()?;
    // The path is the rest of the line after the inode (it may hold spaces).
    let start = ino_field.as_ptr() as usize - line.as_ptr() as usize + ino_field.len();
    let path = line[start..].strip_prefix(b" ").unwrap_or(&line[start..]);
    let proto = match ty {
        1 => "stream",
        2 => "dgram",
        5 => "seqpacket",
        _ => "unix",
    };
    Some((
        ino,
        SockInfo {
            family: family_name(libc::AF_UNIX as u16),
            proto,
            local: (!path.is_empty()).then(|| Addr::Unix(path.into())),
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

/// Protocol name of a live socket fd from the `system.sockprotoname` xattr ("TCP", "UNIX",
/// "NETLINK", ...), for sockets the tables do not list.
pub fn sockprotoname(path: &CStr) -> Option<String> {
    let mut buf = [0u8; 64];
    // SAFETY: path is NUL-terminated; buf valid for its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"system.sockprotoname".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n <= 0 {
        return None;
    }
    let s = &buf[..n as usize];
    let s = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
    Some(String::from_utf8_lossy(s).to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_tcp6() {
        let mut t = NetTables::default();
        t.add(
            "tcp",
            b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 12346 1\n\
   2: garbage\n",
        );
        t.add(
            "tcp6",
            b"header\n   0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1\n",
        );
        let l = &t.by_inode[&12345];
        assert_eq!((l.family, l.proto, l.listening), ("inet", "tcp", true));
        assert_eq!(l.local.as_ref().unwrap().render(), "127.0.0.1:8080");
        assert_eq!(l.remote, None);
        let c = &t.by_inode[&12346];
        assert!(!c.listening);
        assert_eq!(c.remote.as_ref().unwrap().render(), "127.0.0.1:8080");
        let six = &t.by_inode[&777];
        assert_eq!(six.family, "inet6");
        assert_eq!(six.local.as_ref().unwrap().render(), "[::1]:22");
        assert_eq!(t.by_inode.len(), 3);
    }

    #[test]
    fn unix_table() {
        let mut t = NetTables::default();
        t.add(
            "unix",
            b"Num       RefCount Protocol Flags    Type St Inode Path\n\
0000000000000000: 00000002 00000000 00010000 0001 01 24383 @abs name\n\
0000000000000000: 00000003 00000000 00000000 0001 03 24924\n\
0000000000000000: 00000003 00000000 0000\n",
        );
        let l = &t.by_inode[&24383];
        assert!(l.listening);
        assert_eq!(l.proto, "stream");
        assert_eq!(l.local.as_ref().unwrap().render(), "@abs name");
        let c = &t.by_inode[&24924];
        assert!(!c.listening);
        assert_eq!(c.local, None);
        assert_eq!(t.by_inode.len(), 2);
    }
}
