//! `fdaudit watch`'s /metrics endpoint against hostile local users (#26 items 5 and 6): the
//! real agent, run under the NOFILE limits the shipped unit gives it, and a real
//! unprivileged client (`hostile-client` run as `nobody` by setpriv) that holds 700 idle
//! connections, or pipelines `GET /metrics` against a large body and never reads. The
//! endpoint must answer other scrapers meanwhile and afterwards.
//!
//! The root tests load the eBPF programs: run them under `flock /tmp/fdaudit-root.lock`.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::process::CommandExt as _,
    process::{Child, ChildStdin, Command, Stdio},
    time::{Duration, Instant},
};

use fdaudit_tests::{fdaudit, target_bin};

/// The root tests load programs and check what is attached after they end: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills and reaps a child when the test ends, passed or not.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// The soft and hard RLIMIT_NOFILE deploy/fdaudit.service gives the agent: its
/// `LimitNOFILE=`, else systemd's default (1024:524288 since systemd 240).
fn unit_nofile() -> (u64, u64) {
    let unit = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/fdaudit.service");
    let text = std::fs::read_to_string(unit).expect("read deploy/fdaudit.service");
    let Some(v) = text.lines().find_map(|l| l.strip_prefix("LimitNOFILE=")) else {
        return (1024, 524288);
    };
    let num = |s: &str| s.trim().parse::<u64>().expect("LimitNOFILE is a number");
    match v.split_once(':') {
        Some((s, h)) => (num(s), num(h)),
        None => (num(v), num(v)),
    }
}

/// GET /metrics from 127.0.0.1:`port` within `within`: the body, or None.
fn scrape(port: u16, within: Duration) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), within).ok()?;
    let deadline = Instant::now() + within;
    s.set_read_timeout(Some(within)).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
        if Instant::now() > deadline {
            return None;
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// Scrapes until one answers in time, for at most `total`.
fn scrape_retrying(port: u16, each: Duration, total: Duration) -> Option<String> {
    let t0 = Instant::now();
    while t0.elapsed() < total {
        if let Some(b) = scrape(port, each) {
            return Some(b);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// `fdaudit watch` on 127.0.0.1:`port` as the unit runs it, under the unit's NOFILE limits,
/// once it answers /metrics.
fn start_agent(port: u16) -> Reaped {
    let (soft, unit_hard) = unit_nofile();
    // Raising a hard limit needs CAP_SYS_RESOURCE, which a container's root may lack.
    let mut ours = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut ours) },
        0
    );
    let hard = unit_hard.min(ours.rlim_max);
    let soft = soft.min(hard);
    let mut cmd = Command::new(fdaudit());
    cmd.args(["watch", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--scan-interval", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut agent = Reaped(cmd.spawn().expect("start fdaudit watch"));
    let t0 = Instant::now();
    while scrape(port, Duration::from_secs(5)).is_none() {
        if let Ok(Some(st)) = agent.0.try_wait() {
            panic!("fdaudit watch exited early ({st})");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "watch never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    agent
}

/// `hostile-client ARGS` as nobody, once it printed its first line (returned).
fn as_nobody(args: &[&str]) -> (Reaped, ChildStdin, String) {
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(target_bin("hostile-client"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run hostile-client as nobody with setpriv");
    let stdin = child.stdin.take().expect("piped stdin");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("read hostile-client's line");
    (Reaped(child), stdin, line.trim().to_owned())
}

/// A field of /proc/PID/status, as a number.
fn status_field(pid: u32, field: &str) -> u64 {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the agent lives");
    st.lines()
        .find_map(|l| l.strip_prefix(field)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// How many sockets `pid` holds.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| l.to_string_lossy().starts_with("socket:"))
                .count()
        })
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root"]
fn idle_connections_from_nobody_neither_kill_nor_lock_out_the_endpoint() {
    let _g = serial();
    let port = free_port();
    let agent = start_agent(port);
    let pid = agent.0.id();

    let (attacker, stdin, line) = as_nobody(&["idle", &port.to_string(), "700"]);
    let opened: usize = line
        .strip_prefix("open ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("hostile-client said {line:?}"));
    // Its spawn reaches the agent with the drain thread's 200 ms tick (#44).
    std::thread::sleep(Duration::from_millis(600));
    // During: the scraper gets in although every connection slot was taken.
    let t = Instant::now();
    let during = scrape_retrying(port, Duration::from_secs(5), Duration::from_secs(15));
    eprintln!(
        "scrape beside {opened} idle connections: {:?}; the agent holds {} fds",
        t.elapsed(),
        open_fds(pid)
    );
    assert!(
        during.is_some_and(|b| b.contains("fdaudit_spawns")),
        "/metrics did not answer while nobody held {opened} idle connections"
    );
    assert!(
        opened >= 600,
        "nobody opened only {opened} of 700 connections"
    );
    assert!(
        agent_alive(pid),
        "the agent died under {opened} idle connections"
    );

    drop(stdin);
    drop(attacker);
    // After: still listening, and the connections are gone.
    let after = scrape_retrying(port, Duration::from_secs(5), Duration::from_secs(15));
    assert!(
        after.is_some(),
        "nothing answers /metrics after the attacker left"
    );
    let t0 = Instant::now();
    while open_fds(pid) > 300 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        open_fds(pid) <= 300,
        "the agent still holds {} fds after the attacker left",
        open_fds(pid)
    );
    let threads = status_field(pid, "Threads:");
    eprintln!(
        "after: {} fds, {threads} threads, {:?} to drop the connections",
        open_fds(pid),
        t0.elapsed()
    );
    assert!(threads < 40, "the agent runs {threads} threads");
}

fn agent_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Runs `n` spawns, each of a different program name (symlinks to /bin/true), so that
/// /metrics carries `n` label sets. Each leaks a file, a device and a directory, so that a
/// set is five series whatever the environment itself leaks (CI's leaked nothing, and its
/// 1900 sets were 119 KB).
fn many_series(n: usize) {
    let dir = std::env::temp_dir().join(format!("fdaudit-series-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the symlinks' directory");
    for i in 0..n {
        let _ = std::os::unix::fs::symlink("/bin/true", dir.join(format!("t{i}")));
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7</etc/passwd 8</dev/null 9</; for i in $(seq 0 {}); do {}/t$i; done",
            n - 1,
            dir.display()
        ))
        .status()
        .expect("run the spawns");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "the spawns failed: {status}");
}

#[test]
#[ignore = "needs root"]
fn a_pipelining_client_that_never_reads_does_not_hang_other_scrapes() {
    let _g = serial();
    let port = free_port();
    let agent = start_agent(port);
    let pid = agent.0.id();
    // A body far past the socket buffers once pipelined 20 times: 1900 label sets (under
    // the 2000 cap) of five series each are 500-900 KB, by the length of the cgroup paths.
    many_series(1900);
    let t0 = Instant::now();
    let size = loop {
        let n = scrape(port, Duration::from_secs(10)).map_or(0, |b| b.len());
        if n >= 400_000 || t0.elapsed() > Duration::from_secs(10) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(size >= 400_000, "/metrics is only {size} bytes");

    let idle_sockets = sockets(pid);
    let (hog, stdin, line) = as_nobody(&["pipeline", &port.to_string(), "20"]);
    assert!(line.starts_with("sent "), "hostile-client said {line:?}");
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..3 {
        let t = Instant::now();
        assert!(
            scrape(port, Duration::from_secs(5)).is_some(),
            "scrape {i} did not finish within 5 s while a client pipelined 20 requests \
             against a {size}-byte body and did not read"
        );
        eprintln!("scrape {i} beside the non-reader: {:?}", t.elapsed());
    }
    // The write timeout closes the non-reader's connection while it is still connected.
    let t0 = Instant::now();
    while sockets(pid) > idle_sockets && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        sockets(pid),
        idle_sockets,
        "the non-reader's connection is still open after {:?}",
        t0.elapsed()
    );
    eprintln!(
        "the non-reader's connection closed after {:?}",
        t0.elapsed()
    );
    drop(stdin);
    drop(hog);

    // 5000 pipelined requests, then the client leaves: none of them is still being served.
    let (hog, stdin, line) = as_nobody(&["pipeline", &port.to_string(), "5000"]);
    assert!(line.starts_with("sent "), "hostile-client said {line:?}");
    drop(stdin);
    drop(hog);
    let t = Instant::now();
    assert!(
        scrape(port, Duration::from_secs(5)).is_some(),
        "/metrics did not answer within 5 s after a client that pipelined 5000 requests left"
    );
    eprintln!("scrape after the pipeliner left: {:?}", t.elapsed());
}

#[test]
#[ignore = "needs root"]
fn accept_failing_for_want_of_fds_is_survived() {
    let _g = serial();
    let port = free_port();
    let agent = start_agent(port);
    let pid = agent.0.id();
    // Leave the agent 8 fds more than it holds: past them accept(2) fails with EMFILE
    // (the connection cap, sized for the limit it started with, is not reached first).
    std::thread::sleep(Duration::from_secs(1)); // its first scan of /proc is done
    let limit = open_fds(pid) as u64 + 8;
    let r = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: prlimit on our own child with a valid struct.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &r,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());

    let (attacker, stdin, line) = as_nobody(&["idle", &port.to_string(), "100"]);
    assert_eq!(line, "open 100", "hostile-client said {line:?}");
    let t = Instant::now();
    assert!(
        scrape_retrying(port, Duration::from_secs(5), Duration::from_secs(15)).is_some(),
        "/metrics did not answer with the agent out of fds"
    );
    eprintln!("scrape with the agent out of fds: {:?}", t.elapsed());
    drop(stdin);
    drop(attacker);
    assert!(
        scrape_retrying(port, Duration::from_secs(5), Duration::from_secs(15)).is_some(),
        "nothing answers /metrics after the attacker left"
    );
    assert!(agent_alive(pid), "the agent died");
}
