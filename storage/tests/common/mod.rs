//! Shared test helpers: run a future on a fresh glommio executor thread, temporary
//! directories on the real disk, a small configuration.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};

use weir_storage::LogConfig;

/// Runs `f` on a fresh glommio executor thread. `dir` is where the test's files live; the
/// engine primes glommio's IOPOLL probe there itself (`io/dma_probe.rs`), so nothing is done
/// with it first.
pub fn run<F, Fut>(dir: &Path, f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let _ = dir;
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move { f().await })
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
