//! What the read commands report, as plain values: the `--json` shapes (documented in the crate
//! docs) and the input of the human-readable output and of the web page.

use outbox_core::{
    Attempt, Halt, ListQuery, Millis, Record, RecordId, Stats, Store, Tombstone, Unreadable,
};
use serde::{Deserialize, Serialize};

use crate::cli::StateFilter;
use crate::error::CliError;

/// How many of the most common `last_error` values `stats` reports.
pub const COMMON_ERRORS: usize = 5;

/// Records read per page when a command walks a whole state.
const PAGE: usize = 500;

/// The most rows the store is asked for when looking for one that cannot be read: such rows
/// are few (each is damage on disk), and the look may read every row.
pub const UNREADABLE_LOOK: usize = 100_000;

/// The queue at one moment (`stats --json`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StatsView {
    /// The time the ages are measured from.
    pub now: Millis,
    /// Records per state.
    pub counts: Counts,
    /// Records waiting behind a needs-attention record of their group.
    pub held: u64,
    /// Pending + retrying + in-flight + needs-attention.
    pub undelivered: u64,
    /// Payload bytes of every record held, rejected ones included (what a size cap counts,
    /// with the records).
    pub payload_bytes: u64,
    /// Enqueue time of the oldest undelivered record.
    pub oldest_created_at: Option<Millis>,
    /// `now - oldest_created_at`.
    pub oldest_age_ms: Option<u64>,
    /// The earliest deadline of a record that can be claimed.
    pub next_due: Option<Millis>,
    /// The runner's persisted halt.
    pub halt: Option<HaltView>,
    /// The most common `last_error` values of retrying, needs-attention and rejected records,
    /// most frequent first (ties in text order).
    pub common_errors: Vec<ErrorCount>,
}

/// Records per state.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Counts {
    #[allow(missing_docs)]
    pub pending: u64,
    #[allow(missing_docs)]
    pub retrying: u64,
    #[allow(missing_docs)]
    pub in_flight: u64,
    #[allow(missing_docs)]
    pub needs_attention: u64,
    #[allow(missing_docs)]
    pub rejected: u64,
    /// Tombstones not yet pruned.
    pub discarded: u64,
    /// Delivered since the store was created.
    pub delivered: u64,
    /// Writes merged into an earlier waiting write of their coalescing key since the store
    /// was created; left out while 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub superseded: u64,
    /// Pending records enqueued for a later time and not attempted since, whether or not that
    /// time has come (a part of `pending`, see [`Record::is_scheduled`]); left out while 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub scheduled: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The runner's halt: as `stats --json` and the page show it, and as the page's resume
/// button sends back the halt it showed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct HaltView {
    /// Why.
    pub reason: String,
    /// Since when.
    pub since: Millis,
}

impl From<Halt> for HaltView {
    fn from(halt: Halt) -> Self {
        HaltView {
            reason: halt.reason,
            since: halt.since,
        }
    }
}

impl From<HaltView> for Halt {
    fn from(view: HaltView) -> Self {
        Halt {
            reason: view.reason,
            since: view.since,
        }
    }
}

/// One `last_error` value and how many records have it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorCount {
    /// The text.
    pub error: String,
    /// How many records.
    pub count: u64,
}

/// One record without its payload (`list --json`, and the base of `show --json`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RecordView {
    #[allow(missing_docs)]
    pub id: u64,
    #[allow(missing_docs)]
    pub group: Option<String>,
    /// `pending`, `retrying`, `in-flight`, `needs-attention` or `rejected`.
    pub state: &'static str,
    /// Answered failures (the spent budget).
    pub attempts: u32,
    /// Failures no server answered.
    pub unanswered: u32,
    /// Deliveries that never reported (the process died).
    pub interrupted: u32,
    #[allow(missing_docs)]
    pub created_at: Millis,
    #[allow(missing_docs)]
    pub last_attempt_at: Option<Millis>,
    /// `null`: never on its own (needs-attention, rejected) or in flight.
    pub next_attempt_at: Option<Millis>,
    #[allow(missing_docs)]
    pub last_error: Option<String>,
    /// While in flight: when the lease expires.
    pub lease_until: Option<Millis>,
    /// The idempotency key.
    pub key: String,
    /// Payload size in bytes.
    pub payload_bytes: usize,
    /// The entity version the write was made against; left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<String>,
    /// The coalescing key; left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// The time the record is not to be delivered before; left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Millis>,
    /// `true` while the record waits for its not-before time (see [`scheduled`]); left out
    /// otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub scheduled: bool,
    /// What a repair must still find: pass it as `--seen` (see [`crate::revision`]).
    pub revision: String,
}

/// Whether `r` is still held by its not-before time at `now`: never claimed since it was
/// enqueued ([`Record::is_scheduled`]), and its first attempt still ahead of it.
///
/// ```
/// use outbox_core::{NewRecord, Record, RecordId};
/// let r = Record::enqueued(RecordId(1), NewRecord::new(vec![]).not_before(9_000), 1_000);
/// assert!(outbox_cli::view::scheduled(&r, 8_999));
/// assert!(!outbox_cli::view::scheduled(&r, 9_000)); // due now
/// ```
pub fn scheduled(r: &Record, now: Millis) -> bool {
    r.is_scheduled() && r.next_attempt_at.is_some_and(|at| at > now)
}

impl RecordView {
    /// The view of `r` as seen at `now` (whether it is [`scheduled`] depends on the time).
    pub fn at(r: &Record, now: Millis) -> Self {
        RecordView {
            scheduled: scheduled(r, now),
            ..r.into()
        }
    }
}

impl From<&Record> for RecordView {
    /// The view of `r` without a time: never marked as scheduled (see [`RecordView::at`]).
    fn from(r: &Record) -> Self {
        RecordView {
            id: r.id.0,
            group: r.group.clone(),
            state: r.state.as_str(),
            attempts: r.attempts,
            unanswered: r.unanswered,
            interrupted: r.interrupted,
            created_at: r.created_at,
            last_attempt_at: r.last_attempt_at,
            next_attempt_at: r.next_attempt_at,
            last_error: r.last_error.clone(),
            lease_until: r.lease.map(|l| l.until),
            key: r.key.clone(),
            payload_bytes: r.payload.len(),
            expected_version: r.expected_version.clone(),
            replaces: r.replaces.clone(),
            not_before: r.not_before,
            scheduled: false,
            revision: crate::revision::of(r),
        }
    }
}

/// One attempt of a record, as `show --json` and the page give it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct AttemptView {
    /// When the delivery ended.
    pub at: Millis,
    /// `no answer`, `later`, `rejected`, `conflict`, `refused` or `interrupted`.
    pub class: &'static str,
    /// The server's status, when it gave one.
    pub status: Option<u16>,
    /// The error text (at most 512 bytes).
    pub error: String,
    /// How long the sink took, in milliseconds, when measured.
    pub took_ms: Option<u64>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        AttemptView {
            at: a.at,
            class: a.class.as_str(),
            status: a.status,
            error: a.error.clone(),
            took_ms: a.took_ms,
        }
    }
}

/// One record with its payload (`show --json`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RecordDetail {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub record: RecordView,
    /// The last attempts, oldest first.
    pub history: Vec<AttemptView>,
    /// `true` when the stored history could not be read (it shows as empty); left out
    /// otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub history_unreadable: bool,
    /// The W3C `traceparent` of the span the write was made in; left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Its `tracestate`; left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// `utf-8` when the payload is UTF-8 text (JSON included), else `hex`.
    pub payload_encoding: &'static str,
    /// The payload as text, or as lowercase hex digits.
    pub payload: String,
}

impl RecordDetail {
    /// The detail of `r` as seen at `now` (see [`RecordView::at`]).
    pub fn at(r: &Record, now: Millis) -> Self {
        let mut detail = RecordDetail::from(r);
        detail.record.scheduled = scheduled(r, now);
        detail
    }
}

impl From<&Record> for RecordDetail {
    fn from(r: &Record) -> Self {
        let (payload_encoding, payload) = match std::str::from_utf8(&r.payload) {
            Ok(text) => ("utf-8", text.to_owned()),
            Err(_) => ("hex", hex(&r.payload)),
        };
        RecordDetail {
            record: r.into(),
            history: r.history.attempts().iter().map(AttemptView::from).collect(),
            history_unreadable: r.history.is_unreadable(),
            traceparent: r.trace.as_ref().map(|cx| cx.traceparent().to_owned()),
            tracestate: r
                .trace
                .as_ref()
                .and_then(|cx| cx.tracestate().map(str::to_owned)),
            payload_encoding,
            payload,
        }
    }
}

/// What stays of a discarded record (`list --state discarded --json`, `show --json`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct TombstoneView {
    #[allow(missing_docs)]
    pub id: u64,
    #[allow(missing_docs)]
    pub group: Option<String>,
    /// Always `discarded`.
    pub state: &'static str,
    #[allow(missing_docs)]
    pub key: String,
    /// Why, and by whom.
    pub reason: String,
    #[allow(missing_docs)]
    pub discarded_at: Millis,
    /// Answered failures it had spent.
    pub attempts: u32,
}

impl From<&Tombstone> for TombstoneView {
    fn from(t: &Tombstone) -> Self {
        TombstoneView {
            id: t.id.0,
            group: t.group.clone(),
            state: "discarded",
            key: t.key.clone(),
            reason: t.reason.clone(),
            discarded_at: t.discarded_at,
            attempts: t.attempts,
        }
    }
}

/// A row the store holds but cannot decode (`list --state unreadable --json`, `show --json`):
/// all that can be said of it is its id and what could not be read.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct UnreadableView {
    #[allow(missing_docs)]
    pub id: u64,
    /// Always `unreadable`.
    pub state: &'static str,
    /// What could not be decoded, in words.
    pub reason: String,
}

impl From<&Unreadable> for UnreadableView {
    fn from(row: &Unreadable) -> Self {
        UnreadableView {
            id: row.id.0,
            state: "unreadable",
            reason: row.reason.clone(),
        }
    }
}

/// A page of records or tombstones (`list --json`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Page<T> {
    /// The entries, in id order.
    pub records: Vec<T>,
    /// Pass as `--after` for the next page; `null` when this page was the last.
    pub next_after: Option<u64>,
}

/// Lowercase hex digits.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the stats and the most common errors: the store's counts and one grouped query
/// ([`Store::common_errors`]); no record and no payload is read.
pub async fn stats(store: &dyn Store, now: Millis) -> Result<StatsView, CliError> {
    let stats: Stats = store.stats().await?;
    let common_errors = store
        .common_errors(COMMON_ERRORS)
        .await?
        .into_iter()
        .map(|e| ErrorCount {
            error: e.error,
            count: e.count,
        })
        .collect();
    Ok(StatsView {
        now,
        payload_bytes: stats.payload_bytes,
        counts: Counts {
            pending: stats.pending,
            retrying: stats.retrying,
            in_flight: stats.in_flight,
            needs_attention: stats.needs_attention,
            rejected: stats.rejected,
            discarded: stats.discarded,
            delivered: stats.delivered,
            superseded: stats.superseded,
            scheduled: stats.scheduled,
        },
        held: stats.held,
        undelivered: stats.undelivered(),
        oldest_created_at: stats.oldest_created_at,
        oldest_age_ms: stats.oldest_created_at.map(|t| now.saturating_sub(t)),
        next_due: stats.next_due,
        halt: stats.halt.map(HaltView::from),
        common_errors,
    })
}

/// Calls `each` on every record matching `query`, a page at a time.
pub async fn for_each(
    store: &dyn Store,
    mut query: ListQuery,
    mut each: impl FnMut(&Record),
) -> Result<(), CliError> {
    loop {
        let page = store.list(&query).await?;
        page.iter().for_each(&mut each);
        match page.last() {
            Some(last) if page.len() == query.limit => query.after = Some(last.id),
            _ => return Ok(()),
        }
    }
}

/// A page of `list`: records, or tombstones for [`StateFilter::Discarded`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Records in id order, and the id to continue after when the page was full.
    Records(Vec<Record>, Option<RecordId>),
    /// Tombstones in id order, and the id to continue after when the page was full.
    Tombstones(Vec<Tombstone>, Option<RecordId>),
    /// Rows that cannot be read, in id order, and the id to continue after when more follow.
    Unreadable(Vec<Unreadable>, Option<RecordId>),
}

/// Reads one page of `list`.
pub async fn list(
    store: &dyn Store,
    state: Option<StateFilter>,
    group: Option<&str>,
    after: Option<RecordId>,
    limit: usize,
) -> Result<Listing, CliError> {
    match state {
        Some(StateFilter::Discarded) => {
            // Tombstones are paged by id only: filter the group here, reading on until the
            // page is full or the tombstones run out.
            let mut found = Vec::new();
            let mut cursor = after;
            loop {
                let batch = store.tombstones(cursor, PAGE).await?;
                let full = batch.len() == PAGE;
                cursor = batch.last().map(|t| t.id).or(cursor);
                for t in batch {
                    if group.is_none_or(|g| t.group.as_deref() == Some(g)) {
                        found.push(t);
                        if found.len() == limit {
                            let next = found.last().map(|t| t.id);
                            return Ok(Listing::Tombstones(found, next));
                        }
                    }
                }
                if !full {
                    return Ok(Listing::Tombstones(found, None));
                }
            }
        }
        Some(StateFilter::Unreadable) => {
            if group.is_some() {
                // The group may be what cannot be read.
                return Err(CliError::Usage(
                    "rows that cannot be read are not listed by group (their group may be \
                     what cannot be read); leave --group out"
                        .into(),
                ));
            }
            let limit = limit.max(1);
            let after = after.map_or(0, |id| id.0);
            let mut rows: Vec<Unreadable> = store
                .unreadable(UNREADABLE_LOOK)
                .await?
                .into_iter()
                .filter(|row| row.id.0 > after)
                .collect();
            let next = (rows.len() > limit).then(|| rows[limit - 1].id);
            rows.truncate(limit);
            Ok(Listing::Unreadable(rows, next))
        }
        Some(StateFilter::Row(state)) => {
            let mut query = ListQuery::new(limit).state(state);
            query.group = group.map(str::to_owned);
            query.after = after;
            page(store, &query).await
        }
        None => {
            let mut query = ListQuery::new(limit);
            query.group = group.map(str::to_owned);
            query.after = after;
            page(store, &query).await
        }
    }
}

async fn page(store: &dyn Store, query: &ListQuery) -> Result<Listing, CliError> {
    let records = store.list(query).await?;
    let next = (records.len() == query.limit)
        .then(|| records.last().map(|r| r.id))
        .flatten();
    Ok(Listing::Records(records, next))
}

/// A record, or the tombstone left by its discard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Still in the queue (boxed: a record with its history is several times a tombstone).
    Record(Box<Record>),
    /// Discarded, not yet pruned.
    Tombstone(Tombstone),
    /// Held by the store, but it cannot be decoded: set aside, never delivered, until a
    /// person discards it.
    Unreadable(Unreadable),
}

/// Finds a record, its tombstone, or the row that cannot be read; [`CliError::NoSuchRecord`]
/// when none is there.
pub async fn find(store: &dyn Store, id: RecordId) -> Result<Found, CliError> {
    if let Some(record) = store.get(id).await? {
        return Ok(Found::Record(Box::new(record)));
    }
    let before = id.0.checked_sub(1).map(RecordId);
    let tombstone = store.tombstones(before, 1).await?.into_iter().next();
    if let Some(t) = tombstone.filter(|t| t.id == id) {
        return Ok(Found::Tombstone(t));
    }
    // `get` passes by a row it cannot decode: read that one row.
    match store.unreadable_row(id).await? {
        Some(row) => Ok(Found::Unreadable(row)),
        None => Err(CliError::NoSuchRecord(id)),
    }
}
