//! The command line: subcommands, their arguments and the parsers of ids, states and ages.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use outbox_core::{Millis, RecordId, State};

const ABOUT: &str =
    "Inspect and repair an outbox queue: a SQLite or redb file, or a PostgreSQL schema.";

const EXAMPLES: &str = "\
Examples:
  outbox stats app.db                      counts per state, oldest age, common errors
  outbox list app.db --state needs-attention
  outbox show app.db 42                    one record with its payload
  outbox retry app.db 42                   a fresh budget, due now
  outbox serve app.db                      the same in a browser, on 127.0.0.1 (read-only)

TARGET is a SQLite or redb file (told apart by its first bytes) or a PostgreSQL URL
(postgres://user@host/db) with --schema; ?sslmode=require (or verify-full) connects over
TLS and checks the server's certificate against the system's roots, or the CA file named by
&sslrootcert=FILE. Read commands open the target read-only. Every repair changes a record
only if it is still as it was read (with --seen, as `outbox show` showed it), and each
change is logged on stderr as an `audit:` line.";

/// The `outbox` command line.
///
/// ```
/// use clap::Parser;
/// use outbox_cli::cli::{Cli, Command};
/// let cli = Cli::try_parse_from(["outbox", "list", "app.db", "--state", "rejected"]).unwrap();
/// assert!(matches!(cli.command, Command::List(_)));
/// ```
#[derive(Debug, Parser)]
#[command(name = "outbox", version, about = ABOUT, long_about = None, after_help = EXAMPLES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// For scripts and tests: take "now" as these Unix milliseconds instead of the system
    /// clock, so ages, "in 3m" and verb timestamps are reproducible.
    #[arg(long, global = true, hide = true, value_name = "MILLIS")]
    pub now: Option<Millis>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Counts per state, held-back and scheduled records, the oldest undelivered age, the next
    /// due time, the runner's halt and the most common errors.
    #[command(
        after_help = "Example:\n  outbox stats app.db\n  outbox stats postgres://postgres@127.0.0.1/app --schema billing_outbox --json"
    )]
    Stats(StatsArgs),
    /// A page of records: id, group, state (`scheduled` for a pending record held until its
    /// not-before time), attempts, next attempt, age and last error.
    #[command(
        after_help = "Example:\n  outbox list app.db --state retrying --group doc-42 --limit 20\n  outbox list app.db --after 120          the page after record 120\n  outbox list app.db --state discarded    tombstones"
    )]
    List(ListArgs),
    /// One record in full, its payload as text (pretty JSON when it parses) or hex.
    #[command(after_help = "Example:\n  outbox show app.db 42\n  outbox show app.db 42 --json")]
    Show(ShowArgs),
    /// Gives records a fresh budget and makes them due now (needs-attention, retrying or
    /// pending records; not rejected or in-flight ones).
    #[command(
        after_help = "Example:\n  outbox retry app.db 42\n  outbox retry app.db --state needs-attention --yes"
    )]
    Retry(VerbArgs),
    /// Re-admits rejected records with a fresh budget, each in its own place in its group
    /// (refused while a record of the group is in flight).
    #[command(
        after_help = "Example:\n  outbox requeue app.db 42\n  outbox requeue app.db --state rejected --group doc-42"
    )]
    Requeue(VerbArgs),
    /// Removes records from delivery, leaving a tombstone with the reason until pruned.
    #[command(
        after_help = "Example:\n  outbox discard app.db 42 --reason \"sent by hand\"\n  outbox discard app.db --group doc-42 --reason \"document deleted\" --yes"
    )]
    Discard(DiscardArgs),
    /// Removes rejected records and tombstones older than an age.
    #[command(
        after_help = "Example:\n  outbox prune app.db --older-than 7d\n  outbox prune app.db --older-than 12h --yes"
    )]
    Prune(PruneArgs),
    /// Lifts the runners' halt (a refused credential or a rejection storm): the persisted halt
    /// is cleared, and every runner of the outbox, in any process, resumes when it reads that:
    /// at once on PostgreSQL (through NOTIFY), at its next wake-up or safety poll on a file.
    #[command(
        after_help = "Example:\n  outbox resume app.db\n  outbox resume postgres://postgres@127.0.0.1/app --schema billing_outbox --yes"
    )]
    Resume(ResumeArgs),
    /// The stats, refreshed in place until Ctrl-C.
    #[command(
        after_help = "Example:\n  outbox watch app.db\n  outbox watch app.db --interval 5s --json    one JSON line per refresh"
    )]
    Watch(WatchArgs),
    /// A web page on 127.0.0.1: counts, a pageable list by state and group, one record's
    /// detail; with --write, retry / requeue / discard buttons. Only the URL it prints (it
    /// carries a token made for this run) opens it.
    #[command(
        after_help = "Example:\n  outbox serve app.db                  then open the printed http://127.0.0.1:8417/?token=...\n  outbox serve app.db --write          with repair buttons\n  outbox serve app.db --port 0         any free port, printed at start"
    )]
    Serve(ServeArgs),
}

/// Which outbox to open.
#[derive(Clone, Debug, Args)]
pub struct Target {
    /// A SQLite or redb file, or a PostgreSQL URL (postgres://...).
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// The PostgreSQL schema that holds the outbox [default: outbox]. Only with a URL.
    #[arg(long, value_name = "NAME")]
    pub schema: Option<String>,
}

/// `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// Print JSON (the shape is documented in the crate docs).
    #[arg(long)]
    pub json: bool,
}

/// A state filter, including the tombstones of discarded records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateFilter {
    /// Records in this row state.
    Row(State),
    /// Tombstones.
    Discarded,
    /// Rows the store holds but cannot decode.
    Unreadable,
}

/// `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// Only records in this state: pending, retrying, in-flight, needs-attention, rejected,
    /// discarded (tombstones), or unreadable (rows the store cannot decode, with why).
    #[arg(long, value_parser = parse_state_filter)]
    pub state: Option<StateFilter>,
    /// Only records of this group.
    #[arg(long)]
    pub group: Option<String>,
    /// At most this many records.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// Only records after this id (the last id of the previous page).
    #[arg(long, value_parser = parse_id)]
    pub after: Option<RecordId>,
    /// Print JSON (the shape is documented in the crate docs).
    #[arg(long)]
    pub json: bool,
}

/// `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// The record's id (`42` or `#42`).
    #[arg(value_parser = parse_id)]
    pub id: RecordId,
    /// Print JSON (the shape is documented in the crate docs).
    #[arg(long)]
    pub json: bool,
}

/// The records a verb acts on: one id, or every record matching a filter.
#[derive(Debug, Args)]
pub struct Selection {
    /// One record's id (`42` or `#42`); or leave it out and pick records with --state/--group.
    #[arg(value_parser = parse_id)]
    pub id: Option<RecordId>,
    /// Every record in this state.
    #[arg(long, value_parser = parse_state, conflicts_with = "id")]
    pub state: Option<State>,
    /// Every record of this group.
    #[arg(long, conflicts_with = "id")]
    pub group: Option<String>,
    /// Act only if the record is still as `outbox show` showed it: the revision it printed.
    #[arg(long, requires = "id", value_parser = crate::revision::parse, value_name = "REVISION")]
    pub seen: Option<String>,
    /// Do not ask for confirmation (for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `retry` and `requeue`.
#[derive(Debug, Args)]
pub struct VerbArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub selection: Selection,
}

/// `discard`.
#[derive(Debug, Args)]
pub struct DiscardArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub selection: Selection,
    /// Why, kept on the tombstone.
    #[arg(long)]
    pub reason: String,
}

/// `prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// Rejected records last attempted, and tombstones discarded, longer ago than this
    /// (`90s`, `30m`, `12h`, `7d`, `2w`).
    #[arg(long, value_parser = parse_age, value_name = "AGE")]
    pub older_than: Duration,
    /// Do not ask for confirmation (for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// Do not ask for confirmation (for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// Time between refreshes (`500ms`, `1s`, `5s`).
    #[arg(long, default_value = "1s", value_parser = parse_age, value_name = "AGE")]
    pub interval: Duration,
    /// Print one line of `stats --json` per refresh instead of redrawing the screen.
    #[arg(long)]
    pub json: bool,
}

/// `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: Target,
    /// The port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 8417)]
    pub port: u16,
    /// Show the retry, requeue and discard buttons and accept them (the target is then opened
    /// for writing); without it the page only reads.
    #[arg(long)]
    pub write: bool,
}

/// Parses a record id, `42` or `#42`.
///
/// ```
/// use outbox_cli::cli::parse_id;
/// assert_eq!(parse_id("#42").unwrap().0, 42);
/// assert!(parse_id("forty-two").is_err());
/// ```
pub fn parse_id(text: &str) -> Result<RecordId, String> {
    let digits = text.strip_prefix('#').unwrap_or(text);
    digits
        .parse::<u64>()
        .ok()
        .filter(|&id| id > 0)
        .map(RecordId)
        .ok_or_else(|| format!("{text:?} is not a record id (a positive number such as 42)"))
}

const STATE_NAMES: &str = "pending, retrying, in-flight, needs-attention, rejected";

/// Parses a row state by its name.
pub fn parse_state(text: &str) -> Result<State, String> {
    text.parse::<State>()
        .map_err(|_| format!("unknown state {text:?}; one of {STATE_NAMES}"))
}

/// Parses a row state, `discarded` for tombstones, or `unreadable` for rows the store cannot
/// decode.
///
/// ```
/// use outbox_cli::cli::{parse_state_filter, StateFilter};
/// assert_eq!(parse_state_filter("unreadable"), Ok(StateFilter::Unreadable));
/// assert_eq!(parse_state_filter("discarded"), Ok(StateFilter::Discarded));
/// assert!(parse_state_filter("lost").unwrap_err().contains("unreadable"));
/// ```
pub fn parse_state_filter(text: &str) -> Result<StateFilter, String> {
    match text {
        "discarded" => return Ok(StateFilter::Discarded),
        "unreadable" => return Ok(StateFilter::Unreadable),
        _ => {}
    }
    text.parse::<State>()
        .map(StateFilter::Row)
        .map_err(|_| format!("unknown state {text:?}; one of {STATE_NAMES}, discarded, unreadable"))
}

/// Parses an age or interval: a whole number and a unit, `ms`, `s`, `m`, `h`, `d` or `w`.
///
/// ```
/// use std::time::Duration;
/// use outbox_cli::cli::parse_age;
/// assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
/// assert_eq!(parse_age("500ms"), Ok(Duration::from_millis(500)));
/// assert!(parse_age("7").is_err());
/// ```
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || format!("{text:?} is not an age such as 90s, 30m, 12h, 7d or 2w");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    number
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(bad)
}
