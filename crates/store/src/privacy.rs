//! A subscriber's data on request (`Privacy`): consent records written with each opt-in,
//! everything the store holds about one person read in one transaction (`subscriber
//! export`), and the erasure that removes it from every table (`subscriber erase`), keeping
//! of each address only its `sha256:` form as a suppression, so it is never sent to again.
//! Written once for both stores over `sql::Tx`; what is kept and why is in docs/privacy.md.

use crate::shared::require_account;
use crate::sql::{args, Db, Row, Tx};
use crate::Suppression;
use sendonce_domain::address::{erased_form, is_erased_form};
use sendonce_domain::error::{Error, Result};
use serde::Serialize;
use sha2::Digest as _;

/// An opt-in as it is recorded: where it came from and what the person saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consent {
    /// `form`, `api`, `import`, `cli` or `dashboard`.
    pub source: &'static str,
    /// The lawful basis declared (an import's, the API's, an operator's).
    pub basis: Option<String>,
    /// The client's address, already as the `[privacy] consent_ip` policy keeps it.
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    /// The form's or list's text the person saw.
    pub text: Option<String>,
}

/// The confirmation of a double opt-in, written onto the consent it confirms.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub ip: Option<String>,
    pub user_agent: Option<String>,
}

/// One consent record.
#[derive(Debug, Clone, Serialize)]
pub struct ConsentRow {
    pub id: i64,
    pub list_id: Option<i64>,
    pub list: Option<String>,
    pub source: String,
    pub basis: Option<String>,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub text_shown: Option<String>,
    pub created_at: i64,
    pub confirmed_at: Option<i64>,
    pub confirm_ip: Option<String>,
    pub confirm_user_agent: Option<String>,
}

/// The subscriber's own row, removed or erased ones included.
#[derive(Debug, Clone, Serialize)]
pub struct PersonRow {
    pub id: i64,
    pub email: Option<String>,
    pub email_norm: Option<String>,
    pub phone: Option<String>,
    pub name: Option<String>,
    pub status: String,
    /// JSON object text.
    pub attrs: String,
    pub created_at: i64,
    pub removed_at: Option<i64>,
}

/// A list membership.
#[derive(Debug, Clone, Serialize)]
pub struct MembershipRow {
    pub list_id: i64,
    pub list: Option<String>,
    pub status: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One send to the person: its ledger row, and the SHA-256 of the content it was made from.
#[derive(Debug, Clone, Serialize)]
pub struct SendRow {
    pub id: i64,
    pub campaign_id: i64,
    pub campaign: String,
    pub kind: String,
    pub channel: String,
    pub job_id: String,
    pub address: String,
    pub status: String,
    /// JSON object text: the template variables captured for it.
    pub vars: String,
    pub attempts: i64,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    pub provider_message_id: Option<String>,
    pub last_error: Option<String>,
    /// Hex SHA-256 of the subject, text and HTML the send was made from (before the
    /// recipient's variables were put in), each followed by a NUL byte.
    pub content_sha256: String,
}

/// An API message to the person (its key and the client's metadata).
#[derive(Debug, Clone, Serialize)]
pub struct ApiMessageRow {
    pub id: i64,
    pub send_id: Option<i64>,
    pub idempotency_key: String,
    /// JSON object text.
    pub metadata: Option<String>,
    pub created_at: i64,
}

/// An event about the person or one of its sends.
#[derive(Debug, Clone, Serialize)]
pub struct EventRecord {
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: String,
    pub subject: String,
    pub at: i64,
    /// JSON object text.
    pub data: String,
}

/// Everything the store holds about one subscriber.
#[derive(Debug, Clone)]
pub struct PersonData {
    pub account_id: i64,
    pub subscriber: PersonRow,
    pub memberships: Vec<MembershipRow>,
    pub consents: Vec<ConsentRow>,
    pub suppressions: Vec<Suppression>,
    pub sends: Vec<SendRow>,
    pub api_messages: Vec<ApiMessageRow>,
    pub events: Vec<EventRecord>,
}

/// What an erasure changed, table by table (rows).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Erased {
    pub subscriber_id: i64,
    pub sends: u64,
    pub api_messages: u64,
    pub message_contents: u64,
    pub attachments: u64,
    pub consents: u64,
    pub suppressions: u64,
    pub webhook_events: u64,
    pub events: u64,
    pub hook_deliveries: u64,
    pub address_collisions: u64,
}

/// Consent records, a person's data, and its erasure.
pub trait Privacy: Send + Sync {
    /// Everything held about subscriber `key` (an id, email address or phone number; removed
    /// and erased subscribers included), read in one transaction.
    fn person_data(&self, account: i64, key: &str) -> Result<PersonData>;
    /// Erase subscriber `key` (as in [`Privacy::person_data`]) in one transaction: its name,
    /// attributes, addresses, the variables captured for its sends, its API messages' content,
    /// keys and metadata, its consent records, and the events about it. Each address is
    /// replaced by its `sha256:` form, which stays suppressed. An erased subscriber is a
    /// `Conflict`.
    fn erase_subscriber(&self, account: i64, key: &str) -> Result<Erased>;
}

// ---- Written once over the seam (`sql::Tx`) ----

/// Record `c` for subscriber `id`: one row per list of `lists`, or one naming no list.
pub(crate) fn record_consent(
    tx: &mut dyn Tx,
    account: i64,
    id: i64,
    lists: &[i64],
    c: &Consent,
    now: i64,
) -> Result<()> {
    let none = [None];
    let some: Vec<Option<i64>> = lists.iter().copied().map(Some).collect();
    let targets: &[Option<i64>] = if lists.is_empty() { &none } else { &some };
    for list in targets {
        tx.exec(
            "INSERT INTO consents (account_id, subscriber_id, list_id, source, basis, ip,
                                   user_agent, text_shown, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            &args![
                account,
                id,
                *list,
                c.source,
                &c.basis,
                &c.ip,
                &c.user_agent,
                &c.text,
                now
            ],
        )?;
    }
    Ok(())
}

/// The confirmation of subscriber `id`'s opt-in to `list`, on the records not yet confirmed.
pub(crate) fn confirm_consent(
    tx: &mut dyn Tx,
    id: i64,
    list: i64,
    seen: &Seen,
    now: i64,
) -> Result<()> {
    tx.exec(
        "UPDATE consents SET confirmed_at = ?3, confirm_ip = ?4, confirm_user_agent = ?5
         WHERE subscriber_id = ?1 AND list_id = ?2 AND confirmed_at IS NULL",
        &args![id, list, now, &seen.ip, &seen.user_agent],
    )?;
    Ok(())
}

/// When `address` (normalised, of `channel`) was erased from the account, if it was.
pub(crate) fn erased_at(
    tx: &mut dyn Tx,
    account: i64,
    channel: &str,
    address: &str,
) -> Result<Option<i64>> {
    tx.scalar_opt(
        "SELECT created_at FROM suppressions
         WHERE account_id = ?1 AND channel = ?2 AND address = ?3 AND source = 'erasure'",
        &args![account, channel, &erased_form(address)],
    )
}

/// Refuse to add an address that was erased (`subscriber erase`): the reason, with how the
/// operator lifts it.
pub(crate) fn refuse_erased(
    tx: &mut dyn Tx,
    account: i64,
    email: Option<&str>,
    phone: Option<&str>,
) -> Result<()> {
    for (channel, address) in [("email", email), ("sms", phone)] {
        let Some(address) = address else { continue };
        if let Some(at) = erased_at(tx, account, channel, address)? {
            return Err(Error::invalid(format!(
                "{address} was erased on request ({}); it is not added again unless an \
                 operator lifts its suppression: `sendonce suppress remove --channel {channel} \
                 {address}`",
                sendonce_domain::clock::format_ms(at)
            )));
        }
    }
    Ok(())
}

/// The address a message to `address` is recorded under: its `sha256:` form when it was
/// erased (the row is then suppressed at claim, and the address is not stored), else itself.
pub(crate) fn recorded_address(
    tx: &mut dyn Tx,
    account: i64,
    channel: &str,
    address: &str,
) -> Result<String> {
    Ok(match erased_at(tx, account, channel, address)? {
        Some(_) => erased_form(address),
        None => address.to_string(),
    })
}

/// What the store keeps of a message to an erased address: no metadata, no content, no
/// attachments (the row is suppressed at claim, so nothing is sent).
pub(crate) fn withheld<'a>(m: &crate::NewMessage<'a>) -> crate::NewMessage<'a> {
    crate::NewMessage {
        subject: None,
        text: "[not stored: the recipient was erased]",
        html: None,
        template: None,
        attachments: &[],
        metadata: None,
        ..m.clone()
    }
}

/// The subscriber `key` names, removed and erased ones included: its row.
fn find_person(tx: &mut dyn Tx, account: i64, key: &str, lock: bool) -> Result<PersonRow> {
    let key = key.trim();
    let (by_id, email, phone) = crate::directory::key_forms(key);
    let lock = if lock { tx.dialect().for_update } else { "" };
    let row = tx.query_opt(
        &format!(
            "SELECT id, email, email_norm, phone, name, status, attrs, created_at, removed_at
             FROM subscribers
             WHERE account_id = ?1
               AND (id = ?2 OR email_norm IN (?3, ?4) OR phone IN (?5, ?6))
             ORDER BY coalesce(id = ?2, FALSE) DESC, id LIMIT 1{lock}"
        ),
        &args![
            account,
            by_id,
            &email,
            &erased_form(&email),
            &phone,
            &erased_form(&phone)
        ],
        |r| {
            Ok(PersonRow {
                id: r.get(0)?,
                email: r.get(1)?,
                email_norm: r.get(2)?,
                phone: r.get(3)?,
                name: r.get(4)?,
                status: r.get(5)?,
                attrs: r.get(6)?,
                created_at: r.get(7)?,
                removed_at: r.get(8)?,
            })
        },
    )?;
    row.ok_or_else(|| {
        Error::not_found(format!(
            "no subscriber {key:?} in account {account} (give its id, email or phone)"
        ))
    })
}

/// The sends to subscriber `?4` of account `?1` (`s`, its campaign `k`): through the
/// campaigns' (campaign, address) index, the subscriber's addresses being `?2` and `?3`.
const PERSON_SENDS: &str = "FROM campaigns k JOIN sends s ON s.campaign_id = k.id
     WHERE k.account_id = ?1 AND s.address IN (?2, ?3) AND s.subscriber_id = ?4";

fn person_args(account: i64, p: &PersonRow) -> [crate::sql::Arg<'_>; 4] {
    args![account, &p.email_norm, &p.phone, p.id]
}

fn content_sha256(subject: Option<&str>, body: Option<&str>, html: Option<&str>) -> String {
    let mut h = sha2::Sha256::new();
    for part in [subject, body, html] {
        h.update(part.unwrap_or_default().as_bytes());
        h.update([0u8]);
    }
    sendonce_domain::bounce_auth::hex(&h.finalize())
}

fn send_row(r: Row<'_>) -> Result<SendRow> {
    let (subject, body, html): (Option<String>, Option<String>, Option<String>) =
        (r.get(14)?, r.get(15)?, r.get(16)?);
    Ok(SendRow {
        id: r.get(0)?,
        campaign_id: r.get(1)?,
        campaign: r.get(2)?,
        kind: r.get(3)?,
        channel: r.get(4)?,
        job_id: r.get(5)?,
        address: r.get(6)?,
        status: r.get(7)?,
        vars: r.get(8)?,
        attempts: r.get(9)?,
        created_at: r.get(10)?,
        sent_at: r.get(11)?,
        provider_message_id: r.get(12)?,
        last_error: r.get(13)?,
        content_sha256: content_sha256(subject.as_deref(), body.as_deref(), html.as_deref()),
    })
}

fn sends_of(tx: &mut dyn Tx, account: i64, p: &PersonRow) -> Result<Vec<SendRow>> {
    tx.query(
        "SELECT s.id, s.campaign_id, k.name, k.kind, k.channel, s.job_id, s.address,
                    s.status, s.vars, s.attempts, s.created_at, s.sent_at,
                    s.provider_message_id, s.last_error,
                    coalesce(m.subject, k.subject), coalesce(m.body, k.body),
                    coalesce(m.html, k.html)
             FROM campaigns k JOIN sends s ON s.campaign_id = k.id
             LEFT JOIN message_contents m ON m.id = s.message_id
             WHERE k.account_id = ?1 AND s.address IN (?2, ?3) AND s.subscriber_id = ?4
             ORDER BY s.id",
        &person_args(account, p),
        send_row,
    )
}

/// The events about the person: its own, its sends', and its addresses' suppressions'.
fn events_of(tx: &mut dyn Tx, account: i64, p: &PersonRow) -> Result<Vec<EventRecord>> {
    let [s1, s2, s3, s4] = address_subjects(p);
    tx.query(
        &format!(
            "SELECT id, type, subject, at, data FROM events
             WHERE account_id = ?1
               AND (subscriber_id = ?4 OR subject IN (?5, ?6, ?7, ?8)
                    OR send_id IN (SELECT s.id {PERSON_SENDS}))
             ORDER BY id"
        ),
        &args![account, &p.email_norm, &p.phone, p.id, &s1, &s2, &s3, &s4],
        |r| {
            Ok(EventRecord {
                id: r.get(0)?,
                kind: r.get(1)?,
                subject: r.get(2)?,
                at: r.get(3)?,
                data: r.get(4)?,
            })
        },
    )
}

/// The subjects of the events about the person's addresses: suppressions, and provider
/// reports that suppressed them (`address:`).
fn address_subjects(p: &PersonRow) -> [Option<String>; 4] {
    let of = |kind: &str, channel: &str, a: &Option<String>| {
        a.as_ref().map(|a| format!("{kind}:{channel}:{a}"))
    };
    [
        of("suppression", "email", &p.email_norm),
        of("suppression", "sms", &p.phone),
        of("address", "email", &p.email_norm),
        of("address", "sms", &p.phone),
    ]
}

fn person_data(tx: &mut dyn Tx, account: i64, key: &str) -> Result<PersonData> {
    require_account(tx, account)?;
    let p = find_person(tx, account, key, false)?;
    let memberships = tx.query(
        "SELECT m.list_id, l.name, m.status, m.created_at, m.updated_at
         FROM list_members m LEFT JOIN lists l ON l.id = m.list_id
         WHERE m.subscriber_id = ?1 ORDER BY m.list_id",
        &args![p.id],
        |r| {
            Ok(MembershipRow {
                list_id: r.get(0)?,
                list: r.get(1)?,
                status: r.get(2)?,
                created_at: r.get(3)?,
                updated_at: r.get(4)?,
            })
        },
    )?;
    let consents = consents_of(tx, p.id)?;
    let suppressions = tx.query(
        "SELECT channel, address, reason, source, created_at FROM suppressions
         WHERE account_id = ?1
           AND ((channel = 'email' AND address = ?2) OR (channel = 'sms' AND address = ?3))
         ORDER BY channel",
        &args![account, &p.email_norm, &p.phone],
        |r| {
            Ok(Suppression {
                channel: crate::shared::get_at(r, 0, "suppressions.channel")?,
                address: r.get(1)?,
                reason: r.get(2)?,
                source: r.get(3)?,
                created_at: r.get(4)?,
            })
        },
    )?;
    let sends = sends_of(tx, account, &p)?;
    let api_messages = tx.query(
        &format!(
            "SELECT a.id, a.send_id, a.idempotency_key, a.metadata, a.created_at
             FROM api_messages a WHERE a.send_id IN (SELECT s.id {PERSON_SENDS})
             ORDER BY a.id"
        ),
        &person_args(account, &p),
        |r| {
            Ok(ApiMessageRow {
                id: r.get(0)?,
                send_id: r.get(1)?,
                idempotency_key: r.get(2)?,
                metadata: r.get(3)?,
                created_at: r.get(4)?,
            })
        },
    )?;
    let events = events_of(tx, account, &p)?;
    Ok(PersonData {
        account_id: account,
        subscriber: p,
        memberships,
        consents,
        suppressions,
        sends,
        api_messages,
        events,
    })
}

/// A subscriber's consent records, oldest first.
pub(crate) fn consents_of(tx: &mut dyn Tx, id: i64) -> Result<Vec<ConsentRow>> {
    tx.query(
        "SELECT c.id, c.list_id, l.name, c.source, c.basis, c.ip, c.user_agent, c.text_shown,
                c.created_at, c.confirmed_at, c.confirm_ip, c.confirm_user_agent
         FROM consents c LEFT JOIN lists l ON l.id = c.list_id
         WHERE c.subscriber_id = ?1 ORDER BY c.id",
        &args![id],
        |r| {
            Ok(ConsentRow {
                id: r.get(0)?,
                list_id: r.get(1)?,
                list: r.get(2)?,
                source: r.get(3)?,
                basis: r.get(4)?,
                ip: r.get(5)?,
                user_agent: r.get(6)?,
                text_shown: r.get(7)?,
                created_at: r.get(8)?,
                confirmed_at: r.get(9)?,
                confirm_ip: r.get(10)?,
                confirm_user_agent: r.get(11)?,
            })
        },
    )
}

/// The text of the events an erasure leaves in place of their data.
const ERASED_DATA: &str = r#"{"erased":true}"#;

/// `(plain, erased form)` of each of the person's addresses.
fn address_pairs(p: &PersonRow) -> Vec<(String, String)> {
    [&p.email_norm, &p.phone]
        .into_iter()
        .flatten()
        .map(|a| (a.clone(), erased_form(a)))
        .collect()
}

/// How a column names an address: as its whole value, or at its end after a `:` (an event's
/// or a delivery's subject, `suppression:email:ADDRESS`; a notification's job id).
#[derive(Clone, Copy)]
enum Names {
    Whole,
    AtEnd,
}

/// `text` with LIKE's wildcards escaped (for `ESCAPE '\'`): an address's `_` matches itself
/// only, never another address.
fn like_escaped(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// The condition that `col` names the address bound at `?2` (escaped for LIKE at `?4`).
fn naming(col: &str, how: Names) -> String {
    match how {
        Names::Whole => format!("lower({col}) = ?2"),
        Names::AtEnd => format!("{col} LIKE ?4 ESCAPE '\\'"),
    }
}

/// Each plain address in `col` of `table`'s rows in `scope` (a condition on `?1`, the account)
/// replaced by its erased form, where the column names it as `how` says (a different address
/// that merely contains this one is left alone).
fn replace_in(
    tx: &mut dyn Tx,
    account: i64,
    (table, col, scope, how): (&str, &str, &str, Names),
    pairs: &[(String, String)],
) -> Result<u64> {
    let mut n = 0;
    for (plain, erased) in pairs {
        let pattern = format!("%:{}", like_escaped(plain));
        let cond = naming(col, how);
        let value = match how {
            Names::Whole => "?3".to_string(),
            Names::AtEnd => format!("replace({col}, ?2, ?3)"),
        };
        let sql = format!("UPDATE {table} SET {col} = {value} WHERE {scope} AND {cond}");
        let all = args![account, plain, erased, &pattern];
        n += match how {
            Names::Whole => tx.exec(&sql, &all[..3])?,
            Names::AtEnd => tx.exec(&sql, &all)?,
        };
    }
    Ok(n)
}

/// The sends, their API messages and their contents, erased (`e` counts them).
fn erase_sends(tx: &mut dyn Tx, account: i64, p: &PersonRow, e: &mut Erased) -> Result<()> {
    let pairs = address_pairs(p);
    let api: Vec<(i64, String)> = tx.query(
        &format!(
            "SELECT a.id, a.idempotency_key FROM api_messages a
             WHERE a.send_id IN (SELECT s.id {PERSON_SENDS})"
        ),
        &person_args(account, p),
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    for (id, key) in &api {
        let hashed = format!(
            "erased:{}",
            sendonce_domain::bounce_auth::hex(&sha2::Sha256::digest(key.as_bytes()))
        );
        e.api_messages += tx.exec(
            "UPDATE api_messages SET idempotency_key = ?2, metadata = NULL,
                    response_body = ?3 WHERE id = ?1",
            &args![*id, &hashed, ERASED_DATA],
        )?;
    }
    let contents = format!("id IN (SELECT s.message_id {PERSON_SENDS}) AND notify_key IS NULL");
    e.attachments += tx.exec(
        &format!(
            "DELETE FROM message_attachments WHERE message_id IN
             (SELECT id FROM message_contents WHERE {contents})"
        ),
        &person_args(account, p),
    )?;
    e.message_contents += tx.exec(
        &format!(
            "UPDATE message_contents SET subject = NULL, body = '[erased]', html = NULL,
                    reply_to = NULL WHERE {contents}"
        ),
        &person_args(account, p),
    )?;
    e.sends += tx.exec(
        &format!(
            "UPDATE sends SET vars = '{{}}', last_error = NULL
             WHERE id IN (SELECT s.id {PERSON_SENDS})"
        ),
        &person_args(account, p),
    )?;
    for (plain, erased) in &pairs {
        tx.exec(
            "UPDATE sends SET address = ?3, job_id = replace(job_id, ?2, ?3)
             WHERE id IN (SELECT s.id FROM campaigns k JOIN sends s ON s.campaign_id = k.id
                          WHERE k.account_id = ?1 AND s.address = ?2 AND s.subscriber_id = ?4)",
            &args![account, plain, erased, p.id],
        )?;
    }
    Ok(())
}

/// The suppressions of the person's addresses, replaced by one `erasure` suppression of each
/// address's erased form.
fn erase_suppressions(
    tx: &mut dyn Tx,
    account: i64,
    p: &PersonRow,
    now: i64,
    e: &mut Erased,
) -> Result<()> {
    for (channel, address) in [("email", &p.email_norm), ("sms", &p.phone)] {
        let Some(address) = address else { continue };
        e.suppressions += tx.exec(
            "DELETE FROM suppressions WHERE account_id = ?1 AND channel = ?2 AND address = ?3",
            &args![account, channel, address],
        )?;
        tx.exec(
            "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
             VALUES (?1, ?2, ?3, 'erased on request', 'erasure', ?4)
             ON CONFLICT DO NOTHING",
            &args![account, channel, &erased_form(address), now],
        )?;
    }
    Ok(())
}

/// Every other table that may name the person: events (`before`: the ids [`events_of`] read
/// before the erasure changed the addresses it finds them by; the changes since made more), webhook deliveries, provider reports,
/// address collisions, consent records.
fn erase_records(
    tx: &mut dyn Tx,
    account: i64,
    p: &PersonRow,
    before: &[i64],
    e: &mut Erased,
) -> Result<()> {
    let pairs = address_pairs(p);
    for id in before {
        e.events += tx.exec(
            "UPDATE events SET data = ?2 WHERE id = ?1",
            &args![*id, ERASED_DATA],
        )?;
    }
    // Then every other event that names an address (suppressions, provider reports, the
    // changes this erasure made), or the subscriber.
    e.events += tx.exec(
        "UPDATE events SET data = ?2
         WHERE account_id = ?1 AND subscriber_id = ?3 AND data <> ?2",
        &args![account, ERASED_DATA, p.id],
    )?;
    for (plain, _) in &pairs {
        // Its subject ends with the address, or its data holds it as a JSON string.
        let quoted = format!("%\"{}\"%", like_escaped(plain));
        let ending = format!("%:{}", like_escaped(plain));
        e.events += tx.exec(
            "UPDATE events SET data = ?2
             WHERE account_id = ?1 AND data <> ?2
               AND (subject LIKE ?3 ESCAPE '\\' OR data LIKE ?4 ESCAPE '\\')",
            &args![account, ERASED_DATA, &ending, &quoted],
        )?;
    }
    const ENDPOINTS: &str = "endpoint_id IN (SELECT id FROM hook_endpoints WHERE account_id = ?1)";
    const ACCOUNT: &str = "account_id = ?1";
    replace_in(
        tx,
        account,
        ("events", "subject", ACCOUNT, Names::AtEnd),
        &pairs,
    )?;
    e.hook_deliveries += replace_in(
        tx,
        account,
        ("hook_deliveries", "subject", ENDPOINTS, Names::AtEnd),
        &pairs,
    )?;
    e.webhook_events += replace_in(
        tx,
        account,
        ("webhook_events", "address", ACCOUNT, Names::Whole),
        &pairs,
    )?;
    replace_in(
        tx,
        account,
        ("webhook_events", "job_id", ACCOUNT, Names::AtEnd),
        &pairs,
    )?;
    for (plain, _) in &pairs {
        e.address_collisions += tx.exec(
            "DELETE FROM address_collisions WHERE account_id = ?1 AND address = ?2",
            &args![account, plain],
        )?;
    }
    e.consents += tx.exec(
        "DELETE FROM consents WHERE subscriber_id = ?1",
        &args![p.id],
    )?;
    Ok(())
}

fn erase(tx: &mut dyn Tx, account: i64, key: &str, now: i64) -> Result<Erased> {
    require_account(tx, account)?;
    let now = tx.dialect().opt_out_at(tx, account, now)?;
    let p = find_person(tx, account, key, true)?;
    let erased_already = [&p.email_norm, &p.phone]
        .into_iter()
        .flatten()
        .any(|a| is_erased_form(a));
    if erased_already {
        return Err(Error::conflict(format!(
            "subscriber {} was erased already ({})",
            p.id,
            p.removed_at
                .map_or_else(|| "?".into(), sendonce_domain::clock::format_ms)
        )));
    }
    let mut e = Erased {
        subscriber_id: p.id,
        ..Erased::default()
    };
    // The events and sends first: they are found through the plain addresses.
    let before: Vec<i64> = events_of(tx, account, &p)?.iter().map(|e| e.id).collect();
    erase_sends(tx, account, &p, &mut e)?;
    erase_suppressions(tx, account, &p, now, &mut e)?;
    tx.exec(
        "UPDATE subscribers SET email = NULL, email_norm = ?2, phone = ?3, name = NULL,
                attrs = '{}', status = 'unsubscribed', removed_at = coalesce(removed_at, ?4)
         WHERE id = ?1",
        &args![
            p.id,
            &p.email_norm.as_deref().map(erased_form),
            &p.phone.as_deref().map(erased_form),
            now
        ],
    )?;
    // Last, so that the events the changes above made are erased too.
    erase_records(tx, account, &p, &before, &mut e)?;
    tx.exec(
        "INSERT INTO events (account_id, type, subject, at, subscriber_id, data)
         VALUES (?1, 'subscriber.erased', ?2, ?3, ?4, ?5)",
        &args![
            account,
            &format!("subscriber:{}", p.id),
            now,
            p.id,
            &serde_json::json!({ "subscriber_id": p.id }).to_string()
        ],
    )?;
    Ok(e)
}

impl<S: Db> Privacy for S {
    fn person_data(&self, account: i64, key: &str) -> Result<PersonData> {
        self.read(|tx| {
            tx.exec(tx.dialect().begin_snapshot, &[])?;
            let out = person_data(tx, account, key);
            tx.exec("COMMIT", &[])?;
            out
        })
    }

    fn erase_subscriber(&self, account: i64, key: &str) -> Result<Erased> {
        let now = sendonce_domain::clock::now_ms();
        self.write(|tx| {
            // SQLite: what the erasure deletes or rewrites is overwritten with zeros in the
            // file's pages, not left in their free space.
            let zeroing = tx.dialect().secure_delete;
            if let Some((on, _)) = zeroing {
                tx.scalar::<i64>(on, &[])?;
            }
            let erased = erase(tx, account, key, now);
            if let Some((_, off)) = zeroing {
                tx.scalar::<i64>(off, &[])?;
            }
            erased
        })
    }
}
