//! The ledger's guarantees, on real database files: leases, fences, suppression at claim,
//! completion, and several processes on one file.

use crate::common;
use crate::common::accepted;
use crate::common::CycleOne;
use crate::common::Env;
use sendonce::domain::address::Channel;
use sendonce::store::sqlite::SqliteStore;
use sendonce::store::{
    Campaigns, ClaimRequest, Ledger, Notifications, OpenOptions, Outcome, Record, Suppressions,
};

fn store(env: &Env) -> SqliteStore {
    SqliteStore::open(
        &env.db,
        &OpenOptions {
            create: true,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A sending campaign with `n` subscribers and its list built. Returns (store, account, campaign).
fn sending_campaign(env: &Env, n: usize) -> (SqliteStore, i64, i64) {
    let s = store(env);
    let (acct, cid) = common::started_campaign(&s, n);
    while !s.build_list_chunk(cid, 7).unwrap() {}
    (s, acct, cid)
}

fn req(
    acct: i64,
    cid: i64,
    batch: usize,
    token: i64,
    now: i64,
    window: Option<i64>,
) -> ClaimRequest {
    ClaimRequest {
        campaign_id: cid,
        account_id: acct,
        channel: Channel::Email,
        batch,
        lease_ms: 1000,
        token,
        owner: "test".into(),
        key_window_ms: window,
        now,
    }
}

#[test]
fn list_building_in_chunks_is_complete_and_rerunnable() {
    let env = Env::new();
    let (s, _a, cid) = sending_campaign(&env, 50);
    assert_eq!(env.count("SELECT count(*) FROM sends"), 50);
    // Simulate a crash that lost the cursor: rebuilding inserts nothing twice.
    env.sqlite()
        .execute(
            "UPDATE campaigns SET list_cursor = 0, list_complete = 0 WHERE id = ?1",
            [cid],
        )
        .unwrap();
    while !s.build_list_chunk(cid, 11).unwrap() {}
    assert_eq!(env.count("SELECT count(*) FROM sends"), 50);
    assert_eq!(env.count("SELECT count(DISTINCT address) FROM sends"), 50);
}

#[test]
fn an_opt_out_during_the_campaign_is_honoured_at_claim() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 10);
    let now = sendonce::domain::clock::now_ms();
    let first = s.claim(&req(acct, cid, 3, 1, now, None)).unwrap();
    assert_eq!(first.rows.len(), 3);
    // u5 opts out after the list was built, before its row is claimed.
    assert!(s
        .suppress(acct, Channel::Email, "u5@x.com", "unsubscribed", "test")
        .unwrap());
    let rest = s.claim(&req(acct, cid, 100, 2, now, None)).unwrap();
    assert_eq!(rest.rows.len(), 6);
    assert_eq!(rest.suppressed, 1);
    assert!(rest.rows.iter().all(|r| r.address != "u5@x.com"));
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status='suppressed' AND address='u5@x.com'"),
        1
    );
}

#[test]
fn a_lost_lease_cannot_dispatch_but_a_late_yes_is_recorded() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 2);
    let t0 = sendonce::domain::clock::now_ms();
    let a = s.claim(&req(acct, cid, 2, 111, t0, None)).unwrap();
    let ids: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, r.token)).collect();
    // Worker A stalls past its lease; worker B re-leases the undispatched rows.
    let b = s.claim(&req(acct, cid, 2, 222, t0 + 5_000, None)).unwrap();
    assert_eq!(
        b.rows.len(),
        2,
        "undispatched expired leases go back to work"
    );
    assert_eq!(b.in_doubt, 0);
    // A's dispatch marker is fenced out: A must not call the provider.
    assert!(s
        .mark_dispatched(&ids, t0 + 5_001, 1000)
        .unwrap()
        .is_empty());
    // B dispatches; then a stale confirmation from A (fence fails) is still recorded as sent.
    let bids: Vec<(i64, i64)> = b.rows.iter().map(|r| (r.id, r.token)).collect();
    assert_eq!(s.mark_dispatched(&bids, t0 + 5_002, 1000).unwrap().len(), 2);
    let st = s.record(&[accepted(ids[0].0, 111)], t0 + 5_003).unwrap();
    assert_eq!((st.sent, st.late_confirmations), (0, 1));
    let st = s
        .record(
            &[accepted(bids[0].0, 222), accepted(bids[1].0, 222)],
            t0 + 5_004,
        )
        .unwrap();
    assert_eq!(
        (st.sent, st.late_confirmations),
        (1, 0),
        "already sent rows are not counted twice"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status='sent'"),
        2
    );
}

#[test]
fn expired_dispatched_rows_go_in_doubt_without_a_key_window() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 3);
    let t0 = sendonce::domain::clock::now_ms();
    let a = s.claim(&req(acct, cid, 3, 1, t0, None)).unwrap();
    let ids: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, r.token)).collect();
    s.mark_dispatched(&ids[..2], t0, 1000).unwrap(); // the worker dies with two calls in flight
    let b = s.claim(&req(acct, cid, 10, 2, t0 + 10_000, None)).unwrap();
    assert_eq!(b.in_doubt, 2, "dispatched rows are parked");
    assert_eq!(b.rows.len(), 1, "the undispatched row is simply re-leased");
    assert!(!b.rows[0].maybe_delivered);
    // Completion waits for the doubts.
    s.record(&[accepted(b.rows[0].id, 2)], t0 + 10_001).unwrap();
    assert!(!s.try_complete(cid, t0 + 10_002).unwrap());
    let doubts = s.doubts(cid).unwrap();
    assert_eq!(doubts.len(), 2);
    s.resolve_doubt(doubts[0].send_id, true).unwrap();
    assert_eq!(s.campaign(cid).unwrap().status.as_str(), "sending");
    s.resolve_doubt(doubts[1].send_id, true).unwrap();
    assert_eq!(
        s.campaign(cid).unwrap().status.as_str(),
        "sent",
        "the last resolution completes it"
    );
}

#[test]
fn expired_dispatched_rows_are_retried_with_the_same_key_inside_the_window() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 1);
    let t0 = sendonce::domain::clock::now_ms();
    let a = s.claim(&req(acct, cid, 1, 1, t0, Some(60_000))).unwrap();
    let row = &a.rows[0];
    s.mark_dispatched(&[(row.id, 1)], t0, 1000).unwrap();
    let b = s
        .claim(&req(acct, cid, 1, 2, t0 + 5_000, Some(60_000)))
        .unwrap();
    assert_eq!(b.rows.len(), 1);
    assert!(b.rows[0].maybe_delivered);
    assert_eq!(
        b.rows[0].job_id, row.job_id,
        "same job id, so the same provider key"
    );
    // It fails ambiguously again and is requeued; once the key window has passed it is parked.
    s.mark_dispatched(&[(row.id, 2)], t0 + 5_000, 1000).unwrap();
    let retry = Outcome::Retry {
        error: "timeout".into(),
        retry_at: t0 + 6_000,
        maybe_delivered: true,
    };
    s.record(
        &[Record {
            id: row.id,
            token: 2,
            outcome: retry,
        }],
        t0 + 5_500,
    )
    .unwrap();
    let c = s
        .claim(&req(acct, cid, 1, 3, t0 + 61_000, Some(60_000)))
        .unwrap();
    assert!(c.rows.is_empty());
    assert_eq!(c.in_doubt, 1, "the window counts from the first dispatch");
}

#[test]
fn completion_needs_an_empty_queue_and_no_live_lease() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 2);
    let now = sendonce::domain::clock::now_ms();
    assert!(!s.try_complete(cid, now).unwrap());
    let a = s.claim(&req(acct, cid, 1, 9, now, None)).unwrap();
    assert!(
        !s.try_complete(cid, now).unwrap(),
        "one row queued, one leased"
    );
    s.record(&[accepted(a.rows[0].id, 9)], now).unwrap();
    let b = s.claim(&req(acct, cid, 1, 10, now, None)).unwrap();
    assert!(!s.try_complete(cid, now).unwrap(), "a live lease");
    s.record(&[accepted(b.rows[0].id, 10)], now).unwrap();
    assert!(s.try_complete(cid, now).unwrap());
    assert!(
        !s.try_complete(cid, now).unwrap(),
        "a compare-and-set: only once"
    );
}

#[test]
fn release_returns_only_undispatched_rows() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 4);
    let now = sendonce::domain::clock::now_ms();
    let a = s.claim(&req(acct, cid, 4, 5, now, None)).unwrap();
    let ids: Vec<(i64, i64)> = a.rows.iter().map(|r| (r.id, r.token)).collect();
    s.mark_dispatched(&ids[..1], now, 1000).unwrap();
    assert_eq!(s.release(&ids, now).unwrap(), 3);
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status='queued'"),
        3
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status='leased'"),
        1
    );
}

/// The plans of the real statements (not copies): the claim is one range scan of the
/// `sends_claim` partial index with no sort, the per-tick sweep of cancelled campaigns reads only
/// expired leases, and no statement of the send path reads a whole table.
#[test]
fn hot_statements_use_their_indexes() {
    let env = Env::new();
    let (s, _, _) = sending_campaign(&env, 5);
    let plans = s.hot_query_plans().unwrap();
    assert!(plans.len() >= 20, "{plans:?}");
    let plan = |name: &str| -> String {
        plans
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no statement {name:?}"))
            .plan
            .join(" | ")
    };
    let claim = plan("claim: due rows + suppression check");
    assert!(
        claim.contains("SEARCH s USING INDEX sends_claim (campaign_id=? AND visible_at<?)"),
        "{claim}"
    );
    assert!(!claim.contains("TEMP B-TREE"), "{claim}");
    let sweep = plan("sweep cancelled");
    assert!(sweep.contains("USING INDEX sends_claim"), "{sweep}");
    let list = plan("list: insert chunk (email)");
    assert!(
        list.contains("SEARCH s USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"),
        "{list}"
    );
    // A campaign that targets lists: the chunk's memberships read as one key range per list,
    // then each of those subscribers by id, in order (no sort).
    let lists = plan("list: insert chunk (email, lists)");
    assert!(
        lists.contains(
            "SEARCH m USING PRIMARY KEY (list_id=? AND subscriber_id>? AND subscriber_id<?)"
        ),
        "{lists}"
    );
    assert!(
        lists.contains("SEARCH s USING INTEGER PRIMARY KEY (rowid=?)"),
        "{lists}"
    );
    assert!(!lists.contains("TEMP B-TREE"), "{lists}");
    for p in &plans {
        assert!(
            p.full_scans().is_empty(),
            "{} reads a whole table: {:?}",
            p.name,
            p.plan
        );
    }
}

#[test]
fn outbox_replay_is_not_a_second_delivery_even_across_processes() {
    use sendonce::provider::{CallResult, Message, Outbox, Provider};
    let env = Env::new();
    let path = env.path("o.jsonl");
    let msg = Message {
        status_callback: None,
        reply_to: None,
        job_id: "campaign:1:sub:1".into(),
        idempotency_key: sendonce::domain::model::idempotency_key("campaign:1:sub:1"),
        channel: Channel::Email,
        from: None,
        to: "a@x.com".into(),
        subject: Some("s".into()),
        body: "b".into(),
        html: None,
        unsubscribe: None,
        attachments: Vec::new(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Two handles on one file stand for two processes: the file lock serialises them.
    let one = Outbox::open(&path, true).unwrap();
    let two = Outbox::open(&path, true).unwrap();
    let a = rt.block_on(one.send(&msg));
    let b = rt.block_on(two.send(&msg));
    let (
        CallResult::Accepted {
            provider_id: ida,
            replay: false,
        },
        CallResult::Accepted {
            provider_id: idb,
            replay: true,
        },
    ) = (a.clone(), b.clone())
    else {
        panic!("{a:?} {b:?}");
    };
    assert_eq!(ida, idb);
    assert_eq!(common::deliveries(&path)["campaign:1:sub:1"], 1);
    // A fresh handle (a restarted process) still knows the key.
    let three = Outbox::open(&path, true).unwrap();
    assert!(matches!(
        rt.block_on(three.send(&msg)),
        CallResult::Accepted { replay: true, .. }
    ));
    // Without idempotency, a repeat is a second delivery (like SMTP).
    let plain = Outbox::open(&env.path("p.jsonl"), false).unwrap();
    rt.block_on(plain.send(&msg));
    rt.block_on(plain.send(&msg));
    assert_eq!(
        common::deliveries(&env.path("p.jsonl"))["campaign:1:sub:1"],
        2
    );
}

#[test]
fn four_processes_on_one_file_never_send_a_row_twice() {
    let env = Env::new();
    let (_a, cid) = env.setup_campaign(3000);
    env.ok(&["campaign", "approve", &cid]);
    let outbox = env.path("o.jsonl");
    // Not idempotent: a row claimed twice would show up as two deliveries. Batches of 10 make
    // at least 300 claims (one commit each), so the run outlasts the processes' start-up and
    // they all compete (with 50, one process could finish alone on a loaded machine).
    let spec = format!("outbox:{}?idempotent=false", outbox.display());
    let kids: Vec<_> = (0..4)
        .map(|i| {
            env.cmd()
                .args([
                    "--json",
                    "run",
                    "--once",
                    "--provider",
                    &spec,
                    "--batch",
                    "10",
                    "--tick",
                    "20ms",
                ])
                .args(["--worker-id", &format!("w{i}")])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut started = 0;
    let mut claimed = 0;
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        started += doc["campaigns_started"].as_array().unwrap().len();
        claimed += doc["claimed"].as_u64().unwrap();
    }
    assert_eq!(
        started, 1,
        "exactly one process wins the approved -> sending compare-and-set"
    );
    assert_eq!(claimed, 3000, "no row claimed twice");
    let per_job = common::deliveries(&outbox);
    assert_eq!(per_job.len(), 3000);
    assert!(per_job.values().all(|&n| n == 1));
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status='sent' AND attempts=1"),
        3000
    );
    assert!(
        env.count("SELECT count(DISTINCT lease_owner) FROM sends") >= 2,
        "the work was shared"
    );
}

/// A second acceptance of a row already sent: with the same provider id it is a benign
/// replay; with another id it may be a second delivery (an operator requeued a row in doubt,
/// say) and is noted on the row and counted, never called damage. An acceptance for a row that
/// is not in the ledger is damage.
#[test]
fn a_second_confirmation_is_noted_and_a_missing_row_is_damage() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 1);
    let t0 = sendonce::domain::clock::now_ms();
    let a = s.claim(&req(acct, cid, 1, 7, t0, None)).unwrap();
    let id = a.rows[0].id;
    s.mark_dispatched(&[(id, 7)], t0 + 1, 1000).unwrap();
    assert_eq!(s.record(&[accepted(id, 7)], t0 + 2).unwrap().sent, 1);
    // The same id again, from a stale token: a replay.
    let st = s.record(&[accepted(id, 99)], t0 + 3).unwrap();
    assert_eq!((st.sent, st.double_confirmations), (0, 1));
    let reason = |env: &Env| -> Option<String> {
        env.sqlite()
            .query_row("SELECT last_error FROM sends", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(reason(&env), None);
    // Another id: noted on the row as a possible second delivery.
    let other = Record {
        id,
        token: 98,
        outcome: Outcome::Accepted {
            provider_id: Some("another".into()),
            note: None,
        },
    };
    let st = s.record(&[other], t0 + 4).unwrap();
    assert_eq!(st.double_confirmations, 1);
    let r = reason(&env).unwrap_or_default();
    assert!(
        r.contains("another") && r.contains("delivered twice"),
        "{r}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'sent'"),
        1
    );
    // A row that does not exist.
    let e = s.record(&[accepted(id + 1000, 1)], t0 + 5).unwrap_err();
    assert_eq!(e.kind, sendonce::error::ErrorKind::Damaged, "{}", e.message);
}

/// A statement that fails partway through a worker's transaction leaves nothing of that
/// transaction: here a trigger fails the third row of a claim's one-statement lease, and then
/// the fourth row of a confirmation group (whose first three rows were confirmed by statements
/// that had already succeeded). The rows stay as they were, the counters still match them, and
/// the outcomes are recorded once the obstacle is gone.
#[test]
fn a_statement_failing_halfway_leaves_nothing_of_its_transaction() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 5);
    let ids: Vec<i64> = {
        let c = env.sqlite();
        let mut st = c.prepare("SELECT id FROM sends ORDER BY id").unwrap();
        let v = st.query_map([], |r| r.get(0)).unwrap();
        v.collect::<rusqlite::Result<_>>().unwrap()
    };
    let fail_at = |status: &str, id: i64| {
        env.sqlite()
            .execute_batch(&format!(
                "DROP TRIGGER IF EXISTS fail_halfway;
                 CREATE TRIGGER fail_halfway BEFORE UPDATE OF status ON sends
                 WHEN new.status = '{status}' AND old.id = {id}
                 BEGIN SELECT RAISE(FAIL, 'failed halfway'); END;"
            ))
            .unwrap();
    };
    let status_counts = |env: &Env| {
        (
            env.count("SELECT count(*) FROM sends WHERE status = 'queued' AND attempts = 0"),
            env.count("SELECT count(*) FROM sends WHERE status = 'leased'"),
            env.count("SELECT count(*) FROM sends WHERE status = 'sent'"),
        )
    };
    let t0 = sendonce::domain::clock::now_ms();

    fail_at("leased", ids[2]);
    let e = s.cycle_one(&[], Some(&req(acct, cid, 5, 7, t0, None)), t0);
    assert_eq!(
        status_counts(&env),
        (5, 0, 0),
        "a row of the failed claim stayed leased"
    );
    assert!(e.is_err(), "the lease of the third row failed");
    env.assert_counters();

    env.sqlite()
        .execute_batch("DROP TRIGGER fail_halfway")
        .unwrap();
    let (_, got) = s
        .cycle_one(&[], Some(&req(acct, cid, 5, 7, t0, None)), t0)
        .unwrap();
    assert_eq!(got.rows.len(), 5);
    let records: Vec<_> = got.rows.iter().map(|r| accepted(r.id, 7)).collect();

    fail_at("sent", ids[3]);
    let (alone, in_cycle) = (
        s.record(&records, t0 + 1),
        s.cycle_one(&records, None, t0 + 1),
    );
    assert_eq!(
        status_counts(&env),
        (0, 5, 0),
        "a row of the failed group was confirmed"
    );
    assert!(
        alone.is_err() && in_cycle.is_err(),
        "the fourth confirmation failed"
    );
    env.assert_counters();

    env.sqlite()
        .execute_batch("DROP TRIGGER fail_halfway")
        .unwrap();
    assert_eq!(s.record(&records, t0 + 2).unwrap().sent, 5);
    assert_eq!(status_counts(&env), (0, 0, 5));
    env.assert_counters();
}

/// A turn's claims are one transaction: damage found by the second (a stream row without its
/// content) stops the worker and leaves nothing of the first (the campaign's rows it had
/// leased are queued again, without a dispatch marker).
#[test]
fn damage_in_one_claim_of_a_turn_leaves_nothing_of_the_others() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 3);
    let to = vec!["a@x.com".to_string()];
    let stream = s
        .prepare_notification("k", Channel::Email, None, Some("s"), "b", &to)
        .unwrap();
    let notify: i64 = env.count("SELECT id FROM accounts WHERE name = 'notify'");
    env.sqlite()
        .execute_batch(&format!(
            "UPDATE sends SET message_id = NULL WHERE campaign_id = {stream}"
        ))
        .unwrap();
    let t0 = sendonce::domain::clock::now_ms();
    let claims = [
        req(acct, cid, 3, 1, t0, None),
        req(notify, stream, 3, 2, t0, None),
    ];
    let e = s.cycle(&[], &claims, &[0, 1], 6, t0).unwrap_err();
    assert_eq!(e.kind, sendonce::error::ErrorKind::Damaged, "{}", e.message);
    assert!(e.message.contains("no content of its own"), "{}", e.message);
    assert_eq!(
        env.count(&format!(
            "SELECT count(*) FROM sends WHERE campaign_id = {cid} AND status = 'queued'
             AND dispatched_at IS NULL AND attempts = 0"
        )),
        3,
        "the campaign's claim was committed without the stream's"
    );
    env.assert_counters();
}
