//! `Audience` and `Campaigns` on PostgreSQL, the first methods: what a campaign needs to run
//! (an account, imported subscribers, a campaign created, approved, read and counted). The
//! rest, and the parts of these that touch lists, double opt-in or removed subscribers, answer
//! "not yet on PostgreSQL".
#![allow(unused_variables)]

use super::ledger::{transaction, TxResult};
use super::{not_yet, PgStore};
use crate::domain::links::Links;
use crate::domain::model::{CampaignStatus, SendStatus};
use crate::error::{Error, Result};
use crate::store::{
    Audience, Campaign, Campaigns, DoubtRow, ImportReport, NewCampaign, NewSubscriber,
    RecipientRow, ReportRow, SkippedRow, StatusCounts,
};
use std::collections::{BTreeMap, BTreeSet};

impl Audience for PgStore {
    fn add_account(&self, name: &str) -> Result<i64> {
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(Error::invalid("the account name is empty"));
        }
        if name.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::invalid(format!(
                "the account name {name:?} is all digits: commands take an account by id or by \
                 name, so it would read as an id; add a letter"
            )));
        }
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let now = crate::domain::clock::now_ms();
                let id: Option<i64> = tx
                    .query_opt(
                        "INSERT INTO accounts (name, created_at) VALUES ($1, $2)
                         ON CONFLICT (name) DO NOTHING RETURNING id",
                        &[&name, &now],
                    )
                    .await?
                    .map(|r| r.get(0));
                match id {
                    Some(id) => Ok(id),
                    None => {
                        let id: i64 = tx
                            .query_one("SELECT id FROM accounts WHERE name = $1", &[&name])
                            .await?
                            .get(0);
                        Err(Error::conflict(format!(
                            "an account named {name:?} already exists (id {id})"
                        ))
                        .into())
                    }
                }
            })
        })
    }

    fn add_subscriber_with(
        &self,
        _account_id: i64,
        _s: &NewSubscriber,
        _lists: &[i64],
        _links: Option<&Links>,
    ) -> Result<i64> {
        Err(not_yet("Audience::add_subscriber_with"))
    }

    /// Without lists and links only (else "not yet"); a removed subscriber's address is "not
    /// yet" too (SQLite revives the row).
    fn import_subscribers_with(
        &self,
        account_id: i64,
        rows: Vec<(u64, Result<NewSubscriber>)>,
        skip_invalid: bool,
        lists: &[i64],
        links: Option<&Links>,
    ) -> Result<ImportReport> {
        if !lists.is_empty() || links.is_some() {
            return Err(not_yet("importing subscribers into lists"));
        }
        let rows: Vec<(u64, std::result::Result<NewSubscriber, String>)> = rows
            .into_iter()
            .map(|(l, r)| (l, r.map_err(|e| e.message)))
            .collect();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let found = tx
                    .query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id])
                    .await?;
                if found.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account_id}")).into());
                }
                let mut report = ImportReport { imported: 0, existing: 0, skipped: Vec::new() };
                for (line, row) in &rows {
                    let res = match row {
                        Ok(s) => insert_subscriber(&tx, account_id, s).await?,
                        Err(e) => Err(e.clone()),
                    };
                    match res {
                        Ok(()) => report.imported += 1,
                        Err(reason) if skip_invalid => {
                            report.skipped.push(SkippedRow { line: *line, reason })
                        }
                        Err(reason) => {
                            return Err(Error::invalid(format!(
                                "line {line}: {reason}; nothing was imported (use \
                                 --skip-invalid to import the valid rows)"
                            ))
                            .into())
                        }
                    }
                }
                Ok(report)
            })
        })
    }

    /// Attribute names that subscribers of this account have (templates may use them).
    fn attribute_names(&self, account_id: i64) -> Result<BTreeSet<String>> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT DISTINCT j.key FROM subscribers s, json_each(s.attrs::json) j
                     WHERE s.account_id = $1 AND json_typeof(s.attrs::json) = 'object'",
                    &[&account_id],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        })
    }

    fn account_exists(&self, account_id: i64) -> Result<()> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            match c
                .query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account_id])
                .await?
            {
                Some(_) => Ok(()),
                None => Err(Error::not_found(format!("unknown account id {account_id}"))),
            }
        })
    }
}

/// Insert one subscriber: `Ok(Err(reason))` for a row refused (a duplicate address).
async fn insert_subscriber(
    tx: &deadpool_postgres::Transaction<'_>,
    account_id: i64,
    s: &NewSubscriber,
) -> TxResult<std::result::Result<(), String>> {
    let norm = s.email.as_ref().map(|e| e.1.clone());
    let existing = tx
        .query_opt(
            "SELECT id, removed_at IS NOT NULL FROM subscribers
             WHERE account_id = $1 AND (email_norm = $2 OR phone = $3)",
            &[&account_id, &norm, &s.phone],
        )
        .await?;
    if let Some(r) = existing {
        let (id, removed): (i64, bool) = (r.get(0), r.get(1));
        if removed {
            return Err(not_yet("adding a removed subscriber back").into());
        }
        let what = norm.or(s.phone.clone()).unwrap_or_default();
        return Ok(Err(format!(
            "duplicate: {what} is already subscriber {id} of this account"
        )));
    }
    let email = s.email.as_ref().map(|e| e.0.clone());
    tx.execute(
        "INSERT INTO subscribers (account_id, email, email_norm, phone, name, status, attrs,
                                  created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &account_id,
            &email,
            &norm,
            &s.phone,
            &s.name,
            &s.status,
            &s.attrs,
            &crate::domain::clock::now_ms(),
        ],
    )
    .await?;
    Ok(Ok(()))
}

const CAMPAIGN_COLS: &str = "id, account_id, name, channel, sender, subject, body, status,
    scheduled_for, started_at, finished_at, list_complete, body_format, html, reply_to, filter,
    sms_footer, kind, transactional";

fn campaign_from_row(r: &tokio_postgres::Row) -> Result<Campaign> {
    let damaged = |what: &str, v: &str| Error::damaged(format!("campaign {what} {v:?}"));
    let format: String = r.get(12);
    let (body, html): (String, Option<String>) = match format.as_str() {
        "html" => (String::new(), Some(r.get(6))),
        _ => (r.get(6), r.get(13)),
    };
    let channel: String = r.get(3);
    let status: String = r.get(7);
    let kind: String = r.get(17);
    Ok(Campaign {
        id: r.get(0),
        account_id: r.get(1),
        name: r.get(2),
        channel: channel.parse().map_err(|_| damaged("channel", &channel))?,
        sender: r.get(4),
        subject: r.get(5),
        body,
        html,
        reply_to: r.get(14),
        filter: r.get(15),
        sms_footer: r.get(16),
        one_off: kind != "campaign",
        transactional: r.get::<_, bool>(18) || kind != "campaign",
        status: CampaignStatus::parse(&status).ok_or_else(|| damaged("status", &status))?,
        scheduled_for: r.get(8),
        started_at: r.get(9),
        finished_at: r.get(10),
        list_complete: r.get(11),
    })
}

impl Campaigns for PgStore {
    /// Without lists only (else "not yet").
    fn create_campaign(&self, c: &NewCampaign<'_>) -> Result<i64> {
        if !c.lists.is_empty() {
            return Err(not_yet("campaigns that target lists"));
        }
        let (body, format, html) = match c.html {
            Some(h) if c.body.is_empty() => (h.to_string(), "html", None),
            _ => (c.body.to_string(), "text", c.html.map(str::to_string)),
        };
        let account = c.account_id;
        let name = c.name.to_string();
        let channel = c.channel.as_str();
        let sender = c.sender.map(str::to_string);
        let subject = c.subject.map(str::to_string);
        let reply_to = c.reply_to.map(str::to_string);
        let filter = c.filter.map(str::to_string);
        let footer = c.sms_footer.map(str::to_string);
        let transactional = c.transactional;
        self.run(move |pool| async move {
            let mut cl = pool.get().await?;
            transaction!(cl, tx => {
                if tx.query_opt("SELECT 1 FROM accounts WHERE id = $1", &[&account]).await?.is_none() {
                    return Err(Error::not_found(format!("unknown account id {account}")).into());
                }
                let id: i64 = tx
                    .query_one(
                        "INSERT INTO campaigns (account_id, name, channel, sender, subject, body,
                                                body_format, html, reply_to, filter, sms_footer,
                                                transactional, created_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                         RETURNING id",
                        &[&account, &name, &channel, &sender, &subject, &body, &format, &html,
                          &reply_to, &filter, &footer, &transactional,
                          &crate::domain::clock::now_ms()],
                    )
                    .await?
                    .get(0);
                Ok(id)
            })
        })
    }

    fn recipient(&self, campaign_id: i64, subscriber_id: i64) -> Result<RecipientRow> {
        super::campaigns::recipient(self, campaign_id, subscriber_id)
    }

    fn campaign(&self, id: i64) -> Result<Campaign> {
        self.run(move |pool| async move {
            let c = pool.get().await?;
            let row = c
                .query_opt(
                    &format!("SELECT {CAMPAIGN_COLS} FROM campaigns WHERE id = $1"),
                    &[&id],
                )
                .await?;
            match row {
                Some(r) => campaign_from_row(&r),
                None => Err(Error::not_found(format!("unknown campaign id {id}"))),
            }
        })
    }

    /// `draft -> approved`, scheduled for `at` (a compare-and-set).
    fn approve_campaign(&self, id: i64, at: i64) -> Result<Campaign> {
        let now = crate::domain::clock::now_ms();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let n = tx
                    .execute(
                        "UPDATE campaigns SET status = 'approved', scheduled_for = $2,
                                approved_at = $3
                         WHERE id = $1 AND status = 'draft'",
                        &[&id, &at, &now],
                    )
                    .await?;
                if n == 0 {
                    let current: Option<String> = tx
                        .query_opt("SELECT status FROM campaigns WHERE id = $1", &[&id])
                        .await?
                        .map(|r| r.get(0));
                    return Err(match current {
                        Some(s) => Error::conflict(format!("cannot approve campaign {id}: it is {s}")),
                        None => Error::not_found(format!("unknown campaign id {id}")),
                    }
                    .into());
                }
                Ok(())
            })
        })?;
        self.campaign(id)
    }

    fn pause_campaign(&self, id: i64) -> Result<Campaign> {
        super::campaigns::pause(self, id)
    }

    fn resume_campaign(&self, id: i64) -> Result<Campaign> {
        super::campaigns::resume(self, id)
    }

    fn cancel_campaign(&self, id: i64) -> Result<Campaign> {
        super::campaigns::cancel(self, id)
    }

    fn status_counts(&self, id: i64) -> Result<StatusCounts> {
        let c = self.campaign(id)?;
        let account = c.account_id;
        let rows: Vec<(String, i64)> = self.run(move |pool| async move {
            let cl = pool.get().await?;
            let rows = cl
                .query(
                    "SELECT status, count(*) FROM sends
                     WHERE campaign_id = $1 AND account_id = $2 GROUP BY status",
                    &[&id, &account],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })?;
        let mut counts: BTreeMap<&'static str, u64> =
            SendStatus::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        let mut total = 0;
        for (status, n) in rows {
            let s = SendStatus::parse(&status)
                .ok_or_else(|| Error::damaged(format!("send status {status:?}")))?;
            counts.insert(s.as_str(), n as u64);
            total += n as u64;
        }
        Ok(StatusCounts {
            campaign_id: id,
            status: c.status,
            list_complete: c.list_complete,
            total,
            counts,
        })
    }
    fn report(&self, id: i64, f: &mut dyn FnMut(ReportRow) -> Result<()>) -> Result<()> {
        super::campaigns::report(self, id, f)
    }

    fn report_page(&self, id: i64, after: i64, limit: usize) -> Result<Vec<ReportRow>> {
        super::campaigns::report_page(self, id, after, limit)
    }

    fn send_account(&self, send_id: i64) -> Result<Option<i64>> {
        super::campaigns::send_account(self, send_id)
    }

    fn doubts(&self, campaign_id: i64) -> Result<Vec<DoubtRow>> {
        super::campaigns::doubts(self, campaign_id)
    }

    fn resolve_doubt(&self, send_id: i64, as_sent: bool) -> Result<()> {
        self.resolve_doubt_by(send_id, as_sent, "operator")
    }

    fn resolve_doubt_by(&self, send_id: i64, as_sent: bool, by: &str) -> Result<()> {
        let now = crate::domain::clock::now_ms();
        let by = by.to_string();
        self.run(move |pool| async move {
            let mut c = pool.get().await?;
            transaction!(c, tx => {
                let status: Option<String> = tx
                    .query_opt("SELECT status FROM sends WHERE id = $1 FOR UPDATE", &[&send_id])
                    .await?
                    .map(|r| r.get(0));
                let Some(status) = status else {
                    return Err(Error::not_found(format!("unknown send id {send_id}")).into());
                };
                if status != "in_doubt" {
                    return Err(Error::conflict(format!(
                        "send {send_id} is {status}, not in_doubt"
                    ))
                    .into());
                }
                super::ledger::settle_doubt_tx(&tx, send_id, None, as_sent, now, &by).await?;
                Ok(())
            })
        })
    }
}
