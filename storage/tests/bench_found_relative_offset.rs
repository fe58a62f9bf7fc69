//! Regression test for a bug found by `fuzz/fuzz_targets/segment_recovery.rs` (input in
//! `fuzz/found/segment_recovery-relative-offset-wraps`).
//!
//! `batch::check_framing` accepted a batch with 1 record and `last_offset_delta = i32::MAX`.
//! Two such batches made one segment span more than 2^32 offsets; the segment keeps relative
//! offsets as `u32`, so the relative offset wrapped and the next offset-index entry tripped
//! the assertion in `OffsetIndex::push` — a panic reachable from a client's produce request,
//! and from recovery of such a segment. Now such batches are invalid (Kafka's rule:
//! `last_offset_delta + 1 == records_count`), and — since compressed batches may really hold
//! 2^31 records — the log rolls a segment before its relative offsets would overflow, as
//! Kafka does.
mod common;

use weir_storage::batch::{RecordBatchBuilder, CRC_START};
use weir_storage::Log;

fn fix_crc(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// One record, but a header claiming offsets up to base + i32::MAX.
fn wide_batch() -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(1_000)
        .record(None, Some(b"v"), &[])
        .build()
        .to_vec();
    b[23..27].copy_from_slice(&i32::MAX.to_be_bytes()); // last_offset_delta
    fix_crc(&mut b);
    b
}

#[test]
fn appends_past_2_pow_32_offsets_in_one_segment_do_not_panic() {
    let dir = common::tempdir();
    let path = dir.path().join("p0");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        let mut refused = 0;
        let mut ts = 2_000;
        for _ in 0..2 {
            if log.append(wide_batch().into()).await.is_err() {
                refused += 1;
            }
            // Enough ordinary batches for an offset-index entry after each wide one.
            for _ in 0..32 {
                ts += 1;
                let b = RecordBatchBuilder::new(ts)
                    .record(None, Some(&[7u8; 100]), &[])
                    .build();
                // Before the fix: after the second wide batch the relative offset had
                // wrapped, and this panicked in OffsetIndex::push.
                let _ = log.append(b).await;
            }
        }
        assert_eq!(
            refused, 2,
            "a count that does not match the offsets is refused"
        );
    });
}

/// A batch a cleaning left with fewer records than offsets may span 2^31 offsets (a follower
/// takes such batches from its leader with `append_assigned`): two of them would not fit in
/// one segment's 32-bit relative offsets, so the second starts a new segment.
#[test]
fn offsets_beyond_32_bits_of_one_segment_roll_it() {
    let dir = common::tempdir();
    let path = dir.path().join("p0");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        let mut wide = RecordBatchBuilder::new(1_000)
            .record(None, Some(b"v"), &[])
            .build()
            .to_vec();
        wide[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        fix_crc(&mut wide);
        let at = |mut b: Vec<u8>, base: u64| {
            b[..8].copy_from_slice(&(base as i64).to_be_bytes());
            b[12..16].copy_from_slice(&0i32.to_be_bytes());
            bytes::Bytes::from(b)
        };
        for i in 0..3u64 {
            let base = i * (i32::MAX as u64 + 1);
            let info = log
                .append_assigned(at(wide.clone(), base))
                .await
                .expect("append");
            assert_eq!(info.base_offset, base);
            let small = RecordBatchBuilder::new(2_000)
                .record(None, Some(&[7u8; 3000]), &[])
                .build();
            log.append_assigned(at(small.to_vec(), info.last_offset + 1))
                .await
                .expect("append after a wide batch");
        }
        assert!(log.size().0 >= 2, "the segment must have rolled");
        let end = log.watermarks().log_end_offset;
        drop(log);
        let log = Log::open(&path, common::small_config())
            .await
            .expect("recover");
        assert_eq!(log.watermarks().log_end_offset, end);
    });
}
