//! How big each workload is in a full run, a quick run and a smoke run.

/// Workload sizes for one run of the benchmarks.
///
/// ```
/// use outbox_benches::plan::Plan;
/// let full = Plan::full();
/// assert_eq!(full.drain_records, 10_000);
/// assert_eq!(full.due_backlogs, [10_000, 1_000_000]);
/// assert!(Plan::smoke().drain_records < 100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Concurrent producers in the group-commit workload.
    pub producers: usize,
    /// Records per enqueue call in the batch workload, and per transaction in the bare rows.
    pub batch: usize,
    /// Records the end-to-end workload enqueues and then drains.
    pub drain_records: usize,
    /// Records the PostgreSQL drain rows enqueue and then drain (the server may be slower than
    /// a local file, so a plan may take fewer there than [`Plan::drain_records`]).
    pub pg_drain_records: usize,
    /// The two backlogs of not-yet-due records the due query runs over: the small one is the
    /// yardstick of the large one.
    pub due_backlogs: [usize; 2],
    /// Criterion samples per row (at least 10).
    pub samples: usize,
    /// Criterion warm-up per row, in milliseconds.
    pub warm_up_ms: u64,
    /// Criterion measurement time per row, in milliseconds.
    pub measure_ms: u64,
}

impl Plan {
    /// The sizes the issue asks for: what `BENCHMARKS.md` is written from.
    pub const fn full() -> Self {
        Plan {
            producers: 64,
            batch: 100,
            drain_records: 10_000,
            pg_drain_records: 10_000,
            due_backlogs: [10_000, 1_000_000],
            samples: 20,
            warm_up_ms: 1_000,
            measure_ms: 4_000,
        }
    }

    /// A smoke run of a minute or two: the same workloads, a smaller due backlog, few samples.
    pub const fn quick() -> Self {
        Plan {
            producers: 64,
            batch: 100,
            drain_records: 2_000,
            pg_drain_records: 2_000,
            due_backlogs: [1_000, 20_000],
            samples: 10,
            warm_up_ms: 100,
            measure_ms: 500,
        }
    }

    /// Tiny sizes for `cargo test`: every workload runs, nothing is measured.
    pub const fn smoke() -> Self {
        Plan {
            producers: 4,
            batch: 5,
            drain_records: 20,
            pg_drain_records: 20,
            due_backlogs: [10, 50],
            samples: 10,
            warm_up_ms: 1,
            measure_ms: 1,
        }
    }
}
