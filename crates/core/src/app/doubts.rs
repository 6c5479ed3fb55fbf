//! Sends in doubt (the provider may or may not have taken them) and the operator's decision on
//! each: delivered, or not delivered and queued again.

use sendonce_domain::error::{Error, Result};
use sendonce_store::prelude::*;
use sendonce_store::Store;
use serde::Serialize;

/// One send in doubt.
#[derive(Debug, Clone, Serialize)]
pub struct Doubt {
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub attempts: i64,
    #[serde(serialize_with = "sendonce_domain::clock::ser_opt_ms")]
    pub doubt_since: Option<i64>,
    pub reason: Option<String>,
}

/// A campaign's sends in doubt.
#[derive(Debug, Clone, Serialize)]
pub struct Doubts {
    pub campaign_id: i64,
    pub in_doubt: Vec<Doubt>,
}

/// The sends of `campaign` in doubt.
pub fn list(store: &Store, campaign: i64) -> Result<Doubts> {
    let in_doubt = store
        .doubts(campaign)?
        .into_iter()
        .map(|r| Doubt {
            send_id: r.send_id,
            job_id: r.job_id,
            address: r.address,
            attempts: r.attempts,
            doubt_since: r.doubt_since,
            reason: r.reason,
        })
        .collect();
    Ok(Doubts {
        campaign_id: campaign,
        in_doubt,
    })
}

/// Rows in doubt on one page of an account's queue (the dashboard).
pub const PAGE: usize = 50;

/// A delivery report a provider's webhook sent for a send (none is usual for a row in doubt:
/// a report for it would have settled it).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub source: String,
    pub kind: String,
    /// `sent` or `failed`.
    pub delivery: String,
    /// What receiving it did.
    pub action: &'static str,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub received_at: i64,
}

/// One send in doubt of an account, with its campaign, the route that sends it and any
/// delivery report received for it.
#[derive(Debug, Clone, Serialize)]
pub struct AccountDoubt {
    pub campaign_id: i64,
    pub campaign_name: String,
    pub channel: String,
    /// The config's route for the campaign (`route 2 (twilio)`, `default (smtp)`), never the
    /// provider spec itself (it may hold a password).
    pub route: String,
    #[serde(flatten)]
    pub send: Doubt,
    pub reports: Vec<Report>,
}

/// One page of an account's sends in doubt; `next` is the cursor of the following page.
#[derive(Debug, Clone, Serialize)]
pub struct AccountDoubts {
    pub in_doubt: Vec<AccountDoubt>,
    pub next: Option<String>,
}

/// Where routes come from: the server's config file and default provider spec.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteSource<'a> {
    pub config: Option<&'a crate::config::Config>,
    /// `--provider` (it overrides the file's `provider`).
    pub provider: Option<&'a str>,
}

impl RouteSource<'_> {
    /// The route label for a campaign of `account_id` (named `account_name`) on `channel`.
    pub fn label(&self, account_id: i64, account_name: &str, channel: &str) -> String {
        let kind = |spec: &str| spec.split(':').next().unwrap_or("").to_string();
        if let (Some(cfg), Ok(ch)) = (self.config, channel.parse()) {
            if let Some(i) = cfg.route_for(account_id, account_name, ch) {
                return format!("route {} ({})", i + 1, kind(&cfg.route[i].provider));
            }
        }
        match self
            .provider
            .or(self.config.and_then(|c| c.provider.as_deref()))
        {
            Some(spec) => format!("default ({})", kind(spec)),
            None => "no provider configured".to_string(),
        }
    }

    fn names_accounts(&self) -> bool {
        self.config.is_some_and(|c| {
            c.route
                .iter()
                .any(|r| matches!(r.account, Some(crate::config::AccountRef::Name(_))))
        })
    }
}

/// The cursor `after` of the account's queue: `CAMPAIGN-SEND` (both ids), or the start.
pub fn parse_cursor(after: Option<&str>) -> Result<(i64, i64)> {
    let Some(text) = after.filter(|t| !t.is_empty()) else {
        return Ok((0, 0));
    };
    let bad = || {
        Error::invalid(format!(
            "after must be CAMPAIGN-SEND (two ids, as the next-page link gives), not {text:?}"
        ))
    };
    let (c, s) = text.split_once('-').ok_or_else(bad)?;
    let c: i64 = c.parse().map_err(|_| bad())?;
    let s: i64 = s.parse().map_err(|_| bad())?;
    if c < 0 || s < 0 {
        return Err(bad());
    }
    Ok((c, s))
}

/// One page (at most [`PAGE`]) of the sends in doubt of every campaign of `account_id`, after
/// the cursor `after`, each with its route (from `routes`) and delivery reports.
pub fn account_list(
    store: &Store,
    account_id: i64,
    after: Option<&str>,
    routes: RouteSource<'_>,
) -> Result<AccountDoubts> {
    let cursor = parse_cursor(after)?;
    let mut rows = store.account_doubts(account_id, cursor, PAGE + 1)?;
    let more = rows.len() > PAGE;
    rows.truncate(PAGE);
    let jobs: Vec<String> = rows.iter().map(|r| r.job_id.clone()).collect();
    let mut reports = store.delivery_events(account_id, &jobs)?;
    let account_name = match routes.names_accounts() {
        true => store.account_name(account_id)?,
        false => String::new(),
    };
    let next = match (more, rows.last()) {
        (true, Some(r)) => Some(format!("{}-{}", r.campaign_id, r.send_id)),
        _ => None,
    };
    let in_doubt = rows
        .into_iter()
        .map(|r| AccountDoubt {
            route: routes.label(account_id, &account_name, &r.channel),
            reports: take_reports(&mut reports, &r.job_id),
            campaign_id: r.campaign_id,
            campaign_name: r.campaign_name,
            channel: r.channel,
            send: Doubt {
                send_id: r.send_id,
                job_id: r.job_id,
                address: r.address,
                attempts: r.attempts,
                doubt_since: r.doubt_since,
                reason: r.reason,
            },
        })
        .collect();
    Ok(AccountDoubts { in_doubt, next })
}

fn take_reports(all: &mut Vec<sendonce_store::DeliveryEvent>, job: &str) -> Vec<Report> {
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(all)
        .into_iter()
        .partition(|e| e.job_id == job);
    *all = rest;
    mine.into_iter()
        .map(|e| Report {
            source: e.source,
            kind: e.kind,
            delivery: e.delivery,
            action: e.action.as_str(),
            received_at: e.received_at,
        })
        .collect()
}

/// The operator's decision on one send in doubt, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub send_id: i64,
    /// It was delivered (true) or it was not and is sent again (false).
    pub delivered: bool,
    /// Who decided: one line, kept in the ledger's reason.
    pub by: String,
}

impl Decision {
    /// From the two exclusive choices (`as_sent`, `requeue`), one of which must be made, and
    /// who decided (`by`, else `fallback`, else "operator").
    pub fn new(
        send_id: i64,
        as_sent: bool,
        requeue: bool,
        by: Option<String>,
        fallback: Option<String>,
    ) -> Result<Decision> {
        if !as_sent && !requeue {
            return Err(Error::invalid(
                "say what happened: --as-sent (it was delivered) or --requeue (it was not: \
                 send it again)",
            ));
        }
        let by = by.or(fallback).unwrap_or_else(|| "operator".into());
        if by.chars().any(char::is_control) || by.len() > 200 {
            return Err(Error::invalid("--by must be one line of at most 200 bytes"));
        }
        Ok(Decision {
            send_id,
            delivered: as_sent,
            by,
        })
    }
}

/// A decided send and the state it is now in (`sent` or `queued`).
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    pub send_id: i64,
    pub status: &'static str,
}

/// Nothing, if send `send_id` belongs to `account_id`; a send of another account is
/// `NotFound`, worded as a send id that does not exist.
pub fn owned_send(store: &Store, account_id: i64, send_id: i64) -> Result<()> {
    match store.send_account(send_id)? {
        Some(a) if a == account_id => Ok(()),
        _ => Err(Error::not_found(format!("unknown send id {send_id}"))),
    }
}

/// Record `decision`: the send becomes sent, or queued to be sent again.
pub fn resolve(store: &Store, decision: &Decision) -> Result<Resolved> {
    store.resolve_doubt_by(decision.send_id, decision.delivered, &decision.by)?;
    Ok(Resolved {
        send_id: decision.send_id,
        status: if decision.delivered { "sent" } else { "queued" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_two_ids() {
        assert_eq!(parse_cursor(None).unwrap(), (0, 0));
        assert_eq!(parse_cursor(Some("")).unwrap(), (0, 0));
        assert_eq!(parse_cursor(Some("3-1045")).unwrap(), (3, 1045));
        for bad in ["3", "a-1", "1-b", "-1-2", "1-2-3"] {
            assert!(parse_cursor(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn route_labels_never_show_the_spec() {
        let cfg: crate::config::Config =
            toml::from_str("[[route]]\nchannel = \"sms\"\nprovider = \"twilio:AC1\"\n").unwrap();
        let r = RouteSource {
            config: Some(&cfg),
            provider: Some("smtp://u:secret@host:25"),
        };
        assert_eq!(r.label(1, "acme", "sms"), "route 1 (twilio)");
        assert_eq!(r.label(1, "acme", "email"), "default (smtp)");
        assert_eq!(
            RouteSource::default().label(1, "acme", "email"),
            "no provider configured"
        );
    }

    #[test]
    fn a_decision_needs_a_choice_and_one_line_of_who() {
        assert!(Decision::new(1, false, false, None, None).is_err());
        let d = Decision::new(1, true, false, None, Some("ana".into())).unwrap();
        assert_eq!((d.delivered, d.by.as_str()), (true, "ana"));
        let d = Decision::new(1, false, true, Some("bo".into()), Some("ana".into())).unwrap();
        assert_eq!((d.delivered, d.by.as_str()), (false, "bo"));
        assert_eq!(
            Decision::new(1, true, false, None, None).unwrap().by,
            "operator"
        );
        let e = Decision::new(1, true, false, Some("a\nb".into()), None).unwrap_err();
        assert_eq!(e.message, "--by must be one line of at most 200 bytes");
    }
}
