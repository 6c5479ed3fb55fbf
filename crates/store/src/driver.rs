//! The database drivers' and their pools' errors (SQLite's, PostgreSQL's) as the library's
//! [`Error`]: each backend says how its driver's errors read (`sqlite/error.rs`,
//! `postgres/mod.rs`); a statement's result becomes the library's with `.db()?`.

use sendonce_domain::error::{Error, Result};

/// An error of a database driver, turned into the library's [`Error`] (busy, damaged,
/// unavailable, ...).
pub trait DriverError {
    fn into_error(self) -> Error;
}

/// `.db()`: a driver's result as the library's.
pub trait OrDb<T> {
    fn db(self) -> Result<T>;
}

impl<T, E: DriverError> OrDb<T> for std::result::Result<T, E> {
    fn db(self) -> Result<T> {
        self.map_err(DriverError::into_error)
    }
}
