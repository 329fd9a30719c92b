//! A sink a test scripts and inspects: per record, the answers the "server" gives in turn, and a
//! recording of every delivery it saw.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use outbox_core::{http, Clock, Millis, Outcome, Record, RecordId, Sink};

/// One scripted answer of the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// No server answered (connection refused): [`Outcome::NoAnswer`].
    NoAnswer,
    /// 503 Service Unavailable, no `Retry-After`.
    Unavailable,
    /// 429 Too Many Requests with `Retry-After` in seconds.
    TooManyRequests {
        /// The delay the server asks for.
        retry_after: Duration,
    },
    /// 422 Unprocessable Content: a final rejection.
    Unprocessable,
    /// 401 Unauthorized: the credential, not the record; the runner halts.
    Unauthorized,
    /// 409 Conflict.
    Conflict,
    /// 200 OK.
    Success,
    /// The delivery panics (a bug in the user's sink).
    Panic,
    /// 200 OK after `after` of tokio time (a slow server; instant under a paused clock).
    Slow {
        /// How long the delivery takes.
        after: Duration,
    },
}

impl Reply {
    /// The outcome the runner sees for this reply, via the HTTP classifier; `None` for
    /// [`Reply::Panic`], which reports nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_core::{Outcome, RetryAfter};
    /// use outbox_testkit::Reply;
    ///
    /// let reply = Reply::TooManyRequests { retry_after: Duration::from_secs(30) };
    /// assert_eq!(
    ///     reply.outcome(),
    ///     Some(Outcome::transient("HTTP 429", Some(RetryAfter::Delay(Duration::from_secs(30))))),
    /// );
    /// assert_eq!(Reply::Panic.outcome(), None);
    /// ```
    pub fn outcome(&self) -> Option<Outcome> {
        Some(match self {
            Reply::NoAnswer => Outcome::no_answer("connection refused (scripted)"),
            Reply::Unavailable => http::classify(503, None),
            Reply::TooManyRequests { retry_after } => {
                http::classify(429, Some(&retry_after.as_secs().to_string()))
            }
            Reply::Unprocessable => http::classify(422, None),
            Reply::Unauthorized => http::classify(401, None),
            Reply::Conflict => http::classify(409, None),
            Reply::Success | Reply::Slow { .. } => http::classify(200, None),
            Reply::Panic => return None,
        })
    }
}

/// One delivery the sink saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The record's id.
    pub id: RecordId,
    /// Its idempotency key.
    pub key: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Its group.
    pub group: Option<String>,
    /// Answered failures the record had spent before this delivery.
    pub attempts: u32,
    /// Interrupted deliveries of the record before this one.
    pub interrupted: u32,
    /// When the sink saw it, by the sink's clock.
    pub at: Millis,
    /// What the sink answered.
    pub reply: Reply,
}

/// A sink whose answers are scripted per record, keyed by payload or by id, and which records
/// every delivery it saw. Clones share the script and the recording.
///
/// A record with no script left gets the default reply ([`Reply::Success`] unless changed with
/// [`ScriptedSink::otherwise`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use outbox_core::{ManualClock, Outcome, Record, RecordId};
/// use outbox_testkit::{Reply, ScriptedSink};
///
/// let clock = ManualClock::new(1_000);
/// let sink = ScriptedSink::new(clock.clone());
/// sink.script_payload(b"poison".to_vec(), [Reply::Unavailable, Reply::Success]);
///
/// let record = Record::fresh(RecordId(1), None, b"poison".to_vec(), "k1".into(), 0);
/// assert!(matches!(sink.answer(&record).await, Outcome::Transient { .. }));
/// assert_eq!(sink.answer(&record).await, Outcome::Delivered);
/// assert_eq!(sink.deliveries().len(), 2);
/// assert_eq!(sink.deliveries()[0].at, 1_000);
/// # }
/// ```
#[derive(Clone)]
pub struct ScriptedSink {
    clock: Arc<dyn Clock>,
    inner: Arc<Mutex<Script>>,
}

#[derive(Debug)]
struct Script {
    by_payload: HashMap<Vec<u8>, VecDeque<Reply>>,
    by_id: HashMap<RecordId, VecDeque<Reply>>,
    otherwise: Reply,
    seen: Vec<Delivery>,
}

impl fmt::Debug for ScriptedSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedSink")
            .field("clock", &self.clock)
            .field("script", &*self.lock())
            .finish()
    }
}

impl ScriptedSink {
    /// A sink that answers success to everything until scripted, and timestamps deliveries
    /// with `clock`.
    pub fn new(clock: impl Clock + 'static) -> Self {
        Self::with_clock(Arc::new(clock))
    }

    /// [`ScriptedSink::new`] with a shared clock.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        ScriptedSink {
            clock,
            inner: Arc::new(Mutex::new(Script {
                by_payload: HashMap::new(),
                by_id: HashMap::new(),
                otherwise: Reply::Success,
                seen: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // The script stays consistent across a panic: a scripted panic happens after the lock
        // is released.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends replies for every record whose payload is `payload`.
    pub fn script_payload(
        &self,
        payload: impl Into<Vec<u8>>,
        replies: impl IntoIterator<Item = Reply>,
    ) {
        self.lock()
            .by_payload
            .entry(payload.into())
            .or_default()
            .extend(replies);
    }

    /// Appends replies for the record `id`. An id script is used before a payload script.
    pub fn script_id(&self, id: RecordId, replies: impl IntoIterator<Item = Reply>) {
        self.lock().by_id.entry(id).or_default().extend(replies);
    }

    /// The reply for records with no script left (success unless changed).
    pub fn otherwise(&self, reply: Reply) {
        self.lock().otherwise = reply;
    }

    /// Every delivery seen so far, in order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.lock().seen.clone()
    }

    /// Deliveries seen of the record `id`.
    pub fn deliveries_of(&self, id: RecordId) -> Vec<Delivery> {
        self.lock()
            .seen
            .iter()
            .filter(|d| d.id == id)
            .cloned()
            .collect()
    }

    /// Takes the next reply for `record`, records the delivery and returns the outcome; a
    /// scripted [`Reply::Panic`] panics here, after the delivery is recorded. This is what the
    /// sink's `deliver` does.
    pub async fn answer(&self, record: &Record) -> Outcome {
        let reply = {
            let mut script = self.lock();
            let scripted = match script
                .by_id
                .get_mut(&record.id)
                .and_then(VecDeque::pop_front)
            {
                Some(reply) => Some(reply),
                None => script
                    .by_payload
                    .get_mut(&record.payload)
                    .and_then(VecDeque::pop_front),
            };
            let reply = scripted.unwrap_or_else(|| script.otherwise.clone());
            script.seen.push(Delivery {
                id: record.id,
                key: record.key.clone(),
                payload: record.payload.clone(),
                group: record.group.clone(),
                attempts: record.attempts,
                interrupted: record.interrupted,
                at: self.clock.now(),
                reply: reply.clone(),
            });
            reply
        };
        if let Reply::Slow { after } = reply {
            tokio::time::sleep(after).await;
        }
        match reply.outcome() {
            Some(outcome) => outcome,
            None => panic!("scripted panic while delivering record {}", record.id),
        }
    }
}

#[async_trait]
impl Sink for ScriptedSink {
    async fn deliver(&self, record: &Record) -> Outcome {
        self.answer(record).await
    }
}

#[cfg(test)]
mod tests {
    use outbox_core::ManualClock;

    use super::*;

    fn record(id: u64, payload: &[u8]) -> Record {
        Record::fresh(RecordId(id), None, payload.to_vec(), format!("k{id}"), 0)
    }

    #[tokio::test]
    async fn an_id_script_goes_before_the_payload_script_then_the_default() {
        let clock = ManualClock::new(5);
        let sink = ScriptedSink::new(clock.clone());
        sink.script_payload(b"p".to_vec(), [Reply::Unprocessable]);
        sink.script_id(RecordId(2), [Reply::Conflict]);
        sink.otherwise(Reply::NoAnswer);
        let (one, two) = (record(1, b"p"), record(2, b"p"));
        assert!(matches!(sink.answer(&two).await, Outcome::Conflict { .. }));
        assert!(matches!(sink.answer(&two).await, Outcome::Rejected { .. }));
        clock.set(9);
        assert!(sink.answer(&one).await.is_unanswered());
        let seen = sink.deliveries();
        assert_eq!(
            seen.iter()
                .map(|d| (d.id.0, d.at, d.reply.clone()))
                .collect::<Vec<_>>(),
            vec![
                (2, 5, Reply::Conflict),
                (2, 5, Reply::Unprocessable),
                (1, 9, Reply::NoAnswer)
            ]
        );
        assert_eq!(sink.deliveries_of(RecordId(1)).len(), 1);
    }

    #[tokio::test]
    async fn every_reply_maps_to_its_outcome() {
        assert_eq!(Reply::Success.outcome(), Some(Outcome::Delivered));
        assert!(matches!(
            Reply::Unavailable.outcome(),
            Some(Outcome::Transient {
                retry_after: None,
                ..
            })
        ));
        assert!(matches!(
            Reply::Unauthorized.outcome(),
            Some(Outcome::Halt { .. })
        ));
        assert!(matches!(
            Reply::Conflict.outcome(),
            Some(Outcome::Conflict { .. })
        ));
        assert!(matches!(
            Reply::Unprocessable.outcome(),
            Some(Outcome::Rejected { .. })
        ));
        assert!(Reply::NoAnswer.outcome().is_some_and(|o| o.is_unanswered()));
    }

    #[tokio::test]
    async fn a_scripted_panic_is_recorded_before_it_panics() {
        let sink = ScriptedSink::new(ManualClock::new(0));
        sink.script_id(RecordId(1), [Reply::Panic]);
        let copy = sink.clone();
        let joined = tokio::spawn(async move { copy.answer(&record(1, b"x")).await }).await;
        assert!(joined.is_err_and(|e| e.is_panic()));
        assert_eq!(sink.deliveries()[0].reply, Reply::Panic);
        assert_eq!(sink.answer(&record(1, b"x")).await, Outcome::Delivered);
    }
}
