//! Bugs in `batch::decode_records` found by `fuzz/fuzz_targets/batch_validate.rs`
//! (inputs in `fuzz/found/`). Both tests are `#[ignore]`d so that `cargo test` stays green
//! until they are fixed; run them with
//! `cargo test -p weir-storage --test bench_found_decode_records -- --ignored`.
//!
//! 1. `decode_records` reserves `records_count` records up front
//!    (`Vec::with_capacity(header.records_count)`), and nothing checks that count against
//!    the bytes: a ~80-byte batch with a valid CRC that claims 2^31-1 records (and a
//!    `last_offset_delta` to match) passes `validate`, is accepted by `Log::append`
//!    (which moves the log end offset by 2^31), and then `Log::offset_for_timestamp`
//!    asks for ~220 GB and aborts the process. Kafka rejects a v2 batch whose record count
//!    does not match its records.
//! 2. `decode_records` computes `base_timestamp + timestamp_delta` unchecked: a batch with a
//!    base timestamp near `i64::MAX` panics with "attempt to add with overflow" in debug
//!    builds (and wraps to a negative timestamp in release builds).
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
    b[23..27].copy_from_slice(&i32::MAX.to_be_bytes()); // last_offset_delta
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
#[ignore = "bug found by fuzzing: decode_records trusts records_count (aborts the process)"]
fn decode_records_does_not_reserve_what_the_header_claims() {
    let b = huge_count_batch();
    assert!(batch::validate(&b).is_ok(), "the CRC is valid");
    // Today: "memory allocation of 223338299288 bytes failed", SIGABRT.
    assert_eq!(batch::decode_records(&b), None);
}

#[test]
#[ignore = "bug found by fuzzing: a batch claiming 2^31 records is appended, then offset_for_timestamp aborts"]
fn log_rejects_a_batch_whose_count_does_not_match_its_records() {
    let dir = common::tempdir();
    let path = dir.path().join("p0");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        let appended = log.append(huge_count_batch().into()).await;
        if let Ok(info) = appended {
            // Accepted: the log end offset jumped by 2^31 for one record, and a timestamp
            // lookup decodes the batch and aborts the process.
            let _ = log.offset_for_timestamp(0).await;
            panic!(
                "a batch claiming {} records with one record in it was accepted: {info:?}",
                i32::MAX
            );
        }
    });
}

#[test]
#[ignore = "bug found by fuzzing: decode_records overflows base_timestamp + delta"]
fn decode_records_does_not_overflow_on_extreme_timestamps() {
    let b = overflowing_timestamp_batch();
    assert!(batch::validate(&b).is_ok(), "the CRC is valid");
    // Today (debug build): panics with "attempt to add with overflow" at batch.rs.
    let decoded = std::panic::catch_unwind(|| batch::decode_records(&b));
    assert!(
        decoded.is_ok(),
        "decode_records panicked on a valid-CRC batch"
    );
}
