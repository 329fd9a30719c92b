//! The runner's tracing spans: one per round, one per delivery inside it, with the record,
//! its group, its counters and the outcome once known.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{sink_fn, Millis, NewRecord, Outbox, Outcome, Record, TokioClock};
use outbox_memory::MemoryStore;
use tracing_subscriber::fmt::format::FmtSpan;

const BASE: Millis = 1_700_000_000_000;

/// Collects formatted lines.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// Captures this thread's debug spans as they close, until the guard is dropped.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(FmtSpan::CLOSE)
            .with_writer(move || writer.clone())
            .finish();
        (lines, tracing::subscriber::set_default(subscriber))
    }

    fn closed(&self, span: &str) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .filter(|l| l.contains(span) && l.contains(": close"))
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn each_delivery_has_a_span_with_the_record_and_its_outcome_inside_its_round() {
    let (lines, _guard) = Lines::capture();
    let sink = sink_fn(|record: Record| async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        if record.payload == b"ok" {
            Outcome::Delivered
        } else {
            Outcome::transient("HTTP 503", None)
        }
    });
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink)
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .start()
        .await
        .unwrap();
    outbox
        .enqueue_batch(vec![
            NewRecord::new(b"ok".to_vec()).in_group("doc-1"),
            NewRecord::new(b"busy".to_vec()),
        ])
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();

    let deliveries = lines.closed("outbox.deliver{");
    assert_eq!(deliveries.len(), 2, "{deliveries:#?}");
    let first = &deliveries
        .iter()
        .find(|l| l.contains("record=1 "))
        .unwrap_or_else(|| panic!("{deliveries:#?}"));
    assert!(first.contains(r#"group="doc-1""#), "{first}");
    assert!(
        first.contains("attempts=0 unanswered=0 interrupted=0"),
        "{first}"
    );
    assert!(first.contains(r#"outcome="delivered""#), "{first}");
    assert!(first.contains("took_ms=30"), "{first}");
    // The delivery runs inside the round that claimed it.
    assert!(
        first.contains("outbox.round{written=0 claimed=2}:outbox.deliver{"),
        "{first}"
    );
    let second = deliveries
        .iter()
        .find(|l| l.contains("record=2 "))
        .unwrap_or_else(|| panic!("{deliveries:#?}"));
    assert!(!second.contains("group="), "{second}");
    assert!(second.contains(r#"outcome="transient""#), "{second}");
    assert!(second.contains(r#"detail="HTTP 503""#), "{second}");
}

#[tokio::test(start_paused = true)]
async fn deliveries_of_a_round_claimed_ahead_run_inside_its_claim_not_the_round_before() {
    let (lines, _guard) = Lines::capture();
    let sink = sink_fn(|_: Record| async { Outcome::Delivered });
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink)
        .clock(Arc::new(TokioClock::starting_at(BASE)))
        .start()
        .await
        .unwrap();
    // Rounds of 32 and 64, then 128 and 256 each claimed while the round before delivered.
    let sizes = [32u64, 64, 128, 256];
    let backlog: u64 = sizes.iter().sum();
    outbox
        .enqueue_batch(
            (0..backlog)
                .map(|_| NewRecord::new(b"x".to_vec()))
                .collect(),
        )
        .await
        .unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();

    let deliveries = lines.closed("outbox.deliver{");
    assert_eq!(deliveries.len() as u64, backlog);
    let field = |line: &str, name: &str| -> u64 {
        let at = line.find(name).unwrap_or_else(|| panic!("{line}")) + name.len();
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap_or_else(|_| panic!("{line}"))
    };
    for line in &deliveries {
        let id = field(line, "record=");
        let mut first = 1;
        let size = sizes
            .iter()
            .find(|&&size| {
                first += size;
                id < first
            })
            .unwrap();
        assert_eq!(field(line, "claimed="), *size, "{line}");
    }
}
