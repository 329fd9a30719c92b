//! A small persistent backend for the testkit's own tests: the reference store plus a journal
//! file of every write, replayed at open. Writes reach the file (the OS page cache) before they
//! are acknowledged, so they survive SIGKILL of the process; that is all the crash scenarios
//! need. A *lossy* journal acknowledges writes before it records them, in batches, the way a
//! store with a missing flush would, and must fail the crash scenario.
//!
//! Test code only: the appends are a few bytes into the page cache, so they run inline.

#![allow(dead_code)] // each test binary uses part of it

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use outbox_core::{
    Applied, Change, Claim, Enqueued, Error, Guard, Halt, Lease, Millis, NewRecord, Progress,
    Record, RecordId, Result, Round, Seen, State, Store, StoreLayer, Transition,
};
use outbox_memory::MemoryStore;
use outbox_testkit::{Backend, Capabilities};

/// Journal files in a temporary directory.
pub(crate) struct JournalBackend {
    dir: PathBuf,
    /// Writes acknowledged but not yet in the file, at most; 0 for a sound journal.
    lag: usize,
    /// Writes updates without their `interrupted` count (a column left out of an UPDATE).
    forgets_interrupted: bool,
}

impl JournalBackend {
    /// A sound journal.
    pub(crate) fn new() -> Self {
        Self::with_lag(0)
    }

    /// A journal that records writes only every `lag + 1` writes (acknowledging them at once).
    pub(crate) fn lossy() -> Self {
        Self::with_lag(8)
    }

    /// A journal whose updates never change a record's `interrupted` count.
    pub(crate) fn forgets_interrupted() -> Self {
        let mut backend = Self::new();
        backend.forgets_interrupted = true;
        backend
    }

    fn with_lag(lag: usize) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "outbox-testkit-journal-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        JournalBackend {
            dir,
            lag,
            forgets_interrupted: false,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "~".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text == "~" {
        return Some(Vec::new());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn opt_str(value: &Option<String>) -> String {
    value
        .as_ref()
        .map_or("-".into(), |s| format!("+{}", hex(s.as_bytes())))
}

fn parse_opt_str(text: &str) -> Option<Option<String>> {
    match text {
        "-" => Some(None),
        _ => Some(Some(
            String::from_utf8(unhex(text.strip_prefix('+')?)?).ok()?,
        )),
    }
}

fn opt_num(value: Option<u64>) -> String {
    value.map_or("-".into(), |n| n.to_string())
}

fn parse_opt_num(text: &str) -> Option<Option<u64>> {
    match text {
        "-" => Some(None),
        _ => Some(Some(text.parse().ok()?)),
    }
}

fn encode_transition(t: &Transition) -> String {
    let guard = match t.guard {
        Guard::Lease(token) => format!("L{token}"),
        Guard::Idle => "I".into(),
        Guard::Seen(seen) => format!(
            "S{}/{}/{}/{}/{}/{}/{}/{}",
            seen.state.code(),
            seen.attempts,
            seen.unanswered,
            seen.interrupted,
            seen.created_at,
            opt_num(seen.last_attempt_at),
            opt_num(seen.next_attempt_at),
            seen.texts
        ),
    };
    let change = match &t.change {
        Change::Delivered => "D".into(),
        Change::Requeue { at } => format!("R{at}"),
        Change::Discard {
            reason,
            at,
            attempts,
        } => format!("X{at}/{attempts}/{}", hex(reason.as_bytes())),
        Change::Update(p) => format!(
            "U{}/{}/{}/{}/{}/{}/{}/{}",
            p.state.code(),
            p.attempts,
            p.unanswered,
            p.interrupted,
            opt_num(p.last_attempt_at),
            opt_num(p.next_attempt_at),
            opt_str(&p.last_error),
            hex(&p.history.encode())
        ),
    };
    format!("{};{guard};{change}", t.id.0)
}

fn decode_transition(text: &str) -> Option<Transition> {
    let mut parts = text.splitn(3, ';');
    let id = RecordId(parts.next()?.parse().ok()?);
    let guard = match parts.next()? {
        "I" => Guard::Idle,
        g if g.starts_with('S') => {
            let f: Vec<&str> = g[1..].split('/').collect();
            Guard::Seen(Seen {
                state: State::from_code(f.first()?.parse().ok()?)?,
                attempts: f.get(1)?.parse().ok()?,
                unanswered: f.get(2)?.parse().ok()?,
                interrupted: f.get(3)?.parse().ok()?,
                created_at: f.get(4)?.parse().ok()?,
                last_attempt_at: parse_opt_num(f.get(5)?)?,
                next_attempt_at: parse_opt_num(f.get(6)?)?,
                texts: f.get(7)?.parse().ok()?,
            })
        }
        g => Guard::Lease(g.strip_prefix('L')?.parse().ok()?),
    };
    let change = parts.next()?;
    let change = if change == "D" {
        Change::Delivered
    } else if let Some(at) = change.strip_prefix('R') {
        Change::Requeue {
            at: at.parse().ok()?,
        }
    } else if let Some(rest) = change.strip_prefix('X') {
        let mut fields = rest.splitn(3, '/');
        let (at, attempts, reason) = (fields.next()?, fields.next()?, fields.next()?);
        Change::Discard {
            at: at.parse().ok()?,
            attempts: attempts.parse().ok()?,
            reason: String::from_utf8(unhex(reason)?).ok()?,
        }
    } else {
        let f: Vec<&str> = change.strip_prefix('U')?.split('/').collect();
        Change::Update(Progress {
            state: State::from_code(f.first()?.parse().ok()?)?,
            attempts: f.get(1)?.parse().ok()?,
            unanswered: f.get(2)?.parse().ok()?,
            interrupted: f.get(3)?.parse().ok()?,
            last_attempt_at: parse_opt_num(f.get(4)?)?,
            next_attempt_at: parse_opt_num(f.get(5)?)?,
            last_error: parse_opt_str(f.get(6)?)?,
            history: outbox_core::History::decode(&unhex(f.get(7)?)?),
        })
    };
    Some(Transition { id, guard, change })
}

fn encode_claim(claim: &Claim) -> String {
    format!(
        "{},{},{},{}",
        claim.now, claim.limit, claim.lease.token, claim.lease.until
    )
}

fn decode_claim(text: &str) -> Option<Claim> {
    let n: Vec<u64> = text
        .split(',')
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    Some(Claim {
        now: *n.first()?,
        limit: usize::try_from(*n.get(1)?).ok()?,
        lease: Lease {
            token: *n.get(2)?,
            until: *n.get(3)?,
        },
    })
}

fn encode_transitions(line: &mut String, transitions: &[Transition]) {
    for t in transitions {
        line.push(' ');
        line.push_str(&encode_transition(t));
    }
}

/// Replays one journal line onto `store`; `None` for a line that does not parse (a torn write).
async fn replay(store: &MemoryStore, line: &str) -> Option<()> {
    let fields: Vec<&str> = line.split(' ').collect();
    match *fields.first()? {
        "E" => {
            let now = fields.get(1)?.parse().ok()?;
            let mut batch = Vec::new();
            for record in &fields[2..] {
                let f: Vec<&str> = record.split(',').collect();
                let payload = unhex(f.get(1)?)?;
                let key = String::from_utf8(unhex(f.get(2)?)?).ok()?;
                let mut new = NewRecord::new(payload).with_key(key);
                new.group = parse_opt_str(f.first()?)?;
                new.expected_version = parse_opt_str(f.get(3)?)?;
                new.replaces = parse_opt_str(f.get(4)?)?;
                // Lines written before the not-before time was journaled have no sixth field.
                new.not_before = match f.get(5) {
                    Some(field) => parse_opt_num(field)?,
                    None => None,
                };
                batch.push(new);
            }
            store.enqueue(batch, now).await.ok()?;
        }
        "C" => {
            store.claim(decode_claim(fields.get(1)?)?).await.ok()?;
        }
        "O" => {
            let claim = match *fields.get(1)? {
                "-" => None,
                claim => Some(decode_claim(claim)?),
            };
            let transitions = fields[2..]
                .iter()
                .map(|f| decode_transition(f))
                .collect::<Option<_>>()?;
            store.round(transitions, claim).await.ok()?;
        }
        "H" => {
            let halt = match *fields.get(1)? {
                "-" => None,
                since => Some(Halt {
                    since: since.parse().ok()?,
                    reason: parse_opt_str(fields.get(2)?)??,
                }),
            };
            store.set_halt(halt).await.ok()?;
        }
        "R" => {
            let lease = Lease {
                token: fields.get(1)?.parse().ok()?,
                until: fields.get(2)?.parse().ok()?,
            };
            let ids: Vec<RecordId> = fields[3..]
                .iter()
                .map(|f| f.parse().ok().map(RecordId))
                .collect::<Option<_>>()?;
            store.renew(&ids, lease).await.ok()?;
        }
        "A" => {
            let transitions = fields[1..]
                .iter()
                .map(|f| decode_transition(f))
                .collect::<Option<_>>()?;
            store.apply(transitions).await.ok()?;
        }
        "P" => {
            store.prune(fields.get(1)?.parse().ok()?).await.ok()?;
        }
        _ => return None,
    }
    Some(())
}

#[derive(Debug)]
struct Journal {
    inner: MemoryStore,
    file: tokio::sync::Mutex<(File, Vec<String>)>,
    lag: usize,
    forgets_interrupted: bool,
}

impl Journal {
    /// The transitions as this journal writes them.
    async fn as_written(&self, mut transitions: Vec<Transition>) -> Result<Vec<Transition>> {
        if self.forgets_interrupted {
            for t in &mut transitions {
                if let Change::Update(p) = &mut t.change {
                    if let Some(current) = self.inner.get(t.id).await? {
                        p.interrupted = current.interrupted;
                    }
                }
            }
        }
        Ok(transitions)
    }

    /// Runs a write on the reference store and journals it, under one lock so the journal's
    /// order is the order of the writes.
    async fn write<T>(
        &self,
        line: String,
        op: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.write_as(op, |_| Some(line)).await
    }

    /// [`Self::write`], with the line made from what the operation did (`None`: it changed
    /// nothing worth a line).
    async fn write_as<T>(
        &self,
        op: impl std::future::Future<Output = Result<T>>,
        line: impl FnOnce(&T) -> Option<String>,
    ) -> Result<T> {
        let mut guard = self.file.lock().await;
        let value = op.await?;
        let Some(line) = line(&value) else {
            return Ok(value);
        };
        let (file, pending) = &mut *guard;
        pending.push(line);
        if pending.len() > self.lag {
            let text: String = pending.drain(..).map(|l| l + "\n").collect();
            file.write_all(text.as_bytes()).map_err(Error::backend)?;
        }
        Ok(value)
    }
}

#[async_trait]
impl StoreLayer for Journal {
    fn inner(&self) -> &dyn Store {
        &self.inner
    }

    async fn enqueue(&self, records: Vec<NewRecord>, now: Millis) -> Result<Enqueued> {
        let mut line = format!("E {now}");
        for r in &records {
            line.push_str(&format!(
                " {},{},{},{},{},{}",
                opt_str(&r.group),
                hex(&r.payload),
                hex(r.key.as_bytes()),
                opt_str(&r.expected_version),
                opt_str(&r.replaces),
                opt_num(r.not_before)
            ));
        }
        self.write(line, self.inner.enqueue(records, now)).await
    }

    async fn claim(&self, claim: Claim) -> Result<Vec<Record>> {
        let line = format!("C {}", encode_claim(&claim));
        self.write(line, self.inner.claim(claim)).await
    }

    async fn renew(&self, ids: &[RecordId], lease: Lease) -> Result<()> {
        let mut line = format!("R {} {}", lease.token, lease.until);
        for id in ids {
            line.push_str(&format!(" {}", id.0));
        }
        self.write(line, self.inner.renew(ids, lease)).await
    }

    async fn apply(&self, transitions: Vec<Transition>) -> Result<Applied> {
        let transitions = self.as_written(transitions).await?;
        let mut line = "A".to_owned();
        encode_transitions(&mut line, &transitions);
        self.write(line, self.inner.apply(transitions)).await
    }

    async fn round(&self, outcomes: Vec<Transition>, claim: Option<Claim>) -> Result<Round> {
        let outcomes = self.as_written(outcomes).await?;
        let claim_text = claim.as_ref().map_or("-".into(), encode_claim);
        let mut line = format!("O {claim_text}");
        encode_transitions(&mut line, &outcomes);
        self.write(line, self.inner.round(outcomes, claim)).await
    }

    async fn set_halt(&self, halt: Option<Halt>) -> Result<()> {
        let line = match &halt {
            None => "H -".to_owned(),
            Some(h) => format!("H {} {}", h.since, opt_str(&Some(h.reason.clone()))),
        };
        self.write(line, self.inner.set_halt(halt)).await
    }

    async fn clear_halt_if(&self, seen: &Halt) -> Result<Option<Halt>> {
        let cleared = |found: &Option<Halt>| found.as_ref() == Some(seen);
        self.write_as(self.inner.clear_halt_if(seen), |found| {
            cleared(found).then(|| "H -".to_owned())
        })
        .await
    }

    async fn prune(&self, older_than: Millis) -> Result<u64> {
        self.write(format!("P {older_than}"), self.inner.prune(older_than))
            .await
    }
}

#[async_trait]
impl Backend for JournalBackend {
    fn name(&self) -> &'static str {
        if self.forgets_interrupted {
            "journal-forgets-interrupted"
        } else if self.lag == 0 {
            "journal"
        } else {
            "lossy-journal"
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            persistent: true,
            shared: false,
            unreadable_rows: false,
            size_cap: false,
        }
    }

    async fn create(&self) -> Result<String> {
        std::fs::create_dir_all(&self.dir).map_err(Error::backend)?;
        let path = self.dir.join(format!("{}.journal", fastrand::u64(..)));
        File::create(&path).map_err(Error::backend)?;
        Ok(path.display().to_string())
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        let inner = MemoryStore::new();
        let file = File::open(location).map_err(|_| Error::NotFound {
            path: location.to_owned(),
        })?;
        for line in BufReader::new(file).lines() {
            let line = line.map_err(Error::backend)?;
            // A torn last line is a write that was never acknowledged.
            if replay(&inner, &line).await.is_none() {
                break;
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .open(location)
            .map_err(Error::backend)?;
        Ok(Arc::new(Journal {
            inner,
            file: tokio::sync::Mutex::new((file, Vec::new())),
            lag: self.lag,
            forgets_interrupted: self.forgets_interrupted,
        }))
    }
}

impl Drop for JournalBackend {
    fn drop(&mut self) {
        // Only the process that made the directory removes it; worker processes made none.
        if std::env::var(outbox_testkit::crash::ROLE_ENV).is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
