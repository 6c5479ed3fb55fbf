//! Unsubscribe links (`/u/{token}`): open a token into the recipient it was sealed for, show
//! what it covers now, and unsubscribe from the link's lists or from everything the sender
//! sends on that channel (an account suppression). The HTTP pages call these; the token's
//! checks (seal, purpose, key dates) are `domain::links`, the account and list checks the
//! store's.

use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::{Keys, Purpose, Target, TokenError};
use sendonce_store::prelude::*;
use sendonce_store::{Store, UnsubscribeRequest};
use serde::Serialize;

/// The `source` of a suppression written by an unsubscribe link.
pub const SOURCE: &str = "unsubscribe-link";

/// What to unsubscribe from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The lists the message was sent to (the link's lists).
    List,
    /// Everything from this sender on this channel.
    All,
}

impl Scope {
    /// `list` or `all` (the form's values).
    pub fn parse(s: &str) -> Result<Scope> {
        match s {
            "list" => Ok(Scope::List),
            "all" => Ok(Scope::All),
            _ => Err(Error::invalid("scope must be list or all")),
        }
    }

    /// RFC 8058 one-click: the link's lists when it has some, else everything.
    pub fn one_click(t: &Target) -> Scope {
        if t.lists.is_empty() {
            Scope::All
        } else {
            Scope::List
        }
    }
}

/// Open an unsubscribe token at `now_ms`. A malformed one is `Invalid`, any other refusal
/// (changed, another purpose, a retired key) `NotFound`; neither message says more.
pub fn open(keys: &Keys, token: &str, now_ms: i64) -> Result<Target> {
    keys.open(Purpose::Unsubscribe, token, now_ms)
        .map_err(|e| match e {
            TokenError::Malformed => Error::invalid("this link is not valid"),
            TokenError::NotValid => Error::not_found("this link is not valid"),
        })
}

/// One list a link names, for the page.
#[derive(Debug, Clone, Serialize)]
pub struct ListView {
    pub id: i64,
    pub name: String,
    /// Not subscribed (any more): unsubscribed, or not a member.
    pub unsubscribed: bool,
}

/// What a link covers now.
#[derive(Debug, Clone, Serialize)]
pub struct View {
    pub channel: Channel,
    /// The normalised address (the page masks it).
    pub address: String,
    /// The link's lists that still exist.
    pub lists: Vec<ListView>,
    /// The address is suppressed for the channel: nothing from this sender reaches it.
    pub suppressed: bool,
    /// Already unsubscribed from what the link's "this list" choice covers (every list
    /// of the link unsubscribed, or suppressed).
    pub done: bool,
}

/// What `target`'s link covers now. `NotFound` when its account does not exist or one of its
/// lists is another account's.
pub fn view(store: &Store, target: &Target) -> Result<View> {
    let st = store.link_state(
        target.account_id,
        target.channel,
        &target.address,
        &target.lists,
    )?;
    let lists: Vec<ListView> = st
        .lists
        .into_iter()
        .map(|l| ListView {
            id: l.id,
            name: l.name,
            unsubscribed: l.status.as_deref() != Some("subscribed")
                && l.status.as_deref() != Some("pending"),
        })
        .collect();
    let done = st.suppressed || (!lists.is_empty() && lists.iter().all(|l| l.unsubscribed));
    Ok(View {
        channel: target.channel,
        address: target.address.clone(),
        lists,
        suppressed: st.suppressed,
        done,
    })
}

/// What an unsubscribe did.
#[derive(Debug, Clone, Serialize)]
pub struct Done {
    pub scope: Scope,
    /// The names of the lists unsubscribed from (scope `list`).
    pub lists: Vec<String>,
    /// Memberships that became `unsubscribed`.
    pub memberships: u64,
    /// The address was added to the account's suppression list.
    pub suppressed: bool,
    /// Nothing changed: it had been done before.
    pub already: bool,
}

/// Unsubscribe `target` from `scope`: its lists' memberships, or (`All`) a suppression of the
/// address for the channel (reason `unsubscribed`, source `unsubscribe-link`) and every
/// membership of its subscriber. One transaction; a second call changes nothing and says so.
/// `List` on a link without lists is `Invalid`.
pub fn unsubscribe(store: &Store, target: &Target, scope: Scope) -> Result<Done> {
    if scope == Scope::List && target.lists.is_empty() {
        return Err(Error::invalid(
            "this link was sent to everyone, not to a list: choose everything",
        ));
    }
    let change = store.unsubscribe(&UnsubscribeRequest {
        account_id: target.account_id,
        channel: target.channel,
        address: &target.address,
        lists: &target.lists,
        everything: scope == Scope::All,
        source: SOURCE,
    })?;
    let lists = match scope {
        Scope::List => view(store, target)?
            .lists
            .into_iter()
            .map(|l| l.name)
            .collect(),
        Scope::All => Vec::new(),
    };
    tracing::info!(
        account_id = target.account_id,
        campaign_id = target.campaign_id,
        scope = ?scope,
        memberships = change.memberships,
        suppressed = change.suppressed,
        "unsubscribe link used"
    );
    Ok(Done {
        scope,
        lists,
        memberships: change.memberships,
        suppressed: change.suppressed,
        already: change.memberships == 0 && !change.suppressed,
    })
}
