//! [`Vfs`] and [`IoFile`]: the file operations the engine uses, on glommio DMA files on the
//! real filesystem, or (with the `sim` feature) on the simulated disk of `sim.rs`, to which
//! the `Sim` arms delegate.

use std::cell::RefCell;
use std::path::Path;
#[cfg(feature = "sim")]
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::io::DmaBuffer;

use super::open_files::{self, Handle};
#[cfg(feature = "sim")]
use super::sim::{SimDisk, SimFile};
use super::{absolute, align_up, off_reactor, BLOCK};
use crate::error::{Error, Result};

/// Where files live: the real filesystem, or a simulated disk.
#[derive(Clone, Default)]
pub enum Vfs {
    /// The real filesystem, through glommio's DMA files (O_DIRECT, io_uring).
    #[default]
    Real,
    /// A simulated disk (crash tests; the `sim` feature).
    #[cfg(feature = "sim")]
    Sim(Rc<SimDisk>),
}

impl Vfs {
    /// Creates `dir` and its parents (on the blocking pool).
    pub async fn create_dir_all(&self, dir: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                let owned = dir.to_owned();
                off_reactor(move || std::fs::create_dir_all(owned))
                    .await
                    .map_err(|e| Error::io("create dir", dir, None, e))
            }
            #[cfg(feature = "sim")]
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
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => Ok(disk.list(dir)),
        }
    }

    /// Opens `path` for direct reads and writes, creating it when `create`. On the real
    /// filesystem, the first open on a device on this thread primes glommio's IOPOLL probe
    /// first (`dma_probe.rs`), and the file is one of the thread's LRU of open files
    /// (`open_files.rs`): closed when the limit needs it, opened again by path when used.
    pub async fn open(&self, path: &Path, create: bool) -> Result<IoFile> {
        match self {
            Vfs::Real => Ok(IoFile::Dma(Handle::open(path, create).await?)),
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => disk.open(path, create),
        }
    }

    /// Does `path` exist?
    pub fn exists(&self, path: &Path) -> bool {
        match self {
            Vfs::Real => path.exists(),
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => disk.exists(path),
        }
    }

    /// Removes the file `path` (on the blocking pool); a missing file is not an error.
    pub async fn remove(&self, path: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                open_files::forget(path, false)?;
                let owned = path.to_owned();
                match off_reactor(move || std::fs::remove_file(owned)).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(Error::io("remove", path, None, e)),
                }
            }
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => disk.remove(path),
        }
    }

    /// Renames `from` to `to` (atomically replacing `to`); durable once the directory is
    /// synced (`sync_dir`).
    pub async fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                // Handles of `to` keep the replaced file or none; `from`'s follow their file.
                open_files::forget(to, false)?;
                let held = open_files::hold(from).await?;
                let (f, t) = (from.to_owned(), to.to_owned());
                let r = off_reactor(move || std::fs::rename(f, t)).await;
                open_files::moved(held, r.is_ok().then_some(to))?;
                r.map_err(|e| Error::io("rename", from, None, e))
            }
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => disk.rename(from, to),
        }
    }

    /// Removes `dir` and everything in it (on the blocking pool).
    pub async fn remove_dir_all(&self, dir: &Path) -> Result<()> {
        match self {
            Vfs::Real => {
                open_files::forget(dir, true)?;
                let owned = dir.to_owned();
                off_reactor(move || std::fs::remove_dir_all(owned))
                    .await
                    .map_err(|e| Error::io("remove dir", dir, None, e))
            }
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => {
                disk.remove_dir_all(dir);
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
            #[cfg(feature = "sim")]
            Vfs::Sim(disk) => {
                disk.sync_dir();
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
    /// An aligned glommio DMA buffer (for a real file).
    Dma(DmaBuffer),
    /// Plain memory (for a simulated file).
    #[cfg(feature = "sim")]
    Heap(Vec<u8>),
}

impl IoBuf {
    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            IoBuf::Dma(b) => b.len(),
            #[cfg(feature = "sim")]
            IoBuf::Heap(v) => v.len(),
        }
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        match self {
            IoBuf::Dma(b) => b.as_bytes(),
            #[cfg(feature = "sim")]
            IoBuf::Heap(v) => v,
        }
    }
}

impl AsMut<[u8]> for IoBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            IoBuf::Dma(b) => b.as_bytes_mut(),
            #[cfg(feature = "sim")]
            IoBuf::Heap(v) => v,
        }
    }
}

/// An open file: a glommio DMA file (through the thread's LRU of open files), or a simulated
/// one. Cloning shares the file.
#[derive(Clone)]
pub enum IoFile {
    /// A glommio DMA file, opened again by its path when the LRU closed it.
    Dma(Rc<Handle>),
    /// A file of a simulated disk, the disk, and the file's path.
    #[cfg(feature = "sim")]
    Sim(Rc<SimFile>, Rc<SimDisk>, Rc<PathBuf>),
}

impl IoFile {
    /// An aligned buffer of `size` bytes (a multiple of [`BLOCK`]).
    /// Its contents are unspecified: callers write every byte they hand to [`IoFile::write_at`].
    pub fn alloc(&self, size: usize) -> IoBuf {
        match self {
            IoFile::Dma(_) if spare::reusable(size) => IoBuf::Dma(
                // Not from the executor's registered memory: it is kept long.
                spare::take(size).unwrap_or_else(|| glommio::allocate_dma_buffer_global(size)),
            ),
            IoFile::Dma(_) => IoBuf::Dma(glommio::allocate_dma_buffer(size)),
            #[cfg(feature = "sim")]
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
            (IoFile::Dma(h), IoBuf::Dma(b)) => {
                let f = h.file("write").await?;
                let want = b.len();
                // Shared with the write, so that the buffer comes back for the next one.
                let b = Rc::new(b);
                let written = f.write_rc_at(b.clone(), pos).await;
                if let Ok(b) = Rc::try_unwrap(b) {
                    spare::give(b);
                }
                let n = written.map_err(|e| Error::io("write", &**h.path(), Some(pos), e))?;
                if n != want {
                    return Err(Error::io(
                        "write",
                        &**h.path(),
                        Some(pos),
                        std::io::Error::new(
                            std::io::ErrorKind::WriteZero,
                            format!("short write: {n} of {want}"),
                        ),
                    ));
                }
                Ok(n)
            }
            #[cfg(feature = "sim")]
            (IoFile::Sim(f, disk, p), b) => disk.write_at(f, p, b.as_ref(), pos).await,
            #[cfg(feature = "sim")]
            (IoFile::Dma(h), IoBuf::Heap(_)) => Err(Error::io(
                "write",
                &**h.path(),
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
            IoFile::Dma(h) => {
                let f = h.file("read").await?;
                let r = f
                    .read_at(pos, len)
                    .await
                    .map_err(|e| Error::io("read", &**h.path(), Some(pos), e))?;
                Ok(Bytes::copy_from_slice(&r[..r.len().min(len)]))
            }
            #[cfg(feature = "sim")]
            IoFile::Sim(f, disk, p) => disk.read_at(f, p, pos, len),
        }
    }

    /// Makes the data written so far durable.
    pub async fn fdatasync(&self) -> Result<()> {
        match self {
            IoFile::Dma(h) => h
                .file("fdatasync")
                .await?
                .fdatasync()
                .await
                .map_err(|e| Error::io("fdatasync", &**h.path(), None, e)),
            #[cfg(feature = "sim")]
            IoFile::Sim(f, disk, p) => disk.fdatasync(f, p).await,
        }
    }

    /// Reserves space up to `size` bytes (the file's size becomes at least `size`).
    pub async fn pre_allocate(&self, size: u64) -> Result<()> {
        match self {
            IoFile::Dma(h) => h
                .file("fallocate")
                .await?
                .pre_allocate(size, false)
                .await
                .map_err(|e| Error::io("fallocate", &**h.path(), Some(size), e)),
            #[cfg(feature = "sim")]
            IoFile::Sim(f, disk, p) => disk.pre_allocate(f, p, size),
        }
    }

    /// Sets the file's size to `size` bytes.
    pub async fn truncate(&self, size: u64) -> Result<()> {
        match self {
            IoFile::Dma(h) => h
                .file("truncate")
                .await?
                .truncate(size)
                .await
                .map_err(|e| Error::io("truncate", &**h.path(), Some(size), e)),
            #[cfg(feature = "sim")]
            IoFile::Sim(f, _, _) => {
                f.truncate(size);
                Ok(())
            }
        }
    }

    /// The file's size in bytes.
    pub async fn file_size(&self) -> Result<u64> {
        match self {
            IoFile::Dma(h) => h
                .file("stat")
                .await?
                .file_size()
                .await
                .map_err(|e| Error::io("stat", &**h.path(), None, e)),
            #[cfg(feature = "sim")]
            IoFile::Sim(f, _, _) => Ok(f.len()),
        }
    }

    /// Closes the file, unless another clone still holds it (then it closes on drop).
    pub async fn close(self) -> Result<()> {
        match self {
            IoFile::Dma(h) => h.close().await,
            #[cfg(feature = "sim")]
            IoFile::Sim(..) => Ok(()),
        }
    }
}

/// How long a spare write buffer is kept unused.
pub const SPARE_IDLE: Duration = Duration::from_secs(10);

/// Large write buffers this thread has written, kept for the next write of the same size.
///
/// An appender's chunk (`write_chunk_bytes`, 1 MiB by default) is written whole and a new one
/// is allocated for the data that follows. Allocations that large come from `mmap` and go back
/// to the kernel when freed, so every new chunk cost its 256 pages in page faults and zeroing.
/// Only the chunk sizes of this thread's appenders (`reuse_size`) are kept, so that partial
/// writes of other sizes do not push chunks out; and such buffers are never taken from the
/// executor's registered memory, which is for short-lived buffers. Spares unused for
/// [`SPARE_IDLE`] are dropped by [`expire_spare_write_buffers`].
mod spare {
    use super::*;

    /// Smaller buffers come from the allocator's free lists already.
    const MIN: usize = 128 << 10;
    /// At most this many bytes of spares per thread.
    const MAX_BYTES: usize = 4 << 20;
    /// At most this many distinct chunk sizes per thread.
    const MAX_SIZES: usize = 4;

    thread_local! {
        static SPARES: RefCell<Vec<(DmaBuffer, Instant)>> = const { RefCell::new(Vec::new()) };
        static SIZES: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    }

    /// Buffers of `size` bytes (an appender's chunk size) are kept after their writes for the
    /// next one on this thread (sizes from 128 KiB to 4 MiB; a few distinct sizes per thread).
    pub(crate) fn reuse_size(size: usize) {
        if !(MIN..=MAX_BYTES).contains(&size) {
            return;
        }
        SIZES.with(|s| {
            let mut s = s.borrow_mut();
            if !s.contains(&size) && s.len() < MAX_SIZES {
                s.push(size);
            }
        });
    }

    pub(super) fn reusable(size: usize) -> bool {
        size >= MIN && SIZES.with(|s| s.borrow().contains(&size))
    }

    /// A spare of exactly `size` bytes, the most recently written first.
    pub(super) fn take(size: usize) -> Option<DmaBuffer> {
        SPARES.with(|s| {
            let mut s = s.borrow_mut();
            let i = s.iter().rposition(|(b, _)| b.len() == size)?;
            Some(s.remove(i).0)
        })
    }

    /// Keeps a written buffer of a chunk size, dropping the oldest spares over the bound.
    pub(super) fn give(b: DmaBuffer) {
        if !reusable(b.len()) {
            return;
        }
        SPARES.with(|s| {
            let mut s = s.borrow_mut();
            s.push((b, Instant::now()));
            while s.iter().map(|(b, _)| b.len()).sum::<usize>() > MAX_BYTES {
                s.remove(0);
            }
        });
    }

    /// Drops this thread's spare write buffers that no write has used for [`SPARE_IDLE`]
    /// before `now` (a log's retention check calls it, so an idle core holds none).
    pub fn expire_spare_write_buffers(now: Instant) {
        SPARES.with(|s| {
            s.borrow_mut()
                .retain(|(_, at)| now.duration_since(*at) < SPARE_IDLE)
        });
    }

    /// Bytes of spare write buffers this thread holds.
    pub fn spare_write_buffer_bytes() -> usize {
        SPARES.with(|s| s.borrow().iter().map(|(b, _)| b.len()).sum())
    }
}

pub(crate) use spare::reuse_size;
pub use spare::{expire_spare_write_buffers, spare_write_buffer_bytes};
