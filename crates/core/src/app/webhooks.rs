//! Provider webhooks (`POST /hooks/{source}/{account}` of `sendonce serve`): which
//! `[[webhook]]` entries of the config file exist, with their secrets read once at start
//! (from an environment variable or a file, never logged, stored or echoed), and `receive`:
//! the account and its entry found (an unknown account and an unconfigured source are the
//! same 404), the request verified the way its provider signs, parsed, then recorded and
//! applied in one transaction (a replay changes nothing; the same id with another body is a
//! conflict).

use crate::config::{AccountRef, Config};
use crate::provider::{inbound, twilio};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::webhook::{self as wh, Source};
use sendonce_store::prelude::*;
use sendonce_store::{Applied, Store, WebhookAction};
use serde::Serialize;
use std::path::Path;

/// A webhook secret. Its `Debug` never shows it.
#[derive(Clone)]
struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// One configured webhook.
#[derive(Debug, Clone)]
struct Hook {
    account: AccountRef,
    source: Source,
    /// Twilio: the auth token; Postmark: `user:password`; Resend / Standard: the decoded key.
    secret: Secret,
}

/// Every configured webhook and the public URL Twilio signs.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    hooks: Vec<Hook>,
    public_url: Option<String>,
}

impl Hooks {
    /// The `[[webhook]]` entries of the config file (`config`, or the file `config::discover`
    /// finds), secrets read now; `public_url` (a flag or its environment variable) wins over
    /// the file's. A Twilio webhook without a public URL is refused (Twilio signs the URL).
    pub fn load(config: Option<&Path>, public_url: Option<&str>) -> Result<Hooks> {
        let Some(file) = Config::load(config)? else {
            return Ok(Hooks::default());
        };
        let public_url = public_url.map(str::to_string).or(file.public_url.clone());
        let mut hooks = Vec::new();
        for (i, w) in file.webhook.iter().enumerate() {
            let what = format!("webhook {}", i + 1);
            let source = Source::parse(&w.source)
                .ok_or_else(|| Error::invalid(format!("{what}: unknown source {:?}", w.source)))?;
            let raw = read_secret(w.secret_env.as_deref(), w.secret_file.as_deref())
                .map_err(|e| e.context(&what))?;
            let secret = match source {
                Source::Resend | Source::Standard => wh::decode_secret(&raw)
                    .map_err(|e| Error::invalid(format!("{what} ({}): {e}", w.source)))?,
                Source::Postmark if !raw.contains(':') => {
                    return Err(Error::invalid(format!(
                        "{what} (postmark): the secret is the Basic auth `user:password` of the \
                         webhook URL"
                    )))
                }
                _ => raw.into_bytes(),
            };
            if source == Source::Twilio && public_url.is_none() {
                return Err(Error::invalid(format!(
                    "{what} (twilio): Twilio signs the public URL it calls: set public_url in \
                     the config file, --public-url or SENDONCE_PUBLIC_URL"
                )));
            }
            hooks.push(Hook {
                account: w.account.clone(),
                source,
                secret: Secret(secret),
            });
        }
        let public_url = public_url.map(|u| u.trim().trim_end_matches('/').to_string());
        Ok(Hooks { hooks, public_url })
    }

    /// How many webhooks are configured.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }
}

fn read_secret(env: Option<&str>, file: Option<&Path>) -> Result<String> {
    let text = match (env, file) {
        (Some(var), _) => std::env::var(var).map_err(|_| {
            Error::invalid(format!(
                "the environment variable {var} (secret_env) is not set"
            ))
        })?,
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| Error::io(&format!("cannot read secret_file {}", path.display()), e))?,
        (None, None) => return Err(Error::invalid("no secret_env or secret_file")),
    };
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(Error::invalid("the webhook secret is empty"));
    }
    Ok(text)
}

/// One webhook request as it arrived (no HTTP types: the handler copies what is needed).
#[derive(Debug)]
pub struct Inbound<'a> {
    pub source: Source,
    /// The `{account}` path segment: a name or an id.
    pub account: &'a str,
    /// The request's path and query exactly as received (Twilio signs them).
    pub path_and_query: &'a str,
    /// Header names lower-case; only the ones the providers sign with are looked at.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
    pub now_ms: i64,
}

impl Inbound<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn need(&self, name: &str) -> Result<&str> {
        self.header(name)
            .ok_or_else(|| Error::unauthorized(format!("the {name} header is missing")))
    }
}

/// What a webhook did.
#[derive(Debug, Clone, Serialize)]
pub struct Receipt {
    pub source: &'static str,
    pub event_id: String,
    pub action: WebhookAction,
    /// The same event came before: nothing changed this time.
    pub replay: bool,
}

fn not_found() -> Error {
    Error::not_found("no such webhook")
}

/// The configured hook of (account, source), with the account's id. Any miss is the same 404.
fn hook_for<'h>(store: &Store, hooks: &'h Hooks, req: &Inbound<'_>) -> Result<(i64, &'h Hook)> {
    let id = store
        .resolve_account(req.account)
        .map_err(|e| match e.kind {
            sendonce_domain::error::ErrorKind::NotFound
            | sendonce_domain::error::ErrorKind::Invalid => not_found(),
            _ => e,
        })?;
    for h in hooks.hooks.iter().filter(|h| h.source == req.source) {
        let matches = match &h.account {
            AccountRef::Id(i) => *i == id,
            AccountRef::Name(n) => store.resolve_account(n).ok() == Some(id),
        };
        if matches {
            return Ok((id, h));
        }
    }
    Err(not_found())
}

/// Verify the request with `hook`'s secret and parse it into an event.
fn verify_and_parse(hooks: &Hooks, hook: &Hook, req: &Inbound<'_>) -> Result<wh::Event> {
    let key = &hook.secret.0;
    match req.source {
        Source::Twilio => {
            let sig = req.need("x-twilio-signature")?;
            let base = hooks.public_url.as_deref().ok_or_else(not_found)?;
            let url = format!("{base}{}", req.path_and_query);
            let params: Vec<(String, String)> = form_urlencoded::parse(req.body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            let refs: Vec<(&str, &str)> = params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let token = std::str::from_utf8(key).map_err(|_| not_found())?;
            if !twilio::validate_twilio_signature(token, &url, &refs, sig) {
                return Err(Error::unauthorized("the X-Twilio-Signature does not match"));
            }
            let job = req.path_and_query.split_once('?').and_then(|(_, q)| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "job_id")
                    .map(|(_, v)| v.into_owned())
            });
            inbound::twilio(&params, job.as_deref())
        }
        Source::Postmark => {
            let expected = std::str::from_utf8(key).map_err(|_| not_found())?;
            if !wh::basic_auth_matches(req.header("authorization"), expected) {
                return Err(Error::unauthorized(
                    "Basic auth of the webhook URL missing or wrong",
                ));
            }
            inbound::postmark(req.body)
        }
        Source::Resend | Source::Standard => {
            let prefix = if req.source == Source::Resend {
                "svix"
            } else {
                "webhook"
            };
            let id = req.need(&format!("{prefix}-id"))?;
            let ts = req.need(&format!("{prefix}-timestamp"))?;
            let sig = req.need(&format!("{prefix}-signature"))?;
            wh::verify(key, id, ts, sig, req.body, req.now_ms.div_euclid(1000))
                .map_err(Error::unauthorized)?;
            match req.source {
                Source::Resend => inbound::resend(req.body, id),
                _ => inbound::standard(req.body, id),
            }
        }
    }
}

/// Receive one webhook: find its account and configured hook (404 for any miss), verify it
/// (401), parse it (400), then record and apply it once (a replay: the first action, nothing
/// changed; the same id with another body: 409).
pub fn receive(store: &Store, hooks: &Hooks, req: &Inbound<'_>) -> Result<Receipt> {
    let (account_id, hook) = hook_for(store, hooks, req)?;
    let event = verify_and_parse(hooks, hook, req)?;
    let hash = wh::body_sha256(req.body);
    let applied = store.apply_webhook(account_id, req.source, &event, &hash, req.now_ms)?;
    let (action, replay) = match applied {
        Applied::New(a) => (a, false),
        Applied::Replay(a) => (a, true),
    };
    tracing::info!(target: "sendonce::webhooks", source = req.source.as_str(), account_id,
                   event_id = %event.event_id, kind = %event.kind, action = action.as_str(),
                   replay, "webhook");
    Ok(Receipt {
        source: req.source.as_str(),
        event_id: event.event_id,
        action,
        replay,
    })
}
