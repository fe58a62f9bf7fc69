//! The log validator (`batch::validate::check_blocking`, what every produce goes through) on
//! arbitrary record sets: it never panics, and whatever it accepts is what it claims to be —
//! each batch's CRC holds (after any header rewrite), its header's max timestamp is the one the
//! validator reports, and its records decode independently (a compressed body inflated by the
//! engine's codecs) to exactly `records_count` records at offset deltas 0, 1, 2, ...
//!
//! Input: a mode byte, then the bytes. Mode bit 0: repair CRCs, lengths and magic (so the walk
//! reaches the records); bits 1-3: compress each batch's records section with that codec
//! (1-4) first; bit 4: a compacted topic (keys required); bit 5: a LogAppendTime topic; bit 6:
//! the broker's own batches (`Origin::Internal`); bit 7: a 4 KiB decompression limit.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use weir_storage::batch::compression::{compress, inflate};
use weir_storage::batch::validate::check_blocking;
use weir_storage::batch::{self, BatchHeader, Origin, Rules, TimestampType, HEADER_BYTES};
use weir_storage::LogConfig;

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let codec = (mode >> 1) & 7;
    let mut bytes = if (1..=4).contains(&codec) {
        compress_bodies(rest, codec)
    } else {
        rest.to_vec()
    };
    if mode & 1 != 0 {
        weir_fuzz::repair_batches(&mut bytes, true, None);
    }
    let rules = Rules {
        keys_required: mode & 0x10 != 0,
        timestamp_type: if mode & 0x20 != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
        inflated_max_bytes: if mode & 0x80 != 0 { 4096 } else { 1 << 20 },
        ..Rules::of(
            &LogConfig::default(),
            if mode & 0x40 != 0 { Origin::Internal } else { Origin::Client },
            1_700_000_000_000,
        )
    };
    let Ok(valid) = check_blocking(Bytes::from(bytes), &rules) else {
        return;
    };
    let out = valid.bytes();
    let mut pos = 0;
    for info in valid.infos() {
        let b = &out[pos..pos + info.total_bytes];
        let checked = batch::validate(b).expect("an accepted batch fails its CRC");
        let h = BatchHeader::parse(b).expect("header");
        assert_eq!(h.max_timestamp.get(), info.max_timestamp, "header and reported max differ");
        assert_eq!(checked.records_count, info.records_count);
        let mut plain = b.to_vec();
        if h.compression() != 0 {
            let body = inflate(h.compression(), &b[HEADER_BYTES..], rules.inflated_max_bytes)
                .expect("an accepted compressed batch does not inflate");
            plain.truncate(HEADER_BYTES);
            plain.extend_from_slice(&body);
            plain[22] &= !7;
            let len = (plain.len() - 12) as i32;
            plain[8..12].copy_from_slice(&len.to_be_bytes());
        }
        if let Some(records) = weir_fuzz::decode_records_masked(&plain).unwrap_or(None) {
            assert_eq!(records.len(), info.records_count as usize, "records_count lies");
            let base = h.base_offset.get();
            for (i, r) in records.iter().enumerate() {
                assert_eq!(r.offset, base + i as i64, "offset deltas are not 0, 1, 2, ...");
            }
        }
        pos += info.total_bytes;
    }
    assert_eq!(pos, out.len(), "accepted batches do not tile the record set");
});

/// Each batch found at the front of `bytes` (framing only) with its records section compressed
/// with `codec`; the rest as it is.
fn compress_bodies(bytes: &[u8], codec: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    while let Ok(h) = batch::check_framing_stored(&bytes[pos..]) {
        let total = h.total_bytes();
        let Ok(z) = compress(codec, &bytes[pos + HEADER_BYTES..pos + total]) else {
            break;
        };
        let mut head = bytes[pos..pos + HEADER_BYTES].to_vec();
        head[22] = (head[22] & !7) | codec;
        let len = (HEADER_BYTES - 12 + z.len()) as i32;
        head[8..12].copy_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&z);
        pos += total;
    }
    out.extend_from_slice(&bytes[pos..]);
    out
}
