//! SQLite and pool errors as the library's [`Error`]: busy, not a database, damaged, read-only,
//! disk full.

use crate::driver::DriverError;
use sendonce_domain::error::{Error, ErrorKind};

impl DriverError for rusqlite::Error {
    fn into_error(self) -> Error {
        use rusqlite::ffi::ErrorCode;
        let e = self;
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

impl DriverError for r2d2::Error {
    fn into_error(self) -> Error {
        let e = self;
        Error::db(format!("could not get a database connection: {e}"))
    }
}
