//! The workloads of the `measure` program (`src/bin/measure.rs`): one measurement per run, on
//! the store named on its command line, built from the same workloads, bare engines and
//! PostgreSQL helpers as the criterion harness.
//!
//! [`Args::parse`] reads the command line, [`run`] measures and returns a [`Report`] whose
//! `Display` is what the program prints. A workload that makes no sense for a store (a bare
//! comparison for the memory store, which has no engine under it) is refused with
//! [`MeasureError::NotAvailable`] before anything is opened.
//!
//! ```
//! # fn main() -> Result<(), outbox_benches::measure::MeasureError> {
//! use outbox_benches::measure::{self, Args};
//!
//! let args = Args::parse(["idle-claims", "--store", "memory", "--n", "10"].map(String::from))?;
//! let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
//! let report = runtime.block_on(measure::run(&args))?;
//! assert!(report.figure("idle claims", "per claim").unwrap() > 0.0);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_core::clock::system_now;
use outbox_core::{Error, NewRecord, RecordId, Result, Store};
use outbox_memory::MemoryStore;
use outbox_postgres::PgStore;
use outbox_redb::{RedbConfig, RedbStore};
use outbox_sqlite::{Durability as SqliteDurability, SqliteConfig, SqliteStore};
use redb::{ReadableDatabase, TableDefinition};
use tempfile::TempDir;
use tokio::task::JoinSet;

use crate::bare::{BareEngine, BareKind, BarePg};
use crate::error::engine;
use crate::paired;
use crate::pg::{self, PgSchema, PgServer};
use crate::subject::StoreKind;
use crate::{workload, PAYLOAD};

/// Concurrent producers in the burst and in the concurrent phase of the enqueue rate.
pub const PRODUCERS: usize = 64;

/// Records that are not due yet under the idle claims.
const IDLE_BACKLOG: usize = 100;

/// Records per enqueue call in the enqueue phase of the drain rate.
const DRAIN_BATCH: usize = 100;

/// Groups the drain rate's records are spread over (a third of the records are in one).
const DRAIN_GROUPS: usize = 50;

/// The redb store's record table (id → encoded record): the bare read of `call-overhead`
/// fetches a row from it with redb alone.
const REDB_RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("records");

/// The command line, as `measure --help` prints it.
pub const USAGE: &str =
    "usage: measure <burst|enqueue-rate|enqueue-vs-bare|call-overhead|idle-claims|drain-rate> \
--store <memory|sqlite|redb|postgres> [--n N] [--rounds R] [--durability LEVEL] [--dir DIR]";

/// What went wrong, by kind: the command line, a workload a store cannot run, or the run.
#[derive(Debug)]
pub enum MeasureError {
    /// The command line does not say what to measure (exit status 2).
    Usage(String),
    /// The workload or setting has no meaning for this store (exit status 3).
    NotAvailable {
        /// The workload or flag asked for.
        what: String,
        /// The store it was asked of.
        store: Target,
        /// Why the store cannot do it.
        why: &'static str,
    },
    /// No PostgreSQL server answered.
    NoServer {
        /// Where the program looked (`OUTBOX_PG_URL`, or [`pg::DEFAULT_URL`]).
        url: String,
        /// What the connection attempt said.
        source: Error,
    },
    /// A store or engine failed during the measurement.
    Failed(Error),
}

impl fmt::Display for MeasureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeasureError::Usage(message) => f.write_str(message),
            MeasureError::NotAvailable { what, store, why } => {
                write!(f, "{what} is not available for {store}: {why}")
            }
            MeasureError::NoServer { url, source } => {
                write!(f, "no PostgreSQL server answered at {url}: {source}")
            }
            MeasureError::Failed(err) => write!(f, "the measurement failed: {err}"),
        }
    }
}

impl std::error::Error for MeasureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MeasureError::NoServer { source, .. } | MeasureError::Failed(source) => Some(source),
            _ => None,
        }
    }
}

impl From<Error> for MeasureError {
    fn from(err: Error) -> Self {
        MeasureError::Failed(err)
    }
}

/// A store the program measures: one of the benchmark subjects, or PostgreSQL.
///
/// ```
/// use outbox_benches::measure::Target;
/// assert_eq!(Target::parse("postgres"), Some(Target::Postgres));
/// assert_eq!(Target::parse("redb").map(Target::name), Some("redb"));
/// assert_eq!(Target::parse("floppy"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A store in this process: memory, or a file.
    Local(StoreKind),
    /// The PostgreSQL store, on the server at `OUTBOX_PG_URL`.
    Postgres,
}

impl Target {
    /// Every store, in the order the usage line lists them.
    pub const ALL: [Target; 4] = [
        Target::Local(StoreKind::Memory),
        Target::Local(StoreKind::Sqlite),
        Target::Local(StoreKind::Redb),
        Target::Postgres,
    ];

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Target::Local(kind) => kind.name(),
            Target::Postgres => "postgres",
        }
    }

    /// The store named `name`, if there is one.
    pub fn parse(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The redb store's commit settings that `--durability` chooses between.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedbLevel {
    /// `immediate`: [`RedbConfig::default`], one sync per commit.
    Immediate,
    /// `two-phase`: immediate, with two-phase commit and quick repair (two syncs per commit),
    /// the settings of the bare redb queue.
    TwoPhase,
    /// `none`: commits are not synced.
    None,
}

/// What a store's commits survive, as `--durability` names it.
///
/// ```
/// use outbox_benches::measure::{Level, RedbLevel, Target};
/// use outbox_benches::subject::StoreKind;
///
/// let redb = Target::Local(StoreKind::Redb);
/// assert_eq!(Level::parse(redb, "two-phase").unwrap(), Level::Redb(RedbLevel::TwoPhase));
/// assert!(Level::parse(redb, "full").is_err());
/// assert!(Level::parse(Target::Postgres, "off").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// The memory store keeps nothing.
    Memory,
    /// A SQLite level: `full` (the default), `normal` or `off`.
    Sqlite(SqliteDurability),
    /// A redb level: `immediate` (the default), `two-phase` or `none`.
    Redb(RedbLevel),
    /// The server's `synchronous_commit`, which the store does not choose.
    Postgres,
}

impl Level {
    /// The store's default level.
    pub const fn default_for(target: Target) -> Level {
        match target {
            Target::Local(StoreKind::Memory) => Level::Memory,
            Target::Local(StoreKind::Sqlite) => Level::Sqlite(SqliteDurability::Full),
            Target::Local(StoreKind::Redb) => Level::Redb(RedbLevel::Immediate),
            Target::Postgres => Level::Postgres,
        }
    }

    /// The name `--durability` takes (`server` for PostgreSQL, `none` for memory).
    pub const fn name(self) -> &'static str {
        match self {
            Level::Memory => "none",
            Level::Sqlite(SqliteDurability::Full) => "full",
            Level::Sqlite(SqliteDurability::Normal) => "normal",
            Level::Sqlite(SqliteDurability::Off) => "off",
            Level::Redb(RedbLevel::Immediate) => "immediate",
            Level::Redb(RedbLevel::TwoPhase) => "two-phase",
            Level::Redb(RedbLevel::None) => "none",
            Level::Postgres => "server",
        }
    }

    /// The level called `name` for `target`.
    pub fn parse(target: Target, name: &str) -> std::result::Result<Level, MeasureError> {
        let level = match (target, name) {
            (Target::Local(StoreKind::Sqlite), "full") => Level::Sqlite(SqliteDurability::Full),
            (Target::Local(StoreKind::Sqlite), "normal") => Level::Sqlite(SqliteDurability::Normal),
            (Target::Local(StoreKind::Sqlite), "off") => Level::Sqlite(SqliteDurability::Off),
            (Target::Local(StoreKind::Sqlite), _) => {
                return Err(MeasureError::Usage(format!(
                    "unknown sqlite durability {name:?}: full, normal or off"
                )))
            }
            (Target::Local(StoreKind::Redb), "immediate") => Level::Redb(RedbLevel::Immediate),
            (Target::Local(StoreKind::Redb), "two-phase") => Level::Redb(RedbLevel::TwoPhase),
            (Target::Local(StoreKind::Redb), "none") => Level::Redb(RedbLevel::None),
            (Target::Local(StoreKind::Redb), _) => {
                return Err(MeasureError::Usage(format!(
                    "unknown redb durability {name:?}: immediate, two-phase or none"
                )))
            }
            (Target::Local(StoreKind::Memory), _) => {
                return Err(MeasureError::NotAvailable {
                    what: "--durability".into(),
                    store: target,
                    why: "the memory store keeps nothing",
                })
            }
            (Target::Postgres, _) => {
                return Err(MeasureError::NotAvailable {
                    what: "--durability".into(),
                    store: target,
                    why: "the server's synchronous_commit decides; set it on the server",
                })
            }
        };
        Ok(level)
    }

    /// What a returned write survives at this level, as the report heading states it.
    fn describe(self, server: Option<&PgServer>) -> String {
        match self {
            Level::Memory => StoreKind::Memory.durability().into(),
            Level::Sqlite(durability) => {
                let sync = match durability {
                    SqliteDurability::Full => "an fsync per commit",
                    SqliteDurability::Normal => "fsync at checkpoints",
                    SqliteDurability::Off => "no fsync",
                };
                format!("WAL, synchronous={} ({sync})", durability.synchronous())
            }
            Level::Redb(RedbLevel::Immediate) => {
                "Durability::Immediate, one-phase commit (the store's default)".into()
            }
            Level::Redb(RedbLevel::TwoPhase) => {
                "Durability::Immediate, two-phase commit and quick repair (two syncs per commit)"
                    .into()
            }
            Level::Redb(RedbLevel::None) => "Durability::None (commits are not synced)".into(),
            Level::Postgres => server.map_or_else(|| "the server's".into(), PgServer::durability),
        }
    }

    /// The level of the bare engine that `enqueue-vs-bare` compares `target` with.
    const fn bare(target: Target) -> Option<Level> {
        match target {
            Target::Local(StoreKind::Sqlite) => Some(Level::Sqlite(SqliteDurability::Full)),
            Target::Local(StoreKind::Redb) => Some(Level::Redb(RedbLevel::Immediate)),
            Target::Postgres => Some(Level::Postgres),
            Target::Local(StoreKind::Memory) => None,
        }
    }
}

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

    /// Why `target` cannot run this workload, if it cannot.
    fn unavailable(self, target: Target) -> Option<&'static str> {
        match (self, target) {
            (Workload::EnqueueVsBare { .. }, Target::Local(StoreKind::Memory)) => {
                Some("the memory store has no engine under it to compare with")
            }
            _ => None,
        }
    }
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// What to measure, and how much.
    pub workload: Workload,
    /// On which store.
    pub store: Target,
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
                    store = Some(Target::parse(&value).ok_or_else(|| {
                        MeasureError::Usage(format!(
                            "unknown store {value:?}: memory, sqlite, redb or postgres"
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

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// What it measures (`per round`, `rate`).
    pub name: &'static str,
    /// Its value.
    pub value: f64,
    /// Its unit (`µs`, `enqueues/s`), empty for a plain number.
    pub unit: &'static str,
    /// Digits printed after the decimal point.
    pub decimals: usize,
}

/// The figures of one part of a measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was done (`100 rounds of 64 concurrent enqueues`).
    pub label: String,
    /// What it measured.
    pub figures: Vec<Figure>,
}

/// What one run measured: printed by the program as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The workload, the store, its durability and where it ran.
    pub heading: String,
    /// The figures, part by part.
    pub rows: Vec<Row>,
    /// What the figures leave out, and how to measure it otherwise.
    pub notes: Vec<String>,
}

impl Report {
    /// The figure `name` of the first row whose label contains `row`.
    pub fn figure(&self, row: &str, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .filter(|r| r.label.contains(row))
            .flat_map(|r| &r.figures)
            .find(|f| f.name == name)
            .map(|f| f.value)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.heading)?;
        for row in &self.rows {
            writeln!(f, "{}:", row.label)?;
            for figure in &row.figures {
                writeln!(
                    f,
                    "  {:<30} {:>12.*} {}",
                    figure.name, figure.decimals, figure.value, figure.unit
                )?;
            }
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}

fn figure(name: &'static str, value: f64, unit: &'static str, decimals: usize) -> Figure {
    Figure {
        name,
        value,
        unit,
        decimals,
    }
}

/// Microseconds per operation.
fn micros(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_secs_f64() * 1e6 / ops.max(1) as f64
}

/// Operations per second.
fn rate(elapsed: Duration, ops: usize) -> f64 {
    ops as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn failed(detail: String) -> Error {
    Error::Backend {
        detail,
        source: None,
    }
}

/// Measures what `args` asks for.
pub async fn run(args: &Args) -> std::result::Result<Report, MeasureError> {
    let server = match args.store {
        Target::Postgres => {
            let url = std::env::var("OUTBOX_PG_URL").unwrap_or_else(|_| pg::DEFAULT_URL.into());
            match PgServer::at(&url).await {
                Ok(server) => Some(server),
                Err(source) => return Err(MeasureError::NoServer { url, source }),
            }
        }
        Target::Local(_) => None,
    };
    let bench = Bench { args, server };
    let mut report = match args.workload {
        Workload::Burst { rounds } => bench.burst(rounds).await?,
        Workload::EnqueueRate { n } => bench.enqueue_rate(n).await?,
        Workload::EnqueueVsBare { rounds, n } => bench.enqueue_vs_bare(rounds, n).await?,
        Workload::CallOverhead { n } => bench.call_overhead(n).await?,
        Workload::IdleClaims { n } => bench.idle_claims(n).await?,
        Workload::DrainRate { n } => bench.drain_rate(n).await?,
    };
    report.heading = bench.heading();
    Ok(report)
}

/// A store opened for one measurement, with what the program reads besides the [`Store`].
struct Opened {
    store: Arc<dyn Store>,
    engine: Engine,
    // Removed after the store is closed (fields drop in order; `close` keeps that order too).
    _dir: Option<TempDir>,
}

enum Engine {
    Memory,
    Sqlite(Arc<SqliteStore>),
    Redb(Arc<RedbStore>),
    Postgres(PgSchema),
}

impl Opened {
    /// The write transactions the store has committed, where it counts them.
    fn commits(&self) -> Option<u64> {
        match &self.engine {
            Engine::Sqlite(store) => Some(store.write_transactions()),
            _ => None,
        }
    }

    /// One more store on the same queue, as a runner in another process opens it: a SQLite
    /// handle on the same file, a PostgreSQL store with a pool of its own.
    async fn another(&self) -> Result<Arc<dyn Store>> {
        Ok(match &self.engine {
            Engine::Sqlite(store) => {
                Arc::new(SqliteStore::open(store.path(), store.config().clone()).await?)
            }
            Engine::Postgres(schema) => Arc::new(PgStore::connect(schema.config()).await?),
            Engine::Memory | Engine::Redb(_) => {
                return Err(failed("this store has one handle on its queue".into()))
            }
        })
    }

    /// Closes the store and waits until it is closed, then removes its directory; a
    /// PostgreSQL schema is dropped.
    async fn close(self) -> Result<()> {
        let Opened {
            store,
            engine,
            _dir: dir,
        } = self;
        drop(store);
        let closed = match engine {
            Engine::Sqlite(store) => {
                if let Ok(store) = Arc::try_unwrap(store) {
                    store.close().await;
                }
                Ok(())
            }
            Engine::Redb(store) => {
                if let Ok(store) = Arc::try_unwrap(store) {
                    store.close().await;
                }
                Ok(())
            }
            Engine::Postgres(schema) => schema.drop().await,
            Engine::Memory => Ok(()),
        };
        drop(dir);
        closed
    }
}

struct Bench<'a> {
    args: &'a Args,
    server: Option<PgServer>,
}

impl Bench<'_> {
    fn target(&self) -> Target {
        self.args.store
    }

    fn heading(&self) -> String {
        let place = match &self.server {
            Some(server) => format!("server {}", server.url()),
            None => format!("directory {}", self.args.dir.display()),
        };
        format!(
            "{} on {} ({}), payload {} bytes, {} CPU cores, {place}",
            self.args.workload.name(),
            self.target(),
            self.args.level.describe(self.server.as_ref()),
            PAYLOAD.len(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        )
    }

    fn server(&self) -> Result<&PgServer> {
        self.server
            .as_ref()
            .ok_or_else(|| failed("postgres without a server".into()))
    }

    /// A fresh, empty store at the chosen level.
    async fn open(&self) -> Result<Opened> {
        let (target, level) = (self.target(), self.args.level);
        if target == Target::Postgres {
            let schema = self.server()?.schema();
            let store: Arc<dyn Store> = Arc::new(PgStore::connect(schema.config()).await?);
            return Ok(Opened {
                store,
                engine: Engine::Postgres(schema),
                _dir: None,
            });
        }
        let dir = tempfile::tempdir_in(&self.args.dir)
            .map_err(engine("creating a temporary directory under --dir"))?;
        let (store, engine): (Arc<dyn Store>, Engine) = match (target, level) {
            (Target::Local(StoreKind::Memory), Level::Memory) => {
                (Arc::new(MemoryStore::new()), Engine::Memory)
            }
            (Target::Local(StoreKind::Sqlite), Level::Sqlite(durability)) => {
                let config = SqliteConfig::default().durability(durability);
                let path = dir.path().join("outbox.db");
                let store = Arc::new(SqliteStore::create(path, config).await?);
                (store.clone(), Engine::Sqlite(store))
            }
            (Target::Local(StoreKind::Redb), Level::Redb(level)) => {
                let config = match level {
                    RedbLevel::Immediate => RedbConfig::default(),
                    RedbLevel::TwoPhase => RedbConfig::default()
                        .with_two_phase_commit(true)
                        .with_quick_repair(true),
                    RedbLevel::None => RedbConfig {
                        durability: outbox_redb::Durability::None,
                        ..RedbConfig::default()
                    },
                };
                let path = dir.path().join("outbox.redb");
                let store = Arc::new(RedbStore::create(path, config).await?);
                (store.clone(), Engine::Redb(store))
            }
            _ => {
                return Err(Error::InvalidConfig(format!(
                    "{target} has no durability {}",
                    level.name()
                )))
            }
        };
        Ok(Opened {
            store,
            engine,
            _dir: Some(dir),
        })
    }

    /// Opens a store, runs `work` on it and closes it, whatever `work` returned.
    async fn with_store<T>(&self, work: impl AsyncFnOnce(&Opened) -> Result<T>) -> Result<T> {
        let opened = self.open().await?;
        let result = work(&opened).await;
        let closed = opened.close().await;
        let value = result?;
        closed?;
        Ok(value)
    }

    /// What the report says when the store does not count its commits.
    fn uncounted(&self) -> String {
        match self.target() {
            Target::Local(StoreKind::Memory) => "the memory store commits nothing".into(),
            Target::Local(StoreKind::Redb) => "the redb store does not count its commits: run \
                 under `strace -f -c -e trace=fdatasync,fsync` for its syncs"
                .into(),
            Target::Postgres => "PostgreSQL commits on the server: see xact_commit in \
                 pg_stat_database"
                .into(),
            Target::Local(StoreKind::Sqlite) => String::new(),
        }
    }

    async fn burst(&self, rounds: usize) -> Result<Report> {
        let (elapsed, commits) = self
            .with_store(async |opened| {
                let before = opened.commits();
                let started = Instant::now();
                for _ in 0..rounds {
                    workload::enqueue_concurrently(&opened.store, PRODUCERS).await?;
                }
                let elapsed = started.elapsed();
                let commits = opened.commits().zip(before).map(|(after, b)| after - b);
                expect_pending(&opened.store, rounds * PRODUCERS).await?;
                Ok((elapsed, commits))
            })
            .await?;
        let mut figures = vec![
            figure("time per round", micros(elapsed, rounds), "µs", 0),
            figure(
                "enqueue rate",
                rate(elapsed, rounds * PRODUCERS),
                "enqueues/s",
                0,
            ),
        ];
        let mut notes = Vec::new();
        match commits {
            Some(commits) => figures.push(figure(
                "commits per round",
                commits as f64 / rounds as f64,
                "",
                2,
            )),
            None => notes.push(self.uncounted()),
        }
        Ok(Report {
            heading: String::new(),
            rows: vec![Row {
                label: format!("{rounds} rounds of {PRODUCERS} concurrent single-record enqueues"),
                figures,
            }],
            notes,
        })
    }

    async fn enqueue_rate(&self, n: usize) -> Result<Report> {
        let phases = [(1, n), (PRODUCERS, n.div_ceil(PRODUCERS))];
        let measured = self
            .with_store(async |opened| {
                let mut measured = Vec::new();
                let mut total = 0;
                for (producers, each) in phases {
                    let before = opened.commits();
                    let started = Instant::now();
                    let mut tasks = JoinSet::new();
                    for _ in 0..producers {
                        let store = Arc::clone(&opened.store);
                        tasks
                            .spawn(async move { workload::enqueue_one_by_one(&store, each).await });
                    }
                    while let Some(joined) = tasks.join_next().await {
                        joined.map_err(Error::backend)??;
                    }
                    let elapsed = started.elapsed();
                    let commits = opened.commits().zip(before).map(|(after, b)| after - b);
                    total += producers * each;
                    expect_pending(&opened.store, total).await?;
                    measured.push((producers, producers * each, elapsed, commits));
                }
                Ok(measured)
            })
            .await?;
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        for (producers, enqueues, elapsed, commits) in measured {
            let mut figures = vec![
                figure("time", elapsed.as_secs_f64() * 1e3, "ms", 1),
                figure("enqueue rate", rate(elapsed, enqueues), "enqueues/s", 0),
            ];
            match commits {
                Some(commits) => {
                    figures.push(figure("transactions", commits as f64, "", 0));
                    figures.push(figure(
                        "enqueues per transaction",
                        enqueues as f64 / commits.max(1) as f64,
                        "",
                        1,
                    ));
                }
                None if notes.is_empty() => notes.push(self.uncounted()),
                None => {}
            }
            let who = if producers == 1 {
                "1 producer".to_owned()
            } else {
                format!("{producers} concurrent producers")
            };
            rows.push(Row {
                label: format!("{who}, {enqueues} single-record enqueues"),
                figures,
            });
        }
        Ok(Report {
            heading: String::new(),
            rows,
            notes,
        })
    }

    async fn enqueue_vs_bare(&self, rounds: usize, n: usize) -> Result<Report> {
        let mut bare = match self.target() {
            Target::Local(StoreKind::Sqlite) => Bare::Engine(Some(BareKind::Sqlite.open()?)),
            Target::Local(StoreKind::Redb) => Bare::Engine(Some(BareKind::Redb.open()?)),
            Target::Postgres => Bare::Pg(BarePg::create(self.server()?.schema(), 1).await?),
            Target::Local(StoreKind::Memory) => {
                return Err(failed("enqueue-vs-bare needs an engine".into()))
            }
        };
        let measured = self
            .with_store(async |opened| {
                let (mut ours, mut theirs) = (Vec::new(), Vec::new());
                for round in 0..rounds {
                    // Each side goes first in every other round, so neither always meets the
                    // disk the other just left busy.
                    if round % 2 == 1 {
                        theirs.push(bare.insert_each(n).await?);
                    }
                    let started = Instant::now();
                    workload::enqueue_one_by_one(&opened.store, n).await?;
                    ours.push(started.elapsed());
                    if round % 2 == 0 {
                        theirs.push(bare.insert_each(n).await?);
                    }
                }
                Ok((ours, theirs))
            })
            .await;
        let dropped = match bare {
            Bare::Pg(bare) => bare.schema().drop().await,
            Bare::Engine(_) => Ok(()),
        };
        let (ours, theirs) = measured?;
        dropped?;
        let paired = paired::ratio(&ours, n as u64, &theirs, n as u64)
            .ok_or_else(|| failed("enqueue-vs-bare: no round was measured".into()))?;
        let per_call = |times: &[Duration]| median(times.iter().map(|t| micros(*t, n)).collect());
        let mut notes = Vec::new();
        if self.target() != Target::Postgres && self.args.dir != std::env::temp_dir() {
            notes.push(format!(
                "the bare engine's file is under the system temporary directory ({}), the \
                 store's under {}: set TMPDIR to that directory to put both on one disk",
                std::env::temp_dir().display(),
                self.args.dir.display()
            ));
        }
        if self.target() == Target::Postgres {
            notes.push(
                "the bare insert is one INSERT ... SELECT of one row per transaction, sent \
                 unprepared"
                    .into(),
            );
        }
        Ok(Report {
            heading: String::new(),
            rows: vec![Row {
                label: format!("median of {rounds} alternating rounds of {n}"),
                figures: vec![
                    figure("store, per enqueue", per_call(&ours), "µs", 0),
                    figure("bare, per insert", per_call(&theirs), "µs", 0),
                    figure("store/bare rate", paired.ratio, "x", 2),
                    figure("lowest round ratio", paired.low, "x", 2),
                    figure("highest round ratio", paired.high, "x", 2),
                ],
            }],
            notes,
        })
    }

    async fn call_overhead(&self, n: usize) -> Result<Report> {
        let (store_get, bare_get) = self
            .with_store(async |opened| {
                let id = opened
                    .store
                    .enqueue(vec![NewRecord::new(PAYLOAD.to_vec())], system_now())
                    .await?[0];
                let started = Instant::now();
                for _ in 0..n {
                    if opened.store.get(id).await?.is_none() {
                        return Err(failed(format!("record {} vanished", id.0)));
                    }
                }
                let store_get = started.elapsed();
                let bare_get = bare_reads(&opened.engine, id, n).await?;
                Ok((store_get, bare_get))
            })
            .await?;
        let started = Instant::now();
        for _ in 0..n {
            tokio::task::spawn_blocking(|| ())
                .await
                .map_err(Error::backend)?;
        }
        let hop = started.elapsed();
        let mut figures = vec![figure("store.get", micros(store_get, n), "µs per call", 2)];
        let mut notes = Vec::new();
        match bare_get {
            Some(bare) => figures.push(figure(
                "the same read on the engine",
                micros(bare, n),
                "µs per call",
                2,
            )),
            None => notes.push("the memory store is its own engine: no read to compare".into()),
        }
        figures.push(figure(
            "empty spawn_blocking round trip",
            micros(hop, n),
            "µs",
            2,
        ));
        Ok(Report {
            heading: String::new(),
            rows: vec![Row {
                label: format!("{n} calls of each"),
                figures,
            }],
            notes,
        })
    }

    async fn idle_claims(&self, n: usize) -> Result<Report> {
        let (elapsed, commits) = self
            .with_store(async |opened| {
                workload::fill_not_due(&opened.store, IDLE_BACKLOG).await?;
                let before = opened.commits();
                let started = Instant::now();
                for _ in 0..n {
                    let claimed = workload::what_is_due(&opened.store).await?;
                    if claimed != 0 {
                        return Err(failed(format!("an idle claim took {claimed} records")));
                    }
                }
                let elapsed = started.elapsed();
                Ok((elapsed, opened.commits().zip(before).map(|(a, b)| a - b)))
            })
            .await?;
        let mut figures = vec![figure("per claim", micros(elapsed, n), "µs", 2)];
        let mut notes = Vec::new();
        match commits {
            Some(commits) => figures.push(figure("commits", commits as f64, "", 0)),
            None => notes.push(self.uncounted()),
        }
        Ok(Report {
            heading: String::new(),
            rows: vec![Row {
                label: format!("{n} idle claims (nothing due among {IDLE_BACKLOG} later records)"),
                figures,
            }],
            notes,
        })
    }

    async fn drain_rate(&self, n: usize) -> Result<Report> {
        let enqueue = self
            .with_store(async |opened| {
                let started = Instant::now();
                enqueue_grouped(&opened.store, n).await?;
                Ok(started.elapsed())
            })
            .await?;
        let mut rows = vec![Row {
            label: format!(
                "enqueue of {n} records in batches of {DRAIN_BATCH}, a third of them in \
                 {DRAIN_GROUPS} groups"
            ),
            figures: vec![
                figure("time", enqueue.as_secs_f64() * 1e3, "ms", 1),
                figure("enqueue rate", rate(enqueue, n), "records/s", 0),
            ],
        }];
        let mut notes = Vec::new();
        let runner_counts: &[usize] = match self.target() {
            Target::Postgres | Target::Local(StoreKind::Sqlite) => &pg::RUNNERS,
            Target::Local(StoreKind::Redb) => {
                notes.push("one runner: a redb file has one writer (redb's exclusive mode)".into());
                &[1]
            }
            Target::Local(StoreKind::Memory) => {
                notes.push("one runner: the memory store lives in this process only".into());
                &[1]
            }
        };
        let mut drains = Vec::new();
        for &runners in runner_counts {
            let drained = self
                .with_store(async |opened| {
                    let mut stores = vec![Arc::clone(&opened.store)];
                    for _ in 1..runners {
                        stores.push(opened.another().await?);
                    }
                    pg::drain_runners(&stores, n).await
                })
                .await?;
            drains.push((runners, drained));
        }
        for (runners, drained) in drains {
            let plural = if runners == 1 { "" } else { "s" };
            rows.push(Row {
                label: format!(
                    "drain of {} due records by {runners} runner{plural}",
                    drained.records
                ),
                figures: vec![
                    figure("time", drained.elapsed.as_secs_f64() * 1e3, "ms", 1),
                    figure("drain rate", drained.rate(), "records/s", 0),
                ],
            });
        }
        Ok(Report {
            heading: String::new(),
            rows,
            notes,
        })
    }
}

/// The bare engine `enqueue-vs-bare` compares with.
enum Bare {
    /// rusqlite or redb; their calls block, so they run off the runtime's workers.
    Engine(Option<Box<dyn BareEngine>>),
    /// tokio-postgres.
    Pg(BarePg),
}

impl Bare {
    /// Commits `n` one-row transactions and returns how long they took.
    async fn insert_each(&mut self, n: usize) -> Result<Duration> {
        match self {
            Bare::Engine(slot) => {
                let mut engine = slot
                    .take()
                    .ok_or_else(|| failed("the bare engine was lost".into()))?;
                let (engine, took) = tokio::task::spawn_blocking(move || {
                    let started = Instant::now();
                    let done = engine.insert_each(n, system_now());
                    (engine, done.map(|()| started.elapsed()))
                })
                .await
                .map_err(Error::backend)?;
                *slot = Some(engine);
                took
            }
            Bare::Pg(bare) => {
                let started = Instant::now();
                for _ in 0..n {
                    bare.insert_batch(1, system_now()).await?;
                }
                Ok(started.elapsed())
            }
        }
    }
}

/// Reads the row of record `id` `n` times with the engine alone, without the store: the
/// timing of the reads, or `None` for the memory store.
async fn bare_reads(on: &Engine, id: RecordId, n: usize) -> Result<Option<Duration>> {
    let key = i64::try_from(id.0).map_err(Error::backend)?;
    match on {
        Engine::Memory => Ok(None),
        Engine::Sqlite(store) => {
            let path = store.path().to_owned();
            let took = tokio::task::spawn_blocking(move || -> Result<Duration> {
                let conn = rusqlite::Connection::open(path).map_err(engine("sqlite: open"))?;
                let started = Instant::now();
                for _ in 0..n {
                    let mut stmt = conn
                        .prepare_cached("SELECT * FROM records WHERE id = ?1")
                        .map_err(engine("sqlite: prepare"))?;
                    let mut rows = stmt.query([key]).map_err(engine("sqlite: get"))?;
                    while rows.next().map_err(engine("sqlite: get"))?.is_some() {}
                }
                Ok(started.elapsed())
            })
            .await
            .map_err(Error::backend)??;
            Ok(Some(took))
        }
        Engine::Redb(store) => {
            let store = Arc::clone(store);
            let took = tokio::task::spawn_blocking(move || -> Result<Duration> {
                let db = store
                    .database()
                    .ok_or_else(|| failed("redb: the store is read-only".into()))?;
                let started = Instant::now();
                for _ in 0..n {
                    let txn = db.begin_read().map_err(engine("redb: begin read"))?;
                    let table = txn
                        .open_table(REDB_RECORDS)
                        .map_err(engine("redb: records table"))?;
                    if table.get(id.0).map_err(engine("redb: get"))?.is_none() {
                        return Err(failed(format!("redb: record {} vanished", id.0)));
                    }
                }
                Ok(started.elapsed())
            })
            .await
            .map_err(Error::backend)??;
            Ok(Some(took))
        }
        Engine::Postgres(schema) => {
            let client = pg::connect(schema.url()).await?;
            let get = client
                .prepare(&format!(
                    "SELECT * FROM \"{}\".records WHERE id = $1",
                    schema.name()
                ))
                .await
                .map_err(engine("postgres: prepare"))?;
            let started = Instant::now();
            for _ in 0..n {
                client
                    .query_opt(&get, &[&key])
                    .await
                    .map_err(engine("postgres: get"))?
                    .ok_or_else(|| failed(format!("postgres: record {} vanished", id.0)))?;
            }
            Ok(Some(started.elapsed()))
        }
    }
}

/// Enqueues `count` records due now in batches of [`DRAIN_BATCH`], every third one in one of
/// [`DRAIN_GROUPS`] groups.
async fn enqueue_grouped(store: &Arc<dyn Store>, count: usize) -> Result<()> {
    let mut next = 0;
    while next < count {
        let end = (next + DRAIN_BATCH).min(count);
        let batch = (next..end)
            .map(|i| {
                let record = NewRecord::new(PAYLOAD.to_vec());
                if i % 3 == 0 {
                    record.in_group(format!("entity-{}", i % DRAIN_GROUPS))
                } else {
                    record
                }
            })
            .collect();
        store.enqueue(batch, system_now()).await?;
        next = end;
    }
    Ok(())
}

/// Fails unless `store` holds exactly `count` pending records: every enqueue that returned is
/// in the store.
async fn expect_pending(store: &Arc<dyn Store>, count: usize) -> Result<()> {
    let pending = store.stats().await?.pending;
    if pending != count as u64 {
        return Err(failed(format!(
            "{count} enqueues returned, the store holds {pending} pending records"
        )));
    }
    Ok(())
}
