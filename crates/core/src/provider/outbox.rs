//! The outbox provider: a JSONL file that stands in for a real provider offline. An acceptance
//! is fsynced before it is reported; with idempotency on, a repeated key is logged as a replay
//! and answered with the first id. Several processes may share one file: the key check and the
//! append happen under an exclusive file lock.

use super::{CallFuture, CallResult, Capabilities, Message, Provider};
use crate::provider::deliverylog::DeliveryLine;
use sendonce_domain::error::{Error, Result};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::oneshot;

type Job = (Message, oneshot::Sender<CallResult>);

/// Handle on the outbox; calls are group-committed by one writer thread (one fsync per group).
pub struct Outbox {
    caps: Capabilities,
    tx: mpsc::Sender<Job>,
}

/// The writer thread's state: what it has read of the file so far.
struct Writer {
    path: PathBuf,
    file: File,
    idempotent: bool,
    /// Keys seen in the file -> first message id (only kept when idempotent).
    keys: HashMap<String, String>,
    /// Bytes of the file already read into `keys`.
    offset: u64,
    /// A partial last line (from a writer killed mid-append) waiting for its newline.
    pending: Vec<u8>,
}

impl Outbox {
    pub fn open(path: &Path, idempotent: bool) -> Result<Self> {
        let file = sendonce_domain::files::open_append(path)?;
        let mut w = Writer {
            path: path.to_path_buf(),
            file,
            idempotent,
            keys: HashMap::new(),
            offset: 0,
            pending: Vec::new(),
        };
        w.file
            .lock_shared()
            .map_err(|e| Error::io("cannot lock outbox", e))?;
        let caught = w.catch_up();
        let _ = w.file.unlock();
        caught?;
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("outbox-writer".into())
            .spawn(move || w.run(rx))
            .map_err(|e| Error::io("cannot start the outbox writer", e))?;
        Ok(Outbox {
            caps: Capabilities {
                name: format!("outbox:{}", path.display()),
                key_window: idempotent.then(|| Duration::from_secs(24 * 3600)),
                call_timeout: Duration::from_secs(30),
                can_lookup: false,
            },
            tx,
        })
    }
}

impl Writer {
    /// Read what other processes appended since our last look.
    fn catch_up(&mut self) -> Result<()> {
        let ctx = || format!("reading outbox {}", self.path.display());
        self.file
            .seek(SeekFrom::Start(self.offset))
            .map_err(|e| Error::io(&ctx(), e))?;
        let mut buf = Vec::new();
        self.file
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(&ctx(), e))?;
        self.offset += buf.len() as u64;
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(&buf);
        let mut start = 0;
        for (i, b) in data.iter().enumerate() {
            if *b == b'\n' {
                self.learn(&data[start..i]);
                start = i + 1;
            }
        }
        self.pending = data[start..].to_vec();
        Ok(())
    }

    fn learn(&mut self, line: &[u8]) {
        if !self.idempotent {
            return;
        }
        if let Ok(l) = serde_json::from_slice::<DeliveryLine>(line) {
            if !l.replay {
                self.keys.entry(l.idempotency_key).or_insert(l.message_id);
            }
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Job>) {
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            while let Ok(more) = rx.try_recv() {
                group.push(more);
                if group.len() >= 512 {
                    break;
                }
            }
            match self.commit(&group) {
                Ok(results) => {
                    for ((_, reply), r) in group.into_iter().zip(results) {
                        let _ = reply.send(r);
                    }
                }
                Err(e) => {
                    // Nothing was acknowledged; whether bytes reached the disk is unknown.
                    for (_, reply) in group {
                        let _ = reply.send(CallResult::Ambiguous {
                            error: e.message.clone(),
                        });
                    }
                }
            }
        }
    }

    /// Under the exclusive lock: catch up, decide replay or delivery per message, append all
    /// lines, fsync, and only then answer.
    fn commit(&mut self, group: &[Job]) -> Result<Vec<CallResult>> {
        self.file
            .lock()
            .map_err(|e| Error::io("cannot lock outbox", e))?;
        let res = self.commit_locked(group);
        let _ = self.file.unlock();
        res
    }

    fn commit_locked(&mut self, group: &[Job]) -> Result<Vec<CallResult>> {
        self.catch_up()?;
        let mut out = Vec::with_capacity(group.len());
        let mut bytes = Vec::new();
        if !self.pending.is_empty() {
            // A writer died mid-line; that line was never acknowledged. End it so ours parse.
            bytes.push(b'\n');
            self.pending.clear();
        }
        let now = sendonce_domain::clock::now_ms();
        for (m, _) in group {
            let seen = if self.idempotent {
                self.keys.get(&m.idempotency_key).cloned()
            } else {
                None
            };
            let (message_id, replay) = match seen {
                Some(id) => (id, true),
                None => (format!("obx-{}", uuid::Uuid::new_v4().simple()), false),
            };
            let line = DeliveryLine {
                job_id: m.job_id.clone(),
                idempotency_key: m.idempotency_key.clone(),
                channel: m.channel.as_str().to_string(),
                from: m.from.clone(),
                to: m.to.clone(),
                subject: m.subject.clone(),
                body: m.body.clone(),
                html: m.html.clone(),
                reply_to: m.reply_to.clone(),
                at: now,
                replay,
                message_id: message_id.clone(),
                metadata: None,
                api: None,
                headers: None,
                raw_base64: None,
                envelope: None,
                attachments: m.attachments.iter().map(logged).collect(),
                tenant: None,
            };
            serde_json::to_writer(&mut bytes, &line)
                .map_err(|e| Error::io("encoding outbox line", e.into()))?;
            bytes.push(b'\n');
            if self.idempotent && !replay {
                self.keys
                    .insert(m.idempotency_key.clone(), message_id.clone());
            }
            out.push(CallResult::Accepted {
                provider_id: message_id,
                replay,
            });
        }
        let ctx = || format!("writing outbox {}", self.path.display());
        self.file
            .write_all(&bytes)
            .map_err(|e| Error::io(&ctx(), e))?;
        // Power-loss suite only (tests/crash/powerloss.rs): its control drops this fsync, to show
        // that the suite catches a delivery acknowledged before it was durable.
        #[cfg(feature = "crash-points")]
        let skip = std::env::var_os("SENDONCE_TEST_OUTBOX_NO_FSYNC").is_some();
        #[cfg(not(feature = "crash-points"))]
        let skip = false;
        if !skip {
            self.file.sync_data().map_err(|e| Error::io(&ctx(), e))?;
        }
        self.offset += bytes.len() as u64;
        Ok(out)
    }
}

impl Provider for Outbox {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn send<'a>(&'a self, msg: &'a Message) -> CallFuture<'a> {
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            if self.tx.send((msg.clone(), reply)).is_err() {
                return CallResult::NotSent {
                    error: "the outbox writer has stopped".into(),
                    retry_after: None,
                };
            }
            rx.await.unwrap_or(CallResult::Ambiguous {
                error: "the outbox writer stopped during the call".into(),
            })
        })
    }
}

/// A file as the outbox keeps it (the outbox is the message's destination, so its bytes are
/// kept whole).
fn logged(a: &sendonce_domain::attachment::Attachment) -> super::deliverylog::LoggedAttachment {
    super::deliverylog::LoggedAttachment {
        filename: a.filename.clone(),
        content_type: Some(a.content_type.clone()),
        content_id: a.content_id.clone(),
        content: a.base64(),
    }
}
