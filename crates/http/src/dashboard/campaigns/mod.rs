//! `/admin/campaigns/...`: a new draft from a form, one campaign (counts per state, throughput,
//! audience before approval, approve / pause / resume / cancel behind a confirmation page),
//! its live counts as JSON and the small script that refreshes them. The preview and the
//! recipients report are in `report.rs`. Every `{id}` is checked to be the admin's account's
//! (`app::campaigns::owned`) before anything reads or changes it.

mod report;

use super::{fail, page, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sendonce_core::app::admins::Session;
use sendonce_core::app::campaigns::{self, Draft, Status};
use sendonce_core::app::lists;
use sendonce_domain::clock;
use sendonce_domain::error::{Error, Result};
use sendonce_store::prelude::*;
use sendonce_store::Store;
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/campaigns/new"),
    ("POST", "/admin/campaigns/new"),
    ("GET", "/admin/campaigns/{id}"),
    ("GET", "/admin/campaigns/{id}/approve"),
    ("POST", "/admin/campaigns/{id}/approve"),
    ("GET", "/admin/campaigns/{id}/pause"),
    ("POST", "/admin/campaigns/{id}/pause"),
    ("GET", "/admin/campaigns/{id}/resume"),
    ("POST", "/admin/campaigns/{id}/resume"),
    ("GET", "/admin/campaigns/{id}/cancel"),
    ("POST", "/admin/campaigns/{id}/cancel"),
    ("GET", "/admin/campaigns/{id}/progress.json"),
    ("GET", "/admin/campaigns/{id}/preview"),
    ("GET", "/admin/campaigns/{id}/preview/html"),
    ("GET", "/admin/campaigns/{id}/recipients"),
    ("GET", "/admin/campaigns/{id}/recipients.csv"),
    ("GET", "/admin/static/dashboard.js"),
];

pub fn routes() -> axum::Router<AppState> {
    let mut r = axum::Router::new()
        .route("/admin/campaigns/new", get(new_form).post(create))
        .route("/admin/campaigns/{id}", get(show))
        .route("/admin/campaigns/{id}/progress.json", get(progress))
        .route("/admin/static/dashboard.js", get(script));
    for action in Action::ALL {
        let path = format!("/admin/campaigns/{{id}}/{}", action.word());
        r = r.route(
            &path,
            get(move |st, s, p| confirm(st, s, p, action))
                .post(move |st, p, f| act(st, p, f, action)),
        );
    }
    r.merge(report::routes())
}

/// The campaign id of a path: anything but a number is an unknown campaign (404).
pub(super) fn campaign_id(text: &str) -> Result<i64> {
    text.parse::<i64>()
        .map_err(|_| Error::not_found(format!("unknown campaign id {text}")))
}

/// Run `f` on campaign `id` of the session's account (404 for another account's).
pub(super) async fn owned<T: Send + 'static>(
    st: &AppState,
    session: &Session,
    id: &str,
    f: impl FnOnce(&Store, sendonce_store::Campaign) -> Result<T> + Send + 'static,
) -> Result<T> {
    let id = campaign_id(id)?;
    let account = session.admin.account_id;
    blocking(st, move |s| {
        let c = campaigns::owned(s, account, id)?;
        f(s, c)
    })
    .await
}

// ---- the new-campaign form ------------------------------------------------------------------

/// The form's values, kept when it comes back with an error.
#[derive(Debug, Default, serde::Serialize)]
struct Form {
    name: String,
    channel: String,
    from: String,
    subject: String,
    text: String,
    html: String,
    filter: String,
    lists: Vec<String>,
    transactional: bool,
}

impl Form {
    fn from_pairs(pairs: Vec<(String, String)>) -> Form {
        let mut f = Form::default();
        for (k, v) in pairs {
            match k.as_str() {
                "name" => f.name = v,
                "channel" => f.channel = v,
                "from" => f.from = v,
                "subject" => f.subject = v,
                "text" => f.text = v,
                "html" => f.html = v,
                "filter" => f.filter = v,
                "lists" => f.lists.push(v),
                "transactional" => f.transactional = !v.is_empty(),
                _ => {}
            }
        }
        f
    }

    fn draft(&self) -> Result<Draft> {
        let opt = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let channel = self.channel.parse().map_err(|_| {
            Error::invalid(format!(
                "channel {:?} is neither email nor sms",
                self.channel
            ))
        })?;
        Draft {
            name: self.name.clone(),
            channel,
            sender: opt(&self.from),
            subject: opt(&self.subject),
            body: self.text.clone(),
            html: opt(&self.html),
            reply_to: None,
            filter: opt(&self.filter),
            transactional: self.transactional,
            // The account's defaults (`account update`).
            send_window: None,
            sms_hours: None,
        }
        .checked()
    }
}

async fn form_page(
    st: &AppState,
    session: &Session,
    form: Form,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    let account = session.admin.account_id.to_string();
    match blocking(st, move |s| lists::list(s, &account)).await {
        Ok(l) => {
            let ctx = minijinja::context! {
                title => "New campaign", form => form, error => error, lists => l.lists,
            };
            let mut res = page(session, "campaigns", "admin/campaign_new.html", ctx);
            *res.status_mut() = status;
            res
        }
        Err(e) => fail(Some(session), &e),
    }
}

async fn new_form(State(st): State<AppState>, Signed(session): Signed) -> Response {
    let form = Form {
        channel: "email".into(),
        ..Default::default()
    };
    form_page(&st, &session, form, None, StatusCode::OK).await
}

async fn create(
    State(st): State<AppState>,
    Posted(session, pairs): Posted<Vec<(String, String)>>,
) -> Response {
    let form = Form::from_pairs(pairs);
    let draft = match form.draft() {
        Ok(d) => d,
        Err(e) => {
            return form_page(
                &st,
                &session,
                form,
                Some(e.message),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
    };
    let account = session.admin.account_id.to_string();
    let keys = form.lists.clone();
    match blocking(&st, move |s| campaigns::create(s, &account, &draft, &keys)).await {
        Ok(made) => see_other(&format!("/admin/campaigns/{}?done=created", made.id)),
        Err(e) => {
            let (status, _) = crate::status_for(e.kind);
            if status.is_server_error() {
                return fail(Some(&session), &e);
            }
            // An unknown list or a refused field: the form's fault, the form again.
            form_page(
                &st,
                &session,
                form,
                Some(e.message),
                StatusCode::BAD_REQUEST,
            )
            .await
        }
    }
}

// ---- one campaign ---------------------------------------------------------------------------

/// A campaign's numbers as the page and `progress.json` show them.
#[derive(Debug, serde::Serialize)]
pub struct Progress {
    pub status: String,
    pub total: u64,
    /// Sends no longer queued or leased.
    pub done: u64,
    pub counts: std::collections::BTreeMap<&'static str, u64>,
    pub settled: bool,
}

impl From<Status> for Progress {
    fn from(s: Status) -> Progress {
        Progress {
            status: s.status.to_string(),
            total: s.total,
            done: s.total - s.open().min(s.total),
            settled: s.settled(),
            counts: s.counts,
        }
    }
}

/// What the campaign page shows beyond the campaign row.
#[derive(Debug, serde::Serialize)]
struct Shown {
    campaign: serde_json::Value,
    progress: Progress,
    audience: Option<lists::Audience>,
    /// Sent per minute since the campaign started (`None` before it started).
    per_minute: Option<String>,
    started: Option<String>,
    finished: Option<String>,
}

fn shown(s: &Store, c: sendonce_store::Campaign) -> Result<Shown> {
    let progress = Progress::from(campaigns::status(s, c.id)?);
    // The audience counts walk the targeted subscribers: only before approval, when the
    // campaign has no sends yet.
    let audience = match c.status {
        sendonce_domain::model::CampaignStatus::Draft => Some(lists::audience(s, c.id)?),
        _ => None,
    };
    let sent = progress.counts.get("sent").copied().unwrap_or(0);
    let per_minute = c.started_at.map(|t0| {
        let end = c.finished_at.unwrap_or_else(clock::now_ms);
        let minutes = ((end - t0).max(1000) as f64) / 60_000.0;
        format!("{:.1}", sent as f64 / minutes)
    });
    let campaign = serde_json::json!({
        "id": c.id, "name": c.name, "channel": c.channel.to_string(),
        "status": c.status.to_string(), "from": c.sender, "subject": c.subject,
        "filter": c.filter, "transactional": c.transactional,
        "tz": c.windows.tz, "send_window": c.windows.window, "sms_hours": c.windows.sms_hours,
    });
    Ok(Shown {
        campaign,
        progress,
        audience,
        per_minute,
        started: c.started_at.map(clock::format_ms),
        finished: c.finished_at.map(clock::format_ms),
    })
}

#[derive(Debug, Deserialize)]
struct Done {
    #[serde(default)]
    done: String,
}

/// The flash after a post, from a fixed set (never the query's text itself).
fn flash(done: &str) -> Option<&'static str> {
    Some(match done {
        "created" => "Draft created.",
        "approve" => "Campaign approved: it sends when a worker picks it up.",
        "pause" => "Campaign paused.",
        "resume" => "Campaign resumed.",
        "cancel" => "Campaign cancelled: its queued sends will not go out.",
        _ => return None,
    })
}

async fn show(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    Query(q): Query<Done>,
) -> Response {
    let worker = match &st.worker_alive {
        None => {
            "no worker in this server: a separate `sendonce run` (or `serve --worker`) sends it"
        }
        Some(a) if a.load(std::sync::atomic::Ordering::Relaxed) => "this server's worker sends it",
        Some(_) => "this server's worker has stopped (see the server log)",
    };
    let ops = st.ops.clone();
    let found = owned(&st, &session, &id, move |s, c| {
        // The route's label names the config file's route and the provider's kind, never
        // the spec (it can hold a key).
        let routes = sendonce_core::app::doubts::RouteSource {
            config: ops.file.as_ref(),
            provider: ops.provider.as_deref(),
        };
        let route = routes.label(
            c.account_id,
            &s.account_name(c.account_id)?,
            &c.channel.to_string(),
        );
        Ok((shown(s, c)?, route))
    })
    .await;
    match found {
        Ok((v, route)) => {
            let actions: Vec<&str> = Action::ALL
                .iter()
                .filter(|a| a.allowed(&v.progress.status))
                .map(|a| a.word())
                .collect();
            let ctx = minijinja::context! {
                title => format!("Campaign {}", v.campaign["name"].as_str().unwrap_or("")),
                c => v.campaign, p => v.progress, audience => v.audience,
                per_minute => v.per_minute, started => v.started, finished => v.finished,
                actions => actions, worker => worker, route => route, flash => flash(&q.done),
            };
            page(&session, "campaigns", "admin/campaign.html", ctx)
        }
        Err(e) => fail(Some(&session), &e),
    }
}

async fn progress(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    match owned(&st, &session, &id, |s, c| campaigns::status(s, c.id)).await {
        Ok(s) => {
            let mut res = axum::Json(Progress::from(s)).into_response();
            super::security_headers(res.headers_mut());
            res
        }
        Err(e) => {
            let (status, _) = crate::status_for(e.kind);
            (
                status,
                axum::Json(serde_json::json!({ "error": e.message })),
            )
                .into_response()
        }
    }
}

// ---- approve, pause, resume, cancel ---------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Action {
    Approve,
    Pause,
    Resume,
    Cancel,
}

impl Action {
    const ALL: [Action; 4] = [
        Action::Approve,
        Action::Pause,
        Action::Resume,
        Action::Cancel,
    ];

    fn word(self) -> &'static str {
        match self {
            Action::Approve => "approve",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel => "cancel",
        }
    }

    /// Whether a campaign in `status` offers this action.
    fn allowed(self, status: &str) -> bool {
        match self {
            Action::Approve => status == "draft",
            Action::Pause => matches!(status, "approved" | "sending"),
            Action::Resume => status == "paused",
            Action::Cancel => matches!(status, "draft" | "approved" | "sending" | "paused"),
        }
    }

    fn question(self) -> &'static str {
        match self {
            Action::Approve => "Approve this campaign? Its recipients are listed and sending starts as soon as a worker picks it up.",
            Action::Pause => "Pause this campaign? Sends in flight finish; nothing new starts until it is resumed.",
            Action::Resume => "Resume this campaign? Sending starts again.",
            Action::Cancel => "Cancel this campaign? Its queued sends are cancelled; this cannot be undone.",
        }
    }

    fn run(self, s: &Store, id: i64, links: Option<&sendonce_domain::links::Links>) -> Result<()> {
        match self {
            Action::Approve => {
                campaigns::approve(s, id, clock::now_ms(), links, campaigns::Empty::Warn)
                    .map(|_| ())
            }
            Action::Pause => campaigns::pause(s, id).map(|_| ()),
            Action::Resume => campaigns::resume(s, id).map(|_| ()),
            Action::Cancel => campaigns::cancel(s, id).map(|_| ()),
        }
    }
}

async fn confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    action: Action,
) -> Response {
    match owned(&st, &session, &id, |_, c| Ok(c)).await {
        Ok(c) => {
            let ctx = minijinja::context! {
                title => format!("{} campaign {}", action.word(), c.name),
                id => c.id, name => c.name, status => c.status.to_string(),
                action => action.word(), question => action.question(),
                allowed => action.allowed(c.status.as_str()),
            };
            page(&session, "campaigns", "admin/campaign_confirm.html", ctx)
        }
        Err(e) => fail(Some(&session), &e),
    }
}

async fn act(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Posted(session, _): Posted<serde::de::IgnoredAny>,
    action: Action,
) -> Response {
    let links = st.links.clone();
    let run = move |s: &Store, c: sendonce_store::Campaign| action.run(s, c.id, links.as_deref());
    match owned(&st, &session, &id, run).await {
        Ok(()) => see_other(&format!("/admin/campaigns/{id}?done={}", action.word())),
        Err(e) => fail(Some(&session), &e),
    }
}

// ---- the script -----------------------------------------------------------------------------

const SCRIPT: &str = include_str!("../static/dashboard.js");

async fn script() -> Response {
    let mut res = SCRIPT.into_response();
    let h = res.headers_mut();
    super::security_headers(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    res
}
