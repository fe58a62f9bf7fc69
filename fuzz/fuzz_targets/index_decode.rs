//! Index files on arbitrary bytes: `OffsetIndex::decode` and `TimeIndex::decode` must never
//! panic; whatever they accept must encode back to the same bytes and decode again to the
//! same index; lookups on a decoded index must not panic.
//!
//! Input: a mode byte, then the file bytes. Mode bit 0: repair the header CRC (and, with
//! bit 1, the entry count) so the fuzzer gets past the checksum.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_storage::offset_index::{OffsetIndex, TimeIndex, INDEX_HEADER_BYTES};

const CRC_AT: usize = 44;

fn repair(bytes: &mut [u8], fix_count: bool) {
    if bytes.len() < INDEX_HEADER_BYTES {
        return;
    }
    if fix_count {
        let entry_bytes = u16::from_be_bytes([bytes[6], bytes[7]]).max(1) as usize;
        let count = ((bytes.len() - INDEX_HEADER_BYTES) / entry_bytes) as u32;
        bytes[40..44].copy_from_slice(&count.to_be_bytes());
    }
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&bytes[..CRC_AT]),
        &bytes[INDEX_HEADER_BYTES..],
    );
    bytes[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let mut bytes = rest.to_vec();
    if mode & 1 != 0 {
        repair(&mut bytes, mode & 2 != 0);
    }
    let probes: Vec<u32> = bytes
        .chunks(4)
        .take(8)
        .map(|c| c.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b)))
        .chain([0, 1, u32::MAX])
        .collect();

    if let Some((summary, idx)) = OffsetIndex::decode(&bytes) {
        let encoded = idx.encode(&summary);
        assert_eq!(
            encoded, bytes,
            "offset index did not re-encode to the same bytes"
        );
        let (s2, idx2) = OffsetIndex::decode(&encoded).expect("re-encoded offset index rejected");
        assert_eq!(s2, summary);
        assert_eq!(idx2, idx);
        for &p in &probes {
            let pos = idx.lookup(p);
            assert!(pos <= idx.lookup(u32::MAX), "lookup not monotonic");
        }
    }
    if let Some((summary, idx)) = TimeIndex::decode(&bytes) {
        let encoded = idx.encode(&summary);
        assert_eq!(
            encoded, bytes,
            "time index did not re-encode to the same bytes"
        );
        let (s2, idx2) = TimeIndex::decode(&encoded).expect("re-encoded time index rejected");
        assert_eq!(s2, summary);
        assert_eq!(idx2, idx);
        for &p in &probes {
            let _ = idx.lookup_before(i64::from(p));
        }
        let _ = idx.lookup_before(i64::MIN);
        let _ = idx.lookup_before(i64::MAX);
        let _ = idx.last_timestamp();
    }
});
