//! Provider webhooks (`POST /hooks/{source}/{account}` of `sendonce serve`): which
//! `[[webhook]]` entries of the config file exist, with their secrets read once at start
//! (from an environment variable or a file, never logged, stored or echoed) and SES's signing
//! certificate read from its file, and `receive`: the account and its entry found (an unknown
//! account and an unconfigured source are the same 404), the request verified the way its
//! provider signs, parsed, then recorded and applied in one transaction (a replay changes
//! nothing; the same id with another body is a conflict). A request may carry several events
//! (a SendGrid batch, an SES bounce naming several recipients): they are applied together. An
//! SNS subscription confirmation is verified and answered with the URL the operator visits to
//! confirm it (nothing is fetched: sendonce makes no outbound call here).
use crate::config::{AccountRef, Config};
use crate::provider::{bounces, inbound, twilio};
use sendonce_domain::bounce_auth::{self as ba, SendgridKey, SnsCert, SnsMessage};
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

/// What verifies one configured webhook's requests.
#[derive(Debug, Clone)]
enum Key {
    /// Twilio: the auth token; Postmark and Brevo: `user:password` (Brevo: or a bearer token);
    /// Resend / Standard: the decoded key; Mailgun: the webhook signing key.
    Secret(Secret),
    /// SendGrid: the verification (public) key.
    Sendgrid(SendgridKey),
    /// SES through SNS: the signing certificate and the topic.
    Sns { cert: SnsCert, topic_arn: String },
}

/// One configured webhook.
#[derive(Debug, Clone)]
struct Hook {
    account: AccountRef,
    source: Source,
    key: Key,
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
            if source == Source::Twilio && public_url.is_none() {
                return Err(Error::invalid(format!(
                    "{what} (twilio): Twilio signs the public URL it calls: set public_url in \
                     the config file, --public-url or SENDONCE_PUBLIC_URL"
                )));
            }
            hooks.push(Hook {
                account: w.account.clone(),
                source,
                key: load_key(source, w).map_err(|e| e.context(&what))?,
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

/// The key of `[[webhook]]` entry `w` of `source`: its secret read and decoded, or SES's
/// certificate read. Errors never quote a secret.
fn load_key(source: Source, w: &crate::config::Webhook) -> Result<Key> {
    let name = source.as_str();
    if source == Source::Ses {
        let (Some(path), Some(topic)) = (&w.certificate_file, &w.topic_arn) else {
            return Err(Error::invalid(
                "ses: certificate_file and topic_arn are needed",
            ));
        };
        let pem = std::fs::read(path).map_err(|e| {
            Error::io(
                &format!("cannot read certificate_file {}", path.display()),
                e,
            )
        })?;
        let cert = SnsCert::parse(&pem).map_err(|e| Error::invalid(format!("ses: {e}")))?;
        return Ok(Key::Sns {
            cert,
            topic_arn: topic.trim().to_string(),
        });
    }
    let raw = read_secret(w.secret_env.as_deref(), w.secret_file.as_deref())?;
    let bytes = match source {
        Source::Resend | Source::Standard => {
            wh::decode_secret(&raw).map_err(|e| Error::invalid(format!("{name}: {e}")))?
        }
        Source::Sendgrid => {
            let key =
                SendgridKey::parse(&raw).map_err(|e| Error::invalid(format!("{name}: {e}")))?;
            return Ok(Key::Sendgrid(key));
        }
        Source::Postmark if !raw.contains(':') => {
            return Err(Error::invalid(
                "postmark: the secret is the Basic auth `user:password` of the webhook URL",
            ))
        }
        _ => raw.into_bytes(),
    };
    Ok(Key::Secret(Secret(bytes)))
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

/// The answer to a webhook request: one event's receipt, the receipts of a request that
/// carries several (SendGrid, SES), or a verified SNS (un)subscription confirmation.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Reply {
    One(Receipt),
    Many {
        source: &'static str,
        events: Vec<Receipt>,
    },
    Subscription {
        source: &'static str,
        /// `SubscriptionConfirmation` or `UnsubscribeConfirmation`.
        kind: String,
        topic_arn: String,
        /// The URL to visit (a browser, curl) to confirm the subscription: sendonce does not.
        subscribe_url: String,
        note: &'static str,
    },
}

/// What a verified request carries.
enum Parsed {
    /// One event (its hash: the body's).
    One(wh::Event),
    /// Several, each with the hash of its own text.
    Many(Vec<(wh::Event, String)>),
    Subscription(SnsMessage),
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

/// Verify a request of Twilio, Postmark, Resend or Standard Webhooks with `key` and parse it
/// into an event.
fn verify_first(hooks: &Hooks, key: &[u8], req: &Inbound<'_>) -> Result<wh::Event> {
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
        _ => {
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

/// The secret of a hook keyed by one (a 404 otherwise: the entry cannot be of this source).
fn secret(hook: &Hook) -> Result<&[u8]> {
    match &hook.key {
        Key::Secret(s) => Ok(&s.0),
        _ => Err(not_found()),
    }
}

/// Verify the request with `hook`'s key and parse what it carries.
fn verify_and_parse(hooks: &Hooks, hook: &Hook, req: &Inbound<'_>) -> Result<Parsed> {
    let now_secs = req.now_ms.div_euclid(1000);
    match (req.source, &hook.key) {
        (Source::Mailgun, Key::Secret(key)) => {
            let (ts, token, sig) = bounces::mailgun_signature(req.body)?;
            ba::mailgun_verify(&key.0, &ts, &token, &sig, now_secs).map_err(Error::unauthorized)?;
            bounces::mailgun(req.body, &token).map(Parsed::One)
        }
        (Source::Sendgrid, Key::Sendgrid(key)) => {
            let sig = req.need("x-twilio-email-event-webhook-signature")?;
            let ts = req.need("x-twilio-email-event-webhook-timestamp")?;
            ba::sendgrid_verify(key, ts, req.body, sig, now_secs).map_err(Error::unauthorized)?;
            bounces::sendgrid(req.body).map(Parsed::Many)
        }
        (Source::Brevo, Key::Secret(key)) => {
            let expected = std::str::from_utf8(&key.0).map_err(|_| not_found())?;
            let auth = req.header("authorization");
            let ok = match auth.is_some_and(|a| a.starts_with("Bearer ")) {
                true => ba::bearer_matches(auth, expected),
                false => expected.contains(':') && wh::basic_auth_matches(auth, expected),
            };
            if !ok {
                return Err(Error::unauthorized(
                    "Basic auth or bearer token of the webhook URL missing or wrong",
                ));
            }
            bounces::brevo(req.body).map(Parsed::One)
        }
        (Source::Ses, Key::Sns { cert, topic_arn }) => verify_sns(cert, topic_arn, req),
        (Source::Mailgun | Source::Sendgrid | Source::Brevo | Source::Ses, _) => Err(not_found()),
        _ => verify_first(hooks, secret(hook)?, req).map(Parsed::One),
    }
}

/// Verify an SNS message (its certificate URL, its signature with the configured certificate,
/// its topic) and parse it: a notification's SES events, or a subscription confirmation.
fn verify_sns(cert: &SnsCert, topic_arn: &str, req: &Inbound<'_>) -> Result<Parsed> {
    let m = SnsMessage::parse(req.body).map_err(Error::unauthorized)?;
    ba::sns_verify(cert, &m).map_err(Error::unauthorized)?;
    if m.topic_arn != topic_arn {
        return Err(Error::forbidden(
            "the SNS message is signed but its TopicArn is not the configured topic_arn",
        ));
    }
    match m.kind.as_str() {
        "Notification" => bounces::ses(&m.message, &m.message_id).map(Parsed::Many),
        _ => Ok(Parsed::Subscription(m)),
    }
}

/// Receive one webhook: find its account and configured hook (404 for any miss), verify it
/// (401; 403 for a signed SNS message of another topic), parse it (400), then record and apply
/// its events once (a replay: the first action, nothing changed; the same id with another
/// body: 409).
pub fn receive(store: &Store, hooks: &Hooks, req: &Inbound<'_>) -> Result<Reply> {
    let (account_id, hook) = hook_for(store, hooks, req)?;
    let source = req.source.as_str();
    let events = match verify_and_parse(hooks, hook, req)? {
        Parsed::One(event) => {
            let hash = wh::body_sha256(req.body);
            let mut r = apply(
                store,
                account_id,
                req.source,
                req.now_ms,
                vec![(event, hash)],
            )?;
            return r.pop().map(Reply::One).ok_or_else(not_found);
        }
        Parsed::Many(events) => events,
        Parsed::Subscription(m) => return Ok(subscription(account_id, source, m)),
    };
    Ok(Reply::Many {
        source,
        events: apply(store, account_id, req.source, req.now_ms, events)?,
    })
}

/// A verified SNS (un)subscription confirmation: logged with its URL, which is answered too.
fn subscription(account_id: i64, source: &'static str, m: SnsMessage) -> Reply {
    let url = m.subscribe_url.unwrap_or_default();
    tracing::warn!(target: "sendonce::webhooks", source, account_id, kind = %m.kind,
                   topic_arn = %m.topic_arn, subscribe_url = %url,
                   "SNS subscription message: visit subscribe_url to confirm (sendonce does not)");
    Reply::Subscription {
        source,
        kind: m.kind,
        topic_arn: m.topic_arn,
        subscribe_url: url,
        note: "verified; sendonce makes no outbound call: visit subscribe_url to confirm",
    }
}

/// Record and apply `events` (each with its hash) of `source` in one transaction; their
/// receipts. (Also `app::dsn`'s, for piped DSNs.)
pub(crate) fn apply(
    store: &Store,
    account_id: i64,
    source: Source,
    now_ms: i64,
    events: Vec<(wh::Event, String)>,
) -> Result<Vec<Receipt>> {
    let applied = store.apply_webhooks(account_id, source, &events, now_ms)?;
    let source = source.as_str();
    Ok(events
        .into_iter()
        .zip(applied)
        .map(|((event, _), applied)| {
            let (action, replay) = match applied {
                Applied::New(a) => (a, false),
                Applied::Replay(a) => (a, true),
            };
            tracing::info!(target: "sendonce::webhooks", source, account_id,
                           event_id = %event.event_id, kind = %event.kind,
                           action = action.as_str(), replay, "webhook");
            Receipt {
                source,
                event_id: event.event_id,
                action,
                replay,
            }
        })
        .collect())
}
