//! Double opt-in and public signups, for the recipient-facing pages: open a confirm link
//! (`/c/{token}`), show what it would confirm (nothing written), confirm it (pending →
//! subscribed, never from unsubscribed), and a signup from a list's public form (honeypot,
//! the same answer whether or not the address was known).

use super::import;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::{Keys, Links, Purpose, Target};
use sendonce_store::prelude::*;
use sendonce_store::{Confirmation, Consent, MemberKey, MemberState, OptIn, Seen, Store};

/// What a confirm link names, opened.
#[derive(Debug, Clone)]
pub struct Link {
    pub account_id: i64,
    pub list_id: i64,
    pub channel: Channel,
    pub address: String,
}

/// Open a confirm token: sealed by one of `keys` for confirming, naming exactly one list.
/// The error says no more than "not valid" (the page shows it as it is).
pub fn open(keys: &Keys, token: &str) -> Result<Link> {
    let refused = || Error::not_found("this confirmation link is not valid");
    let t: Target = keys
        .open(Purpose::Confirm, token, sendonce_domain::clock::now_ms())
        .map_err(|_| refused())?;
    match t.lists.as_slice() {
        [list_id] => Ok(Link {
            account_id: t.account_id,
            list_id: *list_id,
            channel: t.channel,
            address: t.address,
        }),
        _ => Err(refused()),
    }
}

impl Link {
    fn key(&self) -> MemberKey<'_> {
        MemberKey {
            account_id: self.account_id,
            list_id: self.list_id,
            channel: self.channel,
            address: &self.address,
        }
    }
}

/// Where a confirm link stands (or stood, before `confirm` changed it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for the click: `confirm` subscribes.
    Pending,
    /// Already subscribed (confirmed before, or a single opt-in membership).
    Subscribed,
    /// Unsubscribed from the list since: the old link does not subscribe again.
    Unsubscribed,
    /// The address is no member of the list any more (subscriber removed).
    Gone,
}

/// A confirm link's list and state.
#[derive(Debug, Clone)]
pub struct Found {
    pub list_name: String,
    pub state: State,
}

fn found(c: Option<Confirmation>) -> Result<Found> {
    let c = c.ok_or_else(|| Error::not_found("this list no longer exists"))?;
    Ok(Found {
        list_name: c.list_name,
        state: match c.state {
            Some(MemberState::Pending) => State::Pending,
            Some(MemberState::Subscribed) => State::Subscribed,
            Some(MemberState::Unsubscribed) => State::Unsubscribed,
            None => State::Gone,
        },
    })
}

/// What the link would confirm, read only (`GET /c/{token}`: mail scanners fetch links).
pub fn show(store: &Store, link: &Link) -> Result<Found> {
    found(store.confirmation(&link.key())?)
}

/// Confirm: a pending membership becomes subscribed, and who confirmed (`seen`: the link's
/// client, as the consent policy keeps it) is written onto its consent records. Returns the
/// state the link found (so `Pending` means "confirmed now"); any other state is left as it is.
pub fn confirm(store: &Store, link: &Link, seen: &Seen) -> Result<Found> {
    let now = sendonce_domain::clock::now_ms();
    found(store.confirm_seen(&link.key(), now, seen)?)
}

/// A signup from a list's public form.
#[derive(Debug, Clone, Default)]
pub struct Signup<'a> {
    /// The list's id, as the form names it.
    pub list: &'a str,
    pub email: &'a str,
    pub name: Option<&'a str>,
    /// The honeypot field: people leave it empty, form-filling robots do not.
    pub honeypot: &'a str,
    /// The opt-in as the form saw it (source `form`, the client, the form's text).
    pub consent: Consent,
}

/// What a signup came to. The page says the same "check your inbox" for `Accepted` whatever
/// happened to the address (new, pending, already subscribed, unsubscribed, a robot's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signed {
    Accepted,
    /// The list is single opt-in: subscribed at once (or already a member).
    Subscribed,
    /// A double opt-in list whose confirmation cannot be sent from here (no public URL or
    /// secret on this server, no confirmation sender): nothing written.
    Unavailable,
}

/// A public list, by the id a form names (`NotFound` for anything else, a private list's
/// included).
pub fn public_list(store: &Store, list: &str) -> Result<sendonce_store::ListRow> {
    let missing = || Error::not_found("no such signup form");
    let id: i64 = list.trim().parse().map_err(|_| missing())?;
    store.public_list(id)?.ok_or_else(missing)
}

/// Sign up through a public form: the address joins the list (pending on a double opt-in
/// list, with its confirmation queued; subscribed on a single one). A filled honeypot writes
/// nothing and gets the same answer. A double opt-in list whose confirmation cannot be sent
/// here (no public URL or secret, no sender) is [`Signed::Unavailable`], nothing written.
pub fn signup(store: &Store, links: Option<&Links>, s: &Signup<'_>) -> Result<Signed> {
    let list = public_list(store, s.list)?;
    let double = list.optin == OptIn::Double;
    if !s.honeypot.trim().is_empty() {
        tracing::info!(
            list = list.id,
            "a signup with the honeypot filled was dropped"
        );
        return Ok(if double {
            Signed::Accepted
        } else {
            Signed::Subscribed
        });
    }
    if double && (links.is_none() || list.confirm_from.is_none()) {
        tracing::warn!(
            list = list.id,
            "a signup to a double opt-in list was refused: this server has no public URL and \
             secret, or the list no confirmation sender"
        );
        return Ok(Signed::Unavailable);
    }
    let email = s.email.trim();
    if email.is_empty() {
        return Err(Error::invalid("please give your email address"));
    }
    // The name may be printed into a subject: refused with its own reason (the address's
    // error below says nothing about names), as given, as every other input path checks it.
    if let Some(n) = s.name {
        sendonce_domain::headers::check_data("your name", n).map_err(Error::invalid)?;
    }
    let mut sub = import::subscriber(
        Some(email),
        None,
        s.name.map(str::trim).filter(|n| !n.is_empty()),
        Some("confirmed"),
        &[],
    )
    .map_err(|_| Error::invalid("this does not look like an email address"))?;
    sub.consent = Some(s.consent.clone());
    // A suppressed address (unsubscribed from everything, bounced, complained, removed by the
    // operator) is not brought back by an anonymous form: same answer, nothing written. The
    // address itself can still ask the operator.
    let norm = sub.email.as_ref().map(|e| e.1.as_str()).unwrap_or_default();
    if store.is_suppressed(list.account_id, Channel::Email, norm)? {
        tracing::info!(
            list = list.id,
            "a signup for a suppressed address was dropped"
        );
    } else {
        store.add_subscriber_with(list.account_id, &sub, &[list.id], links)?;
    }
    Ok(if double {
        Signed::Accepted
    } else {
        Signed::Subscribed
    })
}
