//! Graceful stop: the one place that turns SIGTERM and Ctrl-C into a future that resolves.

use crate::error::{Error, Result};

/// A future that resolves on SIGTERM or Ctrl-C. The handlers are installed before this returns
/// (call it inside the runtime), so a signal that arrives early — a test may send SIGTERM as
/// soon as it reads a listening address — still stops cleanly.
pub fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())
            .map_err(|e| Error::io("cannot install the SIGTERM handler", e))?;
        let mut int = signal(SignalKind::interrupt())
            .map_err(|e| Error::io("cannot install the SIGINT handler", e))?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async move {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

/// The process's one async runtime, built in `main` and lent to the commands that need it.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))
}
