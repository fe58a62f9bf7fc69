//! The two small files a log directory may hold besides its segments, both
//! `magic[8] value u64 crc32c u32` (20 bytes, big-endian; the CRC-32C covers the first 16):
//!
//! - `clean_shutdown` (`WEIRCLN1` + the log end offset): written by `Log::close` after every
//!   segment is sealed; read and removed first thing by `Log::open`, so it never vouches for
//!   a later state.
//! - `log_start_offset` (`WEIRLSO1` + the offset): the log start set by
//!   `Log::set_log_start_offset` (DeleteRecords) when it lies inside a segment.
//!
//! And one per segment compaction rewrote, `<base>.compacted`
//! (`magic "WEIRCMP1" bytes u64 next_offset u64 crc32c u32`, 28 bytes): the first `bytes` of
//! `<base>.log` were written by a cleaning, so offsets there may skip (whole batches removed),
//! and the batches after them continue from `next_offset` without a gap. Recovery allows
//! offset gaps nowhere else (`recovery.rs`). Always replaced whole (`write_compacted`).

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::io::Vfs;

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

/// Suffix of a segment's compaction marker (`<base>.compacted`).
pub(crate) const COMPACTED_SUFFIX: &str = ".compacted";
const COMPACTED_MAGIC: &[u8; 8] = b"WEIRCMP1";
/// Suffix of a compaction marker being written (removed on open).
pub(crate) const COMPACTED_TMP_SUFFIX: &str = ".compacted.tmp";

/// What a segment's compaction marker says: `bytes` of the file were written by a cleaning
/// (offsets may skip there); after them the offsets continue from `next_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compacted {
    pub bytes: u64,
    pub next_offset: u64,
}

impl Compacted {
    fn encode(&self) -> Vec<u8> {
        let mut v = COMPACTED_MAGIC.to_vec();
        v.extend_from_slice(&self.bytes.to_be_bytes());
        v.extend_from_slice(&self.next_offset.to_be_bytes());
        v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
        v
    }

    fn decode(b: &[u8]) -> Option<Compacted> {
        if b.len() != 28 || &b[..8] != COMPACTED_MAGIC {
            return None;
        }
        let crc = u32::from_be_bytes(b[24..28].try_into().ok()?);
        if crc32c::crc32c(&b[..24]) != crc {
            return None;
        }
        Some(Compacted {
            bytes: u64::from_be_bytes(b[8..16].try_into().ok()?),
            next_offset: u64::from_be_bytes(b[16..24].try_into().ok()?),
        })
    }
}

/// The compaction marker of the segment whose `.log` is `log_path`.
pub(crate) fn compacted_path(log_path: &Path) -> PathBuf {
    log_path.with_extension("compacted")
}

/// The compaction marker of the segment at `log_path`, if there is a well-formed one. (A
/// marker is never torn: `write_compacted` renames a complete, synced file into place.)
pub(crate) async fn read_compacted(vfs: &Vfs, log_path: &Path) -> Result<Option<Compacted>> {
    let path = compacted_path(log_path);
    let found = vfs.read_small(&path).await?;
    let decoded = found.as_deref().and_then(Compacted::decode);
    if found.is_some() && decoded.is_none() {
        tracing::warn!(path = %path.display(), "damaged compaction marker ignored");
    }
    Ok(decoded)
}

/// Makes `marker` the compaction marker of the segment at `log_path`, atomically and
/// durably: written to a temporary file and fdatasync'ed, renamed over the marker, and the
/// directory fsync'ed. A crash leaves the old marker or the new one, never a torn one.
pub(crate) async fn write_compacted(vfs: &Vfs, log_path: &Path, marker: Compacted) -> Result<()> {
    let path = compacted_path(log_path);
    let tmp = log_path.with_extension("compacted.tmp");
    vfs.write_small(&tmp, &marker.encode()).await?;
    vfs.rename(&tmp, &path).await?;
    let dir = log_path.parent().unwrap_or(Path::new("."));
    vfs.sync_dir(dir).await
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

    #[test]
    fn compaction_marker_round_trips_and_refuses_damage() {
        let m = Compacted {
            bytes: 123_456,
            next_offset: 789,
        };
        let b = m.encode();
        assert_eq!(b.len(), 28);
        assert_eq!(Compacted::decode(&b), Some(m));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x20;
            assert_eq!(Compacted::decode(&bad), None, "flip at {i} accepted");
        }
        assert_eq!(
            compacted_path(Path::new("/d/00000000000000000042.log")),
            Path::new("/d/00000000000000000042.compacted")
        );
    }
}
