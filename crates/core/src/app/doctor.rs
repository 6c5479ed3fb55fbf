//! `sendonce doctor`: the database and its files looked at without writing anything, each
//! finding with a level (ok, warn, fail) and, when not ok, what to run.

use sendonce_domain::clock;
use sendonce_domain::error::Result;
use sendonce_store::doctor::{InspectOptions, Inspection};
use sendonce_store::prelude::*;
use sendonce_store::{GuardState, OpenOptions, Target, Watermark, APPLICATION_ID, SCHEMA_VERSION};
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A WAL above this many bytes is a finding: a worker checkpoints it past
/// `WAL_CHECKPOINT_BYTES` (16 MiB), so a larger one means a reader pins it or no worker runs.
pub const WAL_WARN_BYTES: u64 = 4 * sendonce_store::sqlite::WAL_CHECKPOINT_BYTES;

/// A campaign whose next row is due further away than this is reported as stuck.
pub const FAR_MS: i64 = 6 * 3600 * 1000;

/// The hint of a ledger question the file could not answer.
const SEE_CHECK: &str = "the file did not answer: see the quick_check line";

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        }
    }
}

/// One thing `doctor` looked at.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub name: String,
    pub level: Level,
    pub detail: String,
    /// What to run (None when ok).
    pub hint: Option<String>,
}

/// The whole look.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub store: &'static str,
    pub path: String,
    /// No finding above ok.
    pub healthy: bool,
    pub findings: Vec<Finding>,
}

/// What to look at.
#[derive(Debug, Clone)]
pub struct Request {
    pub db: Target,
    /// `integrity_check` instead of `quick_check`.
    pub full: bool,
    /// The config file whose routes are built (None: the one `config::discover` finds).
    pub config: Option<PathBuf>,
    /// The default provider spec (`--provider`, `SENDONCE_PROVIDER`).
    pub provider: Option<String>,
}

fn finding(name: &str, level: Level, detail: String, hint: Option<String>) -> Finding {
    Finding {
        name: name.into(),
        level,
        detail,
        hint: if level == Level::Ok { None } else { hint },
    }
}

fn side(db: &Path, suffix: &str) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// Look at the database `req.db` and its files; nothing is written.
pub fn run(req: &Request) -> Result<Report> {
    // A postgres:// URL is shown without its password.
    let shown = req.db.shown();
    let ins = sendonce_store::doctor::inspect(
        &req.db,
        &InspectOptions {
            full: req.full,
            now: clock::now_ms(),
            far_ms: FAR_MS,
        },
    )?;
    let Target::File(db) = &req.db else {
        return Ok(postgres(req, &ins, shown));
    };
    // A mistyped path is not damage: say so, and nothing about backups.
    if !db.exists() {
        let f = vec![finding(
            "open",
            Level::Fail,
            format!("no such file: {shown}"),
            Some(format!(
                "check --db (or SENDONCE_DB, or db in the config file); `sendonce init --db \
                 {shown}` makes a new database there"
            )),
        )];
        return Ok(Report {
            store: "sqlite",
            path: shown,
            healthy: false,
            findings: f,
        });
    }
    let mut f = Vec::new();
    f.push(opened(&ins, &shown));
    if ins.opened.is_ok() {
        f.push(integrity(&ins, req.full, &shown));
        f.push(foreign_keys(&ins, &shown));
        f.extend(identity(&ins, &shown));
        f.push(guard(&ins, &shown));
        f.push(leases(&ins));
        f.push(doubts(&ins));
        f.push(stuck(&ins, &shown));
        f.extend(addresses(&ins, &shown));
        f.extend(endpoints(&ins));
    }
    f.push(file_modes(db));
    let wal = std::fs::metadata(side(db, "-wal")).map_or(0, |m| m.len());
    f.push(wal_size(wal));
    f.push(disk(db, wal));
    f.extend(routes(req, ins.schema_version == Ok(SCHEMA_VERSION)));
    Ok(Report {
        store: "sqlite",
        path: shown,
        healthy: f.iter().all(|x| x.level == Level::Ok),
        findings: f,
    })
}

fn restore_hint(db: &str) -> String {
    format!(
        "stop every worker, then put the latest backup back: `sendonce restore BACKUP --db {db}` \
         (nothing is sent from a damaged file)"
    )
}

fn opened(ins: &Inspection, db: &str) -> Finding {
    match &ins.opened {
        Ok(()) if ins.snapshot => finding(
            "open",
            Level::Ok,
            "opened read-only as an immutable snapshot (the directory is not writable and no \
             process holds the file)"
                .into(),
            None,
        ),
        Ok(()) => finding("open", Level::Ok, "opened read-only".into(), None),
        Err(e) => finding(
            "open",
            Level::Fail,
            format!("does not open as a sendonce database: {e}"),
            Some(restore_hint(db)),
        ),
    }
}

fn integrity(ins: &Inspection, full: bool, db: &str) -> Finding {
    let name = if full {
        "integrity_check"
    } else {
        "quick_check"
    };
    let mut hint = restore_hint(db);
    if !full {
        hint.push_str(&format!(
            "; `sendonce doctor --full --db {db}` runs the complete integrity_check"
        ));
    }
    match &ins.check {
        Ok(p) if p.is_empty() => finding(name, Level::Ok, "ok".into(), None),
        Ok(p) => {
            let first: Vec<&str> = p.iter().take(3).map(String::as_str).collect();
            finding(
                name,
                Level::Fail,
                format!(
                    "{} problem(s): {}{}",
                    p.len(),
                    first.join("; "),
                    if p.len() > 3 { "; …" } else { "" }
                ),
                Some(hint),
            )
        }
        Err(e) => finding(name, Level::Fail, format!("could not run: {e}"), Some(hint)),
    }
}

fn foreign_keys(ins: &Inspection, db: &str) -> Finding {
    match &ins.foreign_keys {
        Ok((_, 0)) => finding("foreign_key_check", Level::Ok, "ok".into(), None),
        Ok((lines, n)) => finding(
            "foreign_key_check",
            Level::Fail,
            format!(
                "{n} row(s) point to missing rows: {}",
                lines
                    .iter()
                    .take(3)
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Some(restore_hint(db)),
        ),
        Err(e) => finding(
            "foreign_key_check",
            Level::Fail,
            format!("could not run: {e}"),
            Some(restore_hint(db)),
        ),
    }
}

fn identity(ins: &Inspection, db: &str) -> Vec<Finding> {
    let schema = match &ins.schema_version {
        Ok(v) if *v == SCHEMA_VERSION => finding(
            "schema",
            Level::Ok,
            format!("version {v}, as this binary"),
            None,
        ),
        Ok(v) if *v < SCHEMA_VERSION => finding(
            "schema",
            Level::Warn,
            format!("version {v}, older than this binary's {SCHEMA_VERSION}"),
            Some(format!(
                "`sendonce init --db {db}` upgrades it (a worker also does when it starts)"
            )),
        ),
        Ok(v) => finding(
            "schema",
            Level::Fail,
            format!(
                "version {v}, newer than this binary's {SCHEMA_VERSION}: this binary refuses it"
            ),
            Some("install the newer sendonce that wrote it".into()),
        ),
        Err(e) => finding("schema", Level::Fail, e.clone(), Some(restore_hint(db))),
    };
    let app = match &ins.application_id {
        Ok(id) if *id == APPLICATION_ID => finding(
            "application_id",
            Level::Ok,
            format!("{id:#x} (sendonce)"),
            None,
        ),
        Ok(id) => finding(
            "application_id",
            Level::Warn,
            format!("{id:#x}: a file from before the mark"),
            Some(format!("`sendonce init --db {db}` marks it")),
        ),
        Err(e) => finding(
            "application_id",
            Level::Fail,
            e.clone(),
            Some(restore_hint(db)),
        ),
    };
    vec![schema, app]
}

fn guard_detail(st: &GuardState) -> String {
    let owner = st
        .owner
        .as_ref()
        .map_or("none recorded yet".to_string(), |o| o.to_string());
    let beat = st
        .heartbeat_at
        .map_or("never".to_string(), clock::format_ms);
    let mark = match &st.watermark {
        Watermark::Missing => "none".to_string(),
        Watermark::At { generation, at, .. } => {
            format!("{generation} (written {})", clock::format_ms(*at))
        }
        Watermark::Unreadable { reason } => format!("unreadable ({reason})"),
    };
    format!(
        "owner {owner}; last claim {beat}; generation {}; watermark {mark}",
        st.generation
    )
}

fn guard(ins: &Inspection, db: &str) -> Finding {
    match &ins.guard {
        None if matches!(ins.schema_version, Ok(v) if v > SCHEMA_VERSION) => finding(
            "clone_guard",
            Level::Warn,
            "not read: the schema is newer than this binary".into(),
            Some("install the newer sendonce that wrote it".into()),
        ),
        None => finding(
            "clone_guard",
            Level::Warn,
            "the schema is older than the clone guard".into(),
            Some(format!("`sendonce init --db {db}` upgrades it")),
        ),
        Some(Err(e)) => finding(
            "clone_guard",
            Level::Fail,
            format!("cannot be read: {e}"),
            Some(restore_hint(db)),
        ),
        Some(Ok(st)) => match crate::app::guard::refusal(st) {
            None => finding("clone_guard", Level::Ok, guard_detail(st), None),
            // A file moved to PostgreSQL is not adopted back (`adopt` refuses it): the hint
            // is the database it moved to.
            Some(why) if st.moved_to.is_some() => finding(
                "clone_guard",
                Level::Warn,
                format!("sending from this file is refused: {why}"),
                Some(
                    "run the workers, `serve` and `doctor` with `--db` set to the PostgreSQL \
                     URL (SENDONCE_DB); this file stays readable for `campaign status` and \
                     `report`"
                        .into(),
                ),
            ),
            Some(why) => finding(
                "clone_guard",
                Level::Fail,
                format!("sending is refused: {why} [{}]", guard_detail(st)),
                Some(format!(
                    "only if this is the file to keep sending from: `sendonce adopt --db {db}`"
                )),
            ),
        },
    }
}

fn leases(ins: &Inspection) -> Finding {
    match &ins.expired_leases {
        Ok(v) if v.is_empty() => finding("expired_leases", Level::Ok, "none".into(), None),
        Ok(v) => finding(
            "expired_leases",
            Level::Warn,
            format!(
                "rows still leased after their lease ran out (a worker stopped without \
                 finishing them): {}",
                per_campaign(v)
            ),
            Some(
                "start a worker (`sendonce run`): it takes them back; those already dispatched \
                 are retried with the same key inside an idempotent provider's window, otherwise \
                 parked in doubt"
                    .into(),
            ),
        ),
        Err(e) => finding(
            "expired_leases",
            Level::Fail,
            e.clone(),
            Some(SEE_CHECK.into()),
        ),
    }
}

fn per_campaign(v: &[sendonce_store::doctor::PerCampaign]) -> String {
    v.iter()
        .map(|p| format!("campaign {}: {}", p.campaign_id, p.rows))
        .collect::<Vec<_>>()
        .join(", ")
}

fn doubts(ins: &Inspection) -> Finding {
    match &ins.in_doubt {
        Ok(v) if v.is_empty() => finding("in_doubt", Level::Ok, "none".into(), None),
        Ok(v) => finding(
            "in_doubt",
            Level::Warn,
            format!("rows whose delivery is unknown: {}", per_campaign(v)),
            Some(format!(
                "`sendonce doubts list --campaign {}`, then `sendonce doubts resolve ID --as-sent|--requeue`",
                v[0].campaign_id
            )),
        ),
        Err(e) => finding("in_doubt", Level::Fail, e.clone(), Some(SEE_CHECK.into())),
    }
}

/// What normalising the stored addresses found at the upgrade (schema 0017 / postgres 0004):
/// rows that became one address (an opt-out always won) and addresses the rules now refuse.
/// Ok once done (the table keeps the record); a warning while the step has not run.
fn addresses(ins: &Inspection, db: &str) -> Option<Finding> {
    let name = "addresses";
    let counts = match ins.addresses.as_ref()? {
        Ok(v) => v,
        Err(e) => {
            return Some(finding(
                name,
                Level::Fail,
                e.clone(),
                Some(SEE_CHECK.into()),
            ))
        }
    };
    if counts.iter().any(|(k, _)| k == "pending") {
        return Some(finding(
            name,
            Level::Warn,
            "the upgrade's address normalisation has not run yet".into(),
            Some(format!(
                "open the database for writing once: `sendonce init --db {db}`"
            )),
        ));
    }
    let detail = match counts.is_empty() {
        true => "normalised at the upgrade; no collisions".into(),
        false => format!(
            "normalised at the upgrade; table address_collisions records {} (an opt-out always \
             won; `invalid` rows were left as they were)",
            counts
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Some(finding(name, Level::Ok, detail, None))
}

/// Webhook endpoints the circuit breaker turned off (events out).
fn endpoints(ins: &Inspection) -> Option<Finding> {
    let name = "webhook_endpoints";
    let broken = match ins.broken_endpoints.as_ref()? {
        Ok(v) => v,
        Err(e) => {
            return Some(finding(
                name,
                Level::Fail,
                e.clone(),
                Some(SEE_CHECK.into()),
            ))
        }
    };
    let Some((id, account)) = broken.first() else {
        return Some(finding(
            name,
            Level::Ok,
            "none turned off by failures".into(),
            None,
        ));
    };
    let list = broken
        .iter()
        .map(|(id, account)| format!("{id} (account {account})"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(finding(
        name,
        Level::Warn,
        format!(
            "turned off after five days of failed deliveries: endpoint {list}; their events wait"
        ),
        Some(format!(
            "fix the receiver, then `sendonce endpoint update --account {account} {id} --enable` \
             (and `endpoint show` for the attempt log)"
        )),
    ))
}

fn stuck(ins: &Inspection, db: &str) -> Finding {
    let v = match &ins.stuck {
        Ok(v) if v.is_empty() => {
            return finding(
                "campaigns_sending",
                Level::Ok,
                "none stuck in sending".into(),
                None,
            )
        }
        Ok(v) => v,
        Err(e) => {
            return finding(
                "campaigns_sending",
                Level::Fail,
                e.clone(),
                Some(SEE_CHECK.into()),
            )
        }
    };
    let mut parts = Vec::new();
    let mut hints = Vec::new();
    for s in v {
        let id = s.campaign_id;
        match s.next_visible_at {
            Some(t) => {
                parts.push(format!(
                    "campaign {id}: {} row(s) left, the next due {}",
                    s.due_rows,
                    clock::format_ms(t)
                ));
                let what = match s.windowed {
                    true => "its send window, or a retry's backoff",
                    false => "its retry backoff",
                };
                hints.push(format!(
                    "campaign {id} waits for {what}; `sendonce campaign status {id}`"
                ));
            }
            None if s.in_doubt > 0 => {
                parts.push(format!(
                    "campaign {id}: nothing left to send but {} row(s) in doubt",
                    s.in_doubt
                ));
                hints.push(format!(
                    "resolve them: `sendonce doubts list --campaign {id}`"
                ));
            }
            None => {
                parts.push(format!(
                    "campaign {id}: nothing left to send, still marked sending"
                ));
                hints.push(format!("`sendonce run --once --db {db}` finishes it"));
            }
        }
    }
    finding(
        "campaigns_sending",
        Level::Warn,
        parts.join("; "),
        Some(hints.join("; ")),
    )
}

fn file_modes(db: &Path) -> Finding {
    let mut loose = Vec::new();
    let mut owners = std::collections::BTreeMap::<u32, Vec<String>>::new();
    let mut seen = Vec::new();
    for suffix in ["", "-wal", "-shm", "-watermark"] {
        let p = side(db, suffix);
        let Ok(m) = std::fs::metadata(&p) else {
            continue;
        };
        let name = p.display().to_string();
        let mode = m.mode() & 0o777;
        if mode & 0o077 != 0 {
            loose.push(format!("{name} is {mode:04o}"));
        }
        owners.entry(m.uid()).or_default().push(name.clone());
        seen.push(format!("{} {mode:04o} uid {}", suffix_or(suffix), m.uid()));
    }
    if seen.is_empty() {
        return finding(
            "file_modes",
            Level::Fail,
            format!("{} cannot be read", db.display()),
            None,
        );
    }
    let mut problems = Vec::new();
    let mut hints = Vec::new();
    if !loose.is_empty() {
        problems.push(format!(
            "readable or writable by group or others: {}",
            loose.join(", ")
        ));
        hints.push(format!(
            "`chmod 600 {}*` (the database holds addresses and tokens' hashes)",
            db.display()
        ));
    }
    if owners.len() > 1 {
        problems.push(format!(
            "the files have different owners ({}): a process running as another user made some",
            owners
                .iter()
                .map(|(uid, files)| format!("uid {uid}: {}", files.join(" ")))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        hints.push(format!(
            "`chown` them all to the user the service runs as (`{}*`)",
            db.display()
        ));
    }
    if problems.is_empty() {
        return finding("file_modes", Level::Ok, seen.join(", "), None);
    }
    finding(
        "file_modes",
        Level::Warn,
        problems.join("; "),
        Some(hints.join("; ")),
    )
}

fn suffix_or(s: &str) -> &str {
    if s.is_empty() {
        "db"
    } else {
        s.trim_start_matches('-')
    }
}

fn wal_size(wal: u64) -> Finding {
    if wal > WAL_WARN_BYTES {
        finding(
            "wal",
            Level::Warn,
            format!(
                "the write-ahead log is {} (a worker truncates it past {})",
                mib(wal),
                mib(sendonce_store::sqlite::WAL_CHECKPOINT_BYTES)
            ),
            Some(
                "a long reader keeps it pinned (a stuck report, an open sqlite3 shell), or no \
                 worker runs: stop the reader; a running worker checkpoints it"
                    .into(),
            ),
        )
    } else {
        finding("wal", Level::Ok, mib(wal), None)
    }
}

/// Free bytes for this user on the filesystem holding `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs fills the struct we own from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Free space against what the file needs: the WAL can grow to the checkpoint threshold (or
/// today's size, if larger) before a checkpoint; a backup (`VACUUM INTO`) or a `restore` needs
/// about the database's size again, twice to be safe.
fn disk(db: &Path, wal: u64) -> Finding {
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let size = std::fs::metadata(db).map_or(0, |m| m.len());
    let free = match free_bytes(&dir) {
        Ok(n) => n,
        Err(e) => {
            return finding(
                "disk",
                Level::Warn,
                format!("cannot read the free space of {}: {e}", dir.display()),
                None,
            )
        }
    };
    let wal_room = wal.max(sendonce_store::sqlite::WAL_CHECKPOINT_BYTES);
    let backup_room = size.saturating_mul(2).saturating_add(wal);
    let detail = format!(
        "{} free in {}; database {}, WAL {}",
        mib(free),
        dir.display(),
        mib(size),
        mib(wal)
    );
    let hint = Some(format!("free space on the filesystem of {}", dir.display()));
    if free < wal_room {
        finding(
            "disk",
            Level::Fail,
            format!(
                "{detail}: less than the WAL may need ({}); a full disk stops every write",
                mib(wal_room)
            ),
            hint,
        )
    } else if free < backup_room {
        finding(
            "disk",
            Level::Warn,
            format!(
                "{detail}: less than twice the database plus the WAL ({}), what a backup or a \
                 restore needs",
                mib(backup_room)
            ),
            hint,
        )
    } else {
        finding("disk", Level::Ok, detail, None)
    }
}

/// Build every provider the config file (and `--provider`) names, as `run` would, without
/// sending. An outbox file that does not exist yet is not created: its directory is checked.
fn routes(req: &Request, schema_current: bool) -> Vec<Finding> {
    let cfg = match crate::config::Config::load(req.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            return vec![finding(
                "config",
                Level::Fail,
                e.message,
                Some("fix the config file (`sendonce run` refuses to start with it)".into()),
            )]
        }
    };
    let specs = route_specs(req, cfg.as_ref());
    if specs.is_empty() {
        return vec![finding(
            "provider",
            Level::Ok,
            "no config file and no --provider: nothing to build (`sendonce run` needs one)".into(),
            None,
        )];
    }
    let store = if schema_current {
        sendonce_store::open(
            &req.db,
            &OpenOptions {
                read_only: true,
                pool_size: 1,
                ..Default::default()
            },
        )
        .ok()
    } else {
        None
    };
    specs
        .into_iter()
        .map(|(name, spec, account)| {
            let built = build(&spec).and_then(|()| match (&account, &store) {
                (Some(crate::config::AccountRef::Id(id)), Some(s)) => s.account_exists(*id),
                (Some(crate::config::AccountRef::Name(n)), Some(s)) => {
                    s.account_id_by_name(n).map(|_| ())
                }
                _ => Ok(()),
            });
            let kind = provider_kind(&spec);
            match built {
                Ok(()) => finding(&name, Level::Ok, format!("{kind} builds"), None),
                Err(e) => finding(
                    &name,
                    Level::Fail,
                    format!("{kind}: {}", e.message),
                    Some(
                        "fix the spec or its secret (environment variable or *_file=); `sendonce \
                         run` refuses to start until it builds"
                            .into(),
                    ),
                ),
            }
        })
        .collect()
}

/// The default provider (flag, else the file's) and each route: (name, spec, account).
fn route_specs(
    req: &Request,
    cfg: Option<&crate::config::Config>,
) -> Vec<(String, String, Option<crate::config::AccountRef>)> {
    let mut specs = Vec::new();
    let default = req
        .provider
        .clone()
        .or_else(|| cfg.and_then(|c| c.provider.clone()));
    if let Some(spec) = default {
        specs.push(("provider".into(), spec, None));
    }
    for (i, r) in cfg.map_or(&[][..], |c| &c.route[..]).iter().enumerate() {
        specs.push((
            format!("route {}", i + 1),
            r.provider.clone(),
            r.account.clone(),
        ));
    }
    specs
}

/// The provider's name without the rest of the spec (which may hold a user name).
fn provider_kind(spec: &str) -> String {
    spec.split([':', '?', '#']).next().unwrap_or("").to_string()
}

fn build(spec: &str) -> Result<()> {
    if let Some(rest) = spec.strip_prefix("outbox:") {
        let path = Path::new(rest.split_once('?').map_or(rest, |(p, _)| p));
        if !path.as_os_str().is_empty() && !path.exists() {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                return Err(sendonce_domain::error::Error::invalid(format!(
                    "the outbox's directory {} does not exist",
                    dir.display()
                )));
            }
            return Ok(());
        }
    }
    crate::provider::from_spec(spec).map(|_| ())
}

/// The findings for a PostgreSQL database: the server, the schema, the consistency checks, the
/// ledger's rows, leases, doubts and stuck campaigns as on SQLite; what is about files (modes,
/// WAL, free disk, SQLite's pragmas) says "not applicable".
fn postgres(req: &Request, ins: &Inspection, shown: String) -> Report {
    let mut f = Vec::new();
    f.push(pg_opened(ins, &shown));
    if ins.opened.is_ok() {
        f.push(pg_server(ins));
        f.push(pg_schema(ins, &shown));
        f.push(pg_consistency(ins));
        f.push(pg_ledger(ins));
        f.push(leases(ins));
        f.push(doubts(ins));
        f.push(stuck(ins, &shown));
        f.push(pg_guard(ins));
        f.extend(addresses(ins, &shown));
        f.extend(endpoints(ins));
    }
    for name in [
        "integrity_check",
        "foreign_key_check",
        "application_id",
        "file_modes",
        "wal",
        "disk",
    ] {
        f.push(finding(
            name,
            Level::Ok,
            "not applicable: a PostgreSQL server keeps the files and enforces the constraints"
                .into(),
            None,
        ));
    }
    let current = ins.schema_version == Ok(i64::from(sendonce_store::postgres::SCHEMA_VERSION));
    f.extend(routes(req, current));
    Report {
        store: "postgres",
        path: shown,
        healthy: f.iter().all(|x| x.level == Level::Ok),
        findings: f,
    }
}

fn pg_opened(ins: &Inspection, db: &str) -> Finding {
    match &ins.opened {
        Ok(()) => finding(
            "reachable",
            Level::Ok,
            "connected read-only (nothing migrated, nothing written)".into(),
            None,
        ),
        Err(e) => finding(
            "reachable",
            Level::Fail,
            format!("does not open as a sendonce database: {e}"),
            Some(format!(
                "check that the server is up and the URL's host, port, user, password and \
                 database; a new database gets its schema from `sendonce init --db {db}`"
            )),
        ),
    }
}

fn pg_server(ins: &Inspection) -> Finding {
    match &ins.server {
        Some(Ok(v)) => finding("server", Level::Ok, format!("PostgreSQL {v}"), None),
        Some(Err(e)) => finding(
            "server",
            Level::Warn,
            format!("version not read: {e}"),
            None,
        ),
        None => finding("server", Level::Warn, "version not read".into(), None),
    }
}

fn pg_schema(ins: &Inspection, db: &str) -> Finding {
    let want = i64::from(sendonce_store::postgres::SCHEMA_VERSION);
    match &ins.schema_version {
        Ok(v) if *v == want => finding(
            "schema",
            Level::Ok,
            format!("version {v}, as this binary"),
            None,
        ),
        Ok(v) if *v < want => finding(
            "schema",
            Level::Warn,
            format!("version {v}, older than this binary's {want}"),
            Some(format!(
                "`sendonce init --db {db}` upgrades it (a worker also does when it starts)"
            )),
        ),
        Ok(v) => finding(
            "schema",
            Level::Fail,
            format!("version {v}, newer than this binary's {want}: this binary refuses it"),
            Some("install the newer sendonce that wrote it".into()),
        ),
        Err(e) => finding("schema", Level::Fail, e.clone(), None),
    }
}

fn pg_consistency(ins: &Inspection) -> Finding {
    match &ins.check {
        Ok(p) if p.is_empty() => finding("consistency", Level::Ok, "ok".into(), None),
        Ok(p) => finding(
            "consistency",
            Level::Fail,
            format!("{} problem(s): {}", p.len(), p.join("; ")),
            Some(
                "stop every worker and look at the rows named; restore the database with \
                 PostgreSQL's own tools if it was damaged"
                    .into(),
            ),
        ),
        Err(e) => finding(
            "consistency",
            Level::Fail,
            format!("could not run: {e}"),
            None,
        ),
    }
}

fn pg_ledger(ins: &Inspection) -> Finding {
    match &ins.ledger {
        Some(Ok(counts)) if counts.is_empty() => {
            finding("ledger", Level::Ok, "no rows yet".into(), None)
        }
        Some(Ok(counts)) => {
            let total: u64 = counts.iter().map(|(_, n)| n).sum();
            let each: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
            finding(
                "ledger",
                Level::Ok,
                format!("{total} row(s): {}", each.join(", ")),
                None,
            )
        }
        Some(Err(e)) => finding("ledger", Level::Fail, format!("not read: {e}"), None),
        None => finding("ledger", Level::Fail, "not read".into(), None),
    }
}

/// PostgreSQL has no clone guard (every host shares the one database by design): what it
/// keeps is the claim counter. Claims there write no last-claim time (one row every claim of
/// every host would update); the guard row's time is the one `migrate-store` copied, so it is
/// not shown.
fn pg_guard(ins: &Inspection) -> Finding {
    match &ins.guard {
        Some(Ok(st)) => finding(
            "claims",
            Level::Ok,
            format!(
                "claim generation {} (shared by every host; PostgreSQL keeps no last-claim time)",
                st.generation
            ),
            None,
        ),
        Some(Err(e)) => finding("claims", Level::Fail, format!("not read: {e}"), None),
        None => finding(
            "claims",
            Level::Warn,
            "not read: the schema is not this binary's".into(),
            None,
        ),
    }
}
