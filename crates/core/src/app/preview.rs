//! What one recipient of a campaign would get (`campaign preview`), rendered from the same
//! frozen content and captured variables as the worker renders it, without writing anything;
//! and `campaign test-send`: that message, marked as a test, sent once to another address
//! through the campaign's route, outside the ledger.

use crate::provider::{build_email, CallResult, EmailSettings, Message};
use crate::worker::routes::Routes;
use sendonce_domain::address;
use sendonce_domain::error::{Error, Result};
use sendonce_domain::links::Links;
use sendonce_domain::model::{self, SendStatus};
use sendonce_domain::template::{CampaignVars, Compiled, Sources};
use sendonce_store::prelude::*;
use sendonce_store::{Campaign, RecipientRow, Store};
use serde::Serialize;

/// What a test copy's subject starts with.
pub const TEST_SUBJECT_PREFIX: &str = "[TEST] ";

/// One recipient's message as it would go out.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    pub campaign_id: i64,
    pub subscriber_id: i64,
    /// Whether the campaign sends this subscriber a message now, and if not, why.
    pub would_receive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    #[serde(flatten)]
    pub message: Message,
}

/// Render campaign `campaign_id` for subscriber `subscriber` (id, email address or phone
/// number); `links` signs `{{ unsubscribe_url }}`.
pub fn preview(
    store: &Store,
    campaign_id: i64,
    subscriber: &str,
    links: Option<&Links>,
) -> Result<Preview> {
    let c = store.campaign(campaign_id)?;
    let sub = store.find_subscriber(c.account_id, subscriber)?;
    let r = store.recipient(campaign_id, sub.id)?;
    let to = r.address.clone().ok_or_else(|| {
        Error::invalid(format!(
            "subscriber {} has no {} for this {} campaign",
            sub.id,
            address_word(&c),
            c.channel
        ))
    })?;
    let job_id = match &r.send {
        Some((job, _)) => job.clone(),
        None => model::campaign_job_id(&store.key_scope(campaign_id, sub.id)?, campaign_id, sub.id),
    };
    let tpl = compile(store, &c, links)?;
    let link = match links {
        Some(l) => Some(l.unsubscribe_url(&link_target(store, &c, &to)?)),
        None => None,
    };
    let message = render(&c, &tpl, &r.vars, job_id, to, link.as_deref())?;
    let why_not = why_not(&r);
    Ok(Preview {
        campaign_id,
        subscriber_id: sub.id,
        would_receive: why_not.is_none(),
        why_not,
        message,
    })
}

/// Who an unsubscribe link of campaign `c` to `to` is for (as the worker seals it).
fn link_target(store: &Store, c: &Campaign, to: &str) -> Result<sendonce_domain::links::Target> {
    Ok(sendonce_domain::links::Target {
        account_id: c.account_id,
        channel: c.channel,
        address: to.to_string(),
        lists: store.campaign_lists(c.id)?,
        campaign_id: c.id,
    })
}

fn address_word(c: &Campaign) -> &'static str {
    match c.channel {
        address::Channel::Email => "email address",
        address::Channel::Sms => "phone number",
    }
}

/// Why the campaign would not send this subscriber a message (None: it would).
fn why_not(r: &RecipientRow) -> Option<String> {
    if let Some((_, status)) = &r.send {
        return match status {
            SendStatus::Queued | SendStatus::Leased => None,
            s => Some(format!("its send is already {s}")),
        };
    }
    if r.subscriber_status != "confirmed" {
        Some(format!("the subscriber is {}", r.subscriber_status))
    } else if !r.targeted {
        Some("not subscribed to any list the campaign targets".into())
    } else if !r.matches_filter {
        Some("the campaign's filter leaves the subscriber out".into())
    } else if r.suppressed {
        Some("the address is suppressed".into())
    } else {
        None
    }
}

/// The campaign's templates compiled as the worker compiles them.
fn compile(store: &Store, c: &Campaign, links: Option<&Links>) -> Result<Compiled> {
    let ids = store.campaign_lists(c.id)?;
    let mut lists: Vec<String> = store
        .lists(c.account_id)?
        .into_iter()
        .filter(|l| ids.contains(&l.id))
        .map(|l| l.name)
        .collect();
    lists.sort();
    let src = Sources {
        subject: c.subject.as_deref(),
        text: Some(c.body.as_str()).filter(|b| !b.is_empty()),
        html: c.html.as_deref(),
    };
    let vars = CampaignVars {
        name: c.name.clone(),
        lists,
    };
    let tpl = Compiled::campaign(&src, &vars, c.sms_footer.as_deref())?;
    if tpl.reads("unsubscribe_url") && links.is_none() {
        return Err(Error::invalid(format!(
            "campaign {} prints {{{{ unsubscribe_url }}}}: pass --public-url URL (or set \
             public_url in the config file, or {}) and set {}",
            c.id,
            sendonce_domain::links::PUBLIC_URL_ENV,
            sendonce_domain::links::SECRET_ENV
        )));
    }
    Ok(tpl)
}

fn render(
    c: &Campaign,
    tpl: &Compiled,
    vars: &str,
    job_id: String,
    to: String,
    link: Option<&str>,
) -> Result<Message> {
    let r = tpl.render_json(vars, link)?;
    Ok(Message {
        status_callback: None,
        idempotency_key: model::idempotency_key(&job_id),
        job_id,
        channel: c.channel,
        from: c.sender.clone(),
        reply_to: c.reply_to.clone(),
        to,
        subject: r.subject,
        body: r.text,
        html: r.html,
        unsubscribe: link
            .filter(|_| c.channel == address::Channel::Email && !c.transactional)
            .map(str::to_string),
        attachments: Vec::new(),
    })
}

/// The RFC 5322 bytes of an email preview, built as the SMTP provider builds them: with the
/// settings of the campaign's route in `routes` when that route is SMTP, the builder's defaults
/// otherwise (HTTP APIs build their own MIME). The `Date` is now.
pub fn eml(store: &Store, p: &Preview, routes: Option<&Routes>) -> Result<Vec<u8>> {
    if p.message.channel != address::Channel::Email {
        return Err(Error::invalid(
            "an sms campaign has no eml form: use --format text",
        ));
    }
    let settings = match routes {
        Some(routes) => {
            let c = store.campaign(p.campaign_id)?;
            let account = store.account_name(c.account_id)?;
            let route = routes.for_campaign(c.account_id, &account, c.channel)?;
            route.provider.email_settings().cloned().unwrap_or_default()
        }
        None => EmailSettings::default(),
    };
    build_email(&p.message, &settings, std::time::SystemTime::now())
        .map(|b| b.bytes)
        .map_err(|e| Error::invalid(format!("the message cannot be built: {e}")))
}

/// A test copy sent (or not).
#[derive(Debug, Clone, Serialize)]
pub struct TestSent {
    pub campaign_id: i64,
    /// The subscriber whose variables filled the templates.
    pub subscriber_id: i64,
    pub to: String,
    pub job_id: String,
    /// `sent`, `failed` or `unknown` (the provider's answer was lost: it may have gone out).
    pub outcome: &'static str,
    pub provider_message_id: Option<String>,
    pub error: Option<String>,
}

/// Send one copy of campaign `campaign_id`, rendered for `subscriber` (default: the first
/// subscriber it would reach), to `to`, through the campaign's route in `routes`. The subject
/// starts with [`TEST_SUBJECT_PREFIX`]; the job id is `test:CAMPAIGN:UUID`, new on each call,
/// and the unsubscribe link is the test address's own (a click does not unsubscribe the
/// subscriber whose variables were used).
pub fn test_send(
    store: &Store,
    routes: &Routes,
    target: &TestTarget<'_>,
    rt: &tokio::runtime::Runtime,
) -> Result<TestSent> {
    let c = store.campaign(target.campaign_id)?;
    let to = address::normalize_for(c.channel, target.to).map_err(|e| e.context("--to"))?;
    let subscriber = match target.subscriber {
        Some(s) => store.find_subscriber(c.account_id, s)?.id,
        None => first_recipient(store, &c)?,
    };
    let r = store.recipient(c.id, subscriber)?;
    let job_id = format!("test:{}:{}", c.id, uuid::Uuid::new_v4());
    let tpl = compile(store, &c, target.links)?;
    let link = match target.links {
        Some(l) => Some(l.unsubscribe_url(&link_target(store, &c, &to)?)),
        None => None,
    };
    let mut msg = render(
        &c,
        &tpl,
        &r.vars,
        job_id.clone(),
        to.clone(),
        link.as_deref(),
    )?;
    msg.subject = msg.subject.map(|s| format!("{TEST_SUBJECT_PREFIX}{s}"));
    let account = store.account_name(c.account_id)?;
    let route = routes.for_campaign(c.account_id, &account, c.channel)?;
    let res = rt.block_on(crate::worker::send_one(&route, &msg))?;
    let (outcome, provider_message_id, error) = match res {
        CallResult::Accepted { provider_id, .. } => ("sent", Some(provider_id), None),
        CallResult::AlreadyAccepted { detail } => ("sent", None, Some(detail)),
        CallResult::Permanent { error, .. } | CallResult::NotSent { error, .. } => {
            ("failed", None, Some(error))
        }
        CallResult::Ambiguous { error } => ("unknown", None, Some(error)),
    };
    tracing::info!(campaign_id = c.id, job_id = %job_id, outcome, "test copy");
    Ok(TestSent {
        campaign_id: c.id,
        subscriber_id: subscriber,
        to,
        job_id,
        outcome,
        provider_message_id,
        error,
    })
}

/// Which campaign, rendered for whom, sent where.
#[derive(Debug, Clone, Copy)]
pub struct TestTarget<'a> {
    pub campaign_id: i64,
    pub to: &'a str,
    pub subscriber: Option<&'a str>,
    pub links: Option<&'a Links>,
}

/// The first confirmed subscriber (by id) the campaign would send to.
fn first_recipient(store: &Store, c: &Campaign) -> Result<i64> {
    const PAGE: usize = 500;
    let mut after = 0;
    loop {
        let page = store.list_subscribers(c.account_id, Some("confirmed"), after, PAGE)?;
        for s in &page {
            let r = store.recipient(c.id, s.id)?;
            if r.address.is_some() && why_not(&r).is_none() {
                return Ok(s.id);
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = last.id,
            _ => break,
        }
    }
    Err(Error::invalid(format!(
        "campaign {} would reach nobody now, so there is no subscriber to fill its templates \
         with: pass --subscriber ID|ADDRESS",
        c.id
    )))
}
