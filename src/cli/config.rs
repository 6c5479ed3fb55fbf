//! `sendonce config show|example`, and the database path settled before dispatch: `--db`, then
//! `SENDONCE_DB`, then the config file's `db`, then `./sendonce.db`.

use super::args::{CampaignCmd, Cli, Command, ConfigCmd, SubscriberCmd};
use super::{to_json, Output};
use sendonce_core::app::config as show;
use sendonce_core::config::{self, Config, Origin};
use sendonce_domain::error::Result;
use std::path::Path;

/// The `--config` flag of the command being run, if it has one and it was given.
pub fn config_flag(cli: &Cli) -> Option<&Path> {
    let p = match &cli.command {
        Command::Run(a) => &a.config,
        Command::Serve(a) => &a.config,
        Command::Campaign(CampaignCmd::Approve { config, .. }) => config,
        Command::Campaign(CampaignCmd::Preview { send, .. })
        | Command::Campaign(CampaignCmd::TestSend { send, .. }) => &send.config,
        Command::Subscriber(SubscriberCmd::Add { links, .. })
        | Command::Subscriber(SubscriberCmd::Import { links, .. }) => &links.config,
        Command::Config(ConfigCmd::Show { config }) => config,
        Command::Doctor(a) => &a.config,
        _ => return None,
    };
    p.as_deref()
}

/// Settle `cli.db`: `given` is where clap found it (`--db` or `SENDONCE_DB`), None when it is
/// clap's default; then the config file's `db` wins over the default. Commands that keep no
/// database here (demo, bench, notify, fake-provider, config example) leave it alone and never
/// read a config file for it.
pub fn settle_db(cli: &mut Cli, given: Option<Origin>) -> Result<()> {
    let uses_db = !matches!(
        cli.command,
        Command::Demo { .. }
            | Command::Bench(_)
            | Command::Notify(_)
            | Command::FakeProvider(_)
            | Command::Config(ConfigCmd::Example)
            | Command::Completions { .. }
            | Command::Manpage { .. }
    );
    let from = match given {
        Some(o) => o,
        None if !uses_db => Origin::Default,
        None => {
            let found = config::discover(config_flag(cli), &config::process_env)?;
            match &found.chosen {
                Some(path) => match Config::read(path)?.db {
                    Some(db) => {
                        cli.db = db;
                        Origin::File(path.clone())
                    }
                    None => Origin::Default,
                },
                None => Origin::Default,
            }
        }
    };
    cli.db_from = Some(from);
    Ok(())
}

pub(super) fn command(cli: &Cli, cmd: &ConfigCmd) -> Result<Output> {
    match cmd {
        ConfigCmd::Example => Ok(Output::ok(
            serde_json::json!({ "example": show::EXAMPLE }),
            show::EXAMPLE.trim_end(),
        )),
        ConfigCmd::Show { config } => {
            let from = cli.db_from.clone().unwrap_or(Origin::Default);
            let shown = show::show(
                config.as_deref(),
                (&cli.db, &from),
                &sendonce_core::config::process_env,
            )?;
            Ok(Output::ok(to_json(&shown), text(&shown)))
        }
    }
}

fn text(s: &show::Shown) -> String {
    let mut t = match &s.config_file {
        Some(p) => format!("config file: {} ({})", p.display(), chosen(s.chosen_by)),
        None => "config file: none found".to_string(),
    };
    if !s.candidates.is_empty() {
        t.push_str("\nlooked at, in order:");
        for c in &s.candidates {
            let state = if c.exists { "exists" } else { "not found" };
            t.push_str(&format!("\n  {} ({state})", c.path.display()));
        }
    }
    t.push_str("\n\nSETTING\tVALUE\tFROM");
    for e in &s.settings {
        let value = e.value.as_deref().unwrap_or("(not set)");
        t.push_str(&format!("\n{}\t{value}\t{}", e.key, e.from));
    }
    t.push_str(&format!(
        "\n\nroutes: {}, webhooks: {} (tables: set in the config file only)",
        s.routes, s.webhooks
    ));
    t.push_str("\n\nSECRET\tSTATE\tUSED BY");
    for x in &s.secrets {
        t.push_str(&format!("\n{}\t{}\t{}", x.name, x.state, x.used_by));
    }
    t
}

fn chosen(c: config::Chosen) -> &'static str {
    match c {
        config::Chosen::Flag => "from --config",
        config::Chosen::Env => "from SENDONCE_CONFIG",
        config::Chosen::Search => "the first found",
        config::Chosen::None => "none",
    }
}
