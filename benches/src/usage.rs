//! CPU time and context switches of this whole process, every thread included (`getrusage`
//! with `RUSAGE_SELF`): what a drain costs per record beyond its wall-clock time.

use std::time::Duration;

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeValLike;
use outbox_core::{Error, Result};

/// The process's counters at one instant; subtract two readings with [`Usage::since`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time in user mode.
    pub user: Duration,
    /// CPU time in the kernel on the process's behalf.
    pub system: Duration,
    /// Context switches the process asked for (waiting on I/O, a lock, a channel).
    pub voluntary: u64,
    /// Context switches the scheduler imposed (time slice over, a busier thread).
    pub involuntary: u64,
}

impl Usage {
    /// Reads the counters of this process.
    ///
    /// ```
    /// use outbox_benches::usage::Usage;
    ///
    /// let before = Usage::read()?;
    /// let spent: u64 = (0..200_000u64).map(std::hint::black_box).sum();
    /// let used = Usage::read()?.since(before);
    /// assert!(spent > 0 && used.cpu() >= std::time::Duration::ZERO);
    /// # Ok::<(), outbox_core::Error>(())
    /// ```
    pub fn read() -> Result<Usage> {
        let usage = getrusage(UsageWho::RUSAGE_SELF).map_err(|errno| Error::Backend {
            detail: format!("getrusage: {errno}"),
            source: None,
        })?;
        let time = |t: nix::sys::time::TimeVal| {
            Duration::from_micros(u64::try_from(t.num_microseconds()).unwrap_or(0))
        };
        let count = |n: nix::libc::c_long| u64::try_from(n).unwrap_or(0);
        Ok(Usage {
            user: time(usage.user_time()),
            system: time(usage.system_time()),
            voluntary: count(usage.voluntary_context_switches()),
            involuntary: count(usage.involuntary_context_switches()),
        })
    }

    /// What was used between `earlier` and this reading.
    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }

    /// User and system time together.
    pub fn cpu(self) -> Duration {
        self.user + self.system
    }

    /// Context switches of both kinds.
    pub fn switches(self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// Per record of `records`: CPU microseconds (all of it, then the kernel's share) and
    /// context switches.
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_benches::usage::Usage;
    ///
    /// let used = Usage {
    ///     user: Duration::from_micros(600),
    ///     system: Duration::from_micros(400),
    ///     voluntary: 30,
    ///     involuntary: 20,
    /// };
    /// let per = used.per_record(100);
    /// assert_eq!((per.cpu_us, per.system_us, per.switches), (10.0, 4.0, 0.5));
    /// ```
    pub fn per_record(self, records: u64) -> PerRecord {
        let n = records.max(1) as f64;
        PerRecord {
            cpu_us: self.cpu().as_secs_f64() * 1e6 / n,
            system_us: self.system.as_secs_f64() * 1e6 / n,
            switches: self.switches() as f64 / n,
        }
    }
}

/// A [`Usage`] divided by a number of records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerRecord {
    /// CPU microseconds, user and system.
    pub cpu_us: f64,
    /// The kernel's share of `cpu_us`.
    pub system_us: f64,
    /// Context switches, voluntary and involuntary.
    pub switches: f64,
}
