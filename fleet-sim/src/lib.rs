//! A fleet of devices after an outage: each device runs outbox's own runner scheduler and
//! retry policy over its own in-memory store, against one simulated server, on a virtual
//! clock. It shows what a retry schedule does to a server when many devices fail together.
//!
//! - [`params`]: the fleet, the server and the outage ([`Params`]), and the retry schedules
//!   compared ([`Scenario`]);
//! - `device`: one device, the scheduler's store calls performed as the runner's shell
//!   performs them;
//! - [`server`]: capacity per second, down during the outage, 429 with `Retry-After` when over;
//! - [`sim`]: one heap of `(virtual time, device)` for the whole fleet;
//! - [`report`](mod@report) and [`chart`](mod@chart): the figures, `FLEET.md` and its SVG chart.
//!
//! Nothing reads the wall clock or an unseeded RNG: one seed gives the same report, byte for
//! byte.
//!
//! ```
//! use fleet_sim::{simulate, Params, Scenario};
//! use std::time::Duration;
//!
//! let params = Params::default().with_devices(100).with_outage(Duration::from_secs(600));
//! let run = simulate(&params, Scenario::Defaults);
//! assert_eq!(run.delivered, run.records);
//! ```
#![deny(missing_docs)]

pub mod chart;
mod device;
pub mod params;
pub mod report;
pub mod server;
pub mod sim;

pub use chart::chart;
pub use params::{Params, Scenario};
pub use report::{report, table, Figures};
pub use server::Series;
pub use sim::{simulate, Run};
