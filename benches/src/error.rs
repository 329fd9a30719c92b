//! Engine errors of the bare baselines, mapped into [`outbox_core::Error`] with their source.

use outbox_core::Error;

/// Wraps an error of a bare engine, saying what it was doing, and keeps the engine's error as
/// the source.
pub(crate) fn engine<E>(doing: &'static str) -> impl FnOnce(E) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |err| Error::Backend {
        detail: format!("{doing}: {err}"),
        source: Some(Box::new(err)),
    }
}
