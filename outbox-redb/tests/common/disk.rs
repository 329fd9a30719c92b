//! An in-memory disk for redb that knows which writes were synced, so a test can cut the power.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use redb::StorageBackend;

/// Disk sectors: a sector being written holds its old bytes, its new bytes or, for fresh data,
/// garbage after a power cut; it is never half old and half new.
const SECTOR: usize = 512;
/// redb rewrites its header (magic number, commit slots, god byte) in place, inside the first
/// page; a sector of it holds old or new bytes after a cut, never garbage. Every other page
/// redb writes is a fresh copy (copy-on-write), so garbage there must be harmless.
const HEADER_PAGE: usize = 4096;

#[derive(Debug)]
enum Unsynced {
    Write(usize, Vec<u8>),
    SetLen(usize),
}

#[derive(Debug, Default)]
struct State {
    /// What reads see.
    live: Vec<u8>,
    /// What a sync made durable.
    synced: Vec<u8>,
    /// Changes since the last sync, in order.
    unsynced: Vec<Unsynced>,
    syncs: u64,
    /// Resizes that grew the file.
    grows: u64,
    /// Set when the power is cut: every later call fails.
    after_cut: Option<Vec<u8>>,
    /// Growing past this many bytes fails with `StorageFull`.
    capacity: Option<usize>,
    /// Cut the power at this many more writes, syncs or resizes, with this seed: inside a
    /// commit, not between two.
    countdown: Option<(u64, u64)>,
    /// Unsynced changes the cut met.
    torn: usize,
}

/// A `StorageBackend` that keeps the synced image apart from unsynced writes.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    state: Arc<Mutex<State>>,
}

fn power_off() -> io::Error {
    io::Error::other("the power is off")
}

impl Disk {
    /// A disk holding `image`, all of it synced (what a restart finds).
    pub fn from_image(image: Vec<u8>) -> Disk {
        let state = State {
            live: image.clone(),
            synced: image,
            ..State::default()
        };
        Disk {
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// An empty disk that holds at most `bytes`.
    pub fn with_capacity(bytes: usize) -> Disk {
        let disk = Disk::default();
        disk.lock().capacity = Some(bytes);
        disk
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many syncs the disk has seen.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Syncs made by commits: all of them but the one redb makes each time it grows the file
    /// (it syncs the new length before any header may name it).
    pub fn commit_syncs(&self) -> u64 {
        let state = self.lock();
        state.syncs.saturating_sub(state.grows)
    }

    /// Cuts the power: every unsynced write is dropped, applied or (outside the header page)
    /// garbled, sector by sector, as `rng` decides; every later call fails. Only the first cut
    /// counts.
    pub fn cut_power(&self, rng: &mut fastrand::Rng) {
        self.lock().cut(rng);
    }

    /// Cuts the power (as [`Disk::cut_power`] with a generator seeded with `seed`) when the
    /// `ops`-th write, sync or resize from now arrives, instead of making it.
    pub fn cut_at_op(&self, ops: u64, seed: u64) {
        self.lock().countdown = Some((ops.max(1), seed));
    }

    /// How many unsynced changes the cut met: a cut that met none tore no commit.
    pub fn torn(&self) -> usize {
        self.lock().torn
    }

    /// What a restart after the cut finds, if the power was cut.
    pub fn image_after_cut(&self) -> Option<Vec<u8>> {
        self.lock().after_cut.clone()
    }
}

impl State {
    fn cut(&mut self, rng: &mut fastrand::Rng) {
        if self.after_cut.is_some() {
            return;
        }
        let mut image = self.synced.clone();
        for change in &self.unsynced {
            match change {
                Unsynced::SetLen(len) => {
                    if rng.bool() {
                        image.resize(*len, 0);
                    }
                }
                Unsynced::Write(offset, data) => {
                    for (i, sector) in data.chunks(SECTOR).enumerate() {
                        let at = offset + i * SECTOR;
                        let fate = rng.u8(0..3);
                        if fate == 0 {
                            continue;
                        }
                        if image.len() < at + sector.len() {
                            image.resize(at + sector.len(), 0);
                        }
                        let target = &mut image[at..at + sector.len()];
                        if fate == 1 || at < HEADER_PAGE {
                            target.copy_from_slice(sector);
                        } else {
                            rng.fill(target);
                        }
                    }
                }
            }
        }
        self.torn = self.unsynced.len();
        self.after_cut = Some(image);
    }

    /// Fails once the power is off, and cuts it when the countdown of changes runs out.
    fn change(&mut self) -> Result<(), io::Error> {
        if let Some((left, seed)) = self.countdown {
            if left <= 1 {
                self.countdown = None;
                self.cut(&mut fastrand::Rng::with_seed(seed));
            } else {
                self.countdown = Some((left - 1, seed));
            }
        }
        if self.after_cut.is_some() {
            return Err(power_off());
        }
        Ok(())
    }
}

impl StorageBackend for Disk {
    fn len(&self) -> Result<u64, io::Error> {
        let state = self.lock();
        if state.after_cut.is_some() {
            return Err(power_off());
        }
        Ok(state.live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.lock();
        if state.after_cut.is_some() {
            return Err(power_off());
        }
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let bytes = state
            .live
            .get(start..start + out.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.lock();
        state.change()?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        if state.capacity.is_some_and(|c| len > c) {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if len > state.live.len() {
            state.grows += 1;
        }
        state.live.resize(len, 0);
        state.unsynced.push(Unsynced::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut state = self.lock();
        state.change()?;
        let State {
            synced, unsynced, ..
        } = &mut *state;
        for change in unsynced.drain(..) {
            match change {
                Unsynced::SetLen(len) => synced.resize(len, 0),
                Unsynced::Write(offset, data) => {
                    if synced.len() < offset + data.len() {
                        synced.resize(offset + data.len(), 0);
                    }
                    synced[offset..offset + data.len()].copy_from_slice(&data);
                }
            }
        }
        state.syncs += 1;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.lock();
        state.change()?;
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        if state.capacity.is_some_and(|c| start + data.len() > c) {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if state.live.len() < start + data.len() {
            state.live.resize(start + data.len(), 0);
        }
        state.live[start..start + data.len()].copy_from_slice(data);
        state.unsynced.push(Unsynced::Write(start, data.to_vec()));
        Ok(())
    }
}
