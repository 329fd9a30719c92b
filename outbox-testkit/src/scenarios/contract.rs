//! This round's store contract: one `round` call (outcomes, then a claim, in one commit), the
//! `stepped_back` query, requeue as a change, and group keys and idempotency keys checked by
//! the core's one rule. The persisted halt is in [`halt`](super::halt).

use std::time::Duration;

use outbox_core::{
    key, machine, Applied, Change, Claim, Error, Guard, NewRecord, Outcome, Progress, Record,
    RecordId, RetryAfter, Round, Store, Transition, MAX_GROUP_LEN,
};
use outbox_memory::MemoryStore;

use super::{all_records, T0};
use super::{claim, enqueue, exact_policy, fresh, get, ids, lease, rec, rec_in, report};
use crate::backend::Backend;
use crate::harness::{ensure_eq, Failure, ScenarioResult};
use crate::harness::{waiting_for, Verdict};

/// A round applies its outcomes and then claims, in one call: the claim sees what the outcomes
/// did (a delivered group head lets the next record of its group be claimed in the same round,
/// a requeued record is claimable at once), a stale outcome is skipped without stopping the
/// rest, and a round without a claim claims nothing. Each round's answer is the reference
/// model's.
pub async fn round_applies_then_claims(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let reference = MemoryStore::new();
    let both = [store, &reference as &dyn Store];
    let mut r = Vec::new();
    for s in both {
        r = enqueue(
            s,
            T0,
            vec![rec_in("a1", "A"), rec_in("a2", "A"), rec("u"), rec("v")],
        )
        .await?;
    }
    let (a1, a2, u, v) = (r[0], r[1], r[2], r[3]);
    let first = claim(store, T0, 10, 1).await?;
    claim(&reference, T0, 10, 1).await?;
    ensure_eq(ids(&first), vec![a1, u, v], "the heads are claimed")?;

    // a1 delivered, a stale outcome for u, v rejected; then a claim in the same round.
    let rejected = step(&first[2], Outcome::rejected("HTTP 422"), T0 + 1);
    let outcomes = vec![
        step(&first[0], Outcome::Delivered, T0 + 1),
        Transition {
            id: u,
            guard: Guard::Lease(99),
            change: Change::Delivered,
        },
        rejected,
    ];
    let claim2 = Claim {
        now: T0 + 1,
        limit: 10,
        lease: lease(2, T0 + 1),
    };
    let round = same_round(&both, outcomes, Some(claim2)).await?;
    ensure_eq(
        round.applied.skipped,
        vec![u],
        "the stale outcome is skipped",
    )?;
    ensure_eq(
        ids(&round.claimed),
        vec![a2],
        "the claim of the round sees a1 delivered: a2 is the head of A",
    )?;
    ensure_eq(
        round.claimed[0].lease,
        Some(claim2.lease),
        "claimed under the round's lease",
    )?;
    ensure_eq(store.stats().await?.delivered, 1, "a1 counted delivered")?;
    ensure_eq(
        get(store, u).await?.lease.map(|l| l.token),
        Some(1),
        "u is still in flight under its own lease",
    )?;

    // A requeue and a claim in one round: the requeued record is claimed at once.
    let requeue = Transition {
        id: v,
        guard: Guard::Idle,
        change: Change::Requeue { at: T0 + 2 },
    };
    let claim3 = Claim {
        now: T0 + 2,
        limit: 10,
        lease: lease(3, T0 + 2),
    };
    let round = same_round(&both, vec![requeue], Some(claim3)).await?;
    ensure_eq(round.applied.skipped, vec![], "v requeued")?;
    ensure_eq(
        ids(&round.claimed),
        vec![v],
        "the requeued record is claimed in the same round",
    )?;

    // Outcomes alone: nothing is claimed.
    let outcome = step(&round.claimed[0], Outcome::Delivered, T0 + 3);
    let round = same_round(&both, vec![outcome], None).await?;
    ensure_eq(
        (round.applied, round.claimed.len()),
        (Applied::default(), 0),
        "a round without a claim",
    )?;
    ensure_eq(
        store.stats().await?.delivered,
        2,
        "the requeued v delivered",
    )?;
    ensure_eq(
        all_records(store).await?,
        all_records(&reference).await?,
        "records after the rounds",
    )?;
    Ok(Verdict::Passed)
}

/// The transition the runner writes for `outcome` on a claimed record.
fn step(record: &Record, outcome: Outcome, now: u64) -> Transition {
    let mut rng = fastrand::Rng::with_seed(0);
    machine::on_outcome(record, &outcome, &exact_policy(), now, &mut rng).transition
}

/// One round on the backend and on the reference; their answers must agree.
async fn same_round(
    both: &[&dyn Store; 2],
    outcomes: Vec<Transition>,
    claim: Option<Claim>,
) -> Result<Round, Failure> {
    let what = format!("round({outcomes:?}, {claim:?})");
    let got = both[0].round(outcomes.clone(), claim).await?;
    let expected = both[1].round(outcomes, claim).await?;
    ensure_eq(
        got.clone(),
        expected,
        format!("{what} differs from the reference"),
    )?;
    Ok(got)
}

/// `stepped_back`: exactly the pending and retrying records whose deadline lies after `now`
/// and whose last attempt lies after `now` or never happened, lowest id first, within the
/// limit; boundaries are strict (a deadline or a last attempt at `now` is not reported); the
/// same set as the reference model's, at several `now` values.
pub async fn stepped_back_exact(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let reference = MemoryStore::new();
    let names = stepped_back_fixture(&*store).await?;
    stepped_back_fixture(&reference).await?;
    let id = |name: &str| names.iter().find(|(n, _)| *n == name).map(|(_, id)| *id);
    let pick = |wanted: &[&str]| -> Vec<RecordId> { wanted.iter().filter_map(|n| id(n)).collect() };

    let now = T0 + 20_000;
    let got = store.stepped_back(now, 100).await?;
    ensure_eq(
        ids(&got),
        pick(&["b", "a", "j"]),
        "stepped_back(T0+20000): b (last attempt ahead), a (enqueued ahead), j (due 1 ms \
         ahead); not c (due), d (last attempt before now), k (last attempt at now), h and i \
         (due at or before now), nor in-flight, parked or rejected records",
    )?;
    ensure_eq(
        ids(&store.stepped_back(now, 2).await?),
        pick(&["b", "a"]),
        "stepped_back within the limit, lowest ids first",
    )?;
    ensure_eq(
        ids(&store.stepped_back(T0 - 1, 100).await?),
        pick(&["b", "c", "d", "k", "h", "a", "i", "j"]),
        "stepped_back before everything: every pending and retrying record",
    )?;
    ensure_eq(
        store.stepped_back(T0 + 100_000, 100).await?.len(),
        0,
        "stepped_back after every deadline",
    )?;
    for at in [T0 - 1, T0, T0 + 10_000, now, T0 + 30_000, T0 + 50_000] {
        for limit in [1, 3, 100] {
            ensure_eq(
                store.stepped_back(at, limit).await?,
                reference.stepped_back(at, limit).await?,
                format!("stepped_back({at}, {limit}) against the reference model"),
            )?;
        }
    }
    Ok(Verdict::Passed)
}

/// Records around `T0 + 20_000` for [`stepped_back_exact`], by name.
async fn stepped_back_fixture(store: &dyn Store) -> Result<Vec<(&'static str, RecordId)>, Failure> {
    let first = ["b", "c", "d", "e", "f", "g", "k"];
    let r = enqueue(store, T0, first.iter().map(|n| rec(n)).collect()).await?;
    let claimed = claim(store, T0, 10, 1).await?;
    ensure_eq(ids(&claimed), r.clone(), "the fixture's first claim")?;
    let minute = Some(RetryAfter::Delay(Duration::from_secs(60)));
    report(
        store,
        &claimed[0],
        Outcome::no_answer("refused"),
        T0 + 30_000,
    )
    .await?;
    report(
        store,
        &claimed[1],
        Outcome::transient("HTTP 503", None),
        T0 + 10_000,
    )
    .await?;
    report(
        store,
        &claimed[2],
        Outcome::transient("HTTP 503", minute),
        T0 + 10_000,
    )
    .await?;
    report(
        store,
        &claimed[4],
        Outcome::conflict("HTTP 409"),
        T0 + 10_000,
    )
    .await?;
    report(
        store,
        &claimed[5],
        Outcome::rejected("HTTP 422"),
        T0 + 10_000,
    )
    .await?;
    report(
        store,
        &claimed[6],
        Outcome::transient("HTTP 429", minute),
        T0 + 20_000,
    )
    .await?;
    let h = enqueue(store, T0, vec![rec("h")]).await?[0];
    let a = enqueue(store, T0 + 50_000, vec![rec("a")]).await?[0];
    let i = enqueue(store, T0 + 20_000, vec![rec("i")]).await?[0];
    let j = enqueue(store, T0 + 20_001, vec![rec("j")]).await?[0];
    let mut names: Vec<(&'static str, RecordId)> = first.into_iter().zip(r).collect();
    names.extend([("h", h), ("a", a), ("i", i), ("j", j)]);
    Ok(names)
}

/// Requeue: a rejected record takes its own place again (same id, so before whatever its
/// group still has queued), pending, due at the given time, with a fresh budget and no last
/// attempt, error or lease, and the same payload, key, group and creation time. A requeue of
/// any record that is not rejected (pending, in flight, parked, missing), or of one whose group
/// has a record in flight, is skipped and changes nothing, while the rest of the batch applies.
pub async fn requeue_takes_its_place(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let r = enqueue(
        store,
        T0,
        vec![
            rec_in("g1", "G"),
            rec_in("g2", "G"),
            rec_in("g3", "G"),
            rec("u"),
            rec("p"),
        ],
    )
    .await?;
    let (g1, g2, g3, u, p) = (r[0], r[1], r[2], r[3], r[4]);
    let heads = claim(store, T0, 10, 1).await?;
    ensure_eq(ids(&heads), vec![g1, u, p], "heads")?;
    report(store, &heads[0], Outcome::rejected("HTTP 422"), T0 + 1).await?;
    report(store, &heads[1], Outcome::rejected("HTTP 422"), T0 + 1).await?;
    report(store, &heads[2], Outcome::conflict("HTTP 409"), T0 + 1).await?;
    let g2_claim = claim(store, T0 + 2, 10, 2).await?;
    ensure_eq(ids(&g2_claim), vec![g2], "g2 follows the rejected g1")?;
    let before = get(store, g1).await?;

    let requeue = |id: RecordId, guard: Guard| Transition {
        id,
        guard,
        change: Change::Requeue { at: T0 + 1_500 },
    };
    // Only a requeue takes a rejected record back: an update to pending would leave it
    // outside its group's order (`machine::admits_update`).
    let revive = Transition {
        id: u,
        guard: Guard::Idle,
        change: Change::Update(Progress::requeued(T0 + 1)),
    };
    let refused = vec![
        requeue(g3, Guard::Idle),
        requeue(g2, Guard::Lease(2)),
        requeue(p, Guard::Idle),
        requeue(RecordId(u64::MAX - 1), Guard::Idle),
        requeue(g1, Guard::Idle),
        revive,
    ];
    let untouched = all_records(store).await?;
    let applied = store.apply(refused).await?;
    ensure_eq(
        applied.skipped,
        vec![g3, g2, p, RecordId(u64::MAX - 1), g1, u],
        "requeue of pending, in-flight, parked and missing records is skipped, and of g1 while \
         g2 of its group is in flight; an update taking the rejected u back to pending too",
    )?;
    ensure_eq(all_records(store).await?, untouched, "nothing changed")?;

    report(store, &g2_claim[0], Outcome::Delivered, T0 + 1_000).await?;
    let applied = store
        .apply(vec![requeue(g1, Guard::Idle), requeue(g3, Guard::Idle)])
        .await?;
    ensure_eq(
        applied.skipped,
        vec![g3],
        "the pending g3 is skipped in a mixed batch, g1 requeued",
    )?;
    let mut expected = Record::fresh(
        g1,
        before.group,
        before.payload,
        before.key,
        before.created_at,
    );
    expected.next_attempt_at = Some(T0 + 1_500);
    expected.history = before.history;
    ensure_eq(
        get(store, g1).await?,
        expected,
        "the requeued record: its id, fresh, same payload, key, group, creation time and \
         attempt history",
    )?;

    // Back in its place: before g3, which waits behind it again.
    ensure_eq(
        ids(&claim(store, T0 + 1_499, 10, 3).await?),
        vec![],
        "not due before its time, and g3 no longer the head",
    )?;
    let next = claim(store, T0 + 2_001, 10, 4).await?;
    ensure_eq(ids(&next), vec![g1], "the requeued g1 before g3")?;
    report(store, &next[0], Outcome::Delivered, T0 + 2_002).await?;
    ensure_eq(
        ids(&claim(store, T0 + 2_003, 10, 5).await?),
        vec![g3],
        "then g3",
    )?;
    let stats = store.stats().await?;
    ensure_eq(
        (
            stats.rejected,
            stats.needs_attention,
            stats.in_flight,
            stats.delivered,
        ),
        (1, 1, 1, 2),
        "u still rejected, p parked, g3 in flight, g2 and g1 delivered",
    )?;
    Ok(Verdict::Passed)
}

/// Group keys: a batch with an empty group, a group containing NUL, or a group of 1,025 bytes
/// (also when counted in characters it is shorter) is refused whole with `InvalidGroup`; a
/// group of exactly 1,024 bytes is stored and read back intact.
pub async fn group_key_validated(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let long_chars = format!("{}a", "é".repeat(MAX_GROUP_LEN / 2));
    let bad = [
        ("an empty group", String::new()),
        ("a group containing NUL", "doc\0-1".to_owned()),
        ("a group of 1,025 bytes", "g".repeat(MAX_GROUP_LEN + 1)),
        ("a group of 1,025 bytes in 513 characters", long_chars),
    ];
    for (what, group) in bad {
        waiting_for(format!("enqueue of {what}"));
        let batch = vec![rec("fine"), NewRecord::new(b"x".to_vec()).in_group(group)];
        match store.enqueue(batch, T0).await {
            Err(Error::InvalidGroup { .. }) => {}
            other => {
                return Err(Failure::new(format!(
                    "{what} must be refused with InvalidGroup, got {other:?}"
                )))
            }
        }
        ensure_eq(
            store.stats().await?.pending,
            0,
            format!("nothing of the batch with {what}"),
        )?;
    }
    let longest = "é".repeat(MAX_GROUP_LEN / 2);
    let ascii = "g".repeat(MAX_GROUP_LEN);
    let ok = enqueue(store, T0, vec![rec_in("x", &longest), rec_in("y", &ascii)]).await?;
    ensure_eq(
        get(store, ok[0]).await?.group,
        Some(longest.clone()),
        "a group of exactly 1,024 bytes (512 characters)",
    )?;
    ensure_eq(
        get(store, ok[1]).await?.group,
        Some(ascii),
        "a group of 1,024 ASCII bytes",
    )?;
    let claimed = claim(store, T0, 10, 1).await?;
    ensure_eq(ids(&claimed), ok, "both claimable")?;
    Ok(Verdict::Passed)
}

/// Idempotency keys: a batch holding a key that is empty, longer than 255 bytes, or not
/// visible ASCII (a space, a tab, a line break, DEL, a letter outside ASCII) is refused whole
/// with `InvalidIdempotencyKey`, as is a coalescing write carrying one (the write it would
/// replace keeps its payload and key). Keys of exactly 255 bytes and keys using every visible
/// ASCII byte are stored and read back intact, and so is a default key.
pub async fn idempotency_key_validated(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    let bad = [
        ("an empty key", String::new()),
        ("a key of 256 bytes", "k".repeat(key::MAX_LEN + 1)),
        ("a key with a space", "order 42".to_owned()),
        ("a key with a tab", "order\t42".to_owned()),
        (
            "a key with a line break",
            "order-42\r\nX-Injected: 1".to_owned(),
        ),
        ("a key with DEL", "order-42\u{7f}".to_owned()),
        ("a key outside ASCII", "commande-42-créée".to_owned()),
    ];
    let waiting = enqueue(store, T0, vec![rec("v1").replacing("doc-1")]).await?[0];
    for (what, key) in bad {
        for (how, batch) in [
            (
                "a batch",
                vec![
                    rec("fine"),
                    NewRecord::new(b"x".to_vec()).with_key(key.clone()),
                ],
            ),
            (
                "a replacing write",
                vec![NewRecord::new(b"v2".to_vec())
                    .replacing("doc-1")
                    .with_key(key.clone())],
            ),
        ] {
            waiting_for(format!("enqueue of {how} with {what}"));
            match store.enqueue(batch, T0 + 1).await {
                Err(Error::InvalidIdempotencyKey { .. }) => {}
                other => {
                    return Err(Failure::new(format!(
                        "{how} with {what} must be refused with InvalidIdempotencyKey, got \
                         {other:?}"
                    )))
                }
            }
            ensure_eq(
                store.stats().await?.pending,
                1,
                format!("nothing of {how} with {what}"),
            )?;
        }
    }
    let kept = get(store, waiting).await?;
    ensure_eq(
        (kept.payload, kept.key),
        (b"v1".to_vec(), "key-v1".to_owned()),
        "the write a refused replacement named is untouched",
    )?;
    let visible: String = (b'!'..=b'~').map(char::from).collect();
    let longest: String = visible.chars().cycle().take(key::MAX_LEN).collect();
    let good = vec![
        NewRecord::new(b"a".to_vec()).with_key(visible.clone()),
        NewRecord::new(b"b".to_vec()).with_key(longest.clone()),
        NewRecord::new(b"c".to_vec()),
    ];
    let default_key = good[2].key.clone();
    let ok = enqueue(store, T0 + 2, good).await?;
    for (id, key, what) in [
        (ok[0], visible, "every visible ASCII byte"),
        (ok[1], longest, "a key of exactly 255 bytes"),
        (ok[2], default_key, "a default key"),
    ] {
        ensure_eq(get(store, id).await?.key, key, what)?;
    }
    Ok(Verdict::Passed)
}
