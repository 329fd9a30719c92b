//! The shell's one way to touch the store: perform one [`Io`], get its [`Answer`].

use crate::error::Result;
use crate::store::Store;

use super::scheduler::{Answer, Io};

/// Makes the one store call `io` stands for and returns its answer.
///
/// It decides nothing: the scheduler has computed every transition and filter already. It is
/// public for simulators that drive [`Scheduler`](super::scheduler::Scheduler)s of their own
/// (the `fleet-sim` crate performs every call through it).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_core::runner::{perform, scheduler::{Answer, Io}};
/// let store = outbox_memory::MemoryStore::new();
/// assert_eq!(perform(&store, Io::NextDue).await?, Answer::NextDue(None));
/// # Ok(())
/// # }
/// ```
pub async fn perform(store: &dyn Store, io: Io) -> Result<Answer> {
    Ok(match io {
        Io::Round { transitions, claim } => {
            let round = store.round(transitions, claim).await?;
            Answer::Round {
                skipped: round.applied.skipped,
                claimed: round.claimed,
            }
        }
        Io::Renew { ids, lease } => {
            store.renew(&ids, lease).await?;
            Answer::Renewed
        }
        Io::NextDue => Answer::NextDue(store.next_due().await?),
        Io::Expired { now, limit } => Answer::Records(store.expired(now, limit).await?),
        Io::SteppedBack { now, limit } => Answer::Records(store.stepped_back(now, limit).await?),
        Io::Get(id) => Answer::Record(store.get(id).await?),
        Io::Apply(transitions) => Answer::Applied {
            skipped: store.apply(transitions).await?.skipped,
        },
        Io::SetHalt(halt) => {
            store.set_halt(halt).await?;
            Answer::HaltSet
        }
        Io::ClearHaltIf(seen) => Answer::Halt(store.clear_halt_if(&seen).await?),
        Io::Halt => Answer::Halt(store.halt().await?),
        Io::Stats => Answer::Stats(store.stats().await?),
        Io::Unreadable { limit } => Answer::Unreadable(store.unreadable(limit).await?),
    })
}
