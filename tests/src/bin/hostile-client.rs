//! A hostile local client of `fdaudit watch`'s /metrics endpoint, for
//! tests/tests/watch_hostile.rs; the test runs it as `nobody` (setpriv). It first raises its
//! soft RLIMIT_NOFILE to the hard limit, as any user may.
//!
//! - `hostile-client idle PORT N`: opens N connections to 127.0.0.1:PORT that never send a
//!   byte, prints `open K` (how many connected) and holds them until stdin closes.
//! - `hostile-client pipeline PORT N`: one connection with the smallest receive buffer,
//!   sends N pipelined `GET /metrics` and never reads; prints `sent K` (bytes sent) and holds
//!   it until stdin closes.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd as _;
use std::time::Duration;

use fdaudit_tests::check;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, port, n] = &args[..] else {
        panic!("usage: hostile-client idle|pipeline PORT N");
    };
    let port: u16 = port.parse().expect("a port");
    let n: usize = n.parse().expect("a count");
    raise_nofile();
    let held: Vec<TcpStream> = match mode.as_str() {
        "idle" => {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let conns: Vec<TcpStream> = (0..n)
                .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
                .collect();
            println!("open {}", conns.len());
            conns
        }
        "pipeline" => {
            let mut s = small_window_connect(port);
            s.set_write_timeout(Some(Duration::from_secs(5)))
                .expect("SO_SNDTIMEO");
            let req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(n);
            let mut sent = 0;
            while sent < req.len() {
                match s.write(&req.as_bytes()[sent..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => sent += k,
                }
            }
            println!("sent {sent}");
            vec![s]
        }
        _ => panic!("unknown mode {mode:?}: idle or pipeline"),
    };
    std::io::stdout().flush().expect("flush stdout");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(held);
}

fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    check(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) },
        "getrlimit",
    );
    r.rlim_cur = r.rlim_max;
    // SAFETY: as above.
    check(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) },
        "setrlimit",
    );
}

/// A connection to 127.0.0.1:`port` whose receive buffer was made as small as the kernel
/// allows before connecting (so the window it advertises stays small).
fn small_window_connect(port: u16) -> TcpStream {
    // SAFETY: plain socket calls on an fd this function owns.
    unsafe {
        let fd = check(
            libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0),
            "socket",
        );
        let size: libc::c_int = 1;
        check(
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ),
            "setsockopt(SO_RCVBUF)",
        );
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        check(
            libc::connect(
                fd,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            "connect",
        );
        TcpStream::from_raw_fd(fd)
    }
}
