//! The thread's open segment files, at most `limit` of them: an LRU of file descriptors.
//!
//! Every direct-I/O file the engine opens is a [`Handle`]: a path and, while it is open, a
//! glommio `DmaFile`. Each operation asks the handle for its file (`Handle::file`); a handle
//! whose file the LRU closed opens it again by path. A core with 20,000 partitions (each an
//! active segment) thus holds at most `limit` descriptors of them, plus the ones an operation
//! in flight still holds. Without a limit (the engine's default) nothing is ever closed.
//!
//! Reopening by path is only right while the path still names the same file. The engine
//! renames a cleaned segment over the old one's name, removes segments and whole partition
//! directories, and a new topic can take a deleted one's directory name. So before any of
//! that (`Vfs::rename`, `remove`, `remove_dir_all` call [`forget`]), each handle at a path
//! about to be removed or replaced is settled: an open one keeps its descriptor until it is
//! dropped (it is no longer evicted — POSIX keeps an unlinked open file readable, which is
//! what a reader racing retention relies on), a closed one is *gone*: its operations fail,
//! it never opens another file by that name. A handle whose own file is renamed is opened
//! first, held open across the rename ([`hold`]) and then follows its file to the new name
//! ([`moved`]).
//!
//! Everything here is per thread (glommio files are `!Send`, one executor per core): no lock.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use glommio::io::{DmaFile, OpenOptions};

use super::{absolute, dma_probe};
use crate::error::{Error, Result};

/// The open-file figures of this thread ([`stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFileStats {
    /// Segment files open now (evictable ones and those held open).
    pub open: usize,
    /// The most that stay open (`usize::MAX`: no limit).
    pub limit: usize,
    /// Files opened again after the limit closed them, since the thread started.
    pub reopened: u64,
    /// Files the limit closed, since the thread started.
    pub evicted: u64,
}

/// Sets the most files this thread keeps open (at least 1; `usize::MAX` for no limit). Files
/// over a lowered limit close as other files are used.
pub fn set_open_file_limit(limit: usize) {
    OPEN.with(|o| o.borrow_mut().limit = limit.max(1));
}

/// This thread's open-file figures.
pub fn stats() -> OpenFileStats {
    OPEN.with(|o| {
        let o = o.borrow();
        OpenFileStats {
            open: o.lru.len() + o.held.get(),
            limit: o.limit,
            reopened: o.reopened,
            evicted: o.evicted,
        }
    })
}

/// What a handle has: its file, nothing (the LRU closed it), or nothing for good (its path
/// was removed or replaced while it was closed).
enum State {
    Open(Rc<DmaFile>),
    Closed,
    Gone,
}

/// A direct-I/O file that may be closed by the LRU and opened again by its path.
pub struct Handle {
    /// The absolute path (follows renames of the file).
    path: RefCell<Rc<PathBuf>>,
    state: RefCell<State>,
    /// Its key in the LRU while open and evictable; 0 when not in it.
    stamp: Cell<u64>,
    /// Held open: never evicted (its file was removed or replaced while open, or is being
    /// renamed).
    held: Cell<bool>,
}

struct OpenFiles {
    limit: usize,
    /// Open, evictable handles by last use.
    lru: BTreeMap<u64, Weak<Handle>>,
    clock: u64,
    /// Handles held open (not in `lru`), counted for `stats`.
    held: Cell<usize>,
    /// Every live handle (open or not) by absolute path.
    by_path: HashMap<PathBuf, Vec<Weak<Handle>>>,
    reopened: u64,
    evicted: u64,
}

thread_local! {
    static OPEN: RefCell<OpenFiles> = RefCell::new(OpenFiles {
        limit: usize::MAX,
        lru: BTreeMap::new(),
        clock: 0,
        held: Cell::new(0),
        by_path: HashMap::new(),
        reopened: 0,
        evicted: 0,
    });
}

async fn open_dma(abs: &Path, create: bool) -> std::io::Result<DmaFile> {
    if let Some(dir) = abs.parent() {
        dma_probe::prime_once(dir).await;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .dma_open(abs)
        .await
        .map_err(std::io::Error::from)
}

impl Handle {
    /// Opens `path` (creating it when `create`) as a new handle.
    pub(crate) async fn open(path: &Path, create: bool) -> Result<Rc<Handle>> {
        let abs = Rc::new(absolute(path)?.into_owned());
        let f = open_dma(&abs, create)
            .await
            .map_err(|e| Error::io("open", path, None, e))?;
        let h = Rc::new(Handle {
            path: RefCell::new(abs.clone()),
            state: RefCell::new(State::Open(Rc::new(f))),
            stamp: Cell::new(0),
            held: Cell::new(false),
        });
        OPEN.with(|o| {
            o.borrow_mut()
                .by_path
                .entry(abs.to_path_buf())
                .or_default()
                .push(Rc::downgrade(&h));
        });
        touch(&h);
        Ok(h)
    }

    /// The file's path.
    pub(crate) fn path(&self) -> Rc<PathBuf> {
        self.path.borrow().clone()
    }

    /// The open file, opened again if the LRU closed it. `what` names the operation for the
    /// error of a handle whose file is gone.
    pub(crate) async fn file(self: &Rc<Self>, what: &'static str) -> Result<Rc<DmaFile>> {
        let open = match &*self.state.borrow() {
            State::Open(f) => Some(f.clone()),
            State::Gone => return Err(gone(what, &self.path())),
            State::Closed => None,
        };
        if let Some(f) = open {
            touch(self);
            return Ok(f);
        }
        let path = self.path();
        let reopened = Rc::new(
            open_dma(&path, false)
                .await
                .map_err(|e| Error::io(what, &**path, None, e))?,
        );
        let f = {
            let mut st = self.state.borrow_mut();
            match &*st {
                // Another operation opened it meanwhile: use that one (ours closes on drop).
                State::Open(f) => f.clone(),
                // Removed or replaced while this was opening: which file it opened is unknown.
                State::Gone => return Err(gone(what, &path)),
                State::Closed => {
                    *st = State::Open(reopened.clone());
                    OPEN.with(|o| o.borrow_mut().reopened += 1);
                    reopened
                }
            }
        };
        touch(self);
        Ok(f)
    }

    /// Closes the file now if no other clone of the handle is left (else it closes when the
    /// last one drops).
    pub(crate) async fn close(self: Rc<Self>) -> Result<()> {
        if Rc::strong_count(&self) > 1 {
            return Ok(());
        }
        let state = std::mem::replace(&mut *self.state.borrow_mut(), State::Closed);
        let path = self.path();
        drop(self);
        if let State::Open(f) = state {
            if let Ok(f) = Rc::try_unwrap(f) {
                f.close()
                    .await
                    .map_err(|e| Error::io("close", &**path, None, e))?;
            }
        }
        Ok(())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // A drop inside this module's own borrow (never expected) leaves dead entries behind,
        // which every walk skips.
        // `try_with`: a handle dropped while the thread's locals are torn down has nothing
        // left to tell.
        let _ = OPEN.try_with(|o| {
            if let Ok(mut o) = o.try_borrow_mut() {
                let stamp = self.stamp.get();
                if stamp != 0 {
                    o.lru.remove(&stamp);
                }
                if self.held.get() {
                    o.held.set(o.held.get().saturating_sub(1));
                }
                let path = self.path.borrow().clone();
                if let Some(v) = o.by_path.get_mut(path.as_path()) {
                    v.retain(|w| w.strong_count() > 0);
                    if v.is_empty() {
                        o.by_path.remove(path.as_path());
                    }
                }
            }
        });
    }
}

fn gone(what: &'static str, path: &Path) -> Error {
    Error::io(
        what,
        path,
        None,
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the file was removed or replaced while the open-file limit had it closed",
        ),
    )
}

/// Marks `h` just used; closes the least recently used files past the limit.
fn touch(h: &Rc<Handle>) {
    if h.held.get() || !matches!(*h.state.borrow(), State::Open(_)) {
        return;
    }
    let evicted = OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let stamp = h.stamp.get();
        // A file among the most recent half stays where it is: no reordering on every read
        // of a busy file.
        if stamp != 0 && o.clock - stamp < (o.lru.len() as u64).div_ceil(2) {
            return Vec::new();
        }
        if stamp != 0 {
            o.lru.remove(&stamp);
        }
        o.clock += 1;
        let now = o.clock;
        h.stamp.set(now);
        o.lru.insert(now, Rc::downgrade(h));
        let mut evicted = Vec::new();
        while o.lru.len() > o.limit {
            let Some((_, w)) = o.lru.pop_first() else {
                break;
            };
            if let Some(victim) = w.upgrade() {
                victim.stamp.set(0);
                let st = std::mem::replace(&mut *victim.state.borrow_mut(), State::Closed);
                o.evicted += 1;
                // Dropped after the borrow: the last clone of a handle drops into `Drop`.
                evicted.push((victim, st));
            }
        }
        evicted
    });
    // Each file closes now (glommio's asynchronous close on drop) or, if an operation still
    // holds it, when that operation ends.
    drop(evicted);
}

/// Live handles at `path` (absolute), or under it when `tree`.
fn handles_at(path: &Path, tree: bool) -> Vec<Rc<Handle>> {
    OPEN.with(|o| {
        let o = o.borrow();
        if tree {
            o.by_path
                .iter()
                .filter(|(p, _)| p.starts_with(path))
                .flat_map(|(_, v)| v.iter().filter_map(Weak::upgrade))
                .collect()
        } else {
            o.by_path
                .get(path)
                .map(|v| v.iter().filter_map(Weak::upgrade).collect())
                .unwrap_or_default()
        }
    })
}

/// Takes `h` out of the LRU for good or for a rename.
fn hold_open(h: &Rc<Handle>) {
    if h.held.replace(true) {
        return;
    }
    OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let stamp = h.stamp.replace(0);
        if stamp != 0 {
            o.lru.remove(&stamp);
        }
        o.held.set(o.held.get() + 1);
    });
}

fn release(h: &Rc<Handle>) {
    if !h.held.replace(false) {
        return;
    }
    OPEN.with(|o| {
        let o = o.borrow();
        o.held.set(o.held.get().saturating_sub(1));
    });
    touch(h);
}

/// Settles the handles at `path` (or under it when `tree`) before it is removed or replaced:
/// open ones stay open until dropped, closed ones are gone.
pub(crate) fn forget(path: &Path, tree: bool) -> Result<()> {
    let abs = absolute(path)?;
    for h in handles_at(&abs, tree) {
        let open = {
            let mut st = h.state.borrow_mut();
            match *st {
                State::Open(_) => true,
                State::Closed | State::Gone => {
                    *st = State::Gone;
                    false
                }
            }
        };
        if open {
            hold_open(&h);
        }
    }
    Ok(())
}

/// The handles of `from`, opened and held open across its rename. A handle that cannot be
/// opened (its file is gone) is marked gone.
pub(crate) async fn hold(from: &Path) -> Result<Vec<Rc<Handle>>> {
    let abs = absolute(from)?;
    let mut held = Vec::new();
    for h in handles_at(&abs, false) {
        match h.file("open").await {
            Ok(_) => {
                if !h.held.get() {
                    hold_open(&h);
                    held.push(h);
                }
            }
            Err(_) => *h.state.borrow_mut() = State::Gone,
        }
    }
    Ok(held)
}

/// After a rename: the `held` handles now name `to`; or, when the rename failed, `None`,
/// they stay at their name. Either way they go back into the LRU.
pub(crate) fn moved(held: Vec<Rc<Handle>>, to: Option<&Path>) -> Result<()> {
    if let Some(to) = to {
        let to = Rc::new(absolute(to)?.into_owned());
        OPEN.with(|o| {
            let mut o = o.borrow_mut();
            for h in &held {
                let old = h.path.replace(to.clone());
                if let Some(v) = o.by_path.get_mut(old.as_path()) {
                    v.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Rc::as_ptr(h)));
                    if v.is_empty() {
                        o.by_path.remove(old.as_path());
                    }
                }
                o.by_path
                    .entry(to.to_path_buf())
                    .or_default()
                    .push(Rc::downgrade(h));
            }
        });
    }
    for h in &held {
        release(h);
    }
    Ok(())
}
