//! Shared test helpers: run a future on a glommio executor with the IOPOLL probe primed.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};

use weir_storage::LogConfig;

/// Runs `f` on a fresh glommio executor thread, after priming the DMA probe for `dir`.
pub fn run<F, Fut>(dir: &Path, f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let dir = dir.to_owned();
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            weir_storage::io::prime_dma_probe(&dir)
                .await
                .expect("prime dma probe");
            f().await
        })
        .expect("spawn executor")
        .join()
        .expect("executor thread");
}

/// A temporary directory on the real (ext4) filesystem, not tmpfs.
pub fn tempdir() -> tempfile::TempDir {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).expect("target tmpdir");
    tempfile::tempdir_in(base).expect("tempdir")
}

/// A small configuration so that tests roll segments and index often.
pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        index_interval_bytes: 1024,
        write_chunk_bytes: 16 << 10,
        writes_in_flight: 4,
        preallocate_bytes: 64 << 10,
        read_chunk_bytes: 8 << 10,
        read_ahead_bytes: 32 << 10,
        segment_ms: None,
        retention_ms: None,
        ..LogConfig::default()
    }
}
