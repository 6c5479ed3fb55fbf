//! One message outside the ledger (`campaign test-send`): the route's rate limit is taken and
//! the provider called once within its timeout. No lease, no retry, no record: a test copy is
//! not part of any campaign's exactly-once promise.

use super::routes::Route;
use crate::error::Result;
use crate::provider::{CallResult, Message};

/// Send `msg` once through `route`.
pub async fn send_one(route: &Route, msg: &Message) -> Result<CallResult> {
    if let Some(l) = &route.limiter {
        l.acquire(1).await?;
    }
    let timeout = route.provider.capabilities().call_timeout;
    Ok(
        match tokio::time::timeout(timeout, route.provider.send(msg)).await {
            Ok(res) => res,
            Err(_) => CallResult::Ambiguous {
                error: format!("provider call timed out after {timeout:?}"),
            },
        },
    )
}
