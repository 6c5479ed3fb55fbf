//! The providers' side of `sendonce_domain::redact`: every text a provider's answer carries (`CallResult`)
//! scrubbed of the provider's credentials before it is stored in the ledger, reported or logged.

use super::CallResult;
pub(crate) use sendonce_domain::redact::{redact, redact_bytes, Secret};

/// Every text a call result carries, redacted. A provider's message id is matched against the
/// whole secret only (in every encoding), not against its pieces: an id that happened to share
/// eight characters with a token (two random UUIDs do, now and then) must stay intact, or its
/// delivery reports could no longer find it.
pub(crate) fn redact_result(r: CallResult, secrets: &[Secret]) -> CallResult {
    let r_ = |s: String| redact(&s, secrets);
    match r {
        CallResult::AlreadyAccepted { detail } => {
            CallResult::AlreadyAccepted { detail: r_(detail) }
        }
        CallResult::Permanent { error, suppress } => CallResult::Permanent {
            error: r_(error),
            suppress: suppress.map(r_),
        },
        CallResult::NotSent { error, retry_after } => CallResult::NotSent {
            error: r_(error),
            retry_after,
        },
        CallResult::Ambiguous { error } => CallResult::Ambiguous { error: r_(error) },
        CallResult::Accepted {
            provider_id,
            replay,
        } => CallResult::Accepted {
            provider_id: sendonce_domain::redact::redact_whole(&provider_id, secrets),
            replay,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "CANARY-s3cr3t-7fq9Zk";

    #[test]
    fn results_are_redacted_everywhere() {
        let s = [Secret::new(TOKEN)];
        let got = redact_result(
            CallResult::Permanent {
                error: format!("e {TOKEN}"),
                suppress: Some(format!("hard bounce: 550 {}", TOKEN.to_lowercase())),
            },
            &s,
        );
        assert_eq!(
            got,
            CallResult::Permanent {
                error: "e [redacted]".into(),
                suppress: Some("hard bounce: 550 [redacted]".into()),
            }
        );
    }

    #[test]
    fn a_message_id_loses_only_a_whole_secret() {
        let s = [Secret::new("0f3a9c2e-1b7d-4e55-9a61-5c2f8d0e7b34")];
        // Shares "1b7d-4e55" with the token: an id, left alone.
        let id = "77aa0c11-1b7d-4e55-8888-000011112222";
        let accepted = |provider_id: &str| CallResult::Accepted {
            provider_id: provider_id.into(),
            replay: false,
        };
        assert_eq!(redact_result(accepted(id), &s), accepted(id));
        let echoed = "0F3A9C2E-1B7D-4E55-9A61-5C2F8D0E7B34";
        assert_eq!(redact_result(accepted(echoed), &s), accepted("[redacted]"));
    }
}
