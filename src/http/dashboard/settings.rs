//! `/admin/settings`: this server's effective configuration (`app::config::show`: each setting
//! with its source, secrets told only as set or not) and the `doctor` findings on its database
//! (`app::doctor::run`), each with its level and hint. The doctor's report is reused for
//! [`DOCTOR_FOR`] since its `quick_check` reads the whole file (about 4 s on a file of a
//! million sends), and runs once at a time.

use super::{fail, page, Signed};
use crate::app::{config, doctor};
use crate::http::{blocking, AppState};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use std::time::{Duration, Instant};

pub const ROUTES: &[(&str, &str)] = &[("GET", "/admin/settings")];

/// How long a doctor report is shown again before the next request runs it anew.
pub const DOCTOR_FOR: Duration = Duration::from_secs(60);
/// "Check again" runs the doctor anew only if its last report is at least this old.
pub const FRESH_AFTER: Duration = Duration::from_secs(10);

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/admin/settings", get(show))
}

#[derive(Debug, Deserialize, Default)]
pub struct ShowQuery {
    /// `1`: run the doctor now rather than show its last report.
    fresh: Option<String>,
}

async fn show(
    State(st): State<AppState>,
    Signed(session): Signed,
    Query(q): Query<ShowQuery>,
) -> Response {
    let ops = st.ops.clone();
    let fresh = q.fresh.as_deref() == Some("1");
    let got = blocking(&st, move |_| {
        let origin = ops
            .db_from
            .clone()
            .unwrap_or(crate::config::Origin::Default);
        let shown = config::show(
            ops.config.as_deref(),
            (&ops.db, &origin),
            &crate::config::process_env,
        )?;
        let (report, age, took) = doctor_report(&ops, fresh)?;
        Ok((shown, report, age, took))
    })
    .await;
    match got {
        Ok((shown, report, age, took)) => page(
            &session,
            "settings",
            "admin/settings.html",
            minijinja::context! {
                title => "Settings",
                shown => shown,
                doctor => report,
                age_s => age.as_secs(),
                took_ms => took.map(|t| t.as_millis() as u64),
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The doctor's report: the last one if younger than [`DOCTOR_FOR`] (or, asked `fresh`, than
/// [`FRESH_AFTER`]), else a new one. One run at a time: a request that comes while the doctor
/// runs waits for it and shows its report, so no number of requests runs more than one scan.
/// Returns the report, its age, and how long it took when made now.
fn doctor_report(
    ops: &crate::http::Ops,
    fresh: bool,
) -> crate::error::Result<(doctor::Report, Duration, Option<Duration>)> {
    let mut last = ops.doctor.lock().unwrap_or_else(|p| p.into_inner());
    let keep = if fresh { FRESH_AFTER } else { DOCTOR_FOR };
    if let Some((at, r)) = last.as_ref().filter(|(at, _)| at.elapsed() < keep) {
        return Ok((r.clone(), at.elapsed(), None));
    }
    let started = Instant::now();
    let report = doctor::run(&doctor::Request {
        db: ops.db.clone(),
        full: false,
        config: ops.config.clone(),
        provider: ops.provider.clone(),
    })?;
    let took = started.elapsed();
    *last = Some((Instant::now(), report.clone()));
    Ok((report, Duration::ZERO, Some(took)))
}
