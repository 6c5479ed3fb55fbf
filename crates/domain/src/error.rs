//! The library's typed error: a kind that decides the exit code, and a message for people.

use std::fmt;

/// What went wrong, coarsely: enough to pick an exit code and nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Arguments or input data are invalid (bad address, CSV error, bad template).
    Invalid,
    /// What the request names does not exist (unknown account, campaign, subscriber or send
    /// id). Same exit code as `Invalid`.
    NotFound,
    /// The thing exists but is not in a state that allows the request (approve twice...).
    Conflict,
    /// No valid credential: an API token that is unknown, malformed or revoked. The message
    /// never quotes the token. Same exit code as `Invalid`.
    Unauthorized,
    /// A valid credential whose scope does not allow the request. Same exit code as
    /// `Invalid`.
    Forbidden,
    /// An idempotency key already used with another request.
    KeyReused,
    /// A request body larger than the server takes.
    TooLarge,
    /// Too many attempts in a short time (dashboard logins): wait and try again.
    Limited,
    /// The database stayed locked longer than the busy timeout.
    Busy,
    /// The database file is unusable (not SQLite, too new, corrupt) or a query failed.
    Database,
    /// The database server cannot be reached, or dropped the connection (PostgreSQL restarting,
    /// the network down). A worker waits and retries the same call; a command fails.
    Unavailable,
    /// A file or socket failed.
    Io,
    /// A provider failed in a way that stops the command.
    Provider,
    /// A ledger invariant is broken: the file is damaged (a flipped byte, an index that no
    /// longer matches its table). The worker stops rather than let damage turn into sending.
    Damaged,
    /// The clone guard, the time-travel watermark or the check at start refused to send: the
    /// file is a copy, went back in time, or is damaged. Restarting does not help; an operator
    /// must look (`sendonce doctor`, `sendonce adopt`, `sendonce restore`).
    Guarded,
    /// A bug or a failed internal task (a panicked thread), not the user's input nor the
    /// environment.
    Internal,
    /// Whoever read our standard output stopped reading (`| head`): not a failure, the command
    /// ends quietly, as other Unix tools do.
    ClosedOutput,
}

/// An error with a kind and a message that names the problem.
#[derive(Debug, Clone)]
pub struct Error {
    /// Decides the exit code (see `crate::exit`).
    pub kind: ErrorKind,
    /// Shown to the user as is; never contains secrets.
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }
    /// See [`ErrorKind::Unauthorized`]: `message` must not contain the credential.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthorized, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }
    pub fn key_reused(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::KeyReused, message)
    }
    pub fn limited(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Limited, message)
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::TooLarge, message)
    }
    pub fn db(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Database, message)
    }
    /// A broken ledger invariant (see [`ErrorKind::Damaged`]); `what` names the row and what
    /// was found.
    pub fn damaged(what: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::Damaged,
            format!(
                "the database file is damaged: {what}. Nothing of this transaction was \
                 committed and the worker stopped, so that the damage cannot turn into sending. \
                 Check the file with `sqlite3 FILE 'PRAGMA integrity_check'` before anything \
                 else runs on it (a backup older than the last sends would send them again)"
            ),
        )
    }
    /// A failed write of the command's own output; a closed pipe is [`ErrorKind::ClosedOutput`].
    pub fn output(err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            Self::new(ErrorKind::ClosedOutput, "standard output was closed")
        } else {
            Self::io("writing to standard output", err)
        }
    }
    pub fn io(context: &str, err: std::io::Error) -> Self {
        Self::new(ErrorKind::Io, format!("{context}: {err}"))
    }
    /// Damage or a guard refusal: the worker stops claiming (and records its calls in flight).
    pub fn stops_worker(&self) -> bool {
        matches!(self.kind, ErrorKind::Damaged | ErrorKind::Guarded)
    }
    /// Prefix the message with what was being done.
    pub fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
