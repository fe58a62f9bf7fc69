//! The producer-state snapshot (`producer_state`, storage/DESIGN.md) on arbitrary bytes: a
//! log with idempotent and transactional producers (an open transaction, an aborted one) is
//! written on a simulated disk and closed, then its snapshot file is replaced by the input
//! and the log reopened — after a clean close or, with mode bit 1, after a crash (the
//! clean-shutdown marker removed, so the stale-snapshot paths run). Opening must not panic;
//! the last stable offset must lie between the log start and the high watermark; the aborted
//! transactions listed must be well-formed; the log must accept an append and a transaction
//! marker and reopen cleanly.
//!
//! Input: a mode byte, then the snapshot bytes. Mode bit 0: repair the magic (`WEIRPST2`)
//! and the trailing CRC-32C, so the fuzzer gets past the checksum into the parser.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weir_storage::batch::{self, RecordBatchBuilder, TRANSACTIONAL_FLAG};
use weir_storage::io::SimDisk;
use weir_storage::{BatchCache, Log, LogConfig};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 << 10,
        index_interval_bytes: 256,
        write_chunk_bytes: 8 << 10,
        writes_in_flight: 2,
        preallocate_bytes: 16 << 10,
        read_chunk_bytes: 4 << 10,
        read_ahead_bytes: 8 << 10,
        segment_ms: None,
        retention_ms: None,
        ..LogConfig::default()
    }
}

fn producer_batch(pid: i64, seq: i32, txn: bool) -> bytes::Bytes {
    let mut b = RecordBatchBuilder::new(1).producer(pid, 0, seq);
    if txn {
        b = b.attributes(TRANSACTIONAL_FLAG);
    }
    b.record(Some(b"k"), Some(&[7u8; 300]), &[]).build()
}

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let mut snapshot = rest.to_vec();
    if mode & 1 != 0 && snapshot.len() >= 12 {
        snapshot[..8].copy_from_slice(b"WEIRPST2");
        let n = snapshot.len() - 4;
        let crc = crc32c::crc32c(&snapshot[..n]);
        snapshot[n..].copy_from_slice(&crc.to_be_bytes());
    }
    let crash = mode & 2 != 0;
    weir_fuzz::run(async move {
        let disk = SimDisk::new();
        let vfs = disk.vfs();
        let dir = Path::new("/fuzz/p0");
        let cfg = config();
        let log = Log::open_in(vfs.clone(), dir, cfg.clone(), BatchCache::new(1 << 20))
            .await
            .expect("open");
        for seq in 0..30 {
            log.append(producer_batch(1, seq, false))
                .await
                .expect("idempotent");
        }
        log.append(producer_batch(2, 0, true)).await.expect("txn");
        log.append(batch::marker_batch(2, 0, false, 0, 1))
            .await
            .expect("abort");
        log.append(producer_batch(3, 0, true))
            .await
            .expect("open txn");
        log.close().await.expect("close");
        weir_fuzz::write_file(&vfs, &dir.join("producer_state"), &snapshot).await;
        if crash {
            vfs.remove(&dir.join("clean_shutdown"))
                .await
                .expect("remove marker");
        }
        let Ok(log) = Log::open_in(vfs.clone(), dir, cfg.clone(), BatchCache::new(1 << 20)).await
        else {
            return;
        };
        let wm = log.watermarks();
        assert!(
            wm.log_start_offset <= wm.last_stable_offset
                && wm.last_stable_offset <= wm.high_watermark,
            "last stable offset out of range: {wm:?}"
        );
        let aborted = log
            .aborted_transactions(0, u64::MAX)
            .await
            .expect("no remote tier: the log's own list");
        for a in aborted {
            assert!(
                a.first_offset <= a.last_offset,
                "aborted range reversed: {a:?}"
            );
        }
        let end = wm.log_end_offset;
        // Whatever the snapshot said, the log takes new batches and markers at its end.
        let info = log
            .append(
                RecordBatchBuilder::new(1)
                    .record(None, Some(b"after"), &[])
                    .build(),
            )
            .await
            .expect("append after reopen");
        assert_eq!(info.base_offset, end);
        let _ = log.append(batch::marker_batch(3, 0, true, 0, 1)).await;
        log.close().await.expect("close after reopen");
        Log::open_in(vfs, dir, cfg, BatchCache::new(1 << 20))
            .await
            .expect("clean reopen of a log weir itself closed");
    });
});
