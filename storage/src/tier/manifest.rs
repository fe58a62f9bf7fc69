//! The remote-segment manifest: the file `remote_segments` in a log's directory, the list
//! of the partition's segments that are in the object store.
//!
//! ```text
//! magic "WEIRRSM1" | start u64 | count u32 | count x entry | crc32c u32
//! entry: base u64 | next_offset u64 | size u64 | max_timestamp i64 | data_crc u32 | id u64
//! ```
//! Big-endian; the CRC-32C covers everything before it. `start` is the first offset of the
//! whole log when it lies in the remote tier (retention or DeleteRecords moved it there).
//! `id` is unique per upload, part of the objects' keys: an upload interrupted by a crash and
//! done again never writes over objects the manifest lists. The file is replaced whole
//! (written to `remote_segments.tmp`, fdatasync'ed, renamed, directory synced), so it is
//! always the old list or the new one.

use std::collections::BTreeMap;

/// Name of the manifest in a log directory.
pub const MANIFEST_FILE: &str = "remote_segments";
pub(crate) const MANIFEST_TMP_FILE: &str = "remote_segments.tmp";
const MAGIC: &[u8; 8] = b"WEIRRSM1";
const ENTRY_BYTES: usize = 44;

/// One segment in the object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteSegment {
    /// Its first offset.
    pub base_offset: u64,
    /// The offset after its last batch.
    pub next_offset: u64,
    /// Bytes of its `.log` object.
    pub size: u64,
    /// Its largest batch max timestamp (-1 if none).
    pub max_timestamp: i64,
    /// CRC-32C of the whole `.log` object, as uploaded.
    pub data_crc: u32,
    /// The upload's unique id (in the object keys).
    pub id: u64,
}

impl RemoteSegment {
    /// The key of its `.log` (`ext` "log"), `.index` or `.timeindex` object under `prefix`.
    pub fn key(&self, prefix: &str, ext: &str) -> String {
        format!("{prefix}/{:020}-{:016x}.{ext}", self.base_offset, self.id)
    }
}

/// The manifest's content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub start: u64,
    pub segments: BTreeMap<u64, RemoteSegment>,
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24 + self.segments.len() * ENTRY_BYTES);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.start.to_be_bytes());
        b.extend_from_slice(&(self.segments.len() as u32).to_be_bytes());
        for s in self.segments.values() {
            b.extend_from_slice(&s.base_offset.to_be_bytes());
            b.extend_from_slice(&s.next_offset.to_be_bytes());
            b.extend_from_slice(&s.size.to_be_bytes());
            b.extend_from_slice(&s.max_timestamp.to_be_bytes());
            b.extend_from_slice(&s.data_crc.to_be_bytes());
            b.extend_from_slice(&s.id.to_be_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    /// `None` unless well-formed: magic, length, CRC, segments in order without overlap.
    pub(crate) fn decode(b: &[u8]) -> Option<Manifest> {
        if b.len() < 24 || &b[..8] != MAGIC {
            return None;
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let u64_at =
            |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().unwrap_or_default());
        let start = u64_at(8);
        let count = u32::from_be_bytes(body[16..20].try_into().ok()?) as usize;
        if body.len() != 20 + count * ENTRY_BYTES {
            return None;
        }
        let mut segments = BTreeMap::new();
        let mut prev_end = 0;
        for i in 0..count {
            let at = 20 + i * ENTRY_BYTES;
            let s = RemoteSegment {
                base_offset: u64_at(at),
                next_offset: u64_at(at + 8),
                size: u64_at(at + 16),
                max_timestamp: u64_at(at + 24) as i64,
                data_crc: u32::from_be_bytes(body[at + 32..at + 36].try_into().ok()?),
                id: u64_at(at + 36),
            };
            if s.next_offset <= s.base_offset || s.base_offset < prev_end {
                return None;
            }
            prev_end = s.next_offset;
            segments.insert(s.base_offset, s);
        }
        Some(Manifest { start, segments })
    }

    /// The offset after the last remote segment (`None`: no segment).
    pub(crate) fn end(&self) -> Option<u64> {
        self.segments.values().next_back().map(|s| s.next_offset)
    }

    /// The first offset the remote tier serves (`None`: no segment).
    pub(crate) fn first(&self) -> Option<u64> {
        self.segments
            .values()
            .next()
            .map(|s| s.base_offset.max(self.start))
    }

    /// The remote segment holding `offset`.
    pub(crate) fn find(&self, offset: u64) -> Option<RemoteSegment> {
        self.segments
            .range(..=offset)
            .next_back()
            .map(|(_, s)| *s)
            .filter(|s| offset < s.next_offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: u64, next: u64) -> RemoteSegment {
        RemoteSegment {
            base_offset: base,
            next_offset: next,
            size: 100 * (next - base),
            max_timestamp: base as i64 * 10,
            data_crc: base as u32 ^ 0xdead,
            id: base * 31 + 7,
        }
    }

    #[test]
    fn round_trips_and_rejects_every_flipped_byte() {
        let mut m = Manifest {
            start: 5,
            ..Default::default()
        };
        for (b, n) in [(0, 10), (10, 25), (25, 26)] {
            m.segments.insert(b, seg(b, n));
        }
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Some(m.clone()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert_eq!(Manifest::decode(&bad), None, "flip at {i} accepted");
        }
        assert_eq!(Manifest::decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(m.find(9), Some(seg(0, 10)));
        assert_eq!(m.find(25), Some(seg(25, 26)));
        assert_eq!(m.find(26), None);
        assert_eq!((m.first(), m.end()), (Some(5), Some(26)));
    }

    #[test]
    fn overlapping_segments_are_refused() {
        let mut m = Manifest::default();
        m.segments.insert(0, seg(0, 10));
        m.segments.insert(5, seg(5, 12));
        assert_eq!(Manifest::decode(&m.encode()), None);
    }
}
