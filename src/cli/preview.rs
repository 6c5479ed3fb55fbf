//! `sendonce campaign preview|test-send`: the flags turned into a rendering (routes and public
//! URL as `run` takes them), and the message printed as it would go out, or the test copy's
//! outcome told.

use super::args::{Cli, PreviewFormat, SendTarget};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::preview::{self, TestTarget};
use sendonce_core::app::run;
use sendonce_domain::address::Channel;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::exit;
use sendonce_store::Store;
use std::sync::Arc;

/// `campaign preview`: the bytes on stdout (text, HTML or eml); `--json`: the parts as JSON.
pub(super) fn show(
    cli: &Cli,
    id: i64,
    subscriber: &str,
    format: Option<PreviewFormat>,
    t: &SendTarget,
) -> Result<Output> {
    let store = open_read_only(cli)?;
    let links = run::links(t.config.as_deref(), t.public_url.as_deref())?;
    let p = preview::preview(&store, id, subscriber, links.as_ref())?;
    if let Some(why) = &p.why_not {
        tracing::warn!(
            "subscriber {} would not receive it now: {why}",
            p.subscriber_id
        );
    }
    let format = format.unwrap_or(match p.message.channel {
        Channel::Email => PreviewFormat::Eml,
        Channel::Sms => PreviewFormat::Text,
    });
    let text = match format {
        PreviewFormat::Text => p.message.body.clone(),
        PreviewFormat::Html => p.message.html.clone().ok_or_else(|| {
            Error::invalid(format!("campaign {id} has no HTML part: use --format text"))
        })?,
        PreviewFormat::Eml => {
            let routes = routes_if_any(&store, t)?;
            let bytes = preview::eml(&store, &p, routes.as_ref())?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let mut doc = to_json(&p);
    if format == PreviewFormat::Eml {
        doc["eml"] = serde_json::Value::String(text.clone());
    }
    Ok(Output::ok(doc, text.trim_end_matches('\n').to_string()))
}

/// The routes `--provider` or a config file give, if any (a preview needs none).
fn routes_if_any(store: &Arc<Store>, t: &SendTarget) -> Result<Option<run::Routes>> {
    let found =
        sendonce_core::config::discover(t.config.as_deref(), &sendonce_core::config::process_env)?;
    let has_config = found.chosen.is_some();
    if t.provider.is_none() && !has_config {
        return Ok(None);
    }
    run::routes(t.config.as_deref(), t.provider.as_deref(), store).map(Some)
}

/// `campaign test-send`: one copy through the campaign's route; exit 0 when accepted.
pub(super) fn test_send(
    cli: &Cli,
    id: i64,
    to: &str,
    subscriber: Option<&str>,
    t: &SendTarget,
    rt: &tokio::runtime::Runtime,
) -> Result<Output> {
    let store = open(cli)?;
    let links = run::links(t.config.as_deref(), t.public_url.as_deref())?;
    let routes = run::routes(t.config.as_deref(), t.provider.as_deref(), &store)?;
    let target = TestTarget {
        campaign_id: id,
        to,
        subscriber,
        links: links.as_ref(),
    };
    let sent = preview::test_send(&store, &routes, &target, rt)?;
    let text = match (&sent.outcome, &sent.error) {
        (&"sent", _) => format!(
            "test copy of campaign {id} sent to {} (variables of subscriber {}; provider id {})",
            sent.to,
            sent.subscriber_id,
            sent.provider_message_id.as_deref().unwrap_or("-")
        ),
        (o, e) => format!(
            "test copy of campaign {id} to {}: {o}: {}",
            sent.to,
            e.as_deref().unwrap_or("-")
        ),
    };
    let code = exit::for_outcome(exit::Outcome {
        in_doubt: u64::from(sent.outcome == "unknown"),
        failed: u64::from(sent.outcome == "failed"),
    });
    Ok(Output {
        json: to_json(&sent),
        text,
        code,
    })
}
