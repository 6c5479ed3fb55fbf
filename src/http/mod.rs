//! `sendonce serve`: the HTTP API on the process's one runtime. Handlers call the use cases of
//! `app/` (never the store's SQL), each store call whole on a blocking thread; statuses are
//! decided in `error.rs` (errors) and `messages.rs` (202 queued, 200 settled). Connections are
//! hyper HTTP/1 with a header-read timeout, accepted by our own loop. SIGTERM stops
//! accepting, lets requests and the optional in-process worker finish within the drain, and
//! returns.

mod auth;
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

use crate::error::{Error, Result};
use crate::store::Storage;
use crate::worker::{self, routes::Routes};
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

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
    /// Run the send loop in this process too.
    pub worker: Option<(Routes, worker::Config)>,
    /// Provider webhooks accepted at `/hooks/...` (none by default).
    pub hooks: crate::app::webhooks::Hooks,
    /// The keys that open link tokens (from `SENDONCE_UNSUBSCRIBE_SECRET`), if set.
    pub keys: Option<crate::domain::links::Keys>,
    /// Public base URL and keys, if the public URL is configured.
    pub links: Option<crate::domain::links::Links>,
    /// What the dashboard's settings page and doctor look at.
    pub ops: Ops,
}

/// The server's own configuration as the dashboard's settings page shows it: the database and
/// where its path came from, the config file flag, the worker's default provider spec (never
/// shown: only its kind), and the config file read at start (for route labels).
#[derive(Debug, Default)]
pub struct Ops {
    pub db: std::path::PathBuf,
    pub db_from: Option<crate::config::Origin>,
    /// `--config`, when given.
    pub config: Option<std::path::PathBuf>,
    /// `--provider` (or `SENDONCE_PROVIDER`).
    pub provider: Option<String>,
    /// The config file in effect, read at start.
    pub file: Option<crate::config::Config>,
    /// The last doctor report, when it was made and how long it took (the settings page
    /// reuses it for a minute: `quick_check` reads the whole file).
    pub doctor: std::sync::Mutex<Option<(Instant, crate::app::doctor::Report, Duration)>>,
    /// True while a doctor run for the settings page is under way.
    pub doctor_running: AtomicBool,
}

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Storage>,
    /// True while the in-process worker runs (None: no worker here).
    pub worker_alive: Option<Arc<AtomicBool>>,
    /// The configured provider webhooks, secrets included (never logged).
    pub hooks: Arc<crate::app::webhooks::Hooks>,
    /// Largest request body, in bytes (handlers that read the body themselves).
    pub body_limit: usize,
    /// The keys that open link tokens (`/u/`, `/c/`): None when no secret is set, and then
    /// those pages say the links are not set up.
    pub keys: Option<Arc<crate::domain::links::Keys>>,
    /// The public base URL and keys, when the public URL is configured (links this server
    /// writes itself: confirmation messages, callback URLs).
    pub links: Option<Arc<crate::domain::links::Links>>,
    /// The server's configuration (settings page, doctor, route labels).
    pub ops: Arc<Ops>,
}

/// Run `f` on the store on a blocking thread (no statement is held across an `.await`).
pub async fn blocking<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&dyn Storage) -> Result<T> + Send + 'static,
) -> Result<T> {
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || f(&*store))
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
    crate::metrics::http_request(method.as_str(), &route, res.status().as_u16());
    tracing::info!(target: "sendonce::http", %method, route, status = res.status().as_u16(),
                   ms = format!("{ms:.1}"), request_id = %id, "request");
    res
}

/// Serve until SIGTERM/Ctrl-C; `bound` is told the address actually bound (port 0 picks
/// one). Returns the in-process worker's summary, if there was one.
pub fn serve(
    store: Arc<dyn Storage>,
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
        let signal = crate::shutdown::stop_signal()?;
        tokio::spawn(async move {
            signal.await;
            let _ = tx.send(true);
        });
        let alive = s.worker.as_ref().map(|_| Arc::new(AtomicBool::new(true)));
        let worker = spawn_worker(&store, s.worker.take(), &alive, &rx);
        let st = AppState {
            store,
            worker_alive: alive,
            hooks: Arc::new(std::mem::take(&mut s.hooks)),
            body_limit: s.body_limit,
            keys: s.keys.take().map(Arc::new),
            links: s.links.take().map(Arc::new),
            ops: Arc::new(std::mem::take(&mut s.ops)),
        };
        let app = router(st, &s);
        bound(addr);
        run_server(listener, app, rx, s.drain).await?;
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
    store: &Arc<dyn Storage>,
    w: Option<(Routes, worker::Config)>,
    alive: &Option<Arc<AtomicBool>>,
    rx: &watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<Result<worker::Summary>>> {
    let (routes, cfg) = w?;
    let ledger: Arc<dyn crate::store::Ledger> = store.clone();
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

/// Accept connections until the stop signal, each served by hyper's HTTP/1 with a header-read
/// timeout; then stop accepting and let open connections finish within `drain`.
async fn run_server(
    listener: tokio::net::TcpListener,
    app: Router,
    rx: watch::Receiver<bool>,
    drain: Duration,
) -> Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(stopped(rx));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        // The peer's address reaches handlers as axum's `ConnectInfo` (the signup form's
        // rate limit is per client address).
        let tower = hyper_util::service::TowerToHyperService::new(app.clone());
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo::<SocketAddr>(peer));
            hyper::service::Service::call(&tower, req)
        });
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT);
        let conn = graceful.watch(b.serve_connection(hyper_util::rt::TokioIo::new(stream), svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(target: "sendonce::http", error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain: closing them");
    }
    Ok(())
}
