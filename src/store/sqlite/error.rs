//! SQLite and pool errors as the library's [`Error`]: busy, not a database, read-only, disk
//! full, and a value that names no variant (damage).

use super::codec::unknown_value;
use crate::error::{Error, ErrorKind};

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        if let Some(u) = unknown_value(&e) {
            return Error::new(
                ErrorKind::Damaged,
                format!(
                    "the database file is damaged: {u}. Check the file with \
                     `sqlite3 FILE 'PRAGMA integrity_check'`"
                ),
            );
        }
        if let rusqlite::Error::SqliteFailure(code, msg) = &e {
            match code.code {
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                    return Error::new(
                        ErrorKind::Busy,
                        "the database stayed locked longer than the busy timeout \
                         (another process is holding a write transaction); try again",
                    );
                }
                ErrorCode::NotADatabase => {
                    return Error::db("the file is not a SQLite database (left untouched)");
                }
                ErrorCode::DatabaseCorrupt => {
                    return Error::new(
                        ErrorKind::Damaged,
                        "the database file is damaged (SQLite: database disk image is \
                         malformed); nothing was sent from it. `sendonce doctor` shows what is \
                         wrong; put the latest backup back with `sendonce restore BACKUP`",
                    );
                }
                ErrorCode::ReadOnly => {
                    return Error::db(
                        "the database cannot be written (a read-only file, or a directory where \
                         SQLite cannot create its -wal and -shm files); nothing was changed",
                    );
                }
                ErrorCode::DiskFull => {
                    return Error::new(
                        ErrorKind::Io,
                        "the disk (or the database size limit) is full; nothing was half-written",
                    );
                }
                _ => {}
            }
            if let Some(m) = msg {
                return Error::db(format!("database error: {m}"));
            }
        }
        Error::db(format!("database error: {e}"))
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::db(format!("could not get a database connection: {e}"))
    }
}
