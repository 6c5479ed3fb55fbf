//! The CLI layer: turns parsed arguments into validated calls on the store and the worker, and
//! prints either text for people or one JSON document (`--json`). Exit codes come from `exit`.

pub mod args;
mod report;
mod run;
mod subscribers;

use crate::app::import;
use crate::domain::address::Channel;
use crate::domain::{clock, template};
use crate::error::{Error, Result};
use crate::exit;
use crate::store::{NewCampaign, OpenOptions, Storage};
use args::*;
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

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

pub(super) fn open_opts(cli: &Cli) -> Result<OpenOptions> {
    Ok(OpenOptions {
        busy_timeout: clock::parse_duration_in(
            "--busy-timeout",
            &cli.busy_timeout,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        ..Default::default()
    })
}

pub(super) fn open(cli: &Cli) -> Result<Arc<dyn Storage>> {
    crate::store::open(&cli.db, &open_opts(cli)?)
}

/// For commands that only read: nothing is written, so they work on a read-only file.
pub(super) fn open_read_only(cli: &Cli) -> Result<Arc<dyn Storage>> {
    crate::store::open(
        &cli.db,
        &OpenOptions {
            read_only: true,
            ..open_opts(cli)?
        },
    )
}

fn channel(s: &str) -> Result<Channel> {
    s.parse()
}

/// Run one parsed command. Printing and exit codes are the caller's (main.rs).
pub fn dispatch(cli: &Cli, rt: &tokio::runtime::Runtime) -> Result<Output> {
    match &cli.command {
        Command::Init => {
            let store = crate::store::open(
                &cli.db,
                &OpenOptions {
                    create: true,
                    ..open_opts(cli)?
                },
            )?;
            let mode = store.journal_mode()?;
            let installation = store.installation_id()?;
            Ok(Output::ok(
                json!({"db": cli.db, "schema_version": crate::store::SCHEMA_VERSION,
                       "journal_mode": mode, "installation_id": installation}),
                format!(
                    "database ready: {} (schema {}, journal {mode}, installation {installation})",
                    cli.db.display(),
                    crate::store::SCHEMA_VERSION
                ),
            ))
        }
        Command::Demo {
            recipients, dir, ..
        } => {
            let report = crate::tools::demo::run(*recipients, dir.as_deref(), rt)?;
            let text = report.text();
            Ok(Output {
                json: serde_json::to_value(&report).unwrap_or_default(),
                text,
                code: exit::SUCCESS,
            })
        }
        Command::Account(AccountCmd::Add { name }) => {
            let id = open(cli)?.add_account(name)?;
            Ok(Output::ok(json!({"id": id, "name": name}), id.to_string()))
        }
        Command::Account(AccountCmd::List) => {
            let rows = open_read_only(cli)?.accounts()?;
            let mut text = String::from("ID\tNAME\tSUBSCRIBERS\tCAMPAIGNS\tCREATED");
            for a in &rows {
                text.push_str(&format!(
                    "\n{}\t{}\t{}\t{}\t{}",
                    a.id,
                    a.name,
                    a.subscribers,
                    a.campaigns,
                    clock::format_ms(a.created_at)
                ));
            }
            let doc = serde_json::to_value(&rows).unwrap_or_default();
            Ok(Output::ok(json!({ "accounts": doc }), text))
        }
        Command::Subscriber(cmd) => subscribers::command(cli, cmd),
        Command::Suppress(cmd) => suppress(cli, cmd),
        Command::Campaign(cmd) => campaign(cli, cmd),
        Command::Run(a) => run::run(cli, a, rt),
        Command::Doubts(cmd) => doubts(cli, cmd),
        Command::Check { campaigns, logs } => check(cli, campaigns, logs),
        Command::Notify(a) => notify(a, rt),
        Command::FakeProvider(a) => crate::tools::fake::run_cli(a, rt).map(|_| Output::streamed()),
        Command::Bench(a) => bench(a, rt),
    }
}

fn suppress(cli: &Cli, cmd: &SuppressCmd) -> Result<Output> {
    match cmd {
        SuppressCmd::Add {
            account,
            channel: ch,
            address,
            reason,
        } => {
            let ch = channel(ch)?;
            let addr = crate::domain::address::normalize_for(ch, address)?;
            let store = open(cli)?;
            let added =
                store.suppress(store.resolve_account(account)?, ch, &addr, reason, "manual")?;
            let text = if added {
                format!("suppressed {addr} ({ch})")
            } else {
                format!("{addr} ({ch}) was already suppressed")
            };
            Ok(Output::ok(
                json!({"address": addr, "channel": ch, "added": added}),
                text,
            ))
        }
        SuppressCmd::Remove {
            account,
            channel: ch,
            address,
        } => {
            let ch = channel(ch)?;
            let addr = crate::domain::address::normalize_for(ch, address)?;
            let store = open(cli)?;
            store.unsuppress(store.resolve_account(account)?, ch, &addr)?;
            Ok(Output::ok(
                json!({"address": addr, "channel": ch, "removed": true}),
                format!("removed {addr} ({ch}) from the suppression list"),
            ))
        }
        SuppressCmd::List { account } => {
            let store = open_read_only(cli)?;
            let list = store.suppressions(store.resolve_account(account)?)?;
            let mut text = String::new();
            for s in &list {
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    s.channel,
                    s.address,
                    s.reason,
                    s.source,
                    clock::format_ms(s.created_at)
                ));
            }
            if list.is_empty() {
                text.push_str("no suppressions");
            }
            Ok(Output::ok(
                json!({"suppressions": list}),
                text.trim_end().to_string(),
            ))
        }
    }
}

fn campaign(cli: &Cli, cmd: &CampaignCmd) -> Result<Output> {
    match cmd {
        CampaignCmd::Create {
            account,
            name,
            channel: ch,
            from,
            subject,
            body_file,
        } => campaign_create(
            cli,
            account,
            name,
            ch,
            from.as_deref(),
            subject.as_deref(),
            body_file,
        ),
        CampaignCmd::Approve { id, at } => campaign_approve(cli, *id, at.as_deref()),
        CampaignCmd::List { account, status } => campaign_list(cli, account, status),
        CampaignCmd::Pause { id } => transition_out(open(cli)?.pause_campaign(*id)?),
        CampaignCmd::Resume { id } => transition_out(open(cli)?.resume_campaign(*id)?),
        CampaignCmd::Cancel { id } => transition_out(open(cli)?.cancel_campaign(*id)?),
        CampaignCmd::Status { id, watch } => {
            let store = open_read_only(cli)?;
            if *watch {
                if store.is_snapshot() {
                    return Err(Error::invalid(format!(
                        "cannot follow {}: it is read-only in a directory you cannot write, \
                         so SQLite cannot see other processes' writes (run without --watch, or \
                         as a user who can write the directory)",
                        cli.db.display()
                    )));
                }
                watch_status(&*store, *id, cli.json)?;
            }
            let s = store.status_counts(*id)?;
            let mut text = format!("campaign {id}: {} ({} recipients)", s.status, s.total);
            for (k, v) in &s.counts {
                text.push_str(&format!("\n  {k:<11} {v}"));
            }
            let mut doc = json!({"id": id, "status": s.status, "total": s.total,
                                 "list_complete": s.list_complete});
            for (k, v) in &s.counts {
                doc[*k] = json!(v);
            }
            Ok(Output::ok(doc, text))
        }
        CampaignCmd::Report { id, format } => {
            let store = open_read_only(cli)?;
            let format = format.unwrap_or(if cli.json {
                ReportFormat::Json
            } else {
                ReportFormat::Csv
            });
            report::write(&*store, *id, format)?;
            Ok(Output::streamed())
        }
    }
}

/// `campaign create`: the content checked as the sending side will check it, the templates
/// against the account's subscribers, then one draft.
fn campaign_create(
    cli: &Cli,
    account: &str,
    name: &str,
    ch: &str,
    from: Option<&str>,
    subject: Option<&str>,
    body_file: &std::path::Path,
) -> Result<Output> {
    let ch = channel(ch)?;
    let body = import::read_body_file("--body-file", body_file)?;
    if name.trim().is_empty() {
        return Err(Error::invalid("the campaign name is empty"));
    }
    crate::domain::content::check(&crate::domain::content::Content {
        channel: ch,
        sender: from,
        subject,
        body: &body,
    })?;
    let store = open(cli)?;
    let account = store.resolve_account(account)?;
    let attrs = store.attribute_names(account)?;
    let counts = store.variable_counts(account, ch)?;
    template::check(subject, &body, &attrs, &counts)?;
    let id = store.create_campaign(&NewCampaign {
        account_id: account,
        name: name.trim(),
        channel: ch,
        sender: from,
        subject,
        body: &body,
    })?;
    if ch == Channel::Sms {
        // The template before rendering: variables change the length per recipient.
        let seg = crate::domain::sms::segments(&body);
        let _ = writeln!(std::io::stderr(), "sms body (before variables): {seg}");
        return Ok(Output::ok(json!({"id": id, "sms": seg}), id.to_string()));
    }
    Ok(Output::ok(json!({"id": id}), id.to_string()))
}

/// `campaign approve`: content frozen from here on, so it is checked once more first.
fn campaign_approve(cli: &Cli, id: i64, at: Option<&str>) -> Result<Output> {
    let at = match at {
        Some(s) => clock::parse_rfc3339_ms(s)?,
        None => clock::now_ms(),
    };
    let store = open(cli)?;
    // The content is frozen from here on: check it once more as the sending side will.
    let c = store.campaign(id)?;
    crate::domain::content::check(&crate::domain::content::Content {
        channel: c.channel,
        sender: c.sender.as_deref(),
        subject: c.subject.as_deref(),
        body: &c.body,
    })
    .map_err(|e| {
        e.context(&format!(
            "campaign {id} cannot be approved (it would fail for every recipient)"
        ))
    })?;
    // Subscribers added since create may lack a variable the template prints.
    let attrs = store.attribute_names(c.account_id)?;
    let counts = store.variable_counts(c.account_id, c.channel)?;
    template::check(c.subject.as_deref(), &c.body, &attrs, &counts)
        .map_err(|e| e.context(&format!("campaign {id} cannot be approved")))?;
    let c = store.approve_campaign(id, at)?;
    Ok(Output::ok(
        json!({"id": id, "status": c.status, "scheduled_for": clock::format_ms(at)}),
        format!("campaign {id} approved for {}", clock::format_ms(at)),
    ))
}

fn campaign_list(cli: &Cli, account: &Option<String>, status: &Option<String>) -> Result<Output> {
    let status = status
        .as_deref()
        .map(|s| {
            crate::domain::model::CampaignStatus::parse(s).ok_or_else(|| {
                Error::invalid(format!(
                    "unknown campaign status {s:?} (draft, approved, sending, paused, sent, \
                     cancelled)"
                ))
            })
        })
        .transpose()?;
    let store = open_read_only(cli)?;
    let account = account
        .as_deref()
        .map(|a| store.resolve_account(a))
        .transpose()?;
    let rows = store.list_campaigns(account, status)?;
    let mut text = String::from("ID\tACCOUNT\tCHANNEL\tSTATUS\tNAME");
    for c in &rows {
        text.push_str(&format!(
            "\n{}\t{}\t{}\t{}\t{}",
            c.id, c.account, c.channel, c.status, c.name
        ));
    }
    let doc = serde_json::to_value(&rows).unwrap_or_default();
    Ok(Output::ok(json!({ "campaigns": doc }), text))
}

fn transition_out(c: crate::store::Campaign) -> Result<Output> {
    Ok(Output::ok(
        json!({"id": c.id, "status": c.status}),
        format!("campaign {} is {}", c.id, c.status),
    ))
}

/// Follow a campaign until it is no longer sending: a progress bar on a terminal; otherwise
/// (piped, a log file) one line on stdout per change. With `--json`, nothing until the end.
fn watch_status(store: &dyn Storage, id: i64, quiet: bool) -> Result<()> {
    use std::io::IsTerminal;
    let lines = !quiet && !std::io::stderr().is_terminal();
    let mut last = String::new();
    let bar = if quiet || lines {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    loop {
        let s = store.status_counts(id)?;
        let open = s.counts["queued"] + s.counts["leased"];
        bar.set_length(s.total);
        bar.set_position(s.total - open);
        let msg = format!(
            "{} sent {} failed {} suppressed {} in doubt {}",
            s.status,
            s.counts["sent"],
            s.counts["failed"],
            s.counts["suppressed"],
            s.counts["in_doubt"]
        );
        if lines && msg != last {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{} campaign {id}: {}/{} {msg}",
                clock::format_ms(clock::now_ms()),
                s.total - open,
                s.total
            )
            .and_then(|()| out.flush())
            .map_err(Error::output)?;
            last = msg.clone();
        }
        bar.set_message(msg);
        use crate::domain::model::CampaignStatus::*;
        if matches!(s.status, Sent | Cancelled | Draft)
            || (s.status == Sending && open == 0 && s.list_complete)
        {
            bar.finish();
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

pub(super) fn sync_of(s: SyncArg) -> crate::store::Sync {
    match s {
        SyncArg::Full => crate::store::Sync::Full,
        SyncArg::Normal => crate::store::Sync::Normal,
    }
}

fn bench(a: &BenchArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
    if a.batch == 0 || a.batch > 10_000 {
        return Err(Error::invalid("--batch must be between 1 and 10000"));
    }
    if a.concurrency == 0 || a.concurrency > 10_000 {
        return Err(Error::invalid("--concurrency must be between 1 and 10000"));
    }
    if a.recipients < 100 {
        return Err(Error::invalid("--recipients must be at least 100"));
    }
    if a.scale < 1000 {
        return Err(Error::invalid("--scale must be at least 1000"));
    }
    let latency = clock::parse_duration(&a.latency)?;
    if latency.is_zero() || latency > std::time::Duration::from_secs(10) {
        return Err(Error::invalid("--latency must be between 1ms and 10s"));
    }
    let report = crate::tools::bench::run(
        &crate::tools::bench::Options {
            recipients: a.recipients,
            batch: a.batch,
            sync: sync_of(a.sync),
            latency,
            concurrency: a.concurrency,
            scale: a.scale,
            dir: a.dir.clone(),
        },
        rt,
    )?;
    Ok(Output::ok(
        serde_json::to_value(&report).unwrap_or_default(),
        report.table(),
    ))
}

fn doubts(cli: &Cli, cmd: &DoubtsCmd) -> Result<Output> {
    match cmd {
        DoubtsCmd::List { campaign } => {
            let rows = open_read_only(cli)?.doubts(*campaign)?;
            let mut text = String::new();
            for r in &rows {
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
            if rows.is_empty() {
                text.push_str("no sends in doubt");
            }
            Ok(Output::ok(
                json!({"campaign_id": campaign, "in_doubt": rows}),
                text.trim_end().to_string(),
            ))
        }
        DoubtsCmd::Resolve {
            send_id,
            as_sent,
            requeue,
            by,
        } => {
            if !as_sent && !requeue {
                return Err(Error::invalid(
                    "say what happened: --as-sent (it was delivered) or --requeue (it was not: \
                     send it again)",
                ));
            }
            let who = by
                .clone()
                .or_else(|| std::env::var("USER").ok())
                .unwrap_or_else(|| "operator".into());
            if who.chars().any(char::is_control) || who.len() > 200 {
                return Err(Error::invalid("--by must be one line of at most 200 bytes"));
            }
            open(cli)?.resolve_doubt_by(*send_id, *as_sent, &who)?;
            let what = if *as_sent { "sent" } else { "queued" };
            Ok(Output::ok(
                json!({"send_id": send_id, "status": what}),
                format!("send {send_id} is now {what}"),
            ))
        }
    }
}

fn check(cli: &Cli, campaigns: &[i64], logs: &[std::path::PathBuf]) -> Result<Output> {
    let store = open_read_only(cli)?;
    let mut lines = Vec::new();
    for l in logs {
        lines.extend(crate::provider::deliverylog::read_lines(l)?);
    }
    let report = crate::app::check::check(&*store, campaigns, &lines)?;
    Ok(Output {
        json: serde_json::to_value(&report).unwrap_or_default(),
        text: report.table(),
        code: if report.pass {
            exit::SUCCESS
        } else {
            exit::FAILURE
        },
    })
}

fn notify(a: &NotifyArgs, rt: &tokio::runtime::Runtime) -> Result<Output> {
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
    let req = crate::app::notify::Request {
        to: a.to.clone(),
        message,
        subject: a.subject.clone(),
        from: a.from.clone(),
        key: a.key.clone(),
        channel: a.channel.as_deref().map(channel).transpose()?,
        provider: a.provider.clone(),
        state: a.state.clone(),
        dry_run: a.dry_run,
    };
    let report = crate::app::notify::run(&req, &|k| std::env::var(k).ok(), rt)?;
    Ok(Output {
        json: serde_json::to_value(&report).unwrap_or_default(),
        text: report.text(),
        code: exit::for_outcome(report.outcome()),
    })
}
