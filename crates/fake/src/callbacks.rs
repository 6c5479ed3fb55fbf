//! Delivery callbacks of the fake provider (`--callbacks URL`): after a send is accepted (and
//! journaled, even when the reply is then dropped on purpose), the fake provider tells the
//! sender the message was delivered, signed the way the real provider signs:
//!
//! - `POST /send` (the generic webhook): Standard Webhooks to `URL/hooks/standard/ACCOUNT`,
//!   `{"type": "message.delivered", "data": {"job_id", "to", "channel", "message_id"}}`
//!   (`message_id`: the `id` the send was answered with), signed with
//!   `SENDONCE_FAKE_WEBHOOK_SECRET` (`whsec_...`);
//! - Resend: Svix headers to `URL/hooks/resend/ACCOUNT`, `email.delivered` with the message's
//!   tags, same secret;
//! - Postmark: `Delivery` with the message's `Metadata` to `URL/hooks/postmark/ACCOUNT`, Basic
//!   auth from `SENDONCE_FAKE_POSTMARK_AUTH` (`user:password`);
//! - Twilio: `MessageStatus=delivered` to the message's own `StatusCallback` URL, signed
//!   (`X-Twilio-Signature`) with the auth token the sender authenticated with.
//!
//! - Amazon SES, SendGrid, Mailgun and Brevo: as `cloud_callbacks` says.
//!
//! Each callback is retried a few times (providers retry too) and never holds up the answer.

use sendonce_domain::error::{Error, Result};
use sendonce_domain::webhook::sign;
use serde_json::{json, Value};
use std::time::Duration;

/// The environment variables of the callbacks' secrets, named with every secret the program
/// reads (`config show` masks them).
pub use sendonce_core::app::config::{
    FAKE_POSTMARK_AUTH_ENV as POSTMARK_AUTH_ENV, FAKE_WEBHOOK_SECRET_ENV as SECRET_ENV,
};
const TRIES: u32 = 10;

/// Where callbacks go and how they are signed.
#[derive(Clone)]
pub struct Callbacks {
    /// The sender's base URL (`http://127.0.0.1:8025`).
    pub base: String,
    /// The `{account}` of the webhook URLs.
    pub account: String,
    secret: Option<Vec<u8>>,
    postmark_auth: Option<String>,
    clouds: super::cloud_callbacks::CloudKeys,
    client: reqwest::Client,
}

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callbacks")
            .field("base", &self.base)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl Callbacks {
    /// Callbacks to `base` for `account`, secrets from the environment (either may be unset:
    /// those callbacks are then not sent).
    pub fn from_env(base: &str, account: &str) -> Result<Callbacks> {
        let secret = match std::env::var(SECRET_ENV) {
            Ok(s) => Some(
                sendonce_domain::webhook::decode_secret(&s)
                    .map_err(|e| Error::invalid(format!("{SECRET_ENV}: {e}")))?,
            ),
            Err(_) => None,
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
        Ok(Callbacks {
            base: base.trim_end_matches('/').to_string(),
            account: account.to_string(),
            secret,
            postmark_auth: std::env::var(POSTMARK_AUTH_ENV).ok(),
            clouds: super::cloud_callbacks::CloudKeys::from_env(&|k| std::env::var(k).ok())?,
            client,
        })
    }
}

/// What was accepted, for its callback.
pub(super) struct Accepted {
    pub api: Option<&'static str>,
    pub job_id: String,
    pub to: String,
    pub channel: String,
    pub metadata: Option<Value>,
    /// Twilio: the auth token the sender authenticated with.
    pub token: Option<String>,
}

impl Accepted {
    pub(super) fn of(r: &super::journal::Request, token: Option<String>) -> Accepted {
        Accepted {
            api: r.api,
            job_id: r.job_id.clone(),
            to: r.to.clone(),
            channel: r.channel.clone(),
            metadata: r.metadata.clone(),
            token,
        }
    }
}

/// What `Journal::submit_then` runs: the callback of a first delivery (a replayed key was
/// reported the first time).
pub(super) fn after_journal(
    cb: Option<Callbacks>,
    a: Accepted,
) -> impl FnOnce(&std::result::Result<super::journal::Verdict, String>) + Send + 'static {
    move |v| {
        if let (
            Some(cb),
            Ok(super::journal::Verdict::Delivered {
                message_id,
                replay: false,
            }),
        ) = (cb, v)
        {
            spawn(&cb, a, message_id);
        }
    }
}

/// One request to make.
pub(super) struct Call {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub(super) fn now_secs() -> i64 {
    sendonce_domain::clock::now_ms() / 1000
}

fn signed(cb: &Callbacks, url: String, prefix: &str, id: String, body: Value) -> Option<Call> {
    let key = cb.secret.as_ref()?;
    let body = body.to_string().into_bytes();
    let ts = now_secs();
    let sig = sign(key, &id, ts, &body);
    Some(Call {
        url,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (format!("{prefix}-id"), id),
            (format!("{prefix}-timestamp"), ts.to_string()),
            (format!("{prefix}-signature"), sig),
        ],
        body,
    })
}

fn call_for(cb: &Callbacks, a: &Accepted, message_id: &str) -> Option<Call> {
    let hooks = format!("{}/hooks", cb.base);
    match a.api {
        None => signed(
            cb,
            format!("{hooks}/standard/{}", cb.account),
            "webhook",
            format!("msg_{message_id}"),
            json!({"type": "message.delivered",
                   "data": {"job_id": a.job_id, "to": a.to, "channel": a.channel,
                            "message_id": message_id}}),
        ),
        Some("resend") => {
            let tag = sendonce_domain::webhook::job_tag(&a.job_id);
            signed(
                cb,
                format!("{hooks}/resend/{}", cb.account),
                "svix",
                format!("msg_{message_id}"),
                json!({"type": "email.delivered", "created_at": super::apis::now_rfc3339(),
                       "data": {"email_id": message_id, "to": [a.to],
                                "tags": {sendonce_core::provider::inbound::RESEND_JOB_TAG: tag}}}),
            )
        }
        Some("postmark") => {
            use base64::Engine;
            let auth = cb.postmark_auth.as_ref()?;
            let body = json!({"RecordType": "Delivery", "MessageID": message_id,
                "Recipient": a.to, "DeliveredAt": super::apis::now_rfc3339(),
                "Metadata": a.metadata.clone().unwrap_or_else(|| json!({}))});
            Some(Call {
                url: format!("{hooks}/postmark/{}", cb.account),
                headers: vec![
                    ("content-type".into(), "application/json".into()),
                    (
                        "authorization".into(),
                        format!(
                            "Basic {}",
                            base64::engine::general_purpose::STANDARD.encode(auth)
                        ),
                    ),
                ],
                body: body.to_string().into_bytes(),
            })
        }
        Some("twilio") => {
            let url = a.metadata.as_ref()?.get("StatusCallback")?.as_str()?;
            let token = a.token.as_deref()?;
            let params = [
                ("MessageSid", message_id),
                ("MessageStatus", "delivered"),
                ("To", a.to.as_str()),
            ];
            let sig = sendonce_core::provider::twilio::twilio_signature(token, url, &params);
            let body = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(params)
                .finish();
            Some(Call {
                url: url.to_string(),
                headers: vec![
                    (
                        "content-type".into(),
                        "application/x-www-form-urlencoded".into(),
                    ),
                    ("x-twilio-signature".into(), sig),
                ],
                body: body.into_bytes(),
            })
        }
        Some(_) => super::cloud_callbacks::call(&cb.clouds, &hooks, &cb.account, a, message_id),
    }
}

/// Send the delivery callback of an accepted message in the background (retried while the
/// sender does not answer 2xx).
pub(super) fn spawn(cb: &Callbacks, a: Accepted, message_id: &str) {
    let Some(call) = call_for(cb, &a, message_id) else {
        return;
    };
    let client = cb.client.clone();
    tokio::spawn(async move {
        for attempt in 0..TRIES {
            tokio::time::sleep(Duration::from_millis(50 + 200 * u64::from(attempt))).await;
            let mut r = client.post(&call.url).body(call.body.clone());
            for (k, v) in &call.headers {
                r = r.header(k.as_str(), v.as_str());
            }
            match r.send().await {
                Ok(res) if res.status().is_success() => return,
                Ok(res) => {
                    tracing::warn!(status = res.status().as_u16(), url = %call.url,
                                   "fake provider: callback refused");
                    if res.status().is_client_error() {
                        return;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "fake provider: callback failed"),
            }
        }
    });
}
