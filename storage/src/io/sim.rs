//! The simulated disk (the `sim` feature): files in memory that fail the way the disk model
//! of `DESIGN.md` ("What is assumed of the disk") allows and no kinder — unflushed writes
//! lost, torn at any sector boundary, or with a changed byte flipped; injected I/O errors
//! (EIO, ENOSPC, ...) per operation and path. The crash tests open logs on it with
//! `Log::open_in(disk.vfs(), ...)`, run, take [`SimDisk::crash`] (power loss) or
//! [`SimDisk::process_crash`] (kill -9), and reopen on the disk that returns.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::{IoFile, Vfs};
use crate::error::{Error, Result};

/// Which operation a simulated fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOp {
    /// Reads of file data.
    Read,
    /// Writes of file data.
    Write,
    /// fdatasync.
    Sync,
    /// Preallocation (fallocate): where a full disk shows first.
    Allocate,
}

/// An injected I/O error: every `op` on a file whose path contains `path_contains` fails
/// with `errno`.
#[derive(Debug, Clone)]
pub struct SimFault {
    /// The operation that fails.
    pub op: SimOp,
    /// Applies to the files whose path contains this.
    pub path_contains: String,
    /// The error the operation fails with (e.g. `libc::EIO`, `libc::ENOSPC`).
    pub errno: i32,
}

/// A simulated disk: files in memory, each with the bytes a crash would keep (`durable`) and
/// the writes since its last fdatasync, which a crash drops, tears or corrupts.
#[derive(Default)]
pub struct SimDisk {
    files: RefCell<BTreeMap<PathBuf, Rc<SimFile>>>,
    faults: RefCell<Vec<SimFault>>,
    syncs: Cell<u64>,
    dir_syncs: Cell<u64>,
    /// Set by [`SimDisk::stop_after`]: how many more changes the disk makes.
    changes_left: Cell<Option<u64>>,
}

/// One simulated file.
#[derive(Default)]
pub struct SimFile {
    /// What reads see now.
    data: RefCell<Vec<u8>>,
    /// What survives a crash for sure.
    durable: RefCell<Vec<u8>>,
    /// Writes since the last sync, in order: (position, bytes).
    unsynced: RefCell<Vec<(u64, Vec<u8>)>>,
}

impl SimFile {
    fn write(&self, pos: u64, bytes: &[u8]) {
        let mut d = self.data.borrow_mut();
        let end = pos as usize + bytes.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[pos as usize..end].copy_from_slice(bytes);
        self.unsynced.borrow_mut().push((pos, bytes.to_vec()));
    }

    fn read(&self, pos: u64, len: usize) -> Bytes {
        let d = self.data.borrow();
        let start = (pos as usize).min(d.len());
        let end = (start + len).min(d.len());
        Bytes::copy_from_slice(&d[start..end])
    }

    fn sync(&self) {
        *self.durable.borrow_mut() = self.data.borrow().clone();
        self.unsynced.borrow_mut().clear();
    }

    // Size changes (fallocate, truncate) are treated as durable at once: recovery never
    // trusts a file's size, only the batches it can validate.
    fn extend_to(&self, size: u64) {
        for v in [&self.data, &self.durable] {
            let mut v = v.borrow_mut();
            if (v.len() as u64) < size {
                v.resize(size as usize, 0);
            }
        }
    }

    pub(super) fn truncate(&self, size: u64) {
        for v in [&self.data, &self.durable] {
            v.borrow_mut().resize(size as usize, 0);
        }
    }

    pub(super) fn len(&self) -> u64 {
        self.data.borrow().len() as u64
    }
}

/// The unit a disk writes atomically (the logical block of the disk weir is tested on).
pub const SECTOR: usize = 512;

/// What a simulated crash does to each write that was not yet flushed. The model of the
/// disk (see `DESIGN.md`): a sector is written whole or not at all, and rewriting bytes with
/// the same values never damages them; anything else may happen to unflushed writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashFate {
    /// The write reached the disk.
    Kept,
    /// The write never reached the disk.
    Lost,
    /// Only the sectors within the first `n` bytes reached the disk.
    Torn(usize),
    /// The write reached the disk with one of the bytes it changed flipped (chosen by this
    /// index modulo their number).
    Flipped(usize),
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> Rc<SimDisk> {
        Rc::new(SimDisk::default())
    }

    /// The file layer over this disk, to open a log on (`Log::open_in`).
    pub fn vfs(self: &Rc<Self>) -> Vfs {
        Vfs::Sim(self.clone())
    }

    /// Adds an injected fault.
    pub fn inject(&self, fault: SimFault) {
        self.faults.borrow_mut().push(fault);
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.faults.borrow_mut().clear();
    }

    /// How many directory fsyncs have been issued.
    pub fn dir_sync_count(&self) -> u64 {
        self.dir_syncs.get()
    }

    /// How many fdatasyncs have been issued.
    pub fn sync_count(&self) -> u64 {
        self.syncs.get()
    }

    /// Lets the disk make `changes` more changes (writes, fdatasyncs, removes, renames), then
    /// fails every further one with EIO without making it: a crash test stops an operation
    /// at each of its steps in turn this way, then crashes the disk and reopens.
    pub fn stop_after(&self, changes: u64) {
        self.changes_left.set(Some(changes));
    }

    /// Changes the disk made since [`SimDisk::stop_after`] minus those it refused: how many of
    /// the allowed changes are left (`None` without a limit).
    pub fn changes_left(&self) -> Option<u64> {
        self.changes_left.get()
    }

    fn change(&self, what: &'static str, path: &Path) -> Result<()> {
        match self.changes_left.get() {
            Some(0) => Err(Error::io(
                what,
                path,
                None,
                std::io::Error::from_raw_os_error(5),
            )),
            Some(n) => {
                self.changes_left.set(Some(n - 1));
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn check(&self, op: SimOp, path: &Path, pos: u64) -> Result<()> {
        let faults = self.faults.borrow();
        let path_str = path.to_string_lossy();
        if let Some(f) = faults
            .iter()
            .find(|f| f.op == op && path_str.contains(&f.path_contains))
        {
            let what = match op {
                SimOp::Read => "read",
                SimOp::Write => "write",
                SimOp::Sync => "fdatasync",
                SimOp::Allocate => "fallocate",
            };
            return Err(Error::io(
                what,
                path,
                Some(pos),
                std::io::Error::from_raw_os_error(f.errno),
            ));
        }
        Ok(())
    }

    /// Simulates a power loss: returns the disk as it would be found on restart. Every
    /// unflushed write meets the fate `fate(file, write index, write length)` chooses.
    pub fn crash(&self, mut fate: impl FnMut(&Path, usize, usize) -> CrashFate) -> Rc<SimDisk> {
        let after = SimDisk::default();
        for (path, file) in self.files.borrow().iter() {
            let mut image = file.durable.borrow().clone();
            for (i, (pos, bytes)) in file.unsynced.borrow().iter().enumerate() {
                let start = *pos as usize;
                let chosen = fate(path, i, bytes.len());
                let keep: &[u8] = match chosen {
                    CrashFate::Lost => continue,
                    CrashFate::Kept | CrashFate::Flipped(_) => bytes,
                    // A sector is written whole or not at all.
                    CrashFate::Torn(n) => &bytes[..(n / SECTOR * SECTOR).min(bytes.len())],
                };
                let end = start + keep.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                // Bytes the write changes; a write never damages bytes it rewrites unchanged.
                let changed: Vec<usize> = (0..keep.len())
                    .filter(|&j| image[start + j] != keep[j])
                    .collect();
                image[start..end].copy_from_slice(keep);
                if let CrashFate::Flipped(at) = chosen {
                    if !changed.is_empty() {
                        image[start + changed[at % changed.len()]] ^= 0x10;
                    }
                }
            }
            let f = SimFile {
                data: RefCell::new(image.clone()),
                durable: RefCell::new(image),
                unsynced: RefCell::new(Vec::new()),
            };
            after.files.borrow_mut().insert(path.clone(), Rc::new(f));
        }
        Rc::new(after)
    }

    /// Simulates a crash of the process only (kill -9): every completed write is kept.
    pub fn process_crash(&self) -> Rc<SimDisk> {
        self.crash(|_, _, _| CrashFate::Kept)
    }

    /// Flips one bit of the durable bytes of the file whose path contains `path_contains`.
    pub fn flip_bit(&self, path_contains: &str, position: u64, bit: u8) -> bool {
        let files = self.files.borrow();
        for (path, f) in files.iter() {
            if path.to_string_lossy().contains(path_contains) {
                for v in [&f.data, &f.durable] {
                    if let Some(b) = v.borrow_mut().get_mut(position as usize) {
                        *b ^= 1 << (bit % 8);
                    }
                }
                return true;
            }
        }
        false
    }

    /// The paths of all files.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.files.borrow().keys().cloned().collect()
    }
}

/// The file layer's operations on the simulated disk (`file.rs` delegates its `Sim` arms
/// here).
impl SimDisk {
    pub(super) fn list(&self, dir: &Path) -> Vec<String> {
        self.files
            .borrow()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect()
    }

    pub(super) fn open(self: &Rc<Self>, path: &Path, create: bool) -> Result<IoFile> {
        let mut files = self.files.borrow_mut();
        let file = match files.get(path) {
            Some(f) => f.clone(),
            None if create => {
                let f = Rc::new(SimFile::default());
                files.insert(path.to_owned(), f.clone());
                f
            }
            None => {
                return Err(Error::io(
                    "open",
                    path,
                    None,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ))
            }
        };
        Ok(IoFile::Sim(file, self.clone(), Rc::new(path.to_owned())))
    }

    pub(super) fn exists(&self, path: &Path) -> bool {
        self.files.borrow().contains_key(path)
    }

    pub(super) fn remove(&self, path: &Path) -> Result<()> {
        if self.exists(path) {
            self.change("remove", path)?;
        }
        self.files.borrow_mut().remove(path);
        Ok(())
    }

    pub(super) fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.change("rename", from)?;
        let mut files = self.files.borrow_mut();
        let Some(f) = files.remove(from) else {
            return Err(Error::io(
                "rename",
                from,
                None,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        };
        files.insert(to.to_owned(), f);
        Ok(())
    }

    pub(super) fn remove_dir_all(&self, dir: &Path) {
        self.files.borrow_mut().retain(|p, _| !p.starts_with(dir));
    }

    pub(super) fn sync_dir(&self) {
        self.dir_syncs.set(self.dir_syncs.get() + 1);
    }

    pub(super) async fn write_at(
        &self,
        file: &SimFile,
        path: &Path,
        bytes: &[u8],
        pos: u64,
    ) -> Result<usize> {
        futures_lite::future::yield_now().await;
        self.check(SimOp::Write, path, pos)?;
        self.change("write", path)?;
        file.write(pos, bytes);
        Ok(bytes.len())
    }

    pub(super) fn read_at(
        &self,
        file: &SimFile,
        path: &Path,
        pos: u64,
        len: usize,
    ) -> Result<Bytes> {
        self.check(SimOp::Read, path, pos)?;
        Ok(file.read(pos, len))
    }

    pub(super) async fn fdatasync(&self, file: &SimFile, path: &Path) -> Result<()> {
        futures_lite::future::yield_now().await;
        self.check(SimOp::Sync, path, 0)?;
        self.change("fdatasync", path)?;
        self.syncs.set(self.syncs.get() + 1);
        file.sync();
        Ok(())
    }

    pub(super) fn pre_allocate(&self, file: &SimFile, path: &Path, size: u64) -> Result<()> {
        self.check(SimOp::Allocate, path, size)?;
        file.extend_to(size);
        Ok(())
    }
}
