//! `sendonce bench --only http`: a bounded load test of `sendonce serve --worker` on loopback.
//! A child server on a fresh database sends through a child `sendonce fake-provider`; N clients
//! post transactional messages with unique Idempotency-Keys for a fixed time; then the fake
//! provider's delivery log is compared with the accepted requests (each delivered once). Then,
//! on the same server, the open-loop and batch arms (`http_arms.rs`). Figures only, never
//! asserted here.

use super::bench::{child_cmd, load_average, machine, Machine, Workspace};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::token::Scope;
use sendonce_store::sqlite::SqliteStore;
use sendonce_store::{OpenOptions, Synchronous};
use serde::Serialize;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to run (validated by the CLI).
#[derive(Debug, Clone)]
pub struct Options {
    /// Concurrent clients.
    pub clients: usize,
    /// How long the clients post.
    pub duration: Duration,
    /// Where to put the database and the delivery log (kept); default a temporary directory.
    pub dir: Option<PathBuf>,
}

/// How long the deliveries may lag behind the last accepted request.
const SETTLE: Duration = Duration::from_secs(120);
/// One request's limit on the client side.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize)]
pub struct HttpReport {
    pub machine: Machine,
    pub clients: usize,
    /// Wall time of the load phase.
    pub seconds: f64,
    pub requests: u64,
    /// Answered 202 (queued) or 200 (settled).
    pub accepted: u64,
    /// Answered with another status.
    pub refused: u64,
    /// No answer (connection or timeout).
    pub errors: u64,
    /// The first refusal or error, for the reader.
    pub first_problem: Option<String>,
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Distinct messages the fake provider accepted.
    pub deliveries: u64,
    /// Deliveries beyond the first of a message (must be 0).
    pub duplicates: u64,
    /// Distinct messages delivered when the load phase ended (the worker may lag the API).
    pub delivered_during_load: u64,
    /// The limit for this path: the same clients against a bare endpoint that durably inserts
    /// each key and body into a two-column table through the same group commit, with the
    /// same `synchronous=FULL` (requests/s, p50, p99).
    pub limit_requests_per_second: f64,
    pub limit_p50_ms: f64,
    pub limit_p99_ms: f64,
    /// Time after the load until every accepted message was delivered.
    pub settle_seconds: f64,
    /// Deliveries per second over the load and the settling time.
    pub deliveries_per_second: f64,
    /// deliveries == accepted and duplicates == 0 (every arm's messages counted).
    pub exactly_once: bool,
    /// The open-loop arm at half the accepted rate: accept → provider latency.
    pub paced: super::http_arms::Paced,
    /// Batches of 500, one after another.
    pub batches: super::http_arms::Batches,
}

/// How long the open-loop arm posts.
const PACED_FOR: Duration = Duration::from_secs(10);
/// How many batches of 500 the batch arm posts.
const BATCHES: usize = 5;

/// A child process, SIGTERMed by `stop`, killed if dropped before.
struct Proc {
    child: std::process::Child,
    what: &'static str,
}

impl Proc {
    /// Start `cmd` and read its first stdout line, `listening on ADDR`: returns ADDR.
    fn start(mut cmd: Command, what: &'static str) -> Result<(Proc, String)> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io(&format!("cannot start {what}"), e))?;
        let mut first = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufReader::new(out)
                .read_line(&mut first)
                .map_err(|e| Error::io(&format!("reading {what}"), e))?;
        }
        let p = Proc { child, what };
        let addr = first
            .trim()
            .strip_prefix("listening on ")
            .map(str::to_string);
        let addr = addr
            .ok_or_else(|| Error::internal(format!("{what} printed {first:?}, not its address")))?;
        Ok((p, addr))
    }

    /// SIGTERM, then wait up to 30 s (then SIGKILL).
    fn stop(mut self) -> Result<()> {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let st = self.child.try_wait();
            match st.map_err(|e| Error::io(&format!("waiting for {}", self.what), e))? {
                Some(_) => return Ok(()),
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        Err(Error::internal(format!(
            "{} did not stop after SIGTERM",
            self.what
        )))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh database with account `bench` and a send token for it; returns the token.
fn prepare(db: &Path) -> Result<String> {
    let opts = OpenOptions {
        create: true,
        sync: Synchronous::Full,
        ..Default::default()
    };
    let store = sendonce_store::Store::Sqlite(SqliteStore::open(db, &opts)?);
    sendonce_core::app::accounts::add(&store, "bench")?;
    let t = sendonce_core::app::tokens::create(&store, "bench", "bench", Scope::Send)?;
    Ok(t.token.expose().to_string())
}

/// Run the section.
pub fn run(opts: &Options, rt: &tokio::runtime::Runtime) -> Result<HttpReport> {
    let load_start = load_average();
    let ws = Workspace::new(opts.dir.as_deref(), Synchronous::Full)?;
    let (db, log) = (ws.path("http.db"), ws.path("deliveries.jsonl"));
    if db.exists() {
        return Err(Error::invalid(format!(
            "{} already exists; pass an empty --dir",
            db.display()
        )));
    }
    let limit = rt.block_on(limit_arm(&ws.path("limit.db"), opts))?;
    let token = prepare(&db)?;
    let mut fake = child_cmd(&db)?;
    fake.args(["-q", "fake-provider", "--listen", "127.0.0.1:0", "--log"])
        .arg(&log);
    let (fake, fake_addr) = Proc::start(fake, "sendonce fake-provider")?;
    let mut serve = child_cmd(&db)?;
    let spec = format!("webhook:http://{fake_addr}/send");
    serve.args([
        "-q",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--worker",
        "--provider",
        &spec,
    ]);
    let (server, base) = Proc::start(serve, "sendonce serve")?;
    let load = rt.block_on(load(&base, &token, opts.clients, opts.duration))?;
    let settle_from = Instant::now();
    let during = deliveries(&log)?.0;
    let (delivered, _) = settle(&log, load.accepted)?;
    let settle_seconds = settle_from.elapsed().as_secs_f64();
    // The other arms, on the same server once the backlog is gone.
    let rate = load.accepted as f64 / load.seconds.max(1e-9) / 2.0;
    let (sent, paced_requests) =
        rt.block_on(super::http_arms::paced(&base, &token, rate, PACED_FOR))?;
    let batches = rt.block_on(super::http_arms::batches(&base, &token, BATCHES))?;
    let total = load.accepted + sent.len() as u64 + batches.accepted;
    let (all, duplicates) = settle(&log, total)?;
    let paced = super::http_arms::paced_report(&log, rate, paced_requests, &sent)?;
    server.stop()?;
    fake.stop()?;
    let d = Delivered {
        during,
        delivered,
        duplicates,
        settle_seconds,
        exactly_once: all == total && duplicates == 0,
    };
    Ok(report(opts, load, limit, d, load_start, paced, batches))
}

/// The limit arm: a bare `POST /v1/messages` in this process that commits the key and the body
/// into a two-column table through the store's group commit (`sendonce_store::group`), on a
/// fresh file with `synchronous=FULL`, under the same clients for the same time.
async fn limit_arm(db: &Path, opts: &Options) -> Result<Load> {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    use sendonce_store::group::Group;
    let store = sendonce_store::Store::Sqlite(SqliteStore::open(
        db,
        &OpenOptions {
            create: true,
            sync: Synchronous::Full,
            ..Default::default()
        },
    )?);
    let group = Group::start(std::sync::Arc::new(store))?;
    let g = group.clone();
    tokio::task::spawn_blocking(move || {
        g.run(|tx| {
            tx.exec(
                "CREATE TABLE accepted (key TEXT PRIMARY KEY, body BLOB NOT NULL)",
                &[],
            )
        })
    })
    .await
    .map_err(|e| Error::internal(format!("the limit arm's setup failed: {e}")))??;
    let insert = move |headers: HeaderMap, body: Bytes| {
        let g = group.clone();
        async move {
            let key = headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let done = tokio::task::spawn_blocking(move || {
                g.run(move |tx| {
                    tx.exec(
                        "INSERT INTO accepted (key, body) VALUES (?1, ?2)",
                        &[key.as_str().into(), body.as_ref().into()],
                    )
                })
            })
            .await;
            match done {
                Ok(Ok(_)) => (StatusCode::ACCEPTED, "{\"status\":\"queued\"}"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "{}"),
            }
        }
    };
    let app = axum::Router::new().route("/v1/messages", axum::routing::post(insert));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::io("cannot listen for the limit arm", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io("cannot read the limit arm's address", e))?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let out = load(
        &format!("http://{addr}"),
        "limit",
        opts.clients,
        opts.duration,
    )
    .await;
    server.abort();
    out
}

/// What the fake provider's log showed.
struct Delivered {
    during: u64,
    delivered: u64,
    duplicates: u64,
    settle_seconds: f64,
    /// Every arm's messages delivered once.
    exactly_once: bool,
}

fn report(
    opts: &Options,
    load: Load,
    limit: Load,
    d: Delivered,
    load_start: f64,
    paced: super::http_arms::Paced,
    batches: super::http_arms::Batches,
) -> HttpReport {
    let mut lat = load.latencies_ms;
    lat.sort_by(|a, b| a.total_cmp(b));
    let mut limit_lat = limit.latencies_ms;
    limit_lat.sort_by(|a, b| a.total_cmp(b));
    let requests = lat.len() as u64;
    HttpReport {
        machine: machine(load_start),
        clients: opts.clients,
        seconds: load.seconds,
        requests,
        accepted: load.accepted,
        refused: load.refused,
        errors: load.errors,
        first_problem: load.first_problem,
        requests_per_second: requests as f64 / load.seconds.max(1e-9),
        p50_ms: percentile(&lat, 0.50),
        p99_ms: percentile(&lat, 0.99),
        max_ms: lat.last().copied().unwrap_or(0.0),
        limit_requests_per_second: limit_lat.len() as f64 / limit.seconds.max(1e-9),
        limit_p50_ms: percentile(&limit_lat, 0.50),
        limit_p99_ms: percentile(&limit_lat, 0.99),
        deliveries: d.delivered,
        duplicates: d.duplicates,
        delivered_during_load: d.during,
        settle_seconds: d.settle_seconds,
        deliveries_per_second: d.delivered as f64 / (load.seconds + d.settle_seconds).max(1e-9),
        exactly_once: d.exactly_once && d.delivered == load.accepted,
        paced,
        batches,
    }
}

/// The `q` quantile of sorted values (nearest rank).
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What the clients saw.
#[derive(Default)]
struct Load {
    seconds: f64,
    latencies_ms: Vec<f64>,
    accepted: u64,
    refused: u64,
    errors: u64,
    first_problem: Option<String>,
}

impl Load {
    fn merge(&mut self, o: Load) {
        self.latencies_ms.extend(o.latencies_ms);
        self.accepted += o.accepted;
        self.refused += o.refused;
        self.errors += o.errors;
        if self.first_problem.is_none() {
            self.first_problem = o.first_problem;
        }
    }
}

async fn load(base: &str, token: &str, clients: usize, dur: Duration) -> Result<Load> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(clients)
        .build()
        .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))?;
    let url = format!("{base}/v1/messages");
    let started = Instant::now();
    let deadline = started + dur;
    let mut set = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (client, url, token) = (client.clone(), url.clone(), token.to_string());
        set.spawn(async move { one_client(client, &url, &token, c, deadline).await });
    }
    let mut all = Load::default();
    while let Some(r) = set.join_next().await {
        all.merge(r.map_err(|e| Error::internal(format!("a bench client failed: {e}")))?);
    }
    all.seconds = started.elapsed().as_secs_f64();
    Ok(all)
}

/// One client: a message with a new key and a new address after another, until `deadline`.
async fn one_client(
    client: reqwest::Client,
    url: &str,
    token: &str,
    c: usize,
    deadline: Instant,
) -> Load {
    let mut out = Load::default();
    let mut i = 0u64;
    while Instant::now() < deadline {
        let body = serde_json::json!({"to": format!("c{c}-{i}@bench.example"),
            "from": "bench@example.org", "subject": "Bench", "text": "A load test message."});
        let t = Instant::now();
        let res = client
            .post(url)
            .bearer_auth(token)
            .header("Idempotency-Key", format!("bench-{c}-{i}"))
            .json(&body)
            .send()
            .await;
        let problem = match res {
            Ok(r) if r.status() == 200 || r.status() == 202 => {
                let _ = r.bytes().await;
                out.accepted += 1;
                None
            }
            Ok(r) => {
                out.refused += 1;
                Some(format!(
                    "{}: {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ))
            }
            Err(e) => {
                out.errors += 1;
                Some(e.to_string())
            }
        };
        out.latencies_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        if out.first_problem.is_none() {
            out.first_problem = problem;
        }
        i += 1;
    }
    out
}

/// Wait until the fake provider has delivered `accepted` distinct messages (or no new
/// delivery came for `SETTLE`); returns (distinct deliveries, duplicates).
fn settle(log: &Path, accepted: u64) -> Result<(u64, u64)> {
    let mut last = (0, 0);
    let mut progress = Instant::now();
    loop {
        let counts = deliveries(log)?;
        if counts.0 != last.0 {
            progress = Instant::now();
        }
        last = counts;
        if last.0 >= accepted || progress.elapsed() > SETTLE {
            return Ok(last);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// (distinct job ids, deliveries beyond the first per job id) in the fake's log; provider-side
/// replays of an idempotency key are not deliveries.
fn deliveries(log: &Path) -> Result<(u64, u64)> {
    if !log.exists() {
        return Ok((0, 0));
    }
    let mut per_job: HashMap<String, u64> = HashMap::new();
    for l in sendonce_core::provider::deliverylog::read_lines(log)? {
        if !l.replay {
            *per_job.entry(l.job_id).or_default() += 1;
        }
    }
    let dups = per_job.values().map(|n| n - 1).sum();
    Ok((per_job.len() as u64, dups))
}

impl HttpReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let m = &self.machine;
        let mut t = format!(
            "sendonce bench --only http: {} clients for {:.1} s against `serve --worker` and \
             the fake provider, loopback\nmachine: {} CPUs ({}), load {:.2} -> {:.2}\n\n",
            self.clients, self.seconds, m.cpus, m.cpu_model, m.load_start, m.load_end
        );
        let rows = [
            (
                "requests",
                format!("{} ({:.0}/s)", self.requests, self.requests_per_second),
            ),
            ("accepted", self.accepted.to_string()),
            (
                "limit: bare durable insert",
                format!(
                    "{:.0}/s, p50 {:.1} ms, p99 {:.1} ms; accepted/limit {:.2}",
                    self.limit_requests_per_second,
                    self.limit_p50_ms,
                    self.limit_p99_ms,
                    self.requests_per_second / self.limit_requests_per_second.max(1e-9)
                ),
            ),
            (
                "refused / no answer",
                format!("{} / {}", self.refused, self.errors),
            ),
            (
                "latency p50 / p99 / max",
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    self.p50_ms, self.p99_ms, self.max_ms
                ),
            ),
            ("deliveries at the provider", self.deliveries.to_string()),
            ("duplicates", self.duplicates.to_string()),
            (
                "delivered during the load",
                format!(
                    "{} ({:.2} of accepted)",
                    self.delivered_during_load,
                    self.delivered_during_load as f64 / (self.accepted as f64).max(1.0)
                ),
            ),
            (
                "all delivered after",
                format!(
                    "{:.1} s more ({:.0} deliveries/s overall)",
                    self.settle_seconds, self.deliveries_per_second
                ),
            ),
        ];
        let last = [(
            "exactly once",
            if self.exactly_once { "yes" } else { "NO" }.to_string(),
        )];
        for (k, v) in rows.into_iter().chain(self.arm_rows()).chain(last) {
            t.push_str(&format!("{k:<28} {v}\n"));
        }
        if let Some(p) = &self.first_problem {
            t.push_str(&format!("first problem: {p}\n"));
        }
        t
    }

    /// The rows of the open-loop and batch arms.
    fn arm_rows(&self) -> [(&'static str, String); 2] {
        [
            (
                "open loop at half the rate",
                format!(
                    "{:.0}/s for {} requests ({} accepted): accept -> provider p50 {:.1} ms, \
                     p99 {:.1} ms, max {:.1} ms",
                    self.paced.rate,
                    self.paced.requests,
                    self.paced.accepted,
                    self.paced.to_provider_p50_ms,
                    self.paced.to_provider_p99_ms,
                    self.paced.to_provider_max_ms
                ),
            ),
            (
                "batches of 500",
                format!(
                    "{} ({} accepted): median {:.0} ms, max {:.0} ms",
                    self.batches.batches,
                    self.batches.accepted,
                    self.batches.median_ms,
                    self.batches.max_ms
                ),
            ),
        ]
    }
}
