//! Small steps that several operations share, written once over the seam (`sql::Tx`).

use crate::error::{Error, Result};
use crate::store::sql::{args, Arg, Column, Mismatch, Row, Tx, Value};

/// `NotFound` unless account `account_id` exists.
pub(crate) fn require_account(tx: &mut dyn Tx, account_id: i64) -> Result<()> {
    if tx.exists("SELECT 1 FROM accounts WHERE id = ?1", &args![account_id])? {
        Ok(())
    } else {
        Err(Error::not_found(format!("unknown account id {account_id}")))
    }
}

/// What `campaigns.body` holds (0005): the text template, or, when the text part is generated
/// from the HTML, the HTML template (`body` is NOT NULL since 0001).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    Text,
    Html,
}

impl BodyFormat {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BodyFormat::Text => "text",
            BodyFormat::Html => "html",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<BodyFormat> {
        match s {
            "text" => Some(BodyFormat::Text),
            "html" => Some(BodyFormat::Html),
            _ => None,
        }
    }

    /// The stored `(body, body_format, html)` of a text template `body` (empty: generated
    /// from `html`) and an HTML template.
    pub(crate) fn store<'a>(
        body: &'a str,
        html: Option<&'a str>,
    ) -> (&'a str, BodyFormat, Option<&'a str>) {
        match html {
            Some(h) if body.is_empty() => (h, BodyFormat::Html, None),
            _ => (body, BodyFormat::Text, html),
        }
    }

    /// The `(text template, HTML template)` of stored columns; the text is empty when it is
    /// generated from the HTML.
    pub(crate) fn load(self, body: String, html: Option<String>) -> (String, Option<String>) {
        match self {
            BodyFormat::Text => (body, html),
            BodyFormat::Html => (String::new(), Some(body)),
        }
    }
}

impl Column for BodyFormat {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, Mismatch> {
        let found = match v {
            Value::Text(t) => BodyFormat::parse(t),
            _ => None,
        };
        found.ok_or(Mismatch {
            what: "body format",
            unknown_name: true,
        })
    }
}

impl From<BodyFormat> for Arg<'_> {
    fn from(v: BodyFormat) -> Self {
        Arg::Text(v.as_str())
    }
}

// --- Campaigns, Messages, Notifications (store/campaigns.rs, messages.rs, notify.rs) ---

/// Column `i` of `r` as `T`, where a value that names no variant of an enum is damage named
/// `place` (`table.column`, as the message the user sees says it).
pub(crate) fn get_at<T: Column>(r: Row<'_>, i: usize, place: &str) -> Result<T> {
    let v = r.value(i)?;
    T::from_value(v).map_err(|m| {
        if m.unknown_name {
            Error::damaged(format!("{place} holds {v}, which is not a {}", m.what))
        } else {
            Error::db(format!(
                "database error: column {place} holds {v}, not a value of type {}",
                m.what
            ))
        }
    })
}

/// The scope of a job made from these ids (column of `guard_epochs`, id): the installation,
/// with the highest label of the epochs any of the ids is above (`model::key_scope`;
/// `guard_epochs` is filled only by a database that adopted a lost timeline, or one moved from
/// such a SQLite file). The columns are constants of the callers, the ids bound.
pub(crate) fn key_scope(tx: &mut dyn Tx, ids: &[(&str, i64)]) -> Result<String> {
    let installation: String = tx.scalar("SELECT id FROM installation WHERE singleton = 1", &[])?;
    let epoch: i64 = if ids.is_empty() {
        0
    } else {
        let above: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(i, (col, _))| format!("?{} > {col}", i + 1))
            .collect();
        let bound: Vec<Arg<'_>> = ids.iter().map(|(_, id)| Arg::Int(*id)).collect();
        tx.scalar(
            &format!(
                "SELECT CAST(coalesce(max(label), 0) AS BIGINT) FROM guard_epochs WHERE {}",
                above.join(" OR ")
            ),
            &bound,
        )?
    };
    Ok(crate::domain::model::key_scope(&installation, epoch))
}
