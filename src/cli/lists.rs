//! `sendonce list ...`: flags parsed into the inputs of `app::lists` (create, update, list,
//! show, remove), its outputs printed as text or one JSON document; and the text of
//! `campaign audience`.

use super::args::{Cli, ConfirmArgs, ListCmd};
use super::{open, open_read_only, to_json, Output};
use sendonce_core::app::import;
use sendonce_core::app::lists::{self, Audience, ListUpdate, NewListRequest};
use sendonce_domain::clock;
use sendonce_domain::error::Result;
use sendonce_store::ConfirmContent;

pub(super) fn command(cli: &Cli, cmd: &ListCmd) -> Result<Output> {
    match cmd {
        ListCmd::Create {
            account,
            name,
            description,
            optin,
            double_opt_in,
            public,
            confirm,
        } => {
            let body = confirm_body(confirm)?;
            let req = NewListRequest {
                account,
                name,
                description: description.as_deref(),
                optin: if *double_opt_in { "double" } else { optin },
                public: *public,
                confirm: confirm_content(confirm, body.as_deref()),
            };
            let l = lists::create(&*open(cli)?, &req)?;
            Ok(Output::ok(to_json(&l), l.id.to_string()))
        }
        ListCmd::Update {
            account,
            list,
            public,
            no_public,
            confirm,
        } => update(cli, account, list, (*public, *no_public), confirm),
        ListCmd::List { account } => {
            let all = lists::list(&*open_read_only(cli)?, account)?;
            let mut text =
                String::from("ID\tNAME\tOPTIN\tSUBSCRIBED\tUNSUBSCRIBED\tPENDING\tDESCRIPTION");
            for l in &all.lists {
                text.push_str(&format!(
                    "\n{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    l.id,
                    l.name,
                    l.optin,
                    l.subscribed,
                    l.unsubscribed,
                    l.pending,
                    l.description.as_deref().unwrap_or("-")
                ));
            }
            Ok(Output::ok(to_json(&all), text))
        }
        ListCmd::Show { account, list } => {
            let l = lists::show(&*open_read_only(cli)?, account, list)?;
            let text = show_text(&l);
            Ok(Output::ok(to_json(&l), text))
        }
        ListCmd::Remove { account, list } => {
            let r = lists::remove(&*open(cli)?, account, list)?;
            let text = format!(
                "list {} {:?} removed ({} memberships; the subscribers stay)",
                r.id, r.name, r.memberships_removed
            );
            Ok(Output::ok(to_json(&r), text))
        }
    }
}

/// `list update`: `public` is (--public, --no-public).
fn update(
    cli: &Cli,
    account: &str,
    list: &str,
    public: (bool, bool),
    confirm: &ConfirmArgs,
) -> Result<Output> {
    let body = confirm_body(confirm)?;
    let u = ListUpdate {
        account,
        list,
        public: match public {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
        confirm: confirm_content(confirm, body.as_deref()),
    };
    let l = lists::update(&*open(cli)?, &u)?;
    let form = if l.public {
        "public form on"
    } else {
        "no public form"
    };
    let text = format!("list {} {:?}: {} opt-in, {form}", l.id, l.name, l.optin);
    Ok(Output::ok(to_json(&l), text))
}

/// `list show` for people.
fn show_text(l: &lists::List) -> String {
    let mut text = format!(
        "list {} {:?} (account {}, {} opt-in, created {})\n  {}\nsubscribed\t{}\n\
         unsubscribed\t{}\npending\t{}\npublic form\t{}",
        l.id,
        l.name,
        l.account_id,
        l.optin,
        clock::format_ms(l.created_at),
        l.description.as_deref().unwrap_or("(no description)"),
        l.subscribed,
        l.unsubscribed,
        l.pending,
        if l.public { "yes" } else { "no" }
    );
    if let Some(c) = &l.confirm {
        let body = if c.body.is_some() {
            "(set)"
        } else {
            "(default)"
        };
        text.push_str(&format!(
            "\nconfirm from\t{}\nconfirm subject\t{}\nconfirm body\t{body}",
            c.from
                .as_deref()
                .unwrap_or("(none: members cannot be added)"),
            c.subject.as_deref().unwrap_or("(default)"),
        ));
    }
    text
}

/// The text of --confirm-body-file, if given.
fn confirm_body(c: &ConfirmArgs) -> Result<Option<String>> {
    c.confirm_body_file
        .as_deref()
        .map(|f| import::read_body_file("--confirm-body-file", f))
        .transpose()
}

fn confirm_content<'a>(c: &'a ConfirmArgs, body: Option<&'a str>) -> ConfirmContent<'a> {
    ConfirmContent {
        from: c.confirm_from.as_deref(),
        subject: c.confirm_subject.as_deref(),
        body,
    }
}

/// `campaign audience` (and `campaign create --dry-run`) for people: what is targeted, the
/// filter, then one count per line.
pub(super) fn audience_text(a: &Audience) -> String {
    let targets = if a.lists.is_empty() {
        "every subscriber of the account".to_string()
    } else {
        let ids: Vec<String> = a.lists.iter().map(i64::to_string).collect();
        format!("lists {}", ids.join(", "))
    };
    let what = match a.campaign_id {
        Some(id) => format!("campaign {id}"),
        None => "dry run, nothing written".to_string(),
    };
    // As written, on one line: a filter typed over several lines is shown quoted.
    let filter = match a.filter.as_deref() {
        None => "(none)".to_string(),
        Some(f) if f.chars().any(char::is_control) => format!("{f:?}"),
        Some(f) => f.to_string(),
    };
    format!(
        "{what} ({}): {targets}\nfilter: {filter}\n\
         would_receive\t{}\nduplicates\t{}\nsuppressed\t{}\nunsubscribed\t{}\n\
         unconfirmed\t{}\nno_address\t{}\nfiltered_out\t{}",
        a.channel,
        a.would_receive,
        a.duplicates,
        a.suppressed,
        a.unsubscribed,
        a.unconfirmed,
        a.no_address,
        a.filtered_out
    )
}
