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

/// A cluster of this test's own (PostgreSQL), stopped when the test ends: the feed waits for
/// every writing transaction of the cluster older than an event, so another test's open
/// transaction on a shared cluster would hold these tests' events back.
#[cfg(feature = "tier1")]
type Own = Option<common::pg::PgCluster>;
#[cfg(not(feature = "tier1"))]
type Own = Option<()>;

struct Backend {
    name: &'static str,
    fresh: fn(&common::Env) -> (Arc<Store>, Own),
}

/// SQLite; PostgreSQL too in tier 1 (on a cluster of the test's own).
fn backends() -> Vec<Backend> {
    #[allow(unused_mut)]
    let mut all = vec![Backend {
        name: "sqlite",
        fresh: |env| {
            let opts = OpenOptions {
                create: true,
                ..Default::default()
            };
            let target = sendonce::store::Target::File(env.db.clone());
            (sendonce::store::open(&target, &opts).unwrap(), None)
        },
    }];
    #[cfg(feature = "tier1")]
    all.push(Backend {
        name: "postgresql",
        fresh: |_| {
            let pg = common::pg::PgCluster::start();
            let url = pg.fresh_url();
            let opts = OpenOptions {
                create: true,
                ..Default::default()
            };
            let target = sendonce::store::Target::parse(std::path::Path::new(&url));
            (sendonce::store::open(&target, &opts).unwrap(), Some(pg))
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
/// list was built; a suppression added and removed by hand. The events, in order, are the same on both
/// stores and name what the feed promises.
#[test]
fn each_change_writes_its_event_the_same_on_both_stores() {
    let mut transcripts = Vec::new();
    for b in backends() {
        let env = common::Env::new();
        let (s, _own) = (b.fresh)(&env);
        let (acct, cid) = common::started_campaign(&*s, 3);
        // Suppressed before the list is built: its row is inserted `suppressed`.
        s.suppress(acct, Channel::Email, "u2@x.com", "complaint", "test")
            .unwrap();
        while !s.build_list_chunk(cid, 10).unwrap() {}
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
            "send.suppressed u2@x.com address suppressed before the list was built",
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

/// Four writers commit 50 suppressions each (and a fifth, as many for another account) while a
/// reader pages through the feed with its cursor (seven at a time): the reader sees each of its
/// account's events once, in the feed's order, none of the other's, and in the end every one.
#[test]
fn a_cursor_reader_sees_every_event_once_in_order_while_writers_commit() {
    for b in backends() {
        let env = common::Env::new();
        let (s, _own) = (b.fresh)(&env);
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
            assert!(
                rows.iter().all(|e| e.account_id == acct),
                "{}: another account's",
                b.name
            );
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
    let pg = common::pg::PgCluster::start();
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

/// A turn of the delivery loop with these attempts, leasing at most `max`.
fn turn(
    s: &Store,
    attempts: &[sendonce::store::Attempt],
    now: i64,
    max: usize,
    broken_after_ms: i64,
) -> Vec<sendonce::store::DueDelivery> {
    s.delivery_turn(&sendonce::store::DeliveryTurn {
        attempts,
        now,
        lease_ms: 10_000,
        max,
        fan_out: 100,
        broken_after_ms,
    })
    .unwrap()
}

fn attempt(
    d: &sendonce::store::DueDelivery,
    at: i64,
    next: sendonce::store::NextStep,
) -> sendonce::store::Attempt {
    let ok = next == sendonce::store::NextStep::Delivered;
    sendonce::store::Attempt {
        delivery_id: d.id,
        endpoint_id: d.endpoint_id,
        token: d.token,
        at,
        status: Some(if ok { 200 } else { 503 }),
        error: (!ok).then(|| "answered HTTP 503".to_string()),
        ms: 3,
        next,
    }
}

fn endpoint(s: &Store, acct: i64, ordered: bool, types: &[String]) -> i64 {
    s.create_endpoint(&sendonce::store::NewEndpoint {
        account_id: acct,
        url: "https://app.example.org/h",
        types,
        ordered,
        salt: "00",
        now: now_ms(),
    })
    .unwrap()
    .id
}

/// An ordered endpoint gets a subject's events one at a time (the second waits for the first
/// to be delivered); a stale attempt (its lease lost and leased again) changes nothing but the
/// log; an endpoint only hears the events after it was made.
#[test]
fn deliveries_keep_a_subjects_order_and_a_lost_lease_is_fenced() {
    use sendonce::store::NextStep;
    for b in backends() {
        let env = common::Env::new();
        let (s, _own) = (b.fresh)(&env);
        let acct = s.add_account("acme").unwrap();
        s.suppress(acct, Channel::Email, "before@x.com", "r", "s")
            .unwrap();
        let ordered = endpoint(&s, acct, true, &[]);
        let loose = endpoint(&s, acct, false, &["suppression.*".to_string()]);
        s.suppress(acct, Channel::Email, "a@x.com", "r", "s")
            .unwrap();
        s.unsuppress(acct, Channel::Email, "a@x.com").unwrap();
        let t = now_ms();
        let due = turn(&s, &[], t, 10, i64::MAX);
        let of = |e: i64| -> Vec<&sendonce::store::DueDelivery> {
            due.iter().filter(|d| d.endpoint_id == e).collect()
        };
        assert_eq!(
            of(loose).len(),
            2,
            "{}: the loose endpoint gets both at once",
            b.name
        );
        assert_eq!(
            of(ordered).len(),
            1,
            "{}: the ordered one, the first alone",
            b.name
        );
        let first = of(ordered)[0].clone();
        let kind = |d: &sendonce::store::DueDelivery| d.event.as_ref().unwrap().kind.clone();
        assert_eq!(kind(&first), "suppression.added", "{}", b.name);
        // The lease expires; the next turn leases it again with a new token.
        let again = turn(&s, &[], t + 20_000, 10, i64::MAX);
        let retaken: Vec<_> = again.iter().filter(|d| d.endpoint_id == ordered).collect();
        assert_eq!(retaken.len(), 1, "{}", b.name);
        assert_eq!(retaken[0].id, first.id);
        assert!(retaken[0].token > first.token);
        // The first holder's success is fenced out: the delivery stays leased.
        turn(
            &s,
            &[attempt(&first, t + 20_001, NextStep::Delivered)],
            t + 20_002,
            0,
            i64::MAX,
        );
        let rows = s.deliveries(acct, ordered, 10).unwrap();
        let row = rows.iter().find(|r| r.id == first.id).unwrap();
        assert_eq!(row.status, "leased", "{}: a stale attempt moved it", b.name);
        // The holder's own success delivers it, and only then does the second come.
        let next = turn(
            &s,
            &[attempt(retaken[0], t + 20_003, NextStep::Delivered)],
            t + 20_004,
            10,
            i64::MAX,
        );
        let second: Vec<_> = next.iter().filter(|d| d.endpoint_id == ordered).collect();
        assert_eq!(second.len(), 1, "{}", b.name);
        assert_eq!(kind(second[0]), "suppression.removed", "{}", b.name);
        let all = s.deliveries(acct, ordered, 10).unwrap();
        assert_eq!(all.len(), 2, "{}: nothing from before the endpoint", b.name);
    }
}

/// Failures for longer than the breaker's time turn the endpoint off (`broken`, listed for
/// doctor); enabling it again restarts it. Replays by id and by time queue deliveries again.
/// Pruning keeps the newest event.
#[test]
fn the_breaker_turns_a_failing_endpoint_off_and_replay_and_pruning_do_what_they_say() {
    use sendonce::store::{EndpointChange, NextStep, Replay};
    for b in backends() {
        let env = common::Env::new();
        let (s, _own) = (b.fresh)(&env);
        let acct = s.add_account("acme").unwrap();
        let id = endpoint(&s, acct, false, &[]);
        s.suppress(acct, Channel::Email, "a@x.com", "r", "s")
            .unwrap();
        let t = now_ms();
        let due = turn(&s, &[], t, 10, 1000);
        assert_eq!(due.len(), 1, "{}", b.name);
        let fail = attempt(&due[0], t, NextStep::RetryAt(t + 500));
        turn(&s, &[fail], t, 0, 1000);
        assert_eq!(
            s.endpoint(acct, id).unwrap().status,
            "enabled",
            "{}",
            b.name
        );
        let due = turn(&s, &[], t + 600, 10, 1000);
        let fail = attempt(&due[0], t + 1500, NextStep::RetryAt(t + 2000));
        turn(&s, &[fail], t + 1500, 0, 1000);
        let e = s.endpoint(acct, id).unwrap();
        assert_eq!(
            (e.status.as_str(), e.failing_since),
            ("broken", Some(t)),
            "{}",
            b.name
        );
        assert_eq!(s.broken_endpoints().unwrap().len(), 1, "{}", b.name);
        assert!(
            turn(&s, &[], t + 3000, 10, 1000).is_empty(),
            "{}: broken, no calls",
            b.name
        );
        let on = EndpointChange {
            status: Some("enabled"),
            ..Default::default()
        };
        let e = s.update_endpoint(acct, id, &on, t + 3000).unwrap();
        assert_eq!(
            (e.status.as_str(), e.failing_since),
            ("enabled", None),
            "{}",
            b.name
        );
        let due = turn(&s, &[], t + 3000, 10, 1000);
        assert_eq!(due.len(), 1, "{}: enabled again, the delivery goes", b.name);
        turn(
            &s,
            &[attempt(&due[0], t + 3001, NextStep::Delivered)],
            t + 3001,
            0,
            1000,
        );
        let event = due[0].event_id;
        assert_eq!(
            s.replay(acct, id, Replay::Ids(event, event), 10, t + 4000)
                .unwrap(),
            1
        );
        let at = due[0].event.as_ref().unwrap().at;
        let times = Replay::Times(at - 1, at + 1);
        assert_eq!(
            s.replay(acct, id, times, 10, t + 4000).unwrap(),
            1,
            "{}",
            b.name
        );
        assert_eq!(
            turn(&s, &[], t + 4000, 10, 1000).len(),
            1,
            "{}: replayed",
            b.name
        );
        // Pruning everything keeps the newest event, so its id is never given again.
        s.suppress(acct, Channel::Email, "b@x.com", "r", "s")
            .unwrap();
        let before = all_events(&s, acct).len();
        let pruned = s.prune_events(now_ms() + 1, 100).unwrap();
        assert_eq!(pruned as usize, before - 1, "{}", b.name);
        assert_eq!(all_events(&s, acct).len(), 1, "{}", b.name);
    }
}
