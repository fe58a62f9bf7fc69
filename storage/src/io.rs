//! The file layer under the engine: glommio DMA files on a real disk ([`Vfs::Real`]), or an
//! in-memory simulated disk ([`SimDisk`]) that injects the faults a real one can produce:
//! writes torn at any byte, unflushed writes lost, bytes flipped, I/O errors. Crash tests run
//! the engine on the simulated disk, "crash" it, and reopen.
//!
//! Everything the engine does to files goes through [`Vfs`] and [`IoFile`], so the same code
//! runs on both.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{DmaBuffer, DmaFile, OpenOptions};

use crate::error::{Error, Result};

/// Alignment of every direct write and read (the disk's physical block).
pub const BLOCK: u64 = 4096;

pub(crate) fn align_down(v: u64) -> u64 {
    v & !(BLOCK - 1)
}

pub(crate) fn align_up(v: u64) -> u64 {
    (v + BLOCK - 1) & !(BLOCK - 1)
}

/// Works around glommio 0.9's IOPOLL misprobe (DataDog/glommio#605): the first `dma_open`
/// of an empty file on a device makes glommio believe the device supports polled I/O, and
/// later reads fail with EOPNOTSUPP. Call this once on every executor thread, before any
/// other DMA file on the same filesystem is opened: it writes (once) and opens a file whose
/// first 4 KiB hold data, so the probe sees a real read.
pub async fn prime_dma_probe(dir: &Path) -> Result<()> {
    let abs = absolute(dir)?;
    let dir: &Path = &abs;
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create dir", dir, None, e))?;
    let path = dir.join(".weir-dma-probe");
    let ok = std::fs::metadata(&path)
        .map(|m| m.len() >= BLOCK)
        .unwrap_or(false);
    if !ok {
        let tmp = dir.join(".weir-dma-probe.tmp");
        std::fs::write(&tmp, vec![0x5a_u8; BLOCK as usize])
            .map_err(|e| Error::io("write", &tmp, None, e))?;
        let f = std::fs::File::open(&tmp).map_err(|e| Error::io("open", &tmp, None, e))?;
        f.sync_all()
            .map_err(|e| Error::io("fsync", &tmp, None, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io("rename", &path, None, e))?;
    }
    let f = DmaFile::open(&path)
        .await
        .map_err(|e| Error::io("dma open", &path, None, e))?;
    let _ = f.close().await;
    Ok(())
}

/// `path` made absolute against the current directory. glommio 0.9 opens files and
/// directories with `openat(-1, path)` (not `AT_FDCWD`), so a relative path fails with
/// EBADF: every path handed to glommio goes through this first.
pub fn absolute(path: &Path) -> Result<std::borrow::Cow<'_, Path>> {
    if path.is_absolute() {
        return Ok(std::borrow::Cow::Borrowed(path));
    }
    std::path::absolute(path)
        .map(std::borrow::Cow::Owned)
        .map_err(|e| Error::io("resolve path", path, None, e))
}

/// Runs a blocking filesystem call (unlink, rmdir of a tree, mkdir, a small buffered write)
/// on the executor's blocking thread pool, so that the core keeps serving its other partitions
/// meanwhile: io_uring on our kernels has no unlinkat for whole trees, and deleting a large
/// segment file can take ext4 tens of milliseconds. Must run on a glommio executor (as every
/// async file operation of the engine does).
pub async fn off_reactor<F, R>(f: F) -> R
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    glommio::executor().spawn_blocking(f).await
}

/// Where files live: the real filesystem, or a simulated disk.
#[derive(Clone, Default)]
pub enum Vfs {
    #[default]
    Real,
    Sim(Rc<SimDisk>),
}

impl Vfs {
    pub async fn create_dir_all(&self, dir: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                let owned = dir.to_owned();
                off_reactor(move || std::fs::create_dir_all(owned))
                    .await
                    .map_err(|e| Error::io("create dir", dir, None, e))
            }
            Vfs::Sim(_) => Ok(()),
        }
    }

    /// Names of the files directly in `dir`.
    pub fn list(&self, dir: &Path) -> Result<Vec<String>> {
        match self {
            Vfs::Real => {
                let mut names = Vec::new();
                let rd = std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, None, e))?;
                for entry in rd {
                    let entry = entry.map_err(|e| Error::io("list", dir, None, e))?;
                    if let Some(name) = entry.file_name().to_str() {
                        names.push(name.to_owned());
                    }
                }
                Ok(names)
            }
            Vfs::Sim(disk) => Ok(disk
                .files
                .borrow()
                .keys()
                .filter(|p| p.parent() == Some(dir))
                .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
                .collect()),
        }
    }

    /// Opens `path` for direct reads and writes, creating it when `create`.
    pub async fn open(&self, path: &Path, create: bool) -> Result<IoFile> {
        match self {
            Vfs::Real => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(create)
                    .dma_open(absolute(path)?)
                    .await
                    .map_err(|e| Error::io("open", path, None, e))?;
                Ok(IoFile::Dma(Rc::new(f), Rc::new(path.to_owned())))
            }
            Vfs::Sim(disk) => {
                let mut files = disk.files.borrow_mut();
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
                Ok(IoFile::Sim(file, disk.clone(), Rc::new(path.to_owned())))
            }
        }
    }

    pub fn exists(&self, path: &Path) -> bool {
        match self {
            Vfs::Real => path.exists(),
            Vfs::Sim(disk) => disk.files.borrow().contains_key(path),
        }
    }

    pub async fn remove(&self, path: &Path) -> Result<()> {
        match self {
            Vfs::Real => match off_reactor({
                let owned = path.to_owned();
                move || std::fs::remove_file(owned)
            })
            .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io("remove", path, None, e)),
            },
            Vfs::Sim(disk) => {
                disk.files.borrow_mut().remove(path);
                Ok(())
            }
        }
    }

    pub async fn remove_dir_all(&self, dir: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                let owned = dir.to_owned();
                off_reactor(move || std::fs::remove_dir_all(owned))
                    .await
                    .map_err(|e| Error::io("remove dir", dir, None, e))
            }
            Vfs::Sim(disk) => {
                disk.files.borrow_mut().retain(|p, _| !p.starts_with(dir));
                Ok(())
            }
        }
    }

    /// Makes creations, renames and removals in `dir` durable.
    pub async fn sync_dir(&self, dir: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                let d = glommio::io::Directory::open(absolute(dir)?)
                    .await
                    .map_err(|e| Error::io("open dir", dir, None, e))?;
                d.sync()
                    .await
                    .map_err(|e| Error::io("fsync dir", dir, None, e))?;
                let _ = d.close().await;
                Ok(())
            }
            Vfs::Sim(disk) => {
                disk.dir_syncs.set(disk.dir_syncs.get() + 1);
                Ok(())
            }
        }
    }

    /// Reads a whole small file (an index or marker). `None` if it does not exist.
    pub async fn read_small(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        if !self.exists(path) {
            return Ok(None);
        }
        let f = self.open(path, false).await?;
        let size = f.file_size().await?;
        let data = f.read_at(0, size as usize).await?;
        f.close().await?;
        Ok(Some(data.to_vec()))
    }

    /// Writes a whole small file durably: written, truncated to its length, fdatasync'ed.
    pub async fn write_small(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let f = self.open(path, true).await?;
        let len = align_up(bytes.len() as u64).max(BLOCK) as usize;
        let mut buf = f.alloc(len);
        buf.as_mut()[..bytes.len()].copy_from_slice(bytes);
        buf.as_mut()[bytes.len()..].fill(0);
        f.write_at(buf, 0).await?;
        f.truncate(bytes.len() as u64).await?;
        f.fdatasync().await?;
        f.close().await
    }
}

/// A buffer suitable for a direct write to an [`IoFile`].
pub enum IoBuf {
    Dma(DmaBuffer),
    Heap(Vec<u8>),
}

impl IoBuf {
    pub fn len(&self) -> usize {
        match self {
            IoBuf::Dma(b) => b.len(),
            IoBuf::Heap(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn trim_to_size(&mut self, size: usize) {
        match self {
            IoBuf::Dma(b) => b.trim_to_size(size),
            IoBuf::Heap(v) => v.truncate(size),
        }
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        match self {
            IoBuf::Dma(b) => b.as_bytes(),
            IoBuf::Heap(v) => v,
        }
    }
}

impl AsMut<[u8]> for IoBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            IoBuf::Dma(b) => b.as_bytes_mut(),
            IoBuf::Heap(v) => v,
        }
    }
}

/// An open file: a glommio DMA file, or a simulated one.
#[derive(Clone)]
pub enum IoFile {
    Dma(Rc<DmaFile>, Rc<PathBuf>),
    Sim(Rc<SimFile>, Rc<SimDisk>, Rc<PathBuf>),
}

impl IoFile {
    pub fn path(&self) -> &Path {
        match self {
            IoFile::Dma(_, p) | IoFile::Sim(_, _, p) => p,
        }
    }

    /// An aligned buffer of `size` bytes (a multiple of [`BLOCK`]).
    pub fn alloc(&self, size: usize) -> IoBuf {
        match self {
            IoFile::Dma(f, _) => IoBuf::Dma(f.alloc_dma_buffer(size)),
            IoFile::Sim(..) => IoBuf::Heap(vec![0; size]),
        }
    }

    /// Writes the whole (aligned) buffer at the aligned position `pos`.
    pub async fn write_at(&self, buf: IoBuf, pos: u64) -> Result<usize> {
        debug_assert_eq!(pos % BLOCK, 0, "unaligned write at {pos}");
        debug_assert_eq!(
            buf.len() as u64 % BLOCK,
            0,
            "unaligned write length {}",
            buf.len()
        );
        match (self, buf) {
            (IoFile::Dma(f, p), IoBuf::Dma(b)) => {
                let want = b.len();
                let n = f
                    .write_at(b, pos)
                    .await
                    .map_err(|e| Error::io("write", &**p, Some(pos), e))?;
                if n != want {
                    return Err(Error::io(
                        "write",
                        &**p,
                        Some(pos),
                        std::io::Error::new(
                            std::io::ErrorKind::WriteZero,
                            format!("short write: {n} of {want}"),
                        ),
                    ));
                }
                Ok(n)
            }
            (IoFile::Sim(f, disk, p), b) => {
                futures_lite::future::yield_now().await;
                disk.check(SimOp::Write, p, pos)?;
                f.write(pos, b.as_ref());
                Ok(b.len())
            }
            (IoFile::Dma(_, p), IoBuf::Heap(_)) => Err(Error::io(
                "write",
                &**p,
                Some(pos),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "heap buffer for a DMA file",
                ),
            )),
        }
    }

    /// Reads up to `len` bytes at `pos` (any alignment); fewer at end of file.
    pub async fn read_at(&self, pos: u64, len: usize) -> Result<Bytes> {
        match self {
            IoFile::Dma(f, p) => {
                let r = f
                    .read_at(pos, len)
                    .await
                    .map_err(|e| Error::io("read", &**p, Some(pos), e))?;
                Ok(Bytes::copy_from_slice(&r[..r.len().min(len)]))
            }
            IoFile::Sim(f, disk, p) => {
                disk.check(SimOp::Read, p, pos)?;
                Ok(f.read(pos, len))
            }
        }
    }

    pub async fn fdatasync(&self) -> Result<()> {
        match self {
            IoFile::Dma(f, p) => f
                .fdatasync()
                .await
                .map_err(|e| Error::io("fdatasync", &**p, None, e)),
            IoFile::Sim(f, disk, p) => {
                futures_lite::future::yield_now().await;
                disk.check(SimOp::Sync, p, 0)?;
                disk.syncs.set(disk.syncs.get() + 1);
                f.sync();
                Ok(())
            }
        }
    }

    /// Reserves space up to `size` bytes (the file's size becomes at least `size`).
    pub async fn pre_allocate(&self, size: u64) -> Result<()> {
        match self {
            IoFile::Dma(f, p) => f
                .pre_allocate(size, false)
                .await
                .map_err(|e| Error::io("fallocate", &**p, Some(size), e)),
            IoFile::Sim(f, disk, p) => {
                disk.check(SimOp::Allocate, p, size)?;
                f.extend_to(size);
                Ok(())
            }
        }
    }

    pub async fn truncate(&self, size: u64) -> Result<()> {
        match self {
            IoFile::Dma(f, p) => f
                .truncate(size)
                .await
                .map_err(|e| Error::io("truncate", &**p, Some(size), e)),
            IoFile::Sim(f, _, _) => {
                f.truncate(size);
                Ok(())
            }
        }
    }

    pub async fn file_size(&self) -> Result<u64> {
        match self {
            IoFile::Dma(f, p) => f
                .file_size()
                .await
                .map_err(|e| Error::io("stat", &**p, None, e)),
            IoFile::Sim(f, _, _) => Ok(f.data.borrow().len() as u64),
        }
    }

    pub async fn close(self) -> Result<()> {
        match self {
            IoFile::Dma(f, p) => match Rc::try_unwrap(f) {
                Ok(f) => f
                    .close()
                    .await
                    .map_err(|e| Error::io("close", &*p, None, e)),
                Err(_) => Ok(()), // another task still holds it; it closes on drop
            },
            IoFile::Sim(..) => Ok(()),
        }
    }
}

/// Which operation a simulated fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOp {
    Read,
    Write,
    Sync,
    /// Preallocation (fallocate): where a full disk shows first.
    Allocate,
}

/// An injected I/O error: every `op` on a file whose path contains `path_contains` fails
/// with `errno`.
#[derive(Debug, Clone)]
pub struct SimFault {
    pub op: SimOp,
    pub path_contains: String,
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

    fn truncate(&self, size: u64) {
        for v in [&self.data, &self.durable] {
            v.borrow_mut().resize(size as usize, 0);
        }
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
    pub fn new() -> Rc<SimDisk> {
        Rc::new(SimDisk::default())
    }

    pub fn vfs(self: &Rc<Self>) -> Vfs {
        Vfs::Sim(self.clone())
    }

    /// Adds an injected fault.
    pub fn inject(&self, fault: SimFault) {
        self.faults.borrow_mut().push(fault);
    }

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
