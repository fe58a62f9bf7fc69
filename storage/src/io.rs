//! The file layer under the engine: glommio DMA files on a real disk, or an in-memory
//! simulated disk that injects faults (torn writes, lost unflushed writes, flipped bytes,
//! I/O errors) for crash tests.

use std::path::Path;

use crate::error::{Error, Result};

/// Works around glommio 0.9's IOPOLL misprobe (DataDog/glommio#605): the first `dma_open`
/// of an empty file on a device makes glommio believe the device supports polled I/O, and
/// later reads fail with EOPNOTSUPP. Call this once on every executor thread, before any
/// other DMA file on the same filesystem is opened: it writes (once) and opens a file whose
/// first 4 KiB hold data, so the probe sees a real read.
pub async fn prime_dma_probe(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create dir", dir, None, e))?;
    let path = dir.join(".weir-dma-probe");
    let ok = std::fs::metadata(&path).map(|m| m.len() >= 4096).unwrap_or(false);
    if !ok {
        std::fs::write(&path, vec![0x5a_u8; 4096]).map_err(|e| Error::io("write", &path, None, e))?;
        let f = std::fs::File::open(&path).map_err(|e| Error::io("open", &path, None, e))?;
        f.sync_all().map_err(|e| Error::io("fsync", &path, None, e))?;
    }
    let f = glommio::io::DmaFile::open(&path)
        .await
        .map_err(|e| Error::io("dma open", &path, None, e))?;
    let _ = f.close().await;
    Ok(())
}
