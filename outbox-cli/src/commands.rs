//! The one-shot commands (`stats`, `list`, `show` and the verbs) on an opened store.

use std::io::{BufRead, Write};

use outbox_core::{record::validate_group, ListQuery, Millis, RecordId, State, Store};
use serde::Serialize;

use crate::audit::{self, User, Via};
use crate::cli::{Command, PruneArgs, ResumeArgs, Selection};
use crate::error::CliError;
use crate::escape;
use crate::human;
use crate::verbs::{self, Done, Verb};
use crate::view::{
    self, Found, Listing, Page, RecordDetail, RecordView, TombstoneView, UnreadableView,
};

/// At most this many per-record lines are printed by a verb on a filter; the summary line
/// counts them all.
const SHOWN: usize = 20;

/// Where a command writes and reads: its standard streams, or buffers in tests.
pub struct Io<'a> {
    /// Results.
    pub out: &'a mut dyn Write,
    /// Questions and notes.
    pub err: &'a mut dyn Write,
    /// Answers to questions.
    pub input: &'a mut dyn BufRead,
}

impl std::fmt::Debug for Io<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Io")
    }
}

fn json(io: &mut Io<'_>, value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    writeln!(io.out, "{}", escape::json(text))?;
    Ok(())
}

/// Runs a one-shot command on `store` at `now`. `watch` and `serve` are not one-shot: they are
/// refused here (see [`crate::run`]).
pub async fn execute(
    store: &dyn Store,
    command: &Command,
    now: Millis,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    match command {
        Command::Stats(args) => {
            let stats = view::stats(store, now).await?;
            if args.json {
                json(io, &stats)
            } else {
                write!(io.out, "{}", human::stats(&stats))?;
                Ok(())
            }
        }
        Command::List(args) => {
            if let Some(group) = &args.group {
                validate_group(group).map_err(|e| CliError::Usage(format!("--group: {e}")))?;
            }
            let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
            let listing =
                view::list(store, args.state, args.group.as_deref(), args.after, limit).await?;
            if args.json {
                match &listing {
                    Listing::Records(records, next) => json(
                        io,
                        &Page {
                            records: records.iter().map(|r| RecordView::at(r, now)).collect(),
                            next_after: next.map(|id| id.0),
                        },
                    ),
                    Listing::Tombstones(tombstones, next) => json(
                        io,
                        &Page {
                            records: tombstones.iter().map(TombstoneView::from).collect(),
                            next_after: next.map(|id| id.0),
                        },
                    ),
                    Listing::Unreadable(rows, next) => json(
                        io,
                        &Page {
                            records: rows.iter().map(UnreadableView::from).collect(),
                            next_after: next.map(|id| id.0),
                        },
                    ),
                }
            } else {
                write!(io.out, "{}", human::list(&listing, now))?;
                Ok(())
            }
        }
        Command::Show(args) => {
            let found = view::find(store, args.id).await?;
            match (&found, args.json) {
                (Found::Record(r), true) => json(io, &RecordDetail::at(r, now)),
                (Found::Tombstone(t), true) => json(io, &TombstoneView::from(t)),
                (Found::Record(r), false) => Ok(write!(io.out, "{}", human::record(r, now))?),
                (Found::Tombstone(t), false) => Ok(write!(io.out, "{}", human::tombstone(t, now))?),
                (Found::Unreadable(row), true) => json(io, &UnreadableView::from(row)),
                (Found::Unreadable(row), false) => {
                    Ok(write!(io.out, "{}", human::unreadable(row))?)
                }
            }
        }
        Command::Retry(args) => verb(store, Verb::Retry, &args.selection, None, now, io).await,
        Command::Requeue(args) => verb(store, Verb::Requeue, &args.selection, None, now, io).await,
        Command::Discard(args) => {
            if args.reason.trim().is_empty() {
                return Err(CliError::Usage(
                    "--reason must say why (it stays on the tombstone)".into(),
                ));
            }
            // The tombstone says that a person discarded it, who, and with which tool.
            let discard = Verb::Discard {
                reason: Via::Command.reason(&args.reason, &User::current()),
            };
            let reason = Some(args.reason.trim());
            verb(store, discard, &args.selection, reason, now, io).await
        }
        Command::Prune(args) => prune(store, args, now, io).await,
        Command::Resume(args) => resume(store, args, now, io).await,
        Command::Watch(_) | Command::Serve(_) => Err(CliError::Usage(
            "watch and serve run until stopped; start them with `outbox`".into(),
        )),
    }
}

fn describe(selection: &Selection) -> String {
    let mut parts = Vec::new();
    if let Some(state) = selection.state {
        parts.push(format!("state {state}"));
    }
    if let Some(group) = &selection.group {
        parts.push(format!("group {group}"));
    }
    parts.join(", ")
}

/// Asks a yes/no question on `io.err` and reads the answer from `io.input`.
fn confirm(io: &mut Io<'_>, question: &str) -> Result<(), CliError> {
    write!(io.err, "{question} [y/N] ")?;
    io.err.flush()?;
    let mut answer = String::new();
    if io.input.read_line(&mut answer)? == 0 {
        return Err(CliError::NotConfirmed(
            "no answer on standard input, so nothing was changed (pass --yes to skip the \
             question)"
                .into(),
        ));
    }
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::NotConfirmed(
            "not confirmed; nothing was changed".into(),
        )),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        "record"
    } else {
        "records"
    }
}

/// Writes the audit line of each change on `io.err`.
fn log(
    io: &mut Io<'_>,
    user: &User,
    verb: &Verb,
    done: &[Done],
    reason: Option<&str>,
    now: Millis,
) -> Result<(), CliError> {
    for d in done {
        let result = d.result();
        let entry = audit::Entry {
            at: now,
            user,
            via: Via::Command,
            verb: verb.name(),
            record: Some(d.id()),
            result: &result,
            reason,
        };
        writeln!(io.err, "{entry}")?;
    }
    Ok(())
}

async fn verb(
    store: &dyn Store,
    verb: Verb,
    selection: &Selection,
    reason: Option<&str>,
    now: Millis,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let name = verb.name();
    let user = User::current();
    if let Some(id) = selection.id {
        let done = verbs::one(store, &verb, id, selection.seen.as_deref(), now).await;
        let logged = match &done {
            Ok(d) => vec![d.clone()],
            Err(CliError::Changed(line)) => {
                let lead = format!("left #{} as it is: ", id.0);
                let why = line.strip_prefix(&lead).unwrap_or(line).to_owned();
                vec![Done::Skipped { id, why }]
            }
            Err(_) => Vec::new(),
        };
        log(io, &user, &verb, &logged, reason, now)?;
        writeln!(io.out, "{}", done?.line())?;
        return Ok(());
    }
    if selection.state.is_none() && selection.group.is_none() {
        return Err(CliError::Usage(format!(
            "say which records to {name}: a record id, or --state and/or --group"
        )));
    }
    if let Some(group) = &selection.group {
        validate_group(group).map_err(|e| CliError::Usage(format!("--group: {e}")))?;
    }
    let mut query = ListQuery::new(500);
    query.state = selection.state;
    query.group = selection.group.clone();
    let mut records = Vec::new();
    view::for_each(store, query, |r| records.push(r.clone())).await?;
    // Each transition is guarded by the record as read here, before the question: a record
    // that changes while the person answers is left alone.
    let mut transitions = Vec::new();
    let mut refused: Vec<RecordId> = Vec::new();
    for record in &records {
        match verb.transition(record, now) {
            Ok(t) => transitions.push(t),
            Err(_) => refused.push(record.id),
        }
    }
    let filter = escape::visible(&describe(selection)).into_owned();
    if !refused.is_empty() {
        writeln!(
            io.err,
            "{} matching {} cannot be {name}{} as they are now (in flight, or in a state \
             the verb does not apply to) and are left alone",
            refused.len(),
            plural(refused.len()),
            if name.ends_with('e') { "d" } else { "ed" },
        )?;
    }
    if transitions.is_empty() {
        writeln!(io.out, "no record to {name} ({filter})")?;
        return Ok(());
    }
    if !selection.yes {
        let n = transitions.len();
        confirm(io, &format!("{name} {n} {} ({filter})?", plural(n)))?;
    }
    let total = transitions.len();
    let done = verbs::apply(store, &verb, transitions).await?;
    log(io, &user, &verb, &done, reason, now)?;
    for d in done.iter().take(SHOWN) {
        writeln!(io.out, "{}", d.line())?;
    }
    if done.len() > SHOWN {
        writeln!(io.out, "… and {} more", done.len() - SHOWN)?;
    }
    let changed = done.iter().filter(|d| d.changed()).count();
    writeln!(
        io.out,
        "{name}: {changed} of {total} {} changed",
        plural(total)
    )?;
    if changed < total {
        // Skipped lines past the first SHOWN were not printed: name them all here.
        let skipped: Vec<String> = done
            .iter()
            .filter(|d| !d.changed())
            .map(|d| format!("#{}", d.id().0))
            .collect();
        return Err(CliError::Partial(format!(
            "{} of {total} {} left unchanged (changed since you looked, or busy): {}",
            total - changed,
            plural(total),
            skipped.join(", ")
        )));
    }
    Ok(())
}

async fn prune(
    store: &dyn Store,
    args: &PruneArgs,
    now: Millis,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let age = u64::try_from(args.older_than.as_millis()).unwrap_or(u64::MAX);
    let cutoff = now.saturating_sub(age);
    // Count what `Store::prune` will remove, by its rule, to ask about a number.
    let mut rejected = 0usize;
    view::for_each(store, ListQuery::new(500).state(State::Rejected), |r| {
        if r.last_attempt_at.is_some_and(|t| t < cutoff) {
            rejected += 1;
        }
    })
    .await?;
    let mut tombstones = 0usize;
    let mut after = None;
    loop {
        let page = store.tombstones(after, 500).await?;
        tombstones += page.iter().filter(|t| t.discarded_at < cutoff).count();
        match page.last() {
            Some(last) if page.len() == 500 => after = Some(last.id),
            _ => break,
        }
    }
    let what = format!(
        "{rejected} rejected {} and {tombstones} {} from before {}",
        plural(rejected),
        if tombstones == 1 {
            "tombstone"
        } else {
            "tombstones"
        },
        human::local(cutoff)
    );
    if rejected + tombstones == 0 {
        writeln!(
            io.out,
            "nothing to prune: no rejected record or tombstone from before {}",
            human::local(cutoff)
        )?;
        return Ok(());
    }
    if !args.yes {
        confirm(io, &format!("prune {what}?"))?;
    }
    let pruned = store.prune(cutoff).await?;
    let result = format!("done: pruned {pruned} (asked about {what})");
    let user = User::current();
    let entry = audit::Entry {
        at: now,
        user: &user,
        via: Via::Command,
        verb: "prune",
        record: None,
        result: &result,
        reason: None,
    };
    writeln!(io.err, "{entry}")?;
    writeln!(io.out, "pruned {pruned} (asked about {what})")?;
    Ok(())
}

/// Clears the persisted halt, after asking about the one it found.
async fn resume(
    store: &dyn Store,
    args: &ResumeArgs,
    now: Millis,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let Some(halt) = store.halt().await? else {
        writeln!(io.out, "not halted: nothing to resume")?;
        return Ok(());
    };
    let what = human::halt(&halt);
    if !args.yes {
        confirm(io, &format!("lift {what}?"))?;
    }
    let resumed = verbs::lift_halt(store, &halt).await;
    let Some(result) = verbs::resume_result(&resumed, &what) else {
        return resumed.map(|_| ());
    };
    let user = User::current();
    let entry = audit::Entry {
        at: now,
        user: &user,
        via: Via::Command,
        verb: "resume",
        record: None,
        result: &result,
        reason: None,
    };
    writeln!(io.err, "{entry}")?;
    writeln!(io.out, "{}", resumed?.line(&what))?;
    Ok(())
}
