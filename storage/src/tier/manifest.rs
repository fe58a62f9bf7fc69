//! The remote-segment manifest: the file `remote_segments` in a log's directory, the list
//! of the partition's segments that are in the object store.
//!
//! ```text
//! magic "WEIRRSM1" | start u64 | count u32 | count x entry | crc32c u32
//! entry: base u64 | next_offset u64 | size u64 | max_timestamp i64 | data_crc u32 | id u64
//! ```
//! Big-endian; the CRC-32C covers everything before it. Entries are in offset order, each
//! beginning and ending past the one before; a replicated log's may begin inside the one
//! before (its replicas cut segments at different offsets: a new leader uploads its own segment
//! holding the remote end, whose first batches are in the store already). `start` is the first offset of the
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
    /// Bytes of [`RemoteSegment::encode`]: the manifest's entry.
    pub const ENCODED_BYTES: usize = ENTRY_BYTES;

    /// The extensions of its objects: the segment file, its offset and time indexes, and the
    /// aborted transactions a read of it may meet (`txn_index.rs`).
    pub const OBJECTS: [&'static str; 6] = [
        "log",
        "index",
        "timeindex",
        "txnindex",
        "snapshot",
        "epochs",
    ];

    /// The key of its object with extension `ext` (one of [`RemoteSegment::OBJECTS`]) under
    /// `prefix`.
    pub fn key(&self, prefix: &str, ext: &str) -> String {
        format!("{prefix}/{:020}-{:016x}.{ext}", self.base_offset, self.id)
    }

    /// The upload id in a key [`RemoteSegment::key`] made under `prefix` (`None`: not such a
    /// key).
    pub fn id_in_key(prefix: &str, key: &str) -> Option<u64> {
        let name = key.strip_prefix(prefix)?.strip_prefix('/')?;
        let (_, rest) = name.split_once('-')?;
        let (id, _) = rest.split_once('.')?;
        if id.len() != 16 {
            return None;
        }
        u64::from_str_radix(id, 16).ok()
    }

    /// Appends its manifest entry (big-endian): what a replicated log's Raft entry carries.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&self.next_offset.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.data_crc.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
    }

    /// An entry [`RemoteSegment::encode`] wrote (`None`: not exactly one, or empty).
    pub fn decode(b: &[u8]) -> Option<RemoteSegment> {
        if b.len() != ENTRY_BYTES {
            return None;
        }
        let u = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or_default());
        let s = RemoteSegment {
            base_offset: u(0),
            next_offset: u(8),
            size: u(16),
            max_timestamp: u(24) as i64,
            data_crc: u32::from_be_bytes(b[32..36].try_into().ok()?),
            id: u(36),
        };
        (s.next_offset > s.base_offset).then_some(s)
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
            s.encode(&mut b);
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    /// `None` unless well-formed: magic, length, CRC, segments in order, each beginning and
    /// ending past the one before (a replicated log's segment may begin inside the one before
    /// it: replicas cut their segments at different offsets, and a new leader uploads its own
    /// from the one holding the remote end).
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
        let mut prev: Option<RemoteSegment> = None;
        for i in 0..count {
            let at = 20 + i * ENTRY_BYTES;
            let s = RemoteSegment::decode(&body[at..at + ENTRY_BYTES])?;
            if prev
                .is_some_and(|p| s.base_offset <= p.base_offset || s.next_offset <= p.next_offset)
            {
                return None;
            }
            prev = Some(s);
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
    fn an_entry_round_trips_and_its_keys_name_its_upload() {
        let s = seg(10, 25);
        let mut b = Vec::new();
        s.encode(&mut b);
        assert_eq!(b.len(), RemoteSegment::ENCODED_BYTES);
        assert_eq!(RemoteSegment::decode(&b), Some(s));
        assert_eq!(RemoteSegment::decode(&b[1..]), None);
        let empty = RemoteSegment {
            next_offset: 10,
            ..s
        };
        b.clear();
        empty.encode(&mut b);
        assert_eq!(RemoteSegment::decode(&b), None, "a segment without offsets");
        for ext in RemoteSegment::OBJECTS {
            assert_eq!(
                RemoteSegment::id_in_key("t-0", &s.key("t-0", ext)),
                Some(s.id)
            );
        }
        assert_eq!(RemoteSegment::id_in_key("t-0", &s.key("t-1", "log")), None);
        assert_eq!(
            RemoteSegment::id_in_key("t-0", "t-0/00000000000000000010-12.log"),
            None
        );
        assert_eq!(RemoteSegment::id_in_key("t-0", "t-0/garbage"), None);
    }

    #[test]
    fn a_segment_may_begin_inside_the_one_before_but_must_end_past_it() {
        let mut m = Manifest::default();
        m.segments.insert(0, seg(0, 10));
        m.segments.insert(5, seg(5, 12));
        assert_eq!(Manifest::decode(&m.encode()), Some(m.clone()));
        assert_eq!(m.find(4), Some(seg(0, 10)));
        assert_eq!(
            m.find(7),
            Some(seg(5, 12)),
            "the later segment serves the overlap"
        );
        assert_eq!(m.end(), Some(12));
        m.segments.insert(6, seg(6, 11));
        assert_eq!(
            Manifest::decode(&m.encode()),
            None,
            "ends inside the one before"
        );
        m.segments.remove(&6);
        m.segments.insert(5, seg(5, 10));
        assert_eq!(
            Manifest::decode(&m.encode()),
            None,
            "ends where the one before does"
        );
    }
}
