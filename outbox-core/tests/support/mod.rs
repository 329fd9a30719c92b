//! What several runner test files share.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Once};

/// Collects formatted log lines.
#[derive(Clone, Default)]
pub(crate) struct LogCapture(Arc<Mutex<Vec<u8>>>);

thread_local! {
    /// The capture of the test running on this thread, if it takes its lines.
    static CURRENT: RefCell<Option<LogCapture>> = const { RefCell::new(None) };
}

/// Stops a thread's capture when dropped.
pub(crate) struct Capturing(());

impl Drop for Capturing {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

impl LogCapture {
    /// Takes the lines this thread logs until the guard drops (the runner of a
    /// `current_thread` test logs on the test's thread).
    ///
    /// One subscriber serves the whole test binary and writes each line to the capture of the
    /// thread that logged it. A subscriber per test (`set_default`) loses lines now and then:
    /// tracing caches each callsite's interest for all threads, and another test's thread,
    /// with no subscriber, can cache "never" for a line this test waits for (one run in eight
    /// of `runner.rs` missed its "parked" line).
    pub(crate) fn capture(&self) -> Capturing {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(|| ThreadWriter)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
        });
        CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
        Capturing(())
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Writes to the capture of the thread it runs on, or nowhere.
struct ThreadWriter;

impl std::io::Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CURRENT.with(|c| {
            if let Some(capture) = c.borrow().as_ref() {
                capture.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
