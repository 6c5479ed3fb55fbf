//! The PostgreSQL store (issue 17): `--db postgres://…` (or `SENDONCE_DB`), for workers on
//! several hosts. Its operations are the store's, written once over `store::sql`; this module
//! opens the pool and the runtime, and `tx.rs` runs the statements.
//!
//! # Sync operations over an async driver
//!
//! The store's operations are synchronous and every caller already runs them on a blocking
//! thread (`http::blocking`, the worker's `spawn_blocking`, or a plain CLI thread). The driver
//! (tokio-postgres, pooled by deadpool-postgres) is async. The store owns a small tokio runtime
//! of its own (two worker threads) on which every connection task runs; a statement is polled
//! from the caller's thread with that runtime entered (`tx.rs`, `block_on`), and what only this
//! backend does (bench loops, `migrate-store`'s import) spawns its future there and waits on a
//! std channel (`PgStore::run`).
//!
//! Why not `Handle::block_on` on the caller's runtime: it panics when the caller happens to be
//! inside an async context (a CLI command's `#[tokio::main]` thread, a test), and a store call
//! must never panic. Neither way can deadlock on the caller's runtime because nothing of ours
//! runs there: the connections live on the store's own runtime, so they keep being driven
//! while the caller blocks. The runtime is shut down in the background when the store is
//! dropped (dropping a runtime inside an async context would panic).
//!
//! Weighed and measured (2 cores, loopback server, one worker, 20,000 rows, whole process): a
//! single-threaded runtime driven by the calling thread (`Runtime::block_on`) was as fast on an
//! idle machine (1.87-1.95 s against 1.79-2.06 s) but slower with one core busy (2.63-3.03 s
//! against 2.02-2.10 s, the build before issue 39 1.93-2.12 s), so the runtime stays
//! multi-threaded.
//!
//! # Schema
//!
//! `schema/postgres/` is append-only like `schema/`; `0001_init.sql` is today's whole SQLite
//! schema translated (its header says how). Migrations run in one transaction that first takes
//! `pg_advisory_xact_lock(APPLICATION_ID)`: two hosts starting together serialize there, and
//! the second sees the first's versions (DDL is transactional in PostgreSQL, so a failed
//! migration leaves nothing half-applied). The applied versions are in `sendonce_schema`, which
//! is also how a database says it is ours.
//!
//! # TLS
//!
//! `sslmode=require` (or `verify-ca`/`verify-full` as tokio-postgres reads them) connects
//! through tokio-postgres-rustls, rustls on ring with the webpki roots (the project's one TLS
//! stack). `disable` and `prefer` (the default) connect without TLS: with `prefer`, a server
//! with a self-signed certificate (Debian's default snakeoil one) would otherwise fail
//! verification instead of falling back. Over a TCP connection without TLS the password is
//! never sent in cleartext unless the URL says `cleartext_password=allow` (`cleartext.rs`).
//!
//! # The password in messages
//!
//! Every error the store returns (from the driver, the pool, the server's own text: a server
//! quotes a database or role name, which can hold the password) passes through
//! `sendonce_domain::redact` with the URL's password: verbatim, case-folded, hex, base64, any 8
//! characters of it. So does the URL as shown.

mod admin;
mod cleartext;
pub(crate) mod dialect;
pub(crate) mod doctor;
mod ledger;
mod migrate;
mod plans;
pub mod tx;
// migrate-store's target (kept last: easy to merge).
mod import;

use crate::driver::DriverError;
use crate::OpenOptions;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_domain::redact::Secret;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use migrate::SCHEMA_VERSION;
pub use plans::PgPlan;
// migrate-store's URL without its password.
pub use import::without_password;

/// The URL with any password replaced by `***`: what messages and `path()` show.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let mut out = url[..scheme_end + 3].to_string();
    // The credentials end at the first `@`, as the driver reads them (so a password holding
    // `/`, `?` or `#` is still the password here).
    match rest.find('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&rest[at..]);
        }
        None => out.push_str(rest),
    }
    // A password given as a query parameter.
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k == "password" => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        return format!("{head}{}", query.join("&"));
    }
    out
}

impl DriverError for tokio_postgres::Error {
    fn into_error(self) -> Error {
        let e = self;
        if let Some(why) = cleartext::refusal(&e) {
            return Error::invalid(format!("PostgreSQL: {why}"));
        }
        // The server's own message (constraint, trigger, serialization failure) when it sent
        // one; the driver's (connection closed, I/O) otherwise.
        // SQLSTATE class 08 (connection exception) and 57P (the server shutting down or
        // starting) mean the server, not the statement, failed: another try may work.
        let gone = |code: &str| code.starts_with("08") || code.starts_with("57P");
        match e.as_db_error() {
            Some(db) if gone(db.code().code()) => Error::new(
                ErrorKind::Unavailable,
                format!("PostgreSQL is unavailable: {}", db.message()),
            ),
            Some(db) => Error::db(format!("PostgreSQL: {}", db.message())),
            None if connection_lost(&e) => Error::new(
                ErrorKind::Unavailable,
                format!("PostgreSQL is unavailable: {e}"),
            ),
            None => Error::db(format!("PostgreSQL: {e}")),
        }
    }
}

/// The connection failed or closed, or the server did not answer in time: what a worker waits
/// out (not a statement the server refused, nor a value that did not convert).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    e.is_closed()
        || e.source().is_some_and(|s| s.is::<std::io::Error>())
        || e.to_string().starts_with("timeout")
}

impl DriverError for deadpool_postgres::PoolError {
    fn into_error(self) -> Error {
        let e = self;
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into_error(),
            deadpool_postgres::PoolError::Timeout(_) => Error::new(
                ErrorKind::Unavailable,
                format!("PostgreSQL is unavailable: {e}"),
            ),
            other => Error::db(format!("PostgreSQL connection pool: {other}")),
        }
    }
}

/// A PostgreSQL database; cheap to share (`Arc<Store>`), one pool and one runtime.
pub struct PgStore {
    pool: deadpool_postgres::Pool,
    /// The store's own runtime (see the module doc); `None` only while dropping.
    rt: Option<tokio::runtime::Runtime>,
    /// The URL without its password, for messages and `Admin::path`.
    shown: PathBuf,
    read_only: bool,
    /// The URL's password: scrubbed from every error the store returns.
    secrets: Vec<Secret>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl PgStore {
    /// Open the database at `url`: connect (TLS per `sslmode`), check it is ours, and bring
    /// its schema up to date under the advisory lock. Without `opts.create` a database with no
    /// sendonce schema is refused (`sendonce init` makes it one); `read_only` migrates nothing
    /// and refuses a schema older or newer than this binary's.
    pub fn open(url: &str, opts: &OpenOptions) -> Result<PgStore> {
        let secrets = password_of(url);
        PgStore::open_config(url, opts, &secrets).map_err(|e| hide(&secrets, e))
    }

    fn open_config(url: &str, opts: &OpenOptions, secrets: &[Secret]) -> Result<PgStore> {
        let shown = sendonce_domain::redact::redact(&redact(url), secrets);
        let (url, allowed) =
            cleartext::take_opt_in(url).map_err(|e| Error::invalid(format!("{shown}: {e}")))?;
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| Error::invalid(format!("{shown} is not a PostgreSQL URL: {e}")))?;
        let watch = cleartext::must_watch(&config, allowed)
            .map_err(|e| Error::invalid(format!("{shown}: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("sendonce");
        }
        // None of our transactions waits on anything but the database (no provider call inside
        // one), so a session idle inside a transaction for seconds is a host cut off in the
        // middle of one: the server ends it, so its row locks (which other hosts' claims skip)
        // do not hide its expired leases until TCP gives up hours later. Keepalives find a dead
        // peer of an idle session. A URL that sets `options` itself decides.
        if config.get_options().is_none() {
            config.options("-c idle_in_transaction_session_timeout=10s");
        }
        config.keepalives(true);
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(Duration::from_secs(30));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sendonce-pg")
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the PostgreSQL runtime", e))?;
        let pool = pool(config, watch, opts.pool_size)?;
        let store = PgStore {
            pool,
            rt: Some(rt),
            shown: PathBuf::from(shown),
            read_only: opts.read_only,
            secrets: secrets.to_vec(),
        };
        let (create, read_only) = (opts.create, opts.read_only);
        let shown = store.shown.display().to_string();
        store
            .transaction(|tx| migrate::migrate(tx, &shown, create, read_only))
            .map_err(|(e, _)| e)?;
        Ok(store)
    }

    /// Run `f`'s future on the store's runtime and wait for it (the sync/async bridge: see the
    /// module doc). Never panics, whatever thread calls it. Outside the store only
    /// `sendonce-bench` calls it, for the original design's loop on a table of its own
    /// (`tests/layers.rs`).
    pub fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(deadpool_postgres::Pool) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let Some(rt) = self.rt.as_ref() else {
            return Err(Error::db("the PostgreSQL store is closed"));
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let fut = f(self.pool.clone());
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .map_err(|_| Error::db("the PostgreSQL store stopped before it answered"))?
            .map_err(|e| hide(&self.secrets, e))
    }

    /// The URL without its password.
    pub fn shown(&self) -> &Path {
        &self.shown
    }
}

/// The connection pool: watched connections (`cleartext.rs`), plain ones, or TLS.
fn pool(config: tokio_postgres::Config, watch: bool, size: u32) -> Result<deadpool_postgres::Pool> {
    use tokio_postgres::config::SslMode;
    let manager_config = deadpool_postgres::ManagerConfig {
        recycling_method: deadpool_postgres::RecyclingMethod::Fast,
    };
    let manager = match config.get_ssl_mode() {
        _ if watch => {
            deadpool_postgres::Manager::from_connect(config, cleartext::Watched, manager_config)
        }
        SslMode::Disable | SslMode::Prefer => {
            deadpool_postgres::Manager::from_config(config, tokio_postgres::NoTls, manager_config)
        }
        _ => deadpool_postgres::Manager::from_config(config, tls()?, manager_config),
    };
    deadpool_postgres::Pool::builder(manager)
        .max_size(size.max(1) as usize)
        .build()
        .map_err(|e| Error::db(format!("PostgreSQL connection pool: {e}")))
}

/// The password the driver reads from `url` (in its user info or a `password=` parameter).
fn password_of(url: &str) -> Vec<Secret> {
    let url = cleartext::take_opt_in(url).map_or_else(|_| url.to_string(), |(u, _)| u);
    match url.parse::<tokio_postgres::Config>() {
        Ok(c) => c
            .get_password()
            .map(|p| Secret::new(String::from_utf8_lossy(p)))
            .into_iter()
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// `e` with every form of the password scrubbed from its message.
fn hide(secrets: &[Secret], e: Error) -> Error {
    Error::new(e.kind, sendonce_domain::redact::redact(&e.message, secrets))
}

/// rustls on ring, verifying the server against the webpki roots.
fn tls() -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_every_password_the_driver_would_read() {
        for (url, shown) in [
            (
                "postgres://app:s3cr/et@db/prod",
                "postgres://app:***@db/prod",
            ),
            (
                "postgres://app:a?b#c@db:5432/prod?sslmode=require",
                "postgres://app:***@db:5432/prod?sslmode=require",
            ),
            ("postgres://app@db/prod", "postgres://app@db/prod"),
            (
                "postgres://db/prod?user=app&password=pw",
                "postgres://db/prod?user=app&password=***",
            ),
            ("postgresql://app:pw@db", "postgresql://app:***@db"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
            let parsed: tokio_postgres::Config = url.parse().expect(url);
            if let Some(pw) = parsed.get_password() {
                assert!(
                    !redact(url).contains(std::str::from_utf8(pw).unwrap()),
                    "{url}"
                );
            }
        }
    }
}
