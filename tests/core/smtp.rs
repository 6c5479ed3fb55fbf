//! The SMTP provider against a real SMTP server we did not write (aiosmtpd, started here as a
//! subprocess), against tiny misbehaving fakes for the failure phases, and the message builder
//! against 10,000+ hostile inputs checked with an independent MIME parser (mail-parser).
// Some tests here need tools outside Rust (tier 1); without them their helpers go unused.
#![cfg_attr(not(feature = "tier1"), allow(unused_imports, dead_code))]

use crate::common;
use sendonce::domain::address::Channel;
use sendonce::domain::links::{Keys, Links, Purpose, Secret, Target};
use sendonce::provider::{
    build_email, CallResult, EmailSettings, Message, Provider, Smtp, UnsubscribeSettings,
    EXPECTED_HEADERS,
};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const INSTALL: &str = "tests/run.sh (it installs aiosmtpd into a venv under target/)";
const SECRET: &str = "test-unsubscribe-secret-0123456789";

// ---------------------------------------------------------------------------------------------
// aiosmtpd as a subprocess

/// A running aiosmtpd that saves every message under `dir`. Killed on drop. (Also used by
/// `audience::`.)
pub(crate) struct RealServer {
    child: Child,
    pub(crate) port: u16,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl RealServer {
    pub(crate) fn start() -> RealServer {
        Self::start_with(&[], &[])
    }

    pub(crate) fn start_with(args: &[&str], env: &[(&str, &str)]) -> RealServer {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("mail");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/smtp_server.py");
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .arg(&dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}): the SMTP tests need Python 3 and aiosmtpd ({INSTALL})"
            )
        });
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let _ = out.read_line(&mut line);
        let Some(port) = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse::<u16>().ok())
        else {
            let _ = child.kill();
            let output = child.wait_with_output().expect("wait");
            panic!(
                "the aiosmtpd test server did not start (is aiosmtpd installed? run `{INSTALL}`): \
                 stdout {line:?}, stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        RealServer {
            child,
            port,
            dir,
            _tmp: tmp,
        }
    }

    /// (raw message, envelope json) per message, in arrival order.
    pub(crate) fn messages(&self) -> Vec<(Vec<u8>, serde_json::Value)> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".eml"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
            .into_iter()
            .map(|n| {
                let raw = std::fs::read(self.dir.join(&n)).expect("read eml");
                let meta =
                    std::fs::read(self.dir.join(n.replace(".eml", ".json"))).expect("read json");
                (raw, serde_json::from_slice(&meta).expect("json"))
            })
            .collect()
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// The signed link the worker would put in `Message::unsubscribe` for recipient `to`.
fn link_for(to: &str) -> String {
    let keys = Keys::new(Secret::new(SECRET.as_bytes().to_vec()).unwrap());
    Links::new("https://example.org", keys)
        .unwrap()
        .unsubscribe_url(&Target {
            account_id: 1,
            channel: Channel::Email,
            address: to.to_string(),
            lists: vec![5],
            campaign_id: 1,
        })
}

fn message(n: u32, to: &str) -> Message {
    let job_id = format!("campaign:1:sub:{n}");
    Message {
        status_callback: None,
        reply_to: None,
        idempotency_key: sendonce::domain::model::idempotency_key(&job_id),
        job_id,
        channel: Channel::Email,
        from: Some("Zoë Ñandú from Açaí <news@example.org>".into()),
        to: to.into(),
        subject: Some("Olá Zoë — your ünïcödé newsletter 🙂".into()),
        body: "Hello Zoë,\nthis is the text part.\n.\nA line with a dot above.\n".into(),
        html: Some("<p>Hello <b>Zoë</b></p>\n".into()),
        unsubscribe: Some(link_for(to)),
        attachments: Vec::new(),
    }
}

fn header_names(raw: &[u8]) -> Vec<String> {
    let parsed = mail_parser::MessageParser::default()
        .parse(raw)
        .expect("mail-parser parses the message");
    parsed
        .headers()
        .iter()
        .map(|h| h.name().to_ascii_lowercase())
        .collect()
}

fn header_line<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.split("\r\n\r\n")
        .next()?
        .split("\r\n")
        .find(|l| l.starts_with(&format!("{name}: ")))
}

#[cfg(feature = "tier1")]
#[tokio::test]
async fn campaign_message_arrives_with_the_exact_headers() {
    let server = RealServer::start();
    let spec = format!(
        "smtp://127.0.0.1:{}?tls=none&timeout=10s&message_id_domain=mail.example.org\
         &unsubscribe_mailto=unsub@example.org",
        server.port
    );
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).expect("spec");
    let msg = message(7, "ana@example.com");
    let res = smtp.send(&msg).await;
    let expected_id = format!("<{}@mail.example.org>", msg.idempotency_key);
    assert_eq!(
        res,
        CallResult::Accepted {
            provider_id: expected_id.clone(),
            replay: false
        }
    );
    let got = server.messages();
    assert_eq!(got.len(), 1);
    let (raw, meta) = &got[0];
    assert_eq!(meta["mail_from"], "news@example.org");
    assert_eq!(meta["rcpt_tos"], serde_json::json!(["ana@example.com"]));
    assert!(raw.is_ascii(), "7-bit message");
    let text = String::from_utf8(raw.clone()).unwrap();

    // Header set and exact values, on the wire.
    let mut names = header_names(raw);
    names.sort();
    let mut want = vec![
        "content-type",
        "date",
        "from",
        "list-unsubscribe",
        "list-unsubscribe-post",
        "message-id",
        "mime-version",
        "subject",
        "to",
        "x-sendonce-job",
    ];
    want.sort();
    assert_eq!(names, want, "{text}");
    assert_eq!(
        header_line(&text, "Message-ID"),
        Some(format!("Message-ID: {expected_id}").as_str())
    );
    assert_eq!(
        header_line(&text, "X-Sendonce-Job"),
        Some("X-Sendonce-Job: campaign:1:sub:7")
    );
    assert_eq!(
        header_line(&text, "List-Unsubscribe-Post"),
        Some("List-Unsubscribe-Post: List-Unsubscribe=One-Click")
    );
    assert_eq!(header_line(&text, "To"), Some("To: ana@example.com"));
    // Non-ASCII subject and name are RFC 2047 encoded words, not raw UTF-8.
    assert!(
        header_line(&text, "Subject").is_some_and(|l| l.contains("=?utf-8?")),
        "{text}"
    );
    assert!(
        header_line(&text, "From").is_some_and(|l| l.contains("=?utf-8?")),
        "{text}"
    );

    // The same message through an independent parser: decoded values.
    let parsed = mail_parser::MessageParser::default().parse(raw).unwrap();
    assert_eq!(
        parsed.subject(),
        Some("Olá Zoë — your ünïcödé newsletter 🙂")
    );
    let from = parsed.from().and_then(|a| a.first()).unwrap();
    assert_eq!(from.name(), Some("Zoë Ñandú from Açaí"));
    assert_eq!(from.address(), Some("news@example.org"));
    let to = parsed.to().and_then(|a| a.first()).unwrap();
    assert_eq!(to.address(), Some("ana@example.com"));
    assert_eq!(
        parsed.message_id(),
        Some(expected_id.trim_matches(['<', '>']))
    );
    let link = link_for("ana@example.com");
    let token = link.rsplit('/').next().unwrap();
    let list = parsed
        .header_raw("List-Unsubscribe")
        .unwrap()
        .replace("\r\n", "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        list,
        format!(
            "<mailto:unsub@example.org?subject=unsubscribe%20{token}>, \
             <https://example.org/u/{token}>"
        )
    );
    // The token in the link opens and names this recipient; the address is not readable in it.
    let keys = Keys::new(Secret::new(SECRET.as_bytes().to_vec()).unwrap());
    let u = keys.open(Purpose::Unsubscribe, token, 0).unwrap();
    assert_eq!(u.address, "ana@example.com");
    assert!(!list.contains("ana"), "{list}");
    // multipart/alternative with the text and the HTML part.
    assert!(
        text.contains("Content-Type: multipart/alternative;"),
        "{text}"
    );
    assert_eq!(parsed.parts.iter().filter(|p| p.is_text_html()).count(), 1);
    assert_eq!(parsed.parts.iter().filter(|p| p.is_multipart()).count(), 1);
    assert_eq!(
        parsed.body_text(0).unwrap().replace("\r\n", "\n"),
        "Hello Zoë,\nthis is the text part.\n.\nA line with a dot above.\n"
    );
    assert_eq!(
        parsed.body_html(0).unwrap().replace("\r\n", "\n"),
        "<p>Hello <b>Zoë</b></p>\n"
    );
}

#[cfg(feature = "tier1")]
#[tokio::test]
async fn a_retry_carries_the_same_message_id_and_content() {
    let server = RealServer::start();
    let spec = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    let msg = message(3, "bea@example.com");
    for _ in 0..2 {
        assert!(matches!(smtp.send(&msg).await, CallResult::Accepted { .. }));
        // A Date a second apart, to show it is the only difference.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let got = server.messages();
    assert_eq!(got.len(), 2);
    let strip_date = |raw: &[u8]| -> String {
        String::from_utf8_lossy(raw)
            .split("\r\n")
            .filter(|l| !l.starts_with("Date: "))
            .collect::<Vec<_>>()
            .join("\r\n")
    };
    assert_eq!(strip_date(&got[0].0), strip_date(&got[1].0));
    let id = |raw: &[u8]| {
        mail_parser::MessageParser::default()
            .parse(raw)
            .unwrap()
            .message_id()
            .map(str::to_string)
    };
    assert_eq!(id(&got[0].0), id(&got[1].0));
    // The default Message-ID domain is the sender's.
    assert_eq!(
        id(&got[0].0),
        Some(format!("{}@example.org", msg.idempotency_key))
    );
}

#[cfg(feature = "tier1")]
#[tokio::test]
async fn real_server_rejections_are_classified() {
    let server = RealServer::start();
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=1", server.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    match smtp.send(&message(1, "bounce1@example.com")).await {
        CallResult::Permanent {
            error,
            suppress: Some(reason),
        } => {
            assert!(error.contains("550"), "{error}");
            assert!(reason.starts_with("hard bounce: 550 5.1.1"), "{reason}");
        }
        other => panic!("550 at RCPT: {other:?}"),
    }
    match smtp.send(&message(2, "busy@example.com")).await {
        CallResult::NotSent { error, .. } => assert!(error.contains("451"), "{error}"),
        other => panic!("451 at RCPT: {other:?}"),
    }
    // The connection was reset and reused: the next message goes through.
    assert!(matches!(
        smtp.send(&message(3, "cleo@example.com")).await,
        CallResult::Accepted { .. }
    ));
    let got = server.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].1["rcpt_tos"],
        serde_json::json!(["cleo@example.com"])
    );
}

#[cfg(feature = "tier1")]
#[tokio::test]
async fn auth_with_the_password_from_the_environment() {
    let server = RealServer::start_with(
        &["--auth-user", "mailer"],
        &[("SMTP_TEST_PASSWORD", "pw-from-env-1")],
    );
    let spec = format!("smtp://mailer@127.0.0.1:{}?tls=none", server.port);
    let env = |k: &str| (k == "SENDONCE_SMTP_PASSWORD").then(|| "pw-from-env-1".to_string());
    let smtp = Smtp::from_spec_with_env(&spec, &env).unwrap();
    assert!(matches!(
        smtp.send(&message(1, "ana@example.com")).await,
        CallResult::Accepted { .. }
    ));
    assert_eq!(server.messages()[0].1["auth"], true);
    // A wrong password: refused at AUTH, before any transaction.
    let env = |k: &str| (k == "SENDONCE_SMTP_PASSWORD").then(|| "wrong-password".to_string());
    let smtp = Smtp::from_spec_with_env(&spec, &env).unwrap();
    match smtp.send(&message(2, "ana@example.com")).await {
        CallResult::NotSent { error, .. } => {
            assert!(error.contains("before any transaction"), "{error}");
            assert!(!error.contains("wrong-password"), "{error}");
        }
        other => panic!("bad password: {other:?}"),
    }
    assert_eq!(server.messages().len(), 1);
    // No password anywhere: a clear error naming the variable.
    let e = Smtp::from_spec_with_env(&spec, &no_env).err().unwrap();
    assert!(
        e.message.contains("SENDONCE_SMTP_PASSWORD"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn missing_sender_and_the_old_unsubscribe_option_are_clear_errors() {
    let e = Smtp::from_spec_with_env(
        "smtp://127.0.0.1:25?tls=none&unsubscribe_url=https://example.org/u",
        &no_env,
    )
    .err()
    .unwrap();
    assert!(
        e.message.contains("public_url") && e.message.contains("SENDONCE_UNSUBSCRIBE_SECRET"),
        "{}",
        e.message
    );
    let smtp = Smtp::from_spec_with_env("smtp://127.0.0.1:9?tls=none", &no_env).unwrap();
    let mut m = message(1, "ana@example.com");
    m.from = None;
    match smtp.send(&m).await {
        CallResult::Permanent { error, .. } => assert!(error.contains("sender"), "{error}"),
        other => panic!("{other:?}"),
    }
}

/// A throwaway CA and a certificate for 127.0.0.1 signed by it, made with the openssl CLI.
/// Returns (ca.pem, leaf.pem, leaf.key).
fn test_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run openssl ({e}): install it (apt-get install openssl)")
            });
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=sendonce test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    run(&ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&csr);
    run(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("leaf.pem"),
        dir.join("leaf.key"),
    )
}

#[cfg(feature = "tier1")]
#[tokio::test]
async fn starttls_with_rustls_against_aiosmtpd() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, leaf, key) = test_certificates(certs.path());
    let server = RealServer::start_with(
        &[
            "--tls-cert",
            leaf.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--auth-user",
            "mailer",
        ],
        &[("SMTP_TEST_PASSWORD", "pw-over-tls")],
    );
    let pw = |k: &str| (k == "SENDONCE_SMTP_PASSWORD").then(|| "pw-over-tls".to_string());
    let spec = format!(
        "smtp://mailer@127.0.0.1:{}?tls=starttls&ca_file={}",
        server.port,
        ca.display()
    );
    let smtp = Smtp::from_spec_with_env(&spec, &pw).unwrap();
    let r = smtp.send(&message(1, "ana@example.com")).await;
    assert!(matches!(r, CallResult::Accepted { .. }), "{r:?}");
    let got = server.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1["tls"], true);
    assert_eq!(got[0].1["auth"], true);
    // Without our CA the certificate is not trusted: refused before any transaction.
    let spec = format!("smtp://mailer@127.0.0.1:{}?tls=starttls", server.port);
    let smtp = Smtp::from_spec_with_env(&spec, &pw).unwrap();
    let r = smtp.send(&message(2, "ana@example.com")).await;
    assert!(
        matches!(&r, CallResult::NotSent { error, .. } if error.contains("before any transaction")),
        "{r:?}"
    );
    assert_eq!(server.messages().len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Misbehaving fakes (aiosmtpd does not misbehave on demand)

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    Greeting554,
    Rcpt550,
    Rcpt451,
    DropAfterRcpt,
    DropAfterDataCommand,
    DropAfterDot,
    HangAfterDot,
    Reply451AfterDot,
    Reply554AfterDot,
    /// Each connection serves one message, then closes silently (a stale pooled connection).
    CloseAfterOneMessage,
    /// Each connection serves one message, then answers the next command with 421 and closes.
    Idle421AfterOneMessage,
}

struct Fake {
    port: u16,
    connections: Arc<AtomicUsize>,
    /// Message contents received completely (the final dot was read).
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

async fn fake(fault: Fault) -> Fake {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(Mutex::new(Vec::new()));
    let (c, r) = (connections.clone(), received.clone());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let r = r.clone();
            tokio::spawn(async move {
                let _ = serve(sock, fault, r).await;
            });
        }
    });
    Fake {
        port,
        connections,
        received,
    }
}

async fn serve(
    sock: tokio::net::TcpStream,
    fault: Fault,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
) -> std::io::Result<()> {
    let (rd, mut wr) = sock.into_split();
    let mut rd = tokio::io::BufReader::new(rd);
    if fault == Fault::Greeting554 {
        wr.write_all(b"554 5.3.2 no service for you\r\n").await?;
        return Ok(());
    }
    wr.write_all(b"220 fake.example ESMTP\r\n").await?;
    let mut line = String::new();
    let mut served = 0;
    loop {
        line.clear();
        if rd.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let cmd = line.trim_end().to_ascii_uppercase();
        if fault == Fault::Idle421AfterOneMessage && served > 0 {
            wr.write_all(b"421 4.4.2 fake.example closing idle connection\r\n")
                .await?;
            return Ok(());
        }
        let reply: &[u8] = if cmd.starts_with("EHLO") {
            b"250-fake.example\r\n250 8BITMIME\r\n"
        } else if cmd.starts_with("MAIL") {
            b"250 2.1.0 OK\r\n"
        } else if cmd.starts_with("RCPT") {
            match fault {
                Fault::Rcpt550 => b"550 5.1.1 no such user here\r\n",
                Fault::Rcpt451 => b"451 4.7.1 greylisted, come back later\r\n",
                Fault::DropAfterRcpt => return Ok(()),
                _ => b"250 2.1.5 OK\r\n",
            }
        } else if cmd == "DATA" {
            if fault == Fault::DropAfterDataCommand {
                return Ok(());
            }
            wr.write_all(b"354 go ahead\r\n").await?;
            let mut content = Vec::new();
            loop {
                let mut l = Vec::new();
                if rd.read_until(b'\n', &mut l).await? == 0 {
                    return Ok(());
                }
                if l == b".\r\n" {
                    break;
                }
                content.extend_from_slice(&l);
            }
            received.lock().unwrap().push(content);
            served += 1;
            match fault {
                Fault::DropAfterDot => return Ok(()),
                Fault::HangAfterDot => {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return Ok(());
                }
                Fault::Reply451AfterDot => b"451 4.3.0 local problem, try later\r\n",
                Fault::Reply554AfterDot => b"554 5.7.1 message refused as spam\r\n",
                Fault::CloseAfterOneMessage => {
                    wr.write_all(b"250 2.0.0 queued\r\n").await?;
                    // Closes silently, like a server whose idle timer fired.
                    return Ok(());
                }
                _ => b"250 2.0.0 queued as FAKE1\r\n",
            }
        } else if cmd == "RSET" || cmd == "NOOP" {
            b"250 2.0.0 OK\r\n"
        } else if cmd == "QUIT" {
            wr.write_all(b"221 2.0.0 bye\r\n").await?;
            return Ok(());
        } else {
            b"502 5.5.2 unknown command\r\n"
        };
        wr.write_all(reply).await?;
    }
}

async fn send_to_fake(fault: Fault, timeout: &str) -> (CallResult, Fake) {
    let f = fake(fault).await;
    let spec = format!("smtp://127.0.0.1:{}?tls=none&timeout={timeout}", f.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    let res = smtp.send(&message(1, "ana@example.com")).await;
    (res, f)
}

#[tokio::test]
async fn fake_rcpt_550_is_permanent_and_suppressed() {
    let (res, _) = send_to_fake(Fault::Rcpt550, "5s").await;
    assert!(
        matches!(&res, CallResult::Permanent { suppress: Some(s), .. } if s.contains("550")),
        "{res:?}"
    );
}

#[tokio::test]
async fn fake_rcpt_451_is_not_sent() {
    let (res, _) = send_to_fake(Fault::Rcpt451, "5s").await;
    assert!(matches!(res, CallResult::NotSent { .. }), "{res:?}");
}

#[tokio::test]
async fn connection_refused_is_not_sent() {
    let port = common::refused_port();
    let spec = format!("smtp://127.0.0.1:{port}?tls=none&timeout=5s");
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    let res = smtp.send(&message(1, "ana@example.com")).await;
    assert!(
        matches!(&res, CallResult::NotSent { error, .. } if error.contains("before any transaction")),
        "{res:?}"
    );
}

#[tokio::test]
async fn greeting_554_is_not_sent() {
    let (res, f) = send_to_fake(Fault::Greeting554, "5s").await;
    assert!(matches!(res, CallResult::NotSent { .. }), "{res:?}");
    assert!(f.received.lock().unwrap().is_empty());
}

#[tokio::test]
async fn starttls_is_required_when_asked_for() {
    // The fake offers no STARTTLS: the provider must not fall back to plain text.
    let f = fake(Fault::None).await;
    let spec = format!("smtp://127.0.0.1:{}?tls=starttls&timeout=5s", f.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    let res = smtp.send(&message(1, "ana@example.com")).await;
    assert!(
        matches!(&res, CallResult::NotSent { error, .. } if error.contains("STARTTLS")),
        "{res:?}"
    );
    assert!(f.received.lock().unwrap().is_empty());
}

#[tokio::test]
async fn drop_before_data_is_not_sent() {
    let (res, _) = send_to_fake(Fault::DropAfterRcpt, "5s").await;
    assert!(matches!(res, CallResult::NotSent { .. }), "{res:?}");
}

#[tokio::test]
async fn drop_after_the_data_command_is_ambiguous() {
    let (res, _) = send_to_fake(Fault::DropAfterDataCommand, "5s").await;
    assert!(matches!(res, CallResult::Ambiguous { .. }), "{res:?}");
}

#[tokio::test]
async fn drop_after_the_final_dot_is_ambiguous() {
    let (res, f) = send_to_fake(Fault::DropAfterDot, "5s").await;
    assert!(
        matches!(&res, CallResult::Ambiguous { error } if error.contains("end of data")),
        "{res:?}"
    );
    // The server did get the whole message: treating this as "not sent" would duplicate it.
    assert_eq!(f.received.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn timeout_after_the_final_dot_is_ambiguous() {
    let t = std::time::Instant::now();
    let (res, _) = send_to_fake(Fault::HangAfterDot, "2s").await;
    assert!(
        matches!(&res, CallResult::Ambiguous { error } if error.contains("timed out")),
        "{res:?}"
    );
    // "timed out at end of data" is the provider's own verdict: its budget ends a little
    // before the call timeout the worker applies (2 s), so the phase is known.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[tokio::test]
async fn explicit_replies_after_the_dot() {
    let (res, _) = send_to_fake(Fault::Reply451AfterDot, "5s").await;
    assert!(matches!(res, CallResult::NotSent { .. }), "{res:?}");
    let (res, _) = send_to_fake(Fault::Reply554AfterDot, "5s").await;
    assert!(
        matches!(res, CallResult::Permanent { suppress: None, .. }),
        "{res:?}"
    );
}

#[tokio::test]
async fn pooled_connections_are_reused_and_stale_ones_replaced() {
    let f = fake(Fault::None).await;
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=2", f.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    for i in 0..5 {
        let r = smtp.send(&message(i, "ana@example.com")).await;
        assert!(matches!(r, CallResult::Accepted { .. }), "{r:?}");
    }
    assert_eq!(
        f.connections.load(Ordering::SeqCst),
        1,
        "one connection reused"
    );
    assert_eq!(f.received.lock().unwrap().len(), 5);

    // A server that closes each connection after one message: the pooled connection is
    // stale at the next MAIL FROM; nothing was sent on it, so a fresh one is used at once.
    let f = fake(Fault::CloseAfterOneMessage).await;
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=1", f.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    for i in 0..3 {
        let r = smtp.send(&message(i, "ana@example.com")).await;
        assert!(matches!(r, CallResult::Accepted { .. }), "{i}: {r:?}");
    }
    assert_eq!(f.received.lock().unwrap().len(), 3);
    assert_eq!(f.connections.load(Ordering::SeqCst), 3);

    // The same with a server that says "421 closing" to the next MAIL FROM.
    let f = fake(Fault::Idle421AfterOneMessage).await;
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=1", f.port);
    let smtp = Smtp::from_spec_with_env(&spec, &no_env).unwrap();
    for i in 0..3 {
        let r = smtp.send(&message(i, "ana@example.com")).await;
        assert!(matches!(r, CallResult::Accepted { .. }), "{i}: {r:?}");
    }
    assert_eq!(f.received.lock().unwrap().len(), 3);
    assert_eq!(f.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn concurrent_sends_share_a_bounded_pool() {
    let f = fake(Fault::None).await;
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=3", f.port);
    let smtp = Arc::new(Smtp::from_spec_with_env(&spec, &no_env).unwrap());
    let mut set = tokio::task::JoinSet::new();
    for i in 0..30 {
        let s = smtp.clone();
        set.spawn(async move { s.send(&message(i, "ana@example.com")).await });
    }
    while let Some(r) = set.join_next().await {
        let r = r.unwrap();
        assert!(matches!(r, CallResult::Accepted { .. }), "{r:?}");
    }
    assert!(f.connections.load(Ordering::SeqCst) <= 3);
    assert_eq!(f.received.lock().unwrap().len(), 30);
}

// ---------------------------------------------------------------------------------------------
// Hostile inputs through the builder, parsed back with mail-parser

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// Pieces no header value may carry: line breaks, NUL, other controls, encoded words.
const REFUSED: &[&str] = &[
    "\r\n",
    "\r",
    "\n",
    "\0",
    "\r\nBcc: evil@attacker.example",
    "\nBcc: evil@attacker.example",
    "\r\n\r\nBody injected",
    "\r\n Bcc: folded@attacker.example",
    "\r\n.\r\n",
    "\u{2028}",
    "\u{2029}",
    "\u{85}",
    "\u{0b}",
    "\u{0c}",
    "\u{7f}",
    "\t",
    "\u{202e}",
    "\u{2066}",
    "=?utf-8?q?=0D=0ABcc:_evil@attacker.example?=",
    "=?UTF-8?B?DQpCY2M6IGV2aWxAYXR0YWNrZXIuZXhhbXBsZQ==?=",
    "=?iso-8859-1?Q?caf=E9?=",
];

/// Pieces that are legal in a subject but tricky for an encoder or a parser.
const TRICKY: &[&str] = &[
    "%0d%0aBcc:%20evil@attacker.example",
    "%0D%0A",
    "%00",
    "=?",
    "?=",
    "\"",
    "\\",
    "<",
    ">",
    ",",
    ";",
    ":",
    "@",
    "(",
    ")",
    " ",
    "  ",
    ".",
    "Bcc: evil@attacker.example",
    "To: victim@attacker.example",
    "From: boss@attacker.example",
    "Content-Type: text/html",
    "--=_sendonce_",
    "Zoë",
    "Ñandú",
    "日本語のテキスト",
    "🙂",
    "\u{feff}",
    "é",
    "plain",
    "Newsletter",
    "a",
];

/// A value built from tricky pieces, plus refused ones when `hostile`.
fn value(rng: &mut Rng, hostile: bool) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(7) {
        if hostile && rng.below(3) == 0 {
            s.push_str(rng.pick(REFUSED));
        } else {
            s.push_str(rng.pick(TRICKY));
        }
    }
    match rng.below(20) {
        0 => s.push_str(&"A".repeat(rng.below(2000))),
        1 => s.push_str(&"word ".repeat(rng.below(400))),
        2 => s.push_str(&"ü".repeat(rng.below(600))),
        _ => {}
    }
    s
}

fn local_part(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "ana", "b.c", "x+tag", "%0d%0a", "%0A", "%41", "\r\n", "\n", "\0", "=?", "<", ">", ",",
        " ", "\"", "é", "_", "-", "Bcc:",
    ];
    let mut s = String::new();
    for _ in 0..1 + rng.below(3) {
        s.push_str(rng.pick(PIECES));
    }
    s
}

/// Whitespace as a reader sees it after unfolding.
fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn hostile_inputs_never_add_headers_or_recipients() {
    const CASES: usize = 20_000;
    let mut rng = Rng(0x005E_ED0F_5E4D_00CE);
    let settings = [
        EmailSettings::default(),
        EmailSettings {
            message_id_domain: Some("mail.example.net".into()),
            unsubscribe: Some(UnsubscribeSettings {
                mailto: Some("unsub@example.org".parse().unwrap()),
            }),
        },
    ];
    let parser = mail_parser::MessageParser::default();
    let (mut accepted, mut refused) = (0usize, 0usize);
    for case in 0..CASES {
        let c = hostile_case(&mut rng, case);
        let s = &settings[rng.below(2)];
        let built = match build_email(&c.msg, s, SystemTime::now()) {
            Err(_) => {
                refused += 1;
                continue;
            }
            Ok(b) => b,
        };
        accepted += 1;
        let ctx = || format!("case {case}: {:?}", c.msg);
        assert!(built.bytes.is_ascii(), "{}", ctx());
        let parsed = parser
            .parse(&built.bytes)
            .unwrap_or_else(|| panic!("unparsable: {}", ctx()));
        hostile_headers_checked(&built, &parsed, &ctx);
        hostile_addresses_checked(&c, &built, &parsed, &ctx);
        hostile_reply_to_checked(&c, &parsed, &ctx);
        hostile_job_and_parts_checked(&c, &built, &parsed, &ctx);
    }
    eprintln!("hostile inputs: {accepted} built, {refused} refused");
    assert_eq!(accepted + refused, CASES);
    assert!(accepted >= CASES / 5, "too few built: {accepted}");
    assert!(refused >= CASES / 5, "too few refused: {refused}");
}

/// One generated message, and the values it was built from.
struct HostileCase {
    msg: Message,
    job_id: String,
    to: String,
    from_addr: String,
    name: String,
    from: String,
    subject: Option<String>,
    reply_addr: String,
    reply_name: String,
    reply_to: Option<String>,
}

/// The message of `case`, drawn from `rng`: none, one or all of its fields hostile.
fn hostile_case(rng: &mut Rng, case: usize) -> HostileCase {
    // A third of the messages have no refused piece anywhere, a third one hostile field,
    // a third hostile everything.
    let mode = rng.below(3);
    let target = rng.below(7);
    let hostile = |field: usize| mode == 2 || (mode == 1 && target == field);
    let (h0, h1, h2, h3, h4) = (hostile(0), hostile(1), hostile(2), hostile(3), hostile(4));
    let h5 = hostile(5);
    let job_id = match rng.below(4) {
        0 => value(rng, h0),
        _ => format!("campaign:{}:sub:{case}", rng.below(9)),
    };
    let to = match rng.below(3) {
        0 if h5 => format!("{}@example.com", local_part(rng)),
        1 if h5 => format!(
            "user{case}@{}example.com",
            rng.pick(&["", "\r\n", "sub.", "%0a"])
        ),
        _ => format!("user{case}@example.com"),
    };
    let from_addr = match rng.below(4) {
        0 => format!("{}@example.org", local_part(rng)),
        _ => "news@example.org".to_string(),
    };
    let name = value(rng, h1);
    let from = match rng.below(4) {
        0 => from_addr.clone(),
        1 => format!("\"{name}\" <{from_addr}>"),
        _ => format!("{name} <{from_addr}>"),
    };
    let subject = (rng.below(8) != 0).then(|| value(rng, h2));
    let html = (rng.below(2) == 0).then(|| value(rng, h3));
    let reply_addr = match rng.below(4) {
        0 => format!("{}@example.net", local_part(rng)),
        _ => "desk@example.net".to_string(),
    };
    let reply_name = value(rng, hostile(6));
    let reply_to = match rng.below(6) {
        0 | 1 => None,
        2 | 3 => Some(reply_addr.clone()),
        4 => Some(format!("\"{reply_name}\" <{reply_addr}>")),
        _ => Some(format!("{reply_name} <{reply_addr}>")),
    };
    let msg = Message {
        status_callback: None,
        reply_to: reply_to.clone(),
        idempotency_key: sendonce::domain::model::idempotency_key(&job_id),
        job_id: job_id.clone(),
        channel: Channel::Email,
        from: Some(from.clone()),
        to: to.clone(),
        subject: subject.clone(),
        body: value(rng, h4),
        html,
        unsubscribe: (rng.below(2) == 0).then(|| link_for(&to)),
        attachments: Vec::new(),
    };
    HostileCase {
        msg,
        job_id,
        to,
        from_addr,
        name,
        from,
        subject,
        reply_addr,
        reply_name,
        reply_to,
    }
}

/// No header beyond the expected set, none twice, the required ones there, no Cc or Bcc.
fn hostile_headers_checked(
    built: &sendonce::provider::BuiltEmail,
    parsed: &mail_parser::Message<'_>,
    ctx: &dyn Fn() -> String,
) {
    let mut seen = Vec::new();
    for h in parsed.headers() {
        let n = h.name().to_ascii_lowercase();
        assert!(
            EXPECTED_HEADERS.contains(&n.as_str()),
            "unexpected header {n:?}: {}\n{}",
            ctx(),
            String::from_utf8_lossy(&built.bytes)
        );
        assert!(!seen.contains(&n), "header {n} twice: {}", ctx());
        seen.push(n);
    }
    for must in ["from", "to", "message-id", "date", "x-sendonce-job"] {
        assert!(seen.iter().any(|n| n == must), "{must} missing: {}", ctx());
    }
    assert!(parsed.cc().is_none() && parsed.bcc().is_none(), "{}", ctx());
}

/// Exactly the intended To and From, and the subject and display name decode to what was asked.
fn hostile_addresses_checked(
    c: &HostileCase,
    built: &sendonce::provider::BuiltEmail,
    parsed: &mail_parser::Message<'_>,
    ctx: &dyn Fn() -> String,
) {
    // Exactly the intended addresses.
    let tos: Vec<_> = parsed.to().map(|a| a.iter().collect()).unwrap_or_default();
    assert_eq!(tos.len(), 1, "{}", ctx());
    assert_eq!(tos[0].address(), Some(c.to.as_str()), "{}", ctx());
    let froms: Vec<_> = parsed
        .from()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    assert_eq!(froms.len(), 1, "{}", ctx());
    // A bare sender is trimmed; inside <...> surrounding spaces are refused.
    let from_addr = c.from_addr.trim();
    assert_eq!(froms[0].address(), Some(from_addr), "{}", ctx());
    assert_eq!(built.to.to_string(), c.to, "{}", ctx());
    assert_eq!(built.from.to_string(), from_addr, "{}", ctx());
    // Values decode to exactly what was asked for.
    if let Some(sub) = &c.subject {
        if !sub.trim().is_empty() {
            assert_eq!(
                parsed.subject().map(norm),
                Some(norm(sub)),
                "subject: {}",
                ctx()
            );
        }
    }
    if c.from.contains('<') {
        let want = norm(c.name.trim().trim_matches('"'));
        if !want.is_empty() {
            assert_eq!(
                froms[0].name().map(norm),
                Some(want),
                "display name: {}",
                ctx()
            );
        }
    }
}

/// Reply-To: exactly the intended mailbox, or none.
fn hostile_reply_to_checked(
    c: &HostileCase,
    parsed: &mail_parser::Message<'_>,
    ctx: &dyn Fn() -> String,
) {
    let replies: Vec<_> = parsed
        .reply_to()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    match &c.reply_to {
        None => assert!(replies.is_empty(), "{}", ctx()),
        Some(r) => {
            assert_eq!(replies.len(), 1, "{}", ctx());
            assert_eq!(replies[0].address(), Some(c.reply_addr.trim()), "{}", ctx());
            let want = norm(c.reply_name.trim().trim_matches('"'));
            if r.contains('<') && !want.is_empty() {
                assert_eq!(
                    replies[0].name().map(norm),
                    Some(want),
                    "reply-to display name: {}",
                    ctx()
                );
            }
        }
    }
}

/// The job and message ids as built, one text part (and the HTML one when asked), no more.
fn hostile_job_and_parts_checked(
    c: &HostileCase,
    built: &sendonce::provider::BuiltEmail,
    parsed: &mail_parser::Message<'_>,
    ctx: &dyn Fn() -> String,
) {
    assert_eq!(
        parsed.header_raw("X-Sendonce-Job").map(str::trim),
        Some(c.job_id.as_str()),
        "{}",
        ctx()
    );
    assert_eq!(
        parsed.message_id().map(|m| format!("<{m}>")),
        Some(built.message_id.clone()),
        "{}",
        ctx()
    );
    // One text part (and the HTML one when asked for); bodies cannot forge parts.
    let leaves: Vec<_> = parsed.parts.iter().filter(|p| !p.is_multipart()).collect();
    let html_parts = leaves.iter().filter(|p| p.is_text_html()).count();
    let text_parts = leaves
        .iter()
        .filter(|p| p.is_text() && !p.is_text_html())
        .count();
    assert_eq!(
        leaves.len(),
        1 + usize::from(c.msg.html.is_some()),
        "{}",
        ctx()
    );
    assert_eq!(text_parts, 1, "{}", ctx());
    assert_eq!(html_parts, usize::from(c.msg.html.is_some()), "{}", ctx());
    assert_eq!(parsed.attachment_count(), 0, "{}", ctx());
}

/// Every way a Reply-To could carry a header (or a second line) in is refused by the builder,
/// naming the field: line breaks anywhere, encoded words, NUL, Unicode line separators,
/// percent-encoded controls, lengths past the limits, an unclosed or quoted-inside mailbox.
#[test]
fn a_hostile_reply_to_is_refused() {
    let long_name = "Ü".repeat(200); // 400 bytes: over the 256 of a display name
    let long_local = "a".repeat(300); // over the 254 of an address
    let cases = [
        "desk@example.org\r\nBcc: evil@attacker.example".to_string(),
        "desk@example.org\nBcc: evil@attacker.example".into(),
        "desk@example.org\rBcc: evil@attacker.example".into(),
        "Desk\r\n <desk@example.org>".into(),
        "Desk <desk@example.org>\r\nBcc: evil@attacker.example".into(),
        "Desk <desk@example.org\r\n>".into(),
        "=?utf-8?q?Desk=0D=0ABcc:_evil@attacker.example?= <desk@example.org>".into(),
        "=?UTF-8?B?RGVzaw0KQmNjOiBldmlsQGF0dGFja2VyLmV4YW1wbGU=?= <desk@example.org>".into(),
        "Desk =? utf-8 ?Q?x=0A?= <desk@example.org>".into(),
        "Desk\0 <desk@example.org>".into(),
        "desk\0@example.org".into(),
        "Desk\u{2028}Bcc: evil@attacker.example <desk@example.org>".into(),
        "Desk <desk@example.org\u{2029}>".into(),
        "Desk\u{85} <desk@example.org>".into(),
        "desk%0d%0aBcc:evil@example.org".into(),
        "desk@example.org%0ABcc:evil@example.org".into(),
        format!("{long_name} <desk@example.org>"),
        format!("{long_local}@example.org"),
        format!("Desk <{long_local}@example.org>"),
        "Desk <desk@example.org".into(),
        "Say \"hi\" <desk@example.org>".into(),
        "désk@example.org".into(),
    ];
    for bad in cases {
        let mut m = message(1, "ana@example.com");
        m.reply_to = Some(bad.clone());
        let e = build_email(&m, &EmailSettings::default(), SystemTime::now())
            .expect_err(&format!("{bad:?} was built"));
        assert!(e.contains("reply-to"), "{bad:?}: {e}");
        // The refusal does not echo the value.
        assert!(!e.contains("evil") && !e.contains("aaaaaaaa"), "{e}");
    }
}

/// Display names with quotes, commas, RFC 5322 specials and non-ASCII, as the sender and as the
/// Reply-To, come back from an independent parser as they were given (without the quotes that
/// wrap them, runs of spaces as one).
#[test]
fn display_names_round_trip_through_mail_parser() {
    let cases = [
        ("\"Acme, Inc.\" <desk@example.org>", "Acme, Inc."),
        ("Acme, Inc. <desk@example.org>", "Acme, Inc."),
        (
            "\"Zoë, Ñandú & Co.\" <desk@example.org>",
            "Zoë, Ñandú & Co.",
        ),
        ("Café Ünïcode <desk@example.org>", "Café Ünïcode"),
        (
            "O'Brien; Support: (24/7) <desk@example.org>",
            "O'Brien; Support: (24/7)",
        ),
        ("Équipe @ Réponses <desk@example.org>", "Équipe @ Réponses"),
        (
            "日本語 サポート 🙂 <desk@example.org>",
            "日本語 サポート 🙂",
        ),
        ("\"  spaced   out  \" <desk@example.org>", "spaced out"),
        ("Under_score.dot <desk@example.org>", "Under_score.dot"),
    ];
    let parser = mail_parser::MessageParser::default();
    for (spec, name) in cases {
        let mut m = message(2, "ana@example.com");
        m.from = Some(spec.into());
        m.reply_to = Some(spec.into());
        let built = build_email(&m, &EmailSettings::default(), SystemTime::now())
            .unwrap_or_else(|e| panic!("{spec:?}: {e}"));
        let raw = String::from_utf8_lossy(&built.bytes).into_owned();
        let parsed = parser.parse(&built.bytes).expect("parses");
        for (which, addr) in [("from", parsed.from()), ("reply-to", parsed.reply_to())] {
            let all: Vec<_> = addr.map(|a| a.iter().collect()).unwrap_or_default();
            assert_eq!(all.len(), 1, "{which} of {spec:?}:\n{raw}");
            assert_eq!(all[0].name(), Some(name), "{which} of {spec:?}:\n{raw}");
            assert_eq!(
                all[0].address(),
                Some("desk@example.org"),
                "{which}: {spec:?}"
            );
        }
        assert_eq!(built.from.to_string(), "desk@example.org");
    }
}

/// A body that carries the message's own boundary, a closing delimiter and part headers stays
/// inside its part: quoted-printable writes `=` as `=3D`, so no `--=_...` line can appear.
#[test]
fn boundary_lookalikes_in_the_bodies_forge_no_part() {
    let mut m = message(3, "ana@example.com");
    let boundary = format!("=_sendonce_{}", m.idempotency_key.replace('-', ""));
    let forged = format!(
        "<p>before</p>\r\n--{boundary}\r\nContent-Type: text/html\r\n\r\n<p>forged</p>\r\n\
         --{boundary}--\r\n--=_sendonce_\n--=_\r\n=_\r\n--{boundary}\n\
         Content-Type: application/octet-stream\nContent-Disposition: attachment\n\nQUJD\n\
         <p>after</p>\n"
    );
    m.html = Some(forged.clone());
    m.body = forged.replace("<p>", "").replace("</p>", "");
    let built = build_email(&m, &EmailSettings::default(), SystemTime::now()).expect("built");
    let raw = String::from_utf8_lossy(&built.bytes).into_owned();
    // The real delimiters only: before the text part, before the HTML part, the closing one.
    let delimiters = raw
        .split("\r\n")
        .filter(|l| l.starts_with(&format!("--{boundary}")))
        .count();
    assert_eq!(delimiters, 3, "{raw}");
    let parsed = mail_parser::MessageParser::default()
        .parse(&built.bytes)
        .expect("parses");
    let leaves: Vec<_> = parsed.parts.iter().filter(|p| !p.is_multipart()).collect();
    assert_eq!(leaves.len(), 2, "{raw}");
    assert_eq!(parsed.attachment_count(), 0, "{raw}");
    let unify = |s: &str| s.replace("\r\n", "\n").trim_end().to_string();
    let html = leaves
        .iter()
        .find(|p| p.is_text_html())
        .expect("an HTML part");
    assert_eq!(html.text_contents().map(unify), Some(unify(&forged)));
    let text = leaves
        .iter()
        .find(|p| !p.is_text_html())
        .expect("a text part");
    assert_eq!(text.text_contents().map(unify), Some(unify(&m.body)));
}

// ---------------------------------------------------------------------------------------------
// End to end: the CLI sends a campaign through aiosmtpd

#[cfg(feature = "tier1")]
#[test]
fn cli_campaign_is_delivered_exactly_once_through_smtp() {
    let server = RealServer::start();
    let env = common::Env::new();
    let acct = env.setup_account();
    let n = 25;
    let mut csv = String::from("email,name\n");
    for i in 0..n {
        csv.push_str(&format!("user{i}@example.com,Zoë {i}\n"));
    }
    csv.push_str("bounce0@example.com,Nobody\n");
    let f = env.write("subs.csv", csv);
    env.import_csv(&acct, &f);
    let body = env.write("body.txt", "Hello {{ name }}\n");
    let cid = env.ok(&[
        "campaign",
        "create",
        "--account",
        &acct,
        "--name",
        "smtp",
        "--channel",
        "email",
        "--from",
        "news@example.org",
        "--subject",
        "Olá {{ name }}",
        "--body-file",
        body.to_str().unwrap(),
    ]);
    env.ok(&["campaign", "approve", &cid]);
    let spec = format!("smtp://127.0.0.1:{}?tls=none&pool=3", server.port);
    let r = env.run(&[
        "--json",
        "run",
        "--once",
        "--provider",
        &spec,
        "--tick",
        "50ms",
    ]);
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, r.stdout);

    let st: serde_json::Value =
        serde_json::from_str(&env.ok(&["--json", "campaign", "status", &cid])).unwrap();
    assert_eq!(st["status"], "sent", "{st}");
    assert_eq!(st["sent"], n);
    assert_eq!(st["failed"], 1);
    assert_eq!(st["in_doubt"], 0);
    // The 550 at RCPT put the address on the suppression list.
    let sup = env.ok(&["suppress", "list", "--account", &acct]);
    assert!(sup.contains("bounce0@example.com"), "{sup}");

    // The server's own record: every recipient exactly once, with its job id and Message-ID.
    let got = server.messages();
    assert_eq!(got.len(), n as usize);
    let mut per_rcpt = std::collections::HashMap::new();
    let mut ids = std::collections::HashSet::new();
    for (raw, meta) in &got {
        let rcpts = meta["rcpt_tos"].as_array().unwrap();
        assert_eq!(rcpts.len(), 1);
        *per_rcpt
            .entry(rcpts[0].as_str().unwrap().to_string())
            .or_insert(0) += 1;
        let p = mail_parser::MessageParser::default().parse(raw).unwrap();
        let job = p.header_raw("X-Sendonce-Job").unwrap().trim().to_string();
        assert!(job.starts_with(&format!("campaign:{cid}:sub:")), "{job}");
        assert_eq!(
            p.message_id().map(str::to_string),
            Some(format!(
                "{}@example.org",
                sendonce::domain::model::idempotency_key(&job)
            ))
        );
        assert!(ids.insert(job));
        let to = p.to().and_then(|a| a.first()).and_then(|a| a.address());
        assert_eq!(to, rcpts[0].as_str());
        let i: usize = to
            .unwrap()
            .trim_start_matches("user")
            .trim_end_matches("@example.com")
            .parse()
            .unwrap();
        assert_eq!(p.subject(), Some(format!("Olá Zoë {i}").as_str()));
    }
    assert_eq!(per_rcpt.len(), n as usize);
    assert!(per_rcpt.values().all(|&c| c == 1));
    // The report carries the Message-ID as the provider id.
    let report = env.ok(&["campaign", "report", &cid]);
    assert!(report.contains("@example.org>"), "{report}");
}

#[test]
fn cli_refuses_a_password_in_the_spec_without_echoing_it() {
    let env = common::Env::new();
    env.setup_account();
    for spec in [
        "smtp://mailer:hunter2@127.0.0.1:25?tls=none",
        "smtps://mailer:hunter2@127.0.0.1:465",
    ] {
        let r = env.run(&["run", "--once", "--provider", spec]);
        assert_eq!(r.code, 2, "{spec}: {}", r.stderr);
        assert!(!r.stderr.contains("hunter2"), "{}", r.stderr);
        assert!(!r.stdout.contains("hunter2"), "{}", r.stdout);
    }
    let r = env.run(&[
        "run",
        "--once",
        "--provider",
        "smtp://mailer:hunter2@127.0.0.1:25",
    ]);
    assert!(r.stderr.contains("SENDONCE_SMTP_PASSWORD"), "{}", r.stderr);
}
