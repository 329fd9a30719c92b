//! The group commit of a store's writer thread: which of the writes waiting in its queue go
//! into the next transaction.
//!
//! A store that commits on one thread of its own (SQLite, redb) takes every write waiting when
//! it starts a transaction, so writers that arrive together share one durable commit. When
//! many producers enqueue at once, the first write of their burst reaches the writer before
//! most of the others have been sent: taken alone, it costs a commit of its own, and the burst
//! two. So when the last batch held more than one write (writers are arriving together) and
//! every write of this one may wait (the store says which: SQLite lets only enqueues wait, so
//! a runner's round or a lease renewal is never held back), the writer pauses briefly
//! ([`GATHER_PAUSE`]) while writes keep coming, for at most [`GATHER_LIMIT`] in all, before it
//! commits. A writer whose last batch held one write (one producer, a runner's rounds alone)
//! never pauses.
//!
//! A pause that overshoots the limit ends its batch's gathering. A platform whose sleeps always
//! overshoot (timers too coarse to gather with) stops pausing once [`COARSE_AFTER`] pauses in a
//! row have, and tries one pause again on every [`COARSE_RETRY_EVERY`]th batch that would have
//! gathered. There, each of those pauses holds its batch for one tick of the platform's timer:
//! [`COARSE_AFTER`] batches at first, then one in [`COARSE_RETRY_EVERY`]. One late pause says
//! nothing of the platform: on a busy host a thread that sleeps 20 µs may wake milliseconds
//! later because the cores were taken, and a writer that gave up gathering for good at the
//! first such pause would split most later bursts into two commits.
//!
//! ```
//! use std::sync::mpsc;
//! use outbox_core::group_commit::GroupCommit;
//!
//! let (queue, writes) = mpsc::channel::<u32>();
//! for write in 1..=3 {
//!     queue.send(write).unwrap();
//! }
//! let mut group = GroupCommit::new();
//! let first = writes.recv().unwrap();
//! let (batch, ended_by) = group.batch(first, &writes, 100, Ok, |_| true);
//! assert_eq!(batch, [1, 2, 3]);
//! assert_eq!(ended_by, None);
//! ```

use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// How long the writer sleeps, once writers have been seen arriving together, for the rest of
/// a burst to reach its queue: long enough for a burst of producers on another core to queue
/// their writes, short beside a durable commit.
///
/// On Linux a sleep also takes the thread's timer slack, 50 µs by default, which would more
/// than triple each pause (a burst's gathering is at least two pauses: one that brings writes,
/// one that brings none). So the first pause of a thread sets that thread's slack to
/// [`PAUSE_SLACK`] (other platforms keep their own timers). Only that thread changes, and it
/// pauses only after a batch of several writes, so a writer that sees one write at a time
/// keeps the default. Its other timed waits (SQLite's busy handler, which sleeps whole
/// milliseconds while another process holds the file) only become more punctual.
pub const GATHER_PAUSE: Duration = Duration::from_micros(20);

/// The timer slack a pausing writer thread sets for itself on Linux: see [`GATHER_PAUSE`].
pub const PAUSE_SLACK: Duration = Duration::from_micros(1);

/// The longest a batch waits for a burst, in all its pauses.
pub const GATHER_LIMIT: Duration = Duration::from_micros(500);

/// How many pauses in a row must overshoot [`GATHER_LIMIT`] before the writer takes its
/// platform's sleeps as too coarse to gather with.
pub const COARSE_AFTER: u32 = 3;

/// A writer that stopped pausing tries one pause again on every this-many-th batch that
/// would have gathered (a batch of a burst whose writes may all wait and that is not yet
/// full): a host that was only busy gathers again.
pub const COARSE_RETRY_EVERY: u32 = 64;

/// Collects a writer thread's batches from its queue; see the module docs. `P` is how it
/// pauses, returning how long it took: [`GroupCommit::new`] sleeps [`GATHER_PAUSE`].
#[derive(Debug)]
pub struct GroupCommit<P = fn() -> Duration> {
    /// How many writes the last batch held.
    last: usize,
    /// How many pauses in a row overshot [`GATHER_LIMIT`]: from [`COARSE_AFTER`] on, this
    /// platform's sleeps are taken as too coarse to gather with.
    overshoots: u32,
    /// Batches that would have gathered but did not pause, since the last pause.
    skipped: u32,
    pause: P,
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self::new()
    }
}

impl GroupCommit {
    /// Batches of a writer thread that sleeps [`GATHER_PAUSE`] to gather a burst.
    ///
    /// ```
    /// use outbox_core::group_commit::GroupCommit;
    /// let group = GroupCommit::new();
    /// assert_eq!(group.last(), 0);
    /// ```
    pub fn new() -> Self {
        Self::with_pause(pause_briefly)
    }
}

// The writer's own thread waits for producers on other threads: no clock of the queue is
// read, and tests give a pause of their own (`GroupCommit::with_pause`).
#[allow(clippy::disallowed_methods)]
fn pause_briefly() -> Duration {
    fine_timers();
    let started = Instant::now();
    std::thread::sleep(GATHER_PAUSE);
    started.elapsed()
}

impl<P: FnMut() -> Duration> GroupCommit<P> {
    /// Batches that call `pause` to wait for a burst's writes; it returns how long it took (a
    /// test gives one that sends writes and says how long it pretended to sleep).
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_core::group_commit::GroupCommit;
    /// let group = GroupCommit::with_pause(|| Duration::from_micros(70));
    /// assert_eq!(group.last(), 0);
    /// ```
    pub fn with_pause(pause: P) -> Self {
        GroupCommit {
            last: 0,
            overshoots: 0,
            skipped: 0,
            pause,
        }
    }

    /// How many writes the last batch held.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use outbox_core::group_commit::GroupCommit;
    /// let (queue, writes) = mpsc::channel::<u32>();
    /// queue.send(2).unwrap();
    /// let mut group = GroupCommit::new();
    /// group.batch(1, &writes, 10, Ok, |_| true);
    /// assert_eq!(group.last(), 2);
    /// ```
    pub fn last(&self) -> usize {
        self.last
    }

    /// The next batch: `first` (already taken from the queue), then every write waiting in
    /// `queue`, up to `max` in all. Each item `admit` turns into a write joins; an item it
    /// hands back (`Err`) ends the batch and is returned beside it, to be handled after the
    /// batch commits. At the first empty queue the thread yields once for writes sent with
    /// the last; after a batch of more than one write, and while every write of this one
    /// `may_wait`, it pauses while writes keep arriving (see the module docs). A closed queue
    /// ends the batch.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use outbox_core::group_commit::GroupCommit;
    ///
    /// // Writes and a request that must run outside any batch.
    /// #[derive(Debug, PartialEq)]
    /// enum Work { Write(u32), Outside }
    /// let (queue, work) = mpsc::channel();
    /// queue.send(Work::Write(2)).unwrap();
    /// queue.send(Work::Outside).unwrap();
    /// queue.send(Work::Write(3)).unwrap();
    /// let admit = |w| match w { Work::Write(n) => Ok(n), other => Err(other) };
    /// let mut group = GroupCommit::new();
    /// let (batch, ended_by) = group.batch(1, &work, 100, admit, |_| true);
    /// assert_eq!((batch, ended_by), (vec![1, 2], Some(Work::Outside)));
    /// ```
    pub fn batch<T, U>(
        &mut self,
        first: U,
        queue: &Receiver<T>,
        max: usize,
        mut admit: impl FnMut(T) -> Result<U, T>,
        may_wait: impl Fn(&U) -> bool,
    ) -> (Vec<U>, Option<T>) {
        let max = max.max(1);
        let mut batch = vec![first];
        let mut yielded = false;
        loop {
            match take_waiting(&mut batch, queue, max, &mut admit) {
                Taken::EndedBy(item) => return self.done(batch, Some(item)),
                Taken::Waiting(_) if !yielded => {
                    // A burst's first write arrives alone: let the producers that woke with
                    // it queue theirs.
                    yielded = true;
                    std::thread::yield_now();
                }
                // No write will come: nothing to wait for.
                Taken::Closed => return self.done(batch, None),
                Taken::Waiting(_) | Taken::Full => break,
            }
        }
        if self.last > 1 && batch.len() < max && batch.iter().all(&may_wait) && self.may_pause() {
            let mut waited = Duration::ZERO;
            while batch.len() < max && waited < GATHER_LIMIT && batch.iter().all(&may_wait) {
                let took = (self.pause)();
                waited += took;
                self.skipped = 0;
                self.overshoots = if took > GATHER_LIMIT {
                    self.overshoots.saturating_add(1)
                } else {
                    0
                };
                match take_waiting(&mut batch, queue, max, &mut admit) {
                    Taken::EndedBy(item) => return self.done(batch, Some(item)),
                    Taken::Waiting(0) | Taken::Closed => break,
                    Taken::Waiting(_) | Taken::Full => {}
                }
            }
        }
        self.done(batch, None)
    }

    /// Whether a batch that would gather may pause: yes, unless the platform's sleeps were
    /// found coarse; then it counts the batch, and only every [`COARSE_RETRY_EVERY`]th tries
    /// once more (its pause starts the count again).
    fn may_pause(&mut self) -> bool {
        if self.overshoots < COARSE_AFTER {
            return true;
        }
        self.skipped = self.skipped.saturating_add(1);
        self.skipped >= COARSE_RETRY_EVERY
    }

    fn done<T, U>(&mut self, batch: Vec<U>, ended_by: Option<T>) -> (Vec<U>, Option<T>) {
        self.last = batch.len();
        (batch, ended_by)
    }
}

/// Sets the calling thread's timer slack to [`PAUSE_SLACK`], once per thread.
#[cfg(target_os = "linux")]
fn fine_timers() {
    use std::cell::Cell;
    thread_local! {
        static SET: Cell<bool> = const { Cell::new(false) };
    }
    if SET.replace(true) {
        return;
    }
    let slack = u64::try_from(PAUSE_SLACK.as_nanos()).unwrap_or(u64::MAX);
    if let Err(err) = nix::sys::prctl::set_timerslack(slack) {
        // The pauses then last longer; the batches are still right.
        tracing::debug!(error = %err, "could not set a writer thread's timer slack");
    }
}

/// Other platforms keep their timers as they are.
#[cfg(not(target_os = "linux"))]
fn fine_timers() {}

/// What [`take_waiting`] found.
enum Taken<T> {
    /// The queue is empty after this many joined.
    Waiting(usize),
    /// The queue is closed: no write will come.
    Closed,
    /// The batch holds `max` writes.
    Full,
    /// An item that may not join.
    EndedBy(T),
}

/// Moves the writes waiting in `queue` into `batch`, up to `max` in all.
fn take_waiting<T, U>(
    batch: &mut Vec<U>,
    queue: &Receiver<T>,
    max: usize,
    admit: &mut impl FnMut(T) -> Result<U, T>,
) -> Taken<T> {
    let mut joined = 0;
    while batch.len() < max {
        match queue.try_recv() {
            Ok(item) => match admit(item) {
                Ok(write) => {
                    batch.push(write);
                    joined += 1;
                }
                Err(item) => return Taken::EndedBy(item),
            },
            Err(TryRecvError::Empty) => return Taken::Waiting(joined),
            Err(TryRecvError::Disconnected) => return Taken::Closed,
        }
    }
    Taken::Full
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::mpsc::{self, Sender};

    use super::*;

    /// What each pause of a test writer pretends to take.
    const PAUSE: Duration = Duration::from_micros(70);

    /// A writer's batches, its queue, and how often it paused.
    struct Bursty<P> {
        group: GroupCommit<P>,
        writes: Receiver<u32>,
        queue: Sender<u32>,
        pauses: Rc<Cell<u32>>,
    }

    /// A writer whose pauses each take `took` and let the next of `arrivals` reach its queue.
    fn bursty(arrivals: Vec<Vec<u32>>, took: Duration) -> Bursty<impl FnMut() -> Duration> {
        let (queue, writes) = mpsc::channel();
        let sender = queue.clone();
        let pauses = Rc::new(Cell::new(0));
        let counted = Rc::clone(&pauses);
        let mut arrivals = arrivals.into_iter();
        let group = GroupCommit::with_pause(move || {
            counted.set(counted.get() + 1);
            for write in arrivals.next().unwrap_or_default() {
                sender.send(write).unwrap();
            }
            took
        });
        Bursty {
            group,
            writes,
            queue,
            pauses,
        }
    }

    impl<P: FnMut() -> Duration> Bursty<P> {
        /// The next batch after `first`, every write may wait, at most `max`.
        fn batch(&mut self, first: u32, max: usize) -> Vec<u32> {
            self.group.batch(first, &self.writes, max, Ok, all).0
        }

        /// A batch of two, as writers arriving together leave: the next batch may gather.
        fn after_two(&mut self) {
            self.queue.send(2).unwrap();
            assert_eq!(self.batch(1, 100), [1, 2]);
        }
    }

    fn all(_: &u32) -> bool {
        true
    }

    #[test]
    fn a_writer_seeing_one_write_at_a_time_never_pauses() {
        let mut b = bursty(vec![vec![99]], PAUSE);
        for write in 1..=3 {
            let batch = b.batch(write, 100);
            assert_eq!(batch, [write]);
        }
        b.queue.send(4).unwrap();
        assert_eq!(b.batch(3, 100), [3, 4]);
        assert_eq!(b.pauses.get(), 0);
    }

    #[test]
    fn after_a_batch_of_several_the_writer_waits_while_a_burst_keeps_arriving() {
        let mut b = bursty(vec![vec![11, 12], vec![13], vec![], vec![99]], PAUSE);
        b.after_two();
        assert_eq!(
            b.pauses.get(),
            0,
            "the first batch of a burst does not wait"
        );
        // The next burst: its first write, then two pauses that find more, then one that
        // finds none and ends the gathering (99 waits for the next batch).
        assert_eq!(b.batch(10, 100), [10, 11, 12, 13]);
        assert_eq!(b.pauses.get(), 3);
        assert_eq!(b.writes.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn gathering_stops_at_the_time_limit_and_at_the_batch_limit() {
        let endless: Vec<Vec<u32>> = (0..100).map(|i| vec![i]).collect();
        let mut b = bursty(endless, PAUSE);
        b.after_two();
        let batch = b.batch(0, 1_000);
        // 70 µs a pause: the eighth passes the 500 µs limit.
        assert_eq!(b.pauses.get(), 8);
        assert_eq!(batch.len(), 1 + 8);
        // Never more than `max`, gathering or not.
        let batch = b.batch(0, 3);
        assert_eq!(batch.len(), 3);
    }

    #[test]
    fn a_write_that_may_not_wait_is_never_held_back() {
        let mut b = bursty(vec![vec![5], vec![7], vec![8]], PAUSE);
        b.after_two();
        let odd_waits = |w: &u32| w % 2 == 1;
        // An even write does not wait for a burst.
        assert_eq!(b.group.batch(4, &b.writes, 100, Ok, odd_waits).0, [4]);
        assert_eq!(b.pauses.get(), 0);
        // Odd ones do, until an even one joins.
        b.queue.send(3).unwrap();
        b.group.batch(1, &b.writes, 100, Ok, odd_waits);
        assert_eq!(
            b.group.batch(9, &b.writes, 100, Ok, odd_waits).0,
            [9, 5, 7, 8]
        );
        assert_eq!(b.pauses.get(), 3);
    }

    /// A writer whose every pause brings one write and takes what `took` says (then
    /// [`PAUSE`]), and how often it paused; each `batch` call sends one write beside its first,
    /// so every batch holds several and the next may gather.
    fn timed(took: impl Iterator<Item = Duration>) -> (impl FnMut(usize) -> usize, Rc<Cell<u32>>) {
        let (queue, writes) = mpsc::channel();
        let sender = queue.clone();
        let pauses = Rc::new(Cell::new(0));
        let counted = Rc::clone(&pauses);
        let mut took = took;
        let mut group = GroupCommit::with_pause(move || {
            counted.set(counted.get() + 1);
            sender.send(0).unwrap();
            took.next().unwrap_or(PAUSE)
        });
        let batch = move |max| {
            queue.send(2).unwrap();
            group.batch(1, &writes, max, Ok, all).0.len()
        };
        (batch, pauses)
    }

    #[test]
    fn a_platform_whose_sleeps_overshoot_stops_pausing_and_tries_again_later() {
        let (mut batch, pauses) = timed(std::iter::repeat(Duration::from_millis(15)));
        assert_eq!(batch(1_000), 2, "the first batch of a burst does not wait");
        // Each overshooting pause ends its batch's gathering.
        for overshot in 1..=COARSE_AFTER {
            assert_eq!(batch(1_000), 3);
            assert_eq!(pauses.get(), overshot);
        }
        for _ in 1..COARSE_RETRY_EVERY {
            assert_eq!(batch(1_000), 2);
        }
        assert_eq!(pauses.get(), COARSE_AFTER, "coarse: no pause");
        batch(1_000);
        assert_eq!(pauses.get(), COARSE_AFTER + 1, "one try again");
        batch(1_000);
        assert_eq!(pauses.get(), COARSE_AFTER + 1, "it overshot too");
    }

    #[test]
    fn only_batches_that_would_gather_count_toward_a_retry() {
        let (mut batch, pauses) = timed(std::iter::repeat(Duration::from_millis(15)));
        for _ in 0..=COARSE_AFTER {
            batch(1_000);
        }
        assert_eq!(pauses.get(), COARSE_AFTER);
        // Full batches would not have paused: they leave the count as it was.
        for _ in 0..2 * COARSE_RETRY_EVERY {
            assert_eq!(batch(2), 2);
        }
        for _ in 1..COARSE_RETRY_EVERY {
            batch(1_000);
        }
        assert_eq!(pauses.get(), COARSE_AFTER);
        batch(1_000);
        assert_eq!(pauses.get(), COARSE_AFTER + 1);
    }

    #[test]
    fn one_late_pause_does_not_stop_the_gathering() {
        // A host busy for a moment: one pause wakes 3 ms late, the next ones in time.
        let (mut batch, _) = timed([Duration::from_millis(3)].into_iter());
        batch(1_000);
        assert_eq!(batch(1_000), 3, "the late pause ends its batch");
        // 70 µs a pause, each bringing a write: the eighth passes the 500 µs limit.
        assert_eq!(batch(1_000), 2 + 8, "still gathering after it");
    }

    #[test]
    fn a_pause_in_time_after_a_retry_restores_the_gathering() {
        let slow = std::iter::repeat_n(Duration::from_millis(15), COARSE_AFTER as usize);
        let (mut batch, pauses) = timed(slow);
        for _ in 0..=COARSE_AFTER {
            batch(1_000);
        }
        for _ in 1..COARSE_RETRY_EVERY {
            batch(1_000);
        }
        assert_eq!(pauses.get(), COARSE_AFTER);
        // The try again is in time: it gathers, and so does every later batch.
        assert_eq!(batch(1_000), 2 + 8);
        assert_eq!(batch(1_000), 2 + 8);
    }

    #[test]
    fn an_item_that_may_not_join_ends_the_batch_even_while_gathering() {
        let mut b = bursty(vec![vec![5, 0, 6]], PAUSE);
        b.queue.send(2).unwrap();
        let admit = |w: u32| if w == 0 { Err(w) } else { Ok(w) };
        b.group.batch(1, &b.writes, 100, admit, all);
        let (batch, ended_by) = b.group.batch(4, &b.writes, 100, admit, all);
        assert_eq!((batch, ended_by), (vec![4, 5], Some(0)));
        assert_eq!(b.writes.try_recv(), Ok(6), "left for after the batch");
    }

    #[test]
    fn a_closed_queue_ends_the_batch_without_a_pause() {
        let (queue, writes) = mpsc::channel();
        let mut pauses = 0;
        {
            let mut group = GroupCommit::with_pause(|| {
                pauses += 1;
                PAUSE
            });
            queue.send(2).unwrap();
            group.batch(1, &writes, 100, Ok, all);
            drop(queue);
            assert_eq!(group.batch(3, &writes, 100, Ok, all).0, [3]);
        }
        assert_eq!(pauses, 0);
    }

    /// What a thread's first pause does before it sleeps (`pause_briefly` calls it): its
    /// sleeps then last what they ask, within a microsecond (the default slack, 50 µs, would
    /// more than triple a pause); a thread that never paused keeps the default.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_pausing_thread_sleeps_with_fine_timer_slack() {
        use nix::sys::prctl::get_timerslack;
        let (before, after) = std::thread::spawn(|| {
            let before = get_timerslack().unwrap();
            fine_timers();
            (before, get_timerslack().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(i64::from(after), PAUSE_SLACK.as_nanos() as i64);
        assert!(
            i64::from(before) > PAUSE_SLACK.as_nanos() as i64,
            "default slack {before} ns"
        );
        let untouched = std::thread::spawn(|| get_timerslack().unwrap())
            .join()
            .unwrap();
        assert_eq!(untouched, before, "only the pausing thread changes");
    }
}
