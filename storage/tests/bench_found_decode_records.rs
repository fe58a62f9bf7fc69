//! Regression tests for bugs in `batch::decode_records` and batch validation found by
//! `fuzz/fuzz_targets/batch_validate.rs` (inputs in `fuzz/found/`).
//!
//! 1. A ~80-byte batch with a valid CRC that claimed 2^31-1 records passed `validate`, was
//!    accepted by `Log::append` (the log end offset jumped by 2^31), and then
//!    `decode_records` (through `Log::offset_for_timestamp`) reserved ~220 GB for the records
//!    and aborted the process. Now validation applies Kafka's rule (`last_offset_delta + 1 ==
//!    records_count`, at least one record, and for uncompressed batches no more records than
//!    their bytes can hold), and `decode_records` never reserves more than the bytes allow.
//! 2. `decode_records` computed `base_timestamp + timestamp_delta` unchecked: a base timestamp
//!    near `i64::MAX` panicked in debug builds. Now such a record does not decode.
mod common;

use weir_storage::batch::{self, RecordBatchBuilder, CRC_START};
use weir_storage::Log;

/// Recomputes the CRC after the header was edited.
fn fix_crc(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// One real record, but a header claiming `i32::MAX` records.
fn huge_count_batch() -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(1_000)
        .record(None, Some(b"v"), &[])
        .build()
        .to_vec();
    b[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes()); // last_offset_delta
    b[57..61].copy_from_slice(&i32::MAX.to_be_bytes()); // records_count
    fix_crc(&mut b);
    b
}

/// A record 5 ms after a base timestamp of `i64::MAX - 1`.
fn overflowing_timestamp_batch() -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0)
        .record_at(5, None, Some(b"v"), &[])
        .build()
        .to_vec();
    b[27..35].copy_from_slice(&(i64::MAX - 1).to_be_bytes()); // base_timestamp
    b[35..43].copy_from_slice(&i64::MAX.to_be_bytes()); // max_timestamp
    fix_crc(&mut b);
    b
}

#[test]
fn decode_records_does_not_reserve_what_the_header_claims() {
    let b = huge_count_batch();
    assert!(
        batch::validate(&b).is_err(),
        "a count its bytes cannot hold is invalid"
    );
    // Before the fix: "memory allocation of 223338299288 bytes failed", SIGABRT.
    assert_eq!(batch::decode_records(&b), None);
}

#[test]
fn log_rejects_a_batch_whose_count_does_not_match_its_records() {
    let dir = common::tempdir();
    let path = dir.path().join("p0");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        let appended = log.append(huge_count_batch().into()).await;
        if let Ok(info) = appended {
            // Accepted (the bug): the log end offset jumped by 2^31 for one record, and a
            // timestamp lookup decodes the batch and aborts the process.
            let _ = log.offset_for_timestamp(0).await;
            panic!(
                "a batch claiming {} records with one record in it was accepted: {info:?}",
                i32::MAX
            );
        }
    });
}

#[test]
fn decode_records_does_not_overflow_on_extreme_timestamps() {
    let b = overflowing_timestamp_batch();
    assert!(batch::validate(&b).is_ok(), "the CRC is valid");
    // Before the fix (debug build): panicked with "attempt to add with overflow" at batch.rs.
    let decoded = std::panic::catch_unwind(|| batch::decode_records(&b));
    assert_eq!(
        decoded.expect("decode_records must not panic on a valid-CRC batch"),
        None,
        "a record whose timestamp overflows does not decode"
    );
}
