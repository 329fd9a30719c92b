//! Idempotency keys no two writers share: a thousand writers started in the same instant, each
//! on its own thread, draw a million default keys between them without one duplicate. A
//! generator seeded from a clock and a thread id, started alike on many threads or devices,
//! draws alike; keys from the operating system's random source do not.

use std::collections::HashSet;
use std::sync::{Arc, Barrier, Mutex};

use outbox_core::NewRecord;

const WRITERS: usize = 1_000;
const KEYS_EACH: usize = 1_000;

/// A key's 128 bits, so a million of them fit in a small set.
fn bits(key: &str) -> u128 {
    assert_eq!(key.len(), 36, "{key}");
    u128::from_str_radix(&key.replace('-', ""), 16).unwrap()
}

#[test]
fn a_million_keys_from_a_thousand_writers_started_together_never_repeat() {
    let start = Arc::new(Barrier::new(WRITERS));
    let all = Arc::new(Mutex::new(HashSet::with_capacity(WRITERS * KEYS_EACH)));
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let start = Arc::clone(&start);
            let all = Arc::clone(&all);
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    // Every writer begins the moment the last one is ready.
                    start.wait();
                    let keys: Vec<u128> = (0..KEYS_EACH)
                        .map(|_| bits(&NewRecord::new(Vec::new()).key))
                        .collect();
                    all.lock().unwrap().extend(keys);
                })
                .unwrap()
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let distinct = all.lock().unwrap().len();
    assert_eq!(
        distinct,
        WRITERS * KEYS_EACH,
        "{} duplicate keys",
        WRITERS * KEYS_EACH - distinct
    );
}
