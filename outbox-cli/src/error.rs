//! What can go wrong in a command, each as one line a person can act on.

use std::error::Error as _;

use outbox_core::RecordId;

/// A command's failure. [`CliError::line`] is what the binary prints (after `error: `) before
/// it exits with a non-zero code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// A mistake in what was asked (a bad target, a filter that cannot apply, ...).
    #[error("{0}")]
    Usage(String),
    /// The target could not be opened; the line says why and what to do.
    #[error("{0}")]
    Open(String),
    /// No record (and no tombstone) with this id.
    #[error("no record #{} in the outbox (delivered and pruned records are not kept)", .0 .0)]
    NoSuchRecord(RecordId),
    /// A verb does not apply to a record as it is.
    #[error("{0}")]
    NotApplicable(String),
    /// The record changed between the person's look and the repair, which was not made.
    #[error("{0}")]
    Changed(String),
    /// Some of the selected records were left unchanged; the lines above said which and why.
    #[error("{0}")]
    Partial(String),
    /// The person declined at the confirmation prompt, or gave no answer.
    #[error("{0}")]
    NotConfirmed(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] outbox_core::Error),
    /// Reading or writing the terminal or a socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// The error as one line: its message and every source's, joined with `: `, with line
    /// breaks flattened.
    ///
    /// ```
    /// use outbox_cli::CliError;
    /// use outbox_core::RecordId;
    /// assert_eq!(
    ///     CliError::NoSuchRecord(RecordId(9)).line(),
    ///     "no record #9 in the outbox (delivered and pruned records are not kept)"
    /// );
    /// ```
    pub fn line(&self) -> String {
        let mut line = self.to_string();
        let mut source = match self {
            // The store's message already names what its source said, often word for word.
            CliError::Store(err) => err.source(),
            _ => None,
        };
        while let Some(err) = source {
            let text = err.to_string();
            if !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            source = err.source();
        }
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The process exit code: 2 for a usage mistake (as clap's own), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}
