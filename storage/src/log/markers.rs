//! The two small files a log directory may hold besides its segments, both
//! `magic[8] value u64 crc32c u32` (20 bytes, big-endian; the CRC-32C covers the first 16):
//!
//! - `clean_shutdown` (`WEIRCLN1` + the log end offset): written by `Log::close` after every
//!   segment is sealed; read and removed first thing by `Log::open`, so it never vouches for
//!   a later state.
//! - `log_start_offset` (`WEIRLSO1` + the offset): the log start set by
//!   `Log::set_log_start_offset` (DeleteRecords) when it lies inside a segment.

/// Name of the clean-shutdown marker in a log directory.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean_shutdown";
/// Name of the file that records a log start offset set inside a segment.
pub const LOG_START_FILE: &str = "log_start_offset";
const MARKER_MAGIC: &[u8; 8] = b"WEIRCLN1";
const LOG_START_MAGIC: &[u8; 8] = b"WEIRLSO1";

/// The clean-shutdown marker for a log ending at `log_end`.
pub(super) fn encode_clean_shutdown(log_end: u64) -> Vec<u8> {
    encode_u64_file(MARKER_MAGIC, log_end)
}

/// The log end offset a clean-shutdown marker records, if it is well-formed.
pub(super) fn decode_clean_shutdown(b: &[u8]) -> Option<u64> {
    decode_u64_file(b, MARKER_MAGIC)
}

/// The `log_start_offset` file for `offset`.
pub(super) fn encode_log_start(offset: u64) -> Vec<u8> {
    encode_u64_file(LOG_START_MAGIC, offset)
}

/// The offset a `log_start_offset` file records, if it is well-formed.
pub(super) fn decode_log_start(b: &[u8]) -> Option<u64> {
    decode_u64_file(b, LOG_START_MAGIC)
}

/// `magic[8] value u64 crc32c u32`, big-endian.
fn encode_u64_file(magic: &[u8; 8], value: u64) -> Vec<u8> {
    let mut v = magic.to_vec();
    v.extend_from_slice(&value.to_be_bytes());
    v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
    v
}

/// `magic[8] value u64 crc32c u32`, big-endian.
fn decode_u64_file(b: &[u8], magic: &[u8; 8]) -> Option<u64> {
    if b.len() != 20 || &b[..8] != magic {
        return None;
    }
    let crc = u32::from_be_bytes(b[16..20].try_into().ok()?);
    if crc32c::crc32c(&b[..16]) != crc {
        return None;
    }
    Some(u64::from_be_bytes(b[8..16].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_refuse_each_other() {
        let m = encode_clean_shutdown(1234);
        assert_eq!(m.len(), 20);
        assert_eq!(decode_clean_shutdown(&m), Some(1234));
        assert_eq!(decode_log_start(&m), None, "wrong magic accepted");
        let s = encode_log_start(77);
        assert_eq!(decode_log_start(&s), Some(77));
        for i in 0..s.len() {
            let mut bad = s.clone();
            bad[i] ^= 0x01;
            assert_eq!(decode_log_start(&bad), None, "flip at {i} accepted");
        }
    }
}
