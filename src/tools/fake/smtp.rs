//! The fake provider's SMTP listener (`--smtp`): accepts mail from any client and stores each
//! message in the journal before answering 250. (Being built: see issue 18.)

use super::server::Shared;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serve SMTP on `listener` until `stop` turns true; then stop accepting and let sessions end.
pub(super) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let _ = (shared, listener);
    let _ = stop.wait_for(|s| *s).await;
}
