//! The PostgreSQL store (issue 17, first part) on throwaway clusters (`common::pg`): opening,
//! migrations under the advisory lock, `Admin`, and the ledger's claim/dispatch/record path on
//! rows seeded with SQL (the ledger's part of `store_contract.rs` runs on PostgreSQL too).

use crate::common::accepted;
use crate::common::pg;
use crate::common::CycleOne;
use sendonce::domain::address::Channel;
use sendonce::domain::clock::now_ms;
use sendonce::store::prelude::*;
use sendonce::store::{ClaimRequest, OpenOptions, Outcome, Record, Store};
use std::collections::HashSet;
use std::sync::Arc;

fn create() -> OpenOptions {
    OpenOptions {
        create: true,
        ..Default::default()
    }
}

fn open(url: &str) -> Arc<Store> {
    sendonce::store::open(
        &sendonce::store::Target::parse(std::path::Path::new(url)),
        &create(),
    )
    .unwrap_or_else(|e| panic!("open {url}: {e}\n{}", pg::shared().log()))
}

/// A fresh database with one account, `n` subscribers and one campaign in `sending` whose
/// list of `n` rows is built (account and campaign ids are 1): (database name, store).
fn seeded(n: usize) -> (String, Arc<Store>) {
    let c = pg::shared();
    let url = c.fresh_url();
    let s = open(&url);
    let db = pg::db_name(&url);
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
    assert!(s.file().is_none(), "a PostgreSQL store has no file");
    assert_eq!(s.ledger_counts().unwrap().sends, 0);
    let g = s.guard_state().unwrap();
    assert_eq!(
        (g.generation, g.enforced, g.owner.is_none()),
        (0, false, true)
    );
    assert_eq!(g.installation, id);
    assert_eq!(
        s.key_scope(1, 1).unwrap(),
        sendonce::domain::model::key_scope(&id, 0)
    );
    // SQLite-only operations say so.
    let e = sendonce::app::guard::adopt(&s).unwrap_err().to_string();
    assert!(e.contains("PostgreSQL"), "{e}");
    let e =
        sendonce::app::guard::backup(&s, std::path::Path::new("/tmp/x"), &OpenOptions::default())
            .unwrap_err()
            .to_string();
    assert!(e.contains("pg_dump"), "{e}");
    // Reopened (not creating): the same installation, migrations not applied twice.
    drop(s);
    let again = sendonce::store::open(
        &sendonce::store::Target::parse(std::path::Path::new(&url)),
        &OpenOptions::default(),
    )
    .unwrap();
    assert_eq!(again.installation_id().unwrap(), id);
    let db = url.split('/').nth(3).unwrap().split('?').next().unwrap();
    assert_migrated_once(c, db);
}

/// Every file of `schema/postgres/` applied, each once and in order, and the database is at
/// this binary's version.
fn assert_migrated_once(c: &pg::PgCluster, db: &str) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/postgres");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".sql").map(str::to_owned))
        .collect();
    files.sort();
    assert_eq!(
        c.psql(
            db,
            "SELECT string_agg(name, ',' ORDER BY version) FROM sendonce_schema"
        )
        .trim(),
        files.join(",")
    );
    assert_eq!(
        c.psql(db, "SELECT max(version) FROM sendonce_schema")
            .trim(),
        sendonce::store::postgres::SCHEMA_VERSION.to_string()
    );
}

#[test]
fn an_empty_database_is_refused_without_create_and_the_password_is_never_shown() {
    let c = pg::shared();
    let url = c.fresh_url().replace("sendonce@", "sendonce:hunter2@");
    let e = sendonce::store::open(
        &sendonce::store::Target::parse(std::path::Path::new(&url)),
        &OpenOptions::default(),
    )
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
    assert_migrated_once(c, db);
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
    let (_, a) = s.cycle_one(&[], Some(&req(2, 1, t0, None)), t0).unwrap();
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
        .cycle_one(&[], Some(&req(1, 1, t0, Some(3_600_000))), t0)
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

/// The bridge (crates/store/src/postgres/mod.rs): a store call made on a thread that is running an
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

/// The database name in a `common::pg` URL.
fn db_name(url: &str) -> String {
    url.split('/')
        .nth(3)
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string()
}

/// `Lists` and `Optin` on both stores from the same rows (seeded with SQL both dialects read,
/// since adding subscribers to lists is not on PostgreSQL yet): every answer compared, errors
/// by kind and message. The store contract's list tests need `add_subscriber` with lists.
#[test]
fn lists_and_optin_answer_alike_on_both_stores() {
    let env = crate::common::Env::new();
    let sqlite =
        sendonce::store::open(&sendonce::store::Target::File(env.db.clone()), &create()).unwrap();
    let url = pg::shared().fresh_url();
    let db = db_name(&url);
    let postgres = open(&url);
    let a = lists_scenario(&sqlite, &|sql: &str| {
        env.sqlite().execute_batch(sql).unwrap()
    });
    let b = lists_scenario(&postgres, &|sql: &str| {
        pg::shared().psql(&db, sql);
    });
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "sqlite, then postgresql");
    }
}

/// The ids the phases of [`lists_scenario`] share: two accounts and the first one's lists.
struct ListIds {
    acct: i64,
    other: i64,
    la: i64,
    lb: i64,
    ld: i64,
}

/// A store answer as text: the value, or the error's kind and message.
fn show<T: std::fmt::Debug>(r: sendonce::error::Result<T>) -> String {
    format!("{:?}", r.map_err(|e| (e.kind, e.message)))
}

/// Every field of a list row, and its member counts, on one line.
fn list_text(l: &sendonce::store::ListRow) -> String {
    format!(
        "{} {} {} {:?} {:?} {} {:?} {:?} {:?} {}/{}/{}",
        l.id,
        l.account_id,
        l.name,
        l.description,
        l.optin,
        l.public,
        l.confirm_from,
        l.confirm_subject,
        l.confirm_body,
        l.subscribed,
        l.unsubscribed,
        l.pending
    )
}

/// A list described "desc", with a confirmation sender when it is double opt-in.
fn new_list(
    account_id: i64,
    name: &'static str,
    optin: sendonce::store::OptIn,
    public: bool,
) -> sendonce::store::NewList<'static> {
    use sendonce::store::{ConfirmContent, NewList, OptIn};
    NewList {
        account_id,
        name,
        description: Some("desc"),
        optin,
        public,
        confirm: ConfirmContent {
            from: if optin == OptIn::Double {
                Some("news@example.org")
            } else {
                None
            },
            ..Default::default()
        },
    }
}

/// The lists of `account`, shown.
fn lists_of(s: &Store, account: i64) -> String {
    show(
        s.lists(account)
            .map(|v| v.iter().map(list_text).collect::<Vec<_>>()),
    )
}

/// The list `key` names in `account`, shown.
fn find_of(s: &Store, account: i64, key: &str) -> String {
    show(s.find_list(account, key).map(|l| list_text(&l)))
}

/// The audience counts of `lists` on `channel` in `acct`, without a filter, shown.
fn audience_of(s: &Store, acct: i64, lists: &[i64], channel: Channel) -> String {
    show(s.audience_counts_for(&sendonce::store::AudienceQuery {
        account_id: acct,
        channel,
        lists,
        filter: None,
    }))
}

fn lists_scenario(s: &Arc<Store>, exec: &dyn Fn(&str)) -> Vec<String> {
    let mut out = Vec::new();
    let ids = lists_created(s, &mut out);
    lists_members_seeded(s, exec, ids.acct);
    lists_read(s, &ids, &mut out);
    lists_updated(s, &ids, &mut out);
    lists_opt_in(s, &ids, &mut out);
    lists_campaign_seeded(s, exec, &ids, &mut out);
    lists_unsubscribed(s, &ids, &mut out);
    out
}

/// Two accounts, the first one's three lists, and the lists `create_list` refuses.
fn lists_created(s: &Store, out: &mut Vec<String>) -> ListIds {
    use sendonce::store::OptIn;
    let acct = s.add_account("t").unwrap();
    let other = s.add_account("o").unwrap();
    assert_eq!((acct, other), (1, 2));
    let la = s
        .create_list(&new_list(acct, "a", OptIn::Single, false))
        .unwrap();
    let lb = s
        .create_list(&new_list(acct, " b ", OptIn::Single, false))
        .unwrap();
    let ld = s
        .create_list(&new_list(acct, "d", OptIn::Double, true))
        .unwrap();
    assert_eq!((la, lb, ld), (1, 2, 3));
    out.push(show(s.create_list(&new_list(
        acct,
        "a",
        OptIn::Double,
        false,
    ))));
    out.push(show(s.create_list(&new_list(
        acct,
        "  ",
        OptIn::Single,
        false,
    ))));
    out.push(show(s.create_list(&new_list(
        99,
        "x",
        OptIn::Single,
        false,
    ))));
    ListIds {
        acct,
        other,
        la,
        lb,
        ld,
    }
}

/// Subscribers and list members seeded with SQL, and one member's address suppressed.
fn lists_members_seeded(s: &Store, exec: &dyn Fn(&str), acct: i64) {
    exec(
        "INSERT INTO subscribers (id, account_id, email, email_norm, phone, status, attrs, created_at)
         VALUES (1, 1, 'u0@x.com', 'u0@x.com', NULL, 'confirmed', '{\"city\":\"Lisboa\"}', 0),
                (2, 1, 'U1@x.com', 'u1@x.com', NULL, 'confirmed', '{\"city\":\"Lisboa\"}', 0),
                (3, 1, 'u2@x.com', 'u2@x.com', NULL, 'confirmed', '{\"city\":\"Porto\"}', 0),
                (4, 1, 'u3@x.com', 'u3@x.com', NULL, 'confirmed', '{}', 0),
                (5, 1, 'u4@x.com', 'u4@x.com', NULL, 'pending', '{\"city\":\"Faro\"}', 0),
                (6, 1, 'u5@x.com', 'u5@x.com', NULL, 'confirmed', '{\"city\":\"Faro\"}', 0),
                (7, 1, NULL, NULL, '+351912345678', 'confirmed', '{}', 0),
                (8, 1, 'u6@x.com', 'u6@x.com', NULL, 'pending', '{}', 0),
                (9, 2, 'u1@x.com', 'u1@x.com', NULL, 'confirmed', '{}', 0);
         INSERT INTO list_members (list_id, subscriber_id, status, created_at, updated_at)
         VALUES (1, 1, 'subscribed', 0, 0), (1, 2, 'subscribed', 0, 0),
                (2, 2, 'subscribed', 0, 0), (2, 3, 'subscribed', 0, 0),
                (1, 5, 'subscribed', 0, 0), (1, 6, 'subscribed', 0, 0),
                (1, 7, 'subscribed', 0, 0), (3, 8, 'pending', 0, 0);",
    );
    s.suppress(acct, Channel::Email, "u5@x.com", "test", "test")
        .unwrap();
}

/// The lists read back: listed, found by name or id, audience and variable counts.
fn lists_read(s: &Store, ids: &ListIds, out: &mut Vec<String>) {
    use sendonce::domain::segment::Filter;
    use sendonce::store::AudienceQuery;
    let ListIds {
        acct,
        other,
        la,
        lb,
        ld,
    } = *ids;
    out.push(lists_of(s, acct));
    out.push(lists_of(s, 99));
    for key in ["a", "2", " b ", "b", "nope", "3"] {
        out.push(find_of(s, acct, key));
    }
    out.push(find_of(s, other, "a"));
    out.push(find_of(s, 99, "a"));
    for l in [&[la, lb][..], &[], &[lb], &[la], &[ld]] {
        out.push(audience_of(s, acct, l, Channel::Email));
        out.push(audience_of(s, acct, l, Channel::Sms));
    }
    let v = |lists: &[i64]| {
        show(s.variable_counts_for(&AudienceQuery {
            account_id: acct,
            channel: Channel::Email,
            lists,
            filter: None,
        }))
    };
    out.push(v(&[lb]));
    out.push(v(&[]));
    out.push(v(&[la, ld]));
    // Filters are SQLite's only for now: checked to parse, not compared.
    let _ = Filter::parse("city = \"Lisboa\"").unwrap();
}

/// `update_list` and `public_list` on the account's lists, another account's and unknown ones.
fn lists_updated(s: &Store, ids: &ListIds, out: &mut Vec<String>) {
    use sendonce::store::{ConfirmContent, ListChange};
    let ListIds {
        acct,
        other,
        la,
        ld,
        ..
    } = *ids;
    out.push(show(s.update_list(
        acct,
        ld,
        &ListChange {
            public: None,
            confirm: ConfirmContent {
                subject: Some("Confirm"),
                ..Default::default()
            },
        },
    )));
    out.push(show(s.update_list(other, ld, &ListChange::default())));
    out.push(show(s.update_list(acct, 99, &ListChange::default())));
    out.push(find_of(s, acct, "d"));
    out.push(show(s.public_list(ld).map(|l| l.map(|l| list_text(&l)))));
    out.push(show(s.public_list(la).map(|l| l.map(|l| list_text(&l)))));
    out.push(show(s.public_list(99).map(|l| l.map(|l| list_text(&l)))));
}

/// Opt-in: confirmations looked up and confirmed, then the list and the audience read again.
fn lists_opt_in(s: &Store, ids: &ListIds, out: &mut Vec<String>) {
    use sendonce::store::MemberKey;
    let ListIds {
        acct,
        other,
        la,
        ld,
        ..
    } = *ids;
    let key = |account_id: i64, list_id: i64, address: &'static str| MemberKey {
        account_id,
        list_id,
        channel: Channel::Email,
        address,
    };
    let conf = |k: MemberKey<'_>| {
        show(
            s.confirmation(&k)
                .map(|c| c.map(|c| (c.list_name, c.state))),
        )
    };
    let confirm = |k: MemberKey<'_>, now: i64| {
        show(
            s.confirm(&k, now)
                .map(|c| c.map(|c| (c.list_name, c.state))),
        )
    };
    out.push(conf(key(acct, ld, "u6@x.com")));
    out.push(conf(key(other, ld, "u6@x.com")));
    out.push(conf(key(acct, ld, "nobody@x.com")));
    out.push(conf(key(acct, 99, "u6@x.com")));
    out.push(confirm(key(acct, ld, "u6@x.com"), 1));
    out.push(confirm(key(acct, ld, "u6@x.com"), 2));
    out.push(confirm(key(acct, la, "u0@x.com"), 3));
    out.push(confirm(key(other, la, "u1@x.com"), 3));
    out.push(find_of(s, acct, "d"));
    out.push(audience_of(s, acct, &[], Channel::Email));
}

/// A list campaign in sending seeded with SQL: its lists read, its targeted lists kept.
fn lists_campaign_seeded(s: &Store, exec: &dyn Fn(&str), ids: &ListIds, out: &mut Vec<String>) {
    exec(
        "INSERT INTO campaigns (id, account_id, name, channel, subject, body, created_at)
         VALUES (1, 1, 'c', 'email', 's', 'b', 0);
         INSERT INTO campaign_lists (campaign_id, list_id) VALUES (1, 1), (1, 2);
         UPDATE campaigns SET status = 'sending', approved_at = 0, scheduled_for = 0,
                              started_at = 0, list_complete = TRUE WHERE id = 1;
         INSERT INTO sends (account_id, campaign_id, subscriber_id, job_id, address, vars,
                            visible_at, created_at, updated_at)
         VALUES (1, 1, 1, 'j1', 'u0@x.com', '{}', 0, 0, 0),
                (1, 1, 2, 'j2', 'u1@x.com', '{}', 0, 0, 0),
                (1, 1, 3, 'j3', 'u2@x.com', '{}', 0, 0, 0);",
    );
    out.push(show(s.campaign_lists(1)));
    out.push(show(s.campaign_lists(99)));
    out.push(show(s.audience_counts(1)));
    out.push(show(s.audience_counts(99)));
    out.push(show(s.remove_list(ids.acct, ids.lb)));
    out.push(show(s.remove_list(ids.other, ids.la)));
}

/// Unsubscribes withdraw the campaign's queued rows; lists created, removed and read again.
fn lists_unsubscribed(s: &Store, ids: &ListIds, out: &mut Vec<String>) {
    use sendonce::store::{OptIn, UnsubscribeRequest};
    let ListIds {
        acct,
        other,
        la,
        lb,
        ld,
    } = *ids;
    let queued = || {
        let c = s.status_counts(1).unwrap();
        format!("{:?}", c.counts)
    };
    let state = |addr: &str, lists: &[i64]| show(s.link_state(acct, Channel::Email, addr, lists));
    let unsub = |account_id: i64, addr: &str, lists: &[i64], everything: bool| {
        show(s.unsubscribe(&UnsubscribeRequest {
            account_id,
            channel: Channel::Email,
            address: addr,
            lists,
            everything,
            source: "unsubscribe-link",
        }))
    };
    out.push(state("u1@x.com", &[la, lb]));
    out.push(state("nobody@x.com", &[la, 99]));
    out.push(unsub(acct, "u1@x.com", &[la], false));
    out.push(queued());
    out.push(unsub(acct, "u1@x.com", &[la], false));
    out.push(unsub(acct, "u1@x.com", &[lb], false));
    out.push(queued());
    out.push(unsub(acct, "u0@x.com", &[la], false));
    out.push(queued());
    out.push(state("u1@x.com", &[la, lb]));
    out.push(unsub(acct, "u2@x.com", &[], true));
    out.push(unsub(acct, "u2@x.com", &[], true));
    out.push(queued());
    out.push(unsub(acct, "nobody@x.com", &[], true));
    out.push(state("nobody@x.com", &[]));
    let theirs = s
        .create_list(&new_list(other, "theirs", OptIn::Single, false))
        .unwrap();
    out.push(state("u1@x.com", &[theirs]));
    out.push(unsub(acct, "u3@x.com", &[theirs], true));
    out.push(unsub(999_999, "u3@x.com", &[], true));
    out.push(state("u3@x.com", &[]));
    out.push(lists_of(s, acct));
    let gone = s
        .create_list(&new_list(acct, "gone", OptIn::Single, false))
        .unwrap();
    out.push(show(s.remove_list(acct, gone)));
    out.push(state("u1@x.com", &[gone]));
    out.push(show(s.remove_list(acct, ld)));
    out.push(lists_of(s, acct));
}

// ---- notify, webhooks, which store, doctor (issue 17, H2) ------------------------------------

/// A CLI environment whose `--db` is `url` (the temporary directory holds files and configs).
fn pg_env(url: &str) -> crate::common::Env {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::common::Env {
        dir,
        db: std::path::PathBuf::from(url),
    }
}

fn json_of(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON document: {e}\n{out}"))
}

#[test]
fn notify_on_postgres_sends_once_and_a_retry_sends_nothing_more() {
    let c = pg::shared();
    let url = c.fresh_url().replace("sendonce@", "sendonce:hunter2@");
    let d = tempfile::tempdir().unwrap();
    let outbox = d.path().join("o.jsonl");
    let xdg = d.path().join("xdg");
    let spec = format!("outbox:{}?idempotent=false", outbox.display());
    let run = |how: &str| -> crate::common::Run {
        let mut cmd = std::process::Command::new(crate::common::BIN);
        cmd.env_remove("SENDONCE_PROVIDER")
            .env("XDG_STATE_HOME", &xdg)
            .env_remove("SENDONCE_DB");
        if how == "flag" {
            cmd.args(["--db", &url]);
        } else {
            cmd.env("SENDONCE_DB", &url);
        }
        cmd.args([
            "--json",
            "notify",
            "--key",
            "deploy-42",
            "--message",
            "deploy ok",
        ])
        .args(["--to", "ops@example.com", "--to", "+14155550100"])
        .args(["--provider", &spec]);
        cmd.output().expect("run sendonce notify").into()
    };
    let first = run("flag");
    assert_eq!(first.code, 0, "{}\n{}", first.stderr, first.stdout);
    let v = json_of(&first.stdout);
    let outcomes: Vec<&str> = v["recipients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["sent", "sent"], "{v}");
    assert_eq!(v["store"], "postgres", "{v}");
    let state = v["state"].as_str().unwrap();
    assert!(
        state.starts_with("postgres://") && state.contains("***"),
        "{state}"
    );
    // A retried job (here through SENDONCE_DB) finds the rows already sent.
    let second = run("env");
    assert_eq!(second.code, 0, "{}\n{}", second.stderr, second.stdout);
    let v2 = json_of(&second.stdout);
    assert!(
        v2["recipients"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["outcome"] == "already_sent"),
        "{v2}"
    );
    for out in [&first, &second] {
        assert!(!out.stdout.contains("hunter2") && !out.stderr.contains("hunter2"));
    }
    let sent = crate::common::deliveries(&outbox);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.values().all(|n| *n == 1), "{sent:?}");
    // The ledger is the PostgreSQL database, not a state file.
    assert!(!xdg.join("sendonce").join("notify.db").exists());
    let db = db_name(&url);
    assert_eq!(
        c.psql(&db, "SELECT count(*) FROM sends WHERE status = 'sent'")
            .trim(),
        "2"
    );
}

#[test]
fn a_bounce_posted_to_serve_on_postgres_suppresses_the_address_once() {
    use sendonce::domain::webhook::{decode_secret, sign};
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let env = pg_env(&pg::shared().fresh_url());
    env.setup_account();
    let secret = env.write("standard.secret", SECRET);
    let cfg = env.write(
        "sendonce.toml",
        format!(
            "[[webhook]]\naccount = \"acme\"\nsource = \"standard\"\nsecret_file = \"{}\"\n",
            secret.display()
        ),
    );
    let server = crate::common::Server::start(&env, &["--config", cfg.to_str().unwrap()]);
    // /readyz names its store and that store's schema version, as doctor does.
    let ready: serde_json::Value = crate::common::rt().block_on(async {
        let res = crate::common::client()
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap();
        res.json().await.unwrap()
    });
    assert_eq!(ready["store"], "postgres", "{ready}");
    assert_eq!(
        ready["schema_version"],
        sendonce::store::postgres::SCHEMA_VERSION,
        "{ready}"
    );
    let body = serde_json::json!({"type": "message.bounced", "data": {"to": "R@Example.com"}})
        .to_string()
        .into_bytes();
    let ts = now_ms() / 1000;
    let sig = sign(&decode_secret(SECRET).unwrap(), "evt_pg_1", ts, &body);
    let post = |body: Vec<u8>| {
        let url = server.url("/hooks/standard/acme");
        let sig = sig.clone();
        crate::common::rt().block_on(async move {
            let res = crate::common::client()
                .post(url)
                .header("content-type", "application/json")
                .header("webhook-id", "evt_pg_1")
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", sig)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            (status, res.text().await.unwrap_or_default())
        })
    };
    let (s1, b1) = post(body.clone());
    assert_eq!(s1, 200, "{b1}");
    let (s2, b2) = post(body.clone());
    assert_eq!(s2, 200, "{b2}");
    let r2 = json_of(&b2);
    assert_eq!(
        (r2["replay"].clone(), r2["action"].clone()),
        (true.into(), "suppressed".into()),
        "{b2}"
    );
    let list = json_of(&env.ok(&["--json", "suppress", "list", "--account", "acme"]));
    assert_eq!(list["store"], "postgres", "{list}");
    let rows = list["suppressions"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["address"], "r@example.com", "{list}");
    assert_eq!(rows[0]["source"], "standard", "{list}");
    let db = db_name(&env.db.display().to_string());
    assert_eq!(
        pg::shared()
            .psql(&db, "SELECT count(*) FROM webhook_events")
            .trim(),
        "1"
    );
}

#[test]
fn json_output_says_which_store_the_command_used() {
    let env = pg_env(&pg::shared().fresh_url());
    let init = json_of(&env.ok(&["--json", "init"]));
    assert_eq!(init["store"], "postgres", "{init}");
    env.ok(&["account", "add", "acme"]);
    let list = json_of(&env.ok(&["--json", "account", "list"]));
    assert_eq!(list["store"], "postgres", "{list}");
    assert_eq!(list["accounts"][0]["name"], "acme", "{list}");
    let file = crate::common::Env::new();
    file.ok(&["init"]);
    let list = json_of(&file.ok(&["--json", "account", "list"]));
    assert_eq!(list["store"], "sqlite", "{list}");
    // A command that opens no store of the user's says nothing about one.
    let ex = file.run(&["--json", "config", "show"]);
    if ex.code == 0 && !ex.stdout.trim().is_empty() {
        assert!(json_of(&ex.stdout).get("store").is_none(), "{}", ex.stdout);
    }
}

#[test]
fn doctor_on_postgres_reads_the_ledger_and_never_shows_the_password() {
    let c = pg::shared();
    let (db, _s) = seeded(3);
    c.psql(
        &db,
        "UPDATE sends SET status = 'in_doubt', doubt_since = 1, dispatched_at = 1, attempts = 1
           WHERE id = 1;
         UPDATE sends SET status = 'leased', lease_token = 5, lease_owner = 'w', visible_at = 1,
                claimed_at = 1 WHERE id = 2;",
    );
    let url = c.url(&db).replace("sendonce@", "sendonce:hunter2@");
    let env = pg_env(&url);
    let r = env.run(&["doctor"]);
    assert_eq!(
        r.code, 1,
        "rows in doubt need attention\n{}\n{}",
        r.stdout, r.stderr
    );
    assert!(
        !r.stdout.contains("hunter2") && !r.stderr.contains("hunter2"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("(postgres)"), "{}", r.stdout);
    let v = json_of(&env.run(&["--json", "doctor"]).stdout);
    assert_eq!(v["store"], "postgres", "{v}");
    assert!(v["path"].as_str().unwrap().contains("***"), "{v}");
    let f = |name: &str| {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name} finding: {v}"))
            .clone()
    };
    assert_eq!(f("reachable")["level"], "ok", "{v}");
    assert!(
        f("server")["detail"]
            .as_str()
            .unwrap()
            .starts_with("PostgreSQL "),
        "{v}"
    );
    assert_eq!(f("schema")["level"], "ok", "{v}");
    assert_eq!(f("consistency")["level"], "ok", "{v}");
    assert_eq!(
        f("ledger")["detail"],
        "3 row(s): in_doubt 1, leased 1, queued 1",
        "{v}"
    );
    assert_eq!(f("in_doubt")["level"], "warn", "{v}");
    assert!(
        f("in_doubt")["detail"]
            .as_str()
            .unwrap()
            .contains("campaign 1: 1"),
        "{v}"
    );
    assert_eq!(f("expired_leases")["level"], "warn", "{v}");
    assert!(
        f("expired_leases")["detail"]
            .as_str()
            .unwrap()
            .contains("campaign 1: 1"),
        "{v}"
    );
    for name in ["file_modes", "wal", "disk", "integrity_check"] {
        assert!(
            f(name)["detail"]
                .as_str()
                .unwrap()
                .starts_with("not applicable"),
            "{name}: {v}"
        );
    }
    // Settled, the same database is healthy.
    c.psql(&db, "UPDATE sends SET status = 'queued', lease_token = NULL, lease_owner = NULL, doubt_since = NULL");
    let ok = env.run(&["doctor"]);
    assert_eq!(ok.code, 0, "{}", ok.stdout);
    // A server that does not answer is a finding, with the password still hidden.
    let down = format!(
        "postgres://sendonce:hunter2@127.0.0.1:{}/x?connect_timeout=2",
        crate::common::refused_port()
    );
    let r = pg_env(&down).run(&["doctor"]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("FAIL  reachable"), "{}", r.stdout);
    assert!(
        !r.stdout.contains("hunter2") && !r.stderr.contains("hunter2"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}

/// Two hosts receiving the same event at once (a provider retrying while the first request is
/// in flight) apply it once; notifies with one key at once make one campaign and one row per
/// recipient.
#[test]
fn the_same_webhook_or_notification_at_once_on_several_connections_is_applied_once() {
    use sendonce::domain::webhook::{Effect, Event, Source};
    use sendonce::store::Applied;
    let url = pg::shared().fresh_url();
    let s = open(&url);
    let acct = s.add_account("t").unwrap();
    let event = Event {
        event_id: "evt_race".into(),
        kind: "message.bounced".into(),
        job_id: None,
        address: Some("r@x.com".into()),
        effect: Effect::Suppress {
            channel: Channel::Email,
            address: "r@x.com".into(),
            reason: "bounced".into(),
        },
    };
    let stores: Vec<Arc<Store>> = (0..6).map(|_| open(&url)).collect();
    let applied: Vec<Applied> = std::thread::scope(|sc| {
        let hs: Vec<_> = stores
            .iter()
            .map(|st| {
                let e = event.clone();
                sc.spawn(move || {
                    st.apply_webhook(acct, Source::Standard, &e, "h", 1)
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let new = applied
        .iter()
        .filter(|a| matches!(a, Applied::New(_)))
        .count();
    assert_eq!(new, 1, "{applied:?}");
    let db = db_name(&url);
    let c = pg::shared();
    assert_eq!(
        c.psql(&db, "SELECT count(*) FROM webhook_events").trim(),
        "1"
    );
    let to = vec!["a@x.com".to_string(), "b@x.com".to_string()];
    let cids: Vec<i64> = std::thread::scope(|sc| {
        let hs: Vec<_> = stores
            .iter()
            .map(|st| {
                let to = to.clone();
                sc.spawn(move || {
                    st.prepare_notification("k", Channel::Email, None, Some("s"), "b", &to)
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(cids.iter().all(|c| *c == cids[0]), "{cids:?}");
    assert_eq!(
        c.psql(&db, "SELECT count(*) FROM campaigns WHERE stream")
            .trim(),
        "1",
        "one stream"
    );
    assert_eq!(
        c.psql(&db, "SELECT count(*) FROM message_contents").trim(),
        "1",
        "one content"
    );
    assert_eq!(c.psql(&db, "SELECT count(*) FROM sends").trim(), "2");
}

/// Once most of a campaign's rows are sent, the send path's reads of it (and the sweep of
/// cancelled campaigns) go through the partial indexes written for them: none reads every row
/// of the campaign on each call (the completion check did, with its three states in one list,
/// while holding the campaign row locked against every claim).
#[test]
fn the_hot_reads_of_a_mostly_sent_campaign_use_their_partial_indexes() {
    let c = pg::shared();
    let (db, _s) = seeded(20_000);
    c.psql(
        &db,
        "UPDATE sends SET status = 'sent', sent_at = 0 WHERE id > 2;
         UPDATE sends SET status = 'in_doubt', doubt_since = 0 WHERE id = 2;",
    );
    let store = sendonce::store::postgres::PgStore::open(&c.url(&db), &create()).unwrap();
    let plans = store.hot_read_plans(1).unwrap();
    let names: Vec<&str> = plans.iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "claim: candidates",
            "next visible",
            "reconcilable",
            "complete if done",
            "sweep cancelled",
        ]
    );
    for p in &plans {
        assert!(
            !p.reads_whole_campaign(),
            "{} reads the whole campaign:\n{}",
            p.name,
            p.plan.join("\n")
        );
    }
}

/// A fresh database with the key epochs a database moved from a SQLite file that had adopted
/// lost timelines keeps (`guard_epochs`): labels 3 and 7, with bounds chosen so that the number
/// of epochs above an id, or the highest label overall, would give other answers than the
/// highest label of the epochs the ids are above. (database name, store, installation id).
fn with_key_epochs() -> (String, Arc<Store>, String) {
    let c = pg::shared();
    let url = c.fresh_url();
    let s = open(&url);
    let db = url.split('/').nth(3).unwrap().split('?').next().unwrap();
    c.psql(
        db,
        "INSERT INTO guard_epochs (epoch, label, adopted_at, campaigns_through,
                                   subscribers_through, lists_through, messages_through)
         VALUES (1, 3, 0, 5, 10, 9, 0), (2, 7, 0, 7, 20, 0, 9)",
    );
    let id = s.installation_id().unwrap();
    (db.to_string(), s, id)
}

/// Ids above an epoch's bounds get the highest such epoch's label in their job ids, as on
/// SQLite: `Admin::key_scope` (what campaign preview shows) and an API message.
#[test]
fn key_epochs_moved_in_scope_campaign_and_api_message_job_ids() {
    use sendonce::domain::model::{api_job_id, key_scope};
    use sendonce::store::{NewMessage, Submitted};
    let (db, s, id) = with_key_epochs();
    for ((campaign, subscriber), label) in [
        ((5, 10), 0),
        ((6, 1), 3),
        ((6, 11), 3),
        ((1, 21), 7),
        ((8, 1), 7),
    ] {
        assert_eq!(
            s.key_scope(campaign, subscriber).unwrap(),
            key_scope(&id, label),
            "campaign {campaign}, subscriber {subscriber}"
        );
    }
    let acct = s.add_account("t").unwrap();
    let sent = s
        .submit_message(&NewMessage {
            account_id: acct,
            idempotency_key: "k1",
            request_hash: "h1",
            channel: Channel::Email,
            to: "a@x.com",
            from: Some("me@x.com"),
            reply_to: None,
            subject: Some("s"),
            text: "t",
            html: None,
            template: None,
            attachments: &[],
            metadata: None,
            now: now_ms(),
            answer: None,
        })
        .unwrap();
    let Submitted::Created { row, .. } = sent else {
        panic!("{sent:?}");
    };
    let msg = row.id;
    // Message 1 is above epoch 1's bound (0), not epoch 2's (9).
    assert_eq!(msg, 1);
    assert_eq!(
        pg::shared().psql(&db, "SELECT job_id FROM sends").trim(),
        api_job_id(&key_scope(&id, 3), acct, msg)
    );
}

/// A double opt-in confirmation's job id is scoped by its list and its subscriber.
#[test]
fn key_epochs_moved_in_scope_a_confirmation_job_id() {
    use sendonce::domain::model::{confirm_job_id, key_scope};
    use sendonce::store::{ConfirmContent, NewList, OptIn};
    let (db, s, id) = with_key_epochs();
    let acct = s.add_account("t").unwrap();
    let list = s
        .create_list(&NewList {
            account_id: acct,
            name: "news",
            description: None,
            optin: OptIn::Double,
            public: false,
            confirm: ConfirmContent {
                from: Some("news@example.org"),
                ..Default::default()
            },
        })
        .unwrap();
    let links = crate::common::test_links();
    let new = sendonce::app::import::subscriber(Some("b@x.com"), None, None, None, &[]).unwrap();
    let sub = s
        .add_subscriber_with(acct, &new, &[list], Some(&links))
        .unwrap();
    // The list is above epoch 2's list bound (0), not epoch 1's (9); the subscriber is above
    // neither subscriber bound (10, 20).
    assert!(list <= 9 && sub <= 10, "list {list}, subscriber {sub}");
    assert_eq!(
        pg::shared().psql(&db, "SELECT job_id FROM sends").trim(),
        confirm_job_id(&key_scope(&id, 7), list, sub)
    );
}
