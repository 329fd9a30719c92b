//! The tables of an outbox file, its schema version, and the migration from earlier layouts.
//!
//! | table | key → value | holds |
//! |---|---|---|
//! | `records` | id → encoded record | every queued record, in a versioned binary layout |
//! | `due` | (next_attempt_at, id) → () | pending or retrying records that head their group: the claim order |
//! | `queued` | (next_attempt_at, id) → () | pending or retrying records behind their group's head: with `due`, every deadline (clock-step re-basing) |
//! | `groups` | (group, id) → () | members of each group that hold its order (every state but rejected) |
//! | `coalescing` | (coalescing key, id) → () | every record with a coalescing key (`replaces`): the latest record of a key is the last entry of its range |
//! | `leases` | (lease until, id) → () | in-flight records: lease recovery |
//! | `aside` | id → () | records a claim set aside as unreadable: left out of what a size cap counts |
//! | `tombstones` | id → encoded tombstone | discarded records until pruned |
//! | `meta` | name → u64 | `schema_version`, `last_id`, `delivered`, `superseded`, `payload_bytes` |
//! | `runner` | name → encoded value | `halt`: the runner's persisted halt, absent when running |
//!
//! Version history: 1 had no `leases` table and stored records in layout 1; 2 adds the `leases`
//! index and the `unanswered` and `interrupted` counters; 3 adds the `queued` index and the
//! `runner` table; 4 stores records in layout 3 (with the expected version and the
//! coalescing key) and adds the `coalescing` index and the `superseded` counter; 5 stores
//! records in layout 4, with the time a record is not to be delivered before (`not_before`).
//! Its deadline stays the key of the `due` and `queued` indexes, so a record held for later
//! costs a claim nothing. 6 (current) stores records in layout 5, with the record's last
//! attempts (its history, in the bytes of [`outbox_core::History::encode`]) and its trace
//! context (the text of [`outbox_core::TraceContext::encode`]), and adds the `payload_bytes`
//! counter; no table or index changes. A file of version 5 upgrades to 6 as every earlier
//! version does: in one write transaction that rewrites each record in layout 5 (with an empty
//! history and no trace context), rebuilds the indexes and sets `payload_bytes` from the
//! records. A file newer than 6 is refused.
//!
//! `payload_bytes` is the sum of the payload lengths of every record in `records` (rejected
//! ones included; tombstones hold no payload): what a size cap ([`outbox_core::Cap`]) counts,
//! with the length of `records`, and what `stats` reports as `payload_bytes`: neither reads a
//! record for it.
//! Every write that adds, replaces or removes a record's payload moves it in the same
//! transaction. A version-6 file written before the counter existed gets it at its next
//! writable open, from the records (setting it is idempotent: a file that has it keeps it).
//! A record whose bytes stop decoding keeps its bytes counted until a claim sets it aside or
//! it is discarded ([`outbox_core::Store::discard_unreadable`]); either sets the counter
//! again from the records that decode (its length cannot be read back to subtract).
//!
//! `aside` holds the id of every record a claim set aside as unreadable (it left the `due`
//! index and its group's order) until it is discarded: a size cap counts the length of
//! `records` less the length of `aside`, so a set-aside record leaves the cap's record count
//! as it leaves `stats`. The table came without a version bump: opening a table in a write
//! transaction creates it, so a version-6 file written before it existed gets it, empty, at
//! its next writable open (and a build that predates it ignores it). A record such an earlier
//! build set aside is not in it and keeps its place in the cap until it is discarded; its
//! bytes leave the counter at the next set-aside or discard.

use outbox_core::{Error, Result};
use redb::{ReadableDatabase, TableDefinition, TableError, WriteTransaction};

use crate::error::from_redb;
use crate::queue::Tables;

/// The schema version this build writes, and the newest it opens.
pub const SCHEMA_VERSION: u32 = 6;

pub(crate) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
pub(crate) const DUE: TableDefinition<(u64, u64), ()> = TableDefinition::new("due");
pub(crate) const QUEUED: TableDefinition<(u64, u64), ()> = TableDefinition::new("queued");
pub(crate) const GROUPS: TableDefinition<(&str, u64), ()> = TableDefinition::new("groups");
pub(crate) const COALESCING: TableDefinition<(&str, u64), ()> = TableDefinition::new("coalescing");
pub(crate) const LEASES: TableDefinition<(u64, u64), ()> = TableDefinition::new("leases");
pub(crate) const ASIDE: TableDefinition<u64, ()> = TableDefinition::new("aside");
pub(crate) const TOMBSTONES: TableDefinition<u64, &[u8]> = TableDefinition::new("tombstones");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const RUNNER: TableDefinition<&str, &[u8]> = TableDefinition::new("runner");

pub(crate) const META_VERSION: &str = "schema_version";
pub(crate) const META_LAST_ID: &str = "last_id";
pub(crate) const META_DELIVERED: &str = "delivered";
pub(crate) const META_SUPERSEDED: &str = "superseded";
pub(crate) const META_PAYLOAD_BYTES: &str = "payload_bytes";
pub(crate) const RUNNER_HALT: &str = "halt";

/// What a file holds, as seen before anything is written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// An outbox at this schema version.
    Outbox(u32),
    /// A redb database with no outbox in it.
    Foreign,
}

/// Reads the schema version without writing (works on a read-only handle).
pub(crate) fn inspect(db: &impl ReadableDatabase) -> Result<Found> {
    let txn = db.begin_read().map_err(from_redb)?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(TableError::TableDoesNotExist(_)) => return Ok(Found::Foreign),
        Err(err) => return Err(from_redb(err)),
    };
    let version = meta.get(META_VERSION).map_err(from_redb)?;
    match version {
        Some(v) => Ok(Found::Outbox(u32::try_from(v.value()).unwrap_or(u32::MAX))),
        None => Ok(Found::Foreign),
    }
}

/// Refuses what this build must not touch.
pub(crate) fn check(found: Found) -> Result<u32> {
    match found {
        Found::Foreign => Err(Error::NotAnOutbox {
            detail: "a redb database without outbox tables".into(),
            source: None,
        }),
        Found::Outbox(v) if v > SCHEMA_VERSION => Err(Error::SchemaTooNew {
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Found::Outbox(0) => Err(Error::NotAnOutbox {
            detail: "schema version 0".into(),
            source: None,
        }),
        Found::Outbox(v) => Ok(v),
    }
}

/// Lays out a new, empty outbox at the current version.
pub(crate) fn init(txn: &WriteTransaction) -> Result<()> {
    Tables::with(txn, |tables| {
        tables.set_meta(META_VERSION, u64::from(SCHEMA_VERSION))?;
        tables.set_meta(META_LAST_ID, 0)?;
        tables.set_meta(META_DELIVERED, 0)?;
        tables.set_meta(META_SUPERSEDED, 0)?;
        tables.set_meta(META_PAYLOAD_BYTES, 0)
    })
    .map(drop)
}

/// Brings a file of an earlier version to the current one inside one write transaction, so a
/// crash mid-way leaves the earlier version intact and the next open starts over. Converging
/// means: rewrite every record in the current layout and rebuild every index from the records,
/// which is right whatever indexes the earlier version had. Tables an earlier version lacked
/// (`leases`, `queued`, `coalescing`, `runner`, `aside`) are created empty by opening them; a
/// halt is never invented. Records of an earlier layout have no expected version, no
/// coalescing key, no not-before time and an empty history, a missing counter (`delivered`,
/// `superseded`) starts at 0, and `payload_bytes` is set from the records. The records are
/// rewritten even when only the layout changed (5 to 6): a converged file then holds only
/// current-layout records, one invariant for every reader, at the cost of one rewrite of each
/// queued record per upgrade. A current file without `payload_bytes` (written at version 6
/// before the counter existed) gets it from the records, and one that has it is left alone;
/// one without `aside` gets it empty (see the module documentation).
pub(crate) fn migrate(txn: &WriteTransaction, from: u32) -> Result<()> {
    if from >= SCHEMA_VERSION {
        return Tables::with(txn, |tables| {
            if tables.meta(META_PAYLOAD_BYTES)?.is_none() {
                tables.count_payload_bytes()?;
            }
            Ok(())
        })
        .map(drop);
    }
    // Indexes are rebuilt from scratch; dropping them first also removes any stale entry.
    txn.delete_table(DUE).map_err(from_redb)?;
    txn.delete_table(QUEUED).map_err(from_redb)?;
    txn.delete_table(GROUPS).map_err(from_redb)?;
    txn.delete_table(LEASES).map_err(from_redb)?;
    txn.delete_table(COALESCING).map_err(from_redb)?;
    Tables::with(txn, rebuild).map(drop)
}

/// Rewrites every record in the current layout, rebuilds every index from them and sets the
/// counters a current file holds ([`migrate`]).
fn rebuild(tables: &mut Tables<'_>) -> Result<()> {
    let records = tables.all_records()?;
    let mut last_id = tables.meta(META_LAST_ID)?.unwrap_or(0);
    let mut payload_bytes = 0u64;
    for record in &records {
        tables.put(record)?;
        payload_bytes = payload_bytes.saturating_add(record.payload.len() as u64);
        last_id = last_id.max(record.id.0);
        if let (Some(group), true) = (&record.group, record.state.holds_group()) {
            tables.join_group(group, record.id)?;
        }
        if let Some(key) = &record.replaces {
            tables.join_coalescing(key, record.id)?;
        }
    }
    for record in &records {
        tables.index(record)?;
    }
    for counter in [META_DELIVERED, META_SUPERSEDED] {
        if tables.meta(counter)?.is_none() {
            tables.set_meta(counter, 0)?;
        }
    }
    tables.set_meta(META_LAST_ID, last_id)?;
    tables.set_meta(META_PAYLOAD_BYTES, payload_bytes)?;
    tables.set_meta(META_VERSION, u64::from(SCHEMA_VERSION))
}

/// Makes every in-flight record expire at once: only one process can open the file, so a
/// record left in flight belongs to a process that died. The runner's start-up recovery then
/// finds it through [`outbox_core::Store::expired`] and decides what the interruption means;
/// no counter is changed here.
pub(crate) fn expire_leases(txn: &WriteTransaction) -> Result<u64> {
    Tables::with(txn, Tables::expire_all_leases).map(|(expired, _)| expired)
}
