//! The fake provider's `--chaos` rules, against the real process: a rate limit answered 429
//! with `Retry-After` in the API's own error format, bursts of failures counted per request,
//! a hang after accepting (the client times out, the message is stored), the same draws under
//! the same `--seed`, and the rules read and replaced at `/chaos`.

use crate::common::{client, rt, Env, Fake, BIN};
use serde_json::{json, Value};
use std::time::Duration;

fn resend_mail(i: usize) -> Value {
    json!({"from": "shop@example.org", "to": format!("r{i}@example.org"), "subject": "Hi", "text": "x"})
}

/// POST to Resend's `/emails`: status, `Retry-After`, body.
async fn resend(fake: &Fake, c: &reqwest::Client, i: usize) -> (u16, Option<String>, Value) {
    let r = c
        .post(fake.url("/emails"))
        .bearer_auth("re_test")
        .json(&resend_mail(i))
        .send()
        .await
        .expect("an answer");
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (
        r.status().as_u16(),
        retry,
        r.json().await.unwrap_or(Value::Null),
    )
}

#[test]
fn a_rate_limit_refuses_in_the_apis_format_and_stores_nothing_it_refused() {
    let env = Env::new();
    let rule = "provider=resend,rate=1/m,burst=2,then=429";
    let fake = Fake::start(&env.path("d.jsonl"), &["--chaos", rule]);
    rt().block_on(async {
        let c = client();
        for i in 0..2 {
            assert_eq!(resend(&fake, &c, i).await.0, 200);
        }
        let (status, retry, body) = resend(&fake, &c, 2).await;
        assert_eq!((status, retry.as_deref()), (429, Some("60")));
        assert_eq!(body["statusCode"], 429, "Resend's error shape: {body}");
        // Another API is not limited by a Resend rule.
        let pm = c
            .post(fake.url("/email"))
            .header("X-Postmark-Server-Token", "t")
            .json(&json!({"From": "shop@example.org", "To": "kim@example.org", "Subject": "Hi", "TextBody": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(pm.status().as_u16(), 200);
        let chaos: Value = c.get(fake.url("/chaos")).send().await.unwrap().json().await.unwrap();
        assert_eq!(chaos["rules"][0]["rule"], rule);
        assert_eq!((chaos["rules"][0]["matched"].clone(), chaos["rules"][0]["fired"].clone()), (json!(3), json!(1)));
    });
    let to: Vec<String> = fake.lines().into_iter().map(|l| l.to).collect();
    assert_eq!(to, ["r0@example.org", "r1@example.org", "kim@example.org"]);
}

#[test]
fn bursts_repeat_every_n_requests_and_a_seed_repeats_random_failures() {
    let env = Env::new();
    let fake = Fake::start(
        &env.path("d.jsonl"),
        &["--chaos", "provider=resend,status=503,every=3,for=1"],
    );
    let statuses: Vec<u16> = rt().block_on(async {
        let c = client();
        let mut out = Vec::new();
        for i in 0..7 {
            out.push(resend(&fake, &c, i).await.0);
        }
        out
    });
    assert_eq!(statuses, [503, 200, 200, 503, 200, 200, 503]);
    assert_eq!(fake.lines().len(), 4);
    let run = |seed: &str| {
        let env = Env::new();
        let fake = Fake::start(
            &env.path("d.jsonl"),
            &["--seed", seed, "--chaos", "status=500,p=0.5"],
        );
        rt().block_on(async {
            let c = client();
            let mut out = Vec::new();
            for i in 0..24 {
                out.push(resend(&fake, &c, i).await.0);
            }
            out
        })
    };
    let (a, b, other) = (run("11"), run("11"), run("12"));
    assert_eq!(a, b, "the same seed, the same failures");
    assert_ne!(
        a, other,
        "another seed, other failures (equal by chance once in 2^24)"
    );
    assert!(a.contains(&500) && a.contains(&200), "{a:?}");
}

#[test]
fn a_hang_after_accept_times_the_client_out_but_the_message_is_stored() {
    let env = Env::new();
    let fake = Fake::start(
        &env.path("d.jsonl"),
        &["--chaos", "provider=resend,after-accept=hang,for=3s"],
    );
    rt().block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let c = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_millis(700))
            .build()
            .unwrap();
        let r = c
            .post(fake.url("/emails"))
            .bearer_auth("re_test")
            .json(&resend_mail(0))
            .send()
            .await;
        assert!(r.expect_err("no answer in time").is_timeout());
    });
    let lines = fake.lines();
    assert_eq!(lines.len(), 1, "stored before the silence");
}

#[test]
fn the_rules_are_replaced_all_or_nothing_and_a_bad_rule_is_refused_at_start() {
    let env = Env::new();
    let fake = Fake::start(&env.path("d.jsonl"), &[]);
    rt().block_on(async {
        let c = client();
        let put = |rules: Value| {
            c.put(fake.url("/chaos"))
                .json(&json!({"rules": rules}))
                .send()
        };
        let r = put(json!(["provider=resend,status=502", "rate=oops"]))
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400);
        let e: Value = r.json().await.unwrap();
        assert!(e["error"].as_str().unwrap().contains("rate=oops"), "{e}");
        assert_eq!(resend(&fake, &c, 0).await.0, 200, "nothing was replaced");
        let r = put(json!(["provider=resend,status=502"])).await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(resend(&fake, &c, 1).await.0, 502);
        let cleared: Value = c
            .delete(fake.url("/chaos"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(cleared["rules"], json!([]));
        assert_eq!(resend(&fake, &c, 2).await.0, 200);
    });
    let out = std::process::Command::new(BIN)
        .args(["fake-provider", "--listen", "127.0.0.1:0", "--log"])
        .arg(env.path("other.jsonl"))
        .args(["--chaos", "provider=resend,slow=2s..1s"])
        .output()
        .expect("run the fake");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("slow=2s..1s") && err.contains("below the minimum"),
        "{err}"
    );
}
