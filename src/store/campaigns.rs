//! Campaign management, backend-neutral: creation, compare-and-set transitions, status counts,
//! reports and the in-doubt queue (`Campaigns`), with their rows.

use crate::domain::address::Channel;
use crate::domain::model::CampaignStatus;
use crate::error::Result;
use std::collections::BTreeMap;

/// A campaign as stored.
#[derive(Debug, Clone)]
pub struct Campaign {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub channel: Channel,
    pub sender: Option<String>,
    pub subject: Option<String>,
    /// The text template; empty when the text part is generated from the HTML.
    pub body: String,
    /// The HTML template (email).
    pub html: Option<String>,
    pub reply_to: Option<String>,
    /// The audience filter (`domain::segment`), as written.
    pub filter: Option<String>,
    /// Appended to every SMS (copied from the account at create).
    pub sms_footer: Option<String>,
    /// The hidden one-row campaign of a one-off message (an API message, a notification), not
    /// a campaign people manage.
    pub one_off: bool,
    /// No List-Unsubscribe, and approvable without a public unsubscribe URL: marked so at
    /// create (`--transactional`), or a one-off message (always transactional).
    pub transactional: bool,
    pub status: CampaignStatus,
    pub scheduled_for: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub list_complete: bool,
}

/// A campaign to create (validated by the caller: templates checked, body not empty).
pub struct NewCampaign<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub channel: Channel,
    pub sender: Option<&'a str>,
    pub subject: Option<&'a str>,
    /// The text template; empty when the text part is generated from `html`.
    pub body: &'a str,
    pub html: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    /// The audience filter, checked by the caller (`domain::segment`).
    pub filter: Option<&'a str>,
    pub sms_footer: Option<&'a str>,
    /// The lists it targets (ids in the account); empty: every confirmed subscriber.
    pub lists: &'a [i64],
    /// Receipts and the like: no List-Unsubscribe, no public URL needed to approve.
    pub transactional: bool,
}

/// Sends per state, every state present (zero when none).
#[derive(Debug, Clone)]
pub struct StatusCounts {
    pub campaign_id: i64,
    pub status: CampaignStatus,
    pub list_complete: bool,
    pub total: u64,
    pub counts: BTreeMap<&'static str, u64>,
}

/// One recipient in a campaign report.
#[derive(Debug, Clone)]
pub struct ReportRow {
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub status: String,
    pub attempts: i64,
    pub provider_message_id: Option<String>,
    pub reason: Option<String>,
    pub sent_at: Option<i64>,
}

/// A narrowed page of a campaign's report (the dashboard's recipients search): sends whose
/// normalised address starts with `prefix` and/or in `status`, send id after `after`, at most
/// `limit`, in send id order.
#[derive(Debug, Clone, Default)]
pub struct ReportSearch {
    pub prefix: Option<String>,
    pub status: Option<crate::domain::model::SendStatus>,
    pub after: i64,
    pub limit: usize,
}

/// One subscriber as a campaign sees it: the variables its message is rendered from and
/// whether it would receive the message, for preview and test sends.
#[derive(Debug, Clone)]
pub struct RecipientRow {
    pub subscriber_id: i64,
    /// The normalised address for the campaign's channel, if the subscriber has one.
    pub address: Option<String>,
    /// The captured variables (JSON object text): the send row's when the list already holds
    /// this subscriber, else what list building would capture now.
    pub vars: String,
    /// The send row's job id and state, when the list already holds this subscriber.
    pub send: Option<(String, crate::domain::model::SendStatus)>,
    pub subscriber_status: String,
    /// Subscribed to at least one targeted list (always true for an account-wide campaign).
    pub targeted: bool,
    /// The address is on the account's suppression list for the channel.
    pub suppressed: bool,
    /// The campaign's filter keeps this subscriber (always true without a filter).
    pub matches_filter: bool,
}

/// One row in doubt.
#[derive(Debug, Clone)]
pub struct DoubtRow {
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub attempts: i64,
    pub doubt_since: Option<i64>,
    pub reason: Option<String>,
}

/// One row in doubt of an account, with its campaign (the dashboard's account-wide queue).
#[derive(Debug, Clone, PartialEq)]
pub struct AccountDoubtRow {
    pub campaign_id: i64,
    pub campaign_name: String,
    /// The campaign's channel (`email` or `sms`).
    pub channel: String,
    pub send_id: i64,
    pub job_id: String,
    pub address: String,
    pub attempts: i64,
    pub doubt_since: Option<i64>,
    pub reason: Option<String>,
}

/// Campaigns and their sends, as the CLI (and later the HTTP API) manage them.
pub trait Campaigns: Send + Sync {
    /// Create a draft; returns its id.
    fn create_campaign(&self, c: &NewCampaign<'_>) -> Result<i64>;
    fn campaign(&self, id: i64) -> Result<Campaign>;
    /// `draft -> approved`, scheduled for `at`. Content is frozen from here on.
    fn approve_campaign(&self, id: i64, at: i64) -> Result<Campaign>;
    /// `approved|sending -> paused`; leased, undispatched rows go back to the queue.
    fn pause_campaign(&self, id: i64) -> Result<Campaign>;
    /// `paused -> sending` (or back to `approved` if it had not started).
    fn resume_campaign(&self, id: i64) -> Result<Campaign>;
    /// Any non-terminal state -> `cancelled`: queued and undispatched rows are cancelled;
    /// rows whose call may be in flight keep their lease, rows in doubt stay in doubt.
    fn cancel_campaign(&self, id: i64) -> Result<Campaign>;
    /// Sends per state, every state present.
    fn status_counts(&self, id: i64) -> Result<StatusCounts>;
    /// Stream every recipient of a campaign to `f`, in send id order.
    fn report(&self, id: i64, f: &mut dyn FnMut(ReportRow) -> Result<()>) -> Result<()>;
    /// One page of a campaign's report: the recipients whose send id is after `after`, at
    /// most `limit` of them, in send id order (the HTTP API's cursor paging).
    fn report_page(&self, id: i64, after: i64, limit: usize) -> Result<Vec<ReportRow>>;
    /// A page of a campaign's report narrowed by address prefix and/or send state
    /// ([`ReportSearch`]); without either it is [`Campaigns::report_page`].
    fn report_search(&self, id: i64, q: &ReportSearch) -> Result<Vec<ReportRow>>;
    /// The account a send (of a campaign or a transactional message) belongs to; `None` when
    /// there is no send `send_id`. Front doors check it before acting on a send id.
    fn send_account(&self, send_id: i64) -> Result<Option<i64>>;
    /// Subscriber `subscriber_id` (of the campaign's account) as campaign `campaign_id` sees it.
    fn recipient(&self, campaign_id: i64, subscriber_id: i64) -> Result<RecipientRow>;
    /// The rows in doubt.
    fn doubts(&self, campaign_id: i64) -> Result<Vec<DoubtRow>>;
    /// One page of the rows in doubt of every campaign of `account_id`, in (campaign id, send
    /// id) order, after the key `after` (`(0, 0)`: from the start), at most `limit`. Read
    /// through the `sends_doubt` partial index: its cost follows the rows in doubt.
    fn account_doubts(
        &self,
        account_id: i64,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<AccountDoubtRow>>;
    /// An operator's decision on a row in doubt: delivered (`as_sent`), or not and may be
    /// sent again. Completes the campaign if that was the last open row.
    fn resolve_doubt(&self, send_id: i64, as_sent: bool) -> Result<()>;
    /// [`Campaigns::resolve_doubt`], recording who decided.
    fn resolve_doubt_by(&self, send_id: i64, as_sent: bool, by: &str) -> Result<()>;
}
