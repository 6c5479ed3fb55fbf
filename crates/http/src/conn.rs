//! `serve`'s connections against floods and slow clients: a cap on open connections (at the cap
//! the connection that has waited longest on its client is closed to make room; when every
//! one is working, the newcomer gets a fast 503), a deadline for request bodies, the accept
//! loop's backoff when descriptors run out, and the start check that the cap fits the
//! process's descriptor limit.

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use sendonce_domain::error::{Error, Result};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// Default of `--max-connections`: client connections open at once.
pub const MAX_CONNECTIONS: usize = 512;
/// Default of `--body-timeout`: a request's body must be in this long after its head.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections over the cap being answered 503 at once; more are closed unanswered.
const MAX_REFUSING: usize = 64;
/// Descriptors kept for everything but client connections: SQLite's files, provider calls,
/// logs, the runtime.
const FD_RESERVE: usize = 256;
/// How long a refused connection is given to send its request head, then to take its 503.
const REFUSE_LINGER: Duration = Duration::from_secs(1);
/// The accept loop's longest pause when the process is out of descriptors.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Refuse to start when `max` client connections, the refusals and the reserve do not fit in
/// the soft `RLIMIT_NOFILE` (`ulimit -n`, systemd's `LimitNOFILE=`).
pub fn check_fd_limit(max: usize) -> Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Ok(());
    }
    let need = max.saturating_add(MAX_REFUSING + FD_RESERVE);
    if lim.rlim_cur != libc::RLIM_INFINITY && (lim.rlim_cur as u128) < need as u128 {
        return Err(Error::invalid(format!(
            "--max-connections {max} needs about {need} file descriptors but this process may \
             open {} (ulimit -n; LimitNOFILE= in a systemd unit): raise that limit or lower \
             --max-connections to {} or less",
            lim.rlim_cur,
            (lim.rlim_cur as usize).saturating_sub(MAX_REFUSING + FD_RESERVE)
        )));
    }
    Ok(())
}

/// One open connection: since when it has waited on its client, if it does.
pub(super) struct Conn {
    /// None while a request with its whole body in is being answered.
    waiting: Mutex<Option<Instant>>,
    in_flight: AtomicUsize,
    /// Told when the connection is closed to make room.
    evicted: tokio::sync::Notify,
}

impl Conn {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request's head is in; with `body_done` false its body is still to come. The guard
    /// marks the request answered when dropped.
    pub(super) fn begin(self: &Arc<Self>, body_done: bool) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        *self.waiting() = (!body_done).then(Instant::now);
        Busy(self.clone())
    }

    fn body_done(&self) {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            *self.waiting() = None;
        }
    }

    /// Resolves when this connection was chosen to be closed.
    pub(super) async fn evicted(&self) {
        self.evicted.notified().await
    }
}

/// A request being answered (see `Conn::begin`).
pub(super) struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut w = self.0.waiting();
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            *w = Some(Instant::now());
        }
    }
}

/// The open connections, up to the cap.
pub(super) struct Conns {
    cap: usize,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    refusing: Arc<AtomicUsize>,
}

/// An admitted connection's place; dropping it frees the place.
pub(super) struct Ticket {
    id: u64,
    pub(super) conn: Arc<Conn>,
    conns: Arc<Conns>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.conns.lock().remove(&self.id);
    }
}

impl Conns {
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Conns {
            cap,
            next: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            refusing: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection: a free one, else the place of the connection that has
    /// waited longest on its client (idle, a head or a body still to come), which is closed.
    /// None when every open connection is answering a request.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Ticket> {
        let mut open = self.lock();
        if open.len() >= self.cap {
            let oldest = open
                .iter()
                .filter_map(|(id, c)| c.waiting().map(|t| (t, *id)))
                .min()?;
            if let Some(c) = open.remove(&oldest.1) {
                c.evicted.notify_one();
                tracing::debug!(target: "sendonce::http", "connection cap reached: closed the \
                                one idle longest");
            }
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            waiting: Mutex::new(Some(Instant::now())),
            in_flight: AtomicUsize::new(0),
            evicted: tokio::sync::Notify::new(),
        });
        open.insert(id, conn.clone());
        Some(Ticket {
            id,
            conn,
            conns: self.clone(),
        })
    }

    /// A connection over the cap: a 503 with `Connection: close` while few are being refused,
    /// else closed at once, so a flood holds no more descriptors than the cap and the refusals.
    pub(super) fn refuse(&self, stream: TcpStream) {
        if self.refusing.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSING {
            self.refusing.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let refusing = self.refusing.clone();
        tokio::spawn(async move {
            answer_503(stream).await;
            refusing.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// Read the request head (an HTTP client answered before it has written its request takes the
/// answer for a broken connection), answer 503, close; each step within `REFUSE_LINGER`.
async fn answer_503(stream: TcpStream) {
    const BODY: &str = "{\"error\":{\"code\":\"busy\",\"message\":\"too many connections \
                        (--max-connections): try again\",\"request_id\":\"\"}}";
    sendonce_domain::busy::refuse(stream, REFUSE_LINGER, 64 << 10, BODY).await;
}

/// Set on a request whose body did not arrive in time (its answer becomes a 408).
#[derive(Clone, Default)]
pub(super) struct BodyExpired(Arc<AtomicBool>);

impl BodyExpired {
    pub(super) fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The error a body gives past its deadline.
#[derive(Debug)]
struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

/// A request body that must be complete by a deadline, and tells its connection when it is.
pub(super) struct Timed {
    inner: hyper::body::Incoming,
    deadline: Pin<Box<Sleep>>,
    conn: Arc<Conn>,
    expired: BodyExpired,
}

impl Timed {
    pub(super) fn new(
        inner: hyper::body::Incoming,
        within: Duration,
        conn: Arc<Conn>,
        expired: BodyExpired,
    ) -> Self {
        Timed {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
            conn,
            expired,
        }
    }
}

impl Body for Timed {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.conn.body_done();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    this.conn.body_done();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending if Future::poll(this.deadline.as_mut(), cx).is_ready() => {
                this.expired.0.store(true, Ordering::SeqCst);
                Poll::Ready(Some(Err(BodyTimeout.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The accept loop's pause after a failed accept: doubling while the process is out of
/// descriptors (or memory), reset by the next success; one warning per episode.
#[derive(Default)]
pub(super) struct Backoff(Option<Duration>);

impl Backoff {
    pub(super) fn reset(&mut self) {
        if self.0.take().is_some() {
            tracing::info!("accepting connections again");
        }
    }

    pub(super) async fn failed(&mut self, e: &std::io::Error) {
        let scarce = matches!(
            e.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
        );
        if !scarce {
            // The peer went away between SYN and accept, and the like: the next one is fine.
            tracing::debug!(target: "sendonce::http", error = %e, "accept failed");
            return;
        }
        let wait = match self.0 {
            None => {
                tracing::warn!(error = %e, "accept failed: pausing accepts until descriptors \
                               are free (raise LimitNOFILE or lower --max-connections)");
                Duration::from_millis(10)
            }
            Some(d) => (d * 2).min(MAX_BACKOFF),
        };
        self.0 = Some(wait);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_cap_the_longest_waiting_connection_makes_room() {
        let conns = Conns::new(2);
        let a = conns.admit().expect("first");
        let b = conns.admit().expect("second");
        let _working = a.conn.begin(true);
        // `b` waits on its client, `a` works: `b` is closed for the third.
        let c = conns.admit().expect("third, in b's place");
        assert!(conns.lock().contains_key(&a.id) && !conns.lock().contains_key(&b.id));
        tokio::time::timeout(Duration::from_secs(1), b.conn.evicted())
            .await
            .expect("b is told");
        let _busy = c.conn.begin(true);
        assert!(conns.admit().is_none(), "every connection is working");
        drop(_working);
        assert!(conns.admit().is_some(), "a is idle again");
    }

    #[test]
    fn a_cap_over_the_descriptor_limit_is_refused() {
        let e = check_fd_limit(usize::MAX / 2).unwrap_err();
        assert!(e.message.contains("--max-connections"), "{e}");
        check_fd_limit(1).expect("one connection fits");
    }
}
