//! The fake provider's web inbox (`GET /`, `/inbox/{id}`, `POST /clear`) in headless Chromium
//! (tests/support/browser.py): the list at 360 px, the email and SMS views, the sandboxed HTML
//! part (a script in it changes nothing, a remote image is never fetched), search, and the
//! "Clear inbox" button with its cross-site token. Screenshots in
//! `$CARGO_TARGET_DIR/test-output/fake_web/`.

use crate::common::{assert_png, browser, client, output_dir, rt, Fake};
use serde_json::{json, Value};
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `POST /send`; the message id.
fn send(fake: &Fake, key: &str, body: Value) -> String {
    rt().block_on(async {
        let r = client()
            .post(fake.url("/send"))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
            .await
            .expect("a response");
        assert_eq!(r.status(), 200, "send {body}");
        let v: Value = r.json().await.expect("JSON");
        v["id"].as_str().expect("an id").to_string()
    })
}

/// A listener that counts every connection made to it (none is answered).
fn beacon() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind the beacon");
    let port = l.local_addr().expect("its address").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            h.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut s) = s {
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
            }
        }
    });
    (port, hits)
}

fn text(v: &Value) -> &str {
    v["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {v}"))
}

/// Sends a welcome email (text and HTML) and, 5 ms later, a two-segment SMS; their ids.
fn send_email_and_sms(fake: &Fake) -> (String, String) {
    let email = send(
        fake,
        "k-email",
        json!({"job_id": "welcome:1", "to": "kim@example.org", "from": "shop@example.com",
               "subject": "Welcome aboard, Kim", "channel": "email",
               "body": "Hello Kim.\nConfirm: https://shop.example.com/c/abc",
               "html": "<h1 style=\"color:#1d4ed8\">Hello Kim</h1><p>Confirm <a href=\"https://shop.example.com/c/abc\">here</a>.</p>"}),
    );
    std::thread::sleep(Duration::from_millis(5));
    let sms_text = "Your code is 424242. ".repeat(9);
    let sms = send(
        fake,
        "k-sms",
        json!({"job_id": "otp:1", "to": "+14155550100", "channel": "sms", "body": sms_text}),
    );
    (email, sms)
}

/// Checks the list at phone width: both messages, newest first, no horizontal scroll.
fn check_the_list(fake: &Fake, out: &Path) {
    // The list at phone width: both, newest (the SMS) first, no horizontal scroll.
    let shot = out.join("inbox-360.png");
    let page = browser(&[
        &fake.url("/"),
        "--width",
        "360",
        "--screenshot",
        shot.to_str().unwrap(),
    ]);
    assert_eq!(page["status"], 200, "{page}");
    assert_eq!(page["overflow_x"], false, "the list fits 360 px: {page}");
    assert_eq!(page["scripts"], 0, "no JavaScript");
    let t = text(&page);
    let (at_sms, at_email) = (
        t.find("+14155550100").expect("the SMS is listed"),
        t.find("kim@example.org").expect("the email is listed"),
    );
    assert!(at_sms < at_email, "newest first: {t}");
    assert!(
        t.contains("Welcome aboard, Kim") && t.contains("Your code is 424242"),
        "{t}"
    );
    assert!(
        t.contains("EMAIL") && t.contains("SMS"),
        "channel badges: {t}"
    );
    assert!(t.contains("2 messages"), "{t}");
    assert_png(&shot, 5_000, Some(360));
}

/// Checks the email's view: text, the HTML in its frame, headers, source, links.
fn check_the_email_view(fake: &Fake, out: &Path, email: &str) {
    // The email: text, the HTML in its frame, headers, source, links.
    let shot = out.join("email-360.png");
    let view = browser(&[
        &fake.url(&format!("/inbox/{email}")),
        "--width",
        "360",
        "--wait",
        "300",
        "--screenshot",
        shot.to_str().unwrap(),
    ]);
    assert_eq!(view["status"], 200, "{view}");
    assert_eq!(view["overflow_x"], false, "the view fits 360 px: {view}");
    assert_eq!(view["title"], "Welcome aboard, Kim");
    let t = text(&view);
    for want in [
        "shop@example.com",
        "kim@example.org",
        "Hello Kim.",
        "Headers",
        "Message-ID",
        "Source",
        "X-Fake-Provider-Source: synthesized",
        "Content-Type: multipart/alternative",
        "https://shop.example.com/c/abc",
    ] {
        assert!(t.contains(want), "{want:?} in the email view: {t}");
    }
    let frames = view["frames"].as_array().expect("frames");
    assert_eq!(frames.len(), 1, "one frame: {view}");
    assert!(
        frames[0]["url"]
            .as_str()
            .is_some_and(|u| u.ends_with(&format!("/inbox/{email}/html"))),
        "{view}"
    );
    assert!(
        frames[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Hello Kim")),
        "the HTML part shows in its frame: {view}"
    );
    assert_png(&shot, 5_000, Some(360));
}

/// Checks the SMS's view: a bubble, the number, the segments, no email source.
fn check_the_sms_view(fake: &Fake, out: &Path, sms: &str) {
    // The SMS: a bubble, the number, the segments.
    let shot = out.join("sms-360.png");
    let view = browser(&[
        &fake.url(&format!("/inbox/{sms}")),
        "--width",
        "360",
        "--screenshot",
        shot.to_str().unwrap(),
    ]);
    assert_eq!(view["status"], 200, "{view}");
    assert_eq!(view["overflow_x"], false, "{view}");
    let t = text(&view);
    assert!(
        t.contains("+14155550100") && t.contains("Your code is 424242"),
        "{t}"
    );
    // 189 GSM-7 characters: two segments of 153.
    assert!(t.contains("2 segments · GSM-7"), "segments shown: {t}");
    assert!(!t.contains("Source"), "an SMS has no email source: {t}");
    assert_png(&shot, 3_000, Some(360));
}

/// Checks that a search typed into the box narrows the list, and one matching nothing says so.
fn check_search(fake: &Fake) {
    // Search narrows the list (typed into the box, submitted with the button).
    let found = browser(&[
        &fake.url("/"),
        "--fill",
        "Search=welcome",
        "--click",
        "Search",
    ]);
    let t = text(&found["after"]);
    assert!(t.contains("kim@example.org"), "{t}");
    assert!(!t.contains("+14155550100"), "the SMS is filtered out: {t}");
    assert!(t.contains("1 of 2 messages match"), "{t}");
    let none = browser(&[&fake.url("/?q=nothing+like+this")]);
    assert!(text(&none).contains("Nothing matches"), "{none}");
}

/// Checks that a cross-site `POST /clear` (a wrong token, or none) is refused and deletes nothing.
fn check_cross_site_clear_is_refused(fake: &Fake, c: &reqwest::Client) {
    // A cross-site POST (no token) is refused and deletes nothing.
    let (status, left) = rt().block_on(async {
        let r = c
            .post(fake.url("/clear"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("token=guess")
            .send()
            .await
            .unwrap();
        let status = r.status();
        let left: Value = c
            .get(fake.url("/messages"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (status, left)
    });
    assert_eq!(status, 403);
    assert_eq!(
        left.as_array().map(Vec::len),
        Some(2),
        "nothing cleared: {left}"
    );
    let status = rt().block_on(async { c.post(fake.url("/clear")).send().await.unwrap().status() });
    assert_eq!(status, 403, "no token at all");
}

/// Checks the headers that say what a page may load (CSP, nosniff).
fn check_security_headers(fake: &Fake, c: &reqwest::Client) {
    // Every page says what it may load.
    let (csp, nosniff) = rt().block_on(async {
        let r = c.get(fake.url("/")).send().await.unwrap();
        let h = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        (h("content-security-policy"), h("x-content-type-options"))
    });
    assert!(
        csp.contains("default-src 'none'")
            && csp.contains("frame-src 'self'")
            && csp.contains("form-action 'self'")
            && !csp.contains("script-src"),
        "{csp}"
    );
    assert_eq!(nosniff, "nosniff");
}

/// Presses "Clear inbox" with the keyboard and checks the list and the delivery log are empty.
fn clear_with_the_button(fake: &Fake) {
    // The button (reached with Tab, pressed with Enter) empties it and lands on the empty list.
    let cleared = browser(&[&fake.url("/"), "--click", "Clear inbox", "--keyboard"]);
    assert_eq!(cleared["after"]["status"], 200, "{cleared}");
    let t = text(&cleared["after"]);
    assert!(
        t.contains("0 messages") && t.contains("No messages yet"),
        "{t}"
    );
    assert!(fake.lines().is_empty(), "the delivery log is empty");
}

#[test]
fn the_inbox_lists_shows_and_contains_messages() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let out = output_dir("fake_web");

    let (email, sms) = send_email_and_sms(&fake);
    check_the_list(&fake, &out);
    check_the_email_view(&fake, &out, &email);
    check_the_sms_view(&fake, &out, &sms);
    check_search(&fake);
    let c = client();
    check_cross_site_clear_is_refused(&fake, &c);
    check_security_headers(&fake, &c);
    clear_with_the_button(&fake);
}

#[test]
fn a_script_in_an_email_changes_nothing_and_remote_images_never_load() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::start(&dir.path().join("log.jsonl"), &[]);
    let (port, hits) = beacon();
    let html = format!(
        "<html><head><title>Original</title></head><body><p>Hostile body</p>\
         <script>document.title='pwned'; parent.document.body.innerHTML=''</script>\
         <img src=\"http://127.0.0.1:{port}/beacon\" alt=\"beacon\">\
         <img src=\"//127.0.0.1:{port}/beacon2\"></body></html>"
    );
    let id = send(
        &fake,
        "k-hostile",
        json!({"job_id": "x:1", "to": "lee@example.org", "subject": "Hostile",
               "body": "Plain part", "html": html}),
    );

    // The view: the frame loaded, and the page around it is untouched.
    let view = browser(&[&fake.url(&format!("/inbox/{id}")), "--wait", "1000"]);
    assert_eq!(view["status"], 200, "{view}");
    assert_eq!(
        view["title"], "Hostile",
        "the page's title is unchanged: {view}"
    );
    let t = text(&view);
    assert!(
        t.contains("Plain part") && t.contains("Headers") && t.contains("lee@example.org"),
        "the page's text is unchanged: {t}"
    );
    assert_eq!(view["scripts"], 0, "{view}");
    let frames = view["frames"].as_array().expect("frames");
    assert_eq!(frames.len(), 1, "{view}");
    assert!(
        frames[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Hostile body")),
        "the HTML part did render (so the script had its chance): {view}"
    );

    // The HTML part opened on its own: still no script (its own title stays).
    let alone = browser(&[&fake.url(&format!("/inbox/{id}/html")), "--wait", "1000"]);
    assert_eq!(alone["status"], 200, "{alone}");
    assert_eq!(
        alone["title"], "Original",
        "the script did not run: {alone}"
    );
    assert!(text(&alone).contains("Hostile body"), "{alone}");

    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no remote image was requested"
    );

    // And the response says so itself, whoever opens it.
    let csp = rt().block_on(async {
        let r = client()
            .get(fake.url(&format!("/inbox/{id}/html")))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers()
                .get("x-content-type-options")
                .and_then(|v| v.to_str().ok()),
            Some("nosniff")
        );
        r.headers()
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    });
    assert!(
        csp.starts_with("sandbox;") && csp.contains("default-src 'none'"),
        "{csp}"
    );
}
