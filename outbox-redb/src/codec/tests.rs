//! The codec's round trips, its earlier layouts, and damaged values.

use outbox_core::{Attempt, AttemptClass};

use super::*;

/// Three attempts: a server's "later", a delivery with no answer and a refusal.
fn three_attempts() -> History {
    let mut history = History::default();
    let mut later = Attempt::new(1_100, AttemptClass::Later, "HTTP 503: busy");
    later.took_ms = Some(120);
    history.push(later);
    history.push(Attempt::new(
        1_400,
        AttemptClass::NoAnswer,
        "connection refused",
    ));
    history.push(Attempt::new(2_000, AttemptClass::Rejected, "HTTP 422: é"));
    history
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The W3C example context, with a `tracestate`.
fn context() -> TraceContext {
    TraceContext::new(TRACEPARENT, Some("congo=t61rcWkgMzE".into())).unwrap()
}

fn sample() -> Record {
    Record {
        id: RecordId(9),
        group: Some("doc-1".into()),
        payload: vec![0, 1, 2, 255],
        key: "key".into(),
        created_at: 1_000,
        state: State::InFlight,
        attempts: 3,
        unanswered: 4,
        interrupted: 1,
        last_attempt_at: Some(2_000),
        next_attempt_at: None,
        last_error: Some("503".into()),
        lease: Some(Lease {
            token: 7,
            until: 9_000,
        }),
        expected_version: Some("W/\"7\"".into()),
        replaces: Some("doc-1/body".into()),
        not_before: Some(1_500),
        history: three_attempts(),
        trace: Some(context()),
    }
}

#[test]
fn record_round_trips_in_the_current_layout() {
    let record = sample();
    assert_eq!(decode_record(9, &encode_record(&record)).ok(), Some(record));
}

#[test]
fn layout_one_reads_with_zero_new_counters() {
    let record = sample();
    let decoded = decode_record(9, &encode_record_as(&record, 1)).ok();
    let expected = Record {
        unanswered: 0,
        interrupted: 0,
        expected_version: None,
        replaces: None,
        not_before: None,
        history: History::default(),
        trace: None,
        ..record
    };
    assert_eq!(decoded, Some(expected));
}

#[test]
fn layout_two_reads_without_version_or_coalescing_key() {
    let record = sample();
    let decoded = decode_record(9, &encode_record_as(&record, 2)).ok();
    let expected = Record {
        expected_version: None,
        replaces: None,
        not_before: None,
        history: History::default(),
        trace: None,
        ..record
    };
    assert_eq!(decoded, Some(expected));
}

#[test]
fn layout_three_reads_without_a_not_before_time() {
    let record = sample();
    let decoded = decode_record(9, &encode_record_as(&record, 3)).ok();
    let expected = Record {
        not_before: None,
        history: History::default(),
        trace: None,
        ..record
    };
    assert_eq!(decoded, Some(expected));
}

#[test]
fn layout_four_reads_with_an_empty_history() {
    let record = sample();
    let decoded = decode_record(9, &encode_record_as(&record, 4)).ok();
    let expected = Record {
        history: History::default(),
        trace: None,
        ..record
    };
    assert_eq!(decoded, Some(expected));
}

#[test]
fn a_history_of_three_attempts_round_trips() {
    let record = sample();
    let decoded = decode_record(9, &encode_record(&record)).unwrap();
    assert_eq!(decoded.history.len(), 3);
    assert_eq!(
        decoded.history.attempts()[0],
        Attempt {
            at: 1_100,
            class: AttemptClass::Later,
            status: Some(503),
            error: "HTTP 503: busy".into(),
            took_ms: Some(120),
        }
    );
    assert_eq!(decoded.history.attempts()[2].status, Some(422));
    assert!(!decoded.history.is_unreadable());
    assert_eq!(decoded, record);
    let none = Record {
        history: History::default(),
        trace: None,
        ..record
    };
    let bytes = encode_record(&none);
    assert_eq!(
        bytes[bytes.len() - 8..],
        [0; 8],
        "no attempts and no trace context: two empty byte strings"
    );
    assert_eq!(decode_record(9, &bytes).ok(), Some(none));
}

/// The record's bytes with its history replaced by `history` bytes and its trace context by
/// `trace` bytes (the last two fields).
fn with_tail_bytes(record: &Record, history: &[u8], trace: &[u8]) -> Vec<u8> {
    let empty = Record {
        history: History::default(),
        trace: None,
        ..record.clone()
    };
    let mut bytes = encode_record(&empty);
    bytes.truncate(bytes.len() - 8);
    for field in [history, trace] {
        bytes.extend_from_slice(&(field.len() as u32).to_le_bytes());
        bytes.extend_from_slice(field);
    }
    bytes
}

/// The record's bytes with its history replaced by `history` bytes.
fn with_history_bytes(record: &Record, history: &[u8]) -> Vec<u8> {
    let trace = record.trace.as_ref().map(TraceContext::encode);
    with_tail_bytes(record, history, trace.unwrap_or_default().as_bytes())
}

#[test]
fn a_damaged_history_reads_as_unreadable_and_the_record_stays_whole() {
    let record = sample();
    let mut damaged = record.history.encode();
    damaged[10] = 99; // the first attempt's class
    let mut short = record.history.encode();
    short.pop();
    for history in [damaged, short, b"\x01\x09garbage".to_vec(), vec![0xff]] {
        let decoded = decode_record(9, &with_history_bytes(&record, &history)).unwrap();
        assert!(decoded.history.is_unreadable() && decoded.history.is_empty());
        let expected = Record {
            history: decoded.history.clone(),
            ..record.clone()
        };
        assert_eq!(decoded, expected, "every other field is intact");
    }
    // A length past the end of the value is a truncated record, not a damaged history.
    let mut truncated = with_history_bytes(&record, &record.history.encode());
    truncated.pop();
    assert!(matches!(
        decode_record(9, &truncated),
        Err(Error::Corrupted { .. })
    ));
}

#[test]
fn a_trace_context_round_trips_and_none_is_an_empty_text() {
    let record = sample();
    let bytes = encode_record(&record);
    let text = format!("{TRACEPARENT}\ncongo=t61rcWkgMzE");
    assert!(
        bytes.ends_with(text.as_bytes()),
        "the stored text is the encoded context"
    );
    let decoded = decode_record(9, &bytes).unwrap();
    assert_eq!(decoded.trace, Some(context()));
    assert_eq!(
        decoded.trace.as_ref().map(|cx| cx.tracestate()),
        Some(Some("congo=t61rcWkgMzE"))
    );
    let plain = Record {
        trace: Some(TraceContext::new(TRACEPARENT, None).unwrap()),
        ..record.clone()
    };
    assert!(encode_record(&plain).ends_with(TRACEPARENT.as_bytes()));
    assert_eq!(decode_record(9, &encode_record(&plain)).ok(), Some(plain));
    let none = Record {
        trace: None,
        ..record
    };
    let bytes = encode_record(&none);
    assert_eq!(
        bytes[bytes.len() - 4..],
        [0; 4],
        "no context: an empty text"
    );
    assert_eq!(decode_record(9, &bytes).ok(), Some(none));
}

#[test]
fn a_damaged_trace_context_reads_as_none_and_the_record_stays_whole() {
    let record = sample();
    let history = record.history.encode();
    let expected = Record {
        trace: None,
        ..record.clone()
    };
    let mut not_utf8 = TRACEPARENT.as_bytes().to_vec();
    not_utf8[5] = 0xff;
    let damaged: [&[u8]; 5] = [
        &not_utf8,
        b"garbage",
        b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        &TRACEPARENT.as_bytes()[..20],
        b"\n",
    ];
    for trace in damaged {
        let decoded = decode_record(9, &with_tail_bytes(&record, &history, trace));
        assert_eq!(decoded.ok().as_ref(), Some(&expected), "{trace:?}");
    }
    // A trace text whose length runs past the end of the value is a truncated record.
    let mut truncated = encode_record(&record);
    truncated.pop();
    assert!(matches!(
        decode_record(9, &truncated),
        Err(Error::Corrupted { .. })
    ));
    let mut overlong = with_tail_bytes(&record, &history, b"");
    let at = overlong.len() - 4;
    overlong[at..].copy_from_slice(&5u32.to_le_bytes());
    assert!(matches!(
        decode_record(9, &overlong),
        Err(Error::Corrupted { .. })
    ));
}

#[test]
fn a_new_record_encodes_like_the_record_it_becomes() {
    let new = NewRecord::new(b"body".to_vec())
        .in_group("doc-1")
        .expecting("7")
        .replacing("doc-1/body")
        .not_before(800)
        .trace_context(context());
    let record = Record::enqueued(RecordId(4), new.clone(), 500);
    let shell = Record {
        not_before: Some(800),
        next_attempt_at: Some(800),
        ..Record::fresh(
            RecordId(4),
            new.group.clone(),
            Vec::new(),
            String::new(),
            500,
        )
    };
    assert_eq!(encode_new(&shell, &new), encode_record(&record));
    assert_eq!(
        decode_record(4, &encode_new(&shell, &new)).ok(),
        Some(record)
    );
}

#[test]
fn damaged_values_are_corrupted_errors_not_panics() {
    let bytes = encode_record(&sample());
    for cut in 0..bytes.len() {
        assert!(matches!(
            decode_record(9, &bytes[..cut]),
            Err(Error::Corrupted { .. })
        ));
    }
    let mut bad_state = bytes.clone();
    bad_state[9] = 42;
    assert!(matches!(
        decode_record(9, &bad_state),
        Err(Error::Corrupted { .. })
    ));
    let mut trailing = bytes;
    trailing.push(0);
    assert!(matches!(
        decode_record(9, &trailing),
        Err(Error::Corrupted { .. })
    ));
}

#[test]
fn halt_round_trips_and_damage_is_typed() {
    let halt = Halt {
        reason: "HTTP 401".into(),
        since: 7_000,
    };
    let bytes = encode_halt(&halt);
    assert_eq!(decode_halt(&bytes).ok(), Some(halt));
    for cut in 0..bytes.len() {
        assert!(matches!(
            decode_halt(&bytes[..cut]),
            Err(Error::Corrupted { .. })
        ));
    }
}

#[test]
fn tombstone_round_trips() {
    let t = Tombstone {
        id: RecordId(3),
        group: None,
        key: "k".into(),
        reason: "user".into(),
        discarded_at: 5,
        attempts: 2,
    };
    assert_eq!(decode_tombstone(3, &encode_tombstone(&t)).ok(), Some(t));
}
