//! The double opt-in steps the SQLite subscriber import (`admin.rs`) calls inside its own
//! transaction, handed to the neutral ones of `store/optin.rs` (until that caller is written
//! once too).

use super::tx::SqliteTx;
use crate::domain::links::Links;
use crate::error::Result;
use crate::store::NewSubscriber;
use rusqlite::Transaction;

/// `store::optin::can_confirm`.
pub(super) fn can_confirm(
    tx: &Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<()> {
    crate::store::optin::can_confirm(&mut SqliteTx(tx), account_id, s, lists, links)
}

/// `store::optin::pending_until_confirmed`.
pub(super) fn pending_until_confirmed(
    tx: &Transaction<'_>,
    subscriber_id: i64,
    lists: &[i64],
) -> Result<()> {
    crate::store::optin::pending_until_confirmed(&mut SqliteTx(tx), subscriber_id, lists)
}
