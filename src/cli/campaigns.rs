//! `sendonce campaign ...`: flags parsed into the inputs of `app::campaigns`, its outputs
//! printed as text or JSON, and `status --watch` following a campaign on the terminal.

use super::args::{CampaignCmd, CampaignCreate, Cli, ReportFormat};
use super::{open, open_read_only, report, to_json, Output};
use sendonce_core::app::campaigns::{self, Draft, Status};
use sendonce_core::app::import;
use sendonce_core::app::lists;
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_store::Store;
use std::io::Write;
use std::path::Path;

pub(super) fn command(
    cli: &Cli,
    cmd: &CampaignCmd,
    rt: &tokio::runtime::Runtime,
) -> Result<Output> {
    match cmd {
        CampaignCmd::Create(a) => create(cli, a),
        CampaignCmd::Approve {
            id,
            at,
            public_url,
            config,
            strict,
        } => approve(
            cli,
            *id,
            at.as_deref(),
            public_url.as_deref(),
            config.as_deref(),
            *strict,
        ),
        CampaignCmd::List { account, status } => {
            let status = status.as_deref().map(campaigns::parse_status).transpose()?;
            let list = campaigns::list(&*open_read_only(cli)?, account.as_deref(), status)?;
            let mut text = String::from("ID\tACCOUNT\tCHANNEL\tSTATUS\tNAME");
            for c in &list.campaigns {
                text.push_str(&format!(
                    "\n{}\t{}\t{}\t{}\t{}",
                    c.id, c.account, c.channel, c.status, c.name
                ));
            }
            Ok(Output::ok(to_json(&list), text))
        }
        CampaignCmd::Pause { id } => transition(campaigns::pause(&*open(cli)?, *id)?),
        CampaignCmd::Resume { id } => transition(campaigns::resume(&*open(cli)?, *id)?),
        CampaignCmd::Cancel { id } => transition(campaigns::cancel(&*open(cli)?, *id)?),
        CampaignCmd::Status { id, watch } => status(cli, *id, *watch),
        CampaignCmd::Audience { id } => {
            let a = lists::audience(&*open_read_only(cli)?, *id)?;
            Ok(Output::ok(to_json(&a), super::lists::audience_text(&a)))
        }
        CampaignCmd::Report { id, format } => {
            let store = open_read_only(cli)?;
            let format = format.unwrap_or(if cli.json {
                ReportFormat::Json
            } else {
                ReportFormat::Csv
            });
            report::write(&store, *id, format)?;
            Ok(Output::streamed())
        }
        CampaignCmd::Preview {
            id,
            subscriber,
            format,
            send,
        } => super::preview::show(cli, *id, subscriber, *format, send),
        CampaignCmd::TestSend {
            id,
            to,
            subscriber,
            send,
        } => super::preview::test_send(cli, *id, to, subscriber.as_deref(), send, rt),
    }
}

/// The text body (empty when not given) and the HTML body of `campaign create`.
fn read_bodies(
    body_file: Option<&Path>,
    html_file: Option<&Path>,
) -> Result<(String, Option<String>)> {
    let body = match body_file {
        Some(f) => import::read_body_file("--body-file", f)?,
        None => String::new(),
    };
    let html = html_file
        .map(|f| import::read_body_file("--html-file", f))
        .transpose()?;
    Ok((body, html))
}

/// `campaign create [--dry-run]`.
/// `campaign approve`: the public URL (flag, environment, config file) is read, and checked,
/// only when the campaign's List-Unsubscribe needs it.
fn approve(
    cli: &Cli,
    id: i64,
    at: Option<&str>,
    public_url: Option<&str>,
    config: Option<&Path>,
    strict: bool,
) -> Result<Output> {
    let at = match at {
        Some(s) => clock::parse_rfc3339_ms(s)?,
        None => clock::now_ms(),
    };
    let store = open(cli)?;
    let links = if campaigns::needs_unsubscribe_url(&store, id)? {
        sendonce_core::app::run::links(config, public_url)?
    } else {
        None
    };
    let empty = if strict {
        campaigns::Empty::Refuse
    } else {
        campaigns::Empty::Warn
    };
    let a = campaigns::approve(&store, id, at, links.as_ref(), empty)?;
    let mut text = format!("campaign {id} approved for {}", clock::format_ms(at));
    if let Some(w) = &a.warning {
        text.push_str(&format!("\nwarning: {w}"));
    }
    Ok(Output::ok(to_json(&a), text))
}

fn create(cli: &Cli, a: &CampaignCreate) -> Result<Output> {
    let (body, html) = read_bodies(a.body_file.as_deref(), a.html_file.as_deref())?;
    let draft = Draft {
        name: a.name.clone(),
        channel: a.channel.parse()?,
        sender: a.from.clone(),
        subject: a.subject.clone(),
        body,
        html,
        reply_to: a.reply_to.clone(),
        filter: a.filter.clone(),
        transactional: a.transactional,
        send_window: a.send_window.clone(),
        sms_hours: a.sms_hours.clone(),
    }
    .checked()?;
    if a.dry_run {
        let out = campaigns::dry_run(&*open_read_only(cli)?, &a.account, &draft, &a.lists)?;
        return Ok(Output::ok(to_json(&out), super::lists::audience_text(&out)));
    }
    let created = campaigns::create(&*open(cli)?, &a.account, &draft, &a.lists)?;
    if let Some(seg) = &created.sms {
        let _ = writeln!(std::io::stderr(), "sms body (before variables): {seg}");
    }
    Ok(Output::ok(to_json(&created), created.id.to_string()))
}

fn transition(t: campaigns::Transition) -> Result<Output> {
    let text = format!("campaign {} is {}", t.id, t.status);
    Ok(Output::ok(to_json(&t), text))
}

/// `campaign status [--watch]`: the counts, after following the campaign if asked.
fn status(cli: &Cli, id: i64, watch: bool) -> Result<Output> {
    let store = open_read_only(cli)?;
    if watch {
        campaigns::check_followable(&store, &cli.db)?;
        watch_status(&store, id, cli.json)?;
    }
    let s = campaigns::status(&store, id)?;
    let noun = if s.total == 1 {
        "recipient"
    } else {
        "recipients"
    };
    let mut text = format!("campaign {id}: {} ({} {noun})", s.status, s.total);
    for (k, v) in &s.counts {
        text.push_str(&format!("\n  {k:<11} {v}"));
    }
    if let Some(at) = s.next_due {
        text.push_str(&format!(
            "\nnothing is due until {} (a send window, a retry's backoff or a lease)",
            clock::format_ms(at)
        ));
    }
    Ok(Output::ok(to_json(&s), text))
}

/// Follow a campaign until it is settled: a progress bar on a terminal; otherwise (piped, a
/// log file) one line on stdout per change. With `--json`, nothing until the end.
fn watch_status(store: &Store, id: i64, quiet: bool) -> Result<()> {
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
        let s = campaigns::status(store, id)?;
        bar.set_length(s.total);
        bar.set_position(s.total - s.open());
        let msg = progress(&s);
        if lines && msg != last {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{} campaign {id}: {}/{} {msg}",
                clock::format_ms(clock::now_ms()),
                s.total - s.open(),
                s.total
            )
            .and_then(|()| out.flush())
            .map_err(Error::output)?;
            last = msg.clone();
        }
        bar.set_message(msg);
        if s.settled() {
            bar.finish();
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// The progress message of one step of `--watch`.
fn progress(s: &Status) -> String {
    let n = |k: &str| s.counts.get(k).copied().unwrap_or(0);
    format!(
        "{} sent {} failed {} suppressed {} in doubt {}",
        s.status,
        n("sent"),
        n("failed"),
        n("suppressed"),
        n("in_doubt")
    )
}
