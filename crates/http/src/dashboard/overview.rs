//! `/admin/campaigns`: the account's campaigns, newest first, 50 a page, with their status; a
//! campaign approved, sending or paused also shows its progress per send state (a
//! `<progress>` bar, refreshed by the dashboard script through its `progress.json`).

use super::{fail, page, Signed};
use crate::{blocking, AppState};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use sendonce_core::app::campaigns;
use serde::Deserialize;

pub const ROUTES: &[(&str, &str)] = &[("GET", "/admin/campaigns")];

/// Campaigns on one page of the list.
const PAGE: usize = 50;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/admin/campaigns", get(list))
}

#[derive(Debug, Default, Deserialize)]
struct Paging {
    /// A campaign id: the page starts below it (newest first).
    before: Option<i64>,
}

async fn list(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(q): Query<Paging>,
) -> Response {
    let account = session.admin.account_id.to_string();
    let found = blocking(&st, move |s| {
        let all = campaigns::list(s, Some(&account), None)?.campaigns;
        let shown: Vec<_> = all
            .into_iter()
            .filter(|c| q.before.is_none_or(|b| c.id < b))
            .take(PAGE + 1)
            .collect();
        let mut rows = Vec::new();
        for c in shown.iter().take(PAGE) {
            // Every campaign past its draft shows its numbers, a finished one too (as its own
            // page does). SQLite reads them from the trigger-kept `campaign_counts`.
            let p = if c.status.as_str() == "draft" {
                None
            } else {
                Some(super::campaigns::Progress::from(campaigns::status(
                    s, c.id,
                )?))
            };
            rows.push(minijinja::context! { c => c, p => p });
        }
        let next = (shown.len() > PAGE).then(|| shown[PAGE - 1].id);
        Ok((rows, next))
    })
    .await;
    match found {
        Ok((rows, next)) => page(
            &session,
            "campaigns",
            "admin/campaigns.html",
            minijinja::context! { title => "Campaigns", campaigns => rows, next => next },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}
