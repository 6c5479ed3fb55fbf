//! Credentials never leave the process through provider error text: a canary token and a canary
//! SMTP password are driven through every failure path of the HTTP providers (Twilio, Resend,
//! Postmark, webhook) and of SMTP, by the real binary, against servers that echo what they were
//! sent (literal, base64, URL-encoded, split across the old 200-character cut). Nothing in any
//! form may reach stdout, stderr, the database (and its WAL), any other file the run leaves, the
//! campaign report (CSV and JSON), the doubts and suppression lists, or `notify`'s output.
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common;
use crate::common::pg;
use crate::common::{Env, Run};
use base64::Engine;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// The HTTP providers' token (Twilio auth token, Resend API key, Postmark server token).
const TOKEN: &str = "CANARY-s3cr3t-7fq9Zk";
/// The SMTP password.
const PASSWORD: &str = "CANARY-pw!Qx7 vR2mz";
const SID: &str = "AC0123456789abcdef0123456789abcdef";
const SMTP_USER: &str = "mailer";
const INSTALL: &str = "tests/run.sh (it installs aiosmtpd into a venv under target/)";

// ---------------------------------------------------------------------------------------------
// What a leak looks like

fn b64(alphabet: &base64::engine::GeneralPurpose, data: &[u8]) -> String {
    alphabet.encode(data)
}

/// Every form of `secret` that must not appear, lower-cased (they are looked for in lower-cased
/// views, so that any case of them is found): each 8-character piece of it (a secret cut in
/// two still leaks) and the hex of each piece, its percent- and form-encoded forms, and each
/// 8-character piece of its base64 at each of the three alignments it can have inside a longer
/// blob (`user:secret`, `\0user\0secret`...), standard and URL-safe alphabets: the characters
/// of those encodings that depend on the secret's bytes alone.
fn forms(secret: &str) -> Vec<(String, String)> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut out = Vec::new();
    let chars: Vec<char> = secret.chars().collect();
    for w in chars.windows(8) {
        let piece: String = w.iter().collect();
        out.push(("hex piece".to_string(), hex(piece.as_bytes())));
        out.push(("piece".to_string(), piece));
    }
    let pct = percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
        .to_string();
    out.push(("percent-encoded".into(), pct));
    let form: String = form_urlencoded::byte_serialize(secret.as_bytes()).collect();
    out.push(("form-encoded".into(), form));
    for (name, alphabet) in [("base64", &STANDARD), ("url-safe base64", &URL_SAFE)] {
        for k in 0..3usize {
            let mut data = b"xyz"[..k].to_vec();
            data.extend_from_slice(secret.as_bytes());
            let enc = b64(alphabet, &data);
            let start = if k == 0 { 0 } else { 4 };
            let end = 4 * (data.len() / 3);
            let core: Vec<char> = enc[start..end].chars().collect();
            for w in core.windows(8) {
                out.push((format!("{name} (alignment {k})"), w.iter().collect()));
            }
        }
    }
    for f in &mut out {
        f.1 = f.1.to_ascii_lowercase();
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every run of at least 16 hex digits in `hay`, decoded from each of its first two digits,
/// with NUL separators.
fn hex_decoded(hay: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for run in hay
        .split(|b| !b.is_ascii_hexdigit())
        .filter(|r| r.len() >= 16)
    {
        for k in 0..2 {
            for pair in run[k..].chunks_exact(2) {
                let digits = std::str::from_utf8(pair).unwrap_or("00");
                out.push(u8::from_str_radix(digits, 16).unwrap_or(0));
            }
            out.push(0);
        }
    }
    out
}

/// Every run of base64 characters in `hay`, decoded from each of its first four characters
/// (one of them is aligned with any blob inside the run), concatenated with NUL separators. A
/// blob cut short still decodes to its first bytes.
fn base64_decoded(hay: &[u8]) -> Vec<u8> {
    let value = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::new();
    for run in hay.split(|&b| value(b).is_none()).filter(|r| r.len() >= 8) {
        for k in 0..4 {
            for group in run[k..].chunks(4) {
                let mut acc = 0u32;
                for (i, &c) in group.iter().enumerate() {
                    acc |= value(c).unwrap_or(0) << (18 - 6 * i);
                }
                let bytes = acc.to_be_bytes();
                out.extend_from_slice(&bytes[1..group.len().max(1)]);
            }
            out.push(0);
        }
    }
    out
}

/// Panics when `haystack` (as is, percent-decoded, hex-decoded or with its base64 runs
/// decoded; in any case) carries any form of either canary.
fn assert_clean(what: &str, haystack: &[u8]) {
    let lower = |b: &[u8]| b.to_ascii_lowercase();
    let decoded: Vec<u8> = percent_encoding::percent_decode(haystack).collect();
    let views = [
        ("as is", lower(haystack)),
        ("percent-decoded", lower(&decoded)),
        ("hex-decoded", lower(&hex_decoded(haystack))),
        ("base64-decoded", lower(&base64_decoded(haystack))),
    ];
    for secret in [TOKEN, PASSWORD] {
        let mut by_len: std::collections::HashMap<
            usize,
            std::collections::HashMap<Vec<u8>, String>,
        > = std::collections::HashMap::new();
        for (form, needle) in forms(secret) {
            by_len
                .entry(needle.len())
                .or_default()
                .insert(needle.into_bytes(), form);
        }
        for (view, hay) in &views {
            for (len, needles) in &by_len {
                let Some((i, form)) = hay
                    .windows(*len)
                    .enumerate()
                    .find_map(|(i, w)| needles.get(w).map(|f| (i, f)))
                else {
                    continue;
                };
                let lo = i.saturating_sub(120);
                let hi = (i + len + 120).min(hay.len());
                panic!(
                    "{what} ({view}) leaks the canary {secret:?} as {form} {:?}: ...{}...",
                    printable(&hay[i..i + len]),
                    printable(&hay[lo..hi])
                );
            }
        }
    }
}

fn printable(b: &[u8]) -> String {
    b.iter()
        .map(|&c| {
            if (0x20..0x7f).contains(&c) {
                c as char
            } else {
                '.'
            }
        })
        .collect()
}

/// `%2D` → `%2d`: the percent-escapes of `s` in lower-case hex.
fn lower_hex_escapes(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        out.push(c);
        if c == '%' {
            for _ in 0..2 {
                if let Some(h) = it.next() {
                    out.push(h.to_ascii_lowercase());
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Campaigns run by the real binary, and everything they leave behind

struct Campaign {
    env: Env,
    account: String,
    id: String,
}

/// An approved one-recipient campaign on `channel` ("sms" or "email").
fn campaign(channel: &str) -> Campaign {
    let env = Env::new();
    let account = env.setup_account();
    let csv = match channel {
        "sms" => "phone,name\n+14155550100,Ana\n",
        _ => "email,name\nana@example.com,Ana\n",
    };
    let f = env.write("subs.csv", csv);
    env.import_csv(&account, &f);
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let mut args = vec![
        "campaign",
        "create",
        "--account",
        &account,
        "--name",
        "canary",
        "--channel",
        channel,
        "--body-file",
        body.to_str().unwrap(),
    ];
    if channel == "email" {
        args.extend(["--subject", "Hi", "--from", "news@example.org"]);
    }
    let id = env.ok(&args);
    env.ok(&["campaign", "approve", &id]);
    Campaign { env, account, id }
}

impl Campaign {
    /// `sendonce run --once` with this provider and the credential in `secret_env`.
    fn run(&self, spec: &str, secret_env: &[(&str, &str)]) -> Run {
        let mut c = self.env.cmd();
        c.args([
            "-vv",
            "run",
            "--once",
            "--provider",
            spec,
            "--tick",
            "50ms",
            "--max-attempts",
            "2",
            "--retry-base",
            "10ms",
        ]);
        for (k, v) in secret_env {
            c.env(k, v);
        }
        Run::from(c.output().expect("run sendonce"))
    }

    /// The row's status and last error.
    fn row(&self) -> (String, String) {
        self.env
            .sqlite()
            .query_row(
                "SELECT status, coalesce(last_error, '') FROM sends WHERE campaign_id = ?1",
                [self.id.parse::<i64>().expect("a campaign id")],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("the send row")
    }

    /// Runs the command, checks where it left the row, then that nothing anywhere carries a
    /// canary. Returns the stored error.
    fn check(&self, spec: &str, secret_env: &[(&str, &str)], status: &str) -> String {
        let r = self.run(spec, secret_env);
        let (got, error) = self.row();
        assert_eq!(
            got, status,
            "row status (last error {error:?}); run stderr: {}",
            r.stderr
        );
        assert_clean("run stdout", r.stdout.as_bytes());
        assert_clean("run stderr", r.stderr.as_bytes());
        self.assert_everything_clean();
        error
    }

    fn assert_everything_clean(&self) {
        let e = &self.env;
        for (what, args) in [
            (
                "report csv",
                vec!["campaign", "report", &self.id, "--format", "csv"],
            ),
            (
                "report json",
                vec!["campaign", "report", &self.id, "--format", "json"],
            ),
            (
                "doubts",
                vec!["--json", "doubts", "list", "--campaign", &self.id],
            ),
            ("status", vec!["--json", "campaign", "status", &self.id]),
            (
                "suppressions",
                vec!["--json", "suppress", "list", "--account", &self.account],
            ),
        ] {
            let out = e.ok(&args);
            assert_clean(what, out.as_bytes());
        }
        assert_files_clean(e.dir.path());
    }
}

/// Every file under `dir`: the database, its WAL and shared-memory files, any outbox or state.
fn assert_files_clean(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let p = entry.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).expect("read file");
                assert_clean(&p.display().to_string(), &bytes);
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "no files under {}", dir.display());
}

fn assert_redacted(error: &str) {
    assert!(
        error.contains("[redacted]"),
        "the echo should reach the ledger scrubbed: {error:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A raw HTTP server that answers from what it was sent (std threads; lives until the test
// process ends)

/// One request as it arrived.
struct Request {
    target: String,
    authorization: String,
    headers: String,
}

enum Answer {
    /// A whole HTTP response.
    Reply(String),
    /// Keep the connection open without a word (the client times out).
    Hang,
}

/// Answers every request with `answer(request)`. With `plain_to_tls`, it writes a plain HTTP
/// response right after the first bytes arrive, whatever they are: a TLS client fails there.
fn http_server(
    plain_to_tls: bool,
    answer: impl Fn(&Request) -> Answer + Send + Sync + 'static,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            let answer = answer.clone();
            thread::spawn(move || {
                if plain_to_tls {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let _ = s.write_all(
                        http(
                            "500 Internal Server Error",
                            &format!("token {TOKEN} auth {}", basic()),
                        )
                        .as_bytes(),
                    );
                    return;
                }
                let Some(req) = read_request(&mut s) else {
                    return;
                };
                match answer(&req) {
                    Answer::Reply(r) => {
                        let _ = s.write_all(r.as_bytes());
                    }
                    Answer::Hang => thread::sleep(Duration::from_secs(10)),
                }
            });
        }
    });
    addr
}

fn read_request(s: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let head = &text[..end];
        let header = |name: &str| {
            head.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        let len: usize = header("content-length").parse().unwrap_or(0);
        if buf.len() < end + 4 + len {
            continue;
        }
        let target = head
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or("")
            .to_string();
        return Some(Request {
            target,
            authorization: header("authorization"),
            headers: head.to_string(),
        });
    }
}

fn http(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A Twilio-style error body.
fn twilio_error(status: &str, code: u32, message: &str) -> String {
    let body = serde_json::json!({
        "code": code,
        "message": message,
        "more_info": format!("https://www.twilio.com/docs/errors/{code}"),
        "status": status[..3].parse::<u16>().unwrap(),
    })
    .to_string();
    http(status, &body)
}

/// `Basic base64(SID:TOKEN)`, what the Twilio provider sends.
fn basic() -> String {
    format!(
        "Basic {}",
        b64(
            &base64::engine::general_purpose::STANDARD,
            format!("{SID}:{TOKEN}").as_bytes()
        )
    )
}

fn twilio_spec(addr: SocketAddr, scheme: &str) -> String {
    format!("twilio:{SID}?from=%2B15017122661&base_url={scheme}://{addr}&timeout=700ms")
}

const TWILIO_ENV: (&str, &str) = ("SENDONCE_TWILIO_AUTH_TOKEN", TOKEN);

// ---------------------------------------------------------------------------------------------
// Twilio

/// A 401 whose message echoes the Authorization header the client sent (a proxy or gateway in
/// front of the API doing its "helpful" best): base64 of `SID:TOKEN`.
#[test]
fn twilio_401_echoing_the_basic_auth_header() {
    let addr = http_server(false, |req| {
        Answer::Reply(twilio_error(
            "401 Unauthorized",
            20003,
            &format!("Authenticate: rejected auth={}", req.authorization),
        ))
    });
    let c = campaign("sms");
    let error = c.check(&twilio_spec(addr, "http"), &[TWILIO_ENV], "failed");
    assert!(error.contains("401"), "{error}");
    assert_redacted(&error);
}

/// A 500 whose body is not JSON and echoes the token percent-encoded and JSON-escaped.
#[test]
fn twilio_500_echoing_the_token_url_encoded() {
    let addr = http_server(false, |_| {
        let pct = percent_encoding::utf8_percent_encode(TOKEN, percent_encoding::NON_ALPHANUMERIC);
        let lower = lower_hex_escapes(&pct.to_string());
        Answer::Reply(http(
            "500 Internal Server Error",
            &format!("upstream failed for Body=hi&AuthToken={pct} (retry: token={lower})"),
        ))
    });
    let c = campaign("sms");
    let error = c.check(&twilio_spec(addr, "http"), &[TWILIO_ENV], "in_doubt");
    assert!(error.contains("500"), "{error}");
    assert_redacted(&error);
}

/// A 500 that echoes the base64 of the token alone (URL-safe, no padding) and of `SID:TOKEN`
/// inside a longer blob at another alignment.
#[test]
fn twilio_500_echoing_the_token_in_base64_blobs() {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let addr = http_server(false, |req| {
        let alone = b64(&URL_SAFE_NO_PAD, TOKEN.as_bytes());
        let blob = b64(
            &STANDARD,
            format!("{{\"auth\":\"{SID}:{TOKEN}\"}}").as_bytes(),
        );
        Answer::Reply(twilio_error(
            "503 Service Unavailable",
            20503,
            &format!("trace {alone} ctx={blob} path={}", req.target),
        ))
    });
    let c = campaign("sms");
    let error = c.check(&twilio_spec(addr, "http"), &[TWILIO_ENV], "in_doubt");
    assert!(error.contains("503"), "{error}");
    assert_redacted(&error);
}

/// `s` altered as a server may echo it (issue 37, F7): upper- and lower-cased, hex-encoded in
/// both cases, and cut in half (each half on its own).
fn altered(s: &str) -> String {
    let (a, b) = s.split_at(s.len() / 2);
    format!(
        "up={} low={} hex={} HEX={} half1={a} half2={b}",
        s.to_uppercase(),
        s.to_lowercase(),
        hex(s.as_bytes()),
        hex(s.as_bytes()).to_uppercase()
    )
}

/// A 401 echoing the Authorization header and the token altered: upper/lower-cased, hex and
/// halved (the base64 of `SID:TOKEN` upper-cased no longer decodes, but still gives it away).
#[test]
fn twilio_401_echoing_the_credentials_altered() {
    let addr = http_server(false, |req| {
        Answer::Reply(twilio_error(
            "401 Unauthorized",
            20003,
            &format!(
                "Authenticate: {} / {}",
                altered(&req.authorization),
                altered(TOKEN)
            ),
        ))
    });
    let c = campaign("sms");
    let error = c.check(&twilio_spec(addr, "http"), &[TWILIO_ENV], "failed");
    assert!(error.contains("401"), "{error}");
    assert_redacted(&error);
}

/// Resend (bearer token) and Postmark (token header) answering 422 and 500 with the request's
/// headers and the token altered.
#[test]
fn resend_and_postmark_echoing_their_tokens_altered() {
    for (spec, env, status, row) in [
        (
            "resend:?from=news@example.org&base_url=http://ADDR&timeout=700ms",
            "SENDONCE_RESEND_API_KEY",
            "422 Unprocessable Entity",
            "failed",
        ),
        (
            "postmark:?from=news@example.org&base_url=http://ADDR&timeout=700ms",
            "SENDONCE_POSTMARK_TOKEN",
            "500 Internal Server Error",
            "in_doubt",
        ),
    ] {
        let addr = http_server(false, move |req| {
            let head = req.headers.replace("\r\n", " ");
            Answer::Reply(http(
                status,
                &serde_json::json!({
                    "message": format!("{} | {}", altered(TOKEN), altered(&head)),
                    "Message": altered(TOKEN),
                })
                .to_string(),
            ))
        });
        let c = campaign("email");
        let error = c.check(
            &spec.replace("ADDR", &addr.to_string()),
            &[(env, TOKEN)],
            row,
        );
        assert!(error.contains(&status[..3]), "{spec}: {error}");
        assert_redacted(&error);
    }
}

/// The literal token placed so that the old 200-character excerpt cut it in two: the cut
/// happened before the redaction looked for the whole token, so its first half was stored.
#[test]
fn twilio_500_with_the_token_split_by_the_old_200_char_cut() {
    let addr = http_server(false, |_| {
        // "twilio: HTTP 500, error 20500: " precedes the excerpt, which is cut at 200 chars.
        let message = format!("{}{TOKEN} and more", "x".repeat(190));
        Answer::Reply(twilio_error("500 Internal Server Error", 20500, &message))
    });
    let c = campaign("sms");
    let error = c.check(&twilio_spec(addr, "http"), &[TWILIO_ENV], "in_doubt");
    assert!(error.contains("500"), "{error}");
    assert!(
        error.ends_with('…'),
        "still cut to the excerpt length: {error}"
    );
}

/// A 429 (not sent, retried, then given up) echoing the header the client sent.
#[test]
fn twilio_429_retry_path_echoing_the_credentials() {
    let addr = http_server(false, |req| {
        Answer::Reply(twilio_error(
            "429 Too Many Requests",
            20429,
            &format!(
                "Too Many Requests for {}; your request was {}",
                req.authorization, req.headers
            ),
        ))
    });
    let c = campaign("sms");
    let error = c.check(&twilio_spec(addr, "http"), &[TWILIO_ENV], "failed");
    assert!(error.contains("gave up after 2 attempts"), "{error}");
    assert_redacted(&error);
}

/// Connection refused, a TLS failure and a timeout: no server text to echo anything, and still
/// nothing anywhere.
#[test]
fn twilio_refused_tls_failure_and_timeout() {
    let c = campaign("sms");
    let refused: SocketAddr = format!("127.0.0.1:{}", common::refused_port())
        .parse()
        .unwrap();
    let error = c.check(&twilio_spec(refused, "http"), &[TWILIO_ENV], "failed");
    assert!(error.contains("gave up"), "{error}");

    let c = campaign("sms");
    let tls = http_server(true, |_| Answer::Hang);
    let error = c.check(&twilio_spec(tls, "https"), &[TWILIO_ENV], "failed");
    assert!(error.contains("gave up"), "{error}");

    let c = campaign("sms");
    let hang = http_server(false, |_| Answer::Hang);
    let error = c.check(&twilio_spec(hang, "http"), &[TWILIO_ENV], "in_doubt");
    assert!(error.contains("timed out"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Resend, Postmark, webhook

/// Resend (bearer token) and Postmark (token header) answering 500 with the request's headers
/// echoed, the token base64-encoded and split by the old cut.
#[test]
fn resend_and_postmark_500_echoing_their_tokens() {
    for (spec, env) in [
        (
            "resend:?from=news@example.org&base_url=http://ADDR&timeout=700ms",
            "SENDONCE_RESEND_API_KEY",
        ),
        (
            "postmark:?from=news@example.org&base_url=http://ADDR&timeout=700ms",
            "SENDONCE_POSTMARK_TOKEN",
        ),
    ] {
        let addr = http_server(false, |req| {
            let enc = b64(&base64::engine::general_purpose::STANDARD, TOKEN.as_bytes());
            Answer::Reply(http(
                "500 Internal Server Error",
                &format!(
                    "{}{TOKEN} | {enc} | {}",
                    "y".repeat(192),
                    req.headers.replace("\r\n", " ")
                ),
            ))
        });
        let c = campaign("email");
        let error = c.check(
            &spec.replace("ADDR", &addr.to_string()),
            &[(env, TOKEN)],
            "in_doubt",
        );
        assert!(error.contains("500"), "{spec}: {error}");
    }
}

/// A webhook URL carrying credentials (user info, a token in the query): a 500 that echoes the
/// Authorization header built from them and the request target.
#[test]
fn webhook_500_echoing_the_url_credentials() {
    let addr = http_server(false, |req| {
        Answer::Reply(http(
            "500 Internal Server Error",
            &format!(
                "no route for {} (authorization: {})",
                req.target, req.authorization
            ),
        ))
    });
    let pct = percent_encoding::utf8_percent_encode(TOKEN, percent_encoding::NON_ALPHANUMERIC);
    let spec = format!("webhook:http://hook:{pct}@{addr}/hook?token={pct}#timeout=700ms");
    let c = campaign("email");
    let error = c.check(&spec, &[], "in_doubt");
    assert!(error.contains("500"), "{error}");
    assert_redacted(&error);
}

// ---------------------------------------------------------------------------------------------
// SMTP: a raw responder that echoes the credentials (aiosmtpd does not), and aiosmtpd itself

#[derive(Clone, Copy, PartialEq, Debug)]
enum Smtp {
    /// AUTH PLAIN answered `535` quoting the AUTH line and the decoded password, the password
    /// placed across the old 300-character cut.
    Plain535,
    /// AUTH LOGIN answered `535` quoting the base64 and URL-encoded password.
    Login535,
    /// AUTH accepted; RCPT answered `550 5.1.1` quoting the AUTH line (a hard bounce, so the
    /// text also becomes a suppression reason).
    Rcpt550,
    /// AUTH accepted, then silence at MAIL FROM.
    HangAtMail,
    /// Plain text where the client expects a TLS handshake.
    PlainToTls,
    /// AUTH PLAIN answered `535` quoting the AUTH line and the password altered (upper/lower
    /// case, hex, halves).
    Altered535,
}

fn smtp_server(mode: Smtp) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(s) = conn else { return };
            thread::spawn(move || {
                let _ = smtp_session(s, mode);
            });
        }
    });
    port
}

fn smtp_session(s: TcpStream, mode: Smtp) -> std::io::Result<()> {
    use base64::engine::general_purpose::STANDARD;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    if mode == Smtp::PlainToTls {
        let mut buf = [0u8; 4096];
        let _ = r.read(&mut buf)?;
        w.write_all(format!("220 fake ESMTP {PASSWORD}\r\n").as_bytes())?;
        return Ok(());
    }
    w.write_all(b"220 fake.example ESMTP\r\n")?;
    let mechanism = if mode == Smtp::Login535 {
        "LOGIN"
    } else {
        "PLAIN"
    };
    let mut auth_line = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end().to_string();
        let upper = line.to_ascii_uppercase();
        let reply = if upper.starts_with("EHLO") {
            format!("250-fake.example\r\n250 AUTH {mechanism}\r\n")
        } else if upper.starts_with("AUTH PLAIN") {
            auth_line = line.clone();
            if mode == Smtp::Altered535 {
                format!(
                    "535 5.7.8 Authentication credentials invalid: {} pass {}\r\n",
                    altered(&line),
                    altered(PASSWORD)
                )
            } else if mode == Smtp::Plain535 {
                let blob = line.split(' ').nth(2).unwrap_or("");
                let raw = STANDARD.decode(blob).unwrap_or_default();
                let parts: Vec<String> = raw
                    .split(|&b| b == 0)
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect();
                let pass = parts.get(2).cloned().unwrap_or_default();
                format!(
                    "535 5.7.8 Authentication credentials invalid: {line} {} user={} pass={pass}\r\n",
                    "z".repeat(230),
                    parts.get(1).cloned().unwrap_or_default()
                )
            } else {
                "235 2.7.0 Authentication successful\r\n".into()
            }
        } else if upper.starts_with("AUTH LOGIN") {
            w.write_all(b"334 VXNlcm5hbWU6\r\n")?;
            let mut user = String::new();
            r.read_line(&mut user)?;
            w.write_all(b"334 UGFzc3dvcmQ6\r\n")?;
            let mut pass = String::new();
            r.read_line(&mut pass)?;
            let pass = pass.trim();
            let plain =
                String::from_utf8_lossy(&STANDARD.decode(pass).unwrap_or_default()).into_owned();
            let pct =
                percent_encoding::utf8_percent_encode(&plain, percent_encoding::NON_ALPHANUMERIC);
            format!(
                "535-5.7.8 bad login {} / {pass}\r\n535 5.7.8 password={pct}\r\n",
                user.trim()
            )
        } else if upper.starts_with("MAIL") {
            if mode == Smtp::HangAtMail {
                thread::sleep(Duration::from_secs(10));
                return Ok(());
            }
            "250 2.1.0 OK\r\n".into()
        } else if upper.starts_with("RCPT") {
            format!("550 5.1.1 no such user (session {auth_line})\r\n")
        } else if upper == "RSET" || upper == "NOOP" {
            "250 2.0.0 OK\r\n".into()
        } else if upper == "QUIT" {
            w.write_all(b"221 2.0.0 bye\r\n")?;
            return Ok(());
        } else {
            "502 5.5.2 unknown command\r\n".into()
        };
        w.write_all(reply.as_bytes())?;
    }
}

fn smtp_spec(port: u16, timeout: &str) -> String {
    format!("smtp://{SMTP_USER}@127.0.0.1:{port}?tls=none&timeout={timeout}")
}

const SMTP_ENV: (&str, &str) = ("SENDONCE_SMTP_PASSWORD", PASSWORD);

#[test]
fn smtp_535_echoing_auth_plain() {
    let port = smtp_server(Smtp::Plain535);
    let c = campaign("email");
    let error = c.check(&smtp_spec(port, "2s"), &[SMTP_ENV], "failed");
    assert!(error.contains("535"), "{error}");
    assert_redacted(&error);
}

#[test]
fn smtp_535_echoing_auth_login() {
    let port = smtp_server(Smtp::Login535);
    let c = campaign("email");
    let error = c.check(&smtp_spec(port, "2s"), &[SMTP_ENV], "failed");
    assert!(error.contains("535"), "{error}");
    assert_redacted(&error);
}

#[test]
fn smtp_535_echoing_the_password_altered() {
    let port = smtp_server(Smtp::Altered535);
    let c = campaign("email");
    let error = c.check(&smtp_spec(port, "2s"), &[SMTP_ENV], "failed");
    assert!(error.contains("535"), "{error}");
    assert_redacted(&error);
}

#[test]
fn smtp_550_at_rcpt_echoing_the_auth_line_into_the_suppression_reason() {
    let port = smtp_server(Smtp::Rcpt550);
    let c = campaign("email");
    let error = c.check(&smtp_spec(port, "2s"), &[SMTP_ENV], "failed");
    assert!(error.contains("550"), "{error}");
    assert_redacted(&error);
    let sup = c.env.ok(&["suppress", "list", "--account", &c.account]);
    assert!(sup.contains("ana@example.com"), "{sup}");
}

/// Refused, silence at MAIL FROM (timeout), and plain text where TLS was expected.
#[test]
fn smtp_refused_timeout_and_tls_failure() {
    let c = campaign("email");
    let error = c.check(
        &smtp_spec(common::refused_port(), "2s"),
        &[SMTP_ENV],
        "failed",
    );
    assert!(error.contains("gave up"), "{error}");

    let c = campaign("email");
    let port = smtp_server(Smtp::HangAtMail);
    let error = c.check(&smtp_spec(port, "1s"), &[SMTP_ENV], "failed");
    assert!(error.contains("timed out"), "{error}");

    let c = campaign("email");
    let port = smtp_server(Smtp::PlainToTls);
    let spec = format!("smtp://{SMTP_USER}@127.0.0.1:{port}?tls=tls&timeout=2s");
    let error = c.check(&spec, &[SMTP_ENV], "failed");
    assert!(error.contains("gave up"), "{error}");
}

/// A real SMTP server we did not write (aiosmtpd, as in tests/core/smtp.rs): a wrong password
/// (its own 535), and STARTTLS with a certificate the client does not trust.
#[cfg(feature = "tier1")]
#[test]
fn smtp_real_server_535_and_untrusted_starttls() {
    let dir = tempfile::tempdir().unwrap();
    let server = AioSmtpd::start(dir.path(), &[], "another-password");
    let c = campaign("email");
    let error = c.check(&smtp_spec(server.port, "2s"), &[SMTP_ENV], "failed");
    assert!(error.contains("535"), "{error}");
    drop(server);

    let (cert, key) = self_signed(dir.path());
    let server = AioSmtpd::start(
        dir.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        PASSWORD,
    );
    let c = campaign("email");
    let spec = format!(
        "smtp://{SMTP_USER}@127.0.0.1:{}?tls=starttls&timeout=2s",
        server.port
    );
    let error = c.check(&spec, &[SMTP_ENV], "failed");
    assert!(error.contains("gave up"), "{error}");
}

/// aiosmtpd requiring AUTH as `mailer` with `password`. Killed on drop.
struct AioSmtpd {
    child: Child,
    port: u16,
}

impl AioSmtpd {
    fn start(dir: &Path, args: &[&str], password: &str) -> AioSmtpd {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/smtp_server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(dir.join("mail"))
            .args(["--auth-user", SMTP_USER])
            .args(args)
            .env("SMTP_TEST_PASSWORD", password)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run python3 ({e}): this test needs Python 3 and aiosmtpd ({INSTALL})"
                )
            });
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line);
        let Some(port) = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse::<u16>().ok())
        else {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "the aiosmtpd test server did not start (is aiosmtpd installed? run `{INSTALL}`): \
                 stdout {line:?}, stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        AioSmtpd { child, port }
    }
}

impl Drop for AioSmtpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate for 127.0.0.1 (openssl CLI): (cert.pem, key.pem).
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run openssl ({e}): install it (apt-get install openssl)")
        });
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

// ---------------------------------------------------------------------------------------------
// notify prints the stored reason

#[test]
fn notify_prints_no_credential() {
    let d = tempfile::tempdir().unwrap();
    let twilio = http_server(false, |req| {
        Answer::Reply(twilio_error(
            "401 Unauthorized",
            20003,
            &format!("Authenticate: auth={}", req.authorization),
        ))
    });
    // Answers that fail at once (notify retries a "not sent" for a while).
    let smtp = smtp_server(Smtp::Rcpt550);
    for (i, (to, from, spec, env)) in [
        (
            "+14155550100",
            None,
            twilio_spec(twilio, "http"),
            TWILIO_ENV,
        ),
        (
            "ana@example.com",
            Some("ops@example.org"),
            smtp_spec(smtp, "2s"),
            SMTP_ENV,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let state = d.path().join(format!("state{i}.db"));
        for json in [false, true] {
            let mut c = Command::new(common::BIN);
            c.env_remove("SENDONCE_PROVIDER").env(env.0, env.1);
            if json {
                c.arg("--json");
            }
            c.args(["notify", "--to", to, "--message", "deploy ok", "--key"])
                .arg(format!("canary-{i}"))
                .args(from.map(|f| ["--from", f]).into_iter().flatten())
                .args(["--provider", &spec, "--state"])
                .arg(&state)
                .stdin(Stdio::null());
            let r = Run::from(c.output().expect("run notify"));
            assert!(
                r.stdout.to_ascii_lowercase().contains("failed"),
                "{spec}: {}\n{}",
                r.stdout,
                r.stderr
            );
            assert_clean("notify stdout", r.stdout.as_bytes());
            assert_clean("notify stderr", r.stderr.as_bytes());
        }
    }
    assert_files_clean(d.path());
}

// ---------------------------------------------------------------------------------------------
// The database password: PostgreSQL quoting it in its errors, and cleartext authentication

/// The PostgreSQL role's password in the tests below.
const PG_PASSWORD: &str = "CANARY-pg-Pw9xQ2zz";

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// A cluster listening on 127.0.0.1 (a free port) with roles `app_scram` (SCRAM) and
/// `app_clear` (`password`: asked for in cleartext), both with [`PG_PASSWORD`] and a database
/// of their own.
fn password_cluster() -> (pg::PgCluster, u16) {
    let port = free_port();
    let c = pg::PgCluster::start_on(None, "127.0.0.1", port, "");
    c.psql("postgres", "ALTER SYSTEM SET log_connections = on");
    c.set_hba(
        "local all all trust\n\
         host all app_scram 127.0.0.1/32 scram-sha-256\n\
         host all app_clear 127.0.0.1/32 password\n",
    );
    for role in ["app_scram", "app_clear"] {
        c.psql(
            "postgres",
            &format!("CREATE ROLE {role} LOGIN PASSWORD '{PG_PASSWORD}'"),
        );
        c.psql("postgres", &format!("CREATE DATABASE {role} OWNER {role}"));
    }
    (c, port)
}

/// `sendonce [--json] -vv ARGS` with the database at `url` (through SENDONCE_DB, as README
/// advises, so the password is not in `ps`).
fn with_db(url: &str, json: bool, args: &[&str]) -> Run {
    let mut cmd = Command::new(common::BIN);
    cmd.env_remove("SENDONCE_PROVIDER")
        .env("SENDONCE_DB", url)
        .arg("-vv");
    if json {
        cmd.arg("--json");
    }
    Run::from(cmd.args(args).output().expect("run sendonce"))
}

/// Panics when `hay` carries the database password in any form [`forms`] names.
fn assert_no_pg_password(what: &str, hay: &str) {
    let lower = hay.to_ascii_lowercase();
    let views = [lower.clone(), lower_hex_decoded(&lower)];
    for (form, needle) in forms(PG_PASSWORD) {
        for view in &views {
            assert!(
                !view.contains(&needle),
                "{what} leaks the database password as {form} {needle:?}: {hay}"
            );
        }
    }
}

fn lower_hex_decoded(s: &str) -> String {
    String::from_utf8_lossy(&hex_decoded(s.as_bytes())).to_ascii_lowercase()
}

/// A server error that quotes the password (a database named after it, as is, upper-cased,
/// hex-encoded, or half of it): the password reaches neither stderr, nor `--json` output, nor
/// the `-vv` log, in any form.
#[cfg(feature = "tier1")]
#[test]
fn postgres_errors_quoting_the_password_are_redacted() {
    let (_cluster, port) = password_cluster();
    let half = &PG_PASSWORD[..PG_PASSWORD.len() / 2 + 1];
    for db in [
        PG_PASSWORD.to_string(),
        PG_PASSWORD.to_uppercase(),
        hex(PG_PASSWORD.as_bytes()),
        format!("{half}_db"),
    ] {
        let url =
            format!("postgres://app_scram:{PG_PASSWORD}@127.0.0.1:{port}/{db}?sslmode=disable");
        for json in [false, true] {
            let r = with_db(&url, json, &["account", "list"]);
            assert_ne!(r.code, 0, "{db}: {}\n{}", r.stdout, r.stderr);
            let all = format!("{}\n{}", r.stdout, r.stderr);
            assert!(all.contains("does not exist"), "{db}: {all}");
            assert!(all.contains("[redacted]"), "{db}: {all}");
            assert_no_pg_password(&format!("database {db:?}, json {json}"), &all);
        }
    }
}

/// A server that asks for the password in cleartext over TCP without TLS is refused, with a
/// message saying why and how to allow it; `cleartext_password=allow` allows it. SCRAM over
/// the same plain connection goes on.
#[cfg(feature = "tier1")]
#[test]
fn postgres_cleartext_password_without_tls_is_refused_unless_allowed() {
    let (cluster, port) = password_cluster();
    let base = format!("postgres://app_clear:{PG_PASSWORD}@127.0.0.1:{port}/app_clear");
    for url in [format!("{base}?sslmode=disable"), base.clone()] {
        let r = with_db(&url, true, &["init"]);
        assert_ne!(r.code, 0, "{url}: {}\n{}", r.stdout, r.stderr);
        let all = format!("{}\n{}", r.stdout, r.stderr);
        assert!(
            all.contains("cleartext") && all.contains("cleartext_password=allow"),
            "{url}: {all}"
        );
        assert_no_pg_password(&url, &all);
    }
    let log = cluster.log();
    assert!(
        log.contains("connection received"),
        "log_connections: {log}"
    );
    assert!(
        !log.contains("connection authorized: user=app_clear")
            && !log.contains("password authentication failed"),
        "no password was sent, no session began: {log}"
    );
    let allowed = with_db(
        &format!("{base}?sslmode=disable&cleartext_password=allow"),
        true,
        &["init"],
    );
    assert_eq!(allowed.code, 0, "{}\n{}", allowed.stdout, allowed.stderr);
    assert_no_pg_password(
        "init allowed",
        &format!("{}{}", allowed.stdout, allowed.stderr),
    );
    let scram = format!("postgres://app_scram:{PG_PASSWORD}@127.0.0.1:{port}/app_scram");
    let r = with_db(&scram, true, &["init"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

/// A server of our own that asks for the password in cleartext records every byte the client
/// sends after its startup message: the password must never be among them.
#[test]
fn postgres_cleartext_request_gets_no_password() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { return };
            let tx = tx.clone();
            thread::spawn(move || {
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).is_err() {
                    return;
                }
                let mut startup = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
                let _ = s.read_exact(&mut startup);
                // AuthenticationCleartextPassword.
                let _ = s.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut after = Vec::new();
                let _ = s.read_to_end(&mut after);
                let _ = tx.send(after);
            });
        }
    });
    let url = format!("postgres://app:{PG_PASSWORD}@127.0.0.1:{port}/db?sslmode=disable");
    let r = with_db(&url, true, &["account", "list"]);
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("cleartext"), "{}\n{}", r.stdout, r.stderr);
    let sent = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a connection");
    assert!(
        !sent
            .windows(PG_PASSWORD.len())
            .any(|w| w == PG_PASSWORD.as_bytes())
            && !sent.contains(&b'p'),
        "the client answered with {:?}",
        printable(&sent)
    );
}
