//! Group commit: concurrent writers hand their transaction's work to one writer thread, which
//! runs everything waiting in one transaction, so one commit (one fsync on SQLite with
//! `synchronous=FULL`) serves them all. Each caller is answered only after the commit that
//! holds its work returned (durable), or with the error that stopped it. Nobody waits for a
//! group to fill: the writer takes what queued while the previous commit ran, so a lone
//! request commits at once and a crowd shares its commits. A piece of work that fails (an
//! unknown account, a refused value) is rolled back alone and answered with its error while the
//! others commit (the group is then run again with a savepoint per piece). A group that fails as a whole (the
//! database busy, a statement refused by the driver) is run again one piece per transaction,
//! so one bad piece never fails the others. Used by `serve` for `POST /v1/messages`.

use crate::messages::{save_answer_tx, submit_tx, Answer, NewMessage, Submitted};
use crate::sql::{Db, Tx};
use crate::Store;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

/// The most pieces of work one transaction takes.
pub const MAX_GROUP: usize = 256;

type Erased = Box<dyn Any + Send>;
type Work = Box<dyn FnMut(&mut dyn Tx) -> Result<Erased> + Send>;

/// One caller's work and where its answer goes.
struct Job {
    work: Work,
    reply: mpsc::SyncSender<Result<Erased>>,
}

/// A handle on the writer thread; cheap to clone. The thread ends when the last handle goes.
#[derive(Clone)]
pub struct Group {
    jobs: mpsc::Sender<Job>,
    /// Transactions the writer committed (each holding one group, or one piece run alone).
    commits: Arc<AtomicU64>,
}

impl Group {
    /// Start the writer thread over `store`.
    pub fn start(store: Arc<Store>) -> Result<Group> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let commits = Arc::new(AtomicU64::new(0));
        let counted = commits.clone();
        std::thread::Builder::new()
            .name("sendonce-group-commit".into())
            .spawn(move || writer(&store, &rx, &counted))
            .map_err(|e| Error::internal(format!("cannot start the group-commit writer: {e}")))?;
        Ok(Group { jobs, commits })
    }

    /// Transactions committed so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Run `work` in the next group's transaction and return its result once that transaction
    /// committed. `work` may run more than once (PostgreSQL retries, a failed group run again
    /// alone) and must not act outside the transaction. Public for `sendonce bench`'s limit
    /// arm, which commits a bare insert through this same writer.
    pub fn run<T: Send + 'static>(
        &self,
        work: impl FnMut(&mut dyn Tx) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let mut all = self.run_all(vec![work]);
        all.pop()
            .unwrap_or_else(|| Err(Error::internal("the group-commit writer answered nothing")))
    }

    /// [`Group::run`] for several pieces at once: all are queued before the first answer is
    /// awaited, so they share the writer's next commits. Answers in the order of `works`.
    fn run_all<T: Send + 'static, W>(&self, works: Vec<W>) -> Vec<Result<T>>
    where
        W: FnMut(&mut dyn Tx) -> Result<T> + Send + 'static,
    {
        let gone = || Error::internal("the group-commit writer has stopped");
        let answers: Vec<_> = works
            .into_iter()
            .map(|mut work| {
                let (reply, answer) = mpsc::sync_channel(1);
                let job = Job {
                    work: Box::new(move |tx| work(tx).map(|v| Box::new(v) as Erased)),
                    reply,
                };
                self.jobs.send(job).map(|()| answer).map_err(|_| gone())
            })
            .collect();
        answers
            .into_iter()
            .map(|a| {
                let erased = a?.recv().map_err(|_| gone())??;
                erased
                    .downcast::<T>()
                    .map(|v| *v)
                    .map_err(|_| Error::internal("the group-commit writer answered another type"))
            })
            .collect()
    }

    /// [`crate::Messages::submit_message`], committed with whatever else is waiting.
    pub fn submit_message(&self, m: &NewMessage<'_>) -> Result<Submitted> {
        let owned = OwnedMessage::from(m);
        self.run(move |tx| submit_tx(tx, &owned.borrow()))
    }

    /// Each of `ms` submitted as by [`Group::submit_message`], all queued at once.
    pub fn submit_messages(&self, ms: &[NewMessage<'_>]) -> Vec<Result<Submitted>> {
        let works = ms
            .iter()
            .map(|m| {
                let owned = OwnedMessage::from(m);
                move |tx: &mut dyn Tx| submit_tx(tx, &owned.borrow())
            })
            .collect();
        self.run_all(works)
    }

    /// [`crate::Messages::save_answer`], committed with whatever else is waiting.
    pub fn save_answer(&self, account_id: i64, id: i64, status: u16, body: &str) -> Result<()> {
        let body = body.to_string();
        self.run(move |tx| save_answer_tx(tx, account_id, id, status, &body))
    }
}

/// The writer: wait for one piece of work, take everything else already waiting (up to
/// [`MAX_GROUP`]), commit them together, answer each.
fn writer(store: &Store, rx: &mpsc::Receiver<Job>, commits: &AtomicU64) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        match guarded(|| commit_group(store, &mut jobs)) {
            Ok(results) => {
                commits.fetch_add(1, Ordering::Relaxed);
                answer_all(jobs, results)
            }
            Err(_) if jobs.len() > 1 => {
                for mut job in jobs {
                    let r = guarded(|| store.write(|tx| (job.work)(tx)));
                    commits.fetch_add(u64::from(r.is_ok()), Ordering::Relaxed);
                    let _ = job.reply.send(r);
                }
            }
            Err(e) => answer_all(jobs, vec![Err(e)]),
        }
    }
}

/// `f`, with a panic turned into an error: a piece that panics must not take the writer (and
/// every later request) with it; its transaction is rolled back as the stack unwinds.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(Error::internal("a group-commit piece panicked")))
}

fn answer_all(jobs: Vec<Job>, results: Vec<Result<Erased>>) {
    for (job, r) in jobs.into_iter().zip(results) {
        // A caller that gave up (its request dropped) no longer listens: nothing to do.
        let _ = job.reply.send(r);
    }
}

/// Errors that belong to one piece of work (what it asked for), not to the transaction.
fn own_error(e: &Error) -> bool {
    use sendonce_domain::error::ErrorKind::*;
    matches!(
        e.kind,
        Invalid | NotFound | Conflict | Unauthorized | Forbidden | KeyReused | TooLarge | Limited
    )
}

/// Every job in one transaction. First with no savepoint: a savepoint copies every page a
/// piece first changes into SQLite's statement journal, work wasted when no piece fails, which
/// is nearly always. When one fails with its own error, that transaction is rolled back and the
/// group runs again with a savepoint per piece, so only the failing piece is refused.
fn commit_group(store: &Store, jobs: &mut [Job]) -> Result<Vec<Result<Erased>>> {
    if let [one] = jobs {
        return Ok(vec![store.write(|tx| (one.work)(tx))]);
    }
    let mut refused = false;
    match pieces(store, jobs, false, &mut refused) {
        Err(_) if refused => pieces(store, jobs, true, &mut refused),
        done => done,
    }
}

/// The jobs in one transaction; with `savepoints` one refused with its own error is rolled back
/// alone, without them it fails the transaction and sets `refused`.
fn pieces(store: &Store, jobs: &mut [Job], savepoints: bool, refused: &mut bool) -> Outcomes {
    store.write(|tx| {
        *refused = false;
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs.iter_mut() {
            if savepoints {
                tx.exec("SAVEPOINT group_job", &[])?;
            }
            match (job.work)(tx) {
                Ok(v) => out.push(Ok(v)),
                Err(e) if savepoints && own_error(&e) => {
                    tx.exec("ROLLBACK TO SAVEPOINT group_job", &[])?;
                    out.push(Err(e));
                }
                Err(e) => {
                    *refused = own_error(&e);
                    return Err(e);
                }
            }
            if savepoints {
                tx.exec("RELEASE SAVEPOINT group_job", &[])?;
            }
        }
        Ok(out)
    })
}

type Outcomes = Result<Vec<Result<Erased>>>;

/// A [`NewMessage`] that owns its text, to cross to the writer thread.
struct OwnedMessage {
    account_id: i64,
    idempotency_key: String,
    request_hash: String,
    channel: Channel,
    to: String,
    from: Option<String>,
    reply_to: Option<String>,
    subject: Option<String>,
    text: String,
    html: Option<String>,
    template: Option<crate::TemplateRow>,
    /// Shared, not copied: the bytes are behind an `Arc`.
    attachments: Vec<sendonce_domain::attachment::Attachment>,
    metadata: Option<String>,
    now: i64,
    answer: Option<Answer>,
}

impl OwnedMessage {
    fn from(m: &NewMessage<'_>) -> OwnedMessage {
        OwnedMessage {
            account_id: m.account_id,
            idempotency_key: m.idempotency_key.to_string(),
            request_hash: m.request_hash.to_string(),
            channel: m.channel,
            to: m.to.to_string(),
            from: m.from.map(str::to_string),
            reply_to: m.reply_to.map(str::to_string),
            subject: m.subject.map(str::to_string),
            text: m.text.to_string(),
            html: m.html.map(str::to_string),
            // What the writer needs of the version is its id, name and number, not its sources.
            template: m.template.map(|t| crate::TemplateRow {
                id: t.id,
                account_id: t.account_id,
                name: t.name.clone(),
                version: t.version,
                subject: None,
                text: None,
                html: None,
                created_at: t.created_at,
            }),
            attachments: m.attachments.to_vec(),
            metadata: m.metadata.map(str::to_string),
            now: m.now,
            answer: m.answer.clone(),
        }
    }

    fn borrow(&self) -> NewMessage<'_> {
        NewMessage {
            account_id: self.account_id,
            idempotency_key: &self.idempotency_key,
            request_hash: &self.request_hash,
            channel: self.channel,
            to: &self.to,
            from: self.from.as_deref(),
            reply_to: self.reply_to.as_deref(),
            subject: self.subject.as_deref(),
            text: &self.text,
            html: self.html.as_deref(),
            template: self.template.as_ref(),
            attachments: &self.attachments,
            metadata: self.metadata.as_deref(),
            now: self.now,
            answer: self.answer.clone(),
        }
    }
}
