//! `/admin/settings`: for an operator (`admin create --operator`), this server's effective
//! configuration (`app::config::show`: each setting with its source, secrets told only as set
//! or not) and the `doctor` findings on its database (`app::doctor::run`), each with its level
//! and hint. An account's admin sees only its own account's webhook secrets
//! (`app::config::account_secrets`): the database path, the default provider and other
//! accounts' webhooks are the server's, not the account's (issue 37). The doctor runs on a
//! thread of its own, one run at a time, and its report is reused for [`DOCTOR_FOR`]: its
//! `quick_check` reads the whole file (about 4 s on a file of a million sends), which no page
//! request waits for.

use super::{fail, page, Signed};
use crate::{blocking, AppState};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use sendonce_core::app::{config, doctor};
use sendonce_store::prelude::*;
use serde::Deserialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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
    if !session.admin.is_operator() {
        return show_account(st, session).await;
    }
    let ops = st.ops.clone();
    let fresh = q.fresh.as_deref() == Some("1");
    let got = blocking(&st, move |s| {
        let origin = ops
            .db_from
            .clone()
            .unwrap_or(sendonce_core::config::Origin::Default);
        let shown = config::show(
            ops.config.as_deref(),
            (&ops.db, &origin),
            &sendonce_core::config::process_env,
        )?;
        // The doctor looks at the whole server: on a server of several accounts its details
        // (campaign ids, counts, routes) can be another account's, so only each finding's
        // name, level and hint are shown there.
        let shared = sendonce_core::app::accounts::count(s)? > 1;
        Ok((shown, doctor_report(&ops, fresh), shared))
    })
    .await;
    match got {
        Ok((shown, (report, running), shared)) => {
            let age_s = report.as_ref().map(|(at, _, _)| at.elapsed().as_secs());
            let took_ms = report.as_ref().map(|(_, _, t)| t.as_millis() as u64);
            page(
                &session,
                "settings",
                "admin/settings.html",
                minijinja::context! {
                    title => "Settings",
                    operator => true,
                    shown => shown,
                    doctor => report.map(|(_, r, _)| r),
                    running => running,
                    shared => shared,
                    age_s => age_s,
                    took_ms => took_ms,
                },
            )
        }
        Err(e) => fail(Some(&session), &e),
    }
}

/// An account admin's Settings: its account's webhook secrets (as set or not), from the config
/// file the server runs with. No doctor run: the doctor looks at the whole server.
async fn show_account(st: AppState, session: sendonce_core::app::admins::Session) -> Response {
    use sendonce_core::config::AccountRef;
    let ops = st.ops.clone();
    let account_id = session.admin.account_id;
    let got = blocking(&st, move |s| {
        let ours = |a: &AccountRef| match a {
            AccountRef::Id(id) => *id == account_id,
            AccountRef::Name(n) => s.resolve_account(n).is_ok_and(|id| id == account_id),
        };
        Ok(config::account_secrets(
            ops.file.as_ref(),
            &sendonce_core::config::process_env,
            &ours,
        ))
    })
    .await;
    match got {
        Ok(secrets) => page(
            &session,
            "settings",
            "admin/settings.html",
            minijinja::context! {
                title => "Settings",
                operator => false,
                secrets => secrets,
            },
        ),
        Err(e) => fail(Some(&session), &e),
    }
}

/// The last doctor report (when it was made, the report, how long it took) and whether a run
/// is under way. The page never waits for the doctor (its `quick_check` reads the whole file):
/// when the report is older than [`DOCTOR_FOR`] (asked `fresh`: [`FRESH_AFTER`]) or missing, a
/// run starts on a thread of its own, unless one already runs, and the page shows what it has.
fn doctor_report(
    ops: &Arc<crate::Ops>,
    fresh: bool,
) -> (Option<(Instant, doctor::Report, Duration)>, bool) {
    let last = ops.doctor.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let keep = if fresh { FRESH_AFTER } else { DOCTOR_FOR };
    let stale = last.as_ref().is_none_or(|(at, _, _)| at.elapsed() >= keep);
    if stale && !ops.doctor_running.swap(true, Ordering::SeqCst) {
        let ops = ops.clone();
        std::thread::spawn(move || {
            // Whatever happens to the run (a panic included), the flag is cleared.
            struct Done(Arc<crate::Ops>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.doctor_running.store(false, Ordering::SeqCst);
                }
            }
            let _done = Done(ops.clone());
            let started = Instant::now();
            let run = doctor::run(&doctor::Request {
                db: sendonce_store::Target::parse(&ops.db),
                full: false,
                config: ops.config.clone(),
                provider: ops.provider.clone(),
            });
            match run {
                Ok(report) => {
                    *ops.doctor.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((Instant::now(), report, started.elapsed()));
                }
                Err(e) => tracing::warn!(error = %e, "the settings page's doctor run failed"),
            }
        });
    }
    (last, ops.doctor_running.load(Ordering::SeqCst))
}
