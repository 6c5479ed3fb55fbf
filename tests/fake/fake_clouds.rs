//! The fake provider's Amazon SES v2, SendGrid, Mailgun and Brevo endpoints: each provider's
//! official SDK sends through it (tier 1: tests/support/cloud_sdks.py, the SDKs pinned in
//! tests/requirements.txt), and raw HTTP checks the refusals, the shapes and what is (not)
//! recorded.

use crate::common::{client, rt, Env, Fake};
use serde_json::{json, Value};

const AWS_KEY: (&str, &str) = ("AKIDOFFLINETEST", "offline-secret");

fn fake(env: &Env, extra: &[&str]) -> Fake {
    let key = format!("{}:{}", AWS_KEY.0, AWS_KEY.1);
    Fake::start_with_env(
        &env.path("deliveries.jsonl"),
        extra,
        &[("SENDONCE_FAKE_AWS_KEY", key.as_str())],
    )
}

/// POST `body` (JSON) to `path` with `headers`: status, headers, body as JSON (or a string).
fn post(
    fake: &Fake,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    rt().block_on(async {
        let mut r = client().post(fake.url(path)).json(body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let res = r.send().await.expect("an answer");
        let (status, h) = (res.status().as_u16(), res.headers().clone());
        let text = res.text().await.expect("a body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, h, v)
    })
}

fn sendgrid_mail(personalizations: Value) -> Value {
    json!({"from": {"email": "shop@example.org"}, "subject": "Hi",
           "personalizations": personalizations,
           "content": [{"type": "text/plain", "value": "hello"}]})
}

fn brevo_mail(key: &str, text: &str) -> Value {
    json!({"sender": {"email": "shop@example.org"}, "to": [{"email": "kim@example.org"}],
           "subject": "Hi", "textContent": text, "headers": {"idempotencyKey": key}})
}

fn ses_mail(to: &str) -> Value {
    json!({"FromEmailAddress": "shop@example.org", "Destination": {"ToAddresses": [to]},
           "Content": {"Simple": {"Subject": {"Data": "Hi"}, "Body": {"Text": {"Data": "hello"}}}}})
}

const SIGV4: &str =
    "AWS4-HMAC-SHA256 Credential=AKIDOFFLINETEST/20261207/eu-west-1/ses/aws4_request, \
                     SignedHeaders=content-type;host;x-amz-date, Signature=00";

#[test]
fn each_api_refuses_a_request_without_credentials_in_its_own_shape_and_records_nothing() {
    let env = Env::new();
    let fake = fake(&env, &[]);
    let (s, h, v) = post(
        &fake,
        "/v2/email/outbound-emails",
        &[],
        &ses_mail("kim@example.org"),
    );
    assert_eq!(s, 403);
    assert_eq!(h["x-amzn-errortype"], "MissingAuthenticationTokenException");
    assert_eq!(v["message"], "Missing Authentication Token");
    let (s, _, v) = post(
        &fake,
        "/v3/mail/send",
        &[],
        &sendgrid_mail(json!([{"to": [{"email": "kim@example.org"}]}])),
    );
    assert_eq!(s, 401);
    assert!(v["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("authorization grant"));
    let (s, _, v) = post(&fake, "/v3/mg.example.org/messages", &[], &json!({}));
    assert_eq!((s, v), (401, json!("Forbidden")));
    let (s, _, v) = post(&fake, "/v3/smtp/email", &[], &brevo_mail("k", "x"));
    assert_eq!(
        (s, v),
        (
            401,
            json!({"code": "unauthorized", "message": "Key not found"})
        )
    );
    // A configured key: a signature that is not AWS's, or one without its date, is refused.
    let auth = [("authorization", SIGV4), ("x-amz-date", "20261207T000000Z")];
    let (s, h, _) = post(
        &fake,
        "/v2/email/outbound-emails",
        &auth,
        &ses_mail("kim@example.org"),
    );
    assert_eq!(s, 403);
    assert_eq!(
        h["x-amzn-errortype"], "InvalidSignatureException",
        "a date far from now"
    );
    let broken = [("authorization", "AWS4-HMAC-SHA256 Signature=00")];
    let (s, h, _) = post(
        &fake,
        "/v2/email/outbound-emails",
        &broken,
        &ses_mail("kim@example.org"),
    );
    assert_eq!(s, 400);
    assert_eq!(h["x-amzn-errortype"], "IncompleteSignatureException");
    assert!(fake.lines().is_empty(), "nothing refused is recorded");
}

#[test]
fn invalid_messages_get_each_providers_error_and_nothing_is_recorded() {
    let env = Env::new();
    let fake = fake(&env, &[]);
    let bearer = [("authorization", "Bearer SG.test")];
    let (s, _, v) = post(
        &fake,
        "/v3/mail/send",
        &bearer,
        &sendgrid_mail(json!([{"to": [{"email": "no-at-sign"}]}])),
    );
    assert_eq!(s, 400);
    assert_eq!(v["errors"][0]["field"], "personalizations");
    let mut no_content = sendgrid_mail(json!([{"to": [{"email": "kim@example.org"}]}]));
    no_content["content"] = json!([]);
    let (s, _, v) = post(&fake, "/v3/mail/send", &bearer, &no_content);
    assert_eq!(
        (s, v["errors"][0]["field"].clone()),
        (400, json!("content"))
    );
    let key = [("api-key", "xkeysib-test")];
    let mut no_subject = brevo_mail("k1", "x");
    no_subject["subject"] = Value::Null;
    let (s, _, v) = post(&fake, "/v3/smtp/email", &key, &no_subject);
    assert_eq!((s, v["code"].clone()), (400, json!("missing_parameter")));
    let mut remote = brevo_mail("k2", "x");
    remote["attachment"] = json!([{"url": "https://example.org/a.pdf"}]);
    let (s, _, v) = post(&fake, "/v3/smtp/email", &key, &remote);
    assert_eq!((s, v["code"].clone()), (400, json!("invalid_parameter")));
    let mut template = ses_mail("kim@example.org");
    template["Content"] = json!({"Template": {"TemplateName": "welcome"}});
    let unsigned = [("authorization", "AWS4-HMAC-SHA256 Credential=A/20261207/eu-west-1/ses/aws4_request, SignedHeaders=host, Signature=00")];
    let env2 = Env::new();
    let open = Fake::start(&env2.path("d.jsonl"), &[]);
    let (s, h, _) = post(&open, "/v2/email/outbound-emails", &unsigned, &template);
    assert_eq!(
        (s, h["x-amzn-errortype"].to_str().unwrap()),
        (404, "NotFoundException")
    );
    assert!(fake.lines().is_empty() && open.lines().is_empty());
}

#[test]
fn sendgrid_stores_one_delivery_per_personalization_and_brevo_replays_its_key() {
    let env = Env::new();
    let fake = fake(&env, &[]);
    let bearer = [("authorization", "Bearer SG.test")];
    let two = sendgrid_mail(json!([
        {"to": [{"email": "kim@example.org"}], "custom_args": {"sendonce_job": "j-kim"}},
        {"to": [{"email": "ann@example.org"}], "subject": "Hi Ann"}]));
    let (s, h, v) = post(&fake, "/v3/mail/send", &bearer, &two);
    assert_eq!((s, v), (202, json!("")));
    let id = h["x-message-id"].to_str().unwrap().to_string();
    let lines = fake.lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0].message_id.as_str(), lines[0].job_id.as_str()),
        (id.as_str(), "j-kim")
    );
    assert_eq!(lines[1].subject.as_deref(), Some("Hi Ann"));
    let key = [("api-key", "xkeysib-test")];
    let (s, _, first) = post(&fake, "/v3/smtp/email", &key, &brevo_mail("order-1", "x"));
    assert_eq!(s, 201);
    let (s, _, again) = post(&fake, "/v3/smtp/email", &key, &brevo_mail("order-1", "x"));
    assert_eq!((s, &again), (201, &first), "a repeat gets the first id");
    let (s, _, v) = post(
        &fake,
        "/v3/smtp/email",
        &key,
        &brevo_mail("order-1", "other"),
    );
    assert_eq!((s, v["code"].clone()), (400, json!("duplicate_request")));
    let brevo: Vec<_> = fake
        .lines()
        .into_iter()
        .filter(|l| l.api.as_deref() == Some("brevo"))
        .collect();
    assert_eq!(brevo.iter().filter(|l| !l.replay).count(), 1, "sent once");
}

#[test]
fn mailgun_takes_a_url_encoded_form_and_an_injected_failure_is_its_own_error() {
    let env = Env::new();
    let fake = fake(&env, &[]);
    let form = "from=shop%40example.org&to=kim%40example.org%2C+ann%40example.org&subject=Hi&text=hello&h%3AX-Sendonce-Job=j-mg&v%3Aorder=7";
    let send = |fake: &Fake, body: &'static str| {
        rt().block_on(async {
            let res = client()
                .post(fake.url("/v3/mg.example.org/messages"))
                .basic_auth("api", Some("key-test"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .expect("an answer");
            (
                res.status().as_u16(),
                res.json::<Value>().await.expect("JSON"),
            )
        })
    };
    let (s, v) = send(&fake, form);
    assert_eq!(
        (s, v["message"].clone()),
        (200, json!("Queued. Thank you."))
    );
    let id = v["id"].as_str().unwrap();
    assert!(
        id.starts_with('<') && id.ends_with("@mg.example.org>"),
        "{id}"
    );
    let l = &fake.lines()[0];
    assert_eq!(
        (l.to.as_str(), l.job_id.as_str()),
        ("kim@example.org, ann@example.org", "j-mg")
    );
    assert_eq!(l.metadata, Some(json!({"order": "7"})));
    let (s, v) = send(&fake, "from=shop%40example.org&subject=Hi&text=x");
    assert_eq!((s, v), (400, json!({"message": "to parameter is missing"})));
    let env2 = Env::new();
    let failing = Fake::start(&env2.path("d.jsonl"), &["--fail-rate", "1"]);
    let (s, v) = send(&failing, form);
    assert_eq!(s, 503);
    assert!(v["message"].as_str().unwrap().contains("injected"), "{v}");
    assert!(failing.lines().is_empty());
}

/// Each provider's official SDK sends one message with a binary file through the fake: the
/// SDK reads the id back, the delivery log holds the message as sent (file byte for byte, job
/// id, recipients), the fake's inbox lists it, SES's SigV4 is verified (boto3 signs; a wrong
/// secret is refused), and each SDK raises its own error type for a refused request.
#[cfg(feature = "tier1")]
#[test]
fn official_sdks_send_through_the_fake() {
    let env = Env::new();
    let fake = fake(&env, &[]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/cloud_sdks.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args([fake.base().as_str(), AWS_KEY.0, AWS_KEY.1])
        .output()
        .expect("run python3 (tests/run.sh puts the venv's first on PATH)");
    assert!(
        out.status.success(),
        "cloud_sdks.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON from cloud_sdks.py");
    let file = r["file"].as_str().unwrap();
    assert_eq!(
        r["ses"]["wrong_key"],
        json!({"status": 403, "code": "SignatureDoesNotMatchException"})
    );
    assert_eq!(
        r["ses"]["bad"],
        json!({"status": 400, "code": "BadRequestException"})
    );
    assert_eq!(
        r["sendgrid"]["bad"],
        json!({"status": 400, "field": "content"})
    );
    assert_eq!(r["sendgrid"]["status"], 202);
    assert_eq!(r["mailgun"]["bad"]["status"], 400);
    assert_eq!(
        r["brevo"]["bad"],
        json!({"status": 400, "code": "missing_parameter"})
    );
    assert_eq!(r["brevo"]["replay_id"], r["brevo"]["id"]);
    let lines = fake.lines();
    let by_id = |id: &Value| {
        let id = id.as_str().expect("an id");
        lines
            .iter()
            .find(|l| l.message_id == id && !l.replay)
            .unwrap_or_else(|| panic!("no delivery {id}"))
    };
    for (api, id, job) in [
        ("ses", &r["ses"]["id"], "job-ses"),
        ("sendgrid", &r["sendgrid"]["id"], "job-sendgrid"),
        ("mailgun", &r["mailgun"]["id"], "job-mailgun"),
        ("brevo", &r["brevo"]["id"], "job-brevo"),
    ] {
        let l = by_id(id);
        assert_eq!((l.api.as_deref(), l.job_id.as_str()), (Some(api), job));
        assert!(
            l.to.contains("kim@example.org")
                && l.from.as_deref().unwrap().contains("shop@example.org")
        );
        assert_eq!(l.body, "Your receipt is attached.\n", "{api}");
        assert!(
            l.html.as_deref().unwrap().contains("<b>receipt</b>"),
            "{api}"
        );
        assert_eq!(l.attachments.len(), 1, "{api}");
        assert_eq!(
            (
                l.attachments[0].filename.as_str(),
                l.attachments[0].content.as_str()
            ),
            ("receipt.bin", file),
            "{api}"
        );
    }
    let filed = by_id(&r["ses"]["tenant_id"]);
    assert_eq!(
        (filed.to.as_str(), filed.tenant.as_deref()),
        ("lee@example.org", Some("sdk-ses"))
    );
    let raw = by_id(&r["ses"]["raw_id"]);
    assert_eq!(
        (raw.to.as_str(), raw.job_id.as_str()),
        ("ann@example.org", "job-ses-raw")
    );
    assert_eq!(by_id(&r["brevo"]["id"]).idempotency_key, "order-1234");
    assert_eq!(
        lines.iter().filter(|l| !l.replay).count(),
        6,
        "refused requests are not recorded"
    );
    let listed: Value = rt().block_on(async {
        client()
            .get(fake.url("/messages?to=kim@example.org"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    let vias: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["via"].as_str())
        .collect();
    assert_eq!(
        vias,
        ["ses", "sendgrid", "mailgun", "brevo"],
        "the inbox lists each API's"
    );
}
