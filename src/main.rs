//! The `sendonce` binary: parse arguments, set up logging, dispatch, print, exit.

use sendonce::cli::{self, args::Cli, args::LogFormat};
use sendonce::config::Origin;
use sendonce::error::ErrorKind;
use sendonce::exit;

fn init_logging(cli: &Cli) {
    let level = if cli.quiet {
        "error"
    } else {
        match cli.verbose {
            // A worker says what it does (campaigns started, lists built, campaigns sent), a
            // server logs its requests.
            0 if matches!(
                cli.command,
                sendonce::cli::args::Command::Run(_) | sendonce::cli::args::Command::Serve(_)
            ) =>
            {
                "info"
            }
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SENDONCE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("sendonce={level}")));
    // No --log-format: the journal's own format when systemd connected stderr to it.
    let format = cli.log_format.unwrap_or_else(|| {
        let stream = std::env::var("JOURNAL_STREAM").ok();
        match sendonce::logs::stderr_is_journal(stream.as_deref()) {
            true => LogFormat::Journald,
            false => LogFormat::Human,
        }
    });
    // Colour codes only for a terminal: a log file, a pipe or the journal gets plain text.
    use std::io::IsTerminal;
    let ansi = format == LogFormat::Human && std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
        LogFormat::Journald => builder.event_format(sendonce::logs::Journald).init(),
    }
}

/// Parse the command line, and where `--db` came from (None: clap's default).
fn parse() -> Result<(Cli, Option<Origin>), clap::Error> {
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let mut matches = Cli::command().try_get_matches()?;
    let db = match matches.value_source("db") {
        Some(ValueSource::CommandLine) => Some(Origin::Flag("--db".into())),
        Some(ValueSource::EnvVariable) => Some(Origin::Env("SENDONCE_DB".into())),
        _ => None,
    };
    Ok((Cli::from_arg_matches_mut(&mut matches)?, db))
}

/// Print one document on stdout. A reader that went away (`| head`) is not an error.
fn print_out(text: &str) -> Result<(), sendonce::error::Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(sendonce::error::Error::output)
}

fn main() {
    let (mut parsed, db_given) = match parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::SUCCESS
            };
            // `--json` promises one JSON document for every error, parse errors included.
            if code != exit::SUCCESS && std::env::args_os().any(|a| a == "--json") {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                let message = first.strip_prefix("error: ").unwrap_or(first);
                let _ = print_out(
                    &serde_json::json!({"error": message, "exit_code": code}).to_string(),
                );
            }
            let _ = e.print();
            std::process::exit(code);
        }
    };
    init_logging(&parsed);
    // The database path: --db, SENDONCE_DB, the config file's db, ./sendonce.db.
    let settled = cli::config::settle_db(&mut parsed, db_given);
    let parsed = parsed;
    // The one async runtime of the process; commands that need it borrow it.
    let result = settled
        .and_then(|()| sendonce::shutdown::runtime())
        .and_then(|rt| cli::dispatch(&parsed, &rt))
        .map(|out| cli::tag_store(&parsed, out))
        .and_then(|out| {
            if parsed.json && !out.json.is_null() {
                print_out(&out.json.to_string())?;
            } else if !parsed.json && !out.text.is_empty() {
                print_out(&out.text)?;
            }
            Ok(out.code)
        });
    let code = match result {
        Ok(code) => code,
        Err(e) if e.kind == ErrorKind::ClosedOutput => exit::for_error(&e),
        Err(e) => {
            let code = match parsed.command {
                cli::args::Command::Bounce(_) => exit::for_mta_error(&e),
                _ => exit::for_error(&e),
            };
            if parsed.json {
                let doc = serde_json::json!({"error": e.message, "exit_code": code});
                let _ = print_out(&doc.to_string());
            }
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {}", e.message);
            code
        }
    };
    std::process::exit(code);
}
