//! Crash-safety edges of segment files on the simulated disk.
//!
//! What broke:
//! - A roll opened `<base>.log` with create but kept whatever an earlier, crashed incarnation
//!   of that segment left in it. New batches were written over the start of the old bytes;
//!   after a crash, recovery scanned on into the stale batches that happened to continue the
//!   offsets and served them as data that was never appended (here: records 13..15).
//! - Recovery deleted the segments after a cut one without fsyncing the directory, so a
//!   power loss right after could bring them back behind the cut.

mod common;

use std::path::Path;

use bytes::Bytes;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::io::SimDisk;
use weir_storage::{BatchCache, Log, LogConfig};

/// A one-record batch of exactly 4096 bytes (so that batches start on block boundaries and
/// the appender's zero padding never touches the stale bytes that follow), value byte `v`.
fn block_batch(v: u8) -> Bytes {
    let build = |n: usize| {
        RecordBatchBuilder::new(1_000)
            .record(None, Some(&vec![v; n]), &[])
            .build()
    };
    let mut n = 4000;
    loop {
        let b = build(n);
        match b.len().cmp(&4096) {
            std::cmp::Ordering::Equal => return b,
            std::cmp::Ordering::Less => n += 1,
            std::cmp::Ordering::Greater => n -= 1,
        }
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 10 * 4096,
        ..common::small_config()
    }
}

async fn values(log: &Log) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.watermarks().log_start_offset;
    while offset < log.watermarks().high_watermark {
        let r = log.read(offset, 1 << 20).await.expect("read");
        assert!(!r.is_empty(), "no batch at {offset}");
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
fn a_roll_onto_a_stale_file_does_not_resurrect_its_batches() {
    let dir = common::tempdir();
    common::run(dir.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/p");
        let log = Log::open_in(disk.vfs(), dir, config(), BatchCache::new(1 << 20))
            .await
            .expect("open");
        for _ in 0..10 {
            log.append(block_batch(1)).await.expect("append");
        }
        // What a crashed earlier attempt at segment 10 left: six valid batches, offsets 10..15.
        let mut stale = Vec::new();
        for i in 0..6u64 {
            let mut b = block_batch(0xEE).to_vec();
            b[..8].copy_from_slice(&(10 + i).to_be_bytes()); // base offset is outside the CRC
            stale.extend_from_slice(&b);
        }
        disk.vfs()
            .write_small(&dir.join(format!("{:020}.log", 10)), &stale)
            .await
            .expect("plant stale file");
        for _ in 0..3 {
            log.append(block_batch(2)).await.expect("append");
        }
        assert_eq!(log.size().0, 2, "the 11th batch rolled to segment 10");
        log.flush().await.expect("flush");
        let after = disk.process_crash();
        drop(log);
        let log = Log::open_in(after.vfs(), dir, config(), BatchCache::new(1 << 20))
            .await
            .expect("reopen");
        assert_eq!(
            log.watermarks().high_watermark,
            13,
            "only what was appended"
        );
        let mut want = vec![1u8; 10];
        want.extend([2, 2, 2]);
        assert_eq!(values(&log).await, want);
    });
}

#[test]
fn recovery_that_deletes_segments_fsyncs_the_directory() {
    let dir = common::tempdir();
    common::run(dir.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/p");
        let log = Log::open_in(disk.vfs(), dir, config(), BatchCache::new(1 << 20))
            .await
            .expect("open");
        for _ in 0..25 {
            log.append(block_batch(1)).await.expect("append");
        }
        assert_eq!(log.size().0, 3);
        log.flush().await.expect("flush");
        let after = disk.process_crash();
        drop(log);
        // Rot in the middle of the first (sealed) segment, and in its index, so it is scanned
        // and cut: the two later segments no longer follow and are deleted.
        assert!(after.flip_bit("00000000000000000000.log", 5 * 4096 + 100, 2));
        assert!(after.flip_bit("00000000000000000000.index", 20, 1));
        let syncs_before = after.dir_sync_count();
        let log = Log::open_in(after.vfs(), dir, config(), BatchCache::new(1 << 20))
            .await
            .expect("reopen");
        assert_eq!(
            log.watermarks().high_watermark,
            5,
            "cut at the rotten batch"
        );
        assert_eq!(log.size().0, 1);
        assert!(
            after
                .paths()
                .iter()
                .all(|p| !p.to_string_lossy().contains("00000000000000000010")),
            "later segments deleted"
        );
        assert!(
            after.dir_sync_count() > syncs_before,
            "the deletions were not made durable (no directory fsync)"
        );
        assert_eq!(values(&log).await, vec![1u8; 5]);
    });
}
