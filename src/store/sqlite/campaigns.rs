//! Until `ledger.rs` and `webhooks.rs` here are written once: the neutral campaign steps they
//! call (`store/campaigns.rs`), taken on a rusqlite transaction. Remove when they are ported.

use super::tx::SqliteTx;
use crate::error::Result;
use rusqlite::Transaction;

pub(super) use super::dialect::STATUS_COUNTS;
pub(super) use crate::store::campaigns::COMPLETE_IF_DONE;

pub(super) fn complete_if_done(tx: &Transaction<'_>, campaign_id: i64, now: i64) -> Result<bool> {
    crate::store::campaigns::complete_if_done(&mut SqliteTx(tx), campaign_id, now)
}

pub(super) fn settle_doubt_tx(
    tx: &Transaction<'_>,
    send_id: i64,
    provider_id: Option<&str>,
    as_sent: bool,
    now: i64,
    by: &str,
) -> Result<bool> {
    let mut tx = SqliteTx(tx);
    crate::store::campaigns::settle_doubt_tx(&mut tx, send_id, provider_id, as_sent, now, by)
}
