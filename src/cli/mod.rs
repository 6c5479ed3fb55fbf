//! The CLI layer: parsing and printing only. Each command turns its arguments into the typed
//! input of a use case in `app`, calls it, and prints either text for people or the use case's
//! output as one JSON document (`--json`). Exit codes come from `exit`.

mod admins;
pub mod args;
mod bounce;
mod campaigns;
pub mod config;

mod doctor;
mod events;
mod generate;
mod guard;
mod lists;
mod migrate_store;
mod preview;
mod report;
mod run;
mod serve;
mod subscribers;
mod templates;
mod tokens;

use args::*;
use sendonce_core::app::{self, accounts, doubts, import, limits, suppressions};
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::exit;
use sendonce_store::{OpenOptions, Store, Target};

/// What a command produced: a JSON document, the same for people, and its exit code.
pub struct Output {
    pub json: serde_json::Value,
    pub text: String,
    pub code: i32,
}

impl Output {
    pub(super) fn ok(json: serde_json::Value, text: impl Into<String>) -> Self {
        Output {
            json,
            text: text.into(),
            code: exit::SUCCESS,
        }
    }
    /// Output already written by the command itself (streamed reports).
    fn streamed() -> Self {
        Output {
            json: serde_json::Value::Null,
            text: String::new(),
            code: exit::SUCCESS,
        }
    }
}

/// Where `notify` keeps its ledger: `--state`, else the database `--db`/`SENDONCE_DB` names
/// when it is a postgres:// URL (a server several CI runners share), else the default state
/// file. A SQLite `--db` is not used: notify's file is its own (a CI cache carries it).
fn notify_state(cli: &Cli, a: &NotifyArgs) -> Option<Target> {
    let url = |t: &Target| matches!(t, Target::Postgres(_));
    a.state
        .as_deref()
        .map(Target::parse)
        .or_else(|| a.db.as_deref().map(Target::parse).filter(url))
        .or_else(|| Some(target(cli)).filter(url))
}

/// The store `--db` names (or `SENDONCE_DB`, the config file's `db`, the default file).
pub(super) fn target(cli: &Cli) -> Target {
    Target::parse(&cli.db)
}

/// A use case's output as the JSON document `--json` prints.
pub(super) fn to_json(out: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(out).unwrap_or_default()
}

pub(super) fn open_opts(cli: &Cli) -> Result<OpenOptions> {
    Ok(OpenOptions {
        busy_timeout: limits::BUSY_TIMEOUT.parse("--busy-timeout", &cli.busy_timeout)?,
        ..Default::default()
    })
}

pub(super) fn open(cli: &Cli) -> Result<std::sync::Arc<Store>> {
    sendonce_store::open(&target(cli), &open_opts(cli)?)
}

/// For commands that only read: nothing is written, so they work on a read-only file.
pub(super) fn open_read_only(cli: &Cli) -> Result<std::sync::Arc<Store>> {
    sendonce_store::open(
        &target(cli),
        &OpenOptions {
            read_only: true,
            ..open_opts(cli)?
        },
    )
}

/// Run one parsed command. Printing and exit codes are the caller's (main.rs).
pub fn dispatch(cli: &Cli, rt: &tokio::runtime::Runtime) -> Result<Output> {
    match &cli.command {
        Command::Init => init(cli),
        Command::Demo {
            recipients, dir, ..
        } => {
            let report = crate::demo::run(*recipients, dir.as_deref(), rt)?;
            Ok(Output::ok(to_json(&report), report.text()))
        }
        Command::Account(cmd) => account(cli, cmd),
        Command::Subscriber(cmd) => subscribers::command(cli, cmd),
        Command::List(cmd) => lists::command(cli, cmd),
        Command::Suppress(cmd) => suppress(cli, cmd),
        Command::Template(cmd) => templates::command(cli, cmd),
        Command::Token(cmd) => tokens::command(cli, cmd),
        Command::Events(cmd) => events::feed(cli, cmd),
        Command::Endpoint(cmd) => events::endpoint(cli, cmd),
        Command::Admin(cmd) => admins::command(cli, cmd),
        Command::Campaign(cmd) => campaigns::command(cli, cmd, rt),
        Command::Run(a) => run::run(cli, a, rt),
        Command::Serve(a) => serve::serve(cli, a, rt),
        Command::Bounce(a) => bounce::bounce(cli, a),
        Command::Doubts(cmd) => doubts(cli, cmd),
        Command::Adopt => guard::adopt(cli),
        Command::Backup { path } => guard::backup(cli, path),
        Command::Restore { backup } => guard::restore(cli, backup),
        Command::Check { campaigns, logs } => check(cli, campaigns, logs),
        Command::Notify(a) => notify(cli, a, rt),
        Command::FakeProvider(a) => sendonce_fake::run_cli(a, rt).map(|_| Output::streamed()),
        Command::Bench(a) => bench(cli, a, rt),
        Command::Completions { shell } => generate::completions(*shell, cli.json),
        Command::Manpage { dir } => generate::manpages(dir),
        Command::Doctor(a) => doctor::doctor(cli, a),
        Command::Config(cmd) => config::command(cli, cmd),
        Command::MigrateStore(a) => migrate_store::migrate_store(cli, a),
    }
}

fn init(cli: &Cli) -> Result<Output> {
    let target = target(cli);
    let store = sendonce_store::open(
        &target,
        &OpenOptions {
            create: true,
            ..open_opts(cli)?
        },
    )?;
    // A postgres:// URL is shown without its password.
    let shown = std::path::PathBuf::from(target.shown());
    let d = accounts::init(&store, &shown)?;
    let text = format!(
        "database ready: {} (schema {}, journal {}, installation {})",
        d.db.display(),
        d.schema_version,
        d.journal_mode,
        d.installation_id
    );
    Ok(Output::ok(to_json(&d), text))
}

fn account(cli: &Cli, cmd: &AccountCmd) -> Result<Output> {
    match cmd {
        AccountCmd::Add { name } => {
            let added = accounts::add(&*open(cli)?, name)?;
            Ok(Output::ok(to_json(&added), added.id.to_string()))
        }
        AccountCmd::List => {
            let list = accounts::list(&*open_read_only(cli)?)?;
            let mut text = String::from("ID\tNAME\tSUBSCRIBERS\tCAMPAIGNS\tCREATED");
            for a in &list.accounts {
                text.push_str(&format!(
                    "\n{}\t{}\t{}\t{}\t{}",
                    a.id,
                    a.name,
                    a.subscribers,
                    a.campaigns,
                    clock::format_ms(a.created_at)
                ));
            }
            Ok(Output::ok(to_json(&list), text))
        }
        AccountCmd::Update {
            account,
            sms_footer,
            tz,
            send_window,
            sms_hours,
        } => {
            let changes = accounts::Changes {
                sms_footer: sms_footer.clone(),
                tz: tz.clone(),
                send_window: send_window.clone(),
                sms_hours: sms_hours.clone(),
            };
            let u = accounts::update(&*open(cli)?, account, &changes)?;
            let footer = match &u.sms_footer {
                Some(f) => format!("SMS footer {f:?}"),
                None => "no SMS footer".to_string(),
            };
            let w = &u.windows;
            let text = format!(
                "account {}: {footer}; zone {}; send window {}; SMS quiet hours {}",
                u.id,
                w.tz,
                w.send_window.as_deref().unwrap_or("any"),
                w.sms_hours.as_deref().unwrap_or("off")
            );
            Ok(Output::ok(to_json(&u), text))
        }
    }
}

fn suppress(cli: &Cli, cmd: &SuppressCmd) -> Result<Output> {
    match cmd {
        SuppressCmd::Add {
            account,
            channel,
            address,
            reason,
        } => {
            let entry = suppressions::Entry::new(channel.parse()?, address)?;
            let added = suppressions::add(&*open(cli)?, account, &entry, reason)?;
            let (addr, ch) = (&added.address, added.channel);
            let text = if added.added {
                format!("suppressed {addr} ({ch})")
            } else {
                format!("{addr} ({ch}) was already suppressed")
            };
            Ok(Output::ok(to_json(&added), text))
        }
        SuppressCmd::Remove {
            account,
            channel,
            address,
        } => {
            let entry = suppressions::Entry::new(channel.parse()?, address)?;
            let removed = suppressions::remove(&*open(cli)?, account, &entry)?;
            let text = format!(
                "removed {} ({}) from the suppression list",
                removed.address, removed.channel
            );
            Ok(Output::ok(to_json(&removed), text))
        }
        SuppressCmd::List { account } => {
            let list = suppressions::list(&*open_read_only(cli)?, account)?;
            let mut text = String::new();
            for s in &list.suppressions {
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    s.channel,
                    s.address,
                    s.reason,
                    s.source,
                    clock::format_ms(s.created_at)
                ));
            }
            if list.suppressions.is_empty() {
                text.push_str("no suppressions");
            }
            Ok(Output::ok(to_json(&list), text.trim_end().to_string()))
        }
    }
}

pub(super) fn sync_of(s: SyncArg) -> sendonce_store::Synchronous {
    match s {
        SyncArg::Full => sendonce_store::Synchronous::Full,
        SyncArg::Normal => sendonce_store::Synchronous::Normal,
    }
}

fn bench(cli: &Cli, a: &BenchArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let batch = limits::count_in("--batch", a.batch, limits::BATCH)?;
    let concurrency = limits::count_in("--concurrency", a.concurrency, limits::CONCURRENCY)?;
    let recipients = limits::at_least("--recipients", a.recipients, 100)?;
    let db = Target::parse(a.db.as_ref().unwrap_or(&cli.db));
    if let Some(url) = &a.compare_pg {
        // Never repeat the value: it may hold a password.
        if Target::parse(std::path::Path::new(url)).url().is_none() {
            return Err(Error::invalid(
                "--compare-pg (SENDONCE_BENCH_PG) must be a postgres:// or postgresql:// URL",
            ));
        }
        if a.only.is_some() || db.url().is_some() {
            return Err(Error::invalid(
                "--compare-pg (SENDONCE_BENCH_PG) goes with the whole SQLite bench only: \
                 not with --only, nor with --db postgres://… (which compares the two loops \
                 on the PostgreSQL store itself)",
            ));
        }
    }
    if let Target::Postgres(url) = db {
        let opts = sendonce_bench::bench_pg::Options {
            url,
            recipients,
            batch,
            concurrency,
        };
        let report = sendonce_bench::bench_pg::run(&opts)?;
        return Ok(Output::ok(to_json(&report), report.table()));
    }
    if a.only == Some(BenchSection::Inbox) {
        let opts = sendonce_bench::bench_inbox::Options {
            messages: limits::at_least("--scale", a.scale.unwrap_or(100_000), 1000)?,
            dir: a.dir.clone(),
        };
        let report = sendonce_bench::bench_inbox::run(&opts, rt)?;
        return Ok(Output::ok(to_json(&report), report.table()));
    }
    let scale = limits::at_least("--scale", a.scale.unwrap_or(1_000_000), 1000)?;
    let latency = limits::bench_latency(&a.latency)?;
    let opts = sendonce_bench::bench::Options {
        recipients,
        batch,
        sync: sync_of(a.sync),
        latency,
        concurrency,
        scale,
        dir: a.dir.clone(),
        compare_pg: a.compare_pg.clone(),
    };
    if a.only == Some(BenchSection::Http) {
        return bench_http(a, rt);
    }
    if a.only == Some(BenchSection::Dashboard) {
        let opts = sendonce_bench::bench_dashboard::Options {
            recipients: scale,
            sync: opts.sync,
            dir: opts.dir.clone(),
        };
        let report = sendonce_bench::bench_dashboard::run(&opts, rt)?;
        return Ok(Output::ok(to_json(&report), report.table()));
    }
    if a.only == Some(BenchSection::Throughput) {
        let report = sendonce_bench::bench_throughput::run(&opts, rt)?;
        return Ok(Output::ok(to_json(&report), report.table()));
    }
    if a.only == Some(BenchSection::ListBuild) {
        let report = sendonce_bench::bench::run_list_build(&opts)?;
        return Ok(Output::ok(to_json(&report), report.table()));
    }
    let report = sendonce_bench::bench::run(&opts, rt)?;
    Ok(Output::ok(to_json(&report), report.table()))
}

/// `sendonce bench --only http`.
fn bench_http(a: &BenchArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let clients = limits::count_in("--clients", a.clients, (1, 1024))?;
    let seconds = limits::count_in("--seconds", a.seconds as usize, (1, 3600))?;
    let opts = sendonce_bench::bench_http::Options {
        clients,
        duration: std::time::Duration::from_secs(seconds as u64),
        dir: a.dir.clone(),
    };
    let report = sendonce_bench::bench_http::run(&opts, rt)?;
    Ok(Output::ok(to_json(&report), report.table()))
}

fn doubts(cli: &Cli, cmd: &DoubtsCmd) -> Result<Output> {
    match cmd {
        DoubtsCmd::List { campaign } => {
            let list = doubts::list(&*open_read_only(cli)?, *campaign)?;
            let mut text = String::new();
            for r in &list.in_doubt {
                text.push_str(&format!(
                    "{}\t{}\t{}\tattempts={}\tsince={}\t{}\n",
                    r.send_id,
                    r.job_id,
                    r.address,
                    r.attempts,
                    r.doubt_since.map(clock::format_ms).unwrap_or_default(),
                    r.reason.clone().unwrap_or_default()
                ));
            }
            if list.in_doubt.is_empty() {
                text.push_str("no sends in doubt");
            }
            Ok(Output::ok(to_json(&list), text.trim_end().to_string()))
        }
        DoubtsCmd::Resolve {
            send_id,
            as_sent,
            requeue,
            by,
        } => {
            let user = std::env::var("USER").ok();
            let decision = doubts::Decision::new(*send_id, *as_sent, *requeue, by.clone(), user)?;
            let r = doubts::resolve(&*open(cli)?, &decision)?;
            let text = format!("send {} is now {}", r.send_id, r.status);
            Ok(Output::ok(to_json(&r), text))
        }
    }
}

fn check(cli: &Cli, campaigns: &[i64], logs: &[std::path::PathBuf]) -> Result<Output> {
    let report = app::check::check_logs(&*open_read_only(cli)?, campaigns, logs)?;
    Ok(Output {
        json: to_json(&report),
        text: report.table(),
        code: exit::for_verdict(report.pass),
    })
}

fn notify(cli: &Cli, a: &NotifyArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    let message = match (&a.message, &a.message_file) {
        (Some(m), _) => m.clone(),
        (None, Some(f)) => import::read_body_file("--message-file", f)?,
        (None, None) => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                return Err(Error::invalid(
                    "no message: pass --message TEXT, --message-file F, or pipe it on stdin",
                ));
            }
            import::read_body_stdin()?
        }
    };
    let req = app::notify::Request {
        to: a.to.clone(),
        message,
        subject: a.subject.clone(),
        from: a.from.clone(),
        key: a.key.clone(),
        channel: a.channel.as_deref().map(str::parse).transpose()?,
        provider: a.provider.clone(),
        state: notify_state(cli, a),
        dry_run: a.dry_run,
    };
    let report = app::notify::run(&req, &|k| std::env::var(k).ok(), rt)?;
    Ok(Output {
        json: to_json(&report),
        text: report.text(),
        code: exit::for_outcome(report.outcome()),
    })
}

/// The store a command used, added once to its `--json` document as `"store": "sqlite"` or
/// `"postgres"` (main.rs calls this on every command's output). Commands that open no store of
/// the user's (demo, bench, fake-provider, completions, manpage, config) are left alone, and so
/// are streamed outputs (no document) and a document that already says (doctor's).
pub fn tag_store(cli: &Cli, mut out: Output) -> Output {
    let store = match &cli.command {
        Command::Demo { .. }
        | Command::FakeProvider(_)
        | Command::Bench(_)
        | Command::Completions { .. }
        | Command::Manpage { .. }
        | Command::Config(_) => None,
        Command::Notify(a) => Some(notify_state(cli, a).map_or("sqlite", |t| t.kind())),
        _ => Some(target(cli).kind()),
    };
    if let (Some(store), serde_json::Value::Object(doc)) = (store, &mut out.json) {
        doc.entry("store").or_insert_with(|| store.into());
    }
    out
}
