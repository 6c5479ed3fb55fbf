//! `sendonce serve`: the HTTP API on the process's one runtime. Handlers call the use cases of
//! `app/` (never the store's SQL), each store call whole on a blocking thread; statuses are
//! decided in `error.rs` (errors) and `messages.rs` (202 queued, 200 settled). Connections are
//! hyper HTTP/1 with a header-read timeout, accepted by our own loop up to a cap with a body
//! deadline (`conn.rs`). SIGTERM stops
//! accepting, lets requests and the optional in-process worker finish within the drain, and
//! returns.

mod auth;
mod batch;
mod conn;
pub mod dashboard;
mod error;
mod hooks;
pub mod limiter;
mod messages;
mod metrics;
mod openapi;
mod ops;
pub mod pages;
mod resources;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use sendonce_core::worker::{self, routes::Routes};
use sendonce_domain::error::{Error, Result};
use sendonce_store::Store;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub use conn::{check_fd_limit, BODY_TIMEOUT, MAX_CONNECTIONS};
pub use error::{status_for, ApiError};

/// How the server runs.
pub struct Settings {
    pub listen: String,
    /// How long requests and sends in flight may take after SIGTERM.
    pub drain: Duration,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// A request (a slow client's included) is cut after this long.
    pub request_timeout: Duration,
    /// A request's body must be in this long after its head (else 408, closed).
    pub body_timeout: Duration,
    /// Client connections open at once (see `conn.rs`).
    pub max_connections: usize,
    /// Run the send loop in this process too.
    pub worker: Option<(Routes, worker::Config)>,
    /// Provider webhooks accepted at `/hooks/...` (none by default).
    pub hooks: sendonce_core::app::webhooks::Hooks,
    /// The keys that open link tokens (from `SENDONCE_UNSUBSCRIBE_SECRET`), if set.
    pub keys: Option<sendonce_domain::links::Keys>,
    /// Public base URL and keys, if the public URL is configured.
    pub links: Option<sendonce_domain::links::Links>,
    /// What the dashboard's settings page and doctor look at.
    pub ops: Ops,
    /// Events out: retention and the networks webhook deliveries may reach.
    pub events: sendonce_core::app::events::Settings,
    /// How much of a client's address a consent record keeps (`[privacy] consent_ip`).
    pub consent_ip: sendonce_core::app::privacy::IpPolicy,
}

/// The server's own configuration as the dashboard's settings page shows it: the database and
/// where its path came from, the config file flag, the worker's default provider spec (never
/// shown: only its kind), and the config file read at start (for route labels).
#[derive(Debug, Default)]
pub struct Ops {
    pub db: std::path::PathBuf,
    pub db_from: Option<sendonce_core::config::Origin>,
    /// `--config`, when given.
    pub config: Option<std::path::PathBuf>,
    /// `--provider` (or `SENDONCE_PROVIDER`).
    pub provider: Option<String>,
    /// The config file in effect, read at start.
    pub file: Option<sendonce_core::config::Config>,
    /// The last doctor report, when it was made and how long it took (the settings page
    /// reuses it for a minute: `quick_check` reads the whole file).
    pub doctor: std::sync::Mutex<Option<(Instant, sendonce_core::app::doctor::Report, Duration)>>,
    /// True while a doctor run for the settings page is under way.
    pub doctor_running: AtomicBool,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    /// True while the in-process worker runs (None: no worker here).
    pub worker_alive: Option<Arc<AtomicBool>>,
    /// The configured provider webhooks, secrets included (never logged).
    pub hooks: Arc<sendonce_core::app::webhooks::Hooks>,
    /// Largest request body, in bytes (handlers that read the body themselves).
    pub body_limit: usize,
    /// The keys that open link tokens (`/u/`, `/c/`): None when no secret is set, and then
    /// those pages say the links are not set up.
    pub keys: Option<Arc<sendonce_domain::links::Keys>>,
    /// The public base URL and keys, when the public URL is configured (links this server
    /// writes itself: confirmation messages, callback URLs).
    pub links: Option<Arc<sendonce_domain::links::Links>>,
    /// The server's configuration (settings page, doctor, route labels).
    pub ops: Arc<Ops>,
    /// The one writer that commits concurrent API messages together (group commit).
    pub group: sendonce_store::group::Group,
    /// Rings the in-process worker when a message was queued (None: no worker here).
    pub wake: Option<Arc<tokio::sync::Notify>>,
    /// Events out: where webhook endpoints may point.
    pub events: Arc<sendonce_core::app::events::Settings>,
    /// How much of a client's address a consent record keeps.
    pub consent_ip: sendonce_core::app::privacy::IpPolicy,
}

/// Run `f` on the store on a blocking thread (no statement is held across an `.await`).
pub async fn blocking<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Store) -> Result<T> + Send + 'static,
) -> Result<T> {
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| Error::internal(format!("a store task failed: {e}")))?
}

/// Every route the server serves, as (method, path): each module lists its own beside its
/// `routes()` (the OpenAPI test compares its document with this list).
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    [
        ops::ROUTES,
        metrics::ROUTES,
        openapi::ROUTES,
        messages::ROUTES,
        resources::ROUTES,
        hooks::ROUTES,
        &pages::route_list(),
    ]
    .concat()
}

fn router(st: AppState, s: &Settings) -> Router {
    let guard = middleware::from_fn_with_state((st.body_limit, s.body_timeout), body_guard);
    Router::new()
        .merge(ops::routes())
        .merge(metrics::routes())
        .merge(openapi::routes())
        .merge(messages::routes())
        .merge(resources::routes())
        .merge(hooks::routes())
        .merge(pages::routes())
        .merge(dashboard::routes())
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(s.body_limit))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            s.request_timeout,
        ))
        .layer(guard)
        .layer(middleware::from_fn(request_log))
        .with_state(st)
}

/// A request id for every request (in the `x-request-id` answer header and the error body),
/// and one log line per request: method, route, status, duration, id. Never a header value.
async fn request_log(mut req: Request, next: Next) -> Response {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    req.extensions_mut().insert(auth::RequestId(id.clone()));
    let started = Instant::now();
    let mut res = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert("x-request-id", v);
    }
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    sendonce_core::metrics::http_request(method.as_str(), &route, res.status().as_u16());
    tracing::info!(target: "sendonce::http", %method, route, status = res.status().as_u16(),
                   ms = format!("{ms:.1}"), request_id = %id, "request");
    res
}

/// A body declared larger than the limit is refused at once (413, before any of it is read);
/// a body that did not arrive within the body timeout gets a 408. Both close the connection
/// (its stream is mid-body).
async fn body_guard(
    axum::extract::State((limit, within)): axum::extract::State<(usize, Duration)>,
    req: Request,
    next: Next,
) -> Response {
    let id = req
        .extensions()
        .get::<auth::RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_default();
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > limit as u64) {
        let msg =
            format!("the request body ({n} bytes) is larger than {limit} bytes (--body-limit)");
        return closing(error::body(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            &msg,
            &id,
        ));
    }
    let expired = req.extensions().get::<conn::BodyExpired>().cloned();
    let res = next.run(req).await;
    if expired.is_some_and(|e| e.is_set()) {
        let msg = format!("the request body did not arrive within {within:?} (--body-timeout)");
        return closing(error::body(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            &msg,
            &id,
        ));
    }
    res
}

/// `res` with `Connection: close`.
fn closing(mut res: Response) -> Response {
    res.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    res
}

/// Serve until SIGTERM/Ctrl-C; `bound` is told the address actually bound (port 0 picks
/// one). Returns the in-process worker's summary, if there was one.
pub fn serve(
    store: Arc<Store>,
    mut s: Settings,
    rt: &tokio::runtime::Runtime,
    bound: impl FnOnce(SocketAddr),
) -> Result<Option<worker::Summary>> {
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&s.listen)
            .await
            .map_err(|e| Error::io(&format!("cannot listen on {}", s.listen), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the bound address", e))?;
        let (tx, rx) = watch::channel(false);
        let signal = sendonce_domain::shutdown::stop_signal()?;
        tokio::spawn(async move {
            signal.await;
            let _ = tx.send(true);
        });
        let alive = s.worker.as_ref().map(|_| Arc::new(AtomicBool::new(true)));
        let wake = s
            .worker
            .as_ref()
            .map(|_| Arc::new(tokio::sync::Notify::new()));
        let mut w = s.worker.take();
        if let Some((_, cfg)) = w.as_mut() {
            cfg.wake.clone_from(&wake);
        }
        let worker = spawn_worker(&store, w, &alive, &rx);
        let group = sendonce_store::group::Group::start(store.clone())?;
        let st = AppState {
            group,
            wake,
            store,
            worker_alive: alive,
            hooks: Arc::new(std::mem::take(&mut s.hooks)),
            body_limit: s.body_limit,
            keys: s.keys.take().map(Arc::new),
            links: s.links.take().map(Arc::new),
            ops: Arc::new(std::mem::take(&mut s.ops)),
            events: Arc::new(std::mem::take(&mut s.events)),
            consent_ip: s.consent_ip,
        };
        let app = router(st, &s);
        bound(addr);
        let limits = Limits {
            max_connections: s.max_connections,
            body_timeout: s.body_timeout,
            drain: s.drain,
        };
        run_server(listener, app, rx, limits).await?;
        match worker {
            Some(h) => Ok(Some(h.await.map_err(|e| {
                Error::internal(format!("the worker task failed: {e}"))
            })??)),
            None => Ok(None),
        }
    })
}

/// The send loop as a task of this runtime, stopping with the server; `alive` turns false
/// when it ends (for `/readyz`).
fn spawn_worker(
    store: &Arc<Store>,
    w: Option<(Routes, worker::Config)>,
    alive: &Option<Arc<AtomicBool>>,
    rx: &watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<Result<worker::Summary>>> {
    let (routes, cfg) = w?;
    let ledger: Arc<dyn sendonce_store::Ledger> = store.clone();
    let alive = alive.clone();
    let stop = stopped(rx.clone());
    Some(tokio::spawn(async move {
        let r = worker::run_routed(ledger, Arc::new(routes), cfg, stop).await;
        if let Some(a) = alive {
            a.store(false, Ordering::SeqCst);
        }
        if let Err(e) = &r {
            tracing::error!(error = %e, "the worker stopped; the server goes on without it");
        }
        r
    }))
}

/// Resolves once the stop signal came.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A client must have sent its whole request head within this long (slow clients that trickle
/// headers would otherwise hold a connection forever).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the accept loop enforces.
struct Limits {
    max_connections: usize,
    body_timeout: Duration,
    drain: Duration,
}

/// Accept connections until the stop signal, up to the cap (`conn::Conns`), each served by
/// hyper's HTTP/1 with a header-read timeout; then stop accepting and let open connections
/// finish within the drain.
async fn run_server(
    listener: tokio::net::TcpListener,
    app: Router,
    rx: watch::Receiver<bool>,
    limits: Limits,
) -> Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let conns = conn::Conns::new(limits.max_connections);
    let mut backoff = conn::Backoff::default();
    let mut stop = std::pin::pin!(stopped(rx));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    backoff.failed(&e).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        backoff.reset();
        match conns.admit() {
            Some(ticket) => spawn_connection(stream, peer, ticket, &app, &graceful, &limits),
            None => conns.refuse(stream),
        }
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain: closing them");
    }
    Ok(())
}

/// Serve one admitted connection on its own task until it ends, or is closed to make room.
fn spawn_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    ticket: conn::Ticket,
    app: &Router,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    limits: &Limits,
) {
    // The peer's address reaches handlers as axum's `ConnectInfo` (the signup form's
    // rate limit is per client address).
    let tower = hyper_util::service::TowerToHyperService::new(app.clone());
    let conn = ticket.conn.clone();
    let within = limits.body_timeout;
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let busy = conn.begin(hyper::body::Body::is_end_stream(req.body()));
        let expired = conn::BodyExpired::default();
        let conn = conn.clone();
        let mut req =
            req.map(|b| axum::body::Body::new(conn::Timed::new(b, within, conn, expired.clone())));
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo::<SocketAddr>(peer));
        req.extensions_mut().insert(expired);
        let answer = hyper::service::Service::call(&tower, req);
        async move {
            let r = answer.await;
            drop(busy);
            r
        }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let served = graceful.watch(b.serve_connection(hyper_util::rt::TokioIo::new(stream), svc));
    tokio::spawn(async move {
        tokio::select! {
            r = served => {
                if let Err(e) = r {
                    tracing::debug!(target: "sendonce::http", error = %e, "connection ended");
                }
            }
            _ = ticket.conn.evicted() => {}
        }
        drop(ticket);
    });
}
