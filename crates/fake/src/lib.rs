//! `sendonce fake-provider`: an offline HTTP provider that behaves like a real one (durable
//! acceptance, idempotency keys with replays and 409s, latency, 503s, lost replies), logging
//! every accepted request to a JSONL delivery log that tests and the crash checker read.
//!
//! - `journal`: the single writer thread (delivery log + key table, one fsync per group).
//! - `server`: the HTTP side (hyper), routes and fault injection.
//! - `apis`: Twilio-, Resend- and Postmark-compatible endpoints on the same journal.
//! - `clouds`: Amazon SES v2-, SendGrid-, Mailgun- and Brevo-compatible endpoints, likewise.
//! - `tenants`: per-tenant inboxes (what a message is filed in, the `/t/{tenant}/` views).
//! - `chaos`: `--chaos` rules (rate limits, slow answers, failure bursts, hangs after accept).
//! - `callbacks`: signed delivery callbacks to the sender (`--callbacks URL`).
//! - `index`: the inbox index the writer keeps in memory (per recipient, job and id, newest
//!   first; each line's place in the log), so no request re-reads the log.
//! - `inbox`: the delivery log read as messages (filters, parsed email, links).
//! - `assertions`: the tests' API over the inbox (`/messages`, `/messages/wait`, ...).
//! - `web`: the web inbox for people at `/` (list, search, message view, clear).
//! - `guard`: timeouts, the connection cap, bounded bodies and the JSON request log.
//! - `smtp`: the SMTP listener (`--smtp`), storing each message in the same journal.

mod apis;
mod args;
mod assertions;
pub mod callbacks;
mod chaos;
mod cloud_callbacks;
mod clouds;
mod guard;
mod inbox;
mod index;
mod journal;
mod mailpit;
mod server;
pub mod smtp;
mod tenants;
mod web;

pub use args::Args;
pub use guard::Limits;
pub use server::{run, Server};

use sendonce_domain::error::{Error, Result};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// How the fake provider behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// The delivery log (JSONL). The key table lives next to it in `<log>.keys`.
    pub log: PathBuf,
    /// Remember idempotency keys (replay with the first id, 409 on a different payload).
    /// Off: every request is a new delivery, like SMTP.
    pub idempotent: bool,
    /// Uniform random delay before each send request is processed.
    pub latency: Option<(Duration, Duration)>,
    /// Share of send requests answered 503 without recording them.
    pub fail_rate: f64,
    /// Share of send requests recorded (fsynced) and then answered by closing the connection.
    pub drop_after_accept_rate: f64,
    /// Seed for the fault injection (random when absent).
    pub seed: Option<u64>,
    /// E.164 numbers the Twilio endpoint refuses with error 21610 (replied STOP).
    pub twilio_opted_out: Vec<String>,
    /// Append one JSON line (`{"at": unix ms, "method", "path", "key", "api"?}`) for every
    /// request to this file as it arrives, before latency and faults (not fsynced): tells calls
    /// that reached the provider from calls that never left the sender.
    pub request_log: Option<PathBuf>,
    /// Timeouts and the connection cap against slow or greedy clients.
    pub limits: Limits,
    /// Host names answered besides loopback ones and the address reached (`--allow-host`),
    /// lower-case.
    pub allowed_hosts: Vec<String>,
    /// Send a signed delivery callback for every accepted message (`--callbacks`).
    pub callbacks: Option<callbacks::Callbacks>,
    /// The SMTP listener (`--smtp`): size limit, chaos, AUTH, STARTTLS identity.
    pub smtp: smtp::Settings,
    /// `--chaos` rules, as written (checked when the server opens).
    pub chaos: Vec<String>,
    /// The AWS key whose SigV4 signatures the SES endpoint checks (access key id, secret),
    /// from `SENDONCE_FAKE_AWS_KEY=ID:SECRET`; None: any signature is accepted.
    pub aws_key: Option<(String, String)>,
}

impl Config {
    pub fn new(log: impl Into<PathBuf>) -> Self {
        Config {
            log: log.into(),
            idempotent: true,
            latency: None,
            fail_rate: 0.0,
            drop_after_accept_rate: 0.0,
            seed: None,
            twilio_opted_out: Vec::new(),
            request_log: None,
            callbacks: None,
            limits: Limits::default(),
            allowed_hosts: Vec::new(),
            smtp: smtp::Settings::default(),
            aws_key: None,
            chaos: Vec::new(),
        }
    }

    /// From the command line, validated.
    pub fn from_args(a: &Args) -> Result<Self> {
        Ok(Config {
            log: a.log.clone(),
            idempotent: !a.no_idempotent,
            latency: a.latency.as_deref().map(parse_latency).transpose()?,
            fail_rate: rate("--fail-rate", a.fail_rate)?,
            drop_after_accept_rate: rate("--drop-after-accept-rate", a.drop_after_accept_rate)?,
            seed: a.seed,
            twilio_opted_out: a
                .twilio_opted_out
                .iter()
                .map(|n| {
                    sendonce_domain::address::normalize_phone(n)
                        .map_err(|e| e.context("--twilio-opted-out"))
                })
                .collect::<Result<_>>()?,
            request_log: a.request_log.clone(),
            limits: limits(a)?,
            allowed_hosts: a
                .allow_host
                .iter()
                .map(|h| guard::allowed_host(h))
                .collect::<Result<_>>()?,
            callbacks: a
                .callbacks
                .as_deref()
                .map(|url| callbacks::Callbacks::from_env(url, &a.callback_account))
                .transpose()?,
            smtp: smtp::Settings::from_args(a)?,
            aws_key: aws_key_from_env()?,
            chaos: a.chaos.clone(),
        })
    }
}

/// The environment variable with the AWS key the SES endpoint checks signatures with.
pub const AWS_KEY_ENV: &str = "SENDONCE_FAKE_AWS_KEY";

/// `SENDONCE_FAKE_AWS_KEY=ACCESS_KEY_ID:SECRET`, when set (never a flag: it would show in `ps`).
fn aws_key_from_env() -> Result<Option<(String, String)>> {
    let Ok(v) = std::env::var(AWS_KEY_ENV) else {
        return Ok(None);
    };
    match v.split_once(':') {
        Some((id, secret)) if !id.trim().is_empty() && !secret.is_empty() => {
            Ok(Some((id.trim().to_string(), secret.to_string())))
        }
        _ => Err(Error::invalid(format!(
            "{AWS_KEY_ENV} must be ACCESS_KEY_ID:SECRET"
        ))),
    }
}

/// `--max-connections` and the hidden `--header-timeout`, `--body-timeout`, `--idle-timeout`.
fn limits(a: &Args) -> Result<Limits> {
    if a.max_connections == 0 {
        return Err(Error::invalid("--max-connections must be at least 1"));
    }
    let d = Limits::default();
    let time = |flag: &str, v: &Option<String>, default: Duration| match v {
        Some(s) => sendonce_domain::clock::parse_duration(s)
            .map_err(|e| e.context(flag))
            .and_then(|t| {
                if t.is_zero() {
                    Err(Error::invalid(format!("{flag} must be above zero")))
                } else {
                    Ok(t)
                }
            }),
        None => Ok(default),
    };
    Ok(Limits {
        max_connections: a.max_connections,
        header_timeout: time("--header-timeout", &a.header_timeout, d.header_timeout)?,
        body_timeout: time("--body-timeout", &a.body_timeout, d.body_timeout)?,
        idle_timeout: time("--idle-timeout", &a.idle_timeout, d.idle_timeout)?,
    })
}

fn rate(flag: &str, p: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(Error::invalid(format!(
            "{flag} must be between 0 and 1, got {p}"
        )))
    }
}

/// `5ms..50ms` (uniform in the range) or `20ms` (fixed).
pub fn parse_latency(s: &str) -> Result<(Duration, Duration)> {
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (
            sendonce_domain::clock::parse_duration(a)?,
            sendonce_domain::clock::parse_duration(b)?,
        ),
        None => {
            let d = sendonce_domain::clock::parse_duration(s)?;
            (d, d)
        }
    };
    if lo > hi {
        return Err(Error::invalid(format!(
            "--latency {s:?}: the minimum is above the maximum"
        )));
    }
    Ok((lo, hi))
}

/// A small seedable PRNG (splitmix64): deterministic fault injection without a crate.
pub(crate) struct Rng(Mutex<u64>);

impl Rng {
    pub(crate) fn new(seed: Option<u64>) -> Self {
        let seed = seed.unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0);
        Rng(Mutex::new(seed))
    }

    fn next_u64(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `n` uniform floats in [0, 1), drawn together so each request takes the same share of
    /// the sequence whatever it ends up using.
    pub(crate) fn unit<const N: usize>(&self) -> [f64; N] {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        std::array::from_fn(|_| (Self::next_u64(&mut state) >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// `sendonce fake-provider`: bind, print `listening on ADDR`, serve until SIGTERM or Ctrl-C.
pub fn run_cli(a: &Args, rt: &tokio::runtime::Runtime) -> Result<()> {
    let mut config = Config::from_args(a)?;
    if let Some(at) = a.smtp {
        // Before the address lines: a client that read them finds the certificate file.
        config.smtp.tls = Some(smtp::Tls::generate(&config.log, &[at.ip()])?);
    }
    rt.block_on(async {
        // Signal handlers first: a test may send SIGTERM as soon as it reads the address.
        let stop = sendonce_domain::shutdown::stop_signal()?;
        let server = Server::open(config)?;
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .map_err(|e| Error::io(&format!("cannot listen on {}", a.listen), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the bound address", e))?;
        let smtp = match a.smtp {
            Some(at) => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .map_err(|e| Error::io(&format!("cannot listen for SMTP on {at}"), e))?,
            ),
            None => None,
        };
        let smtp_addr = smtp
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()
            .map_err(|e| Error::io("cannot read the bound SMTP address", e))?;
        announce(addr, smtp_addr)?;
        if let Some(path) = &a.ready_file {
            write_ready_file(path, addr, smtp_addr)?;
        }
        server.serve(listener, smtp, stop).await
    })
}

/// Print `listening on ADDR` (and `smtp listening on ADDR`) in one write, so a reader that
/// takes the lines and closes the pipe gets both. A closed stdout is not fatal: the reader left
/// (or uses `--ready-file`), and the listeners keep serving.
fn announce(http: std::net::SocketAddr, smtp: Option<std::net::SocketAddr>) -> Result<()> {
    let mut text = format!("listening on {http}\n");
    if let Some(s) = smtp {
        text.push_str(&format!("smtp listening on {s}\n"));
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            tracing::warn!("fake provider: stdout is closed; serving on");
            Ok(())
        }
        Err(e) => Err(Error::io("writing to stdout", e)),
    }
}

/// `--ready-file`: `{"http": ADDR, "smtp": ADDR|null}`, written to a temporary name and renamed.
fn write_ready_file(
    path: &std::path::Path,
    http: std::net::SocketAddr,
    smtp: Option<std::net::SocketAddr>,
) -> Result<()> {
    let text = serde_json::json!({
        "http": http.to_string(),
        "smtp": smtp.map(|s| s.to_string()),
    })
    .to_string();
    sendonce_domain::files::write_atomic(path, format!("{text}\n").as_bytes())
        .map_err(|e| e.context(&format!("--ready-file {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_ranges() {
        assert_eq!(
            parse_latency("5ms..50ms").unwrap(),
            (Duration::from_millis(5), Duration::from_millis(50))
        );
        assert_eq!(
            parse_latency("7ms").unwrap(),
            (Duration::from_millis(7), Duration::from_millis(7))
        );
        assert!(parse_latency("50ms..5ms").is_err());
        assert!(parse_latency("fast").is_err());
    }

    #[test]
    fn seeded_rng_is_deterministic_and_in_range() {
        let a = Rng::new(Some(42));
        let b = Rng::new(Some(42));
        for _ in 0..1000 {
            let x: [f64; 3] = a.unit();
            assert_eq!(x, b.unit::<3>());
            assert!(x.iter().all(|v| (0.0..1.0).contains(v)));
        }
    }
}
