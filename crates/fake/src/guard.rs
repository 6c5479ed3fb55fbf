//! The fake provider against hostile or careless clients (it runs in other people's CI): header,
//! body and idle timeouts, a connection cap, bounded bodies, the Host check against DNS
//! rebinding, and the JSON request log.

use super::server::{Body, Shared, MAX_BODY};
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION};
use hyper::{Request as HttpRequest, Response, StatusCode};
use serde_json::{json, Value};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// hyper's read buffer: a request line and its headers must fit (larger: 431 or 414).
pub(super) const MAX_HEAD: usize = 64 << 10;
/// A request's line and headers must all arrive within this from their first byte (else closed).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's whole body must arrive within this once its handler reads it (else 408, closed).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight and no byte received for this long is closed; a
/// request in flight (a `GET /messages/wait` takes up to 60 s) is never cut by it.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP connections served at once (`--max-connections`); past it a new connection gets `503`
/// with `Connection: close` once its request head is in (or after 1 s), and is closed.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections over the cap that are being answered 503 at once; more are closed unanswered.
pub(super) const MAX_REFUSING: usize = 64;
/// An oversized body up to this size is read (and discarded) before its 413; a larger one is
/// answered at once and its connection closed.
const OVERSIZE_DRAIN: usize = 2 * MAX_BODY;
/// How often a connection's watchdog looks at its phase.
const WATCH_EVERY: Duration = Duration::from_millis(200);
/// How long a refused connection is given to send its request head, then to take its 503.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// The timeouts and the cap in force (the constants above unless the hidden test flags say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
        }
    }
}

/// Where a connection is: waiting for a request (since), reading a request's head (since its
/// first byte), or with requests in flight.
#[derive(Clone, Copy)]
enum Phase {
    Idle(Instant),
    Head(Instant),
    Busy,
}

/// One connection's phase, shared by its socket wrapper, its service and its watchdog.
pub(super) struct Clock {
    in_flight: AtomicUsize,
    phase: Mutex<Phase>,
}

impl Clock {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Clock {
            in_flight: AtomicUsize::new(0),
            phase: Mutex::new(Phase::Idle(Instant::now())),
        })
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived: an idle connection starts reading a request head.
    fn received(&self) {
        let mut p = self.phase();
        if let Phase::Idle(_) = *p {
            *p = Phase::Head(Instant::now());
        }
    }

    /// A request reached the service; the returned guard ends it when dropped.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        *self.phase() = Phase::Busy;
        Busy(self.clone())
    }

    /// When this connection is due to be closed, if nothing happens before.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        match *self.phase() {
            Phase::Idle(t) => Some(t + limits.idle_timeout),
            Phase::Head(t) => Some(t + limits.header_timeout),
            Phase::Busy => None,
        }
    }
}

/// A request in flight on a connection (see `Clock::busy`).
pub(super) struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut p = self.0.phase();
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *p = Phase::Idle(Instant::now());
        }
    }
}

/// A TCP stream that tells its `Clock` when bytes arrive.
pub(super) struct Watched {
    stream: TcpStream,
    clock: Arc<Clock>,
}

impl Watched {
    pub(super) fn new(stream: TcpStream, clock: Arc<Clock>) -> Self {
        Watched { stream, clock }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.received();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Resolves when the connection of `clock` has been idle, or slow with a request head, past
/// its limit; never while a request is in flight.
pub(super) async fn expired(clock: &Clock, limits: &Limits) {
    loop {
        match clock.deadline(limits) {
            Some(at) if at <= Instant::now() => return,
            // The phase changes without waking this (bytes arriving move an idle deadline
            // earlier): look again at least every `WATCH_EVERY`.
            Some(at) => tokio::time::sleep_until(at.min(Instant::now() + WATCH_EVERY)).await,
            None => tokio::time::sleep(WATCH_EVERY).await,
        }
    }
}

/// Counts open connections; `enter` refuses past the cap.
pub(super) struct Gate {
    open: Arc<AtomicUsize>,
    cap: usize,
}

/// One admitted connection; dropping it frees its place.
pub(super) struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate {
    pub(super) fn new(cap: usize) -> Self {
        Gate {
            open: Arc::new(AtomicUsize::new(0)),
            cap,
        }
    }

    pub(super) fn enter(&self) -> Option<Admitted> {
        let n = self.open.fetch_add(1, Ordering::SeqCst);
        if n >= self.cap {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Admitted(self.open.clone()))
    }
}

/// Answer a connection over the cap: read its request head (at most `REFUSE_LINGER` and
/// `MAX_HEAD` bytes: an HTTP client answered before it has written its request takes the answer
/// for a broken connection), write a 503 with `Connection: close`, and close.
pub(super) async fn refuse(stream: TcpStream) {
    const BODY: &str = "{\"error\":\"too many connections (--max-connections): try again\"}";
    sendonce_domain::busy::refuse(stream, REFUSE_LINGER, MAX_HEAD, BODY).await;
}

/// Why a body was not read.
pub(super) struct BodyError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl BodyError {
    /// `answer` (worded by the endpoint) with this error's status; a timed-out body also closes
    /// the connection, whose stream is mid-body.
    pub(super) fn apply(&self, mut answer: Response<Body>) -> Response<Body> {
        *answer.status_mut() = self.status;
        if self.status != StatusCode::BAD_REQUEST {
            answer
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        answer
    }
}

/// A request's body, at most `MAX_BODY` bytes (413), all within the body timeout (408). An
/// oversized body of up to `OVERSIZE_DRAIN` bytes is read and discarded before the 413, so the
/// client reads its answer instead of a reset.
pub(super) async fn read_body(mut body: Incoming, limits: &Limits) -> Result<Bytes, BodyError> {
    let too_large = || BodyError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("the request body is larger than {MAX_BODY} bytes"),
    };
    if hyper::body::Body::size_hint(&body).lower() > OVERSIZE_DRAIN as u64 {
        return Err(too_large());
    }
    let read = async {
        let mut kept = Vec::new();
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError {
                status: StatusCode::BAD_REQUEST,
                message: format!("cannot read the body: {e}"),
            })?;
            if let Ok(data) = frame.into_data() {
                seen = seen.saturating_add(data.len());
                if seen <= MAX_BODY {
                    kept.extend_from_slice(&data);
                } else if seen > OVERSIZE_DRAIN {
                    break;
                }
            }
        }
        Ok((kept, seen))
    };
    match tokio::time::timeout(limits.body_timeout, read).await {
        Err(_) => Err(BodyError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {:?}",
                limits.body_timeout
            ),
        }),
        Ok(Err(e)) => Err(e),
        Ok(Ok((_, seen))) if seen > MAX_BODY => Err(too_large()),
        Ok(Ok((kept, _))) => Ok(Bytes::from(kept)),
    }
}

/// An `--allow-host` value, checked and lower-cased.
pub(super) fn allowed_host(h: &str) -> sendonce_domain::error::Result<String> {
    let ok = !h.is_empty()
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
    if !ok {
        return Err(sendonce_domain::error::Error::invalid(format!(
            "--allow-host {h:?}: give a host name or address, with or without a port"
        )));
    }
    Ok(h.to_ascii_lowercase())
}

/// The host of a `Host` value, without its port (`[::1]:80` is `::1`).
fn host_name(host: &str) -> &str {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Whether a `Host` value names this fake provider: `localhost` (and `*.localhost`), a
/// loopback address, the address the connection reached, or an `--allow-host` name; each with
/// or without a port. A page served from another name that resolves here (DNS rebinding) sends
/// that name, and is refused.
fn host_is_ours(host: &str, local: Option<std::net::SocketAddr>, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = host_name(&host).trim_end_matches('.');
    if allowed.iter().any(|a| *a == host || a == name) {
        return true;
    }
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || local.is_some_and(|l| l.ip() == ip),
        Err(_) => false,
    }
}

/// Refuse a request whose `Host` (or absolute URI) names another site; a request without one
/// (HTTP/1.0) names none and is answered.
pub(super) fn check_host<B>(
    req: &HttpRequest<B>,
    local: Option<std::net::SocketAddr>,
    allowed: &[String],
) -> Result<(), String> {
    let host = match req.headers().get(hyper::header::HOST) {
        Some(v) => String::from_utf8_lossy(v.as_bytes()).into_owned(),
        None => match req.uri().authority() {
            Some(a) => a.as_str().to_string(),
            None => return Ok(()),
        },
    };
    if host_is_ours(&host, local, allowed) {
        return Ok(());
    }
    Err(format!(
        "Host {host:?} is not this fake provider's: it answers localhost, loopback addresses \
         and the address it listens on (DNS rebinding); start it with --allow-host {} to \
         accept this name",
        host_name(host.trim())
    ))
}

/// Which provider API a path belongs to (under a `/t/{tenant}` prefix too), for the request log.
fn api_of(path: &str) -> Option<&'static str> {
    let path = super::tenants::split(path).map_or(path, |(_, rest)| rest);
    if super::apis::twilio_account(path).is_some() {
        return Some("twilio");
    }
    match path {
        "/send" | "/" => Some("webhook"),
        "/emails" => Some("resend"),
        "/email" | "/messages/outbound" => Some("postmark"),
        _ if path == "/messages" || path.starts_with("/messages/") || path == "/chaos" => {
            Some("assertions")
        }
        _ => super::clouds::api_of(path),
    }
}

/// The request log's line for `req`: `{"at", "method", "path", "key", "api"?}`. The path only
/// (no query string) and no header but `Idempotency-Key`: never a credential.
pub(super) fn log_line<B>(req: &HttpRequest<B>) -> Value {
    let path = req.uri().path();
    let mut line = json!({
        "at": sendonce_domain::clock::now_ms(),
        "method": req.method().as_str(),
        "path": path,
        "key": req
            .headers()
            .get("idempotency-key")
            .map(|k| String::from_utf8_lossy(k.as_bytes()).into_owned()),
    });
    if let Some(api) = api_of(path) {
        line["api"] = json!(api);
    }
    line
}

/// Append `req`'s line to the request log, if there is one (page cache only: the order of
/// arrival is all a reader needs, and readers run while this process is alive).
pub(super) fn log_request<B>(shared: &Shared, req: &HttpRequest<B>) {
    let Some(file) = shared.requests.as_ref() else {
        return;
    };
    let line = format!("{}\n", log_line(req));
    if let Ok(mut f) = file.lock() {
        if let Err(e) = io::Write::write_all(&mut *f, line.as_bytes()) {
            tracing::warn!(error = %e, "fake provider: cannot append to the request log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_json_with_the_exact_key_and_no_credentials() {
        let req = HttpRequest::post("/emails?x=secret")
            .header("idempotency-key", " a key  with spaces ")
            .header("authorization", "Bearer re_secret")
            .body(())
            .unwrap();
        let line = log_line(&req);
        assert_eq!(line["key"], " a key  with spaces ");
        assert_eq!(line["method"], "POST");
        assert_eq!(line["path"], "/emails");
        assert_eq!(line["api"], "resend");
        assert!(!line.to_string().contains("secret"), "{line}");
        let get = HttpRequest::get("/health").body(()).unwrap();
        assert_eq!(log_line(&get)["key"], Value::Null);
        assert!(log_line(&get).get("api").is_none());
    }

    #[test]
    fn only_loopback_the_local_address_and_allowed_hosts_are_answered() {
        let local: std::net::SocketAddr = "192.0.2.7:9000".parse().unwrap();
        let allowed = vec!["fake".to_string(), "box.test:8080".to_string()];
        for ok in [
            "localhost",
            "LOCALHOST:9000",
            "localhost.",
            "app.localhost:3000",
            "127.0.0.1",
            "127.8.9.10:9000",
            "[::1]:9000",
            "[::1]",
            "192.0.2.7:9000",
            "192.0.2.7",
            "fake",
            "fake:9000",
            "box.test:8080",
        ] {
            assert!(host_is_ours(ok, Some(local), &allowed), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:9000",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "192.0.2.8",
            "box.test:9090",
            "",
            "[::2]:9000",
        ] {
            assert!(!host_is_ours(bad, Some(local), &allowed), "{bad}");
        }
        assert!(allowed_host("a b").is_err() && allowed_host("").is_err());
        assert_eq!(allowed_host("Fake:80").unwrap(), "fake:80");
    }

    #[test]
    fn the_gate_admits_up_to_its_cap() {
        let g = Gate::new(2);
        let a = g.enter().expect("first");
        let _b = g.enter().expect("second");
        assert!(g.enter().is_none());
        drop(a);
        assert!(g.enter().is_some());
    }
}
