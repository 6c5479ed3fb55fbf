//! The fake provider's durable state: one writer thread owns the delivery log and the key
//! table (`<log>.keys`), decides delivery / replay / conflict per request, appends a whole
//! group, fsyncs both files once, updates the inbox index (`index`), and only then answers
//! every request of the group: a client that got its answer finds its message in any listing.

use super::index::{Entry, Index};
use sendonce_core::provider::deliverylog::DeliveryLine;
use sendonce_domain::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// Most requests written under one fsync.
const MAX_GROUP: usize = 1024;

/// A validated send request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub job_id: String,
    /// Empty when the request carries no key (Twilio, Postmark, Resend without the header).
    pub idempotency_key: String,
    pub channel: String,
    pub from: Option<String>,
    pub to: String,
    pub subject: Option<String>,
    pub body: String,
    /// The HTML part (email), if the request had one (`/send` `html`, Resend `html`, Postmark
    /// `HtmlBody`). Not part of the payload hash.
    pub html: Option<String>,
    pub metadata: Option<serde_json::Value>,
    /// Which API accepted it (`None`: the generic `/send`).
    pub api: Option<&'static str>,
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// The shape of the message id handed out.
    pub id_style: IdStyle,
    /// SMTP only: the message's exact bytes and its envelope.
    pub raw: Option<Vec<u8>>,
    pub envelope: Option<sendonce_core::provider::deliverylog::Envelope>,
    /// HTTP APIs: the files the request carried.
    pub attachments: Vec<sendonce_core::provider::deliverylog::LoggedAttachment>,
    /// The inbox it is filed in (`apis::tenant`; SMTP: the AUTH user).
    pub tenant: Option<String>,
}

/// How a new message id looks, so each API answers with ids of its provider's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdStyle {
    /// `fake-<32 hex>` (the generic `/send`).
    Fake,
    /// `SM<32 hex>`, a Twilio message SID.
    TwilioSid,
    /// A hyphenated UUID (Resend, Postmark).
    Uuid,
    /// Amazon SES: `010001` + 10 hex digits, a UUID, `-000000`.
    Ses,
    /// SendGrid's `X-Message-Id`: 22 URL-safe base64 characters.
    SendGrid,
    /// A Message-ID in angle brackets on this domain (Mailgun: its sending domain; Brevo:
    /// its relay's).
    MessageId(String),
}

impl IdStyle {
    fn new_id(&self) -> String {
        use base64::Engine;
        let u = uuid::Uuid::new_v4();
        match self {
            IdStyle::Fake => format!("fake-{}", u.simple()),
            IdStyle::TwilioSid => format!("SM{}", u.simple()),
            IdStyle::Uuid => u.hyphenated().to_string(),
            IdStyle::Ses => {
                let hex = uuid::Uuid::new_v4().simple().to_string();
                format!("010001{}-{}-000000", &hex[..10], u.hyphenated())
            }
            IdStyle::SendGrid => {
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(u.as_bytes())
            }
            IdStyle::MessageId(domain) => {
                let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                    .to_string()
                    .replace(['-', ':', 'T', 'Z'], "");
                format!("<{stamp}.{}@{domain}>", &u.simple().to_string()[..16])
            }
        }
    }
}

impl Request {
    /// Whether the key table applies: a request without a key is always a new delivery.
    pub(crate) fn keyed(&self) -> bool {
        !self.idempotency_key.is_empty()
    }
}

impl Request {
    /// What "the same payload" means for a reused key: recipient, subject and body.
    fn payload_hash(to: &str, subject: Option<&str>, body: &str) -> String {
        let bytes = serde_json::to_vec(&(to, subject, body)).unwrap_or_default();
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, &bytes)
            .simple()
            .to_string()
    }
    fn hash(&self) -> String {
        Self::payload_hash(&self.to, self.subject.as_deref(), &self.body)
    }

    /// The delivery line this request becomes.
    fn line(&self, at: i64, message_id: String, replay: bool) -> DeliveryLine {
        DeliveryLine {
            job_id: self.job_id.clone(),
            idempotency_key: self.idempotency_key.clone(),
            channel: self.channel.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
            subject: self.subject.clone(),
            body: self.body.clone(),
            html: self.html.clone(),
            reply_to: None,
            at,
            replay,
            message_id,
            metadata: self.metadata.clone(),
            api: self.api.map(str::to_string),
            headers: self.headers.clone(),
            raw_base64: self.raw.as_deref().map(|b| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(b)
            }),
            envelope: self.envelope.clone(),
            attachments: self.attachments.clone(),
            tenant: self.tenant.clone(),
        }
    }
}

/// What the journal decided, after the fsync.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Logged; `replay` when the key was known and the first id is returned.
    Delivered { message_id: String, replay: bool },
    /// The key was used before with another payload: not logged.
    Conflict,
}

type Reply = oneshot::Sender<std::result::Result<Verdict, String>>;

enum Msg {
    Write(Box<Request>, Reply),
    /// Empty the delivery log (`DELETE /messages`); the key table stays.
    Clear(oneshot::Sender<std::result::Result<usize, String>>),
    /// Remove the deliveries (and their replays) with these message ids from the log
    /// (`DELETE /api/v1/messages` with `IDs`); answers how many deliveries went.
    Delete(
        Vec<String>,
        oneshot::Sender<std::result::Result<usize, String>>,
    ),
    Stop,
}

/// One line of the key table file.
#[derive(Serialize, Deserialize)]
struct KeyLine {
    key: String,
    id: String,
    hash: String,
}

/// Handle on the writer thread.
pub(crate) struct Journal {
    tx: mpsc::Sender<Msg>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
    log: PathBuf,
    /// Bumped after every durable group and every clear: readers waiting for messages
    /// (`GET /messages/wait`) look again when it changes.
    changed: tokio::sync::watch::Receiver<u64>,
    index: Arc<Index>,
}

struct Writer {
    changed: tokio::sync::watch::Sender<u64>,
    log: File,
    log_path: PathBuf,
    keys_file: File,
    idempotent: bool,
    /// key -> (first message id, payload hash).
    keys: HashMap<String, (String, String)>,
    index: Arc<Index>,
}

/// `<log>.keys`.
pub(crate) fn keys_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".keys");
    PathBuf::from(s)
}

/// Open for appending; end a torn last line (a writer killed mid-append) so ours parse.
fn open_append(path: &Path) -> Result<File> {
    let ctx = |what: &str| format!("{what} {}", path.display());
    let mut f = sendonce_domain::files::open_append(path)?;
    let len = f
        .metadata()
        .map_err(|e| Error::io(&ctx("cannot stat"), e))?
        .len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))
            .and_then(|_| f.read_exact(&mut last))
            .map_err(|e| Error::io(&ctx("cannot read"), e))?;
        if last[0] != b'\n' {
            f.write_all(b"\n")
                .and_then(|_| f.sync_data())
                .map_err(|e| Error::io(&ctx("cannot repair"), e))?;
        }
    }
    Ok(f)
}

impl Journal {
    /// Open (or create) the log and the key table, load the keys, start the writer.
    pub(crate) fn open(log_path: &Path, idempotent: bool) -> Result<Self> {
        let keys_path = keys_path(log_path);
        let log = open_append(log_path)?;
        let keys_file = open_append(&keys_path)?;
        let mut keys = HashMap::new();
        if idempotent {
            let text = std::fs::read_to_string(&keys_path)
                .map_err(|e| Error::io(&format!("cannot read {}", keys_path.display()), e))?;
            for l in text.lines() {
                if let Ok(k) = serde_json::from_str::<KeyLine>(l) {
                    keys.entry(k.key).or_insert((k.id, k.hash));
                }
            }
        }
        // One pass over the log builds the inbox index and, as a crash between the two files'
        // fsyncs leaves a logged delivery without its key line (never answered, but a retry
        // must still be a replay), relearns such keys.
        let started = std::time::Instant::now();
        let index = Arc::new(Index::build(log_path, |l| {
            if idempotent && !l.replay && !l.idempotency_key.is_empty() {
                keys.entry(l.idempotency_key.clone()).or_insert_with(|| {
                    let hash = Request::payload_hash(&l.to, l.subject.as_deref(), &l.body);
                    (l.message_id.clone(), hash)
                });
            }
        })?);
        let (entries, bytes) = index.read().size();
        tracing::info!(
            "fake provider: inbox index of {entries} lines ({} KiB) built in {} ms",
            bytes / 1024,
            started.elapsed().as_millis()
        );
        let (changed_tx, changed) = tokio::sync::watch::channel(0);
        let mut w = Writer {
            changed: changed_tx,
            log,
            log_path: log_path.to_path_buf(),
            keys_file,
            idempotent,
            keys,
            index: index.clone(),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("fake-provider-journal".into())
            .spawn(move || w.run(rx))
            .map_err(|e| Error::io("cannot start the journal writer", e))?;
        Ok(Journal {
            tx,
            thread: std::sync::Mutex::new(Some(thread)),
            log: log_path.to_path_buf(),
            changed,
            index,
        })
    }

    /// The inbox index, current as of the last answered request.
    pub(crate) fn index(&self) -> Arc<Index> {
        self.index.clone()
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// Record a request; resolves once the line is durable (or was refused as a conflict).
    /// `after` runs on the verdict even if the caller stops waiting: a client
    /// that hung up after sending still has its message logged, and a real provider still
    /// reports it (the delivery callbacks run here).
    pub(crate) async fn submit_then(
        &self,
        req: Request,
        after: impl FnOnce(&std::result::Result<Verdict, String>) + Send + 'static,
    ) -> std::result::Result<Verdict, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Write(Box::new(req), reply))
            .map_err(|_| "the journal writer has stopped".to_string())?;
        let task = tokio::spawn(async move {
            let verdict = rx
                .await
                .unwrap_or_else(|_| Err("the journal writer stopped during the request".into()));
            after(&verdict);
            verdict
        });
        task.await
            .unwrap_or_else(|e| Err(format!("the journal task failed: {e}")))
    }

    /// A receiver that sees a new value after every durable group and every clear.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.clone()
    }

    /// Empty the delivery log, durably, after the groups queued before it; the number of
    /// messages (replays not counted) it held. The key table is kept: a retry of a message
    /// sent before the clear is still a replay (and is not listed).
    pub(crate) async fn clear(&self) -> std::result::Result<usize, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Clear(reply))
            .map_err(|_| "the journal writer has stopped".to_string())?;
        rx.await
            .unwrap_or_else(|_| Err("the journal writer stopped during the request".into()))
    }

    /// Remove the deliveries with these ids (and their replays) from the log, durably, after
    /// the groups queued before it; how many deliveries were removed. The key table is kept,
    /// as for `clear`.
    pub(crate) async fn delete(&self, ids: Vec<String>) -> std::result::Result<usize, String> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Delete(ids, reply))
            .map_err(|_| "the journal writer has stopped".to_string())?;
        rx.await
            .unwrap_or_else(|_| Err("the journal writer stopped during the request".into()))
    }

    /// Finish the queued groups and stop the writer thread.
    pub(crate) fn close(&self) {
        let _ = self.tx.send(Msg::Stop);
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Writer {
    fn run(&mut self, rx: mpsc::Receiver<Msg>) {
        let mut stop = false;
        while !stop {
            let mut group = Vec::new();
            let mut clear = None;
            let mut delete = None;
            match rx.recv() {
                Ok(Msg::Write(r, reply)) => group.push((*r, reply)),
                Ok(Msg::Clear(reply)) => clear = Some(reply),
                Ok(Msg::Delete(ids, reply)) => delete = Some((ids, reply)),
                Ok(Msg::Stop) | Err(_) => return,
            }
            while group.len() < MAX_GROUP && clear.is_none() && delete.is_none() {
                match rx.try_recv() {
                    Ok(Msg::Write(r, reply)) => group.push((*r, reply)),
                    // After this group is written: what was sent before the clear goes.
                    Ok(Msg::Clear(reply)) => clear = Some(reply),
                    Ok(Msg::Delete(ids, reply)) => delete = Some((ids, reply)),
                    Ok(Msg::Stop) => {
                        stop = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.write_group(group);
            if let Some(reply) = clear {
                let done = self.truncate().map_err(|e| e.message);
                if let Err(e) = &done {
                    tracing::error!("fake provider: {e}");
                }
                self.changed.send_modify(|n| *n += 1);
                let _ = reply.send(done);
            }
            if let Some((ids, reply)) = delete {
                let done = self.remove(&ids).map_err(|e| e.message);
                if let Err(e) = &done {
                    tracing::error!("fake provider: {e}");
                }
                self.changed.send_modify(|n| *n += 1);
                let _ = reply.send(done);
            }
        }
    }

    /// Rewrite the log without the lines of these message ids (a new file renamed over the
    /// old one, then reopened for appending): a crash leaves the old log or the new one. The
    /// index says where each line is; lines it does not know (torn, foreign) are kept as they
    /// are. Requests wait for the index while the log is replaced.
    fn remove(&mut self, ids: &[String]) -> Result<usize> {
        let ctx = |what: &str| format!("{what} {}", self.log_path.display());
        let text = std::fs::read(&self.log_path).map_err(|e| Error::io(&ctx("cannot read"), e))?;
        let mut index = self.index.write();
        if index.end() != text.len() as u64 {
            // Not the log the index describes (a failed write left it in doubt): read it again.
            index.rebuild()?;
        }
        let Some(removal) = index.without(&text, ids) else {
            return Ok(0);
        };
        // The new file's handle is open before the rename: once the rename is done, the writer
        // can never be left appending to the unlinked old log.
        self.log = sendonce_domain::files::replace(&self.log_path, &removal.kept)?;
        let removed = removal.removed;
        index.removed(removal)?;
        Ok(removed)
    }

    /// Commit one group and answer each of its requests.
    fn write_group(&mut self, group: Vec<(Request, Reply)>) {
        if group.is_empty() {
            return;
        }
        match self.commit(&group) {
            Ok(verdicts) => {
                for ((_, reply), v) in group.into_iter().zip(verdicts) {
                    let _ = reply.send(Ok(v));
                }
            }
            Err(e) => {
                tracing::error!("fake provider: {}", e.message);
                for (_, reply) in group {
                    let _ = reply.send(Err(e.message.clone()));
                }
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }

    /// Empty the delivery log and make that durable (`DELETE /messages`); how many messages
    /// it held (replays not counted).
    fn truncate(&mut self) -> Result<usize> {
        let mut index = self.index.write();
        let held = index.live();
        self.log
            .set_len(0)
            .and_then(|_| self.log.sync_all())
            .map_err(|e| Error::io("emptying the delivery log", e))?;
        index.clear();
        Ok(held)
    }

    /// Append and fsync the group's lines, then index them (before anyone is answered). A
    /// failed write leaves the log in doubt: the index is read again from it.
    fn append(&mut self, bytes: &[u8], lines: &[(DeliveryLine, usize, usize)]) -> Result<()> {
        let base = self.index.read().end();
        let entries: Vec<Entry> = lines
            .iter()
            .map(|(l, start, len)| Entry::of(l, base + *start as u64, *len as u32))
            .collect();
        let written = self
            .log
            .write_all(bytes)
            .and_then(|_| self.log.sync_data())
            .map_err(|e| Error::io("writing the delivery log", e));
        let mut index = self.index.write();
        if let Err(e) = written {
            if let Err(again) = index.rebuild() {
                tracing::error!("fake provider: {}", again.message);
            }
            return Err(e);
        }
        for e in entries {
            index.push(e);
        }
        Ok(())
    }

    fn commit(&mut self, group: &[(Request, Reply)]) -> Result<Vec<Verdict>> {
        let now = sendonce_domain::clock::now_ms();
        let mut log_bytes = Vec::new();
        let mut key_bytes = Vec::new();
        let mut out = Vec::with_capacity(group.len());
        // Each line with where it starts in `log_bytes` and its length.
        let mut lines = Vec::with_capacity(group.len());
        for (r, _) in group {
            let hash = r.hash();
            let known = if r.keyed() {
                self.keys.get(&r.idempotency_key)
            } else {
                None
            };
            let (message_id, replay) = match known {
                Some((_, h)) if *h != hash => {
                    out.push(Verdict::Conflict);
                    continue;
                }
                Some((id, _)) => (id.clone(), true),
                None => {
                    let id = r.id_style.new_id();
                    if self.idempotent && r.keyed() {
                        serde_json::to_writer(
                            &mut key_bytes,
                            &KeyLine {
                                key: r.idempotency_key.clone(),
                                id: id.clone(),
                                hash: hash.clone(),
                            },
                        )
                        .map_err(|e| Error::io("encoding a key line", e.into()))?;
                        key_bytes.push(b'\n');
                        self.keys
                            .insert(r.idempotency_key.clone(), (id.clone(), hash));
                    }
                    (id, false)
                }
            };
            let line = r.line(now, message_id.clone(), replay);
            let start = log_bytes.len();
            serde_json::to_writer(&mut log_bytes, &line)
                .map_err(|e| Error::io("encoding a delivery line", e.into()))?;
            log_bytes.push(b'\n');
            lines.push((line, start, log_bytes.len() - start));
            out.push(Verdict::Delivered { message_id, replay });
        }
        // Log first: a delivery whose key line is lost is relearned from the log on start.
        if !log_bytes.is_empty() {
            self.append(&log_bytes, &lines)?;
        }
        if !key_bytes.is_empty() {
            self.keys_file
                .write_all(&key_bytes)
                .and_then(|_| self.keys_file.sync_data())
                .map_err(|e| Error::io("writing the key table", e))?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &str, to: &str) -> Request {
        Request {
            job_id: "j".into(),
            idempotency_key: key.into(),
            channel: "email".into(),
            from: None,
            to: to.into(),
            subject: None,
            body: "hi".into(),
            html: None,
            metadata: None,
            api: None,
            headers: None,
            id_style: IdStyle::Fake,
            raw: None,
            envelope: None,
            attachments: Vec::new(),
            tenant: None,
        }
    }

    #[test]
    fn delete_removes_a_delivery_and_its_replays_and_appending_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.jsonl");
        let j = Journal::open(&log, true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = |v: std::result::Result<Verdict, String>| match v {
                Ok(Verdict::Delivered { message_id, .. }) => message_id,
                other => panic!("{other:?}"),
            };
            let a = id(j.submit_then(request("a", "a@x.org"), |_| {}).await);
            assert_eq!(id(j.submit_then(request("a", "a@x.org"), |_| {}).await), a);
            let b = id(j.submit_then(request("b", "b@x.org"), |_| {}).await);
            assert_eq!(j.delete(vec![a.clone(), "nope".into()]).await, Ok(1));
            assert_eq!(j.delete(vec!["nope".into()]).await, Ok(0));
            let c = id(j.submit_then(request("c", "c@x.org"), |_| {}).await);
            let ids: Vec<String> = sendonce_core::provider::deliverylog::read_lines(&log)
                .unwrap()
                .into_iter()
                .map(|l| l.message_id)
                .collect();
            assert_eq!(ids, [b, c]);
            // The key table stays: a retry of the deleted message is a replay.
            assert_eq!(id(j.submit_then(request("a", "a@x.org"), |_| {}).await), a);
        });
        j.close();
    }
}
