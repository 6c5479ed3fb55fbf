//! `sendonce doctor`: the findings of `app::doctor`, one aligned line each with its hint, or
//! one JSON document; exit 0 when healthy, 1 otherwise.

use super::args::{Cli, DoctorArgs};
use super::{to_json, Output};
use sendonce_core::app::doctor;
use sendonce_domain::error::Result;
use sendonce_domain::exit;

pub(super) fn doctor(cli: &Cli, a: &DoctorArgs) -> Result<Output> {
    let report = doctor::run(&doctor::Request {
        db: super::target(cli),
        full: a.full,
        config: a.config.clone(),
        provider: a.provider.clone(),
    })?;
    Ok(Output {
        json: to_json(&report),
        text: text(&report),
        code: exit::for_verdict(report.healthy),
    })
}

fn text(r: &doctor::Report) -> String {
    let width = r.findings.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let mut out = format!("sendonce doctor: {} ({})\n", r.path, r.store);
    for f in &r.findings {
        out.push_str(&format!(
            "{:<4}  {:<width$}  {}\n",
            f.level.as_str(),
            f.name,
            f.detail
        ));
        if let Some(h) = &f.hint {
            out.push_str(&format!("{:<4}  {:<width$}  → {h}\n", "", ""));
        }
    }
    out.push_str(if r.healthy {
        "healthy"
    } else {
        "needs attention: see the lines above (exit 1)"
    });
    out
}
