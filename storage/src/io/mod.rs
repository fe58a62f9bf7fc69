//! The file layer under the engine, and the filesystem helpers an embedder may want.
//!
//! Everything the engine does to files goes through a `Vfs` (where files live) and the
//! `IoFile`s it opens (`file.rs`): glommio DMA files (O_DIRECT through io_uring) on a real
//! disk, or — with the `sim` cargo feature — an in-memory simulated disk (`SimDisk`,
//! `sim.rs`) that injects the faults a real disk can produce. The same engine code runs on
//! both; the crash tests run it on the simulated disk, "crash" it, and reopen.
//!
//! Public without features:
//! - [`prime_dma_probe`]: the glommio IOPOLL-probe workaround (`dma_probe.rs`). Optional: the
//!   engine primes the probe itself before its first direct-I/O open on a device.
//! - [`absolute`]: paths handed to glommio must be absolute.
//! - [`off_reactor`]: runs a blocking filesystem call on glommio's blocking thread pool.
//! - [`BLOCK`]: the alignment of every direct read and write.
//! - [`set_open_file_limit`], [`open_file_stats`]: the most segment files a thread keeps open
//!   (an LRU; `open_files.rs`), and how many it has open.
//! - [`spare_write_buffer_bytes`], [`expire_spare_write_buffers`]: the large write buffers
//!   (appender chunks) a thread keeps after their writes, for the next one (`file.rs`).
//!
//! With the `sim` feature also `Vfs`, `IoFile`, `IoBuf` (so a test can write files on the
//! simulated disk and open a log on it with `Log::open_in`), and the simulated disk itself:
//! `SimDisk`, `SimFile`, `SimFault`, `SimOp`, `CrashFate`, `SECTOR`.

mod dma_probe;
mod file;
mod open_files;
#[cfg(feature = "sim")]
mod sim;

use std::path::Path;

use crate::error::{Error, Result};

pub use dma_probe::prime_dma_probe;
pub(crate) use file::reuse_size;
pub use file::{expire_spare_write_buffers, spare_write_buffer_bytes, SPARE_IDLE};
#[cfg(not(feature = "sim"))]
pub(crate) use file::{IoBuf, IoFile, Vfs};
#[cfg(feature = "sim")]
pub use file::{IoBuf, IoFile, Vfs};
pub use open_files::{set_open_file_limit, stats as open_file_stats, OpenFileStats};
#[cfg(feature = "sim")]
pub use sim::{CrashFate, SimDisk, SimFault, SimFile, SimOp, SECTOR};

/// Alignment of every direct write and read (the disk's physical block).
pub const BLOCK: u64 = 4096;

pub(crate) fn align_down(v: u64) -> u64 {
    v & !(BLOCK - 1)
}

pub(crate) fn align_up(v: u64) -> u64 {
    (v + BLOCK - 1) & !(BLOCK - 1)
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
