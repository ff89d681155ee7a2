//! The `/metrics` endpoint, the agent's only interface, built so that no local client can
//! kill or hang it (#26 items 5 and 6): hyper's HTTP/1 server on a current-thread tokio
//! runtime, on a thread of its own.
//!
//! - At most [`MAX_CONNS`] connections at once (fewer when RLIMIT_NOFILE cannot be raised
//!   enough). Past the cap a new connection closes the one that has been idle longest (no
//!   request in flight), so idle connections cannot lock a scraper out; with none idle it
//!   waits for one to end.
//! - Timeouts: a request's headers within [`HEADER_TIMEOUT`], no byte read for
//!   [`IDLE_TIMEOUT`], no byte written for [`WRITE_TIMEOUT`] (a client that does not read).
//! - One request in flight per connection (hyper answers pipelined requests in turn), each
//!   connection its own task, and at most [`MAX_IN_FLIGHT`] response bodies held at once.
//! - Accept errors never stop it: on EMFILE/ENFILE/ENOBUFS/ENOMEM it closes an idle
//!   connection, backs off and accepts again.
//!
//! - With `--web-config` (webconfig.rs): TLS, whose handshake must end within
//!   [`HEADER_TIMEOUT`], and basic auth on every path but `/healthz` (auth.rs); a request
//!   without the right credentials gets 401 and counts in `fdaudit_http_auth_failures_total`.
//!
//! tiny_http, used before, panicked in its accept thread on EMFILE (`try_clone().unwrap()`),
//! then nothing listened; and it answered every client from one blocking thread.

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt as _, Full};
use hyper::{body::Incoming, header, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore},
    task::AbortHandle,
};

use super::{
    auth::Users,
    metrics::{self, Metrics},
    webconfig::WebConfig,
};

/// Connections served at once, at most.
pub const MAX_CONNS: usize = 512;
/// Fds kept for everything else the agent opens (programs, maps, links, /proc scans).
const FD_RESERVE: u64 = 1024;
/// Connections allowed however low RLIMIT_NOFILE is (accept errors are then survived).
const MIN_CONNS: usize = 16;
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Response bodies in memory at once (one can be several MB past the series cap).
pub const MAX_IN_FLIGHT: usize = 32;
/// Read buffer of one connection (a scrape's request is a few hundred bytes).
const MAX_BUF: usize = 64 * 1024;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Raises the soft RLIMIT_NOFILE to what [`MAX_CONNS`] connections and the tracer need (up
/// to the hard limit) and returns the connection cap that fits under it.
pub fn connection_cap() -> usize {
    let want = MAX_CONNS as u64 + FD_RESERVE;
    let Ok((soft, hard)) = crate::sys::nofile() else {
        return MAX_CONNS;
    };
    let soft = if soft < want && crate::sys::set_nofile(want.min(hard)).is_ok() {
        want.min(hard)
    } else {
        soft
    };
    let cap = (soft.saturating_sub(FD_RESERVE) as usize).clamp(MIN_CONNS, MAX_CONNS);
    if cap < MAX_CONNS {
        crate::diag!(
            "note: RLIMIT_NOFILE hard limit {hard} leaves room for {cap} connections to /metrics \
             (raise LimitNOFILE to {want})"
        );
    }
    cap
}

/// A listening socket and the runtime that will serve it; bound before anything is loaded.
pub struct Bound {
    rt: tokio::runtime::Runtime,
    listener: TcpListener,
}

/// Binds `addr` (SO_REUSEADDR, a backlog of 1024).
pub fn bind(addr: SocketAddr) -> std::io::Result<Bound> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let listener = {
        let _guard = rt.enter();
        let sock = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        sock.set_reuseaddr(true)?;
        sock.bind(addr)?;
        sock.listen(1024)?
    };
    Ok(Bound { rt, listener })
}

/// The endpoint's thread; [`Server::stop`] ends it and closes every connection.
pub struct Server {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Bound {
    /// Serves /metrics from `metrics` with at most `max_conns` connections at once, with
    /// the TLS and users of `web`.
    pub fn start(self, metrics: Arc<Mutex<Metrics>>, max_conns: usize, web: WebConfig) -> Server {
        let (stop, stopped) = oneshot::channel();
        let auth_failures = metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .auth_failures();
        let ctx = Arc::new(Ctx {
            metrics,
            tls: web.tls,
            users: web.users.map(Arc::new),
            auth_failures,
            conns: Registry::default(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        });
        let Bound { rt, listener } = self;
        let thread = std::thread::Builder::new()
            .name("fdaudit-http".into())
            .spawn(move || rt.block_on(accept_loop(listener, ctx, max_conns, stopped)))
            .expect("spawn the HTTP thread");
        Server { stop, thread }
    }
}

impl Server {
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

struct Ctx {
    metrics: Arc<Mutex<Metrics>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    users: Option<Arc<Users>>,
    auth_failures: prometheus_client::metrics::counter::Counter,
    conns: Registry,
    in_flight: Arc<Semaphore>,
}

/// The live connections, and which are idle (no request in flight) since when.
#[derive(Default)]
struct Registry {
    inner: Mutex<Conns>,
    ended: Notify,
}

#[derive(Default)]
struct Conns {
    seq: u64,
    /// Connection id → its task, its requests in flight and, when idle, its key in `idle`.
    live: HashMap<u64, Conn>,
    /// Idle since (a sequence number, oldest first) → connection id.
    idle: BTreeMap<u64, u64>,
}

struct Conn {
    task: AbortHandle,
    in_flight: u32,
    idle_key: Option<u64>,
}

impl Conns {
    fn mark_idle(&mut self, id: u64) {
        if let Some(c) = self.live.get_mut(&id) {
            self.seq += 1;
            c.idle_key = Some(self.seq);
            self.idle.insert(self.seq, id);
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, id: u64, task: AbortHandle) {
        let mut c = self.lock();
        let conn = Conn {
            task,
            in_flight: 0,
            idle_key: None,
        };
        c.live.insert(id, conn);
        c.mark_idle(id);
    }

    fn len(&self) -> usize {
        self.lock().live.len()
    }

    /// A request of connection `id` came in.
    fn busy(&self, id: u64) {
        let mut c = self.lock();
        let c = &mut *c;
        if let Some(conn) = c.live.get_mut(&id) {
            conn.in_flight += 1;
            if let Some(k) = conn.idle_key.take() {
                c.idle.remove(&k);
            }
        }
    }

    /// A response of connection `id` was written (or dropped).
    fn done(&self, id: u64) {
        let mut c = self.lock();
        let Some(conn) = c.live.get_mut(&id) else {
            return; // ended, or closed to make room
        };
        conn.in_flight = conn.in_flight.saturating_sub(1);
        if conn.in_flight == 0 {
            c.mark_idle(id);
        }
    }

    fn end(&self, id: u64) {
        let mut c = self.lock();
        if let Some(Conn {
            idle_key: Some(k), ..
        }) = c.live.remove(&id)
        {
            c.idle.remove(&k);
        }
        drop(c);
        self.ended.notify_one();
    }

    /// Closes the connection idle longest, other than `keep`: false when none is idle.
    fn evict(&self, keep: u64) -> bool {
        let mut c = self.lock();
        let Some((&k, &id)) = c.idle.iter().find(|(_, &id)| id != keep) else {
            return false;
        };
        c.idle.remove(&k);
        if let Some(conn) = c.live.remove(&id) {
            conn.task.abort();
        }
        true
    }
}

/// Accepts until `stop`, keeping at most `max_conns` connections.
async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<Ctx>,
    max_conns: usize,
    mut stop: oneshot::Receiver<()>,
) {
    let mut id = 0u64;
    let mut warned: Option<Instant> = None;
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    accept_failed(&e, &ctx, &mut warned).await;
                    continue;
                }
            },
        };
        id += 1;
        let task = tokio::spawn(connection(stream, id, ctx.clone()));
        ctx.conns.register(id, task.abort_handle());
        while ctx.conns.len() > max_conns && !ctx.conns.evict(id) {
            tokio::select! {
                _ = &mut stop => return,
                _ = ctx.conns.ended.notified() => {}
            }
        }
    }
}

/// After a failed accept: out of fds or memory, close the longest-idle connection, or back
/// off 100 ms when none is idle (a warning at most once a minute); anything else (a connection reset before it was accepted) is skipped.
async fn accept_failed(e: &std::io::Error, ctx: &Ctx, warned: &mut Option<Instant>) {
    let scarce = matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    );
    if !scarce {
        tokio::task::yield_now().await;
        return;
    }
    if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
        crate::diag!(
            "warning: /metrics: accept(2) failed: {e}; closing an idle connection and retrying"
        );
        *warned = Some(Instant::now());
    }
    if ctx.conns.evict(0) {
        // Its fd is closed once the runtime drops the aborted task.
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Ends connection `id` in the registry however its task ends (aborted included).
struct Live(Arc<Ctx>, u64);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.conns.end(self.1);
    }
}

/// Serves one connection with the timeouts above.
async fn connection(stream: TcpStream, id: u64, ctx: Arc<Ctx>) {
    let _live = Live(ctx.clone(), id);
    let mut io = tokio_io_timeout::TimeoutStream::new(stream);
    io.set_read_timeout(Some(IDLE_TIMEOUT));
    io.set_write_timeout(Some(WRITE_TIMEOUT));
    let io = Box::pin(io);
    match ctx.tls.clone() {
        None => serve(io, id, ctx).await,
        // A client that speaks plain HTTP, or no TLS in time, is dropped here.
        Some(tls) => {
            if let Ok(Ok(io)) = tokio::time::timeout(HEADER_TIMEOUT, tls.accept(io)).await {
                serve(io, id, ctx).await;
            }
        }
    }
}

/// HTTP/1 on an established connection (plain or TLS).
async fn serve<I>(io: I, id: u64, ctx: Arc<Ctx>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| respond(req, ctx.clone(), id));
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_BUF)
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// Marks a connection busy while its response is written; idle again when the body goes.
struct Busy {
    ctx: Arc<Ctx>,
    id: u64,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.ctx.conns.done(self.id);
    }
}

/// `/`: what the agent is and where its metrics are.
const LANDING: &str = concat!(
    "<!doctype html>\n<html><head><title>fdaudit watch</title></head><body>\n",
    "<h1>fdaudit watch</h1>\n<p>fdaudit ",
    env!("CARGO_PKG_VERSION"),
    ": file descriptors handed to child processes, as Prometheus metrics.</p>\n",
    "<ul><li><a href=\"/metrics\">/metrics</a></li>",
    "<li><a href=\"/healthz\">/healthz</a></li></ul>\n</body></html>\n"
);

/// One response: OpenMetrics when the client accepts it, else text 0.0.4.
async fn respond(
    req: Request<Incoming>,
    ctx: Arc<Ctx>,
    id: u64,
) -> Result<Response<Body>, Infallible> {
    ctx.conns.busy(id);
    let mut busy = Busy {
        ctx: ctx.clone(),
        id,
        _permit: None,
    };
    if unauthorized(&req, &ctx).await {
        return Ok(challenge(busy));
    }
    match req.uri().path() {
        "/metrics" => {}
        // node_exporter's landing page and a liveness endpoint that costs no encoding.
        "/" => {
            return Ok(reply(
                StatusCode::OK,
                "text/html; charset=utf-8",
                LANDING.into(),
                busy,
            ))
        }
        "/healthz" => return Ok(reply(StatusCode::OK, "text/plain", "ok\n".into(), busy)),
        _ => {
            return Ok(reply(
                StatusCode::NOT_FOUND,
                "text/plain",
                "fdaudit: metrics are at /metrics\n".into(),
                busy,
            ))
        }
    }
    let permit =
        tokio::time::timeout(WRITE_TIMEOUT * 2, ctx.in_flight.clone().acquire_owned()).await;
    let Ok(Ok(permit)) = permit else {
        return Ok(reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "fdaudit: too many scrapes at once\n".into(),
            busy,
        ));
    };
    busy._permit = Some(permit);
    let openmetrics = req.headers().get_all(header::ACCEPT).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.contains("application/openmetrics-text"))
    });
    let text = ctx
        .metrics
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .encode();
    let (body, ct) = if openmetrics {
        (text, metrics::CONTENT_TYPE)
    } else {
        (
            super::prometheus_text(&text),
            "text/plain; version=0.0.4; charset=utf-8",
        )
    };
    Ok(reply(StatusCode::OK, ct, body, busy))
}

/// Whether the request lacks the credentials `--web-config` asks for (then counted).
/// Probes reach /healthz without any: it tells nothing but that the agent runs.
async fn unauthorized(req: &Request<Incoming>, ctx: &Ctx) -> bool {
    let Some(users) = &ctx.users else {
        return false;
    };
    if req.uri().path() == "/healthz" {
        return false;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    if users.check(given).await {
        return false;
    }
    ctx.auth_failures.inc();
    true
}

/// 401 with a basic auth challenge.
fn challenge(busy: Busy) -> Response<Body> {
    let body = "fdaudit: unauthorized\n".into();
    let mut r = reply(StatusCode::UNAUTHORIZED, "text/plain", body, busy);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"fdaudit\""),
    );
    r
}

/// A response whose body holds `busy` until hyper has written it (or the connection went).
fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: String,
    busy: Busy,
) -> Response<Body> {
    let body = Full::new(Bytes::from(body))
        .map_frame(move |f| {
            let _held = &busy;
            f
        })
        .boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_takes_the_longest_idle_and_spares_busy_connections() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _g = rt.enter();
        let reg = Registry::default();
        for id in 1..=3 {
            let t = tokio::spawn(std::future::pending::<()>());
            reg.register(id, t.abort_handle());
        }
        reg.busy(1);
        assert!(reg.evict(3), "2 is idle");
        assert!(!reg.lock().live.contains_key(&2), "2 was closed");
        assert_eq!(reg.len(), 2);
        assert!(!reg.evict(3), "1 is busy and 3 is kept");
        reg.done(1);
        assert!(reg.evict(3), "1 is idle again");
        assert_eq!(reg.len(), 1);
        reg.end(3);
        assert_eq!(reg.len(), 0);
    }
}
