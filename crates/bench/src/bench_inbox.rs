//! `sendonce bench --only inbox`: the fake provider's inbox on a big delivery log. Writes a log
//! of `--scale` messages (HTTP emails with an HTML part, SMS, and one in ten received over SMTP
//! with their exact bytes; five messages per recipient), starts a child `sendonce fake-provider`
//! over it (the time to its `listening on` line is the index rebuild, plus the process start),
//! reads its resident memory, then times a filtered list of the assertions API, Mailpit pages
//! and searches, opening one message and the web inbox, `RUNS` times each. Figures only: a
//! median over `TARGET_MS` is flagged, never asserted.

use super::bench::{load_average, machine, median, Machine, Workspace};
use sendonce_core::provider::deliverylog::{DeliveryLine, Envelope};
use sendonce_domain::error::{Error, Result};
use sendonce_store::Synchronous;
use serde::Serialize;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Timed fetches of each request (the median and the max are reported).
pub const RUNS: usize = 9;
/// The target for a filtered list and a Mailpit page: a median above is flagged.
pub const TARGET_MS: f64 = 20.0;
/// Messages per recipient.
const PER_RECIPIENT: u64 = 5;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Messages in the log.
    pub messages: u64,
    pub dir: Option<PathBuf>,
}

/// One request's figures.
#[derive(Debug, Serialize)]
pub struct Timing {
    pub what: String,
    pub path: String,
    pub status: u16,
    /// Messages in the answer (a listing's length, or Mailpit's `messages_count`).
    pub found: u64,
    pub median_ms: f64,
    pub max_ms: f64,
    pub slow: bool,
}

#[derive(Debug, Serialize)]
pub struct InboxReport {
    pub machine: Machine,
    pub messages: u64,
    pub log_bytes: u64,
    pub write_seconds: f64,
    /// From spawning the fake to its `listening on` line: the index rebuilt from the log.
    pub start_ms: f64,
    /// The fake's VmRSS right after the start, and after the timed requests.
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    /// What the fake counts its index to hold (`/api/v1/info` `IndexBytes`).
    pub index_bytes: u64,
    pub runs: usize,
    pub requests: Vec<Timing>,
    pub slow: usize,
    pub seconds: f64,
}

/// Run the section.
pub fn run(opts: &Options, rt: &tokio::runtime::Runtime) -> Result<InboxReport> {
    let started = Instant::now();
    let load_start = load_average();
    let ws = Workspace::new(opts.dir.as_deref(), Synchronous::Full)?;
    let log = ws.path("inbox.jsonl");
    if log.exists() {
        return Err(Error::invalid(format!(
            "{} already exists; pass an empty --dir",
            log.display()
        )));
    }
    write_log(&log, opts.messages)?;
    let write_seconds = started.elapsed().as_secs_f64();
    let log_bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let spawned = Instant::now();
    let mut fake = Fake::start(&log)?;
    let start_ms = spawned.elapsed().as_secs_f64() * 1e3;
    let rss_start_kib = rss_kib(fake.child.id());
    let timed = rt.block_on(time_requests(&fake.base, opts.messages));
    let rss_end_kib = rss_kib(fake.child.id());
    fake.stop();
    let (requests, index_bytes) = timed?;
    Ok(InboxReport {
        machine: machine(load_start),
        messages: opts.messages,
        log_bytes,
        write_seconds,
        start_ms,
        rss_start_kib,
        rss_end_kib,
        index_bytes,
        runs: RUNS,
        slow: requests.iter().filter(|t| t.slow).count(),
        requests,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The recipient of message `i`.
fn recipient(i: u64, n: u64) -> String {
    format!("user{}@example.org", i % (n / PER_RECIPIENT).max(1))
}

/// Message `i` of `n`: an SMS one in five, one received over SMTP one in ten, else an HTTP
/// email with an HTML part.
fn line(i: u64, n: u64) -> DeliveryLine {
    let to = recipient(i, n);
    let text = format!(
        "Hello {to}, your order {i} has shipped. Track it at https://shop.example/track/{i} \
         or reply to this message. Invoice {} is attached to your account page. Thanks for \
         shopping with us; see you soon. Unsubscribe: https://shop.example/u/{i}",
        i * 7
    );
    let mut l = DeliveryLine {
        job_id: format!("campaign:1:sub:{i}"),
        idempotency_key: format!("bench-{i}"),
        channel: "email".into(),
        from: Some("Shop <news@shop.example>".into()),
        to: to.clone(),
        subject: Some(format!("Your order {i} has shipped")),
        html: Some(format!(
            "<html><body><h1>Order {i}</h1><p>{text}</p><p><a href=\"https://shop.example/track/\
             {i}\">Track</a> <a href=\"https://shop.example/u/{i}\">Unsubscribe</a></p>{}\
             </body></html>",
            "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>".repeat(8)
        )),
        body: text,
        reply_to: None,
        at: 1_760_000_000_000 + i as i64 * 10,
        replay: false,
        message_id: format!("fake-{:032x}", i + 1),
        metadata: None,
        api: Some("resend".into()),
        headers: None,
        raw_base64: None,
        envelope: None,
        attachments: Vec::new(),
        tenant: None,
    };
    if i % 5 == 4 {
        l.channel = "sms".into();
        l.to = format!("+1415555{:04}", i % 10_000);
        l.from = Some("+14155550199".into());
        l.subject = None;
        l.html = None;
        l.body = format!("Your code is {:06}", i % 1_000_000);
        l.api = Some("twilio".into());
    } else if i % 10 == 3 {
        smtp(&mut l);
    }
    l
}

/// Make `l` a message received over SMTP: its exact bytes and envelope.
fn smtp(l: &mut DeliveryLine) {
    use base64::Engine;
    let raw = format!(
        "From: Shop <news@shop.example>\r\nTo: {}\r\nSubject: {}\r\nDate: Tue, 01 Dec 2026 \
         10:00:00 +0000\r\nMessage-ID: <{}@shop.example>\r\nMIME-Version: 1.0\r\nContent-Type: \
         multipart/alternative; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n{}\r\n\
         --b\r\nContent-Type: text/html\r\n\r\n{}\r\n--b--\r\n",
        l.to,
        l.subject.as_deref().unwrap_or(""),
        l.message_id,
        l.body,
        l.html.as_deref().unwrap_or("")
    );
    l.envelope = Some(Envelope {
        from: "bounce@shop.example".into(),
        to: vec![l.to.clone()],
    });
    l.raw_base64 = Some(base64::engine::general_purpose::STANDARD.encode(raw));
    l.from = Some("news@shop.example".into());
    l.html = None;
    l.api = None;
}

fn write_log(path: &Path, n: u64) -> Result<()> {
    let ctx = || format!("cannot write {}", path.display());
    let file = std::fs::File::create(path).map_err(|e| Error::io(&ctx(), e))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    for i in 0..n {
        serde_json::to_writer(&mut w, &line(i, n))
            .map_err(|e| Error::io(&ctx(), std::io::Error::other(e)))?;
        w.write_all(b"\n").map_err(|e| Error::io(&ctx(), e))?;
    }
    w.flush().map_err(|e| Error::io(&ctx(), e))
}

/// A child `sendonce fake-provider` over the log; killed if dropped before `stop`.
struct Fake {
    child: std::process::Child,
    base: String,
}

impl Fake {
    fn start(log: &Path) -> Result<Fake> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::io("cannot find the sendonce executable", e))?;
        let mut child = Command::new(exe)
            .args(["-q", "fake-provider", "--listen", "127.0.0.1:0", "--log"])
            .arg(log)
            .env_remove("SENDONCE_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io("cannot start sendonce fake-provider", e))?;
        let mut first = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufReader::new(out)
                .read_line(&mut first)
                .map_err(|e| Error::io("reading sendonce fake-provider", e))?;
        }
        let mut fake = Fake {
            child,
            base: String::new(),
        };
        let Some(addr) = first.trim().strip_prefix("listening on ") else {
            return Err(Error::internal(format!(
                "sendonce fake-provider printed {first:?}, not its address"
            )));
        };
        fake.base = format!("http://{addr}");
        Ok(fake)
    }

    /// SIGTERM, then wait (up to 30 s, then SIGKILL on drop).
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process's VmRSS in KiB (0 when /proc does not say).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// What is timed: a name and a path.
fn requests(n: u64) -> Vec<(&'static str, String)> {
    let who = recipient(n / 2, n);
    let job = format!("campaign:1:sub:{}", n / 2);
    let id = format!("fake-{:032x}", n / 2 + 1);
    vec![
        ("assertions: filtered list", format!("/messages?to={who}")),
        ("assertions: by job id", format!("/messages?job_id={job}")),
        (
            "assertions: to + subject",
            format!("/messages?to={who}&subject=shipped"),
        ),
        (
            "assertions: free text q (scan)",
            format!("/messages?q=order%20{}%20has", n / 3),
        ),
        ("assertions: one message", format!("/messages/{id}")),
        ("mailpit: messages page", "/api/v1/messages".into()),
        (
            "mailpit: a deep page",
            format!("/api/v1/messages?start={}", n / 2),
        ),
        (
            "mailpit: search to:",
            format!("/api/v1/search?query=to:{who}"),
        ),
        (
            "mailpit: search words (scan)",
            format!("/api/v1/search?query=%22order%20{}%20%22", n / 3),
        ),
        ("mailpit: one message", format!("/api/v1/message/{id}")),
        ("mailpit: info", "/api/v1/info".into()),
        ("web inbox: first page", "/".into()),
        ("web inbox: search", format!("/?to={who}")),
    ]
}

async fn time_requests(base: &str, n: u64) -> Result<(Vec<Timing>, u64)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))?;
    let mut out = Vec::new();
    for (what, path) in requests(n) {
        let mut ms = Vec::with_capacity(RUNS);
        let (mut status, mut found) = (0, 0);
        for _ in 0..RUNS {
            let t = Instant::now();
            let r = client
                .get(format!("{base}{path}"))
                .send()
                .await
                .map_err(|e| Error::internal(format!("GET {path}: {e}")))?;
            status = r.status().as_u16();
            let body = r
                .bytes()
                .await
                .map_err(|e| Error::internal(format!("GET {path}: {e}")))?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            found = count(&body);
        }
        let median_ms = median(&ms);
        let max_ms = ms.iter().copied().fold(0.0, f64::max);
        let target = what.contains("filtered list") || what.contains("messages page");
        out.push(Timing {
            what: what.to_string(),
            path,
            status,
            found,
            median_ms,
            max_ms,
            slow: target && median_ms > TARGET_MS,
        });
    }
    let info: serde_json::Value = client
        .get(format!("{base}/api/v1/info"))
        .send()
        .await
        .map_err(|e| Error::internal(format!("GET /api/v1/info: {e}")))?
        .json()
        .await
        .map_err(|e| Error::internal(format!("GET /api/v1/info: {e}")))?;
    Ok((out, info["IndexBytes"].as_u64().unwrap_or(0)))
}

/// Messages in an answer: a JSON array's length, Mailpit's `messages_count`, else 1.
fn count(body: &[u8]) -> u64 {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(a)) => a.len() as u64,
        Ok(v) => v["messages_count"].as_u64().unwrap_or(1),
        Err(_) => 1,
    }
}

impl InboxReport {
    pub fn table(&self) -> String {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let mut t = format!(
            "sendonce bench --only inbox: {} messages, log {:.0} MiB (written in {:.1} s); \
             {} cpu(s), load {:.1} -> {:.1}\n\
             fake-provider start (index rebuilt from the log): {:.0} ms; RSS {:.0} MiB after \
             start, {:.0} MiB after the requests; index {:.0} MiB by its own count\n\
             each request {} times over loopback (wall time), a median > {TARGET_MS} ms \
             flagged on the filtered list and the Mailpit page\n\n{:<34} {:>6} {:>7} {:>10} \
             {:>10}  path\n",
            self.messages,
            mib(self.log_bytes),
            self.write_seconds,
            self.machine.cpus,
            self.machine.load_start,
            self.machine.load_end,
            self.start_ms,
            self.rss_start_kib as f64 / 1024.0,
            self.rss_end_kib as f64 / 1024.0,
            mib(self.index_bytes),
            self.runs,
            "request",
            "status",
            "found",
            "median ms",
            "max ms",
        );
        for r in &self.requests {
            t.push_str(&format!(
                "{:<34} {:>6} {:>7} {:>10.1} {:>10.1}  {}{}\n",
                r.what,
                r.status,
                r.found,
                r.median_ms,
                r.max_ms,
                r.path,
                if r.slow { "  SLOW" } else { "" }
            ));
        }
        t.push_str(&format!(
            "\n{} over target; {:.1} s in all",
            self.slow, self.seconds
        ));
        t
    }
}
