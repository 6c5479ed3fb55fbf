//! The fake provider's SMTP listener (`--smtp`): an RFC 5321 server that accepts mail from any
//! client (STARTTLS with a generated certificate, AUTH PLAIN/LOGIN, pipelining, 8BITMIME,
//! SMTPUTF8) and stores each message's exact bytes in the journal (fsynced) before its 250.
//!
//! - `session`: one connection's dialogue (commands, DATA, STARTTLS, AUTH, limits, chaos).
//! - `tls`: the certificate made at start (or loaded) and the rustls acceptor.
//!
//! This file: the settings (`--smtp-max-size`, `--smtp-chaos`, `SENDONCE_FAKE_SMTP_AUTH`), the
//! accept loop, the cap on concurrent sessions and the graceful stop.

mod session;
mod tls;

pub use tls::Tls;

use super::server::Shared;
use super::Args;
use sendonce_domain::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// At most this many SMTP sessions at once; the rest get 421 and are closed.
const MAX_SESSIONS: usize = 100;
/// The environment variable holding `user:password` for AUTH (never a flag: argv is public).
pub const AUTH_ENV: &str = "SENDONCE_FAKE_SMTP_AUTH";

/// How the SMTP listener behaves (part of [`super::Config`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Largest message accepted (bytes), advertised in `SIZE`.
    pub max_size: u64,
    /// Injected failures (`--smtp-chaos`).
    pub chaos: Vec<Chaos>,
    /// Only these credentials are accepted, and MAIL needs AUTH first. `None`: any AUTH passes
    /// and none is needed.
    pub auth: Option<Credentials>,
    /// How long a read may wait for the client before 421 and close.
    pub idle_timeout: Duration,
    /// The STARTTLS identity; made when the listener starts when absent.
    pub tls: Option<Tls>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_size: 25 << 20,
            chaos: Vec::new(),
            auth: None,
            idle_timeout: Duration::from_secs(30),
            tls: None,
        }
    }
}

impl Settings {
    /// From `--smtp-max-size`, `--smtp-chaos`, `--smtp-idle-timeout` and
    /// `SENDONCE_FAKE_SMTP_AUTH`, validated. The TLS identity is made by `run_cli`.
    pub fn from_args(a: &Args) -> Result<Self> {
        let mut chaos: Vec<Chaos> = Vec::new();
        for s in &a.smtp_chaos {
            let c = Chaos::parse(s)?;
            if chaos.iter().any(|o| o.phase == c.phase) {
                return Err(Error::invalid(format!(
                    "--smtp-chaos: phase {} given twice",
                    c.phase.name()
                )));
            }
            chaos.push(c);
        }
        let max_size = parse_size(&a.smtp_max_size)?;
        let idle_timeout = sendonce_domain::clock::parse_duration(&a.smtp_idle_timeout)
            .map_err(|e| e.context("--smtp-idle-timeout"))?;
        if idle_timeout.is_zero() {
            return Err(Error::invalid("--smtp-idle-timeout must be above zero"));
        }
        let auth = match std::env::var(AUTH_ENV) {
            Ok(v) => Some(Credentials::parse(&v)?),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Error::invalid(format!("{AUTH_ENV} is not valid UTF-8")))
            }
        };
        Ok(Settings {
            max_size,
            chaos,
            auth,
            idle_timeout,
            tls: None,
        })
    }

    /// The chaos configured for `phase`, if any.
    fn chaos(&self, phase: Phase) -> Option<&Chaos> {
        self.chaos.iter().find(|c| c.phase == phase)
    }
}

/// `25MiB`, `1MB`, `512KiB`, `1000` (bytes).
fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => {
            return Err(Error::invalid(format!(
                "--smtp-max-size {s:?}: expected a size such as 25MiB, 10MB or 1000000"
            )))
        }
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            Error::invalid(format!(
                "--smtp-max-size {s:?}: expected a positive size such as 25MiB"
            ))
        })
}

/// The one AUTH identity accepted when `SENDONCE_FAKE_SMTP_AUTH` is set. Its `Debug` hides the
/// password.
#[derive(Clone)]
pub struct Credentials {
    user: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

impl Credentials {
    fn parse(v: &str) -> Result<Self> {
        match v.split_once(':') {
            Some((u, p)) if !u.is_empty() && !p.is_empty() => Ok(Credentials {
                user: u.to_string(),
                password: p.to_string(),
            }),
            // The value is never echoed: it holds a password.
            _ => Err(Error::invalid(format!(
                "{AUTH_ENV} must be user:password (both non-empty)"
            ))),
        }
    }

    /// Both equal, compared without an early exit on the password.
    fn accepts(&self, user: &str, password: &str) -> bool {
        let (a, b) = (self.password.as_bytes(), password.as_bytes());
        let mut diff = a.len() ^ b.len();
        for (i, x) in a.iter().enumerate() {
            diff |= (*x ^ b.get(i).copied().unwrap_or(0)) as usize;
        }
        self.user == user && diff == 0
    }
}

/// Where a failure is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Answer CODE instead of the greeting, then close.
    Connect,
    /// Refuse `MAIL FROM`.
    Mail,
    /// Refuse `RCPT TO`.
    Rcpt,
    /// Refuse the `DATA` command itself (before 354).
    Data,
    /// Store the message (fsynced), then close without the 250: the lost reply.
    DropAfterAccept,
}

impl Phase {
    const ALL: [Phase; 5] = [
        Phase::Connect,
        Phase::Mail,
        Phase::Rcpt,
        Phase::Data,
        Phase::DropAfterAccept,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::Connect => "connect",
            Phase::Mail => "mail",
            Phase::Rcpt => "rcpt",
            Phase::Data => "data",
            Phase::DropAfterAccept => "drop-after-accept",
        }
    }
}

/// One `--smtp-chaos PHASE=P[:CODE]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Chaos {
    pub phase: Phase,
    /// Share of the sessions (connect) or commands hit, 0..1.
    pub p: f64,
    /// The reply code (4xx or 5xx); unused for `drop-after-accept`.
    pub code: u16,
}

impl Chaos {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: String| Error::invalid(format!("--smtp-chaos {s:?}: {why}"));
        let (name, rest) = s
            .split_once('=')
            .ok_or_else(|| bad("expected PHASE=P[:CODE], e.g. rcpt=0.1:451".into()))?;
        let phase = Phase::ALL
            .into_iter()
            .find(|p| p.name() == name.trim())
            .ok_or_else(|| {
                bad(format!(
                    "unknown phase {name:?} (one of connect, mail, rcpt, data, drop-after-accept)"
                ))
            })?;
        let (p, code) = match rest.split_once(':') {
            Some((p, c)) => (p, Some(c)),
            None => (rest, None),
        };
        let p: f64 = p
            .trim()
            .parse()
            .map_err(|_| bad(format!("{p:?} is not a number between 0 and 1")))?;
        if !(0.0..=1.0).contains(&p) {
            return Err(bad(format!("the share {p} is not between 0 and 1")));
        }
        let code = match (phase, code) {
            (Phase::DropAfterAccept, Some(_)) => {
                return Err(bad("drop-after-accept takes no reply code".into()))
            }
            (_, Some(c)) => {
                let code: u16 = c
                    .trim()
                    .parse()
                    .map_err(|_| bad(format!("reply code {c:?} is not a number")))?;
                if !(400..=599).contains(&code) {
                    return Err(bad(format!("reply code {code} is not 4xx or 5xx")));
                }
                code
            }
            (Phase::Connect, None) => 421,
            (_, None) => 451,
        };
        Ok(Chaos { phase, p, code })
    }
}

/// Serve SMTP on `listener` until `stop` turns true; then stop accepting, let sessions in DATA
/// finish and tell idle ones 421.
pub(super) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let tls = match shared.config.smtp.tls.clone() {
        Some(t) => Some(t),
        None => match Tls::generate(&shared.config.log, &[]) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!("fake provider: SMTP without STARTTLS: {e}");
                None
            }
        },
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_SESSIONS));
    let session_stop = stop.clone();
    let mut sessions = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (mut stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("fake provider: SMTP accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                match limit.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (shared, tls, stop) = (shared.clone(), tls.clone(), session_stop.clone());
                        sessions.spawn(async move {
                            session::run(shared, stream, tls, stop).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        sessions.spawn(async move {
                            let refuse = async {
                                stream
                                    .write_all(b"421 4.3.2 too many connections, try again later\r\n")
                                    .await?;
                                stream.shutdown().await
                            };
                            let _ = tokio::time::timeout(Duration::from_secs(5), refuse).await;
                        });
                    }
                }
            }
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
        }
    }
    drop(listener);
    while sessions.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaos_flags_are_validated() {
        let c = Chaos::parse("rcpt=0.25:550").unwrap();
        assert_eq!((c.phase, c.p, c.code), (Phase::Rcpt, 0.25, 550));
        assert_eq!(Chaos::parse("connect=1").unwrap().code, 421);
        assert_eq!(Chaos::parse("data=0.5").unwrap().code, 451);
        assert_eq!(
            Chaos::parse("drop-after-accept=0.05").unwrap().phase,
            Phase::DropAfterAccept
        );
        for bad in [
            "helo=0.1",
            "rcpt",
            "rcpt=1.5",
            "rcpt=-0.1",
            "rcpt=x",
            "rcpt=0.1:250",
            "rcpt=0.1:600",
            "rcpt=0.1:abc",
            "drop-after-accept=0.1:451",
        ] {
            let e = Chaos::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--smtp-chaos"), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_and_credentials() {
        assert_eq!(parse_size("25MiB").unwrap(), 25 << 20);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("10 MB").unwrap(), 10_000_000);
        assert!(parse_size("0").is_err());
        assert!(parse_size("lots").is_err());
        let c = Credentials::parse("kim:s3cret:x").unwrap();
        assert!(c.accepts("kim", "s3cret:x"));
        assert!(!c.accepts("kim", "s3cret"));
        assert!(!c.accepts("lee", "s3cret:x"));
        assert!(!format!("{c:?}").contains("s3cret"));
        let e = Credentials::parse("nopassword").unwrap_err().to_string();
        assert!(!e.contains("nopassword"), "{e}");
    }
}
