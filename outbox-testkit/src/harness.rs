//! How a scenario reports: passed, skipped (with the capability it needs) or failed (with a
//! message a backend author can act on), and how the generated tests run one.

use std::fmt;
use std::future::Future;

use crate::backend::{Backend, Capabilities};

/// A scenario that ran to its end: it passed, or it did not apply to the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held.
    Passed,
    /// The scenario needs a capability the backend does not declare.
    Skipped {
        /// The scenario's name.
        scenario: &'static str,
        /// The capability it needs.
        needs: Capability,
    },
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Passed => f.write_str("passed"),
            Verdict::Skipped { scenario, needs } => write!(f, "skipped: {scenario} needs {needs}"),
        }
    }
}

/// A capability a scenario can need (see [`Capabilities`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Records survive a drop and a kill of the process.
    Persistent,
    /// Several handles and processes may open one store at once.
    Shared,
}

impl Capability {
    /// True when `caps` declares this capability.
    ///
    /// ```
    /// use outbox_testkit::{Capabilities, Capability};
    /// let caps = Capabilities { persistent: true, shared: false };
    /// assert!(Capability::Persistent.declared_by(caps));
    /// assert!(!Capability::Shared.declared_by(caps));
    /// ```
    pub fn declared_by(self, caps: Capabilities) -> bool {
        match self {
            Capability::Persistent => caps.persistent,
            Capability::Shared => caps.shared,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::Persistent => "persistent",
            Capability::Shared => "shared",
        })
    }
}

/// A check of a scenario that did not hold, or a store call that failed.
///
/// ```
/// use outbox_testkit::Failure;
/// let failure = Failure::new("claimed #2 before #1");
/// assert_eq!(failure.to_string(), "claimed #2 before #1");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Failure {
    message: String,
}

impl Failure {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
        }
    }

    /// The same failure with `context` (for example the seed, or the step) in front.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Failure {
            message: format!("{context}: {}", self.message),
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

// Debug prints the message as is, so a panicking test shows readable multi-line text.
impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<outbox_core::Error> for Failure {
    fn from(err: outbox_core::Error) -> Self {
        let mut message = format!("store error: {err}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            message.push_str(&format!("; caused by: {cause}"));
            source = cause.source();
        }
        Failure { message }
    }
}

/// What every scenario returns.
pub type ScenarioResult = Result<Verdict, Failure>;

/// `Some(skipped)` when `backend` lacks `needs`: the scenario then returns it at once.
///
/// ```
/// use outbox_testkit::{skip_unless, Capability, MemoryBackend, Verdict};
/// let skipped = skip_unless(&MemoryBackend::new(), "restart_preserves_records", Capability::Persistent);
/// assert!(matches!(skipped, Some(Verdict::Skipped { .. })));
/// ```
pub fn skip_unless(
    backend: &dyn Backend,
    scenario: &'static str,
    needs: Capability,
) -> Option<Verdict> {
    (!needs.declared_by(backend.capabilities())).then_some(Verdict::Skipped { scenario, needs })
}

/// Fails with `message` unless `condition` holds.
pub(crate) fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), Failure> {
    if condition {
        Ok(())
    } else {
        Err(Failure::new(message()))
    }
}

/// Fails unless `actual == expected`, showing both.
pub(crate) fn ensure_eq<T: PartialEq + fmt::Debug>(
    actual: T,
    expected: T,
    what: impl fmt::Display,
) -> Result<(), Failure> {
    if actual == expected {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "{what}\n  expected: {expected:?}\n    actual: {actual:?}"
        )))
    }
}

/// Runs one scenario as a test: builds a runtime, runs the future, prints a skip and panics on a
/// failure (with the backend's name). The `conformance!` macro calls this once per test.
///
/// The runtime is tokio's current-thread runtime with time and I/O enabled, so a scenario that
/// drives the runner can pause tokio's clock (`tokio::time::pause`) and never wait on the wall
/// clock. A backend does its blocking work off this thread, as it must anyway.
pub fn run_scenario<B, F, Fut>(backend: impl FnOnce() -> B, scenario: F)
where
    B: Backend,
    F: FnOnce(std::sync::Arc<B>) -> Fut,
    Fut: Future<Output = ScenarioResult>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => panic!("could not build a tokio runtime for the scenario: {err}"),
    };
    // Built inside the runtime's context: a backend may start tasks or timers as it is made.
    let backend = {
        let _context = runtime.enter();
        std::sync::Arc::new(backend())
    };
    let name = backend.name();
    match runtime.block_on(scenario(backend)) {
        Ok(Verdict::Passed) => {}
        Ok(skipped @ Verdict::Skipped { .. }) => eprintln!("{skipped} (backend {name})"),
        Err(failure) => panic!("backend {name}: {failure}"),
    }
}
