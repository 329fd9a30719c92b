//! The hand-written binary layout of records and tombstones inside the redb file.
//!
//! Every value starts with a layout byte, so a file written by an earlier build stays readable
//! and the schema version kept in the file means something. Integers are little-endian; an
//! optional field is a presence byte (0 or 1) followed by the value; a string or byte string is a
//! `u32` length followed by its bytes. The record id is the table key and is not repeated.
//!
//! Record layout 5 (current, from schema version 6):
//!
//! | field | encoding |
//! |---|---|
//! | layout | `u8` = 5 |
//! | created_at | `u64` |
//! | state | `u8` ([`State::code`]) |
//! | attempts, unanswered, interrupted | 3 × `u32` |
//! | last_attempt_at, next_attempt_at | 2 × optional `u64` |
//! | last_error | optional string |
//! | lease | optional (`u64` token, `u64` until) |
//! | group | optional string |
//! | expected_version | optional string |
//! | replaces (the coalescing key) | optional string |
//! | not_before | optional `u64` |
//! | key | string |
//! | payload | byte string |
//! | history | byte string: the bytes of [`History::encode`], empty for no attempts |
//! | trace | byte string: the text of [`TraceContext::encode`], empty for none |
//!
//! Layout 5 is extended with the trace context rather than followed by a layout 6: it came with
//! schema version 6, which is not released yet, so no released build wrote a layout 5 record
//! without it, and a layout 6 would only have added a migration and a layout to decode. (A
//! layout 5 value written by an unreleased build before the trace context existed reads as a
//! truncated record.)
//!
//! Record layout 4 (schema version 5) is the same without `history`, which reads as an empty
//! history; record layout 3 (schema version 4) also lacks `not_before`, which reads as `None`
//! (no record was held for later); record layout 2 (schema versions 2 and 3) also lacks
//! `expected_version` and `replaces`, which read as `None`; record layout 1 (schema version 1)
//! also lacks `unanswered` and `interrupted`, which read as 0.
//!
//! Every layout before 5 reads with no trace context.
//!
//! The history's bytes are read by [`History::decode`], which never fails: a damaged history
//! inside an otherwise whole record reads as an empty history that says so
//! ([`History::is_unreadable`]) and the record stays readable. The trace text is read by
//! [`TraceContext::decode`] in the same spirit: text that is not UTF-8 or not a context reads
//! as none, and the rest of the record is intact (the delivery is only not linked). A history
//! or trace text whose length runs past the end of the value is a truncated record, as for any
//! other field: the row is unreadable.
//!
//! [`decode_record`] reads every earlier layout, but an earlier layout is never left in a file
//! of the current schema: the migration ([`crate::schema`]) rewrites every record in the
//! current layout, as it did for every earlier version. That keeps one invariant (a file at
//! schema version 6 holds only layout 5 records, so a build that reads it never meets a mix)
//! at the cost of one rewrite of each record at the upgrade, which is bounded by the records
//! queued at that time. The earlier layouts are still decoded so that the migration can read
//! them.
//!
//! Halt layout 1 (the `runner` table's `halt` entry, from schema version 3): layout `u8` = 1,
//! `since` as `u64`, the reason as a string.

use outbox_core::{
    Error, Halt, History, Lease, NewRecord, Record, RecordId, State, Tombstone, TraceContext,
};

/// The record layout this build writes.
pub(crate) const RECORD_LAYOUT: u8 = 5;
/// The tombstone layout this build writes.
pub(crate) const TOMBSTONE_LAYOUT: u8 = 1;
/// The halt layout this build writes.
pub(crate) const HALT_LAYOUT: u8 = 1;

/// Encodes a record in the current layout.
pub(crate) fn encode_record(record: &Record) -> Vec<u8> {
    encode_parts(
        record,
        Written {
            key: &record.key,
            payload: &record.payload,
            expected_version: record.expected_version.as_deref(),
            replaces: record.replaces.as_deref(),
            trace: record.trace.as_ref(),
        },
    )
}

/// Encodes `shell` with the caller's fields taken from `new` in place of its own (which are
/// not read), so an enqueue encodes a caller's record straight from its borrowed bytes instead
/// of copying them into a [`Record`] first.
pub(crate) fn encode_new(shell: &Record, new: &NewRecord) -> Vec<u8> {
    encode_parts(
        shell,
        Written {
            key: &new.key,
            payload: &new.payload,
            expected_version: new.expected_version.as_deref(),
            replaces: new.replaces.as_deref(),
            trace: new.trace.as_ref(),
        },
    )
}

/// The fields of a record its writer chose, borrowed from wherever they live.
struct Written<'a> {
    key: &'a str,
    payload: &'a [u8],
    expected_version: Option<&'a str>,
    replaces: Option<&'a str>,
    trace: Option<&'a TraceContext>,
}

fn encode_parts(record: &Record, written: Written<'_>) -> Vec<u8> {
    encode_layout(record, written, RECORD_LAYOUT)
}

/// Writes `record` in `layout`, field by field as [`decode_record`] reads it: layout 1 has no
/// `unanswered` and `interrupted`, layouts 1 and 2 no expected version and coalescing key,
/// layouts 1 to 3 no not-before time, layouts 1 to 4 no history and no trace context. The
/// not-before time and the history are the record's own (an enqueue's shell carries the new
/// record's not-before time and an empty history); the trace context is the writer's.
fn encode_layout(record: &Record, written: Written<'_>, layout: u8) -> Vec<u8> {
    let Written {
        key,
        payload,
        expected_version,
        replaces,
        trace,
    } = written;
    let (history, trace) = if layout >= 5 {
        (
            record.history.encode(),
            trace.map(TraceContext::encode).unwrap_or_default(),
        )
    } else {
        (Vec::new(), String::new())
    };
    let mut out = Writer(Vec::with_capacity(
        72 + payload.len()
            + history.len()
            + trace.len()
            + key.len()
            + record.group.as_ref().map_or(0, String::len)
            + expected_version.map_or(0, str::len)
            + replaces.map_or(0, str::len),
    ));
    out.u8(layout);
    out.u64(record.created_at);
    out.u8(record.state.code());
    out.u32(record.attempts);
    if layout >= 2 {
        out.u32(record.unanswered);
        out.u32(record.interrupted);
    }
    out.opt_u64(record.last_attempt_at);
    out.opt_u64(record.next_attempt_at);
    out.opt_str(record.last_error.as_deref());
    match record.lease {
        Some(lease) => {
            out.u8(1);
            out.u64(lease.token);
            out.u64(lease.until);
        }
        None => out.u8(0),
    }
    out.opt_str(record.group.as_deref());
    if layout >= 3 {
        out.opt_str(expected_version);
        out.opt_str(replaces);
    }
    if layout >= 4 {
        out.opt_u64(record.not_before);
    }
    out.bytes(key.as_bytes());
    out.bytes(payload);
    if layout >= 5 {
        out.bytes(&history);
        out.bytes(trace.as_bytes());
    }
    out.0
}

/// Encodes a persisted halt: layout byte, `since` as `u64`, the reason as a string.
pub(crate) fn encode_halt(halt: &Halt) -> Vec<u8> {
    let mut out = Writer(Vec::with_capacity(16 + halt.reason.len()));
    out.u8(HALT_LAYOUT);
    out.u64(halt.since);
    out.bytes(halt.reason.as_bytes());
    out.0
}

/// Decodes a persisted halt; damaged bytes give [`Error::Corrupted`].
pub(crate) fn decode_halt(bytes: &[u8]) -> Result<Halt, Error> {
    let mut r = Reader::new(bytes, 0, "halt");
    let layout = r.u8()?;
    if layout != HALT_LAYOUT {
        return Err(r.damaged(&format!("unknown halt layout {layout}")));
    }
    let since = r.u64()?;
    let reason = r.str()?;
    r.finish()?;
    Ok(Halt { reason, since })
}

/// Encodes a record in an earlier `layout` (1: schema version 1; 2: schema versions 2 and 3;
/// 3: schema version 4; 4: schema version 5), as those versions wrote it, for the migration
/// tests.
#[cfg(test)]
pub(crate) fn encode_record_as(record: &Record, layout: u8) -> Vec<u8> {
    let written = Written {
        key: &record.key,
        payload: &record.payload,
        expected_version: record.expected_version.as_deref(),
        replaces: record.replaces.as_deref(),
        trace: record.trace.as_ref(),
    };
    encode_layout(record, written, layout)
}

/// Decodes a record of any known layout; damaged bytes give [`Error::Corrupted`].
pub(crate) fn decode_record(id: u64, bytes: &[u8]) -> Result<Record, Error> {
    let mut r = Reader::new(bytes, id, "record");
    let layout = r.u8()?;
    if !(1..=RECORD_LAYOUT).contains(&layout) {
        return Err(r.damaged(&format!("unknown record layout {layout}")));
    }
    let created_at = r.u64()?;
    let code = r.u8()?;
    let state = State::from_code(code).ok_or_else(|| r.damaged(&format!("state code {code}")))?;
    let attempts = r.u32()?;
    let (unanswered, interrupted) = if layout == 1 {
        (0, 0)
    } else {
        (r.u32()?, r.u32()?)
    };
    let last_attempt_at = r.opt_u64()?;
    let next_attempt_at = r.opt_u64()?;
    let last_error = r.opt_str()?;
    let lease = if r.flag()? {
        Some(Lease {
            token: r.u64()?,
            until: r.u64()?,
        })
    } else {
        None
    };
    let group = r.opt_str()?;
    let (expected_version, replaces) = if layout < 3 {
        (None, None)
    } else {
        (r.opt_str()?, r.opt_str()?)
    };
    let not_before = if layout < 4 { None } else { r.opt_u64()? };
    let key = r.str()?;
    let payload = r.bytes()?.to_vec();
    // A truncated history is a truncated record; damaged history bytes are only a damaged
    // history (read as empty and unreadable), the rest of the record is whole.
    // The same for the trace text: a truncated one is a truncated record, a damaged one (not
    // UTF-8, or not a context) is only no context.
    let (history, trace) = if layout < 5 {
        (History::default(), None)
    } else {
        let history = History::decode(r.bytes()?);
        let trace = std::str::from_utf8(r.bytes()?)
            .ok()
            .filter(|text| !text.is_empty())
            .and_then(TraceContext::decode);
        (history, trace)
    };
    r.finish()?;
    Ok(Record {
        id: RecordId(id),
        group,
        payload,
        key,
        created_at,
        state,
        attempts,
        unanswered,
        interrupted,
        last_attempt_at,
        next_attempt_at,
        last_error,
        lease,
        expected_version,
        replaces,
        not_before,
        history,
        trace,
    })
}

/// Encodes a tombstone (the id is the table key).
pub(crate) fn encode_tombstone(tombstone: &Tombstone) -> Vec<u8> {
    let mut out = Writer(Vec::with_capacity(32 + tombstone.reason.len()));
    out.u8(TOMBSTONE_LAYOUT);
    out.opt_str(tombstone.group.as_deref());
    out.bytes(tombstone.key.as_bytes());
    out.bytes(tombstone.reason.as_bytes());
    out.u64(tombstone.discarded_at);
    out.u32(tombstone.attempts);
    out.0
}

/// Decodes a tombstone; damaged bytes give [`Error::Corrupted`].
pub(crate) fn decode_tombstone(id: u64, bytes: &[u8]) -> Result<Tombstone, Error> {
    let mut r = Reader::new(bytes, id, "tombstone");
    let layout = r.u8()?;
    if layout != TOMBSTONE_LAYOUT {
        return Err(r.damaged(&format!("unknown tombstone layout {layout}")));
    }
    let group = r.opt_str()?;
    let key = r.str()?;
    let reason = r.str()?;
    let discarded_at = r.u64()?;
    let attempts = r.u32()?;
    r.finish()?;
    Ok(Tombstone {
        id: RecordId(id),
        group,
        key,
        reason,
        discarded_at,
        attempts,
    })
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
            None => self.u8(0),
        }
    }
    fn bytes(&mut self, v: &[u8]) {
        // Payloads are bounded by the configured maximum and redb's value limit (< 4 GiB), so
        // the length always fits; saturate rather than wrap if a caller ever raises both.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
    }
    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.bytes(v.as_bytes());
            }
            None => self.u8(0),
        }
    }
}

struct Reader<'a> {
    rest: &'a [u8],
    id: u64,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(rest: &'a [u8], id: u64, what: &'static str) -> Self {
        Reader { rest, id, what }
    }

    fn damaged(&self, detail: &str) -> Error {
        Error::Corrupted {
            detail: format!("{} {}: {detail}", self.what, RecordId(self.id)),
            source: None,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.rest.len() < n {
            return Err(self.damaged("truncated value"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, Error> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn flag(&mut self) -> Result<bool, Error> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.damaged(&format!("presence byte {other}"))),
        }
    }
    fn opt_u64(&mut self) -> Result<Option<u64>, Error> {
        Ok(if self.flag()? {
            Some(self.u64()?)
        } else {
            None
        })
    }
    fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let len = self.u32()? as usize;
        self.take(len)
    }
    fn str(&mut self) -> Result<String, Error> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.damaged("text is not UTF-8"))
    }
    fn opt_str(&mut self) -> Result<Option<String>, Error> {
        Ok(if self.flag()? {
            Some(self.str()?)
        } else {
            None
        })
    }
    fn finish(&self) -> Result<(), Error> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.damaged("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests;
