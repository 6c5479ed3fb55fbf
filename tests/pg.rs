//! The PostgreSQL store (issue 17, first part) on throwaway clusters (`common::pg`): opening,
//! migrations under the advisory lock, `Admin`, and the ledger's claim/dispatch/record path on
//! rows seeded with SQL (the ledger's part of `store_contract.rs` runs on PostgreSQL too).

use crate::common::accepted;
use crate::common::pg;
use sendonce::domain::address::Channel;
use sendonce::domain::clock::now_ms;
use sendonce::store::{ClaimRequest, OpenOptions, Outcome, Record, Storage};
use std::collections::HashSet;
use std::sync::Arc;

fn create() -> OpenOptions {
    OpenOptions {
        create: true,
        ..Default::default()
    }
}

fn open(url: &str) -> Arc<dyn Storage> {
    sendonce::store::open(std::path::Path::new(url), &create())
        .unwrap_or_else(|e| panic!("open {url}: {e}\n{}", pg::shared().log()))
}

/// A fresh database with one account, `n` subscribers and one campaign in `sending` whose
/// list of `n` rows is built (account and campaign ids are 1): (database name, store).
fn seeded(n: usize) -> (String, Arc<dyn Storage>) {
    let c = pg::shared();
    let url = c.fresh_url();
    let s = open(&url);
    let db = url
        .split('/')
        .nth(3)
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string();
    c.psql(
        &db,
        &format!(
            "INSERT INTO accounts (name, created_at) VALUES ('t', 0);
             INSERT INTO subscribers (account_id, email, email_norm, created_at)
               SELECT 1, 'u' || i || '@x.com', 'u' || i || '@x.com', 0
               FROM generate_series(0, {n} - 1) i;
             INSERT INTO campaigns (account_id, name, channel, subject, body, status,
                                    list_complete, approved_at, scheduled_for, started_at,
                                    created_at)
               VALUES (1, 'c', 'email', 's', 'b', 'sending', TRUE, 0, 0, 0, 0);
             INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                                visible_at, created_at, updated_at)
               SELECT 1, 1, id, 'job-' || id, email_norm, '{{}}', 0, 0, 0
               FROM subscribers ORDER BY id;"
        ),
    );
    (db, s)
}

fn req(batch: usize, token: i64, now: i64, window: Option<i64>) -> ClaimRequest {
    ClaimRequest {
        campaign_id: 1,
        account_id: 1,
        channel: Channel::Email,
        batch,
        lease_ms: 1000,
        token,
        owner: format!("worker-{token}"),
        key_window_ms: window,
        now,
    }
}

#[test]
fn a_new_database_is_migrated_and_admin_answers() {
    let c = pg::shared();
    let url = c.fresh_url();
    let s = open(&url);
    let id = s.installation_id().unwrap();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(s.integrity_check().unwrap(), "ok");
    assert!(s.quick_check(true).unwrap().is_empty());
    assert!(s.journal_mode().unwrap().starts_with("wal"));
    s.check_writable().unwrap();
    assert_eq!(s.in_doubt_count().unwrap(), 0);
    assert_eq!(s.wal_bytes().unwrap(), 0);
    assert_eq!(s.ledger_counts().unwrap().sends, 0);
    let g = s.guard_state().unwrap();
    assert_eq!(
        (g.generation, g.enforced, g.owner.is_none()),
        (0, false, true)
    );
    assert_eq!(g.installation, id);
    s.claim_ownership().unwrap();
    assert_eq!(
        s.key_scope(1, 1).unwrap(),
        sendonce::domain::model::key_scope(&id, 0)
    );
    // SQLite-only operations say so.
    let e = s.adopt(None).unwrap_err().to_string();
    assert!(e.contains("PostgreSQL"), "{e}");
    let e = s
        .backup_to(std::path::Path::new("/tmp/x"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pg_dump"), "{e}");
    // Reopened (not creating): the same installation, migrations not applied twice.
    drop(s);
    let again = sendonce::store::open(std::path::Path::new(&url), &OpenOptions::default()).unwrap();
    assert_eq!(again.installation_id().unwrap(), id);
    let db = url.split('/').nth(3).unwrap().split('?').next().unwrap();
    assert_eq!(
        c.psql(db, "SELECT count(*) FROM sendonce_schema").trim(),
        "1"
    );
}

#[test]
fn an_empty_database_is_refused_without_create_and_the_password_is_never_shown() {
    let c = pg::shared();
    let url = c.fresh_url().replace("sendonce@", "sendonce:hunter2@");
    let e = sendonce::store::open(std::path::Path::new(&url), &OpenOptions::default())
        .err()
        .expect("an empty database without --create is refused")
        .to_string();
    assert!(e.contains("sendonce init"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let s = open(&url);
    let shown = s.path().display().to_string();
    assert!(
        !shown.contains("hunter2") && shown.contains("***"),
        "{shown}"
    );
}

#[test]
fn hosts_starting_together_migrate_once() {
    let c = pg::shared();
    let url = c.fresh_url();
    let ids: Vec<String> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..4)
            .map(|_| sc.spawn(|| open(&url).installation_id().unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    let db = url.split('/').nth(3).unwrap().split('?').next().unwrap();
    assert_eq!(c.psql(db, "SELECT count(*) FROM installation").trim(), "1");
    assert_eq!(
        c.psql(db, "SELECT count(*) FROM sendonce_schema").trim(),
        "1"
    );
}

#[test]
fn traits_not_written_yet_answer_an_error_that_says_so() {
    let s = open(&pg::shared().fresh_url());
    let e = s.suppressions(1).unwrap_err().to_string();
    assert!(e.contains("not yet on PostgreSQL"), "{e}");
}

#[test]
fn a_claim_leases_a_batch_with_its_token_and_the_marker_is_fenced() {
    let (db, s) = seeded(10);
    let c = pg::shared();
    let t0 = now_ms();
    let a = s.claim(&req(3, 41, t0, None)).unwrap();
    assert_eq!(a.rows.len(), 3);
    assert!(a.rows.iter().all(|r| r.token == 41 && !r.maybe_delivered));
    let status = |st: &str| {
        c.psql(
            &db,
            &format!("SELECT count(*) FROM sends WHERE status = '{st}'"),
        )
        .trim()
        .parse::<i64>()
        .unwrap()
    };
    assert_eq!((status("leased"), status("queued")), (3, 7));
    let wrong: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, 40)).collect();
    assert!(s.mark_dispatched(&wrong, t0, 1000).unwrap().is_empty());
    let keys: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, r.token)).collect();
    assert_eq!(s.mark_dispatched(&keys, t0, 1000).unwrap().len(), 3);
    // The rest, never the rows already held.
    let b = s.claim(&req(100, 2, t0, None)).unwrap();
    assert_eq!(b.rows.len(), 7);
    let first: HashSet<i64> = a.rows.iter().map(|r| r.id).collect();
    assert!(b.rows.iter().all(|r| !first.contains(&r.id)));
    // Outcomes: accepted (fenced on the token), a stale failure fenced out.
    let recs: Vec<Record> = a.rows.iter().map(|r| accepted(r.id, r.token)).collect();
    let st = s.record(&recs, t0).unwrap();
    assert_eq!(st.sent, 3);
    let stale = Record {
        id: a.rows[0].id,
        token: 41,
        outcome: Outcome::Failed {
            error: "x".into(),
            suppress: None,
        },
    };
    assert_eq!(s.record(&[stale], t0).unwrap().fenced_out, 1);
    // The campaign completes only when every row is settled.
    assert!(!s.try_complete(1, t0).unwrap());
    let recs: Vec<Record> = b.rows.iter().map(|r| accepted(r.id, r.token)).collect();
    assert_eq!(s.record(&recs, t0).unwrap().sent, 7);
    assert!(s.try_complete(1, t0).unwrap());
    assert_eq!(s.ledger_counts().unwrap().sent, 10);
    assert!(s.guard_state().unwrap().generation >= 2);
}

#[test]
fn an_expired_dispatched_lease_goes_in_doubt_and_a_late_acceptance_is_still_sent() {
    let (db, s) = seeded(2);
    let c = pg::shared();
    let t0 = now_ms();
    let (_, a) = s.cycle(&[], Some(&req(2, 1, t0, None)), t0).unwrap();
    assert_eq!(a.rows.len(), 2, "the cycle claims with the dispatch marker");
    // Both leases expire; the next claim parks them in doubt (no key window)...
    let later = t0 + 60_000;
    let b = s.claim(&req(10, 2, later, None)).unwrap();
    assert_eq!((b.rows.len(), b.in_doubt), (0, 2));
    assert_eq!(s.in_doubt_count().unwrap(), 2);
    // ...and the first worker's late "accepted" is recorded as sent, never dropped.
    let st = s.record(&[accepted(a.rows[0].id, 1)], later).unwrap();
    assert_eq!(st.late_confirmations, 1);
    assert_eq!(
        c.psql(&db, "SELECT count(*) FROM sends WHERE status = 'sent'")
            .trim(),
        "1"
    );
}

#[test]
fn inside_the_key_window_an_expired_dispatched_row_is_retried_with_the_same_key() {
    let (_db, s) = seeded(1);
    let t0 = now_ms();
    let (_, a) = s
        .cycle(&[], Some(&req(1, 1, t0, Some(3_600_000))), t0)
        .unwrap();
    assert_eq!(a.rows.len(), 1);
    let b = s.claim(&req(1, 2, t0 + 5_000, Some(3_600_000))).unwrap();
    assert_eq!(b.rows.len(), 1);
    assert!(b.rows[0].maybe_delivered);
    assert_eq!(b.rows[0].job_id, a.rows[0].job_id);
}

#[test]
fn a_suppression_committed_before_the_claim_wins() {
    let (db, s) = seeded(3);
    pg::shared().psql(
        &db,
        "INSERT INTO suppressions (account_id, channel, address, reason, source, created_at)
         VALUES (1, 'email', 'u1@x.com', 'bounce', 'test', 0)",
    );
    let t0 = now_ms();
    let a = s.claim(&req(10, 1, t0, None)).unwrap();
    assert_eq!((a.rows.len(), a.suppressed), (2, 1));
    assert!(a.rows.iter().all(|r| r.address != "u1@x.com"));
}

#[test]
fn workers_claiming_at_once_never_hold_the_same_row() {
    let (_db, s) = seeded(200);
    let t0 = now_ms();
    let all: Vec<Vec<i64>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (1..=4)
            .map(|w| {
                let s = s.clone();
                sc.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let got = s.claim(&req(7, w, t0, None)).unwrap();
                        if got.rows.is_empty() {
                            break mine;
                        }
                        mine.extend(got.rows.iter().map(|r| r.id));
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: usize = all.iter().map(Vec::len).sum();
    let distinct: HashSet<i64> = all.iter().flatten().copied().collect();
    assert_eq!((total, distinct.len()), (200, 200));
}

/// The bridge (src/store/postgres/mod.rs): a store call made on a thread that is running an
/// async task of another runtime answers (no "runtime within a runtime" panic), and the store
/// can be dropped there too.
#[test]
fn a_store_call_inside_an_async_task_answers_and_the_store_drops_there() {
    let s = open(&pg::shared().fresh_url());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = rt.block_on(async move {
        let id = s.installation_id().unwrap();
        drop(s);
        id
    });
    assert_eq!(id.len(), 32);
}
