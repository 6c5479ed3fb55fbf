//! How the domain's enums cross the SQL edge: `ToSql`/`FromSql` for the send and campaign
//! states, the channel and the token scope. A value in the database that names no variant is
//! an error (the file is damaged), never a default.

use crate::domain::address::Channel;
use crate::domain::model::{CampaignStatus, SendStatus};
use crate::domain::token::Scope;
use crate::store::OptIn;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use std::fmt;

/// A column holds a value that is not one of the enum's names. `place` is `table.column` once
/// [`get`] has added it.
#[derive(Debug)]
pub struct UnknownValue {
    /// What the column should hold ("send status").
    pub what: &'static str,
    /// The value found, as text.
    pub value: String,
    pub place: Option<String>,
}

impl fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.place {
            Some(p) => write!(
                f,
                "{p} holds {:?}, which is not a {}",
                self.value, self.what
            ),
            None => write!(f, "{:?} is not a {}", self.value, self.what),
        }
    }
}

impl std::error::Error for UnknownValue {}

/// Parse a text column with `parse`; anything else (unknown text, a number, NULL) is an
/// [`UnknownValue`].
fn decode<T>(
    v: ValueRef<'_>,
    what: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> FromSqlResult<T> {
    let text = match v {
        ValueRef::Text(b) => String::from_utf8_lossy(b),
        other => format!("{other:?}").into(),
    };
    if let ValueRef::Text(_) = v {
        if let Some(x) = parse(&text) {
            return Ok(x);
        }
    }
    Err(FromSqlError::Other(Box::new(UnknownValue {
        what,
        value: text.into_owned(),
        place: None,
    })))
}

macro_rules! text_enum {
    ($t:ty, $what:literal, $parse:expr) => {
        impl ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }
        impl FromSql for $t {
            fn column_result(v: ValueRef<'_>) -> FromSqlResult<Self> {
                decode(v, $what, $parse)
            }
        }
    };
}

text_enum!(SendStatus, "send status", SendStatus::parse);
text_enum!(CampaignStatus, "campaign status", CampaignStatus::parse);
text_enum!(Channel, "channel", |s: &str| s.parse::<Channel>().ok());
text_enum!(OptIn, "list opt-in mode", |s: &str| OptIn::parse(s).ok());
text_enum!(BodyFormat, "body format", BodyFormat::parse);
text_enum!(Scope, "token scope", |s: &str| Scope::parse(s).ok());

pub(super) use crate::store::shared::BodyFormat;

/// The [`UnknownValue`] inside a rusqlite error, if that is what it is.
pub(super) fn unknown_value(e: &rusqlite::Error) -> Option<&UnknownValue> {
    match e {
        rusqlite::Error::FromSqlConversionFailure(_, _, err) => err.downcast_ref(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn enums_round_trip_through_sqlite() {
        let c = Connection::open_in_memory().unwrap();
        for s in SendStatus::ALL {
            let back: SendStatus = c.query_row("SELECT ?1", [s], |r| r.get(0)).unwrap();
            assert_eq!(back, s);
            let text: String = c.query_row("SELECT ?1", [s], |r| r.get(0)).unwrap();
            assert_eq!(text, s.as_str());
        }
        for ch in [Channel::Email, Channel::Sms] {
            let back: Channel = c.query_row("SELECT ?1", [ch], |r| r.get(0)).unwrap();
            assert_eq!(back, ch);
        }
        let back: CampaignStatus = c.query_row("SELECT 'paused'", [], |r| r.get(0)).unwrap();
        assert_eq!(back, CampaignStatus::Paused);
    }
}
