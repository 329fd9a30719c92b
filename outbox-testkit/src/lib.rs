#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod backend;
pub mod committed;
pub mod crash;
pub mod files;
pub mod harness;
pub mod memory;
pub mod paused;
pub mod scenarios;
pub mod sink;
pub mod skip;

mod macros;

pub use backend::{Backend, Capabilities};
pub use committed::WakeOnlyRunner;
pub use files::{FileStore, Files};
pub use harness::{
    run_scenario, skip_unless, Capability, Failure, Scenario, ScenarioResult, Verdict,
};
pub use memory::MemoryBackend;
pub use paused::PausedClockStore;
pub use sink::{Delivery, Reply, ScriptedSink};

// Re-exported so scenario authors and users name the same clocks as the core.
pub use outbox_core::{ManualClock, SteppedClock, TokioClock};
