//! `/admin/campaigns`: the account's campaigns with their status.

use super::{fail, page, Signed};
use crate::app::campaigns;
use crate::http::{blocking, AppState};
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;

pub const ROUTES: &[(&str, &str)] = &[("GET", "/admin/campaigns")];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/admin/campaigns", get(list))
}

async fn list(State(st): State<AppState>, Signed(session): Signed) -> Response {
    let account = session.admin.account_id.to_string();
    match blocking(&st, move |s| campaigns::list(s, Some(&account), None)).await {
        Ok(list) => page(
            &session,
            "campaigns",
            "admin/campaigns.html",
            minijinja::context! { title => "Campaigns", campaigns => list.campaigns },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}
