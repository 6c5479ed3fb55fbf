//! Schema 22 (PostgreSQL 9) folds the last hidden one-row campaigns into the accounts' streams:
//! double opt-in confirmations and `sendonce notify`'s notifications. A frozen schema-21 file
//! (and a PostgreSQL database taken back to schema 8) with one of each, some rows sent and some
//! queued, is upgraded: every row keeps its id, job id, state and variables, its content is
//! stored once, no hidden campaign is left, and the queued rows go out exactly once with the
//! same bytes as before (a confirmation rendered with its own link).

use crate::common::{deliveries, Env};
use std::path::Path;

/// Schema 21's shape of a queued confirmation (campaign 5, subscriber 11 pending in "weekly")
/// and of a notification (account `notify`, campaign 6, key `deploy-42`: a@ sent, b@ queued).
const OLD_HIDDEN: &str = "
    INSERT INTO subscribers (id, account_id, email, email_norm, status, created_at)
      VALUES (11, 1, 'new@example.org', 'new@example.org', 'pending', 1);
    INSERT INTO list_members VALUES (2, 11, 'pending', 1, 1);
    INSERT INTO campaigns (id, account_id, name, channel, sender, subject, body, body_format,
                           templated, status, scheduled_for, created_at, kind)
      VALUES (5, 1, 'confirmation: list 2 subscriber 11', 'email', 'news@example.org',
              'Confirm {{ list.name }}', 'Open {{ confirm_url }}', 'text', 1, 'draft', 1, 1, 'api');
    INSERT INTO campaign_lists VALUES (5, 2);
    UPDATE campaigns SET status = 'sending', approved_at = 1, started_at = 1, list_complete = 1
      WHERE id = 5;
    INSERT INTO sends (id, account_id, campaign_id, subscriber_id, job_id, address, vars, status,
                       visible_at, created_at, updated_at)
      VALUES (102, 1, 5, 11, 'confirm:2:11@0123456789abcdef', 'new@example.org',
              '{\"confirm_url\":\"https://example.org/c/T11\",\"list\":{\"name\":\"weekly\"},\"email\":\"new@example.org\",\"name\":\"\"}',
              'queued', 1, 1, 1);
    INSERT INTO list_confirmations VALUES (2, 11, 5, 1, NULL);
    INSERT INTO accounts (id, name, created_at) VALUES (2, 'notify', 1);
    INSERT INTO subscribers (id, account_id, email, email_norm, status, created_at)
      VALUES (20, 2, 'a@example.org', 'a@example.org', 'confirmed', 1),
             (21, 2, 'b@example.org', 'b@example.org', 'confirmed', 1);
    INSERT INTO campaigns (id, account_id, name, channel, sender, subject, body, templated, status,
                           scheduled_for, approved_at, started_at, list_complete, created_at, kind)
      VALUES (6, 2, 'notify:deploy-42', 'email', 'ci@example.org', 'Deployed', 'v42 is live.', 0,
              'sending', 1, 1, 1, 1, 1, 'notify');
    INSERT INTO sends (id, account_id, campaign_id, subscriber_id, job_id, address, vars, status,
                       visible_at, attempts, provider_message_id, created_at, updated_at, sent_at)
      VALUES (103, 2, 6, 20, 'notify:deploy-42:a@example.org', 'a@example.org', '{}', 'sent', 1,
              1, 'old-notify-a', 1, 1, 1),
             (104, 2, 6, 21, 'notify:deploy-42:b@example.org', 'b@example.org', '{}', 'queued', 1,
              0, NULL, 1, 1, NULL);
    INSERT INTO campaigns (id, account_id, name, channel, sender, subject, body, templated, status,
                           scheduled_for, approved_at, started_at, list_complete, created_at, kind)
      VALUES (7, 2, 'notify:held', 'email', 'ci@example.org', 'Held', 'paused by an operator', 0,
              'paused', 1, 1, 1, 1, 1, 'notify');
    INSERT INTO sends (id, account_id, campaign_id, subscriber_id, job_id, address, vars, status,
                       visible_at, created_at, updated_at)
      VALUES (105, 2, 7, 20, 'notify:held:a@example.org', 'a@example.org', '{}', 'queued', 1, 1, 1);";

/// Each folded row as (send id, stream?, status, job id, content's subject, body, templated,
/// notify key), in id order, read with `query` (SQLite and PostgreSQL print the same).
const FOLDED: &str = "SELECT s.id, k.stream, s.status, s.job_id, c.subject, c.body,
       c.templated, coalesce(c.notify_key, '-')
    FROM sends s JOIN campaigns k ON k.id = s.campaign_id
    JOIN message_contents c ON c.id = s.message_id
    WHERE s.id IN (101, 102, 103, 104) ORDER BY s.id";

#[test]
fn an_upgrade_folds_confirmations_and_notifications_into_the_streams() {
    let env = Env::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema-21.db");
    std::fs::copy(fixture, &env.db).expect("copy the fixture");
    env.sqlite()
        .execute_batch(OLD_HIDDEN)
        .expect("schema 21's rows");
    env.ok(&["init"]);

    let c = env.sqlite();
    let mut st = c.prepare(FOLDED).unwrap();
    let got: Vec<String> = st
        .query_map([], |r| {
            Ok(format!(
                "{}|{}|{}|{}|{}|{}|{}|{}",
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, String>(7)?
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        got,
        [
            "101|1|sent|confirm:2:8@0123456789abcdef|Confirm|Confirm: {{ confirm_url }}|1|-",
            "102|1|queued|confirm:2:11@0123456789abcdef|Confirm {{ list.name }}|Open {{ confirm_url }}|1|-",
            "103|1|sent|notify:deploy-42:a@example.org|Deployed|v42 is live.|0|email:deploy-42",
            "104|1|queued|notify:deploy-42:b@example.org|Deployed|v42 is live.|0|email:deploy-42",
        ]
    );
    drop(st);
    drop(c);
    assert_eq!(
        env.count("SELECT count(*) FROM campaigns WHERE stream = 0 AND kind <> 'campaign'"),
        0,
        "a hidden campaign is left"
    );
    assert_eq!(
        env.count(
            "SELECT count(*) FROM list_confirmations lc JOIN campaigns k ON k.id = lc.campaign_id
             WHERE k.stream = 1"
        ),
        2,
        "both confirmations name the stream"
    );
    assert_eq!(
        env.count("SELECT count(DISTINCT message_id) FROM sends WHERE id IN (103, 104)"),
        1,
        "a notification's rows share one content"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE id = 105 AND status = 'cancelled'"),
        1,
        "a paused hidden campaign's queued row must not send from the always-sending stream"
    );
    env.assert_counters();
    the_folded_rows_go_out_once(&env);
}

/// `run --once`: the queued confirmation goes out rendered with its own link, the queued
/// notification with its first call's text; nothing sent before goes again.
fn the_folded_rows_go_out_once(env: &Env) {
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    env.run(&["run", "--once", "--provider", &spec]);
    let lines = sendonce::provider::deliverylog::read_lines(&outbox).expect("outbox");
    let one = |job: &str| {
        let mut found = lines.iter().filter(|l| l.job_id == job);
        let l = found.next().unwrap_or_else(|| panic!("{job} not sent"));
        assert!(found.next().is_none(), "{job} sent twice");
        l
    };
    let confirm = one("confirm:2:11@0123456789abcdef");
    assert_eq!(confirm.subject.as_deref(), Some("Confirm weekly"));
    assert_eq!(confirm.body, "Open https://example.org/c/T11");
    let b = one("notify:deploy-42:b@example.org");
    assert_eq!(
        (b.subject.as_deref(), b.body.as_str()),
        (Some("Deployed"), "v42 is live.")
    );
    for job in [
        "confirm:2:8@0123456789abcdef",
        "notify:deploy-42:a@example.org",
        "notify:held:a@example.org",
    ] {
        assert!(
            !deliveries(&outbox).contains_key(job),
            "{job} was sent before the upgrade (or paused) and went out"
        );
    }
    assert_eq!(
        env.count("SELECT count(*) FROM sends WHERE id IN (102, 104) AND status = 'sent'"),
        2
    );
}

/// `UNDO_0009`'s rows: schema 8's shape of the same confirmation and notification, on a
/// PostgreSQL database where `Env::setup_account` made account 1 (`acme`).
#[cfg(feature = "tier1")]
const OLD_HIDDEN_PG: &str = "DELETE FROM sendonce_schema WHERE version >= 9;
    INSERT INTO lists (id, account_id, name, optin, public, confirm_from, created_at)
      VALUES (2, 1, 'weekly', 'double', TRUE, 'news@example.org', 1);
    INSERT INTO subscribers (id, account_id, email, email_norm, status, created_at)
      VALUES (8, 1, 's8@example.org', 's8@example.org', 'pending', 1);
    INSERT INTO list_members VALUES (2, 8, 'pending', 1, 1);
    INSERT INTO campaigns (id, account_id, name, channel, sender, subject, body, body_format,
                           templated, status, scheduled_for, created_at, kind)
      VALUES (5, 1, 'confirmation: list 2 subscriber 8', 'email', 'news@example.org',
              'Confirm {{ list.name }}', 'Open {{ confirm_url }}', 'text', TRUE, 'draft', 1, 1,
              'api');
    INSERT INTO campaign_lists VALUES (5, 2);
    UPDATE campaigns SET status = 'sending', approved_at = 1, started_at = 1,
                         list_complete = TRUE WHERE id = 5;
    INSERT INTO sends (id, account_id, campaign_id, subscriber_id, job_id, address, vars, status,
                       visible_at, created_at, updated_at)
      VALUES (102, 1, 5, 8, 'confirm:2:8@x', 's8@example.org',
              '{\"confirm_url\":\"https://example.org/c/T8\",\"list\":{\"name\":\"weekly\"}}',
              'queued', 1, 1, 1);
    INSERT INTO list_confirmations VALUES (2, 8, 5, 1, NULL);
    INSERT INTO accounts (id, name, created_at) VALUES (2, 'notify', 1);
    INSERT INTO subscribers (id, account_id, email, email_norm, status, created_at)
      VALUES (20, 2, 'a@example.org', 'a@example.org', 'confirmed', 1),
             (21, 2, 'b@example.org', 'b@example.org', 'confirmed', 1);
    INSERT INTO campaigns (id, account_id, name, channel, sender, subject, body, templated, status,
                           scheduled_for, approved_at, started_at, list_complete, created_at, kind)
      VALUES (6, 2, 'notify:deploy-42', 'email', 'ci@example.org', 'Deployed', 'v42 is live.',
              FALSE, 'sending', 1, 1, 1, TRUE, 1, 'notify');
    INSERT INTO sends (id, account_id, campaign_id, subscriber_id, job_id, address, vars, status,
                       visible_at, attempts, provider_message_id, created_at, updated_at, sent_at)
      VALUES (103, 2, 6, 20, 'notify:deploy-42:a@example.org', 'a@example.org', '{}', 'sent', 1,
              1, 'old-notify-a', 1, 1, 1),
             (104, 2, 6, 21, 'notify:deploy-42:b@example.org', 'b@example.org', '{}', 'queued', 1,
              0, NULL, 1, 1, NULL);";

/// PostgreSQL's 0009 folds the same rows the same way.
#[cfg(feature = "tier1")]
#[test]
fn the_postgres_upgrade_folds_confirmations_and_notifications_the_same_way() {
    let c = crate::common::pg::shared();
    let url = c.fresh_url();
    let db = crate::common::pg::db_name(&url);
    let mut env = Env::new();
    env.db = url.into();
    env.setup_account();
    c.psql(
        &db,
        &format!(
            "{} {} {} {} {}",
            crate::common::pg::UNDO_0013,
            crate::common::pg::UNDO_0012,
            crate::common::pg::UNDO_0011,
            crate::common::pg::UNDO_0009,
            OLD_HIDDEN_PG
        ),
    );
    env.ok(&["init"]);
    let got = c.psql(&db, FOLDED);
    assert_eq!(
        got.trim(),
        "102|t|queued|confirm:2:8@x|Confirm {{ list.name }}|Open {{ confirm_url }}|t|-\n\
         103|t|sent|notify:deploy-42:a@example.org|Deployed|v42 is live.|f|email:deploy-42\n\
         104|t|queued|notify:deploy-42:b@example.org|Deployed|v42 is live.|f|email:deploy-42"
    );
    let left = c.psql(
        &db,
        "SELECT count(*) FROM campaigns WHERE NOT stream AND kind <> 'campaign'",
    );
    assert_eq!(left.trim(), "0", "a hidden campaign is left");
    // The sequence starts past the folded contents: a new notification's content is stored,
    // and it goes (the notify worker also sends the ledger's other due rows, the folded ones:
    // the queued notification and confirmation, not the one sent before the upgrade).
    let outbox = env.path("outbox.jsonl");
    let spec = format!("outbox:{}", outbox.display());
    let state = env.db.to_str().unwrap_or_default().to_string();
    let r = env.run(&[
        "notify",
        "--key",
        "deploy-43",
        "--to",
        "c@example.org",
        "--message",
        "v43",
        "--state",
        &state,
        "--provider",
        &spec,
        "--from",
        "ci@example.org",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let sent = deliveries(&outbox);
    assert_eq!(
        sent.get("notify:deploy-43:c@example.org"),
        Some(&1),
        "{sent:?}"
    );
    assert_eq!(
        sent.get("notify:deploy-42:b@example.org"),
        Some(&1),
        "{sent:?}"
    );
    assert!(sent.values().all(|&n| n == 1), "{sent:?}");
    assert!(
        !sent.contains_key("notify:deploy-42:a@example.org"),
        "{sent:?}"
    );
}
