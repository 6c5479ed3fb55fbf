//! `GET /metrics`: the process's counters (`sendonce_core::metrics`) and two gauges read from the
//! database at each scrape, in the Prometheus text format. No authentication, like `/healthz`.

use super::{blocking, AppState};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use sendonce_core::metrics::{self, Gauges};
use sendonce_store::prelude::*;

/// The routes of this module, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[("GET", "/metrics")];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/metrics", axum::routing::get(scrape))
}

/// Each gauge is cheap whatever the ledger's size: rows in doubt are counted through the
/// partial index of in-doubt rows (`Admin::in_doubt_count`), the WAL size is a stat of the
/// `-wal` file. Counters are kept in memory as things happen, never counted from the ledger.
/// A gauge that cannot be read is left out of the answer (and logged), the rest still served.
pub async fn scrape(State(st): State<AppState>) -> Response {
    let read = blocking(&st, |s| {
        Ok((
            s.in_doubt_count(),
            s.file().map_or(Ok(0), |f| f.wal_bytes()),
        ))
    })
    .await;
    let (doubt, wal) = match read {
        Ok(x) => x,
        Err(e) => (Err(e.clone()), Err(e)),
    };
    let gauges = Gauges {
        in_doubt: doubt
            .map_err(|e| tracing::warn!(error = %e, "/metrics: cannot count rows in doubt"))
            .ok(),
        wal_bytes: wal
            .map_err(|e| tracing::warn!(error = %e, "/metrics: cannot read the WAL size"))
            .ok(),
    };
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        metrics::render(&gauges),
    )
        .into_response()
}
