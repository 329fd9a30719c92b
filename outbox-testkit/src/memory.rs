//! `outbox-memory` as a [`Backend`]: the reference model runs the suite like any other store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox_core::{Cap, Error, Result, Store};
use outbox_memory::MemoryStore;

use crate::backend::{Backend, Capabilities};

/// The in-memory reference store as a backend under test.
///
/// Locations are names (`memory-1`, `memory-2`, ...) of stores held by this value; `open`
/// returns the very store `create` made, so nothing is persistent and nothing is shared with
/// other processes. Non-persistent scenarios run; the others are reported as skipped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> outbox_core::Result<()> {
/// use outbox_testkit::{Backend, MemoryBackend};
///
/// let backend = MemoryBackend::new();
/// let location = backend.create().await?;
/// let store = backend.open(&location).await?;
/// assert_eq!(store.stats().await?.pending, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryBackend {
    stores: Mutex<HashMap<String, Arc<MemoryStore>>>,
}

impl MemoryBackend {
    /// A backend with no stores yet.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            size_cap: true,
            ..Capabilities::default()
        }
    }

    async fn create(&self) -> Result<String> {
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        let location = format!("memory-{}", stores.len() + 1);
        stores.insert(location.clone(), Arc::new(MemoryStore::new()));
        Ok(location)
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        let stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        match stores.get(location) {
            Some(store) => Ok(store.clone()),
            None => Err(Error::NotFound {
                path: location.to_owned(),
            }),
        }
    }

    /// The store of `location`, held to `cap` from now on (a memory store has no other
    /// handle to open: the cap is set on the one store).
    async fn open_capped(&self, location: &str, cap: Cap) -> Result<Arc<dyn Store>> {
        let stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        match stores.get(location) {
            Some(store) => {
                store.set_cap(cap);
                Ok(store.clone())
            }
            None => Err(Error::NotFound {
                path: location.to_owned(),
            }),
        }
    }
}
