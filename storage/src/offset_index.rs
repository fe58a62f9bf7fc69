//! The sparse offset index of one segment (`<base offset>.index`) and the time index
//! (`<base offset>.timeindex`), in memory and on disk.
//!
//! Both files share one 48-byte header (integers big-endian):
//!
//! ```text
//!  offset size field
//!       0    4 magic           "WIDX" (offset index) or "WTIX" (time index)
//!       4    2 version         1
//!       6    2 entry_bytes     8 (offset index) or 12 (time index)
//!       8    8 base_offset     the segment's base offset
//!      16    8 segment_bytes   logical size of the .log file this index describes
//!      24    8 next_offset     offset after the segment's last batch
//!      32    8 max_timestamp   largest batch max timestamp in the segment (-1 if none)
//!      40    4 entry_count
//!      44    4 crc32c          of bytes 0..44 followed by the entries
//!      48      entries
//! ```
//!
//! Offset index entry (8 bytes): `relative_offset u32` (batch base offset − segment base),
//! `position u32` (byte position of that batch in the .log file). One entry every
//! `index.interval.bytes` of log; entries strictly increase in both fields.
//!
//! Time index entry (12 bytes): `timestamp i64`, `relative_offset u32`: the batch at that
//! offset is the first whose max timestamp reached `timestamp`. Timestamps strictly increase.
//! At most one entry per offset-index entry (per `index.interval.bytes` of log).
//!
//! An index is trusted only if its CRC matches and `segment_bytes` equals the .log file's
//! size; otherwise it is rebuilt by scanning the segment.

use zerocopy::big_endian::{I64, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Magic of an offset index file (`.index`).
pub const OFFSET_INDEX_MAGIC: [u8; 4] = *b"WIDX";
/// Magic of a time index file (`.timeindex`).
pub const TIME_INDEX_MAGIC: [u8; 4] = *b"WTIX";
/// The index file format version.
pub const INDEX_VERSION: u16 = 1;
/// Size of the header both index files start with.
pub const INDEX_HEADER_BYTES: usize = 48;
const CRC_AT: usize = 44;

/// The 48-byte header of both index files, as it lies on disk (layout in the module docs).
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct IndexHeader {
    /// [`OFFSET_INDEX_MAGIC`] or [`TIME_INDEX_MAGIC`].
    pub magic: [u8; 4],
    /// [`INDEX_VERSION`].
    pub version: U16,
    /// Size of one entry: 8 (offset index) or 12 (time index).
    pub entry_bytes: U16,
    /// The segment's base offset.
    pub base_offset: U64,
    /// Size of the `.log` file this index describes.
    pub segment_bytes: U64,
    /// Offset after the segment's last batch.
    pub next_offset: U64,
    /// Largest batch max timestamp in the segment (-1 if none).
    pub max_timestamp: I64,
    /// Number of entries after the header.
    pub entry_count: U32,
    /// CRC-32C of bytes 0..44 followed by the entries.
    pub crc: U32,
}
const _: () = assert!(std::mem::size_of::<IndexHeader>() == INDEX_HEADER_BYTES);
const _: () = assert!(std::mem::offset_of!(IndexHeader, crc) == CRC_AT);

/// What an index file says about its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    /// The segment's base offset.
    pub base_offset: u64,
    /// Size of the segment's `.log` file.
    pub segment_bytes: u64,
    /// Offset after the segment's last batch.
    pub next_offset: u64,
    /// Largest batch max timestamp in the segment (-1 if none).
    pub max_timestamp: i64,
}

/// Sparse map from offsets to file positions within one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    /// Records that the batch with relative offset `rel` starts at `position`.
    pub fn push(&mut self, rel: u32, position: u32) {
        if let Some(&(last_rel, last_pos)) = self.entries.last() {
            assert!(
                rel > last_rel && position > last_pos,
                "offset index must increase: last ({last_rel}, {last_pos}), new ({rel}, {position})"
            );
        }
        self.entries.push((rel, position));
    }

    /// Position of the last indexed batch at or before relative offset `rel` (0 if none).
    pub fn lookup(&self, rel: u32) -> u32 {
        match self.entries.partition_point(|&(r, _)| r <= rel) {
            0 => 0,
            i => self.entries[i - 1].1,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `.index` file for a segment `summary` describes.
    pub fn encode(&self, summary: &SegmentSummary) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.entries.len() * 8);
        for &(r, p) in &self.entries {
            body.extend_from_slice(&r.to_be_bytes());
            body.extend_from_slice(&p.to_be_bytes());
        }
        encode_file(OFFSET_INDEX_MAGIC, 8, summary, self.entries.len(), &body)
    }

    /// Parses an `.index` file. `None` unless it is well-formed: magic, version, entry size,
    /// count, CRC, and strictly increasing entries.
    pub fn decode(bytes: &[u8]) -> Option<(SegmentSummary, OffsetIndex)> {
        let (summary, body) = decode_file(bytes, OFFSET_INDEX_MAGIC, 8)?;
        let mut idx = OffsetIndex::default();
        for e in body.chunks_exact(8) {
            let rel = u32::from_be_bytes(e[0..4].try_into().ok()?);
            let pos = u32::from_be_bytes(e[4..8].try_into().ok()?);
            if let Some(&(lr, lp)) = idx.entries.last() {
                if rel <= lr || pos <= lp {
                    return None;
                }
            }
            idx.entries.push((rel, pos));
        }
        Some((summary, idx))
    }
}

/// Sparse map from timestamps to offsets within one segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    /// Records that the batch at relative offset `rel` raised the max timestamp to `ts`.
    /// Ignored unless `ts` is larger than the last entry's.
    pub fn push(&mut self, ts: i64, rel: u32) {
        if self.entries.last().is_none_or(|&(last, _)| ts > last) {
            self.entries.push((ts, rel));
        }
    }

    /// Relative offset of the last entry whose timestamp is below `ts`: a scan for the first
    /// batch reaching `ts` can start there (0 if none).
    pub fn lookup_before(&self, ts: i64) -> u32 {
        match self.entries.partition_point(|&(t, _)| t < ts) {
            0 => 0,
            i => self.entries[i - 1].1,
        }
    }

    /// The newest timestamp indexed, if any.
    pub fn last_timestamp(&self) -> Option<i64> {
        self.entries.last().map(|e| e.0)
    }

    /// The `.timeindex` file for a segment `summary` describes.
    pub fn encode(&self, summary: &SegmentSummary) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.entries.len() * 12);
        for &(t, r) in &self.entries {
            body.extend_from_slice(&t.to_be_bytes());
            body.extend_from_slice(&r.to_be_bytes());
        }
        encode_file(TIME_INDEX_MAGIC, 12, summary, self.entries.len(), &body)
    }

    /// Parses a `.timeindex` file. `None` unless it is well-formed: magic, version, entry
    /// size, count, CRC, and strictly increasing timestamps.
    pub fn decode(bytes: &[u8]) -> Option<(SegmentSummary, TimeIndex)> {
        let (summary, body) = decode_file(bytes, TIME_INDEX_MAGIC, 12)?;
        let mut idx = TimeIndex::default();
        for e in body.chunks_exact(12) {
            let ts = i64::from_be_bytes(e[0..8].try_into().ok()?);
            let rel = u32::from_be_bytes(e[8..12].try_into().ok()?);
            if idx.entries.last().is_some_and(|&(lt, _)| ts <= lt) {
                return None;
            }
            idx.entries.push((ts, rel));
        }
        Some((summary, idx))
    }
}

fn encode_file(
    magic: [u8; 4],
    entry_bytes: u16,
    s: &SegmentSummary,
    count: usize,
    body: &[u8],
) -> Vec<u8> {
    let mut header = IndexHeader {
        magic,
        version: INDEX_VERSION.into(),
        entry_bytes: entry_bytes.into(),
        base_offset: s.base_offset.into(),
        segment_bytes: s.segment_bytes.into(),
        next_offset: s.next_offset.into(),
        max_timestamp: s.max_timestamp.into(),
        entry_count: (count as u32).into(),
        crc: 0.into(),
    };
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header.as_bytes()[..CRC_AT]), body);
    header.crc = crc.into();
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn decode_file(bytes: &[u8], magic: [u8; 4], entry_bytes: u16) -> Option<(SegmentSummary, &[u8])> {
    let (h, body) = IndexHeader::ref_from_prefix(bytes).ok()?;
    if h.magic != magic || h.version.get() != INDEX_VERSION || h.entry_bytes.get() != entry_bytes {
        return None;
    }
    if body.len() != h.entry_count.get() as usize * entry_bytes as usize {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..CRC_AT]), body);
    if crc != h.crc.get() {
        return None;
    }
    Some((
        SegmentSummary {
            base_offset: h.base_offset.get(),
            segment_bytes: h.segment_bytes.get(),
            next_offset: h.next_offset.get(),
            max_timestamp: h.max_timestamp.get(),
        },
        body,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> SegmentSummary {
        SegmentSummary {
            base_offset: 100,
            segment_bytes: 9000,
            next_offset: 180,
            max_timestamp: 77,
        }
    }

    #[test]
    fn offset_index_round_trips_and_looks_up() {
        let mut idx = OffsetIndex::default();
        idx.push(0, 0);
        idx.push(10, 4100);
        idx.push(25, 8300);
        let bytes = idx.encode(&summary());
        let (s, back) = OffsetIndex::decode(&bytes).expect("decodes");
        assert_eq!(s, summary());
        assert_eq!(back, idx);
        assert_eq!(idx.lookup(9), 0);
        assert_eq!(idx.lookup(10), 4100);
        assert_eq!(idx.lookup(1000), 8300);
    }

    #[test]
    fn damaged_index_files_are_rejected() {
        let mut idx = TimeIndex::default();
        idx.push(5, 0);
        idx.push(9, 3);
        let bytes = idx.encode(&summary());
        assert!(TimeIndex::decode(&bytes).is_some());
        for i in 0..bytes.len() {
            let mut m = bytes.clone();
            m[i] ^= 0x04;
            assert!(TimeIndex::decode(&m).is_none(), "flip at {i} accepted");
        }
        assert!(TimeIndex::decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(
            OffsetIndex::decode(&bytes).is_none(),
            "wrong magic accepted"
        );
    }
}
