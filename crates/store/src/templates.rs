//! Stored templates of the HTTP API (`Templates`): named per account, each save of a name a new
//! version that never changes (`schema/0021_templates.sql`). Written once for both stores over
//! `sql::Tx`. Two saves of one name at once on PostgreSQL both get a version: the second's
//! insert waits on the first's unique entry, does nothing, and takes the next number.

use crate::shared::require_account;
use crate::sql::{args, Db, Row, Tx};
use sendonce_domain::error::{Error, Result};

/// A template version to save, checked by the caller (the sources parse).
#[derive(Debug, Clone, Copy)]
pub struct NewTemplate<'a> {
    pub account_id: i64,
    pub name: &'a str,
    pub subject: Option<&'a str>,
    pub text: Option<&'a str>,
    pub html: Option<&'a str>,
    pub now: i64,
}

/// One version of a template, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRow {
    pub id: i64,
    pub account_id: i64,
    pub name: String,
    pub version: i64,
    pub subject: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
    pub created_at: i64,
}

/// The account's stored templates.
pub trait Templates: Send + Sync {
    /// Save `t` as the next version of its name (1 for a new name); returns it as stored.
    fn save_template(&self, t: &NewTemplate<'_>) -> Result<TemplateRow>;
    /// Version `version` of template `name` (`None`: the latest); `NotFound` when there is none.
    fn template(&self, account_id: i64, name: &str, version: Option<i64>) -> Result<TemplateRow>;
    /// The latest version of each of the account's templates, by name.
    fn templates(&self, account_id: i64) -> Result<Vec<TemplateRow>>;
}

const COLUMNS: &str = "id, account_id, name, version, subject, text, html, created_at";

fn template_from_row(r: Row<'_>) -> Result<TemplateRow> {
    Ok(TemplateRow {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        version: r.get(3)?,
        subject: r.get(4)?,
        text: r.get(5)?,
        html: r.get(6)?,
        created_at: r.get(7)?,
    })
}

/// Tries at the next version number before giving up (each lost try means another save of the
/// same name committed meanwhile).
const SAVE_TRIES: usize = 8;

fn save_tx(tx: &mut dyn Tx, t: &NewTemplate<'_>) -> Result<TemplateRow> {
    require_account(tx, t.account_id)?;
    for _ in 0..SAVE_TRIES {
        let saved = tx.query_opt(
            &format!(
                "INSERT INTO templates (account_id, name, version, subject, text, html, created_at)
                 SELECT ?1, ?2, coalesce(max(version), 0) + 1, ?3, ?4, ?5, ?6
                 FROM templates WHERE account_id = ?1 AND name = ?2
                 ON CONFLICT (account_id, name, version) DO NOTHING
                 RETURNING {COLUMNS}"
            ),
            &args![t.account_id, t.name, t.subject, t.text, t.html, t.now],
            template_from_row,
        )?;
        if let Some(row) = saved {
            return Ok(row);
        }
    }
    Err(Error::conflict(format!(
        "template {:?} is being saved by others at this moment; try again",
        t.name
    )))
}

impl<S: Db> Templates for S {
    fn save_template(&self, t: &NewTemplate<'_>) -> Result<TemplateRow> {
        self.write(|tx| save_tx(tx, t))
    }

    fn template(&self, account_id: i64, name: &str, version: Option<i64>) -> Result<TemplateRow> {
        let found = self.read(|tx| {
            tx.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM templates
                     WHERE account_id = ?1 AND name = ?2
                       AND (CAST(?3 AS BIGINT) IS NULL OR version = ?3)
                     ORDER BY version DESC LIMIT 1"
                ),
                &args![account_id, name, version],
                template_from_row,
            )
        })?;
        found.ok_or_else(|| match version {
            Some(v) => Error::not_found(format!("template {name:?} has no version {v}")),
            None => Error::not_found(format!("unknown template {name:?}")),
        })
    }

    fn templates(&self, account_id: i64) -> Result<Vec<TemplateRow>> {
        self.read(|tx| {
            tx.query(
                &format!(
                    "SELECT {COLUMNS} FROM templates t
                     WHERE account_id = ?1 AND version =
                       (SELECT max(version) FROM templates u
                        WHERE u.account_id = t.account_id AND u.name = t.name)
                     ORDER BY name"
                ),
                &args![account_id],
                template_from_row,
            )
        })
    }
}
