//! Shared test helpers: run a future on a fresh glommio executor thread, temporary
//! directories on the real disk, a small configuration.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::io::SimDisk;
use weir_storage::{BatchCache, Log, LogConfig};

/// Runs `f` on a fresh glommio executor thread. `dir` is where the test's files live; the
/// engine primes glommio's IOPOLL probe there itself (`io/dma_probe.rs`), so nothing is done
/// with it first. `WEIR_TEST_OPEN_FILE_LIMIT=n` runs every test with at most `n` files open
/// per thread (`io::set_open_file_limit`): each file closed and reopened all the time.
pub fn run<F, Fut>(dir: &Path, f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let _ = dir;
    let limit = std::env::var("WEIR_TEST_OPEN_FILE_LIMIT").ok().map(|v| {
        v.parse::<usize>()
            .expect("WEIR_TEST_OPEN_FILE_LIMIT: a number")
    });
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            if let Some(n) = limit {
                weir_storage::io::set_open_file_limit(n);
            }
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

/// A replicated log's configuration in tests: committed reads, 16 KiB segments, an index
/// entry per 512 bytes.
pub fn replicated_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 << 10,
        index_interval_bytes: 512,
        committed_reads: true,
        ..small_config()
    }
}

/// A batch of `n` records, record `i` keyed `[i]` with a value of `value_bytes` bytes of `tag`
/// ending in `i`: which batch a record came from can be told from its value.
pub fn tagged_batch(tag: u8, n: usize, value_bytes: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000 + i64::from(tag));
    for i in 0..n {
        let mut v = vec![tag; value_bytes.max(1)];
        let last = v.len() - 1;
        v[last] = i as u8;
        b = b.record(Some(&[i as u8]), Some(&v), &[]);
    }
    b.build()
}

/// Opens the log in `dir` on the simulated disk, with a private 1 MiB cache.
pub async fn open_sim(disk: &Rc<SimDisk>, dir: &Path, cfg: LogConfig) -> Log {
    Log::open_in(disk.vfs(), dir, cfg, BatchCache::new(1 << 20))
        .await
        .expect("open")
}

/// The replicated settings without committed reads: a reopened log shows everything it holds.
pub fn inspect_config() -> LogConfig {
    LogConfig {
        committed_reads: false,
        ..replicated_config()
    }
}

/// Every batch of the log below its high watermark, CRC-checked: (base offset, bytes). A
/// gap below the high watermark fails the test.
pub async fn read_all(log: &Log) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let wm = log.watermarks();
    let mut off = wm.log_start_offset;
    while off < wm.high_watermark {
        let r = log.read(off, 64 << 10).await.expect("read");
        assert!(
            !r.is_empty(),
            "no data at {off} below {}",
            wm.high_watermark
        );
        for (h, bytes) in r.batches() {
            weir_storage::batch::validate(bytes).expect("a served batch passes its CRC");
            out.push((h.base_offset.get() as u64, bytes.to_vec()));
            off = h.last_offset() as u64 + 1;
        }
    }
    out
}
