//! `sendonce bounce`: one delivery status notification (RFC 3464) piped in by the MTA that
//! receives mail for the SMTP provider's `return_path`. The DSN is parsed (`domain::dsn`), then
//! believed only when the VERP tag of the address it came to matches the job its returned
//! headers name and a recipient it reports on (`domain::verp`, keyed by the link secret); then
//! its events are recorded and applied in one transaction like a provider webhook's (source
//! `dsn`): a hard bounce (`failed`, `5.x.x`) suppresses the recipient, and any DSN settles a
//! send of that job left in doubt as sent (our relay accepted the message, or it could not
//! have reported on it). The same DSN piped again changes nothing.

use super::webhooks::{self, Receipt};
use sendonce_domain::address::Channel;
use sendonce_domain::dsn::{self, Dsn, Recipient};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::Keys;
use sendonce_domain::model::{CAMPAIGN_JOB_AT, CAMPAIGN_JOB_PREFIX, CAMPAIGN_JOB_SUB};
use sendonce_domain::verp;
use sendonce_domain::webhook::{body_sha256, Effect, Event, Source};
use sendonce_store::prelude::*;
use sendonce_store::Store;
use serde::Serialize;

/// Longest DSN `Message-ID` kept in an event id.
const MAX_ID: usize = 200;

/// One DSN as the MTA hands it over.
#[derive(Debug)]
pub struct Piped<'a> {
    /// The account that sent the message (name or id).
    pub account: &'a str,
    /// The whole message.
    pub raw: &'a [u8],
    /// The address it was delivered to, when the MTA tells (`--to`, Postfix's
    /// `$ORIGINAL_RECIPIENT`); otherwise it is read from the DSN's headers.
    pub to: Option<&'a str>,
    pub now_ms: i64,
}

/// What a DSN did: its job, and one receipt per event.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub job_id: String,
    pub events: Vec<Receipt>,
}

/// Parse, verify, record and apply one DSN. Refused (nothing written): not a DSN (invalid),
/// no VERP tag or a tag that matches no recipient it names (unauthorized), no returned
/// `X-Sendonce-Job` (invalid).
pub fn receive(store: &Store, keys: &Keys, p: &Piped<'_>) -> Result<Outcome> {
    let account_id = store.resolve_account(p.account)?;
    let d = dsn::parse(p.raw).map_err(|e| Error::invalid(format!("sendonce bounce: {e}")))?;
    let tag =
        p.to.map(str::to_string)
            .into_iter()
            .chain(d.delivered_to.iter().cloned())
            .find_map(|a| verp::tag_in(&a))
            .ok_or_else(|| {
                Error::unauthorized(
                    "the DSN did not come to a VERP return path (local+TAG@domain): set \
                 return_path on the SMTP provider, and pass the address it came to with --to \
                 if the MTA drops it from the headers",
                )
            })?;
    let job = d.job_id.clone().ok_or_else(|| {
        Error::invalid(
            "the DSN does not return the original message's headers (X-Sendonce-Job): \
             configure the MTA to return headers in bounces",
        )
    })?;
    // Each recipient with the address its tag was checked against: only that address is ever
    // suppressed (an Original-Recipient beside a verified Final-Recipient is not believed).
    let verified: Vec<(&Recipient, &str)> = d
        .recipients
        .iter()
        .filter_map(|r| {
            let a = r
                .addresses()
                .find(|a| verp::matches(keys, &tag, &job, a, p.now_ms))?;
            Some((r, a))
        })
        .collect();
    if verified.is_empty() {
        return Err(Error::unauthorized(
            "the VERP tag does not match the job and a recipient the DSN names (forged, \
             changed, or signed with a secret no longer in SENDONCE_UNSUBSCRIBE_SECRET / \
             SENDONCE_UNSUBSCRIBE_OLD_SECRETS)",
        ));
    }
    if let Some(owner) = job_account(store, &job) {
        if owner != account_id {
            return Err(Error::forbidden(format!(
                "the DSN reports on a message of account {owner}, not of --account {}: pipe each \
                 account's return path with its own --account",
                p.account
            )));
        }
    }
    let events = events(&d, &job, &verified);
    let events = webhooks::apply(store, account_id, Source::Dsn, p.now_ms, events)?;
    Ok(Outcome {
        job_id: job,
        events,
    })
}

/// The account a job id names, where it can tell: an API message's is in the id, a campaign
/// row's is its campaign's. `None` for other jobs (a confirmation, a notification) and for a
/// campaign that is gone.
fn job_account(store: &Store, job: &str) -> Option<i64> {
    let head = job.split(CAMPAIGN_JOB_AT).next().unwrap_or(job);
    if let Some(rest) = head.strip_prefix("api:") {
        return rest.split(':').next()?.parse().ok();
    }
    let rest = head.strip_prefix(CAMPAIGN_JOB_PREFIX)?;
    let campaign: i64 = rest.split(CAMPAIGN_JOB_SUB).next()?.parse().ok()?;
    store.campaign(campaign).ok().map(|c| c.account_id)
}

/// The events of a verified DSN: one per verified recipient (a hard bounce suppresses the
/// address its tag matched), then the report that settles the job. An event's id is a digest of
/// the DSN's `Message-ID` (or of its status part), the job and the address: a DSN forged for
/// one's own message cannot take the id of another recipient's (a later genuine DSN would
/// then be refused as a conflict, or ignored as a replay). Its hash covers the status part and
/// the job.
fn events(d: &Dsn, job: &str, verified: &[(&Recipient, &str)]) -> Vec<(Event, String)> {
    let hash = body_sha256(&[d.status_part.as_slice(), b"\0", job.as_bytes()].concat());
    let base = match &d.message_id {
        Some(id) => id.chars().take(MAX_ID).collect(),
        None => body_sha256(&d.status_part),
    };
    let id = |what: &str, i: usize| {
        let digest = body_sha256(format!("{base}\0{job}\0{what}\0{i}").as_bytes());
        format!("dsn-{}", &digest[..40])
    };
    let mut out: Vec<(Event, String)> = verified
        .iter()
        .enumerate()
        .map(|(i, (r, address))| {
            let address = address.to_string();
            let effect = match r.permanent() {
                true => Effect::Suppress {
                    channel: Channel::Email,
                    address: address.clone(),
                    reason: format!("dsn: {} {}", r.action.as_str(), r.status),
                },
                false => Effect::Nothing,
            };
            let event = Event {
                event_id: id(&address, i),
                kind: format!("{}:{}", r.action.as_str(), r.status),
                job_id: Some(job.to_string()),
                address: Some(address),
                effect,
            };
            (event, hash.clone())
        })
        .collect();
    let accepted = Event {
        event_id: id("accepted", 0),
        kind: "accepted".into(),
        job_id: Some(job.to_string()),
        address: None,
        effect: Effect::Delivery {
            job_id: job.to_string(),
            sent: true,
            provider_id: None,
        },
    };
    out.push((accepted, hash));
    out
}
