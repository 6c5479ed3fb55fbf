//! `sendonce template ...`: save (files read here), list and show stored templates through
//! `app::templates`, printed as text or one JSON document.

use super::args::{Cli, TemplateCmd};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::import;
use sendonce_core::app::templates::{self, TemplateRequest, TemplateView};
use sendonce_domain::clock;
use sendonce_domain::error::Result;

pub(super) fn command(cli: &Cli, cmd: &TemplateCmd) -> Result<Output> {
    match cmd {
        TemplateCmd::Save {
            account,
            name,
            subject,
            text_file,
            html_file,
        } => {
            let read = |flag: &str, f: &Option<std::path::PathBuf>| {
                f.as_deref()
                    .map(|p| import::read_body_file(flag, p))
                    .transpose()
            };
            let req = TemplateRequest {
                name: name.clone(),
                subject: subject.clone(),
                text: read("--text-file", text_file)?,
                html: read("--html-file", html_file)?,
            };
            let t = templates::save(&*open(cli)?, account, &req)?;
            let text = format!("template {:?} version {} saved", t.name, t.version);
            Ok(Output::ok(to_json(&t), text))
        }
        TemplateCmd::List { account } => {
            let all = templates::list(&*open_read_only(cli)?, account)?;
            let mut text = String::from("NAME\tVERSION\tSAVED\tSUBJECT");
            for t in &all.templates {
                text.push_str(&format!(
                    "\n{}\t{}\t{}\t{}",
                    t.name,
                    t.version,
                    clock::format_ms(t.created_at),
                    t.subject.as_deref().unwrap_or("-")
                ));
            }
            Ok(Output::ok(to_json(&all), text))
        }
        TemplateCmd::Show {
            account,
            name,
            version,
        } => {
            let t = templates::show(&*open_read_only(cli)?, account, name, *version)?;
            let text = shown(&t);
            Ok(Output::ok(to_json(&t), text))
        }
    }
}

/// A version, whole: its header lines, then each part under its name.
fn shown(t: &TemplateView) -> String {
    let mut out = format!(
        "template {:?} version {} (saved {})",
        t.name,
        t.version,
        clock::format_ms(t.created_at)
    );
    for (part, s) in [
        ("subject", &t.subject),
        ("text", &t.text),
        ("html", &t.html),
    ] {
        if let Some(s) = s {
            out.push_str(&format!("\n--- {part}\n{s}"));
        }
    }
    out
}
