//! Regression test for issue 34's data loss with sarama: sarama (before 2025) writes
//! `max_timestamp = -1` in every batch header. A log that trusted the header counted such a
//! segment as last written at -1 ms, so retention deleted it at the first pass after it rolled
//! — 48 of 60 fresh records gone 20 s after they were written, with `retention.ms` at an hour —
//! and ListOffsets by timestamp skipped it.
//!
//! New batches get their true max timestamp from the validator (tests/validation.rs). This test
//! is about data already on disk from such a producer: batches with -1 headers, written by an
//! older broker, whose sealed segments' index summaries say -1 too. After an upgrade the log
//! must go by the records' age (a header below the batch's first timestamp is not believed) and
//! rewrite those summaries.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use weir_storage::batch::{RecordBatchBuilder, CRC_START};
use weir_storage::offset_index::{OffsetIndex, TimeIndex};
use weir_storage::{Log, LogConfig};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// A batch as sarama writes it: records stamped `ts`, `ts + 1`, ..., the header's max -1; at
/// `base` (what an older broker stored, offsets assigned).
fn sarama_batch(base: u64, ts: i64, n: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(ts);
    for i in 0..n {
        b = b.record_at(ts + i as i64, Some(b"k"), Some(&[7u8; 500]), &[]);
    }
    let mut v = b.build().to_vec();
    v[..8].copy_from_slice(&(base as i64).to_be_bytes());
    v[12..16].copy_from_slice(&0i32.to_be_bytes());
    v[35..43].copy_from_slice(&(-1i64).to_be_bytes());
    let crc = crc32c::crc32c(&v[CRC_START..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(v)
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 8 << 10,
        retention_ms: Some(3_600_000),
        ..common::small_config()
    }
}

/// Rewrites a sealed segment's index summaries with max timestamp -1, as a broker that trusted
/// sarama's headers sealed them.
fn forget_max_timestamps(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("dir") {
        let path = e.expect("entry").path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        let bytes = std::fs::read(&path).expect("read index");
        let out = match ext {
            "index" => OffsetIndex::decode(&bytes).map(|(mut s, i)| {
                s.max_timestamp = -1;
                i.encode(&s)
            }),
            "timeindex" => TimeIndex::decode(&bytes).map(|(mut s, _)| {
                s.max_timestamp = -1;
                TimeIndex::default().encode(&s)
            }),
            _ => continue,
        };
        std::fs::write(&path, out.expect("an index the log wrote decodes")).expect("write");
        n += 1;
    }
    n
}

#[test]
fn segments_of_sarama_batches_are_kept_until_their_records_are_old() {
    let tmp = common::tempdir();
    let dir = tmp.path().join("p0");
    common::run(tmp.path(), move || async move {
        let written_at = now_ms();
        let log = Log::open(&dir, config()).await.expect("open");
        let mut next = 0u64;
        for _ in 0..60 {
            let info = log
                .append_assigned(sarama_batch(next, written_at, 4))
                .await
                .expect("append");
            next = info.last_offset + 1;
        }
        let segments = log.size().0;
        assert!(
            segments > 3,
            "the batches span several segments: {segments}"
        );
        log.close().await.expect("close");
        assert!(forget_max_timestamps(&dir) >= 2 * (segments - 1));

        let log = Log::open(&dir, config()).await.expect("reopen");
        // An hour after the records were written, less a minute: nothing is due.
        let deleted = log
            .enforce_retention(written_at + 3_540_000)
            .await
            .expect("retention");
        assert_eq!(deleted, 0, "retention deleted segments of fresh records");
        assert_eq!(log.watermarks().log_start_offset, 0);
        // ListOffsets by timestamp finds the first record at or after a time.
        let found = log
            .offset_for_timestamp(written_at + 2)
            .await
            .expect("lookup");
        assert_eq!(found, Some((2, written_at + 2)));
        log.close().await.expect("close");

        // The rescan wrote the summaries anew: the next open trusts them, and retention
        // deletes the segments once their records are older than retention.ms.
        let log = Log::open(&dir, config()).await.expect("reopen");
        let deleted = log
            .enforce_retention(written_at + 3_600_100)
            .await
            .expect("retention");
        assert_eq!(deleted, segments - 1, "every closed segment is due");
        log.close().await.expect("close");
    });
}
