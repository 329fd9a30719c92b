//! The `serde` feature: JSON payloads in and out of the queue, and typed errors.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_core::{sink_fn, Error, NewRecord, Outbox, Outcome, Record, RecordId};
use outbox_memory::MemoryStore;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Order {
    id: u64,
    lines: Vec<String>,
    note: Option<String>,
}

#[tokio::test(start_paused = true)]
async fn a_record_enqueued_as_json_reaches_the_sink_as_the_same_value() {
    let order = Order {
        id: 42,
        lines: vec!["tea".into(), "scones".into()],
        note: None,
    };
    let seen: Arc<Mutex<Vec<Order>>> = Arc::default();
    let sink = sink_fn({
        let seen = Arc::clone(&seen);
        move |record: Record| {
            let seen = Arc::clone(&seen);
            async move {
                match record.json::<Order>() {
                    Ok(order) => {
                        seen.lock().unwrap().push(order);
                        Outcome::Delivered
                    }
                    Err(err) => Outcome::rejected(err.to_string()),
                }
            }
        }
    });
    let outbox = Outbox::builder(Arc::new(MemoryStore::new()), sink)
        .start()
        .await
        .unwrap();
    let record = NewRecord::json(&order).unwrap().in_group("order-42");
    assert_eq!(record.group.as_deref(), Some("order-42"));
    outbox.enqueue(record).await.unwrap();
    outbox.flush(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [order]);
    outbox.shutdown(Duration::from_secs(5)).await.unwrap();
}

#[test]
fn a_payload_of_another_shape_is_a_typed_error_and_the_record_is_unchanged() {
    let record = Record::fresh(
        RecordId(1),
        None,
        br#"{"id":"not a number","lines":[]}"#.to_vec(),
        "k".into(),
        0,
    );
    let before = record.clone();
    let err = record.json::<Order>().unwrap_err();
    let Error::Json(json) = &err else {
        panic!("not a JSON error: {err:?}")
    };
    assert!(json.is_data(), "{json}");
    assert!(err.to_string().starts_with("JSON payload: "), "{err}");
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(record, before);

    let not_json = Record::fresh(RecordId(2), None, b"\xff\x00".to_vec(), "k".into(), 0);
    assert!(matches!(not_json.json::<Order>(), Err(Error::Json(e)) if e.is_syntax()));
}

#[test]
fn a_value_json_cannot_hold_is_refused_before_anything_is_enqueued() {
    // JSON object keys are strings: a map keyed by pairs has no JSON form.
    let mut map = BTreeMap::new();
    map.insert((1u8, 2u8), "x");
    let err = NewRecord::json(&map).unwrap_err();
    assert!(matches!(err, Error::Json(_)), "{err:?}");
    assert!(!err.is_temporary());
}
