//! A bug found by `fuzz/fuzz_targets/segment_recovery.rs` (input in
//! `fuzz/found/segment_recovery-relative-offset-wraps`). `#[ignore]`d so that `cargo test`
//! stays green until it is fixed; run it with
//! `cargo test -p weir-storage --test bench_found_relative_offset -- --ignored`.
//!
//! `batch::check_framing` accepts a batch whose `last_offset_delta` is far larger than its
//! record count (1 record, `last_offset_delta = i32::MAX`); Kafka rejects a v2 batch unless
//! `last_offset_delta + 1 == records_count`. Two such batches make one segment span more
//! than 2^32 offsets, and the segment keeps relative offsets as `u32`
//! (`(base_offset - segment_base) as u32` in `Segment::record_into`): the relative offset
//! wraps, and the next offset-index entry trips the assertion in `OffsetIndex::push`
//! ("offset index must increase"), a panic reachable from a client's produce request. The
//! same panic happens during recovery when such a segment is rescanned. Kafka also rolls a
//! segment before its offsets would overflow the 32-bit relative offset.
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
#[ignore = "bug found by fuzzing: relative offsets wrap past 2^32 and OffsetIndex::push panics"]
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
                // Today: after the second wide batch the relative offset has wrapped, and
                // this panics in OffsetIndex::push, "offset index must increase".
                let _ = log.append(b).await;
            }
        }
        assert!(
            refused == 2 || log.size().0 > 1,
            "the segment was neither rolled nor were the wide batches refused"
        );
    });
}
