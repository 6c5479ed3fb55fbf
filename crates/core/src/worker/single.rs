//! The one way a message reaches a provider ([`dispatch`]: every header value checked, then the
//! call within its timeout), and one message outside the ledger (`campaign test-send`): the
//! route's rate limit is taken and the provider called once. No lease, no retry, no record: a
//! test copy is not part of any campaign's exactly-once promise.

use super::routes::Route;
use crate::provider::{CallResult, Message, Provider};
use sendonce_domain::error::Result;
use std::time::Duration;

/// Send `msg` once through `route`.
pub async fn send_one(route: &Route, msg: &Message) -> Result<CallResult> {
    if let Some(l) = &route.limiter {
        l.acquire(1).await?;
    }
    let timeout = route.provider.capabilities().call_timeout;
    Ok(dispatch(route.provider.as_ref(), msg, timeout).await)
}

/// Call `p` with `msg` within `timeout`, after checking every header value of the rendered
/// message ([`sendonce_domain::headers::check_rendered`]): a value holding a line break, a
/// control character or an encoded word (subscriber data from before the input checks) is a
/// permanent failure of this message, and no provider sees it, whatever it does with headers.
pub(super) async fn dispatch(p: &dyn Provider, msg: &Message, timeout: Duration) -> CallResult {
    if let Err(e) = sendonce_domain::headers::check_rendered(&msg.headers()) {
        return CallResult::Permanent {
            error: format!("not sent: {e}"),
            suppress: None,
        };
    }
    match tokio::time::timeout(timeout, p.send(msg)).await {
        Ok(res) => res,
        Err(_) => CallResult::Ambiguous {
            error: format!("provider call timed out after {timeout:?}"),
        },
    }
}
