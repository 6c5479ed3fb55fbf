//! Subscriber lists of an account: create, list, show, remove, the lists a command names
//! (by id or name) resolved to ids, and a campaign's audience counts. Outputs are this
//! module's structs.

use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::segment::Filter;
use sendonce_store::prelude::*;
use sendonce_store::{
    AudienceCounts, AudienceQuery, ConfirmContent, ListChange, ListRow, NewList, OptIn, Store,
};
use serde::Serialize;

/// One list as shown to people and machines, with its members counted per status.
#[derive(Debug, Clone, Serialize)]
pub struct List {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub description: Option<String>,
    /// `single` or `double`.
    pub optin: &'static str,
    /// Takes signups from the public form (`/subscribe`, `/subscribe/{id}`).
    pub public: bool,
    /// A double opt-in list's confirmation message (`null` subject or body: the defaults).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirm: Option<ConfirmView>,
    pub subscribed: u64,
    pub unsubscribed: u64,
    pub pending: u64,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

/// The confirmation message of a double opt-in list.
#[derive(Debug, Clone, Serialize)]
pub struct ConfirmView {
    pub from: Option<String>,
    pub subject: Option<String>,
    pub body: Option<String>,
}

impl From<ListRow> for List {
    fn from(r: ListRow) -> Self {
        let confirm = (r.optin == OptIn::Double).then_some(ConfirmView {
            from: r.confirm_from,
            subject: r.confirm_subject,
            body: r.confirm_body,
        });
        List {
            public: r.public,
            confirm,
            id: r.id,
            account_id: r.account_id,
            name: r.name,
            description: r.description,
            optin: r.optin.as_str(),
            subscribed: r.subscribed,
            unsubscribed: r.unsubscribed,
            pending: r.pending,
            created_at: r.created_at,
        }
    }
}

/// A list to create: `optin` is `single` or `double`; a double opt-in list needs
/// `confirm.from`, the sender of its confirmation messages.
#[derive(Debug, Clone, Default)]
pub struct NewListRequest<'a> {
    pub account: &'a str,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub optin: &'a str,
    /// Takes signups from the public form.
    pub public: bool,
    pub confirm: ConfirmContent<'a>,
}

/// Check a list's confirmation content, blank fields as unset; the result holds the values to
/// store (a blank subject or body: the default).
fn confirm_content<'a>(optin: OptIn, c: &ConfirmContent<'a>) -> Result<ConfirmContent<'a>> {
    let set = |s: Option<&'a str>| s.filter(|v| !v.trim().is_empty());
    let c = ConfirmContent {
        from: set(c.from).map(str::trim),
        subject: set(c.subject),
        body: set(c.body),
    };
    if optin == OptIn::Single {
        if c.from.is_some() || c.subject.is_some() || c.body.is_some() {
            return Err(Error::invalid(
                "--confirm-from, --confirm-subject and --confirm-body-file are for double opt-in \
                 lists (--optin double): a single opt-in list sends no confirmation",
            ));
        }
        return Ok(c);
    }
    let Some(from) = c.from else {
        return Err(Error::invalid(
            "a double opt-in list needs --confirm-from, the sender of its confirmation \
             messages (`news@example.org` or `News <news@example.org>`)",
        ));
    };
    sendonce_domain::optin::check(from, c.subject, c.body)?;
    Ok(c)
}

/// Create a list in an account; returns it.
pub fn create(store: &Store, req: &NewListRequest<'_>) -> Result<List> {
    if req.name.trim().bytes().all(|b| b.is_ascii_digit()) && !req.name.trim().is_empty() {
        return Err(Error::invalid(format!(
            "the list name {:?} is all digits: commands take a list by id or by name, so it \
             would read as an id; add a letter",
            req.name.trim()
        )));
    }
    let account_id = store.resolve_account(req.account)?;
    let optin = OptIn::parse(req.optin)?;
    let confirm = confirm_content(optin, &req.confirm)?;
    let id = store.create_list(&NewList {
        account_id,
        name: req.name,
        description: req.description.filter(|d| !d.trim().is_empty()),
        optin,
        public: req.public,
        confirm,
    })?;
    Ok(store.find_list(account_id, &id.to_string())?.into())
}

/// A change to a list: `public` set or cleared, confirmation content replaced (`None`: kept).
#[derive(Debug, Clone, Default)]
pub struct ListUpdate<'a> {
    pub account: &'a str,
    pub list: &'a str,
    pub public: Option<bool>,
    pub confirm: ConfirmContent<'a>,
}

/// Change a list; returns it as it now is. The confirmation content is checked whole, the
/// stored values standing in for the fields not given.
pub fn update(store: &Store, u: &ListUpdate<'_>) -> Result<List> {
    let account_id = store.resolve_account(u.account)?;
    let row = store.find_list(account_id, u.list)?;
    let given = ConfirmContent {
        from: u.confirm.from.or(row.confirm_from.as_deref()),
        subject: u.confirm.subject.or(row.confirm_subject.as_deref()),
        body: u.confirm.body.or(row.confirm_body.as_deref()),
    };
    let whole = confirm_content(row.optin, &given)?;
    let confirm = ConfirmContent {
        from: u.confirm.from.and(whole.from),
        subject: u.confirm.subject.and(whole.subject),
        body: u.confirm.body.and(whole.body),
    };
    store.update_list(
        account_id,
        row.id,
        &ListChange {
            public: u.public,
            confirm,
        },
    )?;
    Ok(store.find_list(account_id, &row.id.to_string())?.into())
}

/// An account's lists, by name.
#[derive(Debug, Clone, Serialize)]
pub struct Lists {
    pub lists: Vec<List>,
}

/// The lists of an account.
pub fn list(store: &Store, account: &str) -> Result<Lists> {
    let account_id = store.resolve_account(account)?;
    Ok(Lists {
        lists: store
            .lists(account_id)?
            .into_iter()
            .map(List::from)
            .collect(),
    })
}

/// One list of an account, by id or name.
pub fn show(store: &Store, account: &str, list: &str) -> Result<List> {
    let account_id = store.resolve_account(account)?;
    Ok(store.find_list(account_id, list)?.into())
}

/// A removed list and how many memberships went with it.
#[derive(Debug, Clone, Serialize)]
pub struct Removed {
    pub id: i64,
    pub name: String,
    pub memberships_removed: u64,
}

/// Remove a list and its memberships; refused while an approved, sending or paused campaign
/// targets it.
pub fn remove(store: &Store, account: &str, list: &str) -> Result<Removed> {
    let account_id = store.resolve_account(account)?;
    let row = store.find_list(account_id, list)?;
    let memberships_removed = store.remove_list(account_id, row.id)?;
    Ok(Removed {
        id: row.id,
        name: row.name,
        memberships_removed,
    })
}

/// The ids of the lists `keys` (ids or names) of an account, each once, in the order given;
/// an unknown one is `NotFound`.
pub fn resolve(store: &Store, account_id: i64, keys: &[String]) -> Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(keys.len());
    for key in keys {
        let id = store.find_list(account_id, key)?.id;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Who a campaign's targets would reach now, and who they leave out and why.
#[derive(Debug, Clone, Serialize)]
pub struct Audience {
    /// The campaign; `null` for a draft not created (`campaign create --dry-run`).
    pub campaign_id: Option<i64>,
    pub channel: Channel,
    /// The targeted lists (ids); empty: every subscriber of the account.
    pub lists: Vec<i64>,
    /// The audience filter as written (`domain::segment`); `null`: none.
    pub filter: Option<String>,
    /// Distinct normalised addresses that would get a message.
    pub would_receive: u64,
    /// Targeted subscribers left out because another one has the same normalised address.
    pub duplicates: u64,
    /// Addresses on the account's suppression list.
    pub suppressed: u64,
    /// Targeted only through memberships they unsubscribed from.
    pub unsubscribed: u64,
    /// The subscriber is not confirmed (a double opt-in signup that has not confirmed yet is
    /// `pending`), or its memberships in the campaign's lists are pending.
    pub unconfirmed: u64,
    /// No address for the campaign's channel.
    pub no_address: u64,
    /// Reachable otherwise, but the audience filter excludes them.
    pub filtered_out: u64,
}

impl Audience {
    /// The output for these targets and the counts the store gave for them.
    pub fn new(
        campaign_id: Option<i64>,
        channel: Channel,
        lists: Vec<i64>,
        filter: Option<String>,
        counts: AudienceCounts,
    ) -> Audience {
        let AudienceCounts {
            would_receive,
            duplicates,
            suppressed,
            unsubscribed,
            unconfirmed,
            no_address,
            filtered_out,
        } = counts;
        Audience {
            campaign_id,
            channel,
            lists,
            filter,
            would_receive,
            duplicates,
            suppressed,
            unsubscribed,
            unconfirmed,
            no_address,
            filtered_out,
        }
    }
}

/// The audience counts of campaign `id`, in any state (read-only). A stored filter that no
/// longer parses is `Damaged`.
pub fn audience(store: &Store, id: i64) -> Result<Audience> {
    let c = store.campaign(id)?;
    let lists = store.campaign_lists(id)?;
    let filter = c
        .filter
        .as_deref()
        .map(|f| Filter::parse_stored(f, id))
        .transpose()?;
    let counts = store.audience_counts_for(&AudienceQuery {
        account_id: c.account_id,
        channel: c.channel,
        lists: &lists,
        filter: filter.as_ref(),
    })?;
    Ok(Audience::new(Some(id), c.channel, lists, c.filter, counts))
}

/// The most members one page of [`members`] shows.
pub const MEMBERS_PAGE: usize = 100;

/// One member of a list, as the dashboard shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub id: i64,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub name: Option<String>,
    /// The subscriber's status (`confirmed`, `pending`, ...).
    pub status: String,
    /// The membership's status in this list (`subscribed`, `unsubscribed`, `pending`).
    pub membership: String,
    #[serde(serialize_with = "sendonce_domain::clock::ser_ms")]
    pub created_at: i64,
}

/// A page of a list's members, and the cursor of the next page (`None`: this is the last).
#[derive(Debug, Clone, Serialize)]
pub struct Members {
    pub members: Vec<Member>,
    pub next: Option<String>,
}

/// Which members of a list to show: `search` is the start of an email address or of a phone
/// number (`+` or a digit first), `membership` one membership status, `after` the cursor a
/// previous page gave.
#[derive(Debug, Clone, Copy)]
pub struct MembersQuery<'a> {
    pub account: &'a str,
    pub list: i64,
    pub search: Option<&'a str>,
    pub membership: Option<&'a str>,
    pub after: Option<&'a str>,
}

/// One page of a list's members ([`MEMBERS_PAGE`] at most), through an index: the list's
/// memberships in id order, or the account's email or phone index over the searched prefix.
/// A list of another account is `NotFound`.
pub fn members(store: &Store, q: &MembersQuery<'_>) -> Result<Members> {
    use sendonce_store::{MemberOrder, MemberPage};
    let account_id = store.resolve_account(q.account)?;
    let list = store.find_list(account_id, &q.list.to_string())?;
    let membership = q.membership.map(str::trim).filter(|m| !m.is_empty());
    if let Some(m) = membership {
        if !["subscribed", "unsubscribed", "pending"].contains(&m) {
            return Err(Error::invalid(format!(
                "unknown membership status {m:?} (subscribed, unsubscribed or pending)"
            )));
        }
    }
    let search = q.search.map(str::trim).filter(|s| !s.is_empty());
    let lower = search.map(str::to_lowercase);
    let after = q.after.filter(|a| !a.is_empty());
    let order = match (search, lower.as_deref()) {
        (Some(s), _) if super::suppressions::channel_of(s) == Channel::Sms => {
            MemberOrder::Phone { prefix: s, after }
        }
        (Some(_), Some(l)) => MemberOrder::Email { prefix: l, after },
        _ => MemberOrder::Id {
            after: after.map_or(Ok(0), |a| {
                a.parse::<i64>()
                    .map_err(|_| Error::invalid(format!("the page cursor {a:?} is not an id")))
            })?,
        },
    };
    let rows = store.list_members(&MemberPage {
        account_id,
        list_id: list.id,
        membership,
        order,
        limit: MEMBERS_PAGE,
    })?;
    let next = (rows.len() == MEMBERS_PAGE)
        .then(|| rows.last())
        .flatten()
        .and_then(|r| match order {
            MemberOrder::Id { .. } => Some(r.subscriber.id.to_string()),
            MemberOrder::Email { .. } => r.email_norm.clone(),
            MemberOrder::Phone { .. } => r.subscriber.phone.clone(),
        });
    let members = rows
        .into_iter()
        .map(|r| Member {
            id: r.subscriber.id,
            email: r.subscriber.email,
            phone: r.subscriber.phone,
            name: r.subscriber.name,
            status: r.subscriber.status,
            membership: r.membership,
            created_at: r.subscriber.created_at,
        })
        .collect();
    Ok(Members { members, next })
}

/// The source recorded by an unsubscribe made from the dashboard.
pub const DASHBOARD_SOURCE: &str = "dashboard";

/// A subscriber's membership of a list, before an unsubscribe: who, which list, its status
/// there (`None`: not a member).
#[derive(Debug, Clone, Serialize)]
pub struct Membership {
    pub list: List,
    pub subscriber: super::subscribers::Subscriber,
    pub status: Option<String>,
}

/// The channel and normalised address an unsubscribe of `s` goes by: its email address, else
/// its phone number.
fn unsubscribe_address(s: &sendonce_store::SubscriberRow) -> Result<(Channel, String)> {
    match (&s.email, &s.phone) {
        (Some(e), _) => Ok((
            Channel::Email,
            sendonce_domain::address::normalize_email(e)?.1,
        )),
        (None, Some(p)) => Ok((Channel::Sms, p.clone())),
        (None, None) => Err(Error::damaged(format!(
            "subscriber {} has neither an email address nor a phone number",
            s.id
        ))),
    }
}

/// Subscriber `subscriber` (an id) in list `list` (an id) of `account`: `NotFound` when either
/// is not the account's.
pub fn membership(store: &Store, account: &str, list: i64, subscriber: i64) -> Result<Membership> {
    let account_id = store.resolve_account(account)?;
    let list = store.find_list(account_id, &list.to_string())?;
    let row = store.find_subscriber(account_id, &subscriber.to_string())?;
    if row.id != subscriber {
        return Err(Error::not_found(format!("no subscriber {subscriber}")));
    }
    let (channel, address) = unsubscribe_address(&row)?;
    let state = store.link_state(account_id, channel, &address, &[list.id])?;
    let status = state.lists.into_iter().next().and_then(|l| l.status);
    Ok(Membership {
        list: list.into(),
        subscriber: row.into(),
        status,
    })
}

/// Unsubscribe a subscriber from one list as its unsubscribe link would: the membership becomes
/// `unsubscribed` (kept, so adding the address again does not resubscribe it), no suppression.
/// Returns how many memberships changed (0: it was not subscribed).
pub fn unsubscribe_member(store: &Store, account: &str, list: i64, subscriber: i64) -> Result<u64> {
    let m = membership(store, account, list, subscriber)?;
    let account_id = m.list.account_id;
    let row = store.find_subscriber(account_id, &subscriber.to_string())?;
    let (channel, address) = unsubscribe_address(&row)?;
    let change = store.unsubscribe(&sendonce_store::UnsubscribeRequest {
        account_id,
        channel,
        address: &address,
        lists: &[list],
        everything: false,
        source: DASHBOARD_SOURCE,
    })?;
    Ok(change.memberships)
}
