//! The `sendonce` binary: parse arguments, set up logging, dispatch, print, exit.

use clap::Parser;
use sendonce::cli::{self, args::Cli, args::LogFormat};
use sendonce::exit;

fn init_logging(cli: &Cli) {
    let level = if cli.quiet {
        "error"
    } else {
        match cli.verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SENDONCE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("sendonce={level}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() {
    let parsed = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::SUCCESS
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    init_logging(&parsed);
    let code = match cli::dispatch(&parsed) {
        Ok(out) => {
            if parsed.json && !out.json.is_null() {
                println!("{}", out.json);
            } else if !parsed.json && !out.text.is_empty() {
                println!("{}", out.text);
            }
            out.code
        }
        Err(e) => {
            if parsed.json {
                println!(
                    "{}",
                    serde_json::json!({"error": e.message, "exit_code": exit::for_error(&e)})
                );
            }
            eprintln!("error: {}", e.message);
            exit::for_error(&e)
        }
    };
    std::process::exit(code);
}
