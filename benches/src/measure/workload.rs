//! Which measurement the command line asks for, with its sizes.

use super::MeasureError;
use crate::subject::StoreKind;

/// Concurrent producers in the burst and in the concurrent phase of the enqueue rate.
pub const PRODUCERS: usize = 64;

/// One measurement and its sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// `burst`: `rounds` rounds of [`PRODUCERS`] concurrent producers, each enqueuing one record
    /// and waiting until it is durable: time per round, enqueues per second, and commits per
    /// round where the store counts them.
    Burst {
        /// Rounds (`--rounds`, default 100).
        rounds: usize,
    },
    /// `enqueue-rate`: `n` single-record enqueues by one producer, then about `n` more by
    /// [`PRODUCERS`] concurrent producers (`n / 64` each, rounded up): time, enqueues per
    /// second, and transactions where the store counts them.
    EnqueueRate {
        /// Enqueues per phase (`--n`, default 5,000).
        n: usize,
    },
    /// `enqueue-vs-bare`: one producer, one record per enqueue, against the bare engine
    /// committing one row per transaction at the same durability, in `rounds` alternating
    /// rounds of `n`: the median time per call on each side and the median ratio of rates.
    EnqueueVsBare {
        /// Rounds (`--rounds`, default 5).
        rounds: usize,
        /// Enqueues, and bare inserts, per round (`--n`, default 200).
        n: usize,
    },
    /// `call-overhead`: `n` `get` calls of one record against the same read on the engine
    /// directly, and an empty `spawn_blocking` round trip: what a store call costs beyond its
    /// engine work.
    CallOverhead {
        /// Calls of each kind (`--n`, default 10,000).
        n: usize,
    },
    /// `idle-claims`: `n` claims on a queue where nothing is due yet, as an idle runner makes:
    /// time per claim, and the commits they made where the store counts them.
    IdleClaims {
        /// Claims (`--n`, default 1,000).
        n: usize,
    },
    /// `drain-rate`: the enqueue rate of `n` records in batches of 100 (a third of them in 50
    /// groups), then the end-to-end drain of `n` due records by runners with the default
    /// configuration: 1, 2 and 4 runners, each on a store of its own (a handle on the one
    /// SQLite file, a pool on the one PostgreSQL schema), or one runner on redb and memory.
    DrainRate {
        /// Records (`--n`, default 4,000).
        n: usize,
    },
}

impl Workload {
    /// The workload names, in the order the usage line lists them.
    pub const NAMES: [&'static str; 6] = [
        "burst",
        "enqueue-rate",
        "enqueue-vs-bare",
        "call-overhead",
        "idle-claims",
        "drain-rate",
    ];

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Workload::Burst { .. } => "burst",
            Workload::EnqueueRate { .. } => "enqueue-rate",
            Workload::EnqueueVsBare { .. } => "enqueue-vs-bare",
            Workload::CallOverhead { .. } => "call-overhead",
            Workload::IdleClaims { .. } => "idle-claims",
            Workload::DrainRate { .. } => "drain-rate",
        }
    }

    /// The workload `name` with `--n` and `--rounds` as given (`None`: the default); a flag
    /// the workload does not read is refused.
    pub fn parse(
        name: &str,
        n: Option<usize>,
        rounds: Option<usize>,
    ) -> std::result::Result<Workload, MeasureError> {
        let unused =
            |flag: &str| MeasureError::Usage(format!("{name} takes no {flag}; see measure --help"));
        let workload = match name {
            "burst" => Workload::Burst {
                rounds: rounds.unwrap_or(100),
            },
            "enqueue-rate" => Workload::EnqueueRate {
                n: n.unwrap_or(5_000),
            },
            "enqueue-vs-bare" => Workload::EnqueueVsBare {
                rounds: rounds.unwrap_or(5),
                n: n.unwrap_or(200),
            },
            "call-overhead" => Workload::CallOverhead {
                n: n.unwrap_or(10_000),
            },
            "idle-claims" => Workload::IdleClaims {
                n: n.unwrap_or(1_000),
            },
            "drain-rate" => Workload::DrainRate {
                n: n.unwrap_or(4_000),
            },
            other => {
                return Err(MeasureError::Usage(format!(
                    "unknown workload {other:?}: one of {}",
                    Workload::NAMES.join(", ")
                )))
            }
        };
        let reads_rounds = matches!(
            workload,
            Workload::Burst { .. } | Workload::EnqueueVsBare { .. }
        );
        if n.is_some() && matches!(workload, Workload::Burst { .. }) {
            return Err(unused("--n"));
        }
        if rounds.is_some() && !reads_rounds {
            return Err(unused("--rounds"));
        }
        Ok(workload)
    }

    /// Why `store` cannot run this workload, if it cannot.
    pub(super) fn unavailable(self, store: StoreKind) -> Option<&'static str> {
        match (self, store) {
            (Workload::EnqueueVsBare { .. }, StoreKind::Memory) => {
                Some("the memory store has no engine under it to compare with")
            }
            _ => None,
        }
    }
}
