//! The SMTP provider: lettre's SMTP client over tokio and rustls (ring), a small pool of
//! connections, and a transaction driven step by step so that every failure is classified by
//! the phase it happened in.
//!
//! Spec: `smtp://[user@]host[:port]?tls=starttls|tls|none[&timeout=30s&pool=4&hello_name=H
//! &message_id_domain=D&unsubscribe_mailto=ADDR&password_file=PATH
//! &ca_file=PEM&return_path=bounces@DOMAIN]`. A password in the spec is refused (command lines
//! show up in `ps`): it comes from `SENDONCE_SMTP_PASSWORD` or `password_file`, and it is never
//! printed.
//!
//! With `return_path`, each message's envelope sender is a VERP address
//! `bounces+TAG@DOMAIN` whose tag names its job and recipient (`domain::verp`, keyed by
//! `SENDONCE_UNSUBSCRIBE_SECRET`), so the DSN an MTA sends back to it can be piped into
//! `sendonce bounce` and believed.
//!
//! Classification (SMTP has no idempotency key, so `key_window` is `None`):
//! - connect, TLS, greeting, EHLO, STARTTLS, AUTH: any failure → `NotSent` (no transaction).
//! - MAIL FROM / RCPT TO: 4xx → `NotSent`; 5xx → `Permanent` (550/551/553 at RCPT with an
//!   address-class or no enhanced code → also suppressed as a hard bounce); a lost connection
//!   or timeout → `NotSent` (the server cannot deliver a message it never got); on a pooled
//!   connection that turns out stale (lost, or a 421 "closing" reply), one fresh connection
//!   is tried at once.
//! - From the moment the DATA command is written: a lost connection, an unreadable reply or a
//!   timeout → `Ambiguous` (the final dot may have been read and the reply lost); an explicit
//!   4xx reply → `NotSent`, 5xx → `Permanent`, 250 → `Accepted` with the `Message-ID` as the
//!   provider id.
//!
//! lettre's own transport (`AsyncSmtpTransport`) reports network errors without the phase, so
//! this module drives `AsyncSmtpConnection` (MAIL, RCPT, DATA, message) itself and keeps its
//! own idle-connection pool. The call's budget ends a little before the worker's timeout, so
//! the provider, which knows the phase, classifies a slow call rather than the worker.
//!
//! Every server reply and transport message is scrubbed of the password (literal, encoded, and
//! inside base64 such as an echoed AUTH PLAIN / AUTH LOGIN line) before it is cut to length.

use super::email::{build_email, EmailSettings, UnsubscribeSettings};
use super::redact::{self, Secret as Password};
use super::{CallFuture, CallResult, Capabilities, Message, Provider};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt, Rset};
use lettre::transport::smtp::extension::ClientId;
use reqwest::Url;
use sendonce_domain::address::{normalize_for, Channel};
use sendonce_domain::dsn::{address_failure, enhanced_status};
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::headers::{check_domain, parse_address};
use sendonce_domain::links::{self, Keys};
use sendonce_domain::verp;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Environment variable with the SMTP password.
pub const PASSWORD_ENV: &str = "SENDONCE_SMTP_PASSWORD";
/// Default upper bound of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default number of connections (in use or idle) at most.
pub const DEFAULT_POOL: usize = 4;
/// An idle connection older than this is closed instead of reused.
const IDLE_MAX: Duration = Duration::from_secs(60);
/// Characters of a server reply quoted in an error (cut after the password is scrubbed).
const REPLY_CHARS: usize = 300;

/// How the connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain connect, then STARTTLS, required (never falls back to plain text).
    StartTls,
    /// TLS from the first byte (SMTPS, port 465).
    Tls,
    /// No TLS (local relays and tests).
    None,
}

/// Where a transaction was when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// TCP, TLS, greeting, EHLO, STARTTLS, AUTH.
    Connect,
    Mail,
    Rcpt,
    /// The DATA command is being written or its 354 awaited.
    Data,
    /// The content and the final dot are being written or the reply awaited.
    Content,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Connect => "connect",
            Phase::Mail => "MAIL FROM",
            Phase::Rcpt => "RCPT TO",
            Phase::Data => "DATA",
            Phase::Content => "end of data",
        }
    }
    /// From here on the server may have the whole message.
    fn maybe_delivered(self) -> bool {
        self >= Phase::Data
    }
}

/// How one step failed. Straight from `step` the text is raw (unbounded, not yet scrubbed);
/// [`Smtp::scrub`] makes it safe to show.
enum StepError {
    /// The server answered with a negative reply (4xx/5xx); the connection is still usable.
    Reply { code: u16, text: String },
    /// No usable answer: connection lost, unreadable reply, TLS failure, timeout.
    Transport(String),
}

/// An SMTP relay with a small connection pool.
pub struct Smtp {
    caps: Capabilities,
    host: String,
    port: u16,
    tls: TlsMode,
    tls_params: Option<TlsParameters>,
    hello: ClientId,
    credentials: Option<Credentials>,
    /// The password, scrubbed from every reply and error (empty without credentials).
    secrets: Vec<Password>,
    /// The provider's own budget for one call (a little under `caps.call_timeout`).
    budget: Duration,
    email: EmailSettings,
    pool_size: usize,
    slots: Semaphore,
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
    /// `return_path`: the base address and the keys of its VERP tags.
    verp: Option<(String, Keys)>,
}

/// The link keys from `env` (`SENDONCE_UNSUBSCRIBE_SECRET` and its old secrets), for VERP tags.
fn verp_keys(env: &dyn Fn(&str) -> Option<String>) -> Result<Keys> {
    let current = links::Secret::from_env_value(env(links::SECRET_ENV).map(String::into_bytes))
        .map_err(|e| Error::invalid(format!("smtp option return_path: {e}")))?;
    Keys::new(current)
        .with_old_list(env(links::OLD_SECRETS_ENV).as_deref())
        .map_err(Error::invalid)
}

impl Smtp {
    /// Build from a whole `smtp://...` spec, reading secrets from the process environment.
    pub fn from_spec(spec: &str) -> Result<Self> {
        Self::from_spec_with_env(spec, &|k| std::env::var(k).ok())
    }

    /// Build from a spec with `env` standing in for the environment (`SENDONCE_SMTP_PASSWORD`),
    /// so tests never have to change the real one.
    pub fn from_spec_with_env(spec: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let (url, host, user) = parse_spec_url(spec)?;
        let opts = Options::parse(&url)?;
        let port = url.port().unwrap_or(match opts.tls {
            TlsMode::StartTls => 587,
            TlsMode::Tls => 465,
            TlsMode::None => 25,
        });

        let (credentials, password) =
            match credentials(&user, opts.password_file.as_deref(), env(PASSWORD_ENV))? {
                Some((c, p)) => (Some(c), Some(p)),
                None => (None, None),
            };
        if credentials.is_some() && opts.tls == TlsMode::None && !is_loopback(&host) {
            return Err(Error::invalid(
                "refusing to send the SMTP password unencrypted (tls=none) to a host that is \
                 not loopback: use tls=starttls or tls=tls",
            ));
        }
        let unsubscribe = opts
            .unsubscribe_mailto
            .map(|m| UnsubscribeSettings { mailto: Some(m) });
        let tls_params = match opts.tls {
            TlsMode::None => None,
            TlsMode::StartTls | TlsMode::Tls => {
                Some(tls_parameters(&host, opts.ca_file.as_deref())?)
            }
        };
        if opts.tls == TlsMode::None && opts.ca_file.is_some() {
            return Err(Error::invalid(
                "smtp option ca_file needs tls=starttls or tls=tls",
            ));
        }
        let hello = match opts.hello_name {
            Some(h) => ClientId::Domain(h),
            None => default_hello(),
        };
        let timeout = opts.timeout;
        let verp = match opts.return_path {
            Some(base) => Some((base, verp_keys(env)?)),
            None => None,
        };
        Ok(Smtp {
            caps: Capabilities {
                name: format!("smtp://{}:{port}", url.host_str().unwrap_or(&host)),
                key_window: None,
                call_timeout: timeout,
                can_lookup: false,
            },
            host,
            port,
            tls: opts.tls,
            tls_params,
            hello,
            credentials,
            secrets: password.into_iter().collect(),
            // Classify before the worker's own timeout (same length) cuts the call blindly.
            budget: timeout.saturating_sub(timeout / 20),
            email: EmailSettings {
                message_id_domain: opts.message_id_domain,
                unsubscribe,
            },
            pool_size: opts.pool,
            slots: Semaphore::new(opts.pool),
            idle: Mutex::new(Vec::new()),
            verp,
        })
    }

    /// The envelope sender of `msg`: its VERP return path when `return_path` is set.
    fn envelope_from(&self, msg: &Message, built: &mut super::email::BuiltEmail) -> Result<()> {
        let Some((base, keys)) = &self.verp else {
            return Ok(());
        };
        let rcpt = normalize_for(Channel::Email, &msg.to).map_err(|e| e.context("recipient"))?;
        let path = verp::return_path(keys, base, &msg.job_id, &rcpt);
        built.from = path
            .parse()
            .map_err(|e| Error::invalid(format!("the VERP return path is not an address: {e}")))?;
        Ok(())
    }

    /// One call; whatever text the result carries is scrubbed once more as a last guard.
    async fn call(&self, msg: &Message) -> CallResult {
        let result = self.transaction(msg).await;
        redact::redact_result(result, &self.secrets)
    }

    /// A server reply or transport message made safe to show: the password scrubbed, then
    /// single-line and cut to length.
    fn scrub(&self, text: &str) -> String {
        clean(&redact::redact(text, &self.secrets))
    }

    fn scrub_error(&self, e: StepError) -> StepError {
        match e {
            StepError::Reply { code, text } => StepError::Reply {
                code,
                text: self.scrub(&text),
            },
            StepError::Transport(t) => StepError::Transport(self.scrub(&t)),
        }
    }

    async fn transaction(&self, msg: &Message) -> CallResult {
        let deadline = Instant::now() + self.budget;
        let built = build_email(msg, &self.email, SystemTime::now()).and_then(|mut b| {
            self.envelope_from(msg, &mut b).map_err(|e| e.message)?;
            Ok(b)
        });
        let built = match built {
            Ok(b) => b,
            Err(error) => {
                return CallResult::Permanent {
                    error,
                    suppress: None,
                }
            }
        };
        let _permit = match self.slot().await {
            Ok(p) => p,
            Err(busy) => return busy,
        };
        let mut tried_fresh = false;
        loop {
            let (mut conn, reused) = match self.take_idle() {
                Some(c) => (c, true),
                None => {
                    tried_fresh = true;
                    match self.connect(deadline).await {
                        Ok(c) => (c, false),
                        Err(e) => return self.connect_failed(&e),
                    }
                }
            };
            let (phase, res) = transact(&mut conn, &built, deadline).await;
            match res.map_err(|e| self.scrub_error(e)) {
                Ok(reply) => {
                    let reply = self.scrub(&reply);
                    tracing::debug!(message_id = %built.message_id, reply = %reply, "SMTP accepted");
                    self.put_idle(conn);
                    return CallResult::Accepted {
                        provider_id: built.message_id,
                        replay: false,
                    };
                }
                // 421 before DATA on a pooled connection: the server closed it while idle
                // ("421 timeout"). Nothing was sent; try one fresh connection like below.
                Err(StepError::Reply { code: 421, .. })
                    if reused && !tried_fresh && !phase.maybe_delivered() =>
                {
                    drop(conn);
                    self.drain_idle();
                    continue;
                }
                Err(StepError::Reply { code, text }) => {
                    // The connection answered: reset it and keep it for the next message.
                    if phase == Phase::Content || reset(&mut conn, deadline).await {
                        self.put_idle(conn);
                    }
                    return classify_reply(phase, code, &text);
                }
                Err(StepError::Transport(e)) => {
                    drop(conn);
                    // A pooled connection the server closed while idle: nothing was sent,
                    // so one fresh connection is tried right away.
                    if reused && !tried_fresh && !phase.maybe_delivered() {
                        tracing::debug!(error = %e, "stale pooled SMTP connection; reconnecting");
                        self.drain_idle();
                        continue;
                    }
                    return classify_transport(phase, &e);
                }
            }
        }
    }

    /// A free connection slot. Waiting for one must leave time for the transaction itself.
    async fn slot(&self) -> std::result::Result<tokio::sync::SemaphorePermit<'_>, CallResult> {
        let wait = self.budget / 2;
        match tokio::time::timeout(wait, self.slots.acquire()).await {
            Ok(Ok(p)) => Ok(p),
            _ => Err(CallResult::NotSent {
                error: format!(
                    "all {} SMTP connections stayed busy for {wait:?}",
                    self.pool_size
                ),
                retry_after: None,
            }),
        }
    }

    /// No connection could be made: nothing was sent.
    fn connect_failed(&self, e: &StepError) -> CallResult {
        CallResult::NotSent {
            error: format!(
                "SMTP connection to {}:{} failed before any transaction: {}",
                self.host,
                self.port,
                e.describe()
            ),
            retry_after: None,
        }
    }

    /// TCP, TLS, greeting, EHLO, STARTTLS, AUTH; a failure's text scrubbed.
    async fn connect(
        &self,
        deadline: Instant,
    ) -> std::result::Result<AsyncSmtpConnection, StepError> {
        self.open(deadline).await.map_err(|e| self.scrub_error(e))
    }

    async fn open(&self, deadline: Instant) -> std::result::Result<AsyncSmtpConnection, StepError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let implicit = match self.tls {
            TlsMode::Tls => self.tls_params.clone(),
            _ => None,
        };
        let mut conn = step(
            deadline,
            AsyncSmtpConnection::connect_tokio1(
                (self.host.as_str(), self.port),
                Some(left),
                &self.hello,
                implicit,
                None,
            ),
        )
        .await?;
        if self.tls == TlsMode::StartTls {
            let params = self
                .tls_params
                .clone()
                .ok_or_else(|| StepError::Transport("no TLS parameters".into()))?;
            step(deadline, conn.starttls(params, &self.hello)).await?;
        }
        if let Some(creds) = &self.credentials {
            step(
                deadline,
                conn.auth(&[Mechanism::Plain, Mechanism::Login], creds),
            )
            .await?;
        }
        Ok(conn)
    }

    fn take_idle(&self) -> Option<AsyncSmtpConnection> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < IDLE_MAX && !conn.has_broken() {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: AsyncSmtpConnection) {
        if conn.has_broken() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.pool_size {
            idle.push((conn, Instant::now()));
        }
    }

    /// After one stale connection the others idled as long: close them all.
    fn drain_idle(&self) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Provider for Smtp {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn email_settings(&self) -> Option<&EmailSettings> {
        Some(&self.email)
    }
    fn needs_sender(&self) -> bool {
        true
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(self.call(msg))
    }
}

/// One MAIL / RCPT / DATA / content transaction. Returns the phase it ended in.
async fn transact(
    conn: &mut AsyncSmtpConnection,
    built: &super::email::BuiltEmail,
    deadline: Instant,
) -> (Phase, std::result::Result<String, StepError>) {
    if let Err(e) = step(
        deadline,
        conn.command(Mail::new(Some(built.from.clone()), vec![])),
    )
    .await
    {
        return (Phase::Mail, Err(e));
    }
    if let Err(e) = step(deadline, conn.command(Rcpt::new(built.to.clone(), vec![]))).await {
        return (Phase::Rcpt, Err(e));
    }
    // From here on a lost connection may mean the message was delivered.
    if let Err(e) = step(deadline, conn.command(Data)).await {
        return (Phase::Data, Err(e));
    }
    match step(deadline, conn.message(&built.bytes)).await {
        Ok(r) => (
            Phase::Content,
            Ok(r.message().collect::<Vec<_>>().join(" ")),
        ),
        Err(e) => (Phase::Content, Err(e)),
    }
}

/// RSET after a negative reply; true when the connection can be reused.
async fn reset(conn: &mut AsyncSmtpConnection, deadline: Instant) -> bool {
    let cap = Instant::now() + Duration::from_secs(2);
    step(deadline.min(cap), conn.command(Rset)).await.is_ok()
}

/// Run one lettre step against the deadline and sort its error. The error text is raw: scrub
/// it before showing it.
async fn step<T>(
    deadline: Instant,
    fut: impl Future<Output = std::result::Result<T, lettre::transport::smtp::Error>>,
) -> std::result::Result<T, StepError> {
    match tokio::time::timeout_at(deadline, fut).await {
        Err(_) => Err(StepError::Transport("timed out".into())),
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(match e.status() {
            Some(code) => StepError::Reply {
                code: u16::from(code),
                text: e.source_text().unwrap_or_default(),
            },
            // Network errors, and lettre's "incomplete response" when the server hangs up.
            None => StepError::Transport(e.to_string()),
        }),
    }
}

trait SourceText {
    fn source_text(&self) -> Option<String>;
}

impl SourceText for lettre::transport::smtp::Error {
    /// The server's reply text (lettre keeps it as the error's source), whole.
    fn source_text(&self) -> Option<String> {
        std::error::Error::source(self).map(|s| s.to_string())
    }
}

impl StepError {
    fn describe(&self) -> String {
        match self {
            StepError::Reply { code, text } => format!("server replied {code} {text}"),
            StepError::Transport(e) => e.clone(),
        }
    }
}

/// What a negative SMTP reply in `phase` means for the message.
pub fn classify_reply(phase: Phase, code: u16, text: &str) -> CallResult {
    let what = format!("SMTP {code} at {}: {text}", phase.as_str());
    match code {
        500..=599 => {
            let suppress =
                is_hard_bounce(phase, code, text).then(|| format!("hard bounce: {code} {text}"));
            CallResult::Permanent {
                error: what,
                suppress,
            }
        }
        // 4xx: the server said "not now" and kept nothing.
        400..=499 => CallResult::NotSent {
            error: what,
            retry_after: None,
        },
        // A reply that is neither (lettre only reports 4xx/5xx here): be conservative.
        _ if phase.maybe_delivered() => CallResult::Ambiguous { error: what },
        _ => CallResult::NotSent {
            error: what,
            retry_after: None,
        },
    }
}

/// A lost connection, unreadable reply or timeout in `phase`.
pub fn classify_transport(phase: Phase, error: &str) -> CallResult {
    let error = format!("SMTP connection failed at {}: {error}", phase.as_str());
    if phase.maybe_delivered() {
        CallResult::Ambiguous { error }
    } else {
        CallResult::NotSent {
            error,
            retry_after: None,
        }
    }
}

/// A "no such user"-style rejection of the recipient: 550/551/553 at RCPT, unless the enhanced
/// status code says it is about something else (5.7.x policy, 5.1.7/5.1.8 the sender...).
/// After the final dot only an explicit bad-mailbox enhanced code counts.
fn is_hard_bounce(phase: Phase, code: u16, text: &str) -> bool {
    let enhanced = enhanced_status(text);
    match phase {
        Phase::Rcpt => matches!(code, 550 | 551 | 553) && enhanced.is_none_or(address_failure),
        Phase::Content => code >= 550 && enhanced.is_some_and(address_failure),
        _ => false,
    }
}

/// Single line, printable, bounded.
fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(REPLY_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().count() > REPLY_CHARS {
        out.push('…');
    }
    out.trim().to_string()
}

/// The URL of an `smtp://` spec, its host (without IPv6 brackets) and its user (decoded, maybe
/// empty). A password is refused before the URL is even parsed.
fn parse_spec_url(spec: &str) -> Result<(Url, String, String)> {
    let rest = spec
        .strip_prefix("smtp://")
        .ok_or_else(|| Error::invalid("an SMTP provider spec starts with smtp://"))?;
    // Before parsing (the URL parser's errors are fine, but be sure): no password, ever.
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
    {
        return Err(Error::invalid(format!(
            "the smtp:// spec must not contain a password (command lines are visible in \
             `ps`): write smtp://USER@HOST:PORT and put the password in the environment \
             variable {PASSWORD_ENV} or in a file named by password_file=PATH"
        )));
    }
    let url = Url::parse(spec).map_err(|e| Error::invalid(format!("invalid smtp URL: {e}")))?;
    if url.password().is_some() {
        return Err(Error::invalid(format!(
            "the smtp:// spec must not contain a password: use {PASSWORD_ENV}"
        )));
    }
    if !matches!(url.path(), "" | "/") || url.fragment().is_some() {
        return Err(Error::invalid(
            "an smtp:// spec has no path or fragment: smtp://[user@]host:port?tls=...",
        ));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| Error::invalid("the smtp:// spec needs a host"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let user = percent_encoding::percent_decode_str(url.username())
        .decode_utf8()
        .map_err(|_| Error::invalid("the SMTP user name is not valid UTF-8"))?
        .into_owned();
    Ok((url, host, user))
}

/// The query options of an `smtp://` spec, defaults filled in.
struct Options {
    tls: TlsMode,
    timeout: Duration,
    pool: usize,
    hello_name: Option<String>,
    message_id_domain: Option<String>,
    unsubscribe_mailto: Option<lettre::Address>,
    password_file: Option<String>,
    ca_file: Option<String>,
    return_path: Option<String>,
}

/// Checks one option's value and stores it.
type SetOption = fn(&mut Options, &str) -> Result<()>;

/// Every option an `smtp://` spec may have, in the order the "unknown option" error names them,
/// each with its parser (the refusals are in these small functions, one per option).
const OPTIONS: &[(&str, SetOption)] = &[
    ("tls", Options::set_tls),
    ("timeout", Options::set_timeout),
    ("pool", Options::set_pool),
    ("hello_name", Options::set_hello_name),
    ("message_id_domain", Options::set_message_id_domain),
    ("unsubscribe_url", Options::set_unsubscribe_url),
    ("unsubscribe_mailto", Options::set_unsubscribe_mailto),
    ("password_file", |o, v| {
        o.password_file = Some(v.to_string());
        Ok(())
    }),
    ("ca_file", |o, v| {
        o.ca_file = Some(v.to_string());
        Ok(())
    }),
    ("return_path", |o, v| {
        verp::check_return_path(v).map_err(|e| Error::invalid(format!("smtp option {e}")))?;
        o.return_path = Some(v.to_ascii_lowercase());
        Ok(())
    }),
];

impl Options {
    /// The spec's query, option by option in the order written; the first refusal ends it.
    fn parse(url: &Url) -> Result<Options> {
        let mut opts = Options {
            tls: TlsMode::StartTls,
            timeout: DEFAULT_TIMEOUT,
            pool: DEFAULT_POOL,
            hello_name: None,
            message_id_domain: None,
            unsubscribe_mailto: None,
            password_file: None,
            ca_file: None,
            return_path: None,
        };
        for (k, v) in url.query_pairs() {
            let Some((_, set)) = OPTIONS.iter().find(|(name, _)| *name == k) else {
                let known: Vec<&str> = OPTIONS.iter().map(|(name, _)| *name).collect();
                return Err(Error::invalid(format!(
                    "unknown smtp option {k:?} (known: {})",
                    known.join(", ")
                )));
            };
            set(&mut opts, &v)?;
        }
        Ok(opts)
    }

    fn set_tls(&mut self, v: &str) -> Result<()> {
        self.tls = match v {
            "starttls" => TlsMode::StartTls,
            "tls" => TlsMode::Tls,
            "none" => TlsMode::None,
            _ => {
                return Err(Error::invalid(
                    "smtp option tls must be starttls, tls or none",
                ))
            }
        };
        Ok(())
    }

    fn set_timeout(&mut self, v: &str) -> Result<()> {
        self.timeout = sendonce_domain::clock::parse_duration(v)
            .map_err(|e| e.context("smtp option timeout"))?;
        if self.timeout < Duration::from_secs(1) {
            return Err(Error::invalid("smtp option timeout must be at least 1s"));
        }
        Ok(())
    }

    fn set_pool(&mut self, v: &str) -> Result<()> {
        self.pool = v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| Error::invalid("smtp option pool must be 1 to 100"))?;
        Ok(())
    }

    fn set_hello_name(&mut self, v: &str) -> Result<()> {
        check_domain("smtp option hello_name", v).map_err(Error::invalid)?;
        self.hello_name = Some(v.to_string());
        Ok(())
    }

    fn set_message_id_domain(&mut self, v: &str) -> Result<()> {
        check_domain("smtp option message_id_domain", v).map_err(Error::invalid)?;
        self.message_id_domain = Some(v.to_ascii_lowercase());
        Ok(())
    }

    fn set_unsubscribe_url(&mut self, _v: &str) -> Result<()> {
        Err(Error::invalid(
            "smtp option unsubscribe_url is gone: every List-Unsubscribe link now points at \
             `sendonce serve` (/u/TOKEN). Set public_url in the config file, --public-url or \
             SENDONCE_PUBLIC_URL, and SENDONCE_UNSUBSCRIBE_SECRET",
        ))
    }

    fn set_unsubscribe_mailto(&mut self, v: &str) -> Result<()> {
        let a = parse_address("unsubscribe_mailto", v)
            .map_err(|e| Error::invalid(format!("smtp option {e}")))?;
        self.unsubscribe_mailto = Some(a);
        Ok(())
    }
}

/// User and password (and the password again, to scrub from replies), or none. The password
/// never appears in an error.
fn credentials(
    user: &str,
    password_file: Option<&str>,
    from_env: Option<String>,
) -> Result<Option<(Credentials, Password)>> {
    if user.is_empty() {
        if password_file.is_some() {
            return Err(Error::invalid(
                "smtp option password_file needs a user: smtp://USER@HOST:PORT",
            ));
        }
        return Ok(None);
    }
    let password = match password_file {
        Some(path) => {
            let raw = std::fs::read_to_string(path).map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("could not read the SMTP password_file {path:?}: {e}"),
                )
            })?;
            raw.trim_end_matches(['\r', '\n']).to_string()
        }
        None => match from_env {
            Some(p) => p,
            None => {
                return Err(Error::invalid(format!(
                    "the SMTP user is set but no password: put it in the environment \
                     variable {PASSWORD_ENV} or in a file named by password_file=PATH"
                )))
            }
        },
    };
    if password.is_empty() {
        return Err(Error::invalid("the SMTP password is empty"));
    }
    let secret = Password::new(password.clone());
    Ok(Some((Credentials::new(user.to_string(), password), secret)))
}

fn tls_parameters(host: &str, ca_file: Option<&str>) -> Result<TlsParameters> {
    // lettre builds its rustls config with the process-wide provider when there is one:
    // make it ring (aws-lc-rs is not built at all).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = TlsParameters::builder(host.to_string());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("could not read smtp option ca_file {path:?}: {e}"),
            )
        })?;
        let cert = Certificate::from_pem(&pem)
            .map_err(|e| Error::invalid(format!("smtp option ca_file: {e}")))?;
        b = b.add_root_certificate(cert);
    }
    b.build_rustls()
        .map_err(|e| Error::new(ErrorKind::Provider, format!("SMTP TLS setup failed: {e}")))
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The EHLO name: this machine's host name when it looks like one, else `[127.0.0.1]`.
fn default_hello() -> ClientId {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|h| check_domain("hostname", h).is_ok())
        .map(ClientId::Domain)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_the_spec_are_refused() {
        for spec in [
            "smtp://user:hunter2@mail.example.org:587",
            "smtp://user:hunter2@mail.example.org:587?tls=tls",
            "smtp://a%40b.c:hunter2@mail.example.org",
            "smtp://:hunter2@mail.example.org",
        ] {
            let e = Smtp::from_spec(spec).err().unwrap();
            assert!(!e.message.contains("hunter2"), "{}", e.message);
            assert!(e.message.contains(PASSWORD_ENV), "{}", e.message);
        }
    }

    #[test]
    fn options_are_parsed_and_checked() {
        let s = Smtp::from_spec("smtp://127.0.0.1:2525?tls=none&timeout=5s&pool=2").unwrap();
        assert_eq!(s.port, 2525);
        assert_eq!(s.tls, TlsMode::None);
        assert_eq!(s.caps.call_timeout, Duration::from_secs(5));
        assert!(s.budget < s.caps.call_timeout);
        assert_eq!(s.caps.key_window, None);
        assert_eq!(s.pool_size, 2);
        assert_eq!(s.caps.name, "smtp://127.0.0.1:2525");
        let s = Smtp::from_spec("smtp://mail.example.org").unwrap();
        assert_eq!((s.port, s.tls), (587, TlsMode::StartTls));
        let s = Smtp::from_spec("smtp://mail.example.org?tls=tls").unwrap();
        assert_eq!(s.port, 465);
        let s = Smtp::from_spec("smtp://[::1]:25?tls=none").unwrap();
        assert_eq!(s.host, "::1");
        for (spec, needle) in [
            ("smtp://h?tls=maybe", "tls"),
            ("smtp://h?retries=3", "retries"),
            ("smtp://h?pool=0", "pool"),
            ("smtp://h?timeout=soon", "timeout"),
            ("smtp://h/path", "path"),
            ("smtp://?tls=none", "host"),
            ("smtp://h?unsubscribe_url=https://x.org/u", "public_url"),
            (
                "smtp://h?message_id_domain=bad%0d%0adomain",
                "message_id_domain",
            ),
            ("smtp://h?hello_name=a%20b", "hello_name"),
            (
                "smtp://h?unsubscribe_mailto=a%0d%0a@x.org",
                "unsubscribe_mailto",
            ),
            ("smtp://h?password_file=/nonexistent", "user"),
        ] {
            let e = Smtp::from_spec(spec)
                .err()
                .unwrap_or_else(|| panic!("{spec} accepted"));
            assert!(e.message.contains(needle), "{spec}: {}", e.message);
        }
    }

    #[test]
    fn unknown_options_list_the_known_ones() {
        let e = Smtp::from_spec("smtp://h?tls=none&retries=3")
            .err()
            .unwrap();
        assert_eq!(
            e.message,
            "unknown smtp option \"retries\" (known: tls, timeout, pool, hello_name, \
             message_id_domain, unsubscribe_url, unsubscribe_mailto, password_file, ca_file, \
             return_path)"
        );
        let e = Smtp::from_spec("smtp://h?timeout=soon").err().unwrap();
        assert!(
            e.message.starts_with("smtp option timeout: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_return_path_needs_the_link_secret_and_tags_each_message() {
        let spec = "smtp://127.0.0.1:2525?tls=none&return_path=Bounces@Bounce.Example.com";
        let e = Smtp::from_spec_with_env(spec, &|_| None).err().unwrap();
        assert!(e.message.contains(links::SECRET_ENV), "{}", e.message);
        let e = Smtp::from_spec_with_env(&spec.replace("Bounces@", "b+x@"), &|_| None)
            .err()
            .unwrap();
        assert!(
            e.message.starts_with("smtp option the return path"),
            "{}",
            e.message
        );
        let env = |k: &str| (k == links::SECRET_ENV).then(|| "s".repeat(32));
        let s = Smtp::from_spec_with_env(spec, &env).unwrap();
        let msg = Message {
            job_id: "campaign:1:sub:2@0011223344556677".into(),
            idempotency_key: "k".into(),
            channel: Channel::Email,
            from: Some("news@example.com".into()),
            reply_to: None,
            to: "Ann@Example.org".into(),
            subject: Some("s".into()),
            body: "b".into(),
            html: None,
            status_callback: None,
            unsubscribe: None,
            attachments: vec![],
        };
        let mut built = build_email(&msg, &s.email, SystemTime::now()).unwrap();
        s.envelope_from(&msg, &mut built).unwrap();
        let from = built.from.to_string();
        let tag = verp::tag_in(&from).unwrap();
        assert!(from.starts_with("bounces+") && from.ends_with("@bounce.example.com"));
        let keys = verp_keys(&env).unwrap();
        assert!(verp::matches(
            &keys,
            &tag,
            &msg.job_id,
            "ann@example.org",
            0
        ));
    }

    #[test]
    fn password_comes_from_a_file_and_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret-pw\n").unwrap();
        let spec = format!(
            "smtp://mailer@127.0.0.1:2525?tls=none&password_file={}",
            f.display()
        );
        let s = Smtp::from_spec(&spec).unwrap();
        assert!(s.credentials.is_some());
        assert!(!s.caps.name.contains("mailer"));
        // Not over plain text to a remote host.
        let spec = format!(
            "smtp://mailer@mail.example.org:25?tls=none&password_file={}",
            f.display()
        );
        let e = Smtp::from_spec(&spec).err().unwrap();
        assert!(e.message.contains("unencrypted"), "{}", e.message);
        assert!(!e.message.contains("s3cret"));
    }

    #[test]
    fn replies_are_classified_by_phase() {
        let hard = classify_reply(Phase::Rcpt, 550, "5.1.1 <x@y.z>: user unknown");
        assert!(
            matches!(&hard, CallResult::Permanent { suppress: Some(s), .. } if s.starts_with("hard bounce: 550")),
            "{hard:?}"
        );
        assert!(matches!(
            classify_reply(Phase::Rcpt, 553, "no such user"),
            CallResult::Permanent {
                suppress: Some(_),
                ..
            }
        ));
        // Relay denied is not the recipient's fault.
        assert!(matches!(
            classify_reply(Phase::Rcpt, 550, "5.7.1 relaying denied"),
            CallResult::Permanent { suppress: None, .. }
        ));
        assert!(matches!(
            classify_reply(Phase::Rcpt, 552, "mailbox full"),
            CallResult::Permanent { suppress: None, .. }
        ));
        assert!(matches!(
            classify_reply(Phase::Mail, 550, "sender rejected"),
            CallResult::Permanent { suppress: None, .. }
        ));
        assert!(matches!(
            classify_reply(Phase::Content, 554, "5.1.1 bad mailbox"),
            CallResult::Permanent {
                suppress: Some(_),
                ..
            }
        ));
        assert!(matches!(
            classify_reply(Phase::Content, 554, "5.7.1 spam"),
            CallResult::Permanent { suppress: None, .. }
        ));
        for p in [Phase::Mail, Phase::Rcpt, Phase::Data, Phase::Content] {
            assert!(matches!(
                classify_reply(p, 451, "try later"),
                CallResult::NotSent { .. }
            ));
        }
    }

    #[test]
    fn transport_failures_are_classified_by_phase() {
        for p in [Phase::Connect, Phase::Mail, Phase::Rcpt] {
            assert!(matches!(
                classify_transport(p, "x"),
                CallResult::NotSent { .. }
            ));
        }
        for p in [Phase::Data, Phase::Content] {
            assert!(matches!(
                classify_transport(p, "x"),
                CallResult::Ambiguous { .. }
            ));
        }
    }

    #[test]
    fn enhanced_codes() {
        assert_eq!(enhanced_status("5.1.1 no"), Some((5, 1, 1)));
        assert_eq!(enhanced_status("5.1.10 null mx"), Some((5, 1, 10)));
        assert_eq!(enhanced_status("no such user"), None);
        assert_eq!(enhanced_status("1.2.3.4 x"), None);
    }
}
