//! One campaign's message and recipients: the preview (headers, text, the HTML part in a
//! sandboxed frame, an SMS's segments) for one subscriber, the recipients report as a paged
//! table with a search by address prefix and by state, and the whole report as a CSV download
//! streamed from the store (the CLI's writer, `app::campaigns::write_report_csv`).

use super::owned;
use crate::dashboard::{fail, page, sandbox, security_headers, Signed};
use crate::AppState;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sendonce_core::app::admins::Session;
use sendonce_core::app::{campaigns, preview, subscribers};
use sendonce_domain::error::{Error, Result};
use sendonce_store::{Campaign, Store};
use serde::Deserialize;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Rows on one page of the recipients table.
const PAGE: usize = 100;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/admin/campaigns/{id}/preview", get(show_preview))
        .route("/admin/campaigns/{id}/preview/html", get(preview_html))
        .route("/admin/campaigns/{id}/recipients", get(recipients))
        .route("/admin/campaigns/{id}/recipients.csv", get(csv))
}

#[derive(Debug, Default, Deserialize)]
struct Who {
    #[serde(default)]
    subscriber: String,
}

/// Who a preview is for when the reader named nobody: the account's first subscriber (one
/// indexed row; the page says why when that one would not receive the campaign). Not the
/// campaign's first send: that is an ordered read of every send of the campaign (0.85 s on a
/// million-recipient campaign).
fn default_subscriber(s: &Store, c: &Campaign) -> Result<String> {
    let account = c.account_id.to_string();
    let page = subscribers::Page {
        account: &account,
        status: None,
        after: 0,
        limit: 1,
    };
    subscribers::list(s, &page)?
        .subscribers
        .into_iter()
        .next()
        .map(|x| x.id.to_string())
        .ok_or_else(|| {
            Error::not_found("the account has no subscriber to preview this campaign for")
        })
}

async fn render_preview(
    st: &AppState,
    session: &Session,
    id: &str,
    who: String,
) -> Result<(Campaign, preview::Preview)> {
    let links = st.links.clone();
    owned(st, session, id, move |s, c| {
        let who = match who.trim() {
            "" => default_subscriber(s, &c)?,
            w => w.to_string(),
        };
        let p = preview::preview(s, c.id, &who, links.as_deref())?;
        Ok((c, p))
    })
    .await
}

async fn show_preview(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    Query(q): Query<Who>,
) -> Response {
    let asked = q.subscriber.clone();
    match render_preview(&st, &session, &id, q.subscriber).await {
        Ok((c, p)) => {
            let sms = (c.channel == sendonce_domain::address::Channel::Sms)
                .then(|| sendonce_domain::sms::segments(&p.message.body).segments);
            let who: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("subscriber", &p.subscriber_id.to_string())
                .finish();
            let ctx = minijinja::context! {
                title => format!("Preview of {}", c.name), id => c.id, name => c.name,
                m => p.message, why_not => p.why_not, sms_segments => sms,
                html_src => format!("/admin/campaigns/{}/preview/html?{who}", c.id),
                asked => asked,
            };
            page(&session, "campaigns", "admin/campaign_preview.html", ctx)
        }
        Err(e) => fail(Some(&session), &e),
    }
}

async fn preview_html(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    Query(q): Query<Who>,
) -> Response {
    match render_preview(&st, &session, &id, q.subscriber).await {
        Ok((_, p)) => sandbox::sandboxed_html(p.message.html.unwrap_or_default()),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Default, Deserialize)]
struct Search {
    #[serde(default)]
    q: String,
    #[serde(default)]
    status: String,
    after: Option<i64>,
}

async fn recipients(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
    Query(q): Query<Search>,
) -> Response {
    let (text, status) = (q.q.clone(), q.status.clone());
    let found = owned(&st, &session, &id, move |s, c| {
        let prefix = Some(q.q.as_str()).filter(|p| !p.trim().is_empty());
        let state = Some(q.status.as_str()).filter(|p| !p.is_empty());
        let page = campaigns::report_search(s, c.id, prefix, state, q.after.unwrap_or(0), PAGE)?;
        Ok((c, page))
    })
    .await;
    match found {
        Ok((c, p)) => {
            let next = p.next_after.map(|after| {
                let qs: String = form_urlencoded::Serializer::new(String::new())
                    .append_pair("q", &text)
                    .append_pair("status", &status)
                    .append_pair("after", &after.to_string())
                    .finish();
                format!("/admin/campaigns/{}/recipients?{qs}", c.id)
            });
            let lines: Vec<_> = p
                .lines
                .into_iter()
                .map(|l| {
                    let sent = l.sent_at.map(sendonce_domain::clock::format_ms);
                    minijinja::context! { l => l, sent => sent }
                })
                .collect();
            let ctx = minijinja::context! {
                title => format!("Recipients of {}", c.name), id => c.id, name => c.name,
                lines => lines, next => next, q => text, status => status,
                states => sendonce_domain::model::SendStatus::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            };
            page(&session, "campaigns", "admin/campaign_recipients.html", ctx)
        }
        Err(e) => fail(Some(&session), &e),
    }
}

/// The report's bytes, handed from the store's blocking thread to the response body.
struct Chunks(tokio::sync::mpsc::Receiver<Bytes>);

impl HttpBody for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// A writer that sends 64 KiB chunks to the body; a client that went away is a broken pipe.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 64 * 1024 {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

async fn csv(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    let c = match owned(&st, &session, &id, |_, c| Ok(c)).await {
        Ok(c) => c,
        Err(e) => return fail(Some(&session), &e),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut w = ChunkWriter {
            tx,
            buf: Vec::new(),
        };
        let r = campaigns::write_report_csv(&store, c.id, &mut w)
            .and_then(|()| std::io::Write::flush(&mut w).map_err(Error::output));
        if let Err(e) = r {
            tracing::warn!(campaign = c.id, error = %e, "a CSV report download ended early");
        }
    });
    let mut res = Body::new(Chunks(rx)).into_response();
    let h = res.headers_mut();
    security_headers(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    let disposition = format!("attachment; filename=\"campaign-{}-recipients.csv\"", c.id);
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    res
}
