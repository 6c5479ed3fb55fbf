//! Campaigns: create a draft (content and templates checked now, not mid-send), approve it
//! (checked once more: its content is frozen from then on), pause, resume, cancel, list, the
//! counts per send state, and the per-recipient report. Outputs are this module's structs.

use super::accounts::{check_overlap, window_choice};
use super::lists::Audience;
use sendonce_domain::address::Channel;
use sendonce_domain::content::{self, Content};
use sendonce_domain::error::{Error, Result};
use sendonce_domain::model::CampaignStatus;
use sendonce_domain::segment::Filter;
use sendonce_domain::template::Sources;
use sendonce_domain::{sms, template};
use sendonce_store::prelude::*;
use sendonce_store::{AudienceQuery, NewCampaign, SendWindows, Store};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A campaign's content, checked as the sending side will check it (before any store is
/// opened: these rules need none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Draft {
    /// Trimmed, never empty.
    pub name: String,
    pub channel: Channel,
    pub sender: Option<String>,
    pub subject: Option<String>,
    /// The text template; empty when an email's text part is generated from `html`.
    pub body: String,
    /// The HTML template (email).
    pub html: Option<String>,
    pub reply_to: Option<String>,
    /// The audience filter on subscriber attributes (`domain::segment`).
    pub filter: Option<String>,
    /// Receipts, password resets and the like: no List-Unsubscribe, and approvable without a
    /// public unsubscribe URL.
    pub transactional: bool,
    /// `HH:MM-HH:MM`, or `any`: none; None: the account's default (none when transactional).
    pub send_window: Option<String>,
    /// SMS quiet hours `HH:MM-HH:MM`, or `off`; None: the account's (none when
    /// transactional).
    pub sms_hours: Option<String>,
}

impl Draft {
    /// A text-only draft, checked.
    pub fn new(
        name: &str,
        channel: Channel,
        sender: Option<&str>,
        subject: Option<&str>,
        body: String,
    ) -> Result<Draft> {
        Draft {
            name: name.to_string(),
            channel,
            sender: sender.map(str::to_string),
            subject: subject.map(str::to_string),
            body,
            ..Default::default()
        }
        .checked()
    }

    /// This draft with its name trimmed and its content checked (the account's SMS footer is
    /// counted in again at create).
    pub fn checked(mut self) -> Result<Draft> {
        if self.name.trim().is_empty() {
            return Err(Error::invalid("the campaign name is empty"));
        }
        self.name = self.name.trim().to_string();
        self.filter = self.filter.filter(|f| !f.trim().is_empty());
        content::check(&self.content(None))?;
        if let Some(w) = &self.send_window {
            window_choice(w, "any", "--send-window (send_window)")?;
        }
        if let Some(w) = &self.sms_hours {
            if self.channel == Channel::Email {
                return Err(Error::invalid(
                    "SMS quiet hours (--sms-hours, sms_hours) apply to SMS campaigns only",
                ));
            }
            window_choice(w, "off", "--sms-hours (sms_hours)")?;
        }
        Ok(self)
    }

    /// The windows this draft gets: its own, else the account's defaults (`acct`; none for a
    /// transactional campaign), with the account's zone. Both windows must share some hours,
    /// or no SMS could ever go out.
    fn windows(&self, acct: SendWindows) -> Result<SendWindows> {
        let inherit = |own: &Option<String>, none: &str, flag: &str, dflt: Option<String>| match own
        {
            Some(v) => window_choice(v, none, flag),
            None if self.transactional => Ok(None),
            None => Ok(dflt),
        };
        let window = inherit(&self.send_window, "any", "--send-window", acct.window)?;
        let sms_hours = match self.channel {
            Channel::Sms => inherit(&self.sms_hours, "off", "--sms-hours", acct.sms_hours)?,
            Channel::Email => None,
        };
        check_overlap(window.as_deref(), sms_hours.as_deref())?;
        let any = window.is_some() || sms_hours.is_some();
        Ok(SendWindows {
            tz: any.then(|| acct.tz.unwrap_or_else(|| "UTC".into())),
            window,
            sms_hours,
        })
    }

    fn content<'a>(&'a self, sms_footer: Option<&'a str>) -> Content<'a> {
        Content {
            channel: self.channel,
            sender: self.sender.as_deref(),
            subject: self.subject.as_deref(),
            body: &self.body,
            html: self.html.as_deref(),
            reply_to: self.reply_to.as_deref(),
            sms_footer,
        }
    }

    fn sources(&self) -> Sources<'_> {
        Sources {
            subject: self.subject.as_deref(),
            text: Some(self.body.as_str()).filter(|b| !b.is_empty()),
            html: self.html.as_deref(),
        }
    }
}

/// A new draft's id; for SMS, what the body costs before variables; its send windows.
#[derive(Debug, Clone, Serialize)]
pub struct Created {
    pub id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sms: Option<sms::Segments>,
    /// The zone windows are read in when a recipient's own is unknown (None: no window).
    pub tz: Option<String>,
    pub send_window: Option<String>,
    pub sms_hours: Option<String>,
}

/// What create checked of a draft against the store, before anything is written.
struct Checked {
    account: i64,
    lists: Vec<i64>,
    footer: Option<String>,
    filter: Option<Filter>,
    windows: SendWindows,
}

/// The checks of [`create`] (read-only): the account and lists exist, the content with the
/// account's SMS footer, the templates against the account's subscribers, and the audience
/// filter (its syntax, and every field a built-in or an attribute some subscriber has).
fn check(store: &Store, account: &str, draft: &Draft, lists: &[String]) -> Result<Checked> {
    let account = store.resolve_account(account)?;
    let lists = super::lists::resolve(store, account, lists)?;
    let footer = match draft.channel {
        Channel::Sms => store.sms_footer(account)?,
        Channel::Email => None,
    };
    content::check(&draft.content(footer.as_deref()))?;
    let attrs = store.attribute_names(account)?;
    let filter = draft.filter.as_deref().map(Filter::parse).transpose()?;
    if let Some(f) = &filter {
        f.check_fields(&attrs)?;
    }
    // Variables are checked against the subscribers this campaign would reach.
    let counts = store.variable_counts_for(&AudienceQuery {
        account_id: account,
        channel: draft.channel,
        lists: &lists,
        filter: filter.as_ref(),
    })?;
    template::check_all(&draft.sources(), &attrs, &counts)?;
    let windows = draft.windows(store.send_defaults(account)?)?;
    Ok(Checked {
        account,
        lists,
        footer,
        filter,
        windows,
    })
}

/// Create `draft` for `account` (id or name), targeting `lists` (ids or names; none: every
/// confirmed subscriber) and the subscribers its filter matches: its templates are checked
/// against the account's subscribers (every variable known, and present where it is printed).
/// An SMS campaign takes the account's footer now and keeps it.
pub fn create(store: &Store, account: &str, draft: &Draft, lists: &[String]) -> Result<Created> {
    let Checked {
        account,
        lists,
        footer,
        windows,
        ..
    } = check(store, account, draft, lists)?;
    let id = store.create_campaign(&NewCampaign {
        account_id: account,
        name: &draft.name,
        channel: draft.channel,
        sender: draft.sender.as_deref(),
        subject: draft.subject.as_deref(),
        body: &draft.body,
        html: draft.html.as_deref(),
        reply_to: draft.reply_to.as_deref(),
        filter: draft.filter.as_deref(),
        sms_footer: footer.as_deref(),
        lists: &lists,
        transactional: draft.transactional,
        windows: &windows,
    })?;
    // The template before rendering: variables change the length per recipient.
    let sms = (draft.channel == Channel::Sms)
        .then(|| sms::segments(&content::sms_with_footer(&draft.body, footer.as_deref())));
    Ok(Created {
        id,
        sms,
        tz: windows.tz,
        send_window: windows.window,
        sms_hours: windows.sms_hours,
    })
}

/// `campaign create --dry-run`: the checks of [`create`], then the audience counts the
/// campaign would have (the numbers `campaign audience` gives once it is created); writes
/// nothing.
pub fn dry_run(store: &Store, account: &str, draft: &Draft, lists: &[String]) -> Result<Audience> {
    let c = check(store, account, draft, lists)?;
    let counts = store.audience_counts_for(&AudienceQuery {
        account_id: c.account,
        channel: draft.channel,
        lists: &c.lists,
        filter: c.filter.as_ref(),
    })?;
    Ok(Audience::new(
        None,
        draft.channel,
        c.lists,
        draft.filter.clone(),
        counts,
    ))
}

/// An approved campaign and when it starts.
#[derive(Debug, Clone, Serialize)]
pub struct Approved {
    pub id: i64,
    pub status: CampaignStatus,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub scheduled_for: i64,
    /// Subscribers the campaign would reach if it started now (before suppressions); the list
    /// itself is built when it starts.
    pub audience: u64,
    /// Said when the audience is empty: the campaign would end `sent (0 recipients)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Whether approving a campaign that reaches nobody is refused (`--strict`) or only warned of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Empty {
    Warn,
    Refuse,
}

/// Whether approving campaign `id` needs a working unsubscribe URL: an email campaign that
/// is not transactional (its messages carry List-Unsubscribe, which must point somewhere).
pub fn needs_unsubscribe_url(store: &Store, id: i64) -> Result<bool> {
    let c = store.campaign(id)?;
    Ok(c.channel == Channel::Email && !c.transactional)
}

/// Approve campaign `id` to start at `at` (Unix ms). Its content is frozen from here on, so it
/// is checked once more, and its templates against the subscribers added since create. An
/// email campaign that is not transactional needs `links` (the public URL and secret its
/// List-Unsubscribe links are made with).
pub fn approve(
    store: &Store,
    id: i64,
    at: i64,
    links: Option<&sendonce_domain::links::Links>,
    empty: Empty,
) -> Result<Approved> {
    let c = store.campaign(id)?;
    if c.channel == Channel::Email && !c.transactional && links.is_none() {
        return Err(Error::invalid(format!(
            "campaign {id} cannot be approved: its emails must carry a working unsubscribe \
             link (List-Unsubscribe), and no public URL is configured. Give one with \
             --public-url URL, the {} environment variable or public_url in the config file \
             (the address where `sendonce serve` answers /u/...), and set {} (at least {} \
             bytes, e.g. `openssl rand -hex 32`). A receipt-like campaign can be created with \
             --transactional instead",
            sendonce_domain::links::PUBLIC_URL_ENV,
            sendonce_domain::links::SECRET_ENV,
            sendonce_domain::links::MIN_SECRET_LEN,
        )));
    }
    content::check(&Content {
        channel: c.channel,
        sender: c.sender.as_deref(),
        subject: c.subject.as_deref(),
        body: &c.body,
        html: c.html.as_deref(),
        reply_to: c.reply_to.as_deref(),
        sms_footer: c.sms_footer.as_deref(),
    })
    .map_err(|e| {
        e.context(&format!(
            "campaign {id} cannot be approved (it would fail for every recipient)"
        ))
    })?;
    let attrs = store.attribute_names(c.account_id)?;
    let filter = c
        .filter
        .as_deref()
        .map(|f| Filter::parse_stored(f, id))
        .transpose()?;
    let lists = store.campaign_lists(id)?;
    let counts = store.variable_counts_for(&AudienceQuery {
        account_id: c.account_id,
        channel: c.channel,
        lists: &lists,
        filter: filter.as_ref(),
    })?;
    let src = Sources {
        subject: c.subject.as_deref(),
        text: Some(c.body.as_str()).filter(|b| !b.is_empty()),
        html: c.html.as_deref(),
    };
    template::check_all(&src, &attrs, &counts)
        .map_err(|e| e.context(&format!("campaign {id} cannot be approved")))?;
    let warning = (counts.total == 0).then(|| nobody(id, c.channel, filter.is_some()));
    if let (Some(w), Empty::Refuse) = (&warning, empty) {
        return Err(Error::invalid(format!("{w} (refused with --strict)")));
    }
    let c = store.approve_campaign(id, at)?;
    Ok(Approved {
        id,
        status: c.status,
        scheduled_for: at,
        audience: counts.total,
        warning,
    })
}

/// What `approve` says of a campaign whose audience is empty right now.
fn nobody(id: i64, channel: Channel, filtered: bool) -> String {
    let address = match channel {
        Channel::Email => "an email address",
        Channel::Sms => "a phone number",
    };
    let filtered = if filtered {
        " and matches its filter"
    } else {
        ""
    };
    format!(
        "campaign {id} reaches nobody right now: no confirmed subscriber with {address} is in \
         its audience{filtered}; it will end `sent (0 recipients)` unless some arrive before it \
         starts"
    )
}

/// A campaign and the state a transition left it in.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    pub id: i64,
    pub status: CampaignStatus,
}

/// Stop claiming for campaign `id`; in-flight calls finish.
pub fn pause(store: &Store, id: i64) -> Result<Transition> {
    transition(store.pause_campaign(id)?)
}

/// Resume a paused campaign.
pub fn resume(store: &Store, id: i64) -> Result<Transition> {
    transition(store.resume_campaign(id)?)
}

/// Cancel a campaign; its queued sends are cancelled.
pub fn cancel(store: &Store, id: i64) -> Result<Transition> {
    transition(store.cancel_campaign(id)?)
}

fn transition(c: sendonce_store::Campaign) -> Result<Transition> {
    Ok(Transition {
        id: c.id,
        status: c.status,
    })
}

/// A campaign state named by a person: draft, approved, sending, paused, sent, cancelled.
pub fn parse_status(s: &str) -> Result<CampaignStatus> {
    CampaignStatus::parse(s).ok_or_else(|| {
        Error::invalid(format!(
            "unknown campaign status {s:?} (draft, approved, sending, paused, sent, cancelled)"
        ))
    })
}

/// One line of the campaign list.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: i64,
    pub account_id: i64,
    pub account: String,
    pub name: String,
    pub channel: String,
    pub status: String,
    #[serde(serialize_with = "sendonce_domain::clock::ser_opt_ms")]
    pub scheduled_for: Option<i64>,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

/// Campaigns, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct Campaigns {
    pub campaigns: Vec<Listed>,
}

/// The campaigns of `account` (id or name; every account's when `None`), optionally only
/// those in `status`.
pub fn list(
    store: &Store,
    account: Option<&str>,
    status: Option<CampaignStatus>,
) -> Result<Campaigns> {
    let account = account.map(|a| store.resolve_account(a)).transpose()?;
    let campaigns = store
        .list_campaigns(account, status)?
        .into_iter()
        .map(|c| Listed {
            id: c.id,
            account_id: c.account_id,
            account: c.account,
            name: c.name,
            channel: c.channel.to_string(),
            status: c.status.to_string(),
            scheduled_for: c.scheduled_for,
            created_at: c.created_at,
        })
        .collect();
    Ok(Campaigns { campaigns })
}

/// A campaign's state and how many of its sends are in each send state (`queued`, `leased`,
/// `sent`, ... side by side with the other fields).
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub id: i64,
    pub status: CampaignStatus,
    pub total: u64,
    pub list_complete: bool,
    #[serde(flatten)]
    pub counts: BTreeMap<&'static str, u64>,
    /// When a sending campaign's open rows are all waiting (a send window, a retry's backoff,
    /// a lease): the earliest one is due then.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "sendonce_domain::clock::ser_opt_ms"
    )]
    pub next_due: Option<i64>,
}

impl Status {
    fn count(&self, state: &str) -> u64 {
        self.counts.get(state).copied().unwrap_or(0)
    }

    /// Sends not finished yet (queued or leased).
    pub fn open(&self) -> u64 {
        self.count("queued") + self.count("leased")
    }

    /// No longer sending: nothing more will change without an operator.
    pub fn settled(&self) -> bool {
        use CampaignStatus::*;
        matches!(self.status, Sent | Cancelled | Draft)
            || (self.status == Sending && self.open() == 0 && self.list_complete)
    }
}

/// The counts of campaign `id`.
pub fn status(store: &Store, id: i64) -> Result<Status> {
    let s = store.status_counts(id)?;
    let mut st = Status {
        id,
        status: s.status,
        total: s.total,
        list_complete: s.list_complete,
        counts: s.counts,
        next_due: None,
    };
    if st.status == CampaignStatus::Sending && st.open() > 0 {
        let now = sendonce_domain::clock::now_ms();
        st.next_due = store.next_visible(id)?.filter(|&at| at > now);
    }
    Ok(st)
}

/// Campaign `id` if it belongs to `account_id`; a campaign of another account is `NotFound`,
/// worded as an id that does not exist (a front door never tells the two apart).
pub fn owned(store: &Store, account_id: i64, id: i64) -> Result<sendonce_store::Campaign> {
    let c = store.campaign(id)?;
    // A stream is no campaign people manage: its API messages are followed as messages
    // (`/v1/messages/{id}`).
    if c.account_id != account_id || c.one_off {
        return Err(Error::not_found(format!("unknown campaign id {id}")));
    }
    Ok(c)
}

/// Following a campaign needs to see other processes' writes: a read-only snapshot of the file
/// at `db` cannot.
pub fn check_followable(store: &Store, db: &Path) -> Result<()> {
    if store.file().is_some_and(|f| f.is_snapshot()) {
        return Err(Error::invalid(format!(
            "cannot follow {}: it is read-only in a directory you cannot write, so SQLite \
             cannot see other processes' writes (run without --watch, or as a user who can \
             write the directory)",
            db.display()
        )));
    }
    Ok(())
}

/// One recipient of a campaign in its report.
#[derive(Debug, Clone, Serialize)]
pub struct ReportLine {
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub status: String,
    pub attempts: i64,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
    #[serde(serialize_with = "sendonce_domain::clock::ser_opt_ms")]
    pub sent_at: Option<i64>,
}

impl From<sendonce_store::ReportRow> for ReportLine {
    fn from(r: sendonce_store::ReportRow) -> Self {
        ReportLine {
            send_id: r.send_id,
            job_id: r.job_id,
            address: r.address,
            status: r.status,
            attempts: r.attempts,
            provider_message_id: r.provider_message_id,
            reason: r.reason,
            sent_at: r.sent_at,
        }
    }
}

/// Every recipient of campaign `id`, streamed to `f` in send id order.
pub fn report(store: &Store, id: i64, mut f: impl FnMut(ReportLine) -> Result<()>) -> Result<()> {
    store.report(id, &mut |r| f(r.into()))
}

/// One page of a report; `next_after` is the cursor of the next page (`null`: none).
#[derive(Debug, Clone, Serialize)]
pub struct ReportPage {
    pub campaign_id: i64,
    pub lines: Vec<ReportLine>,
    pub next_after: Option<i64>,
}

/// The recipients of campaign `id` after send id `after`, at most `limit` (checked against
/// `limits::PAGE`).
pub fn report_page(store: &Store, id: i64, after: i64, limit: usize) -> Result<ReportPage> {
    let limit = super::limits::count_in("limit", limit, super::limits::PAGE)?;
    let lines: Vec<ReportLine> = store
        .report_page(id, after, limit)?
        .into_iter()
        .map(ReportLine::from)
        .collect();
    let next_after = super::limits::next_after(lines.len(), limit, lines.last().map(|l| l.send_id));
    Ok(ReportPage {
        campaign_id: id,
        lines,
        next_after,
    })
}

/// The recipients of campaign `id` whose normalised address starts with `prefix` (email
/// addresses are compared lower-cased) and/or whose send is in state `status`, after send id
/// `after`, at most `limit` (the dashboard's search).
pub fn report_search(
    store: &Store,
    id: i64,
    prefix: Option<&str>,
    status: Option<&str>,
    after: i64,
    limit: usize,
) -> Result<ReportPage> {
    let limit = super::limits::count_in("limit", limit, super::limits::PAGE)?;
    let status = status
        .map(|s| {
            sendonce_domain::model::SendStatus::parse(s).ok_or_else(|| {
                Error::invalid(format!(
                    "unknown send state {s:?} (queued, leased, sent, failed, suppressed, \
                     in_doubt, cancelled)"
                ))
            })
        })
        .transpose()?;
    let prefix = prefix
        .map(|p| p.trim().to_lowercase())
        .filter(|p| !p.is_empty());
    let q = sendonce_store::ReportSearch {
        prefix,
        status,
        after,
        limit,
    };
    let lines: Vec<ReportLine> = store
        .report_search(id, &q)?
        .into_iter()
        .map(ReportLine::from)
        .collect();
    let next_after = super::limits::next_after(lines.len(), limit, lines.last().map(|l| l.send_id));
    Ok(ReportPage {
        campaign_id: id,
        lines,
        next_after,
    })
}

/// The report's CSV columns.
pub const REPORT_CSV_HEADER: [&str; 8] = [
    "send_id",
    "job_id",
    "address",
    "status",
    "attempts",
    "provider_message_id",
    "reason",
    "sent_at",
];

/// Rows read per page by [`write_report_csv`].
const CSV_PAGE: usize = 1000;

/// Every recipient of campaign `id` as CSV to `out` (the CLI's `campaign report` and the
/// dashboard's download): cells a spreadsheet would run as formulas neutralised, times in
/// RFC 3339. A failed write is `ErrorKind::ClosedOutput` when the reader went away.
pub fn write_report_csv(store: &Store, id: i64, out: &mut impl std::io::Write) -> Result<()> {
    // Keyset pages, each its own short read: no statement or read transaction stays open while
    // the rows are written to a reader that may be slow (a browser's download, a pipe). The
    // first is read before the header, so an unknown campaign writes nothing.
    let mut page = store.report_page(id, 0, CSV_PAGE)?;
    let mut csvw = csv::Writer::from_writer(out);
    csvw.write_record(REPORT_CSV_HEADER).map_err(csv_output)?;
    while let Some(last) = page.last() {
        let after = last.send_id;
        let full = page.len() == CSV_PAGE;
        for r in page {
            csvw.write_record([
                r.send_id.to_string(),
                csv_cell(r.job_id),
                csv_cell(r.address),
                r.status,
                r.attempts.to_string(),
                csv_cell(r.provider_message_id.unwrap_or_default()),
                csv_cell(r.reason.unwrap_or_default()),
                r.sent_at
                    .map(sendonce_domain::clock::format_ms)
                    .unwrap_or_default(),
            ])
            .map_err(csv_output)?;
        }
        if !full {
            break;
        }
        page = store.report_page(id, after, CSV_PAGE)?;
    }
    csvw.flush().map_err(Error::output)
}

/// A failed write of CSV output; a closed pipe stays recognisable as one.
fn csv_output(e: csv::Error) -> Error {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => Error::output(io),
        other => Error::invalid(format!("cannot write the CSV report: {other:?}")),
    }
}

/// A CSV cell a spreadsheet will not run as a formula (OWASP "CSV injection"): text starting
/// with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`. A phone number
/// `+351...` reads `'+351...` in the file and shows as `+351...` in a spreadsheet.
pub fn csv_cell(s: String) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_is_checked_before_any_store() {
        let e = Draft::new(" ", Channel::Sms, None, None, "hi".into()).unwrap_err();
        assert_eq!(e.message, "the campaign name is empty");
        assert!(Draft::new("n", Channel::Email, None, Some("s"), "hi".into()).is_err());
        let d = Draft::new(" News ", Channel::Sms, None, None, "hi".into()).unwrap();
        assert_eq!(d.name, "News");
    }

    #[test]
    fn status_counts_sit_beside_the_fields_and_settle_when_nothing_is_open() {
        let mut s = Status {
            id: 7,
            status: CampaignStatus::Sending,
            total: 2,
            list_complete: true,
            counts: BTreeMap::from([("queued", 1), ("leased", 0), ("sent", 1)]),
            next_due: None,
        };
        let doc = serde_json::to_value(&s).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({"id": 7, "status": "sending", "total": 2, "list_complete": true,
                               "queued": 1, "leased": 0, "sent": 1})
        );
        assert_eq!(s.open(), 1);
        assert!(!s.settled());
        s.counts.insert("queued", 0);
        assert!(s.settled());
        s.list_complete = false;
        assert!(!s.settled());
        s.status = CampaignStatus::Cancelled;
        assert!(s.settled());
    }
}
