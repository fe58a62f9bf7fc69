//! An idle log holds no write buffer.
//!
//! What broke: every log allocated its appender chunk (`write_chunk_bytes`, 1 MiB by
//! default) on open when its last block was partial, and kept it forever once it had been
//! appended to: 10,000 partitions that each received one message held 10,000 chunks. Now
//! the chunk is allocated by the first append and released at a retention check when
//! nothing was appended since the previous one; data written before and after stays intact.

mod common;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{Log, LogConfig};

fn batch(v: u8) -> bytes::Bytes {
    RecordBatchBuilder::new(1_000)
        .record(None, Some(&[v; 300]), &[])
        .build()
}

async fn values(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < log.watermarks().high_watermark {
        let r = log.read(offset, 1 << 20).await.expect("read");
        for (h, b) in r.batches() {
            for rec in weir_storage::batch::decode_records(b).expect("decode") {
                out.push(rec.value.as_ref().expect("value")[0]);
            }
            offset = h.base_offset.get() as u64 + h.last_offset_delta.get() as u64 + 1;
        }
    }
    out
}

#[test]
fn an_idle_log_releases_its_write_buffer_and_appends_continue_after() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            write_chunk_bytes: 1 << 20,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        assert!(
            log.write_buffer_bytes() < 4096,
            "an opened log holds no chunk"
        );
        log.append(batch(1)).await.expect("append");
        assert!(log.write_buffer_bytes() >= 1 << 20);
        // First check after the append: not idle yet. Second: idle since the first.
        log.enforce_retention(0).await.expect("check");
        assert!(log.write_buffer_bytes() >= 1 << 20);
        log.enforce_retention(0).await.expect("check");
        assert!(
            log.write_buffer_bytes() < 4096,
            "idle log still holds {} bytes of write buffer",
            log.write_buffer_bytes()
        );
        // Appends after the release continue the partial last block correctly.
        for v in 2..6 {
            log.append(batch(v)).await.expect("append");
        }
        assert_eq!(values(&log).await, vec![1, 2, 3, 4, 5]);
        log.close().await.expect("close");
        // Reopened (the last block is partial): no chunk until the next append.
        let log = Log::open(&path, cfg.clone()).await.expect("reopen");
        assert!(
            log.write_buffer_bytes() < 4096,
            "only the partial last block"
        );
        log.append(batch(6)).await.expect("append");
        assert_eq!(values(&log).await, vec![1, 2, 3, 4, 5, 6]);
        drop(log);
        let log = Log::open(&path, cfg).await.expect("reopen unclean");
        assert_eq!(values(&log).await, vec![1, 2, 3, 4, 5, 6]);
        log.close().await.expect("close");
    });
}

/// A written chunk's buffer is kept for the next chunk (its pages stay mapped), whatever
/// bytes it held before are never written or served, and an idle thread drops its spares.
///
/// What it saves: every full chunk was a fresh 1 MiB allocation, i.e. `mmap` and 256 page
/// faults, and `munmap` after its write (most of the brokers' page faults at RF 3).
#[test]
fn written_chunks_are_reused_and_stale_bytes_never_reach_the_disk() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            write_chunk_bytes: 256 << 10,
            segment_bytes: 8 << 20,
            preallocate_bytes: 8 << 20,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        assert_eq!(weir_storage::io::spare_write_buffer_bytes(), 0);
        // ~2.6 chunks: after the first chunk's write its buffer is a spare; the next full
        // chunk takes it (full of the previous chunk's bytes) and gives it back.
        let n = 2_000u32;
        for i in 0..n {
            log.append(batch((i % 251) as u8)).await.expect("append");
        }
        let spares = weir_storage::io::spare_write_buffer_bytes();
        assert!(
            (256 << 10..=4 << 20).contains(&spares),
            "{spares} bytes of spare write buffers"
        );
        let want: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        assert_eq!(values(&log).await, want);
        log.close().await.expect("close");
        // What is on disk is what was appended (a reused chunk's old bytes are all overwritten
        // before it is written; partial writes pad with zeros).
        let log = Log::open(&path, cfg).await.expect("reopen");
        assert_eq!(values(&log).await, want);
        assert_eq!(log.watermarks().high_watermark, n as u64);
        log.close().await.expect("close");
        // Unused for the idle time, they are dropped.
        let later = std::time::Instant::now() + weir_storage::io::SPARE_IDLE;
        weir_storage::io::expire_spare_write_buffers(later);
        assert_eq!(weir_storage::io::spare_write_buffer_bytes(), 0);
    });
}
