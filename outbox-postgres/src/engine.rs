//! The store's own runtime, and the hop onto it that keeps database work off the caller's async
//! workers.

use outbox_core::{Error, Result};

/// The store's own small runtime, on which its connections live and its statements run.
///
/// Store calls hop onto it from a blocking thread of the caller's runtime
/// (`spawn_blocking` + `Handle::block_on`), so:
/// - no engine work runs on the application's async worker threads;
/// - a store outlives any one runtime that uses it (its pool is not tied to the caller's);
/// - under tokio's paused clock (the conformance suite's runner scenarios) the caller's clock
///   does not jump ahead while a statement is on the wire, since a running blocking task
///   holds auto-advance back, and the pool's timeouts keep counting real time.
pub(crate) struct Engine {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Engine {
    pub(crate) fn new() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("outbox-postgres")
            .enable_all()
            .build()
            .map_err(|err| Error::Backend {
                detail: format!("could not start the store's runtime: {err}"),
                source: Some(Box::new(err)),
            })?;
        Ok(Engine {
            runtime: Some(runtime),
        })
    }

    pub(crate) fn handle(&self) -> Result<tokio::runtime::Handle> {
        self.runtime
            .as_ref()
            .map(|r| r.handle().clone())
            .ok_or(Error::Stopped)
    }

    /// Runs `work` on the store's runtime and waits for it off the caller's async workers.
    pub(crate) async fn run<T, Fut>(&self, work: Fut) -> Result<T>
    where
        T: Send + 'static,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        let handle = self.handle()?;
        match tokio::runtime::Handle::try_current() {
            Ok(_) => tokio::task::spawn_blocking(move || handle.block_on(work))
                .await
                .map_err(Error::backend)?,
            // Called outside any runtime (a plain `block_on` of a foreign executor): the
            // current thread may block.
            Err(_) => handle.block_on(work),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime blocks; this may run inside an async context.
            runtime.shutdown_background();
        }
    }
}
