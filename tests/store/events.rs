//! Events out, the store's side (`schema/0024_events.sql`, `crates/store/src/events.rs`): each
//! change writes its event in its own commit whatever code path made it, on both stores alike;
//! a reader with a cursor sees every event once, in order, while writers commit concurrently;
//! and on PostgreSQL, an event committed after a later one (a lower id that became visible
//! late) is not skipped by a cursor that already passed the later one.

use crate::common;
use sendonce::domain::address::Channel;
use sendonce::domain::clock::now_ms;
use sendonce::store::prelude::*;
use sendonce::store::{ClaimRequest, Cursor, FeedQuery, OpenOptions, Outcome, Record, Store};
use std::collections::HashSet;
use std::sync::Arc;

struct Backend {
    name: &'static str,
    fresh: fn(&common::Env) -> Arc<Store>,
}

/// SQLite; PostgreSQL too in tier 1 (a fresh database on the shared throwaway cluster).
fn backends() -> Vec<Backend> {
    #[allow(unused_mut)]
    let mut all = vec![Backend {
        name: "sqlite",
        fresh: |env| {
            let opts = OpenOptions {
                create: true,
                ..Default::default()
            };
            sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &opts).unwrap()
        },
    }];
    #[cfg(feature = "tier1")]
    all.push(Backend {
        name: "postgresql",
        fresh: |_| {
            let url = common::pg::shared().fresh_url();
            let opts = OpenOptions {
                create: true,
                ..Default::default()
            };
            sendonce::store::open(
                &sendonce::store::Target::parse(std::path::Path::new(&url)),
                &opts,
            )
            .unwrap()
        },
    });
    all
}

/// Every event of `account` (any type), in the feed's order.
fn all_events(s: &Store, account: i64) -> Vec<sendonce::store::EventRow> {
    let mut out = Vec::new();
    let mut after = Cursor::default();
    loop {
        let (rows, next) = s
            .events(&FeedQuery {
                account_id: account,
                after,
                types: &[],
                limit: 50,
            })
            .unwrap();
        if next == after {
            return out;
        }
        out.extend(rows);
        after = next;
    }
}

/// A campaign of three sending: one accepted, one failed for good, one suppressed before its
/// claim; a suppression added and removed by hand. The events, in order, are the same on both
/// stores and name what the feed promises.
#[test]
fn each_change_writes_its_event_the_same_on_both_stores() {
    let mut transcripts = Vec::new();
    for b in backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let (acct, cid) = common::started_campaign(&*s, 3);
        while !s.build_list_chunk(cid, 10).unwrap() {}
        s.suppress(acct, Channel::Email, "u2@x.com", "complaint", "test")
            .unwrap();
        let now = now_ms();
        let claimed = s
            .claim(&ClaimRequest {
                campaign_id: cid,
                account_id: acct,
                channel: Channel::Email,
                batch: 10,
                lease_ms: 60_000,
                token: 1,
                owner: "w".into(),
                key_window_ms: None,
                now,
            })
            .unwrap();
        assert_eq!(claimed.rows.len(), 2, "{}", b.name);
        let outcome = |i: usize| match i {
            0 => Outcome::Accepted {
                provider_id: Some("p-1".into()),
                note: None,
            },
            _ => Outcome::Failed {
                error: "mailbox unknown".into(),
                suppress: None,
            },
        };
        let records: Vec<Record> = claimed
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| Record {
                id: r.id,
                token: r.token,
                outcome: outcome(i),
            })
            .collect();
        s.record(&records, now + 1).unwrap();
        s.try_complete(cid, now + 2).unwrap();
        s.unsuppress(acct, Channel::Email, "u2@x.com").unwrap();
        let events = all_events(&s, acct);
        let shown: Vec<String> = events
            .iter()
            .map(|e| {
                let data: serde_json::Value = serde_json::from_str(&e.data).unwrap();
                let who = e
                    .send
                    .as_ref()
                    .map(|f| f.address.clone())
                    .unwrap_or_default();
                let err = data["error"].as_str().unwrap_or("").to_string();
                format!("{} {} {err}", e.kind, who).trim().to_string()
            })
            .collect();
        transcripts.push((b.name, shown));
    }
    let (first, want) = &transcripts[0];
    assert_eq!(
        want,
        &vec![
            "subscriber.subscribed",
            "subscriber.subscribed",
            "subscriber.subscribed",
            "campaign.started",
            "suppression.added",
            "send.suppressed u2@x.com address suppressed before claim",
            "send.sent u0@x.com",
            "send.failed u1@x.com mailbox unknown",
            "campaign.finished",
            "suppression.removed",
        ],
        "{first}"
    );
    for (name, got) in &transcripts[1..] {
        assert_eq!(want, got, "{first} and {name} differ");
    }
}

/// Four writers commit 50 suppressions each while a reader pages through the feed with its
/// cursor (seven at a time): the reader sees each event once, in the feed's order, and in the
/// end every event there is.
#[test]
fn a_cursor_reader_sees_every_event_once_in_order_while_writers_commit() {
    for b in backends() {
        let env = common::Env::new();
        let s = (b.fresh)(&env);
        let acct = s.add_account("acme").unwrap();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let a = format!("w{w}-{i}@x.com");
                        s.suppress(acct, Channel::Email, &a, "test", "test")
                            .unwrap();
                    }
                })
            })
            .collect();
        let mut seen: Vec<Cursor> = Vec::new();
        let mut after = Cursor::default();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while seen.len() < 200 {
            assert!(
                std::time::Instant::now() < deadline,
                "{}: stuck at {}",
                b.name,
                seen.len()
            );
            let (rows, next) = s
                .events(&FeedQuery {
                    account_id: acct,
                    after,
                    types: &["suppression.*".to_string()],
                    limit: 7,
                })
                .unwrap();
            seen.extend(rows.iter().map(|e| e.cursor()));
            after = next;
        }
        for w in writers {
            w.join().unwrap();
        }
        let unique: HashSet<Cursor> = seen.iter().copied().collect();
        assert_eq!(unique.len(), seen.len(), "{}: an event seen twice", b.name);
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "{}: out of order",
            b.name
        );
        let every: HashSet<Cursor> = all_events(&s, acct).iter().map(|e| e.cursor()).collect();
        assert_eq!(every, unique, "{}: the reader missed events", b.name);
    }
}

/// PostgreSQL hands out ids at insert, not at commit: a transaction that inserts first and
/// commits last holds a lower id than one that committed before it. The feed must not return
/// the later one while the earlier is still open, or its cursor would pass the lower id.
#[cfg(feature = "tier1")]
#[test]
fn an_event_that_commits_late_with_a_lower_id_is_not_skipped() {
    use std::io::{BufRead, Write};
    let pg = common::pg::shared();
    let url = pg.fresh_url();
    let opts = OpenOptions {
        create: true,
        ..Default::default()
    };
    let target = sendonce::store::Target::parse(std::path::Path::new(&url));
    let s = sendonce::store::open(&target, &opts).unwrap();
    let acct = s.add_account("acme").unwrap();
    let mut open = pg.psql_session(&common::pg::db_name(&url));
    let mut stdin = open.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(open.stdout.take().unwrap());
    writeln!(
        stdin,
        "BEGIN; INSERT INTO suppressions (account_id, channel, address, reason, source, \
         created_at) VALUES ({acct}, 'email', 'early@x.com', 'r', 's', 1); SELECT 'inserted';"
    )
    .unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "inserted");
    s.suppress(acct, Channel::Email, "late@x.com", "r", "s")
        .unwrap();
    let read = |after: Cursor| {
        s.events(&FeedQuery {
            account_id: acct,
            after,
            types: &[],
            limit: 10,
        })
        .unwrap()
    };
    let (rows, next) = read(Cursor::default());
    assert!(
        rows.is_empty(),
        "an event was returned while an older transaction is open: {rows:?}"
    );
    writeln!(stdin, "COMMIT;").unwrap();
    drop(stdin);
    assert!(open.wait().unwrap().success());
    let (rows, _) = read(next);
    let got: Vec<String> = rows.iter().map(|e| e.subject.clone()).collect();
    assert_eq!(
        got,
        vec![
            "suppression:email:early@x.com",
            "suppression:email:late@x.com"
        ]
    );
    assert!(rows[0].id < rows[1].id || rows[0].txid < rows[1].txid);
}
