//! `sendonce subscriber ...`: flags parsed into the inputs of `app::subscribers` (add, import,
//! list, show, update, remove) and `app::privacy` (export, erase), its outputs printed as text
//! or one JSON document.

use super::args::{Cli, PublicUrlArgs, SubscriberCmd};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::subscribers::{self, ImportRequest, Page, Update};
use sendonce_core::app::{import, privacy};
use sendonce_domain::error::{Error, Result};

pub(super) fn command(cli: &Cli, cmd: &SubscriberCmd) -> Result<Output> {
    match cmd {
        SubscriberCmd::Add {
            account,
            email,
            phone,
            name,
            attrs,
            status,
            lists,
            basis,
            links,
        } => {
            let attrs = attrs
                .iter()
                .map(|a| import::parse_attr(a))
                .collect::<Result<Vec<_>>>()?;
            let mut s = import::subscriber(
                email.as_deref(),
                phone.as_deref(),
                name.as_deref(),
                Some(status),
                &attrs,
            )?;
            s.consent = privacy::declared("cli", basis.as_deref())?;
            let links = confirm_links(lists, links)?;
            let added = subscribers::add(&*open(cli)?, account, &s, lists, links.as_ref())?;
            Ok(Output::ok(to_json(&added), added.id.to_string()))
        }
        SubscriberCmd::Import {
            account,
            file,
            skip_invalid,
            delimiter,
            encoding,
            lists,
            basis,
            links,
        } => {
            let format = import::CsvFormat {
                delimiter: import::parse_delimiter(delimiter)?,
                encoding: import::Encoding::parse(encoding)?,
            };
            let confirm = confirm_links(lists, links)?;
            let req = ImportRequest {
                account,
                file,
                skip_invalid: *skip_invalid,
                format,
                lists,
                links: confirm.as_ref(),
                consent: privacy::declared("import", basis.as_deref())?,
            };
            imported(subscribers::import_csv(&*open(cli)?, &req)?)
        }
        SubscriberCmd::List {
            account,
            status,
            limit,
            after,
        } => {
            let page = Page {
                account,
                status: subscribers::status_filter(status.as_deref())?,
                after: *after,
                limit: *limit,
            };
            list(subscribers::list(&*open_read_only(cli)?, &page)?)
        }
        other => change(cli, other),
    }
}

/// One subscriber as `subscriber show` prints it without `--json`: a field per line, then
/// each attribute as `attr KEY = VALUE` (a JSON value, so a number and a text differ).
fn show_text(s: &subscribers::Subscriber) -> String {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut t = format!(
        "id       {}\naccount  {}\nemail    {}\nphone    {}\nname     {}\nstatus   {}\ncreated  {}",
        s.id,
        s.account_id,
        dash(&s.email),
        dash(&s.phone),
        dash(&s.name),
        s.status,
        sendonce_domain::clock::format_ms(s.created_at),
    );
    if let Some(attrs) = s.attrs.as_object() {
        for (k, v) in attrs {
            t.push_str(&format!("\nattr     {k} = {v}"));
        }
    }
    t
}

/// `show`, `update` and `remove`: one subscriber, by id, email address or phone number.
fn change(cli: &Cli, cmd: &SubscriberCmd) -> Result<Output> {
    match cmd {
        SubscriberCmd::Show {
            account,
            subscriber,
        } => {
            let s = subscribers::show(&*open_read_only(cli)?, account, subscriber)?;
            Ok(Output::ok(to_json(&s), show_text(&s)))
        }
        SubscriberCmd::Update {
            account,
            subscriber,
            name,
            status,
            attrs,
        } => {
            let u = Update {
                account,
                subscriber,
                name: name.as_deref(),
                status: status.as_deref(),
                attrs,
            };
            let s = subscribers::update(&*open(cli)?, &u)?;
            Ok(Output::ok(
                to_json(&s),
                format!("subscriber {} updated", s.id),
            ))
        }
        SubscriberCmd::Remove {
            account,
            subscriber,
        } => {
            let r = subscribers::remove(&*open(cli)?, account, subscriber)?;
            let text = format!(
                "subscriber {} removed (the ledger keeps its past sends)",
                r.id
            );
            Ok(Output::ok(to_json(&r), text))
        }
        other => personal(cli, other),
    }
}

/// `export` and `erase`: a subscriber's data on request.
fn personal(cli: &Cli, cmd: &SubscriberCmd) -> Result<Output> {
    match cmd {
        SubscriberCmd::Export {
            account,
            subscriber,
        } => {
            let data = privacy::export(&*open_read_only(cli)?, account, subscriber)?;
            let text = serde_json::to_string_pretty(&data).unwrap_or_default();
            Ok(Output::ok(data, text))
        }
        SubscriberCmd::Erase {
            account,
            subscriber,
            yes,
        } => {
            if !yes {
                return Err(Error::invalid(
                    "erasure cannot be undone: add --yes to erase this subscriber's data \
                     (`subscriber export` first keeps a copy); nothing was changed",
                ));
            }
            let e = privacy::erase(&*open(cli)?, account, subscriber)?;
            let text = format!(
                "subscriber {} erased: {} sends, {} API messages, {} consent records, {} \
                 events changed; its addresses stay suppressed by their SHA-256",
                e.subscriber_id, e.sends, e.api_messages, e.consents, e.events
            );
            Ok(Output::ok(to_json(&e), text))
        }
        // Handled by `command` and `change`, which send only the two above here.
        _ => command(cli, cmd),
    }
}

/// The public URL and keys of confirmation links, when members join lists (a double opt-in
/// list needs them; `app` says so).
fn confirm_links(
    lists: &[String],
    a: &PublicUrlArgs,
) -> Result<Option<sendonce_domain::links::Links>> {
    if lists.is_empty() {
        return Ok(None);
    }
    sendonce_core::app::run::links(a.config.as_deref(), a.public_url.as_deref())
}

/// An import told: how many rows went in, and every skipped one with its line.
fn imported(report: subscribers::Imported) -> Result<Output> {
    let mut text = format!("imported {} subscribers", report.imported);
    if report.existing > 0 {
        text.push_str(&format!(
            ", {} already subscribers (added to the lists)",
            report.existing
        ));
    }
    if !report.skipped.is_empty() {
        text.push_str(&format!(", skipped {}:", report.skipped.len()));
        for s in &report.skipped {
            text.push_str(&format!("\n  line {}: {}", s.line, s.reason));
        }
    }
    Ok(Output::ok(to_json(&report), text))
}

fn list(list: subscribers::Subscribers) -> Result<Output> {
    let mut text = String::from("ID\tEMAIL\tPHONE\tNAME\tSTATUS");
    for r in &list.subscribers {
        text.push_str(&format!(
            "\n{}\t{}\t{}\t{}\t{}",
            r.id,
            r.email.as_deref().unwrap_or("-"),
            r.phone.as_deref().unwrap_or("-"),
            r.name.as_deref().unwrap_or("-"),
            r.status
        ));
    }
    Ok(Output::ok(to_json(&list), text))
}
