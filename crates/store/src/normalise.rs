//! The address step of schema 0017 (SQLite) and postgres 0004 (issue 37, F5/F6): the rows
//! written before one address had one form are brought to the form `domain::address` now gives,
//! backend-neutral. Each store reads its rows, [`plan`] decides, the store writes the plan and
//! its report in the same transaction.
//!
//! Two rows that become the same address collide. The rule never loses an opt-out:
//! - subscribers: the row that already holds the normal form is kept (else the live row with
//!   the lowest id); the others are retired (removed, never sent to, their old spelling left
//!   as it was so nothing revives them) and merged into it: its status becomes `unsubscribed`
//!   (or `bounced`) when any of them was, their list memberships move to it, and an
//!   `unsubscribed` membership wins over its own; an opt-out it took from another row is also
//!   added as a suppression of the address (source `upgrade`), so queued sends honour it;
//! - suppressions: one row stays, with the normal address (a suppression that `subscriber
//!   add` undoes, source `removal`, is kept only when there is no other);
//! - queued sends of one campaign: the first (lowest id) keeps the address, the others are
//!   cancelled (the store does this; see its step).
//!
//! An address that the new rules refuse (an invisible character, a number no country has) is
//! left as it is and reported. Every collision and refusal is a row of `address_collisions`,
//! which `sendonce doctor` counts.

use sendonce_domain::address::{normalize_email, normalize_phone, Channel};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a subscriber row holds before the step.
#[derive(Debug, Clone)]
pub struct SubscriberKey {
    pub id: i64,
    pub account_id: i64,
    pub email_norm: Option<String>,
    pub phone: Option<String>,
    pub status: String,
    pub removed: bool,
}

/// What a suppression row holds before the step.
#[derive(Debug, Clone)]
pub struct SuppressionKey {
    pub account_id: i64,
    pub channel: Channel,
    pub address: String,
    pub reason: String,
    pub source: String,
    pub created_at: i64,
}

/// A change to one subscriber row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriberChange {
    /// Set the row's addresses (normal forms) and status.
    Set {
        id: i64,
        email_norm: Option<String>,
        phone: Option<String>,
        status: String,
    },
    /// Retire `id` (removed_at set, its spelling kept) and merge its memberships into `into`.
    Retire { id: i64, into: i64 },
}

/// The suppressions `old` of one account and channel become the one row `kept` (normal
/// address).
#[derive(Debug, Clone)]
pub struct SuppressionChange {
    pub old: Vec<String>,
    pub kept: SuppressionKey,
}

/// One line of the report (`address_collisions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub account_id: i64,
    pub channel: Channel,
    /// `subscriber`, `suppression`, `send` or `invalid`.
    pub kind: &'static str,
    /// The normal form both rows became (or, for `invalid`, the address as stored).
    pub address: String,
    pub kept_id: Option<i64>,
    pub dropped_id: Option<i64>,
    pub detail: String,
}

/// A queued send the step normalises: its address takes the normal form, or, when its
/// campaign already has a send to that form, it is cancelled (the person gets the other one).
/// The stores read and write the rows; this says what the report lines are.
#[derive(Debug, Clone, Copy)]
pub struct QueuedSend {
    pub id: i64,
    pub account_id: i64,
    pub campaign_id: i64,
    pub channel: Channel,
}

impl QueuedSend {
    /// The report line of a send whose stored address the rules now refuse (left as it was).
    pub fn refused(&self, address: &str, why: &str) -> Collision {
        self.line("invalid", address, Some(self.id), None, why)
    }

    /// The report line of a send cancelled because send `other` of its campaign already goes
    /// to `normal`.
    pub fn cancelled(&self, normal: &str, other: i64) -> Collision {
        let why = format!("cancelled, send {other} goes to the same address");
        self.line("send", normal, Some(other), Some(self.id), &why)
    }

    fn line(
        &self,
        kind: &'static str,
        address: &str,
        kept_id: Option<i64>,
        dropped_id: Option<i64>,
        why: &str,
    ) -> Collision {
        Collision {
            account_id: self.account_id,
            channel: self.channel,
            kind,
            address: address.to_string(),
            kept_id,
            dropped_id,
            detail: format!("send {} of campaign {}: {why}", self.id, self.campaign_id),
        }
    }
}

/// What the step does.
#[derive(Debug, Default)]
pub struct Plan {
    pub subscribers: Vec<SubscriberChange>,
    pub suppressions: Vec<SuppressionChange>,
    /// Suppressions to add (when absent): a kept row that took a merged row's opt-out gets it
    /// as a suppression too, since the claim honours suppressions, and its sends may already
    /// be queued.
    pub opt_outs: Vec<SuppressionKey>,
    pub report: Vec<Collision>,
}

/// The normal form of a stored address, or why the rules now refuse it.
pub fn normal(channel: Channel, address: &str) -> Result<String, String> {
    match channel {
        Channel::Email => normalize_email(address).map(|(_, n)| n),
        Channel::Sms => normalize_phone(address),
    }
    .map_err(|e| e.message)
}

/// Decide the step for these rows (all the subscribers and suppressions of the database).
pub fn plan(subscribers: &[SubscriberKey], suppressions: &[SuppressionKey]) -> Plan {
    let mut out = Plan::default();
    let mut rows: BTreeMap<i64, SubscriberKey> =
        subscribers.iter().map(|s| (s.id, s.clone())).collect();
    let mut retired: HashSet<i64> = HashSet::new();
    for channel in [Channel::Email, Channel::Sms] {
        let groups = group_subscribers(&rows, channel, &mut out.report);
        for (normal, ids) in groups {
            merge_group(&mut rows, &mut retired, channel, &normal, &ids, &mut out);
        }
    }
    let before: HashMap<i64, &SubscriberKey> = subscribers.iter().map(|s| (s.id, s)).collect();
    for (id, row) in &rows {
        let changed = before.get(id).is_some_and(|b| {
            b.email_norm != row.email_norm || b.phone != row.phone || b.status != row.status
        });
        if changed && !retired.contains(id) {
            out.subscribers.push(SubscriberChange::Set {
                id: *id,
                email_norm: row.email_norm.clone(),
                phone: row.phone.clone(),
                status: row.status.clone(),
            });
        }
    }
    plan_suppressions(suppressions, &mut out);
    out
}

/// The subscribers of each (account, normal address) of `channel` whose group needs work
/// (a changed spelling or more than one row), in id order. Refused addresses are reported.
fn group_subscribers(
    rows: &BTreeMap<i64, SubscriberKey>,
    channel: Channel,
    report: &mut Vec<Collision>,
) -> Vec<(String, Vec<i64>)> {
    let mut groups: BTreeMap<(i64, String), Vec<i64>> = BTreeMap::new();
    for row in rows.values() {
        let stored = match channel {
            Channel::Email => row.email_norm.as_deref(),
            Channel::Sms => row.phone.as_deref(),
        };
        let Some(stored) = stored else { continue };
        match normal(channel, stored) {
            Ok(n) => groups.entry((row.account_id, n)).or_default().push(row.id),
            Err(why) => report.push(Collision {
                account_id: row.account_id,
                channel,
                kind: "invalid",
                address: stored.to_string(),
                kept_id: Some(row.id),
                dropped_id: None,
                detail: format!("subscriber {} left as it was: {why}", row.id),
            }),
        }
    }
    groups
        .into_iter()
        .filter(|((_, n), ids)| ids.len() > 1 || stored_of(&rows[&ids[0]], channel) != Some(n))
        .map(|((_, n), ids)| (n, ids))
        .collect()
}

fn stored_of(row: &SubscriberKey, channel: Channel) -> Option<&String> {
    match channel {
        Channel::Email => row.email_norm.as_ref(),
        Channel::Sms => row.phone.as_ref(),
    }
}

/// One group: the kept row takes the normal form and the strongest opt-out; the others are
/// retired into it.
fn merge_group(
    rows: &mut BTreeMap<i64, SubscriberKey>,
    retired: &mut HashSet<i64>,
    channel: Channel,
    normal: &str,
    ids: &[i64],
    out: &mut Plan,
) {
    let holder = ids
        .iter()
        .find(|id| stored_of(&rows[*id], channel).map(String::as_str) == Some(normal));
    let live = ids
        .iter()
        .find(|id| !rows[*id].removed && !retired.contains(*id));
    let kept = *holder.or(live).unwrap_or(&ids[0]);
    let status = ids
        .iter()
        .map(|id| rows[id].status.as_str())
        .max_by_key(|s| opt_out_rank(s))
        .filter(|s| opt_out_rank(s) > 0)
        .unwrap_or(rows[&kept].status.as_str())
        .to_string();
    let row = rows.get_mut(&kept).expect("kept is one of the group");
    match channel {
        Channel::Email => row.email_norm = Some(normal.to_string()),
        Channel::Sms => row.phone = Some(normal.to_string()),
    }
    let took_opt_out = opt_out_rank(&status) > opt_out_rank(&row.status);
    row.status = status.clone();
    let account_id = row.account_id;
    if took_opt_out {
        out.opt_outs.push(SuppressionKey {
            account_id,
            channel,
            address: normal.to_string(),
            reason: status.clone(),
            source: "upgrade".into(),
            created_at: sendonce_domain::clock::now_ms(),
        });
    }
    for &id in ids.iter().filter(|&&id| id != kept) {
        if retired.insert(id) {
            out.subscribers
                .push(SubscriberChange::Retire { id, into: kept });
        }
        out.report.push(Collision {
            account_id,
            channel,
            kind: "subscriber",
            address: normal.to_string(),
            kept_id: Some(kept),
            dropped_id: Some(id),
            detail: format!(
                "subscriber {id} ({}) merged into {kept}, which is now {status}",
                rows[&id].status
            ),
        });
    }
}

/// How strongly a subscriber status says "do not send": unsubscribed over bounced over the rest.
fn opt_out_rank(status: &str) -> u8 {
    match status {
        "unsubscribed" => 2,
        "bounced" => 1,
        _ => 0,
    }
}

/// Suppressions grouped by (account, channel, normal address); each group that changes
/// becomes one row.
fn plan_suppressions(rows: &[SuppressionKey], out: &mut Plan) {
    let mut groups: HashMap<(i64, Channel, String), Vec<&SuppressionKey>> = HashMap::new();
    let mut order = Vec::new();
    for row in rows {
        match normal(row.channel, &row.address) {
            Ok(n) => {
                let key = (row.account_id, row.channel, n);
                if !groups.contains_key(&key) {
                    order.push(key.clone());
                }
                groups.entry(key).or_default().push(row);
            }
            Err(why) => out.report.push(Collision {
                account_id: row.account_id,
                channel: row.channel,
                kind: "invalid",
                address: row.address.clone(),
                kept_id: None,
                dropped_id: None,
                detail: format!("suppression left as it was (it still suppresses): {why}"),
            }),
        }
    }
    for key in order {
        let group = &groups[&key];
        if group.len() == 1 && group[0].address == key.2 {
            continue;
        }
        let best = group
            .iter()
            .min_by_key(|s| (s.source == "removal", s.created_at))
            .expect("a group has a row");
        if group.len() > 1 {
            out.report.push(Collision {
                account_id: key.0,
                channel: key.1,
                kind: "suppression",
                address: key.2.clone(),
                kept_id: None,
                dropped_id: None,
                detail: format!(
                    "{} suppressions became one (kept: {:?}, source {})",
                    group.len(),
                    best.reason,
                    best.source
                ),
            });
        }
        out.suppressions.push(SuppressionChange {
            old: group.iter().map(|s| s.address.clone()).collect(),
            kept: SuppressionKey {
                address: key.2.clone(),
                ..(*best).clone()
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(id: i64, email: &str, status: &str) -> SubscriberKey {
        SubscriberKey {
            id,
            account_id: 1,
            email_norm: Some(email.into()),
            phone: None,
            status: status.into(),
            removed: false,
        }
    }

    #[test]
    fn an_unsubscribed_duplicate_wins_over_the_kept_row() {
        let p = plan(
            &[
                sub(1, "jose\u{301}@acme.example", "confirmed"),
                sub(2, "jos\u{e9}@acme.example", "unsubscribed"),
            ],
            &[],
        );
        // Row 2 holds the normal form: it stays, and stays unsubscribed.
        assert_eq!(
            p.subscribers,
            vec![SubscriberChange::Retire { id: 1, into: 2 }]
        );
        assert_eq!(p.report.len(), 1);
        assert_eq!(p.report[0].kind, "subscriber");
        let p = plan(
            &[
                sub(1, "jos\u{e9}@acme.example", "confirmed"),
                sub(2, "JOSE\u{301}@acme.example", "unsubscribed"),
            ],
            &[],
        );
        assert!(p.subscribers.contains(&SubscriberChange::Set {
            id: 1,
            email_norm: Some("jos\u{e9}@acme.example".into()),
            phone: None,
            status: "unsubscribed".into(),
        }));
    }

    #[test]
    fn a_removal_suppression_gives_way_to_another() {
        let s = |address: &str, source: &str, at| SuppressionKey {
            account_id: 1,
            channel: Channel::Sms,
            address: address.into(),
            reason: source.into(),
            source: source.into(),
            created_at: at,
        };
        let p = plan(
            &[],
            &[
                s("+4402079460000", "removal", 1),
                s("+442079460000", "manual", 2),
            ],
        );
        assert_eq!(p.suppressions.len(), 1);
        assert_eq!(p.suppressions[0].kept.source, "manual");
        assert_eq!(p.suppressions[0].kept.address, "+442079460000");
        assert_eq!(p.suppressions[0].old.len(), 2);
    }

    #[test]
    fn unchanged_rows_make_no_work_and_refused_ones_are_reported() {
        let p = plan(&[sub(1, "ana@example.com", "confirmed")], &[]);
        assert!(p.subscribers.is_empty() && p.report.is_empty());
        let p = plan(&[sub(1, "a\u{200b}na@example.com", "confirmed")], &[]);
        assert!(p.subscribers.is_empty());
        assert_eq!(p.report[0].kind, "invalid");
    }
}
