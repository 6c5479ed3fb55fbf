//! `sendonce completions SHELL` and `sendonce manpage DIR`: shell completion scripts
//! and man pages generated from the clap grammar (the Debian package ships both), so they never
//! drift from the flags the binary really accepts.

use super::args::Cli;
use super::{to_json, Output};
use clap::CommandFactory;
use sendonce_domain::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Print the completion script for `shell` on standard output (with `--json`, inside one JSON
/// document: `{"shell", "script"}`).
pub fn completions(shell: clap_complete::Shell, json: bool) -> Result<Output> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "sendonce", &mut script);
    if json {
        let doc = serde_json::json!({
            "shell": shell.to_string(),
            "script": String::from_utf8_lossy(&script),
        });
        return Ok(Output::ok(doc, String::new()));
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .map_err(Error::output)?;
    Ok(Output::streamed())
}

/// What `sendonce manpage DIR` wrote.
#[derive(serde::Serialize)]
struct Written {
    dir: PathBuf,
    pages: Vec<String>,
}

/// Write `sendonce.1` and one page per visible subcommand, nested ones included
/// (`sendonce-campaign.1`, `sendonce-campaign-create.1`, ...) into `dir`, creating it.
pub fn manpages(dir: &Path) -> Result<Output> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(&format!("creating {}", dir.display()), e))?;
    // `build` propagates global flags (--db, --json...) into every subcommand and gives each
    // its display name (`sendonce-campaign-create`), which is the page's name.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    write_pages(cmd, dir, &mut pages)?;
    pages.sort();
    let text = format!("wrote {} man pages to {}", pages.len(), dir.display());
    let written = Written {
        dir: dir.to_path_buf(),
        pages,
    };
    Ok(Output::ok(to_json(&written), text))
}

fn write_pages(cmd: clap::Command, dir: &Path, pages: &mut Vec<String>) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, pages)?;
    }
    let man = clap_mangen::Man::new(cmd).source(format!("sendonce {}", env!("CARGO_PKG_VERSION")));
    let name = man.get_filename();
    let path = dir.join(&name);
    let mut roff = Vec::new();
    man.render(&mut roff)
        .map_err(|e| Error::io(&format!("rendering {name}"), e))?;
    std::fs::write(&path, roff)
        .map_err(|e| Error::io(&format!("writing {}", path.display()), e))?;
    pages.push(name);
    Ok(())
}
