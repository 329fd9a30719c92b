//! How a scenario reports: passed, skipped (with the capability it needs) or failed (with a
//! message a backend author can act on), and how the generated tests run one.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// The backend can plant a row it cannot decode ([`Backend::plant_unreadable`]).
    ///
    /// [`Backend::plant_unreadable`]: crate::Backend::plant_unreadable
    UnreadableRows,
    /// The backend opens a store with a size cap ([`Backend::open_capped`]).
    ///
    /// [`Backend::open_capped`]: crate::Backend::open_capped
    SizeCap,
}

impl Capability {
    /// True when `caps` declares this capability.
    ///
    /// ```
    /// use outbox_testkit::{Capabilities, Capability};
    /// let caps = Capabilities { persistent: true, shared: false, unreadable_rows: false, size_cap: false };
    /// assert!(Capability::Persistent.declared_by(caps));
    /// assert!(!Capability::Shared.declared_by(caps));
    /// ```
    pub fn declared_by(self, caps: Capabilities) -> bool {
        match self {
            Capability::Persistent => caps.persistent,
            Capability::Shared => caps.shared,
            Capability::UnreadableRows => caps.unreadable_rows,
            Capability::SizeCap => caps.size_cap,
        }
    }
}

impl Capability {
    /// Why a scenario needs it, in words.
    ///
    /// ```
    /// use outbox_testkit::Capability;
    /// assert!(Capability::Persistent.reason().contains("restart"));
    /// ```
    pub fn reason(self) -> &'static str {
        match self {
            Capability::Persistent => {
                "it restarts the store or kills its process and checks what survived a restart"
            }
            Capability::Shared => "it opens one store from several handles and processes at once",
            Capability::UnreadableRows => {
                "it plants a stored row the backend cannot decode, which a store of decoded values cannot hold"
            }
            Capability::SizeCap => "it opens a store with a size cap",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::Persistent => "persistent",
            Capability::Shared => "shared",
            Capability::UnreadableRows => "unreadable rows",
            Capability::SizeCap => "a size cap",
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

/// One scenario of the suite, as the list in the `conformance!` macro names it (see
/// [`SCENARIOS`](crate::scenarios::SCENARIOS)).
///
/// ```
/// use outbox_testkit::scenarios::SCENARIOS;
/// let fifo = SCENARIOS.iter().find(|s| s.name == "fifo").unwrap();
/// assert_eq!(fifo.needs, None);
/// assert!(fifo.limit().as_secs() > 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The name of the scenario's function in [`scenarios`](crate::scenarios) and of its test.
    pub name: &'static str,
    /// The capability it needs, if any.
    pub needs: Option<Capability>,
    /// Its wall-clock time limit, in seconds.
    pub limit_secs: u64,
    /// What it checks, in a line.
    pub checks: &'static str,
}

impl Scenario {
    /// Its wall-clock time limit, scaled by `OUTBOX_TESTKIT_TIME_SCALE` when set (a slow
    /// machine may double every limit with `OUTBOX_TESTKIT_TIME_SCALE=2`).
    pub fn limit(&self) -> Duration {
        let scale = std::env::var(TIME_SCALE_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(1)
            .max(1);
        Duration::from_secs(self.limit_secs.saturating_mul(scale))
    }
}

/// Environment variable that multiplies every scenario's time limit.
pub const TIME_SCALE_ENV: &str = "OUTBOX_TESTKIT_TIME_SCALE";

thread_local! {
    static WAITING: std::cell::RefCell<Option<Arc<Mutex<String>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Notes what the running scenario waits for now, for the message if its time runs out.
/// Scenarios call it before each wait that a broken store could make endless.
///
/// ```
/// outbox_testkit::harness::waiting_for("the claimers to run out of records");
/// ```
pub fn waiting_for(what: impl Into<String>) {
    WAITING.with(|w| {
        if let Some(note) = &*w.borrow() {
            *note.lock().unwrap_or_else(|e| e.into_inner()) = what.into();
        }
    });
}

/// Drives `scenario` on the current-thread `runtime` for at most `limit` of wall-clock time.
/// Past the limit the scenario is dropped and the result is a failure naming `name` and what
/// it last said it was waiting for (see [`waiting_for`]).
///
/// The limit is not a sleep: a scenario that ends sooner returns at once.
///
/// ```
/// use std::time::Duration;
/// use outbox_testkit::harness::{bounded, waiting_for};
///
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// let hung = bounded(&runtime, "hangs", Duration::from_millis(50), async {
///     waiting_for("a reply that never comes");
///     std::future::pending::<()>().await;
///     Ok(outbox_testkit::Verdict::Passed)
/// });
/// let failure = hung.unwrap_err();
/// assert!(failure.message().contains("hangs"));
/// assert!(failure.message().contains("a reply that never comes"));
/// ```
pub fn bounded<Fut>(
    runtime: &tokio::runtime::Runtime,
    name: &str,
    limit: Duration,
    scenario: Fut,
) -> ScenarioResult
where
    Fut: Future<Output = ScenarioResult>,
{
    let note = Arc::new(Mutex::new(String::from("the scenario to start")));
    let previous = WAITING.with(|w| w.replace(Some(Arc::clone(&note))));
    let expired = Arc::new(AtomicBool::new(false));
    let waker: Arc<Mutex<Option<std::task::Waker>>> = Arc::default();
    let (finished, finish) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let expired = Arc::clone(&expired);
        let waker = Arc::clone(&waker);
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finish.recv_timeout(limit) {
                expired.store(true, Ordering::SeqCst);
                if let Some(waker) = waker.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    waker.wake();
                }
            }
        })
    };
    let mut scenario = std::pin::pin!(scenario);
    let outcome = runtime.block_on(std::future::poll_fn(|cx| {
        if expired.load(Ordering::SeqCst) {
            return std::task::Poll::Ready(None);
        }
        *waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
        scenario.as_mut().poll(cx).map(Some)
    }));
    drop(finished);
    let _ = watchdog.join();
    WAITING.with(|w| w.replace(previous));
    match outcome {
        Some(result) => result,
        None => {
            let what = note.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Err(Failure::new(format!(
                "scenario {name} did not finish within {limit:?} (wall clock), waiting for {what}"
            )))
        }
    }
}

/// Runs one listed scenario as a test; the `conformance!` macro calls this once per test.
///
/// With `skip` set the backend is not built: the test prints the reason and passes. Without
/// the capability the scenario needs, the same; so too when a scenario that needs a second
/// capability skips itself for it, one the backend does not declare (a skip for a capability
/// the backend declares panics: the scenario would pass without having run). Otherwise it
/// builds a current-thread runtime with time and I/O enabled (a scenario that drives the
/// runner pauses its clock, so it never waits on the wall clock), builds the backend inside
/// it, and runs the scenario under its time limit ([`bounded`]); a failure panics with the
/// scenario's and the backend's names.
pub fn run_listed<B, F, Fut>(
    scenario: &Scenario,
    skip: Option<String>,
    backend: impl FnOnce() -> B,
    run: F,
) where
    B: Backend,
    F: FnOnce(Arc<B>) -> Fut,
    Fut: Future<Output = ScenarioResult>,
{
    let name = scenario.name;
    if let Some(reason) = skip {
        eprintln!("skipped: {name} (backend skipped: {reason})");
        return;
    }
    let runtime = test_runtime();
    // Built inside the runtime's context: a backend may start tasks or timers as it is made.
    let backend = {
        let _context = runtime.enter();
        Arc::new(backend())
    };
    let backend_name = backend.name();
    if let Some(needs) = scenario.needs {
        if !needs.declared_by(backend.capabilities()) {
            eprintln!(
                "skipped: {name} needs {needs} ({}), backend {backend_name}",
                needs.reason()
            );
            return;
        }
    }
    let declared = backend.capabilities();
    let result = bounded(&runtime, name, scenario.limit(), run(backend));
    // A scenario cut off by its limit may leave blocking work behind; do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(Verdict::Passed) => {}
        // A scenario that needs more than the one capability its list names skips itself
        // for the other, which the backend does not declare either: an honest skip.
        Ok(Verdict::Skipped { needs, .. }) if !needs.declared_by(declared) => eprintln!(
            "skipped: {name} needs {needs} ({}), backend {backend_name}",
            needs.reason()
        ),
        // The backend declares what the scenario says it lacks: a scenario that skips
        // itself then would pass without having run.
        Ok(skipped @ Verdict::Skipped { .. }) => {
            panic!("{name}: {skipped}, but {backend_name} declares it")
        }
        Err(failure) => panic!("{name} on backend {backend_name}: {failure}"),
    }
}

fn test_runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => panic!("could not build a tokio runtime for the scenario: {err}"),
    }
}

/// Runs one scenario as a test: builds a runtime, runs the future, prints a skip and panics on a
/// failure (with the backend's name). For a scenario of the list, [`run_listed`] also applies
/// its time limit and capability.
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
