//! What a store's commits survive, as `--durability` names it, and how the report heading
//! states it.

use outbox_redb::RedbConfig;
use outbox_sqlite::Durability as SqliteDurability;

use super::MeasureError;
use crate::pg::PgServer;
use crate::subject::StoreKind;

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

impl RedbLevel {
    /// The store settings of this level.
    pub fn config(self) -> RedbConfig {
        match self {
            RedbLevel::Immediate => RedbConfig::default(),
            RedbLevel::TwoPhase => RedbConfig::default()
                .with_two_phase_commit(true)
                .with_quick_repair(true),
            RedbLevel::None => RedbConfig {
                durability: outbox_redb::Durability::None,
                ..RedbConfig::default()
            },
        }
    }
}

/// What a store's commits survive, as `--durability` names it.
///
/// ```
/// use outbox_benches::measure::{Level, RedbLevel};
/// use outbox_benches::subject::StoreKind;
///
/// let redb = StoreKind::Redb;
/// assert_eq!(Level::parse(redb, "two-phase").unwrap(), Level::Redb(RedbLevel::TwoPhase));
/// assert!(Level::parse(redb, "full").is_err());
/// assert!(Level::parse(StoreKind::Postgres, "off").is_err());
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
    pub const fn default_for(store: StoreKind) -> Level {
        match store {
            StoreKind::Memory => Level::Memory,
            StoreKind::Sqlite => Level::Sqlite(SqliteDurability::Full),
            StoreKind::Redb => Level::Redb(RedbLevel::Immediate),
            StoreKind::Postgres => Level::Postgres,
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

    /// The level called `name` for `store`.
    pub fn parse(store: StoreKind, name: &str) -> std::result::Result<Level, MeasureError> {
        let level = match (store, name) {
            (StoreKind::Sqlite, "full") => Level::Sqlite(SqliteDurability::Full),
            (StoreKind::Sqlite, "normal") => Level::Sqlite(SqliteDurability::Normal),
            (StoreKind::Sqlite, "off") => Level::Sqlite(SqliteDurability::Off),
            (StoreKind::Sqlite, _) => {
                return Err(MeasureError::Usage(format!(
                    "unknown sqlite durability {name:?}: full, normal or off"
                )))
            }
            (StoreKind::Redb, "immediate") => Level::Redb(RedbLevel::Immediate),
            (StoreKind::Redb, "two-phase") => Level::Redb(RedbLevel::TwoPhase),
            (StoreKind::Redb, "none") => Level::Redb(RedbLevel::None),
            (StoreKind::Redb, _) => {
                return Err(MeasureError::Usage(format!(
                    "unknown redb durability {name:?}: immediate, two-phase or none"
                )))
            }
            (StoreKind::Memory, _) => {
                return Err(MeasureError::NotAvailable {
                    what: "--durability".into(),
                    store,
                    why: "the memory store keeps nothing",
                })
            }
            (StoreKind::Postgres, _) => {
                return Err(MeasureError::NotAvailable {
                    what: "--durability".into(),
                    store,
                    why: "the server's synchronous_commit decides; set it on the server",
                })
            }
        };
        Ok(level)
    }

    /// What a returned write survives at this level, as the report heading states it.
    pub(super) fn describe(self, server: Option<&PgServer>) -> String {
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

    /// The level of the bare engine that `enqueue-vs-bare` compares `store` with.
    pub(super) const fn bare(store: StoreKind) -> Option<Level> {
        match store {
            StoreKind::Sqlite => Some(Level::Sqlite(SqliteDurability::Full)),
            StoreKind::Redb => Some(Level::Redb(RedbLevel::Immediate)),
            StoreKind::Postgres => Some(Level::Postgres),
            StoreKind::Memory => None,
        }
    }
}
