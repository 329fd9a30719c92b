//! The persisted halt: stored as given, reported by `halt` and `stats`, kept across a restart,
//! and cleared by a person only as they were shown it (`clear_halt_if`, in one step).

use outbox_core::Halt;

use super::{enqueue, fresh, rec, T0};
use crate::backend::Backend;
use crate::harness::{ensure_eq, skip_unless, Capability, Failure, ScenarioResult, Verdict};

/// The halt is stored: none at first, `set_halt` stores it (reason and time, as given) and
/// `halt` and `stats` report it, `set_halt(None)` clears it; records are untouched.
pub async fn halt_persisted(backend: &dyn Backend) -> ScenarioResult {
    let (_, store) = fresh(backend).await?;
    let store = &*store;
    enqueue(store, T0, vec![rec("a")]).await?;
    ensure_eq(store.halt().await?, None, "no halt in a new store")?;
    let halt = Halt {
        reason: "HTTP 401: token expired — «renew it»".into(),
        since: T0 + 1_234,
    };
    store.set_halt(Some(halt.clone())).await?;
    ensure_eq(store.halt().await?, Some(halt.clone()), "the halt as set")?;
    let stats = store.stats().await?;
    ensure_eq(
        (stats.halt, stats.link, stats.pending),
        (Some(halt), None, 1),
        "stats report the halt (and no link, and the record)",
    )?;
    let newer = Halt {
        reason: "HTTP 403".into(),
        since: T0 + 5_000,
    };
    store.set_halt(Some(newer.clone())).await?;
    ensure_eq(
        store.halt().await?,
        Some(newer),
        "a new halt replaces the old",
    )?;
    store.set_halt(None).await?;
    ensure_eq(store.halt().await?, None, "cleared")?;
    ensure_eq(store.stats().await?.halt, None, "stats after clearing")?;
    Ok(Verdict::Passed)
}

/// The halt survives a restart, and so does its clearing (`set_halt(None)`, or `clear_halt_if`
/// with the halt as shown; a halt it left stands).
pub async fn halt_survives_restart(backend: &dyn Backend) -> ScenarioResult {
    if let Some(skip) = skip_unless(backend, "halt_survives_restart", Capability::Persistent) {
        return Ok(skip);
    }
    let (location, store) = fresh(backend).await?;
    let halt = Halt {
        reason: "HTTP 401".into(),
        since: T0 + 7,
    };
    store.set_halt(Some(halt.clone())).await?;
    drop(store);
    let store = backend.open(&location).await?;
    ensure_eq(
        store.halt().await?,
        Some(halt.clone()),
        "halted after a restart",
    )?;
    ensure_eq(
        store.stats().await?.halt,
        Some(halt.clone()),
        "stats after a restart",
    )?;
    store.set_halt(None).await?;
    drop(store);
    let store = backend.open(&location).await?;
    ensure_eq(store.halt().await?, None, "still resumed after a restart")?;
    // A person's clearing of the halt as shown survives too, and so does a halt it left.
    store.set_halt(Some(halt.clone())).await?;
    let other = Halt {
        reason: "HTTP 403".into(),
        ..halt.clone()
    };
    store.clear_halt_if(&other).await?;
    drop(store);
    let store = backend.open(&location).await?;
    ensure_eq(
        store.halt().await?,
        Some(halt.clone()),
        "a halt another clearing left stands after a restart",
    )?;
    store.clear_halt_if(&halt).await?;
    drop(store);
    let store = backend.open(&location).await?;
    ensure_eq(
        store.halt().await?,
        None,
        "cleared as shown, still after a restart",
    )?;
    Ok(Verdict::Passed)
}

/// A person's resume clears the halt only as they saw it: `clear_halt_if` with no halt
/// persisted, or with another halt (another reason, another time), changes nothing and reports
/// what was there; with the halt as persisted it clears it. Eight clearings of one halt at once
/// clear it once: exactly one of them reports having found it.
pub async fn halt_cleared_only_as_seen(backend: &dyn Backend) -> ScenarioResult {
    let (location, store) = fresh(backend).await?;
    let halt = Halt {
        reason: "HTTP 401".into(),
        since: T0 + 10,
    };
    ensure_eq(store.clear_halt_if(&halt).await?, None, "no halt to clear")?;
    ensure_eq(store.halt().await?, None, "still none")?;
    store.set_halt(Some(halt.clone())).await?;
    let others = [
        Halt {
            reason: "HTTP 403".into(),
            ..halt.clone()
        },
        Halt {
            since: halt.since + 1,
            ..halt.clone()
        },
    ];
    for other in &others {
        ensure_eq(
            store.clear_halt_if(other).await?,
            Some(halt.clone()),
            "another halt was shown: the one persisted is reported",
        )?;
        ensure_eq(store.halt().await?, Some(halt.clone()), "and left in place")?;
    }
    ensure_eq(
        store.clear_halt_if(&halt).await?,
        Some(halt.clone()),
        "the halt as shown is cleared",
    )?;
    ensure_eq(store.halt().await?, None, "cleared")?;
    ensure_eq(store.stats().await?.halt, None, "stats after clearing")?;

    // A runner clears the halt it persisted, whose reason is a server's text as it came (a NUL,
    // an escape code), whatever form the store keeps it in.
    let raw = Halt {
        reason: "HTTP 401: \0\u{1b}[2Jdenied".into(),
        since: T0 + 20,
    };
    store.set_halt(Some(raw.clone())).await?;
    ensure_eq(
        store.clear_halt_if(&raw).await?,
        Some(raw.clone()),
        "the halt as the runner holds it is cleared, and reported as shown",
    )?;
    ensure_eq(store.halt().await?, None, "cleared, NUL and all")?;

    store.set_halt(Some(halt.clone())).await?;
    // Each on a handle of its own where the store is shared (as persons on other hosts are).
    let mut clearings = Vec::new();
    for _ in 0..8 {
        let handle = if backend.capabilities().shared {
            backend.open(&location).await?
        } else {
            store.clone()
        };
        let halt = halt.clone();
        clearings.push(tokio::spawn(
            async move { handle.clear_halt_if(&halt).await },
        ));
    }
    let mut found_it = 0;
    for clearing in clearings {
        let found = clearing
            .await
            .map_err(|err| Failure::new(format!("a clearing panicked: {err}")))??;
        found_it += usize::from(found.as_ref() == Some(&halt));
    }
    ensure_eq(
        found_it,
        1,
        "eight clearings at once: one found the halt, the others found none",
    )?;
    ensure_eq(store.halt().await?, None, "cleared once")?;
    Ok(Verdict::Passed)
}
