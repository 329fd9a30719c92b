//! The command line of the `measure` program: which workload, on which store, at which
//! durability, in which directory.

use std::path::PathBuf;

use super::{Level, MeasureError, Workload};
use crate::subject::StoreKind;

/// The command line, as `measure --help` prints it.
///
/// ```
/// let usage = outbox_benches::measure::usage();
/// assert!(usage.starts_with("usage: measure <burst|enqueue-rate|"));
/// assert!(usage.contains("--store <memory|sqlite|redb|postgres>"));
/// ```
pub fn usage() -> String {
    format!(
        "usage: measure <{}> --store <{}> [--n N] [--rounds R] [--durability LEVEL] [--dir DIR]",
        Workload::NAMES.join("|"),
        StoreKind::names(StoreKind::ALL, "|")
    )
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// What to measure, and how much.
    pub workload: Workload,
    /// On which store.
    pub store: StoreKind,
    /// At which durability (`--durability`; by default the store's default, and for
    /// `enqueue-vs-bare` the bare engine's).
    pub level: Level,
    /// Where the store files go (`--dir`; by default the system's temporary directory, where
    /// the bare engines put theirs).
    pub dir: PathBuf,
}

impl Args {
    /// Reads the arguments after the program name.
    ///
    /// ```
    /// use outbox_benches::measure::{Args, Workload};
    ///
    /// let args = Args::parse(["burst", "--store", "redb", "--rounds", "3"].map(String::from))?;
    /// assert_eq!(args.workload, Workload::Burst { rounds: 3 });
    /// assert!(Args::parse(["burst", "--store", "redb", "--n", "3"].map(String::from)).is_err());
    /// # Ok::<(), outbox_benches::measure::MeasureError>(())
    /// ```
    pub fn parse(
        args: impl IntoIterator<Item = String>,
    ) -> std::result::Result<Args, MeasureError> {
        let mut args = args.into_iter();
        let (mut name, mut store, mut n, mut rounds, mut level, mut dir) =
            (None, None, None, None, None, None);
        let count = |flag: &str, value: Option<String>| {
            let value = value.unwrap_or_default();
            match value.parse::<usize>() {
                Ok(count) if count > 0 => Ok(count),
                _ => Err(MeasureError::Usage(format!(
                    "{flag} takes a count of at least 1, not {value:?}"
                ))),
            }
        };
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--store" => {
                    let value = args.next().unwrap_or_default();
                    store = Some(StoreKind::parse(&value).ok_or_else(|| {
                        MeasureError::Usage(format!(
                            "unknown store {value:?}: {}",
                            StoreKind::one_of(StoreKind::ALL)
                        ))
                    })?);
                }
                "--n" => n = Some(count("--n", args.next())?),
                "--rounds" => rounds = Some(count("--rounds", args.next())?),
                "--durability" => level = Some(args.next().unwrap_or_default()),
                "--dir" => {
                    let value = args
                        .next()
                        .ok_or_else(|| MeasureError::Usage("--dir takes a directory".into()))?;
                    dir = Some(PathBuf::from(value));
                }
                flag if flag.starts_with('-') => {
                    return Err(MeasureError::Usage(format!("unknown flag {flag:?}")))
                }
                _ if name.is_none() => name = Some(arg),
                _ => return Err(MeasureError::Usage(format!("unexpected argument {arg:?}"))),
            }
        }
        let name = name.ok_or_else(|| MeasureError::Usage("which workload?".into()))?;
        let workload = Workload::parse(&name, n, rounds)?;
        let store = store.ok_or_else(|| MeasureError::Usage("--store is required".into()))?;
        if let Some(why) = workload.unavailable(store) {
            return Err(MeasureError::NotAvailable {
                what: workload.name().into(),
                store,
                why,
            });
        }
        let level = match (&level, workload) {
            (Some(name), _) => Level::parse(store, name)?,
            (None, Workload::EnqueueVsBare { .. }) => {
                Level::bare(store).unwrap_or(Level::default_for(store))
            }
            (None, _) => Level::default_for(store),
        };
        if matches!(workload, Workload::EnqueueVsBare { .. }) && Level::bare(store) != Some(level) {
            return Err(MeasureError::NotAvailable {
                what: format!("enqueue-vs-bare at --durability {}", level.name()),
                store,
                why: "the bare engine it is compared with commits at one setting only: \
                      sqlite full, redb immediate (one sync per commit)",
            });
        }
        Ok(Args {
            workload,
            store,
            level,
            dir: dir.unwrap_or_else(std::env::temp_dir),
        })
    }
}
