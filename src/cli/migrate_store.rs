//! `sendonce migrate-store`: the target URL settled (--to, --to-env, SENDONCE_DB / --db) and
//! what `app::migrate_store` copied printed.

use super::args::{Cli, MigrateStoreArgs};
use super::{open_opts, to_json, Output};
use sendonce_core::app::migrate_store;
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_store::Target;

/// The target URL: `--to`, else the variable `--to-env` names, else `--db`/SENDONCE_DB when it
/// is a PostgreSQL URL.
fn target(cli: &Cli, a: &MigrateStoreArgs) -> Result<String> {
    if let Some(to) = &a.to {
        return Ok(to.clone());
    }
    if let Some(var) = &a.to_env {
        return match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
            _ => Err(Error::invalid(format!(
                "--to-env {var}: the environment variable {var} is not set (or empty)"
            ))),
        };
    }
    if let Target::Postgres(url) = super::target(cli) {
        return Ok(url);
    }
    Err(Error::invalid(
        "name the PostgreSQL target: SENDONCE_DB=postgres://… or --to-env VAR (both keep the \
         password out of `ps`), or --to URL",
    ))
}

pub(super) fn migrate_store(cli: &Cli, a: &MigrateStoreArgs) -> Result<Output> {
    let to = target(cli, a)?;
    let m = migrate_store::migrate_store(&a.from, &to, &open_opts(cli)?)?;
    let mut text = format!(
        "copied {} to {} (installation {}), verified before the commit:",
        m.from, m.to, m.installation
    );
    let width = m.rows.keys().map(String::len).max().unwrap_or(0);
    for (table, n) in &m.rows {
        text.push_str(&format!("\n  {table:<width$}  {n}"));
    }
    text.push_str(&format!(
        "\nsends checksum {}\n{} is marked as moved ({}): workers refuse it; run them with \
         --db {}",
        m.sends_checksum,
        m.from,
        clock::format_ms(m.moved_at),
        m.to
    ));
    Ok(Output::ok(to_json(&m), text))
}
