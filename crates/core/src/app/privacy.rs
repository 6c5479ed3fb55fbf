//! Consent records and a subscriber's data on request, for the CLI, the API, the pages and the
//! dashboard: the `[privacy] consent_ip` policy (how much of a client's address a consent
//! record keeps), the consent an opt-in declares, `subscriber export` (everything held about
//! one person, as JSON) and `subscriber erase`. What erasure keeps, and why: docs/privacy.md.

use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_store::prelude::*;
use sendonce_store::{Consent, Erased, PersonData, Store};
use serde_json::{json, Value};
use std::net::IpAddr;

/// How much of a client's IP address a consent record keeps (`[privacy] consent_ip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpPolicy {
    /// The whole address.
    Store,
    /// The network only: IPv4 /24, IPv6 /48 (the default: enough to show where an opt-in came
    /// from, not enough to name a household).
    #[default]
    Truncate,
    /// None.
    Omit,
}

impl IpPolicy {
    pub fn parse(text: &str) -> Result<IpPolicy> {
        match text.trim() {
            "store" => Ok(IpPolicy::Store),
            "truncate" => Ok(IpPolicy::Truncate),
            "omit" => Ok(IpPolicy::Omit),
            other => Err(Error::invalid(format!(
                "privacy.consent_ip: unknown policy {other:?} (store, truncate or omit)"
            ))),
        }
    }

    /// `ip` as this policy keeps it.
    pub fn keep(self, ip: IpAddr) -> Option<String> {
        match (self, ip) {
            (IpPolicy::Omit, _) => None,
            (IpPolicy::Store, ip) => Some(ip.to_string()),
            (IpPolicy::Truncate, IpAddr::V4(v4)) => {
                let [a, b, c, _] = v4.octets();
                Some(format!("{a}.{b}.{c}.0/24"))
            }
            (IpPolicy::Truncate, IpAddr::V6(v6)) => {
                let s = v6.segments();
                let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0);
                Some(format!("{net}/48"))
            }
        }
    }

    /// An address a client declared (the API's `consent.ip`): checked to be an IP address,
    /// then kept as the policy says.
    pub fn keep_text(self, ip: &str) -> Result<Option<String>> {
        let parsed: IpAddr = ip.trim().parse().map_err(|_| {
            Error::invalid(format!(
                "consent.ip: {:?} is not an IP address",
                clip(ip, 64)
            ))
        })?;
        Ok(self.keep(parsed))
    }
}

/// The `[privacy]` settings: `SENDONCE_PRIVACY_CONSENT_IP`, else the file's
/// `privacy.consent_ip`, else `truncate`.
pub fn settings(file: Option<&crate::config::Config>) -> Result<IpPolicy> {
    let chosen = std::env::var("SENDONCE_PRIVACY_CONSENT_IP")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| file.and_then(|f| f.get("privacy.consent_ip")));
    chosen.map_or(Ok(IpPolicy::default()), |t| IpPolicy::parse(&t))
}

/// Longest declared basis, user agent or shown text kept, in bytes.
pub const MAX_CONSENT_TEXT: usize = 2048;

/// At most the first `max` bytes of `text`, cut at a character boundary.
pub fn clip(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A declared text (basis, user agent, text shown): trimmed, empty is none, a longer one than
/// [`MAX_CONSENT_TEXT`] is refused naming the field.
pub fn consent_text(field: &str, text: Option<&str>) -> Result<Option<String>> {
    let Some(t) = text.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if t.len() > MAX_CONSENT_TEXT {
        return Err(Error::invalid(format!(
            "{field} is {} bytes; at most {MAX_CONSENT_TEXT}",
            t.len()
        )));
    }
    if t.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(Error::invalid(format!("{field} holds a control character")));
    }
    Ok(Some(t.to_string()))
}

/// The consent an operator declares (`--basis`) for `source` (`cli`, `import`, `dashboard`):
/// none without a basis (an operator's add or import records a consent only when it says on
/// what basis; a big import is not slowed by a record that would say nothing).
pub fn declared(source: &'static str, basis: Option<&str>) -> Result<Option<Consent>> {
    Ok(consent_text("the basis", basis)?.map(|basis| Consent {
        source,
        basis: Some(basis),
        ..Consent::default()
    }))
}

/// Everything held about subscriber `key` of `account`, as the JSON `subscriber export` and
/// `GET /v1/subscribers/{id}/export` give.
pub fn export(store: &Store, account: &str, key: &str) -> Result<Value> {
    let account = store.resolve_account(account)?;
    let d = store.person_data(account, key)?;
    Ok(export_json(&d))
}

fn json_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

fn export_json(d: &PersonData) -> Value {
    let p = &d.subscriber;
    let at = |ms: Option<i64>| ms.map(clock::format_ms);
    json!({
        "exported_at": clock::format_ms(clock::now_ms()),
        "account_id": d.account_id,
        "subscriber": {
            "id": p.id, "email": p.email, "email_normalised": p.email_norm, "phone": p.phone,
            "name": p.name, "status": p.status, "attrs": json_text(&p.attrs),
            "created_at": clock::format_ms(p.created_at), "removed_at": at(p.removed_at),
        },
        "memberships": d.memberships.iter().map(|m| json!({
            "list_id": m.list_id, "list": m.list, "status": m.status,
            "created_at": clock::format_ms(m.created_at),
            "updated_at": clock::format_ms(m.updated_at),
        })).collect::<Vec<_>>(),
        "consents": d.consents.iter().map(|c| json!({
            "id": c.id, "list_id": c.list_id, "list": c.list, "source": c.source,
            "basis": c.basis, "ip": c.ip, "user_agent": c.user_agent,
            "text_shown": c.text_shown, "created_at": clock::format_ms(c.created_at),
            "confirmed_at": at(c.confirmed_at), "confirm_ip": c.confirm_ip,
            "confirm_user_agent": c.confirm_user_agent,
        })).collect::<Vec<_>>(),
        "suppressions": d.suppressions.iter().map(|s| json!({
            "channel": s.channel, "address": s.address, "reason": s.reason,
            "source": s.source, "created_at": clock::format_ms(s.created_at),
        })).collect::<Vec<_>>(),
        "sends": d.sends.iter().map(|s| json!({
            "id": s.id, "campaign_id": s.campaign_id, "campaign": s.campaign, "kind": s.kind,
            "channel": s.channel, "job_id": s.job_id, "address": s.address, "status": s.status,
            "vars": json_text(&s.vars), "attempts": s.attempts,
            "created_at": clock::format_ms(s.created_at), "sent_at": at(s.sent_at),
            "provider_message_id": s.provider_message_id, "last_error": s.last_error,
            "content_sha256": s.content_sha256,
        })).collect::<Vec<_>>(),
        "api_messages": d.api_messages.iter().map(|m| json!({
            "id": m.id, "send_id": m.send_id, "idempotency_key": m.idempotency_key,
            "metadata": m.metadata.as_deref().map(json_text),
            "created_at": clock::format_ms(m.created_at),
        })).collect::<Vec<_>>(),
        "events": d.events.iter().map(|e| json!({
            "id": format!("evt_{}", e.id), "type": e.kind, "subject": e.subject,
            "at": clock::format_ms(e.at), "data": json_text(&e.data),
        })).collect::<Vec<_>>(),
    })
}

/// Erase subscriber `key` of `account` (see `Privacy::erase_subscriber`).
pub fn erase(store: &Store, account: &str, key: &str) -> Result<Erased> {
    let account = store.resolve_account(account)?;
    let erased = store.erase_subscriber(account, key)?;
    // The old page images in SQLite's WAL go too, when no reader holds it (else at the next
    // checkpoint that can: docs/privacy.md).
    if let Some(file) = store.file() {
        if let Err(e) = file.checkpoint_truncate() {
            tracing::warn!(error = %e, "the WAL could not be checkpointed after an erasure");
        }
    }
    tracing::info!(
        account,
        subscriber = erased.subscriber_id,
        "a subscriber was erased"
    );
    Ok(erased)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_keep_what_they_say() {
        let v4: IpAddr = "203.0.113.77".parse().unwrap();
        let v6: IpAddr = "2001:db8:abcd:12::1".parse().unwrap();
        assert_eq!(IpPolicy::Store.keep(v4).as_deref(), Some("203.0.113.77"));
        assert_eq!(
            IpPolicy::Truncate.keep(v4).as_deref(),
            Some("203.0.113.0/24")
        );
        assert_eq!(
            IpPolicy::Truncate.keep(v6).as_deref(),
            Some("2001:db8:abcd::/48")
        );
        assert_eq!(IpPolicy::Omit.keep(v6), None);
        assert!(IpPolicy::parse("hash").is_err());
        assert!(IpPolicy::Store.keep_text("not-an-ip").is_err());
    }

    #[test]
    fn declared_texts_are_bounded() {
        assert_eq!(consent_text("the basis", Some("  ")).unwrap(), None);
        let long = "x".repeat(MAX_CONSENT_TEXT + 1);
        let e = consent_text("the basis", Some(&long)).unwrap_err();
        assert!(e.message.contains("the basis"), "{}", e.message);
        assert!(consent_text("the basis", Some("a\u{1b}b")).is_err());
    }
}
