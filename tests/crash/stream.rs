//! The transactional stream under kills: clients post messages, each under its own
//! Idempotency-Key, and retry a key until it is answered, while `sendonce serve --worker` is
//! SIGKILLed and restarted at random moments (at least 100 kills, any of them between the
//! provider's "yes" and the write). Afterwards every message the database holds (every key a
//! client was answered for among them) is delivered once, none twice, and nothing is left in
//! doubt with an idempotent provider. On SQLite, and on PostgreSQL (tier 1's server).

use super::workers::{start_fake, webhook_spec, Rng};
use crate::common::{client, token, Env, Server};
use serde_json::json;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KILLS: u64 = 100;
const CLIENTS: usize = 4;

/// What the clients share with the test: where the server is now, when to stop, and the
/// keys that were answered (key -> message id).
#[derive(Default)]
struct Shared {
    base: Mutex<String>,
    stop: AtomicBool,
    answered: Mutex<HashMap<String, i64>>,
}

/// One client: new keys while the kills go on, each posted once; a key that got no answer
/// (the server died, 5xx) is tried again later; a 409 means its first request was committed
/// and died before answering (the ledger has it). After `stop`, it retries what is left.
async fn client_loop(shared: Arc<Shared>, tok: String, c: usize) {
    let http = client();
    let (mut next, mut retry) = (0usize, VecDeque::<usize>::new());
    loop {
        let stopping = shared.stop.load(Ordering::SeqCst);
        let i = match (retry.pop_front(), stopping) {
            (Some(i), _) => i,
            (None, true) => return,
            (None, false) => {
                next += 1;
                next - 1
            }
        };
        let key = format!("s{c}-{i}");
        let base = shared.base.lock().unwrap().clone();
        let res = http
            .post(format!("{base}/v1/messages"))
            .bearer_auth(&tok)
            .header("Idempotency-Key", &key)
            .timeout(Duration::from_secs(5))
            .json(
                &json!({"to": format!("c{c}-{i}@example.org"), "from": "app@example.org",
                          "subject": "Receipt", "text": format!("Order {c}-{i}")}),
            )
            .send()
            .await;
        match res {
            Ok(r) if r.status().is_success() => {
                let v: serde_json::Value = r.json().await.unwrap_or_default();
                let id = v["id"].as_i64().expect("an answered message has its id");
                shared.answered.lock().unwrap().insert(key, id);
            }
            Ok(r) if r.status() == 409 => {}
            _ => {
                retry.push_back(i);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// `serve --worker` on `env.db` with a short lease, so rows a killed server held are claimed
/// again within the test.
fn serve(env: &Env, spec: &str) -> Server {
    Server::start(
        env,
        &[
            "--worker",
            "--provider",
            spec,
            "--tick",
            "20ms",
            "--lease",
            "2s",
        ],
    )
}

/// Per message in the database: (key, job id, status).
fn messages(env: &Env) -> Vec<(String, String, String)> {
    let sql = "SELECT m.idempotency_key, s.job_id, s.status FROM api_messages m \
               JOIN sends s ON s.id = m.send_id ORDER BY m.id";
    query(env, sql)
}

fn query(env: &Env, sql: &str) -> Vec<(String, String, String)> {
    let url = env.db.to_string_lossy();
    if url.starts_with("postgres://") {
        let db = crate::common::pg::db_name(&url);
        return crate::common::pg::shared()
            .psql(&db, sql)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f[0].into(), f[1].into(), f[2].into())
            })
            .collect();
    }
    let c = env.sqlite();
    let mut st = c.prepare(sql).unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap()
}

fn stream_survives_kills(env: &Env, seed: u64) {
    let mut rng = Rng(seed);
    let log = env.path("fake.jsonl");
    let fake = start_fake(&log, true, &[]);
    let spec = webhook_spec(&fake, true);
    let tok = token(env, "acme", "send");
    let shared = Arc::new(Shared::default());
    let mut server = serve(env, &spec);
    *shared.base.lock().unwrap() = server.base.clone();
    let rt = crate::common::rt();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| rt.spawn(client_loop(shared.clone(), tok.clone(), c)))
        .collect();
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(30 + rng.below(300)));
        drop(server); // SIGKILL
        server = serve(env, &spec);
        *shared.base.lock().unwrap() = server.base.clone();
    }
    shared.stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for c in clients {
            c.await.expect("a client task");
        }
    });
    // Everything the database holds goes out: rows a killed server held come back after the
    // lease (2 s) and are sent again with the same key.
    let deadline = Instant::now() + Duration::from_secs(60);
    while messages(env)
        .iter()
        .any(|m| m.2 == "queued" || m.2 == "leased")
    {
        assert!(
            Instant::now() < deadline,
            "messages still queued after 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(server);
    audit(env, &shared, &log, seed);
}

/// Every message in the database sent, delivered once at the fake, none twice; every answered
/// key among them.
fn audit(env: &Env, shared: &Shared, log: &std::path::Path, seed: u64) {
    let all = messages(env);
    let mut per_job: HashMap<String, u64> = HashMap::new();
    for l in sendonce::provider::deliverylog::read_lines(log).unwrap() {
        if !l.replay {
            *per_job.entry(l.job_id).or_default() += 1;
        }
    }
    let twice: Vec<_> = per_job.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "seed {seed}: delivered twice: {twice:?}");
    let keys: HashSet<&str> = all.iter().map(|m| m.0.as_str()).collect();
    let answered = shared.answered.lock().unwrap();
    for k in answered.keys() {
        assert!(
            keys.contains(k.as_str()),
            "seed {seed}: answered key {k} not in the ledger"
        );
    }
    for (key, job, status) in &all {
        assert_eq!(status, "sent", "seed {seed}: message {key} ({job})");
        assert_eq!(
            per_job.get(job),
            Some(&1),
            "seed {seed}: {key} ({job}) not delivered"
        );
    }
    assert!(
        answered.len() >= 100,
        "seed {seed}: only {} keys answered",
        answered.len()
    );
    eprintln!(
        "stream under {KILLS} kills (seed {seed}): {} messages in the ledger, {} keys answered, \
         {} deliveries, none twice",
        all.len(),
        answered.len(),
        per_job.len()
    );
}

fn seed() -> u64 {
    std::env::var("SENDONCE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| sendonce::domain::clock::now_ms() as u64)
}

#[test]
fn the_stream_under_100_kills_delivers_every_message_once_on_sqlite() {
    let env = Env::new();
    env.setup_account();
    stream_survives_kills(&env, seed());
}

#[test]
fn the_stream_under_100_kills_delivers_every_message_once_on_postgres() {
    let mut env = Env::new();
    env.db = crate::common::pg::shared().fresh_url().into();
    env.setup_account();
    stream_survives_kills(&env, seed());
}
