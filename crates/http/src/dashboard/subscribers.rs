//! `/admin/subscribers/{subscriber}`: one subscriber of the admin's account as `subscriber
//! export` sees it (its fields, list memberships and consent records), that export as a JSON
//! download, and its erasure (`subscriber erase`) behind a confirmation page.

use super::{fail, page, security_headers, see_other, Posted, Signed};
use crate::{blocking, AppState};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use minijinja::context;
use sendonce_core::app::privacy;
use sendonce_domain::address::is_erased_form;
use sendonce_domain::error::{Error, ErrorKind, Result};
use sendonce_store::Store;
use serde::Deserialize;
use serde_json::Value;

pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/admin/subscribers/{subscriber}"),
    ("GET", "/admin/subscribers/{subscriber}/export"),
    ("GET", "/admin/subscribers/{subscriber}/erase"),
    ("POST", "/admin/subscribers/{subscriber}/erase"),
];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/admin/subscribers/{subscriber}", get(show))
        .route("/admin/subscribers/{subscriber}/export", get(export))
        .route(
            "/admin/subscribers/{subscriber}/erase",
            get(erase_confirm).post(erase),
        )
}

/// A subscriber id in a path: digits only (not an address, not `+1`), else "not found", as an
/// id of another account is.
fn id(text: &str) -> Result<i64> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| text.parse::<i64>().ok())
        .flatten()
        .ok_or_else(|| Error::not_found(format!("no subscriber {text:?}")))
}

/// Everything held about subscriber `id` of account `acct` (`privacy::export`'s JSON). Only
/// that id answers: the export's key may also name an address, which a page's id never does;
/// any miss is the same "not found".
fn exported(s: &Store, acct: &str, id: i64) -> Result<Value> {
    let missing = || Error::not_found(format!("no subscriber {id}"));
    let v = privacy::export(s, acct, &id.to_string()).map_err(|e| match e.kind {
        ErrorKind::NotFound => missing(),
        _ => e,
    })?;
    if v["subscriber"]["id"].as_i64() != Some(id) {
        return Err(missing());
    }
    Ok(v)
}

/// Whether the export is of an erased subscriber (its addresses kept only as `sha256:`).
fn erased(v: &Value) -> bool {
    let sub = &v["subscriber"];
    ["email_normalised", "phone"]
        .iter()
        .filter_map(|k| sub[*k].as_str())
        .any(is_erased_form)
}

/// The subscriber's attributes as (name, value) pairs: a text as it is, anything else as JSON.
fn attrs(v: &Value) -> Vec<(String, String)> {
    let Some(map) = v["subscriber"]["attrs"].as_object() else {
        return Vec::new();
    };
    map.iter()
        .map(|(k, val)| {
            let shown = val.as_str().map_or_else(|| val.to_string(), str::to_string);
            (k.clone(), shown)
        })
        .collect()
}

/// How many rows of each kind the export holds, for the pages' summaries.
fn counts(v: &Value) -> Value {
    let n = |k: &str| v[k].as_array().map_or(0, Vec::len);
    serde_json::json!({
        "memberships": n("memberships"), "consents": n("consents"),
        "suppressions": n("suppressions"), "sends": n("sends"),
        "api_messages": n("api_messages"), "events": n("events"),
    })
}

/// A page's title for the subscriber: its address, else its id.
fn title(v: &Value) -> String {
    let sub = &v["subscriber"];
    match (sub["email"].as_str(), sub["phone"].as_str()) {
        (Some(email), _) => email.to_string(),
        (None, Some(phone)) if !is_erased_form(phone) => phone.to_string(),
        _ => format!("Subscriber {}", sub["id"]),
    }
}

#[derive(Debug, Default, Deserialize)]
struct Flash {
    #[serde(default)]
    done: Option<String>,
}

async fn show(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(sub): Path<String>,
    Query(f): Query<Flash>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    match blocking(&st, move |s| exported(s, &acct, id(&sub)?)).await {
        Ok(v) => page(
            &session,
            "lists",
            "admin/subscriber.html",
            context! {
                title => title(&v),
                s => v["subscriber"],
                attrs => attrs(&v),
                erased => erased(&v),
                memberships => v["memberships"],
                consents => v["consents"],
                counts => counts(&v),
                done => f.done,
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The export as a download: `subscriber-{id}.json`, the same JSON as `subscriber export`.
async fn export(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(sub): Path<String>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        let id = id(&sub)?;
        let v = exported(s, &acct, id)?;
        let body = serde_json::to_vec_pretty(&v)
            .map_err(|e| Error::internal(format!("the export did not serialise: {e}")))?;
        Ok((id, body))
    })
    .await;
    let (id, body) = match res {
        Ok(done) => done,
        Err(e) => return fail(Some(&session), &e),
    };
    let mut res = body.into_response();
    let h = res.headers_mut();
    security_headers(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let disposition = format!("attachment; filename=\"subscriber-{id}.json\"");
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    res
}

async fn erase_confirm(
    State(st): State<AppState>,
    Signed(session): Signed,
    Path(sub): Path<String>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    match blocking(&st, move |s| exported(s, &acct, id(&sub)?)).await {
        Ok(v) => page(
            &session,
            "lists",
            "admin/subscriber_erase.html",
            context! {
                title => "Erase a subscriber",
                who => title(&v),
                s => v["subscriber"],
                erased => erased(&v),
                counts => counts(&v),
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

#[derive(Debug, Deserialize)]
struct Nothing {}

async fn erase(
    State(st): State<AppState>,
    Path(sub): Path<String>,
    Posted(session, _): Posted<Nothing>,
) -> Response {
    let acct = session.admin.account_id.to_string();
    let res = blocking(&st, move |s| {
        let id = id(&sub)?;
        // The id is this account's subscriber (not an address the key could also name).
        exported(s, &acct, id)?;
        privacy::erase(s, &acct, &id.to_string())
    })
    .await;
    match res {
        Ok(e) => see_other(&format!(
            "/admin/subscribers/{}?done=erased",
            e.subscriber_id
        )),
        Err(e) => fail(Some(&session), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_digits_are_an_id() {
        assert_eq!(id("42").unwrap(), 42);
        for bad in ["", "+42", "-1", "4 2", "a@b.org", "99999999999999999999"] {
            assert_eq!(id(bad).unwrap_err().kind, ErrorKind::NotFound, "{bad:?}");
        }
    }

    #[test]
    fn attributes_and_the_erased_state_read_from_the_export() {
        let v = serde_json::json!({"subscriber": {
            "id": 7, "email": null, "email_normalised": "sha256:ab", "phone": null,
            "attrs": {"city": "Oslo", "n": 3},
        }});
        assert!(erased(&v));
        assert_eq!(title(&v), "Subscriber 7");
        assert_eq!(
            attrs(&v),
            vec![("city".into(), "Oslo".into()), ("n".into(), "3".into())]
        );
        let live = serde_json::json!({"subscriber": {"id": 8, "email": "a@b.org",
            "email_normalised": "a@b.org", "attrs": {}}});
        assert!(!erased(&live));
        assert_eq!(title(&live), "a@b.org");
    }
}
