//! Record-batch decoding on arbitrary bytes: `check_framing`, `validate`, `validate_all`,
//! their stored-batch variants, `records::raw_records` (compaction's splitter),
//! `decode_records`, the `Batches` iterator and the header accessors must never panic, and
//! whatever `validate` accepts must still validate after `assign_offset` (the base offset
//! and leader epoch lie outside the CRC).
//!
//! Input: a mode byte, then the bytes. Mode bit 0: repair CRCs (so validation passes and
//! the records get decoded); bit 1: also repair lengths and magic; bit 2: also make base
//! offsets contiguous.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_storage::batch::{self, BatchHeader, Batches};

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let mut bytes = rest.to_vec();
    if mode & 1 != 0 {
        let base = (mode & 4 != 0).then(|| i64::from(mode >> 3) * 1000);
        weir_fuzz::repair_batches(&mut bytes, mode & 2 != 0, base);
    }
    check(&bytes);
});

fn decode(bytes: &[u8]) -> Option<Vec<batch::Record>> {
    weir_fuzz::decode_records_masked(bytes).unwrap_or(None)
}

fn check(bytes: &[u8]) {
    if let Some(h) = BatchHeader::parse(bytes) {
        let _ = (h.total_bytes(), h.compression(), h.is_control());
    }
    let framed = batch::check_framing(bytes);
    let validated = batch::validate(bytes);
    if validated.is_ok() {
        assert!(
            framed.is_ok(),
            "validate accepted what check_framing refused"
        );
        // The rule for stored (compacted) batches is laxer, never stricter.
        assert!(batch::validate_stored(bytes).is_ok(), "validate_stored refused a valid batch");
    }
    if let Ok(h) = batch::check_framing_stored(bytes) {
        // Compaction's record splitter never panics, and finds the records decode_records does.
        let body = &bytes[batch::HEADER_BYTES..h.total_bytes()];
        let raw = weir_storage::batch::records::raw_records(body, h.records_count.get());
        if h.compression() == 0 {
            if let (Some(raw), Some(Some(decoded))) = (&raw, weir_fuzz::decode_records_masked(bytes).ok()) {
                assert_eq!(raw.len(), decoded.len(), "raw_records and decode_records disagree");
            }
        }
    }
    if let Ok(info) = validated {
        assert!(info.total_bytes <= bytes.len());
        assert!(info.total_bytes >= batch::HEADER_BYTES);
        let header = framed.expect("checked above");
        assert_eq!(header.total_bytes(), info.total_bytes);
        let _ = header.last_offset();

        // Offset assignment must not break the batch, whatever offset and epoch.
        let mut m = bytes[..info.total_bytes].to_vec();
        for (offset, epoch) in [
            (0, 0),
            (i64::MAX - i64::from(info.last_offset_delta), -1),
            (123_456_789, i32::MAX),
        ] {
            batch::assign_offset(&mut m, offset, epoch);
            let again = batch::validate(&m).expect("assign_offset broke a valid batch");
            assert_eq!(again.base_offset, offset);
            assert_eq!(again.total_bytes, info.total_bytes);
            assert_eq!(again.last_offset_delta, info.last_offset_delta);
            assert_eq!(again.max_timestamp, info.max_timestamp);
            assert_eq!(again.records_count, info.records_count);
        }

        if let Some(records) = decode(&bytes[..info.total_bytes]) {
            assert_eq!(records.len(), info.records_count as usize);
        }
    }
    if let Ok(infos) = batch::validate_all(bytes) {
        let total: usize = infos.iter().map(|i| i.total_bytes).sum();
        assert_eq!(
            total,
            bytes.len(),
            "validate_all accepted batches that do not tile the input"
        );
    }
    let mut seen = 0;
    for (h, b) in Batches::new(bytes) {
        assert_eq!(b.len(), h.total_bytes());
        seen += b.len();
        let _ = decode(b);
    }
    assert!(seen <= bytes.len());
    let _ = decode(bytes);
}
