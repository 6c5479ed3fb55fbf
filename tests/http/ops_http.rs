//! The operations side of `sendonce serve`, as a real process on 127.0.0.1:0: `/metrics`
//! scraped after real sends and read by an independent parser (PyPI `prometheus-client`).
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common::{client, rt, token, Env, Fake, Server, BIN};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

/// Account acme, a fake provider, a server with a worker sending through it.
fn setup(env: &Env) -> (Fake, Server) {
    env.setup_account();
    let fake = Fake::start(&env.path("fake.jsonl"), &[]);
    let spec = format!("webhook:{}", fake.url("/send"));
    let server = Server::start(env, &["--worker", "--provider", spec.as_str()]);
    (fake, server)
}

/// Run `script` with the tests' python (the venv of tests/run.sh), `input` on stdin; its
/// stdout as JSON.
fn python(script: &str, input: &str) -> Value {
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (run the tests through tests/run.sh, which makes the venv)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every sample of a scrape as [name, labels, value], by prometheus_client's own parser.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append([s.name, s.labels, s.value, fam.type])
print(json.dumps(out))
"#;

/// The value of the sample `name` whose labels include `labels` (None: no such sample).
fn sample(samples: &Value, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.as_array().unwrap().iter().find_map(|s| {
        let ok = s[0] == name && labels.iter().all(|(k, v)| s[1][*k] == *v);
        ok.then(|| s[2].as_f64().unwrap())
    })
}

#[cfg(feature = "tier1")]
#[test]
fn metrics_count_what_was_sent() {
    let env = Env::new();
    let (fake, server) = setup(&env);
    let tok = token(&env, "acme", "send");
    let text = rt().block_on(async {
        let c = client();
        for i in 0..5 {
            let res = c
                .post(server.url("/v1/messages?wait=10s"))
                .bearer_auth(&tok)
                .header("Idempotency-Key", format!("m{i}"))
                .json(
                    &json!({"to": format!("u{i}@x.org"), "from": "app@example.org",
                              "subject": "Hi", "text": "Hello"}),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "{:?}", res.text().await);
        }
        let res = c.post(server.url("/v1/messages")).send().await.unwrap();
        assert_eq!(res.status(), 401);
        let res = c.get(server.url("/nope/1")).send().await.unwrap();
        assert_eq!(res.status(), 404);
        let res = c.get(server.url("/metrics")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let ct = res.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        res.text().await.unwrap()
    });
    let s = python(PARSE, &text);
    let delivered = fake.lines().iter().filter(|l| !l.replay).count();
    assert_eq!(delivered, 5, "{text}");
    let req = |status: &str, route: &str| {
        sample(
            &s,
            "sendonce_http_requests_total",
            &[("route", route), ("status", status)],
        )
    };
    assert_eq!(req("200", "/v1/messages"), Some(5.0), "{text}");
    assert_eq!(req("401", "/v1/messages"), Some(1.0), "{text}");
    assert_eq!(req("404", "unmatched"), Some(1.0), "{text}");
    let calls = [("route", "default"), ("outcome", "accepted")];
    assert_eq!(
        sample(&s, "sendonce_provider_calls_total", &calls),
        Some(5.0),
        "{text}"
    );
    let lat = "sendonce_provider_call_duration_seconds";
    let def = [("route", "default")];
    assert_eq!(
        sample(&s, &format!("{lat}_count"), &def),
        Some(5.0),
        "{text}"
    );
    let inf = [("route", "default"), ("le", "+Inf")];
    assert_eq!(
        sample(&s, &format!("{lat}_bucket"), &inf),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        sample(&s, "sendonce_claimed_rows_total", &[]),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        sample(&s, "sendonce_sends_total", &[("state", "sent")]),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        sample(&s, "sendonce_rate_limit_waits_total", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(&s, "sendonce_sends_in_doubt", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(&s, "sendonce_wal_bytes", &[]).unwrap() > 0.0,
        "{text}"
    );
    // The scrape itself is counted by the next one.
    let again = rt().block_on(async {
        client()
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    let s = python(PARSE, &again);
    let scrape = [("route", "/metrics"), ("status", "200")];
    assert_eq!(
        sample(&s, "sendonce_http_requests_total", &scrape),
        Some(1.0)
    );
}

/// Validates the document on stdin with PyPI `openapi-spec-validator` (it detects 3.1).
const VALIDATE: &str = r#"
import json, sys
from openapi_spec_validator import validate
from openapi_spec_validator.versions import get_spec_version
doc = json.load(sys.stdin)
validate(doc)
print(json.dumps({"version": str(get_spec_version(doc))}))
"#;

#[cfg(feature = "tier1")]
#[test]
fn openapi_lists_every_route_and_validates() {
    let env = Env::new();
    let (_fake, server) = setup(&env);
    let doc: Value = rt().block_on(async {
        let res = client()
            .get(server.url("/v1/openapi.json"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.json().await.unwrap()
    });
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "put", "post", "delete", "patch", "head", "options"]
                .contains(&method.as_str())
            {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    let mut served: Vec<(String, String)> = sendonce::http::route_list()
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    documented.sort();
    served.sort();
    assert_eq!(
        documented, served,
        "documented routes (left) and served routes (right) differ"
    );
    let v = python(VALIDATE, &doc.to_string());
    assert!(v["version"].as_str().unwrap().contains("3.1"), "{v}");
}

/// Functional, not timed: the http load section runs and every accepted request is delivered
/// exactly once.
#[test]
fn bench_http_delivers_every_accepted_request_once() {
    let out = Command::new(BIN)
        .args([
            "--json",
            "bench",
            "--only",
            "http",
            "--seconds",
            "2",
            "--clients",
            "4",
        ])
        .env_remove("SENDONCE_PROVIDER")
        .output()
        .expect("run sendonce bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&stdout).unwrap();
    let accepted = r["accepted"].as_u64().unwrap();
    assert!(accepted > 0, "{r}");
    assert_eq!(
        r["requests"].as_u64(),
        Some(accepted),
        "nothing refused: {r}"
    );
    assert_eq!(r["deliveries"].as_u64(), Some(accepted), "{r}");
    assert_eq!(r["duplicates"].as_u64(), Some(0), "{r}");
    assert_eq!(r["exactly_once"], true, "{r}");
    assert!(r["p50_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["p99_ms"].as_f64().unwrap() >= r["p50_ms"].as_f64().unwrap());
}
