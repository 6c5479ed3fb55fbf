//! Accounts and subscribers as they are added (`Audience`): the validated subscriber, the
//! import report, and what a template may use (attribute names, variable counts).

use crate::domain::links::Links;
use crate::error::Result;
use std::collections::BTreeSet;

/// A validated subscriber ready to insert.
#[derive(Debug, Clone)]
pub struct NewSubscriber {
    pub email: Option<(String, String)>, // (as given, normalised)
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    /// JSON object text.
    pub attrs: String,
}

/// A row an import skipped, with its line number and why.
#[derive(Debug, Clone)]
pub struct SkippedRow {
    pub line: u64,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct ImportReport {
    pub imported: u64,
    /// Rows whose address was already a subscriber: with lists, they joined the lists.
    pub existing: u64,
    pub skipped: Vec<SkippedRow>,
}

/// Adding accounts and subscribers, and what templates may refer to.
pub trait Audience: Send + Sync {
    /// Create an account; returns its id.
    fn add_account(&self, name: &str) -> Result<i64>;
    /// Insert one subscriber (a removed one comes back under its old id) and make it a
    /// member of `lists` (ids in the account; an unknown one is `NotFound` and nothing is
    /// written); returns its id. With lists, an address that is already a subscriber only
    /// joins them (an existing membership is kept as it is).
    /// No public URL: a double opt-in list among `lists` is refused (see
    /// [`Audience::add_subscriber_with`]).
    fn add_subscriber(&self, account_id: i64, s: &NewSubscriber, lists: &[i64]) -> Result<i64> {
        self.add_subscriber_with(account_id, s, lists, None)
    }
    /// [`Audience::add_subscriber`], and for every membership of a double opt-in list that is
    /// pending and was never sent a confirmation, the confirmation message queued in the same
    /// transaction (its link built with `links`): once per (list, subscriber), however often
    /// the subscriber is added. Such a membership without `links`, without an email address
    /// (confirmations go by email) or on a list with no confirmation sender is `Invalid`, and
    /// nothing is written.
    fn add_subscriber_with(
        &self,
        account_id: i64,
        s: &NewSubscriber,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<i64>;
    /// Import `(line, parsed)` rows in one transaction, memberships of `lists` included (as
    /// in [`Audience::add_subscriber`]): all-or-nothing unless `skip_invalid`, which imports
    /// the valid rows and reports every skipped one.
    fn import_subscribers(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
    ) -> Result<ImportReport> {
        self.import_subscribers_with(account_id, rows, skip_invalid, lists, None)
    }
    /// [`Audience::import_subscribers`] with confirmations queued as
    /// [`Audience::add_subscriber_with`] does (a row that cannot have one is skipped with
    /// `skip_invalid`, else the import is refused).
    fn import_subscribers_with(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<ImportReport>;
    /// Every attribute name used by the account's subscribers.
    fn attribute_names(&self, account_id: i64) -> Result<BTreeSet<String>>;
    /// `Ok` when the account exists, else the usage error naming it.
    fn account_exists(&self, account_id: i64) -> Result<()>;
}
