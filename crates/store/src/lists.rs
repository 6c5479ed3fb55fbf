//! Subscriber lists (`Lists`), backend-neutral: lists per account with their opt-in mode,
//! memberships with a status of their own, and the audience counts of a campaign's targets.
//! Written once for both stores over `sql::Tx` (the unsubscribe link's steps in
//! `unsubscribe.rs`, the keyset pages in `pages.rs`); the audience counts compile the audience
//! filter with `segment.rs` for the store's dialect.

use crate::shared::require_account;
use crate::sql::{args, Db, Dialect, Row, Tx};
use crate::{segment, unsubscribe, Campaigns};
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::Links;
use sendonce_domain::segment::Filter;
use sendonce_domain::template::VarCounts;
use std::collections::BTreeMap;

/// How a list takes new members: `single` subscribes them at once, `double` leaves them
/// `pending` until they confirm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptIn {
    Single,
    Double,
}

impl OptIn {
    pub fn as_str(self) -> &'static str {
        match self {
            OptIn::Single => "single",
            OptIn::Double => "double",
        }
    }

    /// `single` or `double`.
    pub fn parse(s: &str) -> Result<OptIn> {
        match s {
            "single" => Ok(OptIn::Single),
            "double" => Ok(OptIn::Double),
            other => Err(Error::invalid(format!(
                "unknown opt-in mode {other:?} (single or double)"
            ))),
        }
    }
}

/// A list to create.
#[derive(Debug, Clone)]
pub struct NewList<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub optin: OptIn,
    /// Takes signups from the public form (`/subscribe`).
    pub public: bool,
    /// The confirmation message of a double opt-in list (checked by the caller).
    pub confirm: ConfirmContent<'a>,
}

/// A double opt-in list's confirmation message: sender, and subject and text templates
/// (`None`: the defaults of `domain::optin`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfirmContent<'a> {
    pub from: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub body: Option<&'a str>,
}

/// A change to a list: each `Some` field is set, `None` is kept.
#[derive(Debug, Clone, Default)]
pub struct ListChange<'a> {
    pub public: Option<bool>,
    pub confirm: ConfirmContent<'a>,
}

/// A list as stored, with its members counted per membership status.
#[derive(Debug, Clone)]
pub struct ListRow {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub description: Option<String>,
    pub optin: OptIn,
    /// Takes signups from the public form.
    pub public: bool,
    pub confirm_from: Option<String>,
    pub confirm_subject: Option<String>,
    pub confirm_body: Option<String>,
    pub created_at: i64,
    pub subscribed: u64,
    pub unsubscribed: u64,
    pub pending: u64,
}

/// What a campaign's targets (its lists, or the whole account) hold for its channel, each
/// targeted subscriber counted once, in the first bucket that applies in this order:
/// `unsubscribed`, `unconfirmed`, `no_address`, `filtered_out` (reachable, but the audience
/// filter excludes it); the rest are one row per normalised address (`duplicates` the
/// subscribers beyond the first of an address), `suppressed` or `would_receive`. The buckets
/// are disjoint and add up to the targeted subscribers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AudienceCounts {
    pub would_receive: u64,
    pub duplicates: u64,
    pub suppressed: u64,
    pub unsubscribed: u64,
    pub unconfirmed: u64,
    pub no_address: u64,
    pub filtered_out: u64,
}

/// The audience to count: a campaign's targets, or a draft's before it exists
/// (`campaign create --dry-run`).
#[derive(Debug, Clone, Copy)]
pub struct AudienceQuery<'a> {
    pub account_id: i64,
    pub channel: Channel,
    /// The targeted lists (ids); empty: every subscriber of the account. An id that is no
    /// list (a removed one) targets nobody, never the whole account.
    pub lists: &'a [i64],
    /// The audience filter, parsed.
    pub filter: Option<&'a Filter>,
}

/// One list an unsubscribe link names, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkList {
    pub id: i64,
    pub name: String,
    /// The membership of the address's subscriber: `subscribed`, `unsubscribed`, `pending`,
    /// or None when it is not a member (any more).
    pub status: Option<String>,
}

/// What an unsubscribe link covers now: its lists that still exist (a removed list is left
/// out; a list of another account refuses the whole link) and whether the address is on the
/// account's suppression list for the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    pub lists: Vec<LinkList>,
    pub suppressed: bool,
}

/// An unsubscribe to apply, in one transaction.
#[derive(Debug, Clone, Copy)]
pub struct UnsubscribeRequest<'a> {
    pub account_id: i64,
    pub channel: Channel,
    /// Normalised (lower-case email, E.164 phone).
    pub address: &'a str,
    /// Memberships of the address's subscriber on these lists become `unsubscribed`.
    pub lists: &'a [i64],
    /// Everything from this sender: the address is suppressed for the channel and every
    /// membership of its subscriber in the account becomes `unsubscribed`.
    pub everything: bool,
    /// Recorded on the suppression row (`unsubscribe-link`).
    pub source: &'a str,
}

/// What an unsubscribe changed (all zero / false: it had been done before).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnsubscribeChange {
    /// Memberships that became `unsubscribed`.
    pub memberships: u64,
    /// A suppression row was written.
    pub suppressed: bool,
}

/// The order and search of a page of a list's members ([`Lists::list_members`]).
#[derive(Debug, Clone, Copy)]
pub enum MemberOrder<'a> {
    /// Every member in subscriber id order, the ids after `after`.
    Id { after: i64 },
    /// Members whose normalised email address starts with `prefix` (lower case), in address
    /// order, the addresses after `after`.
    Email {
        prefix: &'a str,
        after: Option<&'a str>,
    },
    /// Members whose phone number (E.164) starts with `prefix`, in number order, after `after`.
    Phone {
        prefix: &'a str,
        after: Option<&'a str>,
    },
}

/// A page of a list's members to read: a keyset page of at most `limit` rows, optionally of
/// one membership status (`subscribed`, `unsubscribed`, `pending`).
#[derive(Debug, Clone, Copy)]
pub struct MemberPage<'a> {
    pub account_id: i64,
    pub list_id: i64,
    pub membership: Option<&'a str>,
    pub order: MemberOrder<'a>,
    pub limit: usize,
}

/// One member of a list: the subscriber (never a removed one), its normalised email address
/// (the keyset of an email search) and the membership's status.
#[derive(Debug, Clone)]
pub struct MemberRow {
    pub subscriber: crate::SubscriberRow,
    pub email_norm: Option<String>,
    pub membership: String,
}

/// The bounds of a keyset page over the values that start with `prefix`, after `after`:
/// `(low, high)`, a value `v` is in the page when `low <= v < high` and `v != after`. `high`
/// is `prefix` with its last character moved up by one, so the range is every value that
/// starts with `prefix` in byte order (SQLite's BINARY, PostgreSQL's "C" collation).
pub fn prefix_bounds(prefix: &str, after: Option<&str>) -> (String, String) {
    let low = match after {
        Some(a) if a > prefix => a.to_string(),
        _ => prefix.to_string(),
    };
    let mut high: Vec<char> = prefix.chars().collect();
    loop {
        match high.pop() {
            None => return (low, char::MAX.to_string()),
            Some(c) => {
                let next = (u32::from(c) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
                if let Some(n) = next {
                    high.push(n);
                    return (low, high.into_iter().collect());
                }
            }
        }
    }
}

/// Lists and memberships.
pub trait Lists: Send + Sync {
    /// A keyset page of a list's members (`q.list_id` must be a list of `q.account_id`: the
    /// caller checked it), read through an index: the list's memberships in id order, or the
    /// account's address index over the search prefix.
    fn list_members(&self, q: &MemberPage<'_>) -> Result<Vec<MemberRow>>;
    /// What an unsubscribe link of `account_id` for `address` on `channel` and `lists` covers
    /// now. `NotFound` when the account does not exist or a list belongs to another account.
    fn link_state(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        lists: &[i64],
    ) -> Result<LinkState>;
    /// Apply an unsubscribe (one `BEGIN IMMEDIATE` transaction, the checks of
    /// [`Lists::link_state`] inside it). Idempotent: a second call changes nothing.
    fn unsubscribe(&self, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange>;
    /// Create a list; a name already used in the account is a `Conflict`.
    fn create_list(&self, l: &NewList<'_>) -> Result<i64>;
    /// Change a list's public flag or confirmation message.
    fn update_list(&self, account_id: i64, list_id: i64, change: &ListChange<'_>) -> Result<()>;
    /// The account's lists by name, with member counts.
    fn lists(&self, account_id: i64) -> Result<Vec<ListRow>>;
    /// One list of the account, by id or name (`NotFound` otherwise).
    fn find_list(&self, account_id: i64, key: &str) -> Result<ListRow>;
    /// Remove a list and its memberships (never a send). `Conflict` while a campaign that is
    /// approved, sending or paused targets it. Returns how many memberships went.
    fn remove_list(&self, account_id: i64, list_id: i64) -> Result<u64>;
    /// The lists a campaign targets (empty: the whole account).
    fn campaign_lists(&self, campaign_id: i64) -> Result<Vec<i64>>;
    /// The audience counts of a campaign's targets now, its filter applied (a stored filter
    /// that no longer parses is `Damaged`).
    fn audience_counts(&self, campaign_id: i64) -> Result<AudienceCounts>;
    /// The audience counts of `q` now, in one statement (one snapshot): the same numbers list
    /// building would produce for a campaign with these targets and this filter.
    /// How many of the subscribers `q` would send to (confirmed, with an address for the
    /// channel, subscribed to a targeted list, matching the filter) have each template
    /// variable: what `template::check` needs for this campaign's audience, not the whole
    /// account's.
    fn variable_counts_for(
        &self,
        q: &AudienceQuery<'_>,
    ) -> Result<sendonce_domain::template::VarCounts>;
    fn audience_counts_for(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts>;
}

// ---- Written once over the seam (`sql::Tx`) ----

/// The columns of a [`ListRow`] over `lists l`, its member counts as `d` keeps them.
fn list_cols(d: &Dialect) -> String {
    format!(
        "l.id, l.account_id, l.name, l.description, l.optin, l.created_at,
    l.public, l.confirm_from, l.confirm_subject, l.confirm_body,
    {}",
        d.list_member_counts
    )
}

fn list_from_row(r: Row<'_>) -> Result<ListRow> {
    let count = |i: usize| -> Result<u64> { Ok(u64::try_from(r.get::<i64>(i)?).unwrap_or(0)) };
    Ok(ListRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        description: r.get(3)?,
        optin: r.get(4)?,
        created_at: r.get(5)?,
        public: r.get(6)?,
        confirm_from: r.get(7)?,
        confirm_subject: r.get(8)?,
        confirm_body: r.get(9)?,
        subscribed: count(10)?,
        unsubscribed: count(11)?,
        pending: count(12)?,
    })
}

/// `Ok` when every list in `lists` belongs to `account_id`; else `NotFound` naming the first
/// that does not. `lock` takes each list's row `FOR UPDATE` on PostgreSQL (no membership can
/// be added to it until the transaction ends; SQLite's write transaction already excludes it).
pub(crate) fn require_lists(
    tx: &mut dyn Tx,
    account_id: i64,
    lists: &[i64],
    lock: bool,
) -> Result<()> {
    let sql = match (lock, tx.dialect().for_update.is_empty()) {
        (true, false) => "SELECT 1 FROM lists WHERE id = ?1 AND account_id = ?2 FOR UPDATE",
        _ => "SELECT 1 FROM lists WHERE id = ?1 AND account_id = ?2",
    };
    for &id in lists {
        if !tx.exists(sql, &args![id, account_id])? {
            return Err(Error::not_found(format!(
                "unknown list id {id} in account {account_id}"
            )));
        }
    }
    Ok(())
}

/// Make `subscriber_id` a member of each of `lists` (checked by [`require_lists`]): subscribed,
/// or pending on a double opt-in list, with its confirmation queued once
/// (`optin::queue_confirmations`; the caller ran `optin::can_confirm`). An existing membership
/// is kept as it is (someone who unsubscribed from the list stays unsubscribed). Returns how
/// many memberships were new.
pub(crate) fn join_lists(
    tx: &mut dyn Tx,
    subscriber_id: i64,
    lists: &[i64],
    links: Option<&Links>,
) -> Result<u64> {
    let now = sendonce_domain::clock::now_ms();
    let mut joined = 0;
    for &list in lists {
        joined += tx.exec(
            "INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
             SELECT l.id, ?1, CASE l.optin WHEN 'double' THEN 'pending' ELSE 'subscribed' END,
                    ?2, ?2
             FROM lists l WHERE l.id = ?3
             ON CONFLICT DO NOTHING",
            &args![subscriber_id, now, list],
        )?;
    }
    crate::optin::queue_confirmations(tx, subscriber_id, lists, links)?;
    Ok(joined)
}

/// List `list_id` if it takes public signups.
pub(crate) fn public_list(tx: &mut dyn Tx, list_id: i64) -> Result<Option<ListRow>> {
    let cols = list_cols(tx.dialect());
    tx.query_opt(
        &format!("SELECT {cols} FROM lists l WHERE l.id = ?1 AND l.public"),
        &args![list_id],
        list_from_row,
    )
}

/// Store a new draft's targets (checked by [`require_lists`]).
pub(crate) fn target_lists(tx: &mut dyn Tx, campaign_id: i64, lists: &[i64]) -> Result<()> {
    for &list in lists {
        tx.exec(
            "INSERT INTO campaign_lists (campaign_id, list_id) VALUES (?1, ?2)
             ON CONFLICT DO NOTHING",
            &args![campaign_id, list],
        )?;
    }
    Ok(())
}

fn find_list_row(tx: &mut dyn Tx, account_id: i64, key: &str) -> Result<Option<ListRow>> {
    let by_id = key.parse::<i64>().ok();
    let cols = list_cols(tx.dialect());
    tx.query_opt(
        &format!(
            "SELECT {cols} FROM lists l
             WHERE l.account_id = ?1 AND (l.id = ?2 OR l.name = ?3)
             ORDER BY coalesce(l.id = ?2, FALSE) DESC LIMIT 1"
        ),
        &args![account_id, by_id, key],
        list_from_row,
    )
}

/// Insert list `l` named `name` (trimmed, not empty); a name the account already uses is a
/// `Conflict` naming the list that has it.
fn insert_list(tx: &mut dyn Tx, l: &NewList<'_>, name: &str) -> Result<i64> {
    require_account(tx, l.account_id)?;
    let id: Option<i64> = tx.scalar_opt(
        "INSERT INTO lists (account_id, name, description, optin, created_at, public,
                            confirm_from, confirm_subject, confirm_body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (account_id, name) DO NOTHING RETURNING id",
        &args![
            l.account_id,
            name,
            l.description,
            l.optin,
            sendonce_domain::clock::now_ms(),
            l.public,
            l.confirm.from,
            l.confirm.subject,
            l.confirm.body,
        ],
    )?;
    if let Some(id) = id {
        return Ok(id);
    }
    let id: i64 = tx.scalar(
        "SELECT id FROM lists WHERE account_id = ?1 AND name = ?2",
        &args![l.account_id, name],
    )?;
    Err(Error::conflict(format!(
        "a list named {name:?} already exists in account {} (id {id})",
        l.account_id
    )))
}

/// Remove list `list_id` of `account_id` and its memberships, unless a campaign that is
/// approved, sending or paused targets it. The list's row and the targeting campaigns' rows
/// are locked on PostgreSQL (no membership joins it, no campaign is approved, while this
/// decides).
fn remove_list_in(tx: &mut dyn Tx, account_id: i64, list_id: i64) -> Result<u64> {
    require_lists(tx, account_id, &[list_id], true)?;
    let lock = (tx.dialect().for_update_of)("c");
    let targeting: Vec<(i64, String)> = tx.query(
        &format!(
            "SELECT c.id, c.status FROM campaign_lists cl JOIN campaigns c ON c.id = cl.campaign_id
             WHERE cl.list_id = ?1 ORDER BY c.id{lock}"
        ),
        &args![list_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let busy: Vec<i64> = targeting
        .into_iter()
        .filter(|(_, s)| !matches!(s.as_str(), "draft" | "sent" | "cancelled"))
        .map(|(id, _)| id)
        .collect();
    if !busy.is_empty() {
        return Err(Error::conflict(format!(
            "list {list_id} is targeted by campaign(s) {busy:?}, which are approved, \
             sending or paused: cancel them or let them finish first"
        )));
    }
    cancel_confirmations(tx, list_id)?;
    let n = tx.exec(
        "DELETE FROM list_members WHERE list_id = ?1",
        &args![list_id],
    )?;
    tx.exec("DELETE FROM lists WHERE id = ?1", &args![list_id])?;
    Ok(n)
}

/// List `list_id`'s confirmations still queued go with it (one already called stays: its link
/// finds no list, a 404).
fn cancel_confirmations(tx: &mut dyn Tx, list_id: i64) -> Result<u64> {
    tx.exec(
        "UPDATE sends SET status = 'cancelled', updated_at = ?2,
                last_error = 'its list was removed before it was sent'
         WHERE status = 'queued' AND doubt_since IS NULL AND id IN (SELECT s.id
             FROM list_confirmations lc
             JOIN sends s ON s.campaign_id = lc.campaign_id AND s.subscriber_id = lc.subscriber_id
             WHERE lc.list_id = ?1 AND s.job_id LIKE 'confirm:' || CAST(?1 AS TEXT) || ':'
                                       || CAST(lc.subscriber_id AS TEXT) || '@%')",
        &args![list_id, sendonce_domain::clock::now_ms()],
    )
}

/// The address column of subscriber `s` for `channel`.
fn address_column(channel: Channel) -> &'static str {
    match channel {
        Channel::Sms => "s.phone",
        Channel::Email => "s.email_norm",
    }
}

/// The audience counts of one query; see [`AudienceCounts`] for the buckets. `?1`: the
/// targeted list ids (a JSON array), folded per subscriber in `m`; `?2`: whether the whole
/// account is targeted (no lists); `?3` the account, `?4` the channel; `filter`, the compiled
/// audience filter (its parameters from `?5`), applied where list building applies it: to the
/// subscribers it would otherwise take. One statement, so one snapshot.
fn audience_sql(d: &Dialect, channel: Channel, filter: Option<&str>) -> String {
    let addr = address_column(channel);
    let targeted = (d.in_json_ids)("lm.list_id", "?1");
    let filtered = filter.map_or(String::new(), |f| {
        format!("WHEN NOT {f} THEN 'filtered_out'")
    });
    let n = |k: &str| format!("count(CASE WHEN k = '{k}' THEN 1 END)");
    format!(
        "WITH m AS (
             SELECT lm.subscriber_id AS sid,
                    max(CASE WHEN lm.status = 'subscribed' THEN 1 ELSE 0 END) = 1 AS sub,
                    max(CASE WHEN lm.status = 'unsubscribed' THEN 1 ELSE 0 END) = 1 AS unsub
             FROM list_members lm WHERE {targeted}
             GROUP BY lm.subscriber_id),
         t AS (
             SELECT {addr} AS addr,
                    CASE WHEN NOT coalesce(m.sub, ?2) AND m.unsub THEN 'unsubscribed'
                         WHEN NOT coalesce(m.sub, ?2) OR s.status <> 'confirmed'
                              THEN 'unconfirmed'
                         WHEN {addr} IS NULL THEN 'no_address'
                         {filtered}
                         ELSE 'ok' END AS k
             FROM subscribers s LEFT JOIN m ON m.sid = s.id
             WHERE s.account_id = ?3 AND s.removed_at IS NULL
               AND (?2 OR m.sid IS NOT NULL))
         SELECT {}, {}, {},
                {} - count(DISTINCT CASE WHEN k = 'ok' THEN addr END),
                count(DISTINCT CASE WHEN k = 'ok' AND su.address IS NOT NULL THEN addr END),
                count(DISTINCT CASE WHEN k = 'ok' AND su.address IS NULL THEN addr END),
                {}
         FROM t LEFT JOIN suppressions su ON su.account_id = ?3
                                         AND su.channel = ?4 AND su.address = t.addr",
        n("unsubscribed"),
        n("unconfirmed"),
        n("no_address"),
        n("ok"),
        n("filtered_out"),
    )
}

/// The audience of [`Lists::variable_counts_for`] (`?1` the account, `?2` whether the whole
/// account is targeted, `?3` the targeted list ids as a JSON array; `filter`, a compiled
/// condition on `s`, from `?4`), then its size (the row whose key is NULL) and how many of it
/// have each variable, read from the same JSON object list building captures for rendering
/// (`Dialect::captured_vars`), so "has it" means here what it means when the message is
/// rendered. One statement, so one snapshot.
fn variable_counts_sql(d: &Dialect, channel: Channel, filter: &str) -> String {
    let addr = address_column(channel);
    let targeted = (d.in_json_ids)("lm.list_id", "?3");
    format!(
        "WITH a AS (
             SELECT s.id, s.attrs, s.name, s.email, s.phone FROM subscribers s
             WHERE s.account_id = ?1 AND s.status = 'confirmed' AND {addr} IS NOT NULL
               AND (?2 OR EXISTS (
                   SELECT 1 FROM list_members lm
                   WHERE {targeted} AND lm.subscriber_id = s.id AND lm.status = 'subscribed'))
               AND {filter})
         SELECT CAST(NULL AS TEXT), count(*) FROM a
         UNION ALL
         SELECT j.key, count(DISTINCT s.id) FROM a s, {keys} j GROUP BY j.key",
        keys = (d.json_keys)(d.captured_vars),
    )
}

/// A count read from the database (never negative).
fn count(r: Row<'_>, i: usize) -> Result<u64> {
    Ok(u64::try_from(r.get::<i64>(i)?).unwrap_or(0))
}

/// [`Lists::audience_counts_for`] on one connection.
fn audience_counts_in(tx: &mut dyn Tx, q: &AudienceQuery<'_>) -> Result<AudienceCounts> {
    let d = tx.dialect();
    let compiled = q.filter.map(|f| segment::compile(d, Some(f), 5));
    let sql = audience_sql(d, q.channel, compiled.as_ref().map(|c| c.sql.as_str()));
    let lists = serde_json::Value::from(q.lists.to_vec()).to_string();
    let fixed = args![&lists, q.lists.is_empty(), q.account_id, q.channel];
    let params = compiled.as_ref().map_or(fixed.to_vec(), |c| c.with(&fixed));
    let counts = tx.query_opt(&sql, &params, |r| {
        Ok(AudienceCounts {
            unsubscribed: count(r, 0)?,
            unconfirmed: count(r, 1)?,
            no_address: count(r, 2)?,
            duplicates: count(r, 3)?,
            suppressed: count(r, 4)?,
            would_receive: count(r, 5)?,
            filtered_out: count(r, 6)?,
        })
    })?;
    counts.ok_or_else(|| Error::internal("the audience counts query returned no row"))
}

/// [`Lists::variable_counts_for`] on one connection.
fn variable_counts_in(tx: &mut dyn Tx, q: &AudienceQuery<'_>) -> Result<VarCounts> {
    let d = tx.dialect();
    let compiled = segment::compile(d, q.filter, 4);
    let sql = variable_counts_sql(d, q.channel, &compiled.sql);
    let lists = serde_json::Value::from(q.lists.to_vec()).to_string();
    let params = compiled.with(&args![q.account_id, q.lists.is_empty(), &lists]);
    let mut counts = VarCounts {
        channel: q.channel,
        total: 0,
        present: BTreeMap::new(),
    };
    tx.each(&sql, &params, &mut |r| {
        let n = count(r, 1)?;
        match r.get::<Option<String>>(0)? {
            None => counts.total = n,
            Some(k) => {
                counts.present.insert(k, n);
            }
        }
        Ok(())
    })?;
    Ok(counts)
}

impl<S: Db + Campaigns> Lists for S {
    fn list_members(&self, q: &MemberPage<'_>) -> Result<Vec<MemberRow>> {
        self.read(|tx| crate::pages::members(tx, q))
    }

    fn link_state(
        &self,
        account_id: i64,
        channel: Channel,
        address: &str,
        lists: &[i64],
    ) -> Result<LinkState> {
        self.read(|tx| Ok(unsubscribe::state(tx, account_id, channel, address, lists)?.1))
    }

    fn unsubscribe(&self, r: &UnsubscribeRequest<'_>) -> Result<UnsubscribeChange> {
        self.write(|tx| unsubscribe::apply(tx, r))
    }

    fn create_list(&self, l: &NewList<'_>) -> Result<i64> {
        let name = l.name.trim();
        if name.is_empty() {
            return Err(Error::invalid("the list name is empty"));
        }
        self.write(|tx| insert_list(tx, l, name))
    }

    fn update_list(&self, account_id: i64, list_id: i64, change: &ListChange<'_>) -> Result<()> {
        self.write(|tx| {
            require_lists(tx, account_id, &[list_id], false)?;
            tx.exec(
                "UPDATE lists SET public = coalesce(?2, public),
                        confirm_from = coalesce(?3, confirm_from),
                        confirm_subject = coalesce(?4, confirm_subject),
                        confirm_body = coalesce(?5, confirm_body)
                 WHERE id = ?1",
                &args![
                    list_id,
                    change.public,
                    change.confirm.from,
                    change.confirm.subject,
                    change.confirm.body
                ],
            )?;
            Ok(())
        })
    }

    fn lists(&self, account_id: i64) -> Result<Vec<ListRow>> {
        self.read(|tx| require_account(tx, account_id))?;
        self.read(|tx| {
            let d = tx.dialect();
            tx.query(
                &format!(
                    "SELECT {} FROM lists l WHERE l.account_id = ?1 ORDER BY l.name{}",
                    list_cols(d),
                    d.byte_order
                ),
                &args![account_id],
                list_from_row,
            )
        })
    }

    fn find_list(&self, account_id: i64, key: &str) -> Result<ListRow> {
        self.read(|tx| require_account(tx, account_id))?;
        let key = key.trim();
        self.read(|tx| find_list_row(tx, account_id, key))?
            .ok_or_else(|| {
                Error::not_found(format!(
                    "unknown list {key:?} in account {account_id} (`sendonce list list --account \
                 {account_id}` shows them)"
                ))
            })
    }

    fn remove_list(&self, account_id: i64, list_id: i64) -> Result<u64> {
        self.write(|tx| remove_list_in(tx, account_id, list_id))
    }

    fn campaign_lists(&self, campaign_id: i64) -> Result<Vec<i64>> {
        self.read(|tx| {
            tx.query(
                "SELECT list_id FROM campaign_lists WHERE campaign_id = ?1 ORDER BY list_id",
                &args![campaign_id],
                |r| r.get(0),
            )
        })
    }

    fn audience_counts(&self, campaign_id: i64) -> Result<AudienceCounts> {
        let c = self.campaign(campaign_id)?;
        let lists = self.campaign_lists(campaign_id)?;
        let filter = c
            .filter
            .as_deref()
            .map(|f| Filter::parse_stored(f, campaign_id))
            .transpose()?;
        self.audience_counts_for(&AudienceQuery {
            account_id: c.account_id,
            channel: c.channel,
            lists: &lists,
            filter: filter.as_ref(),
        })
    }

    fn variable_counts_for(&self, q: &AudienceQuery<'_>) -> Result<VarCounts> {
        self.read(|tx| variable_counts_in(tx, q))
    }

    fn audience_counts_for(&self, q: &AudienceQuery<'_>) -> Result<AudienceCounts> {
        self.read(|tx| audience_counts_in(tx, q))
    }
}
