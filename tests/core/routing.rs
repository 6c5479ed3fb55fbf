//! Provider routing from the config file, durable rate limits in the worker, and
//! reconciliation of rows in doubt through a provider's lookup.

use crate::common::{deliveries, Env};
use sendonce::provider::{
    CallFuture, CallResult, Capabilities, Lookup, LookupFuture, Message, Provider,
};
use sendonce::store::prelude::*;
use sendonce::store::{Ledger, OpenOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two accounts with one campaign each; returns the campaign ids.
fn two_tenants(env: &Env, n: usize) -> (String, String) {
    env.ok(&["init"]);
    let mut ids = Vec::new();
    for name in ["acme", "globex"] {
        let acct = env.ok(&["account", "add", name]);
        let mut csv = String::from("email\n");
        for i in 0..n {
            csv.push_str(&format!("{name}{i}@example.com\n"));
        }
        let f = env.write(&format!("{name}.csv"), csv);
        env.import_csv(&acct, &f);
        let body = env.write("b.txt", "hi");
        let cid = env.ok(&[
            "campaign",
            "create",
            "--account",
            &acct,
            "--name",
            name,
            "--channel",
            "email",
            "--from",
            "news@example.org",
            "--subject",
            "s",
            "--body-file",
            body.to_str().unwrap(),
        ]);
        env.ok(&["campaign", "approve", &cid]);
        ids.push(cid);
    }
    (ids[0].clone(), ids[1].clone())
}

#[test]
fn each_account_goes_to_its_routed_provider() {
    let env = Env::new();
    two_tenants(&env, 20);
    let (a, g) = (env.path("acme.jsonl"), env.path("default.jsonl"));
    let cfg = env.write(
        "sendonce.toml",
        format!("provider = \"outbox:{}\"\n[[route]]\naccount = \"acme\"\nchannel = \"email\"\nprovider = \"outbox:{}\"\n", g.display(), a.display()),
    );
    env.ok(&[
        "run",
        "--once",
        "--tick",
        "20ms",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let (acme, other) = (deliveries(&a), deliveries(&g));
    assert_eq!(acme.len(), 20);
    assert_eq!(other.len(), 20);
    let lines = sendonce::provider::deliverylog::read_lines(&a).unwrap();
    assert!(
        lines.iter().all(|l| l.to.starts_with("acme")),
        "only acme's recipients in acme's provider"
    );
}

#[test]
fn a_campaign_without_a_route_is_a_clear_error() {
    let env = Env::new();
    two_tenants(&env, 1);
    let cfg = env.write(
        "c.toml",
        "[[route]]\naccount = \"acme\"\nprovider = \"null\"\n",
    );
    let r = env.run(&["run", "--once", "--config", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("no provider for account \"globex\""),
        "{}",
        r.stderr
    );
    let bad = env.write(
        "bad.toml",
        "[[route]]\nprovider = \"null\"\nrate = \"fast\"\n",
    );
    let r = env.run(&["run", "--once", "--config", bad.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("invalid rate"), "{}", r.stderr);
}

#[test]
fn the_rate_limit_holds_across_the_run() {
    let env = Env::new();
    let (_acme, _globex) = two_tenants(&env, 30);
    let out = env.path("o.jsonl");
    let cfg = env.write(
        "c.toml",
        format!(
            "[[route]]\nprovider = \"outbox:{}\"\nrate = \"40/s\"\nburst = 5\nconcurrency = 2\n",
            out.display()
        ),
    );
    let t = Instant::now();
    env.ok(&[
        "run",
        "--once",
        "--tick",
        "20ms",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let took = t.elapsed();
    assert_eq!(deliveries(&out).len(), 60);
    // 5 from the burst, 55 at 40/s: at least ~1.3 s (a lower bound only).
    assert!(took >= Duration::from_millis(1300), "{took:?}");
    let lines = sendonce::provider::deliverylog::read_lines(&out).unwrap();
    // No one-second window holds more than burst + rate.
    for (i, l) in lines.iter().enumerate() {
        let in_window = lines[i..].iter().take_while(|m| m.at < l.at + 1000).count();
        assert!(
            in_window <= 5 + 40 + 1,
            "{in_window} sends within one second"
        );
    }
}

/// A provider that knows which job ids it has (stands in for Postmark's metadata search).
struct Searchable {
    caps: Capabilities,
    known: Vec<String>,
    sent: std::sync::Mutex<Vec<String>>,
}

impl Provider for Searchable {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(async move {
            self.sent.lock().unwrap().push(msg.job_id.clone());
            CallResult::Accepted {
                provider_id: format!("new-{}", msg.job_id),
                replay: false,
            }
        })
    }
    fn lookup<'a>(&'a self, msg: &'a Message) -> LookupFuture<'a> {
        Box::pin(async move {
            if self.known.contains(&msg.job_id) {
                Lookup::Found {
                    provider_id: format!("found-{}", msg.job_id),
                }
            } else {
                Lookup::NotFound
            }
        })
    }
}

#[test]
fn rows_in_doubt_are_reconciled_by_lookup() {
    let env = Env::new();
    let (cid, _) = two_tenants(&env, 4);
    let store = sendonce::store::open(
        &sendonce::store::Target::File(env.db.clone()),
        &OpenOptions::default(),
    )
    .unwrap();
    let cid: i64 = cid.parse().unwrap();
    store
        .start_due_campaigns(sendonce::domain::clock::now_ms())
        .unwrap();
    while !store.build_list_chunk(cid, 100).unwrap() {}
    // Two rows went in doubt two minutes ago; the provider has one of them.
    env.sqlite()
        .execute(
            "UPDATE sends SET status = 'in_doubt', doubt_since = ?2 WHERE campaign_id = ?1 AND id IN
             (SELECT id FROM sends WHERE campaign_id = ?1 ORDER BY id LIMIT 2)",
            rusqlite::params![cid, sendonce::domain::clock::now_ms() - 120_000],
        )
        .unwrap();
    let jobs: Vec<String> = {
        let c = env.sqlite();
        let mut st = c
            .prepare("SELECT job_id FROM sends WHERE status = 'in_doubt' ORDER BY id")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    let provider = Arc::new(Searchable {
        caps: Capabilities {
            name: "searchable".into(),
            key_window: None,
            call_timeout: Duration::from_secs(5),
            can_lookup: true,
        },
        known: vec![jobs[0].clone()],
        sent: Default::default(),
    });
    let ledger: Arc<dyn Ledger> = store.clone();
    let cfg = sendonce::worker::Config {
        once: true,
        tick: Duration::from_millis(20),
        links: Some(crate::common::test_links()),
        ..Default::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let summary = rt
        .block_on(sendonce::worker::run(
            ledger,
            provider.clone(),
            cfg,
            std::future::pending(),
        ))
        .unwrap();
    assert_eq!(summary.reconciled, 2);
    let sent = provider.sent.lock().unwrap().clone();
    assert!(
        !sent.contains(&jobs[0]),
        "found at the provider: not sent again"
    );
    assert!(sent.contains(&jobs[1]), "not found: sent");
    let pid: String = env
        .sqlite()
        .query_row(
            "SELECT provider_message_id FROM sends WHERE job_id = ?1",
            [&jobs[0]],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pid, format!("found-{}", jobs[0]));
    assert_eq!(store.campaign(cid).unwrap().status.as_str(), "sent");
}

/// Panics on one job, accepts every other one.
struct PanicsOnce {
    caps: Capabilities,
    job: String,
}

impl Provider for PanicsOnce {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(async move {
            if msg.job_id == self.job {
                panic!("provider bug on {}", msg.job_id);
            }
            CallResult::Accepted {
                provider_id: format!("id-{}", msg.job_id),
                replay: false,
            }
        })
    }
}

/// A call task that panics is settled at once as an unknown outcome (in doubt, for a provider
/// without keys): its row does not sit leased until the lease expires, and its slot is freed.
#[test]
fn a_panicking_call_is_settled_not_leaked() {
    let env = Env::new();
    let (cid, _) = two_tenants(&env, 5);
    let store = sendonce::store::open(
        &sendonce::store::Target::File(env.db.clone()),
        &OpenOptions::default(),
    )
    .unwrap();
    let cid: i64 = cid.parse().unwrap();
    store
        .start_due_campaigns(sendonce::domain::clock::now_ms())
        .unwrap();
    while !store.build_list_chunk(cid, 100).unwrap() {}
    let job: String = env
        .sqlite()
        .query_row(
            "SELECT job_id FROM sends WHERE campaign_id = ?1 ORDER BY id LIMIT 1",
            [cid],
            |r| r.get(0),
        )
        .unwrap();
    let provider = Arc::new(PanicsOnce {
        caps: Capabilities {
            name: "panics-once".into(),
            key_window: None,
            call_timeout: Duration::from_secs(5),
            can_lookup: false,
        },
        job: job.clone(),
    });
    let ledger: Arc<dyn Ledger> = store.clone();
    // The default lease is a minute: a leaked row would keep `--once` waiting that long.
    let cfg = sendonce::worker::Config {
        once: true,
        tick: Duration::from_millis(20),
        links: Some(crate::common::test_links()),
        ..Default::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let summary = rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                sendonce::worker::run(ledger, provider, cfg, std::future::pending()),
            )
            .await
        })
        .expect("the worker finished instead of waiting for the lease to expire")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(summary.moved_in_doubt, 1);
    let (status, err): (String, String) = env
        .sqlite()
        .query_row(
            "SELECT status, last_error FROM sends WHERE job_id = ?1",
            [&job],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "in_doubt");
    assert!(err.contains("call task failed"), "{err}");
}
