//! The fake provider's HTTP side (hyper, HTTP/1.1): `POST /send` (or `/`), `GET /messages`,
//! `GET /health`, the provider-compatible endpoints of `apis`, fault injection (latency, 503s,
//! replies lost after a durable acceptance) and graceful shutdown. The caller owns the socket
//! and the stop signal.

use super::apis;
use super::journal::{IdStyle, Journal, Request, Verdict};
use super::tenants;
use super::{Config, Rng};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request as HttpRequest, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use sendonce_domain::error::{Error, Result};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Largest request body accepted: a message with the attachments Postmark (10 MB) and
/// sendonce take, base64 and all.
pub(super) const MAX_BODY: usize = 16 << 20;
/// How long in-flight requests may take after the stop signal.
const DRAIN: Duration = Duration::from_secs(10);

pub(super) type Body = Full<Bytes>;

/// Returned to hyper to close the connection without writing any response.
#[derive(Debug)]
pub(super) struct DropReply;

impl std::fmt::Display for DropReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reply dropped on purpose after a durable acceptance")
    }
}

impl std::error::Error for DropReply {}

pub(super) struct Shared {
    pub(super) config: Config,
    pub(super) journal: Journal,
    pub(super) rng: Rng,
    /// `Config::request_log`, open for appending.
    pub(super) requests: Option<std::sync::Mutex<std::fs::File>>,
    /// The `--chaos` rules (`GET|PUT|DELETE /chaos`).
    pub(super) chaos: super::chaos::Chaos,
}

/// A fake provider whose log and key table are open; `serve` answers requests.
pub struct Server {
    shared: Arc<Shared>,
}

/// Open the log, then serve on `listener` until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    Server::open(config)?.serve(listener, None, shutdown).await
}

impl Server {
    /// Open (or create) the delivery log and the key table and load the keys.
    pub fn open(config: Config) -> Result<Self> {
        let journal = Journal::open(&config.log, config.idempotent)?;
        let seed = config
            .seed
            .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
        let rng = Rng::new(Some(seed));
        let chaos = super::chaos::Chaos::new(&config.chaos, seed)?;
        let requests = match &config.request_log {
            Some(p) => Some(std::sync::Mutex::new(
                sendonce_domain::files::options()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| Error::io(&format!("cannot open {}", p.display()), e))?,
            )),
            None => None,
        };
        Ok(Server {
            shared: Arc::new(Shared {
                config,
                journal,
                rng,
                requests,
                chaos,
            }),
        })
    }

    /// Accept HTTP connections (and SMTP ones on `smtp`) until `shutdown` resolves; then stop
    /// accepting, let in-flight requests and SMTP sessions finish (up to 10 s each), and stop the
    /// journal writer (every answered line is
    /// already fsynced).
    pub async fn serve(
        self,
        listener: TcpListener,
        smtp: Option<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<()> {
        let (stop_smtp, smtp_stop) = tokio::sync::watch::channel(false);
        let smtp =
            smtp.map(|l| tokio::spawn(super::smtp::serve(self.shared.clone(), l, smtp_stop)));
        let graceful = GracefulShutdown::new();
        let gate = super::guard::Gate::new(self.shared.config.limits.max_connections);
        let refusals = super::guard::Gate::new(super::guard::MAX_REFUSING);
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let stream = match accepted {
                        Ok((s, _)) => s,
                        Err(e) => {
                            // Out of file descriptors and the like: back off, keep serving.
                            tracing::warn!("fake provider: accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    let Some(admitted) = gate.enter() else {
                        // Answered with a 503 while few are being refused; past that, closed
                        // at once, so a flood holds no more sockets than the two caps.
                        if let Some(refusing) = refusals.enter() {
                            tokio::spawn(async move {
                                super::guard::refuse(stream).await;
                                drop(refusing);
                            });
                        }
                        continue;
                    };
                    self.spawn_connection(stream, admitted, &graceful);
                }
                _ = &mut shutdown => break,
            }
        }
        drop(listener);
        let _ = stop_smtp.send(true);
        // SMTP sessions and HTTP requests drain side by side, each for up to DRAIN.
        let smtp_drained = async {
            if let Some(mut task) = smtp {
                if tokio::time::timeout(DRAIN, &mut task).await.is_err() {
                    // Ended here, before the journal closes: no late message gets a 250.
                    tracing::warn!("fake provider: SMTP sessions still running after {DRAIN:?}");
                    task.abort();
                }
            }
        };
        let http_drained = async {
            if tokio::time::timeout(DRAIN, graceful.shutdown())
                .await
                .is_err()
            {
                tracing::warn!("fake provider: in-flight requests still running after {DRAIN:?}");
            }
        };
        tokio::join!(smtp_drained, http_drained);
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.journal.close())
            .await
            .map_err(|e| Error::io("stopping the journal", std::io::Error::other(e)))?;
        Ok(())
    }

    /// Serve one admitted HTTP connection on its own task: hyper's HTTP/1 with our head limits,
    /// the connection's clock for the idle and head timeouts, and graceful shutdown.
    fn spawn_connection(
        &self,
        stream: tokio::net::TcpStream,
        admitted: super::guard::Admitted,
        graceful: &GracefulShutdown,
    ) {
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        let shared = self.shared.clone();
        let limits = shared.config.limits;
        let clock = super::guard::Clock::new();
        let io = super::guard::Watched::new(stream, clock.clone());
        let service_clock = clock.clone();
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            // Ours (guard::expired) starts at a head's first byte, not when idle.
            .header_read_timeout(None)
            .max_buf_size(super::guard::MAX_HEAD)
            .max_header_size(super::guard::MAX_HEAD)
            .serve_connection(
                TokioIo::new(io),
                service_fn(move |req| {
                    let busy = service_clock.busy();
                    let shared = shared.clone();
                    async move {
                        let _busy = busy;
                        handle(shared, req, local).await
                    }
                }),
            );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _admitted = admitted;
            // An error here is a dropped reply or a client that went away; an
            // expired connection is dropped (closed) as it is.
            tokio::select! {
                _ = conn => {}
                _ = super::guard::expired(&clock, &limits) => {}
            }
        });
    }
}

async fn handle(
    shared: Arc<Shared>,
    mut req: HttpRequest<Incoming>,
    local: Option<std::net::SocketAddr>,
) -> std::result::Result<Response<Body>, DropReply> {
    super::guard::log_request(&shared, &req);
    if let Err(why) = super::guard::check_host(&req, local, &shared.config.allowed_hosts) {
        return Ok(invalid(StatusCode::FORBIDDEN, why));
    }
    let Some((tenant, rest)) = tenants::split(req.uri().path()) else {
        return route(shared, req).await;
    };
    if !tenants::tenant_ok(tenant) {
        return Ok(invalid(
            StatusCode::BAD_REQUEST,
            tenants::bad_tenant(tenant),
        ));
    }
    let tenant = tenant.to_string();
    let target = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_string(),
    };
    let original = tenants::OriginalPath(req.uri().path().to_string());
    req.extensions_mut().insert(original);
    match target.parse() {
        Ok(uri) => *req.uri_mut() = uri,
        Err(_) => {
            return Ok(invalid(
                StatusCode::BAD_REQUEST,
                "a path this fake cannot read",
            ))
        }
    }
    tenants::scoped(tenant, route(shared, req)).await
}

/// Answer a request (its `/t/{tenant}` prefix, if any, already taken off).
async fn route(
    shared: Arc<Shared>,
    req: HttpRequest<Incoming>,
) -> std::result::Result<Response<Body>, DropReply> {
    let path = req.uri().path().to_string();
    if let Some(sid) = apis::twilio_account(&path) {
        return match req.method() {
            &Method::POST => apis::twilio(&shared, req, sid).await,
            _ => Ok(reply(
                StatusCode::METHOD_NOT_ALLOWED,
                json!({"code": 20004, "message": "Method not allowed", "status": 405}),
            )),
        };
    }
    if super::web::is_ours(req.method(), &path) {
        return Ok(super::web::handle(&shared, req).await);
    }
    if super::mailpit::owns(&path) {
        return Ok(super::mailpit::handle(&shared, req).await);
    }
    if path != "/messages/outbound" {
        let query = req.uri().query();
        if let Some(r) = super::assertions::route(&shared, req.method(), &path, query).await {
            return Ok(r);
        }
    }
    if path == "/chaos" {
        let method = req.method().clone();
        let body = match super::guard::read_body(req.into_body(), &shared.config.limits).await {
            Ok(b) => b,
            Err(e) => return Ok(e.apply(invalid(e.status, e.message.clone()))),
        };
        return Ok(super::chaos::handle(&shared.chaos, &method, &body));
    }
    let req = match super::clouds::route(&shared, req, &path).await {
        Ok(answer) => return answer,
        Err(req) => req,
    };
    match (req.method(), path.as_str()) {
        (&Method::POST, "/send" | "/") => send(&shared, req).await,
        (&Method::GET, "/health") => Ok(reply(StatusCode::OK, json!({"status": "ok"}))),
        (&Method::POST, "/emails") => apis::resend(&shared, req).await,
        (&Method::POST, "/email") => apis::postmark_send(&shared, req).await,
        (&Method::GET, "/messages/outbound") => Ok(apis::postmark_search(&shared, req).await),
        (_, "/send" | "/" | "/health" | "/emails" | "/email" | "/messages/outbound") => Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": "method not allowed"}),
        )),
        _ => Ok(reply(StatusCode::NOT_FOUND, json!({"error": "not found"}))),
    }
}

pub(super) fn reply(status: StatusCode, body: Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn invalid(status: StatusCode, error: impl Into<String>) -> Response<Body> {
    reply(status, json!({"error": error.into()}))
}

async fn send(
    shared: &Shared,
    req: HttpRequest<Incoming>,
) -> std::result::Result<Response<Body>, DropReply> {
    let cfg = &shared.config;
    let f = apis::faults(shared, "webhook").await;
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let (parts, body) = req.into_parts();
    let bearer = apis::header(&parts, "authorization")
        .and_then(|v| v.split_once(' '))
        .map(|(_, t)| t.trim().to_string());
    let who = match &bearer {
        Some(t) => apis::Who::Secret(t),
        None => apis::Who::Nobody,
    };
    let tenant = apis::tenant(&parts, who);
    if let Some(t) = tenant.as_deref().filter(|t| !apis::tenant_ok(t)) {
        return Ok(invalid(StatusCode::BAD_REQUEST, apis::bad_tenant(t)));
    }
    let body = match super::guard::read_body(body, &cfg.limits).await {
        Ok(b) => b,
        Err(e) => return Ok(e.apply(invalid(e.status, e.message.clone()))),
    };
    let Some(key) = key else {
        return Ok(invalid(
            StatusCode::BAD_REQUEST,
            "missing Idempotency-Key header",
        ));
    };
    let mut request = match parse_send(&body, key) {
        Ok(r) => r,
        Err(why) => return Ok(invalid(StatusCode::UNPROCESSABLE_ENTITY, why)),
    };
    request.tenant = tenant;
    if let Some(refusal) = f.refuse {
        return Ok(apis::chaos_refusal(refusal, |s, m: &str| invalid(s, m)));
    }
    if f.fail {
        return Ok(invalid(
            StatusCode::SERVICE_UNAVAILABLE,
            "injected failure (--fail-rate): not recorded",
        ));
    }
    let after = super::callbacks::after_journal(
        cfg.callbacks.clone(),
        super::callbacks::Accepted::of(&request, None),
    );
    match shared.journal.submit_then(request, after).await {
        Ok(Verdict::Delivered { message_id, replay }) => {
            apis::after_accept(&f).await?;
            let mut r = reply(StatusCode::OK, json!({"id": message_id}));
            if replay {
                r.headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
            }
            Ok(r)
        }
        Ok(Verdict::Conflict) => Ok(invalid(
            StatusCode::CONFLICT,
            "idempotency key reused with a different payload",
        )),
        Err(e) => Ok(invalid(StatusCode::INTERNAL_SERVER_ERROR, e)),
    }
}

/// Validate the webhook JSON: `job_id`, `to` and `body` are required non-empty strings.
fn parse_send(body: &[u8], key: String) -> std::result::Result<Request, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    if !v.is_object() {
        return Err("the body must be a JSON object".into());
    }
    let required = |name: &str| match v.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            Err(format!("missing required field {name:?}"))
        }
        Some(_) => Err(format!("field {name:?} must be a string")),
    };
    let optional = |name: &str| match v.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("field {name:?} must be a string")),
    };
    Ok(Request {
        job_id: required("job_id")?,
        to: required("to")?,
        body: required("body")?,
        channel: optional("channel")?.unwrap_or_else(|| "email".into()),
        from: optional("from")?,
        subject: optional("subject")?,
        html: optional("html")?,
        metadata: v.get("metadata").filter(|m| !m.is_null()).cloned(),
        idempotency_key: key,
        api: None,
        headers: None,
        id_style: IdStyle::Fake,
        raw: None,
        envelope: None,
        attachments: Vec::new(),
        tenant: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_bodies_are_validated() {
        let ok = br#"{"job_id":"j","to":"a@b.c","body":"hi","metadata":{"job_id":"j"}}"#;
        let r = parse_send(ok, "k".into()).unwrap();
        assert_eq!(r.channel, "email");
        assert_eq!(r.metadata, Some(json!({"job_id": "j"})));
        for bad in [
            &br#"{"to":"a@b.c","body":"hi"}"#[..],
            br#"{"job_id":"j","body":"hi"}"#,
            br#"{"job_id":"j","to":"a@b.c"}"#,
            br#"{"job_id":"j","to":"a@b.c","body":3}"#,
            br#"[1]"#,
            b"not json",
        ] {
            assert!(parse_send(bad, "k".into()).is_err());
        }
    }
}
