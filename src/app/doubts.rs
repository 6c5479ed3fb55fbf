//! Sends in doubt (the provider may or may not have taken them) and the operator's decision on
//! each: delivered, or not delivered and queued again.

use crate::error::{Error, Result};
use crate::store::Storage;
use serde::Serialize;

/// One send in doubt.
#[derive(Debug, Clone, Serialize)]
pub struct Doubt {
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub attempts: i64,
    #[serde(serialize_with = "crate::domain::clock::ser_opt_ms")]
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
pub fn list(store: &dyn Storage, campaign: i64) -> Result<Doubts> {
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
pub fn owned_send(store: &dyn Storage, account_id: i64, send_id: i64) -> Result<()> {
    match store.send_account(send_id)? {
        Some(a) if a == account_id => Ok(()),
        _ => Err(Error::not_found(format!("unknown send id {send_id}"))),
    }
}

/// Record `decision`: the send becomes sent, or queued to be sent again.
pub fn resolve(store: &dyn Storage, decision: &Decision) -> Result<Resolved> {
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
