//! Trace context on the record: what a write carries from the span it was made in comes back
//! on every read and on the claim that delivers it, and a replacing write brings its own.

use outbox_core::{NewRecord, TraceContext};

use super::{all_records, claim, enqueue, fresh, get, rec, T0};
use crate::backend::Backend;
use crate::harness::{ensure_eq, Failure, ScenarioResult, Verdict};

fn context(span: &str, state: Option<&str>) -> Result<TraceContext, Failure> {
    let parent = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01");
    Ok(TraceContext::new(parent, state.map(str::to_owned))?)
}

/// A write with a trace context reads back with it from `get`, `list` and the claim; one
/// without reads back with none; a replacing write's context replaces the waiting one's, and
/// one without clears it (the delivery then belongs to the last write).
pub async fn trace_context_kept(backend: &dyn Backend) -> ScenarioResult {
    let (_location, store) = fresh(backend).await?;
    let store = &*store;
    let first = context("00f067aa0ba902b7", Some("congo=t61rcWkgMzE"))?;
    let ids = enqueue(
        store,
        T0,
        vec![
            rec("traced").trace_context(first.clone()),
            rec("plain"),
            NewRecord::new(b"v1".to_vec())
                .with_key("edit-1")
                .replacing("doc")
                .trace_context(first.clone()),
        ],
    )
    .await?;
    let [traced, plain, edit] = ids[..] else {
        return Err(Failure::new("three ids for three records"));
    };
    ensure_eq(get(store, traced).await?.trace, Some(first.clone()), "get")?;
    ensure_eq(get(store, plain).await?.trace, None, "a write without one")?;
    let listed: Vec<_> = all_records(store)
        .await?
        .into_iter()
        .map(|r| r.trace)
        .collect();
    ensure_eq(
        listed,
        vec![Some(first.clone()), None, Some(first.clone())],
        "list",
    )?;

    let second = context("b7ad6b7169203331", None)?;
    let merged = store
        .enqueue(
            vec![NewRecord::new(b"v2".to_vec())
                .with_key("edit-2")
                .replacing("doc")
                .trace_context(second.clone())],
            T0 + 1,
        )
        .await?;
    ensure_eq(
        merged.ids.clone(),
        vec![edit],
        "the edit replaced the waiting one",
    )?;
    ensure_eq(
        get(store, edit).await?.trace,
        Some(second),
        "a replacing write brings its own context",
    )?;
    let claimed = claim(store, T0 + 2, 10, 1).await?;
    let traces: Vec<_> = claimed.iter().map(|r| (r.id, r.trace.clone())).collect();
    ensure_eq(
        traces[..1].to_vec(),
        vec![(traced, Some(first))],
        "the claim that delivers it carries it",
    )?;
    let untraced = store
        .enqueue(
            vec![NewRecord::new(b"v3".to_vec())
                .with_key("edit-3")
                .replacing("other")],
            T0 + 3,
        )
        .await?;
    let cleared = store
        .enqueue(
            vec![NewRecord::new(b"v4".to_vec())
                .with_key("edit-4")
                .replacing("other")
                .trace_context(context("00f067aa0ba902b8", None)?)],
            T0 + 4,
        )
        .await?;
    ensure_eq(cleared.ids.clone(), untraced.ids.clone(), "merged")?;
    let again = store
        .enqueue(
            vec![NewRecord::new(b"v5".to_vec())
                .with_key("edit-5")
                .replacing("other")],
            T0 + 5,
        )
        .await?;
    ensure_eq(again.ids.clone(), untraced.ids, "merged again")?;
    ensure_eq(
        get(store, again.ids[0]).await?.trace,
        None,
        "the last write made without a context clears it",
    )?;
    Ok(Verdict::Passed)
}
