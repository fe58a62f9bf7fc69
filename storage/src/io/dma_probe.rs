//! A workaround for glommio 0.9's IOPOLL misprobe (DataDog/glommio#605).
//!
//! glommio decides, once per thread and device (the `st_dev` of the file), whether the device
//! takes polled I/O: at the first `dma_open` of a file on that device it reads the file's first
//! block on its polled ring. When that file is empty the read returns at once without
//! reaching the device, glommio concludes that polling works, and every later direct read on
//! the device fails with EOPNOTSUPP. A new log's first direct-I/O open is its empty first
//! segment, so the engine primes the probe itself: before the real file layer's first DMA open
//! in a directory on a device not yet primed by this thread ([`prime_once`], called by
//! `Vfs::open`), it DMA-opens a file holding a block of real data in that same directory,
//! then removes it. [`prime_dma_probe`] does the same with a file it keeps; an embedder may
//! still call it at start-up, but need not.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use glommio::io::DmaFile;

use super::{absolute, off_reactor, BLOCK};
use crate::error::{Error, Result};

thread_local! {
    /// The devices (`st_dev`) whose probe this thread has primed.
    static PRIMED: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
    /// Numbers the probe files of this thread, so concurrent primes never share one.
    static NEXT_PROBE: Cell<u64> = const { Cell::new(0) };
}

fn device_of(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir).ok().map(|m| m.dev())
}

fn is_primed(dev: u64) -> bool {
    PRIMED.with(|p| p.borrow().contains(&dev))
}

fn mark_primed(dev: u64) {
    PRIMED.with(|p| p.borrow_mut().insert(dev));
}

/// Makes sure glommio's IOPOLL probe on this thread sees a real read on `dir`'s filesystem: a
/// file whose first 4 KiB hold data is written (once), and DMA-opened. The engine does this
/// itself, once per thread and device, before it first opens a direct-I/O file there (see the
/// module documentation), so calling this is optional; it remains for embedders that open
/// glommio DMA files of their own on the same device before any log, and for start-up code
/// that wants a bad data directory reported early. The file, `.weir-dma-probe`, is kept in
/// `dir` for the next start.
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
    if let Some(dev) = device_of(dir) {
        mark_primed(dev);
    }
    Ok(())
}

/// Primes the probe for the device holding `dir` (an absolute path) unless this thread
/// already did: writes a probe file of one block in `dir` (on the blocking pool), DMA-opens
/// it, and removes it. Called before every real DMA open; after the first on a device it
/// costs one `stat`. A failure (a full disk, say) is logged and the open goes on: it is
/// retried at the next open, and the operation itself reports what is wrong.
pub(crate) async fn prime_once(dir: &Path) {
    let Some(dev) = device_of(dir) else {
        return; // the open itself will say why the directory is unusable
    };
    if is_primed(dev) {
        return;
    }
    let n = NEXT_PROBE.with(|c| c.replace(c.get() + 1));
    let name = format!(
        ".weir-dma-probe.{}.{}.{n}.tmp",
        std::process::id(),
        glommio::executor().id()
    );
    let path = dir.join(name);
    match probe(&path).await {
        Ok(()) => {
            mark_primed(dev);
            tracing::debug!(dir = %dir.display(), dev, "primed glommio's IOPOLL probe");
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "could not prime glommio's IOPOLL probe; direct reads on this device may fail with EOPNOTSUPP");
        }
    }
    let owned = path.clone();
    let _ = off_reactor(move || std::fs::remove_file(owned)).await;
}

/// Writes one block of data to `path` durably and DMA-opens it.
async fn probe(path: &Path) -> Result<()> {
    let owned = path.to_owned();
    off_reactor(move || {
        std::fs::write(&owned, vec![0x5a_u8; BLOCK as usize])?;
        std::fs::File::open(&owned)?.sync_all()
    })
    .await
    .map_err(|e| Error::io("write probe file", path, None, e))?;
    let f = DmaFile::open(path)
        .await
        .map_err(|e| Error::io("dma open", path, None, e))?;
    let _ = f.close().await;
    Ok(())
}
