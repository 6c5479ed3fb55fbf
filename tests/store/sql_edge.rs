//! The SQL edge: enums read from the database are checked (an unknown value is an error, never
//! a default), the campaign job id built in SQL equals the Rust one, and unknown ids are
//! `NotFound` with the usage exit code.

use crate::common::Env;
use sendonce::domain::address::Channel;
use sendonce::domain::model::campaign_job_id;
use sendonce::error::ErrorKind;
use sendonce::store::sqlite::SqliteStore as Store;
use sendonce::store::{
    Audience, Campaigns, ClaimRequest, Directory, Installation, Ledger, OpenOptions, Suppressions,
};

fn store(env: &Env) -> Store {
    Store::open(&env.db, &OpenOptions::default()).unwrap()
}

/// The shared CLI setup (an account, `n` subscribers, a draft campaign), then the campaign
/// approved, started and its list built. Returns (store, account, campaign).
fn sending_campaign(env: &Env, n: usize) -> (Store, i64, i64) {
    let (acct, cid) = env.setup_campaign(n);
    let (acct, cid) = (acct.parse().unwrap(), cid.parse().unwrap());
    let s = store(env);
    s.approve_campaign(cid, 0).unwrap();
    s.start_due_campaigns(sendonce::domain::clock::now_ms())
        .unwrap();
    while !s.build_list_chunk(cid, 7).unwrap() {}
    (s, acct, cid)
}

/// Write `sql` past the schema's CHECK constraints and the frozen-content trigger: what a
/// flipped byte or a careless hand edit leaves behind.
fn corrupt(env: &Env, sql: &str) {
    let c = env.sqlite();
    c.execute_batch(&format!(
        "PRAGMA ignore_check_constraints = ON;
         DROP TRIGGER IF EXISTS campaigns_content_frozen;
         {sql}"
    ))
    .unwrap();
}

#[test]
fn a_corrupt_campaign_channel_or_status_is_an_error_not_a_default() {
    let env = Env::new();
    let (s, _acct, cid) = sending_campaign(&env, 1);
    corrupt(
        &env,
        &format!("UPDATE campaigns SET channel = 'fax' WHERE id = {cid}"),
    );
    let e = s.campaign(cid).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
    assert!(
        e.message.contains("campaigns.channel") && e.message.contains("\"fax\""),
        "{}",
        e.message
    );
    // On the send path it is ledger damage: the worker stops.
    let e = s.active_campaigns().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
    assert!(
        e.message.contains("campaigns.channel holds \"fax\"") && e.message.contains("worker"),
        "{}",
        e.message
    );
    // List building reads the channel too.
    corrupt(
        &env,
        &format!("UPDATE campaigns SET list_complete = 0, channel = 'fax' WHERE id = {cid}"),
    );
    let e = s.build_list_chunk(cid, 10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);

    corrupt(
        &env,
        &format!("UPDATE campaigns SET channel = 'email', status = 'sendng' WHERE id = {cid}"),
    );
    let e = s.campaign(cid).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
    assert!(
        e.message.contains("campaigns.status holds \"sendng\""),
        "{}",
        e.message
    );
    let e = s.list_campaigns(None, None).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
}

#[test]
fn a_corrupt_send_status_stops_the_claim_and_the_counts() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 2);
    corrupt(
        &env,
        "UPDATE sends SET status = 'queud' WHERE id = (SELECT min(id) FROM sends)",
    );
    let e = s.status_counts(cid).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
    assert!(
        e.message.contains("sends.status holds \"queud\""),
        "{}",
        e.message
    );
    let e = s.report(cid, &mut |_| Ok(())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
    // The claim never leases it: only the intact row goes out.
    let got = s
        .claim(&ClaimRequest {
            campaign_id: cid,
            account_id: acct,
            channel: Channel::Email,
            batch: 10,
            lease_ms: 1000,
            token: 1,
            owner: "t".into(),
            key_window_ms: None,
            now: sendonce::domain::clock::now_ms(),
        })
        .unwrap();
    assert_eq!(got.rows.len(), 1);
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE status = 'queud'"),
        1
    );
}

#[test]
fn a_corrupt_suppression_channel_is_an_error() {
    let env = Env::new();
    let acct = env.setup_account().parse().unwrap();
    let s = store(&env);
    assert!(s
        .suppress(acct, Channel::Sms, "+14155550100", "asked", "manual")
        .unwrap());
    assert_eq!(s.suppressions(acct).unwrap()[0].channel, Channel::Sms);
    corrupt(&env, "UPDATE suppressions SET channel = 'SMS'");
    let e = s.suppressions(acct).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Damaged, "{}", e.message);
    assert!(
        e.message.contains("suppressions.channel holds \"SMS\""),
        "{}",
        e.message
    );
}

#[test]
fn the_job_id_built_in_sql_is_the_rust_one() {
    let env = Env::new();
    let (s, _acct, cid) = sending_campaign(&env, 3);
    let rows: Vec<(i64, String)> = env
        .sqlite()
        .prepare("SELECT subscriber_id, job_id FROM sends WHERE campaign_id = ?1")
        .unwrap()
        .query_map([cid], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(rows.len(), 3);
    for (sub, job) in rows {
        let scope = s.key_scope(cid, sub).unwrap();
        assert_eq!(job, campaign_job_id(&scope, cid, sub));
    }
}

#[test]
fn unknown_ids_are_not_found_with_the_usage_exit_code() {
    let env = Env::new();
    let (s, acct, cid) = sending_campaign(&env, 1);
    let not_found = |e: sendonce::error::Error, text: &str| {
        assert_eq!(e.kind, ErrorKind::NotFound, "{}", e.message);
        assert!(e.message.contains(text), "{}", e.message);
        assert_eq!(sendonce::exit::for_error(&e), sendonce::exit::USAGE);
    };
    not_found(s.campaign(4242).unwrap_err(), "unknown campaign id 4242");
    not_found(
        s.pause_campaign(4242).unwrap_err(),
        "unknown campaign id 4242",
    );
    not_found(
        s.cancel_campaign(4242).unwrap_err(),
        "unknown campaign id 4242",
    );
    not_found(
        s.resolve_doubt(4242, true).unwrap_err(),
        "unknown send id 4242",
    );
    not_found(
        s.account_exists(4242).unwrap_err(),
        "unknown account id 4242",
    );
    not_found(
        s.resolve_account("4242").unwrap_err(),
        "unknown account id 4242",
    );
    not_found(
        s.resolve_account("nobody").unwrap_err(),
        "unknown account \"nobody\"",
    );
    not_found(
        s.find_subscriber(acct, "4242").unwrap_err(),
        "no subscriber \"4242\"",
    );
    not_found(
        s.remove_subscriber(acct, 4242).unwrap_err(),
        "no subscriber 4242",
    );
    // A refused transition is a conflict (exit 1).
    let e = s.resume_campaign(cid).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict, "{}", e.message);
    assert_eq!(sendonce::exit::for_error(&e), sendonce::exit::FAILURE);
    let internal = sendonce::error::Error::internal("a task panicked");
    assert_eq!(
        sendonce::exit::for_error(&internal),
        sendonce::exit::FAILURE
    );
}
