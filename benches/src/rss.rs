//! Resident memory of this process, from `/proc/self/status` (Linux).

use std::fs;

use outbox_core::{Error, Result};

use crate::error::engine;

/// Resident set sizes, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rss {
    /// `VmRSS`: resident now.
    pub current_kib: u64,
    /// `VmHWM`: the high-water mark since start (or since [`reset_peak`]).
    pub peak_kib: u64,
}

impl Rss {
    /// Reads this process's figures.
    pub fn read() -> Result<Rss> {
        let status =
            fs::read_to_string("/proc/self/status").map_err(engine("reading /proc/self/status"))?;
        Rss::parse(&status)
    }

    /// Reads the figures from the text of a `/proc/<pid>/status` file.
    ///
    /// ```
    /// use outbox_benches::rss::Rss;
    /// let status = "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
    /// let rss = Rss::parse(status)?;
    /// assert_eq!(rss.peak_kib, 20_480);
    /// assert_eq!(rss.current_kib, 10_240);
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    pub fn parse(status: &str) -> Result<Rss> {
        let field = |name: &str| -> Result<u64> {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().strip_suffix("kB"))
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| Error::Backend {
                    detail: format!("no {name} line in the process status"),
                    source: None,
                })
        };
        Ok(Rss {
            current_kib: field("VmRSS:")?,
            peak_kib: field("VmHWM:")?,
        })
    }
}

/// Resets `VmHWM` to the current resident size (writes `5` to `/proc/self/clear_refs`), so
/// the peak measures what comes after. Returns false where the kernel does not allow it; the
/// peak then also covers what came before.
pub fn reset_peak() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// KiB as MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
