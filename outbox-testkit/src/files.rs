//! A [`Backend`] for stores that live in one file each: the suite's files go in one temporary
//! directory, removed when the backend is dropped.

use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use outbox_core::{Cap, Error, RecordId, Result, Store};

use crate::backend::{Backend, Capabilities};

/// How a file-based store is created and opened; [`Files`] does the rest.
///
/// ```
/// use std::path::Path;
/// use std::sync::Arc;
/// use outbox_core::{Result, Store};
/// use outbox_testkit::{Capabilities, FileStore, Files};
///
/// struct MyStore;
///
/// #[outbox_core::async_trait]
/// impl FileStore for MyStore {
///     const NAME: &'static str = "mine";
///     const EXTENSION: &'static str = "db";
///     const CAPABILITIES: Capabilities = Capabilities {
///         persistent: true,
///         shared: false,
///         unreadable_rows: false,
///         size_cap: false,
///     };
///
///     async fn create(path: &Path) -> Result<()> {
///         # let _ = path;
///         // Create the file, then release it so `open` (here or in a child) can take it.
///         Ok(())
///     }
///
///     async fn open(path: &Path) -> Result<Arc<dyn Store>> {
///         # let _ = path;
///         Ok(Arc::new(outbox_memory::MemoryStore::new()))
///     }
/// }
///
/// let backend = Files::<MyStore>::new();
/// # let _ = backend;
/// // In tests/conformance.rs: outbox_testkit::conformance!(Files::<MyStore>::new());
/// ```
#[async_trait]
pub trait FileStore: Send + Sync + 'static {
    /// A short name for messages.
    const NAME: &'static str;
    /// The file name extension of the store's files.
    const EXTENSION: &'static str;
    /// What the store can do.
    const CAPABILITIES: Capabilities;

    /// Creates a new, empty store at `path` and releases the file.
    async fn create(path: &Path) -> Result<()>;

    /// Makes the record `id` of the closed store at `path` undecodable (see
    /// [`Backend::plant_unreadable`]) and returns the reason the store will give; the
    /// default refuses.
    async fn plant_unreadable(path: &Path, id: RecordId) -> Result<String> {
        let _ = (path, id);
        Err(Error::Backend {
            detail: format!("{} cannot plant an unreadable row", Self::NAME),
            source: None,
        })
    }

    /// Opens the existing store at `path`.
    async fn open(path: &Path) -> Result<Arc<dyn Store>>;

    /// Opens the existing store at `path` with the size cap `cap` (see
    /// [`Backend::open_capped`]); the default refuses.
    async fn open_capped(path: &Path, cap: Cap) -> Result<Arc<dyn Store>> {
        let _ = (path, cap);
        Err(Error::Backend {
            detail: format!("{} cannot open a store with a size cap", Self::NAME),
            source: None,
        })
    }
}

/// The [`Backend`] of a [`FileStore`]: each `create` makes a new file in one temporary
/// directory. The directory is made at the first `create`, so the crash scenarios' child
/// processes, which only `open` their parent's files, leave no directory of their own behind.
pub struct Files<F> {
    dir: OnceLock<tempfile::TempDir>,
    next: AtomicUsize,
    store: PhantomData<fn() -> F>,
}

impl<F: FileStore> Files<F> {
    /// A backend with no files yet.
    pub fn new() -> Self {
        Files {
            dir: OnceLock::new(),
            next: AtomicUsize::new(0),
            store: PhantomData,
        }
    }
}

impl<F: FileStore> Default for Files<F> {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl<F: FileStore> Backend for Files<F> {
    fn name(&self) -> &'static str {
        F::NAME
    }

    fn capabilities(&self) -> Capabilities {
        F::CAPABILITIES
    }

    async fn create(&self) -> Result<String> {
        let dir = match self.dir.get() {
            Some(dir) => dir,
            None => {
                let made = tempfile::tempdir().map_err(Error::backend)?;
                // Another task may have won the race: either directory works.
                self.dir.get_or_init(|| made)
            }
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = dir.path().join(format!("outbox-{n}.{}", F::EXTENSION));
        F::create(&path).await?;
        Ok(path.display().to_string())
    }

    async fn open(&self, location: &str) -> Result<Arc<dyn Store>> {
        F::open(Path::new(location)).await
    }

    async fn plant_unreadable(&self, location: &str, id: RecordId) -> Result<String> {
        F::plant_unreadable(Path::new(location), id).await
    }

    async fn open_capped(&self, location: &str, cap: Cap) -> Result<Arc<dyn Store>> {
        F::open_capped(Path::new(location), cap).await
    }
}
