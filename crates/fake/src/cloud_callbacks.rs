//! Delivery callbacks of the fake provider for the messages sent through its Amazon SES,
//! SendGrid, Mailgun and Brevo shapes (`--callbacks URL`), each signed or authenticated as its
//! provider does, to `URL/hooks/{ses|sendgrid|mailgun|brevo}/ACCOUNT` of `sendonce serve`:
//!
//! - Mailgun: a `delivered` event with the `sendonce_job` user variable, signed with the HTTP
//!   webhook signing key in `SENDONCE_FAKE_MAILGUN_KEY` (HMAC-SHA256 of timestamp + token);
//! - SendGrid: a one-event batch (`delivered`, the `sendonce_job` custom argument), signed with
//!   the P-256 private key (PKCS#8 DER) in the file `SENDONCE_FAKE_SENDGRID_KEY_FILE` over the
//!   timestamp header + body; `serve` is configured with its public key;
//! - Brevo: `delivered` with `X-Mailin-custom: sendonce_job:JOB`, the credential in
//!   `SENDONCE_FAKE_BREVO_AUTH` (`user:password`: Basic auth, otherwise a bearer token);
//! - SES: an SNS `Notification` whose `Message` is SES's `Delivery` notification (the
//!   `X-Sendonce-Job` header in `mail.headers`), SignatureVersion 2 (SHA256withRSA) with the RSA
//!   private key (PKCS#8 DER) in the file `SENDONCE_FAKE_SNS_KEY_FILE`, on the topic
//!   `SENDONCE_FAKE_SNS_TOPIC`; `serve` is configured with that key's certificate.
//!
//! A source whose key is not set sends no callback.

use super::callbacks::{now_secs, Accepted, Call};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, RsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, RSA_PKCS1_SHA256};
use sendonce_core::provider::bounces::{BREVO_JOB_PREFIX, JOB_HEADER, JOB_VARIABLE};
use sendonce_domain::bounce_auth::{mailgun_sign, SnsMessage};
use sendonce_domain::error::{Error, Result};
use serde_json::{json, Value};
use std::sync::Arc;

pub use sendonce_core::app::config::{
    FAKE_BREVO_AUTH_ENV as BREVO_AUTH_ENV, FAKE_MAILGUN_KEY_ENV as MAILGUN_KEY_ENV,
    FAKE_SENDGRID_KEY_FILE_ENV as SENDGRID_KEY_FILE_ENV, FAKE_SNS_KEY_FILE_ENV as SNS_KEY_ENV,
};
/// The environment variable with the SNS topic the SES callbacks are published on.
pub const SNS_TOPIC_ENV: &str = "SENDONCE_FAKE_SNS_TOPIC";
/// The topic when `SENDONCE_FAKE_SNS_TOPIC` is not set.
pub const DEFAULT_TOPIC: &str = "arn:aws:sns:us-east-1:000000000000:sendonce-fake";
/// The `SigningCertURL` the SES callbacks name (an SNS-shaped URL; `serve` never fetches it).
pub const CERT_URL: &str =
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-sendonce-fake.pem";

/// The keys of the four sources' callbacks (each optional).
#[derive(Clone, Default)]
pub struct CloudKeys {
    mailgun: Option<Vec<u8>>,
    brevo: Option<String>,
    sendgrid: Option<Arc<EcdsaKeyPair>>,
    sns: Option<(Arc<RsaKeyPair>, String)>,
}

fn read_key(var: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(&format!("{var}: cannot read {path}"), e))
}

impl CloudKeys {
    /// The keys from `env` (the process environment in use). Errors name the variable, never
    /// a key.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<CloudKeys> {
        let sendgrid = match env(SENDGRID_KEY_FILE_ENV) {
            Some(path) => {
                let der = read_key(SENDGRID_KEY_FILE_ENV, &path)?;
                let pair = EcdsaKeyPair::from_pkcs8(
                    &ECDSA_P256_SHA256_ASN1_SIGNING,
                    &der,
                    &SystemRandom::new(),
                )
                .map_err(|_| {
                    Error::invalid(format!(
                        "{SENDGRID_KEY_FILE_ENV}: not a P-256 private key in PKCS#8 DER"
                    ))
                })?;
                Some(Arc::new(pair))
            }
            None => None,
        };
        let sns = match env(SNS_KEY_ENV) {
            Some(path) => {
                let der = read_key(SNS_KEY_ENV, &path)?;
                let pair = RsaKeyPair::from_pkcs8(&der).map_err(|_| {
                    Error::invalid(format!(
                        "{SNS_KEY_ENV}: not an RSA private key in PKCS#8 DER"
                    ))
                })?;
                let topic = env(SNS_TOPIC_ENV).unwrap_or_else(|| DEFAULT_TOPIC.to_string());
                Some((Arc::new(pair), topic))
            }
            None => None,
        };
        Ok(CloudKeys {
            mailgun: env(MAILGUN_KEY_ENV).map(String::into_bytes),
            brevo: env(BREVO_AUTH_ENV),
            sendgrid,
            sns,
        })
    }
}

fn json_call(url: String, headers: Vec<(String, String)>, body: Vec<u8>) -> Call {
    let mut all = vec![("content-type".to_string(), "application/json".to_string())];
    all.extend(headers);
    Call {
        url,
        headers: all,
        body,
    }
}

/// The callback of a message accepted through `api` (one of the four), if its key is set.
/// `hooks`: `BASE/hooks`; the URL is `hooks/{source}/{account}`.
pub(super) fn call(
    k: &CloudKeys,
    hooks: &str,
    account: &str,
    a: &Accepted,
    message_id: &str,
) -> Option<Call> {
    let api = a.api?;
    let url = format!("{hooks}/{api}/{account}");
    match api {
        "mailgun" => mailgun(k.mailgun.as_deref()?, url, a, message_id),
        "sendgrid" => sendgrid(k.sendgrid.as_deref()?, url, a, message_id),
        "brevo" => brevo(k.brevo.as_deref()?, url, a, message_id),
        "ses" => {
            let (key, topic) = k.sns.as_ref()?;
            ses(key, topic, url, a, message_id)
        }
        _ => None,
    }
}

fn mailgun(key: &[u8], url: String, a: &Accepted, message_id: &str) -> Option<Call> {
    let ts = now_secs().to_string();
    let token = uuid::Uuid::new_v4().simple().to_string();
    let signature = mailgun_sign(key, &ts, &token);
    let body = json!({
        "signature": {"timestamp": ts, "token": token, "signature": signature},
        "event-data": {"event": "delivered", "recipient": a.to, "timestamp": now_secs(),
                       "user-variables": {JOB_VARIABLE: a.job_id},
                       "message": {"headers": {"message-id": message_id.trim_matches(['<', '>'])}}}
    });
    Some(json_call(url, vec![], body.to_string().into_bytes()))
}

fn sendgrid(key: &EcdsaKeyPair, url: String, a: &Accepted, message_id: &str) -> Option<Call> {
    let ts = now_secs().to_string();
    let body = json!([{"email": a.to, "timestamp": now_secs(), "event": "delivered",
                       "sg_event_id": uuid::Uuid::new_v4().simple().to_string(),
                       "sg_message_id": message_id, JOB_VARIABLE: a.job_id}])
    .to_string()
    .into_bytes();
    let mut signed = ts.clone().into_bytes();
    signed.extend_from_slice(&body);
    let sig = key.sign(&SystemRandom::new(), &signed).ok()?;
    let headers = vec![
        (
            "x-twilio-email-event-webhook-signature".into(),
            STANDARD.encode(sig.as_ref()),
        ),
        ("x-twilio-email-event-webhook-timestamp".into(), ts),
    ];
    Some(json_call(url, headers, body))
}

fn brevo(auth: &str, url: String, a: &Accepted, message_id: &str) -> Option<Call> {
    let body = json!({"event": "delivered", "email": a.to, "message-id": message_id,
                      "ts_event": now_secs(), "date": super::apis::now_rfc3339(),
                      "X-Mailin-custom": format!("{BREVO_JOB_PREFIX}{}", a.job_id)});
    let authorization = match auth.contains(':') {
        true => format!("Basic {}", STANDARD.encode(auth)),
        false => format!("Bearer {auth}"),
    };
    let headers = vec![("authorization".into(), authorization)];
    Some(json_call(url, headers, body.to_string().into_bytes()))
}

fn ses(key: &RsaKeyPair, topic: &str, url: String, a: &Accepted, message_id: &str) -> Option<Call> {
    let now = super::apis::now_rfc3339();
    let ses = json!({
        "notificationType": "Delivery",
        "mail": {"timestamp": now, "messageId": message_id, "destination": [a.to],
                 "headers": [{"name": JOB_HEADER, "value": a.job_id}]},
        "delivery": {"timestamp": now, "recipients": [a.to], "smtpResponse": "250 ok"}
    });
    let mut m = SnsMessage {
        kind: "Notification".into(),
        message_id: uuid::Uuid::new_v4().to_string(),
        topic_arn: topic.to_string(),
        subject: None,
        message: ses.to_string(),
        timestamp: now,
        signature_version: "2".into(),
        signing_cert_url: CERT_URL.into(),
        ..SnsMessage::default()
    };
    let to_sign = m.string_to_sign().ok()?;
    let mut sig = vec![0u8; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        to_sign.as_bytes(),
        &mut sig,
    )
    .ok()?;
    m.signature = STANDARD.encode(&sig);
    let body: Value = json!({
        "Type": m.kind, "MessageId": m.message_id, "TopicArn": m.topic_arn,
        "Message": m.message, "Timestamp": m.timestamp,
        "SignatureVersion": m.signature_version, "Signature": m.signature,
        "SigningCertURL": m.signing_cert_url,
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe"
    });
    let headers = vec![
        ("x-amz-sns-message-type".into(), "Notification".into()),
        ("x-amz-sns-topic-arn".into(), m.topic_arn.clone()),
    ];
    Some(json_call(url, headers, body.to_string().into_bytes()))
}
