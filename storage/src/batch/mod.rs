//! Kafka record batches, format v2 (magic 2), stored verbatim.
//!
//! Byte layout of the 61-byte header (all integers big-endian):
//!
//! ```text
//!  offset size field
//!       0    8 base_offset              assigned by the log, in place
//!       8    4 batch_length             bytes after this field (total = 12 + batch_length)
//!      12    4 partition_leader_epoch   assigned by the log, in place
//!      16    1 magic                    = 2
//!      17    4 crc                      CRC-32C of bytes 21..end (attributes to the last record)
//!      21    2 attributes               bits 0-2 compression, 3 timestamp type,
//!                                       4 transactional, 5 control
//!      23    4 last_offset_delta
//!      27    8 base_timestamp
//!      35    8 max_timestamp
//!      43    8 producer_id
//!      51    2 producer_epoch
//!      53    4 base_sequence
//!      57    4 records_count
//!      61      records (possibly compressed; never re-encoded here)
//! ```
//!
//! Because the CRC starts at `attributes`, the base offset and leader epoch can be set in
//! place without touching the records or recomputing the checksum.

use bytes::Bytes;
use zerocopy::big_endian::{I16, I32, I64, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::BatchError;

pub mod compression;
mod record_walk;
pub mod records;
mod rules;
pub mod validate;

pub use records::{decode_records, Record, RecordBatchBuilder};
pub use validate::{Origin, Rules, TimestampType, ValidBatches};

/// Size of the v2 batch header.
pub const HEADER_BYTES: usize = 61;
/// Bytes before (and including) `batch_length`: base_offset + batch_length.
pub const LOG_OVERHEAD: usize = 12;
/// Offset of the first byte covered by the CRC (`attributes`).
pub const CRC_START: usize = 21;
/// The only batch format weir stores.
pub const MAGIC_V2: i8 = 2;
/// Hard upper bound on one batch, whatever the configuration says.
pub const MAX_BATCH_BYTES: usize = 256 << 20;

/// `attributes` bits 0-2: the compression codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
pub const COMPRESSION_MASK: i16 = 0x07;
/// `attributes` bit 3: timestamps are the broker's append time, not the producer's.
pub const TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
/// `attributes` bit 4: the batch belongs to a transaction.
pub const TRANSACTIONAL_FLAG: i16 = 0x10;
/// `attributes` bit 5: a control batch (transaction markers), not user records.
pub const CONTROL_FLAG: i16 = 0x20;
/// `attributes` bit 6 (KIP-534): `base_timestamp` holds the delete horizon of a cleaned batch.
pub const DELETE_HORIZON_FLAG: i16 = 0x40;

/// The v2 record batch header, as it lies on the wire and on disk.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct BatchHeader {
    /// Offset of the first record (assigned by the log, in place).
    pub base_offset: I64,
    /// Bytes after this field: the batch is `LOG_OVERHEAD + batch_length` bytes in all.
    pub batch_length: I32,
    /// Leader epoch (the log sets 0, in place; outside the CRC like `base_offset`).
    pub partition_leader_epoch: I32,
    /// Format version: [`MAGIC_V2`].
    pub magic: i8,
    /// CRC-32C of the bytes from `attributes` ([`CRC_START`]) to the end of the batch.
    pub crc: U32,
    /// Compression codec, timestamp type, transactional and control bits.
    pub attributes: I16,
    /// Offset of the last record relative to `base_offset` (`records_count - 1`).
    pub last_offset_delta: I32,
    /// Timestamp (ms) the records' timestamp deltas are relative to.
    pub base_timestamp: I64,
    /// Largest record timestamp (ms) in the batch.
    pub max_timestamp: I64,
    /// Idempotent producer id; -1 for none.
    pub producer_id: I64,
    /// Epoch of the producer id; -1 for none.
    pub producer_epoch: I16,
    /// Producer sequence number of the first record; -1 for none.
    pub base_sequence: I32,
    /// Number of records in the batch.
    pub records_count: I32,
}

const _: () = assert!(std::mem::size_of::<BatchHeader>() == HEADER_BYTES);
const _: () = assert!(std::mem::offset_of!(BatchHeader, crc) == 17);
const _: () = assert!(std::mem::offset_of!(BatchHeader, attributes) == CRC_START);
const _: () = assert!(std::mem::offset_of!(BatchHeader, records_count) == 57);

impl BatchHeader {
    /// The header at the front of `bytes`, if there are enough bytes.
    pub fn parse(bytes: &[u8]) -> Option<&BatchHeader> {
        BatchHeader::ref_from_prefix(bytes).ok().map(|(h, _)| h)
    }

    /// Total size of the batch on disk, header included.
    pub fn total_bytes(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.get().max(0) as usize
    }

    /// Offset of the batch's last record: `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.get() + i64::from(self.last_offset_delta.get())
    }

    /// The compression codec (`attributes` bits 0-2; 0 is none).
    pub fn compression(&self) -> u8 {
        (self.attributes.get() & COMPRESSION_MASK) as u8
    }

    /// True for a control batch (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes.get() & CONTROL_FLAG != 0
    }

    /// True when the batch carries its append time (`LogAppendTime`): `max_timestamp` is then
    /// every record's timestamp.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes.get() & TIMESTAMP_TYPE_LOG_APPEND != 0
    }

    /// Whether the header's `max_timestamp` can be believed: a `LogAppendTime` batch's always,
    /// a CreateTime batch's unless it is below the first record's (`base_timestamp`). Batches
    /// the validator took carry the true one; older ones from producers that wrote -1 (sarama
    /// before 2025) or less than their records do not, and must not look older than they are
    /// ([`max_timestamp`] reads their records instead).
    /// (With KIP-534's delete horizon bit set, `base_timestamp` is the horizon, not a record's
    /// timestamp, and the header is believed.)
    pub fn max_timestamp_trusted(&self) -> bool {
        self.is_log_append_time()
            || self.attributes.get() & DELETE_HORIZON_FLAG != 0
            || self.max_timestamp.get() >= self.base_timestamp.get()
    }
}

/// The type of a transaction marker batch: `Some(true)` commit, `Some(false)` abort, `None`
/// for any other batch (or a control record of another type). `batch`: the whole batch.
/// Control batches are never compressed; the marker is the key of their one record:
/// `version i16 = 0, type i16` (0 abort, 1 commit).
pub fn marker_type(batch: &[u8]) -> Option<bool> {
    let header = BatchHeader::parse(batch)?;
    if !header.is_control() || header.compression() != 0 {
        return None;
    }
    let body = batch.get(HEADER_BYTES..header.total_bytes())?;
    let first = *records::raw_records(body, header.records_count.get())?.first()?;
    match first.key? {
        [0, 0, 0, 0] => Some(false),
        [0, 0, 0, 1] => Some(true),
        _ => None,
    }
}

/// A transaction marker: a control batch of one record closing `producer_id`'s transaction
/// (`commit` or abort), as the transaction coordinator writes it to each partition of the
/// transaction. Value: `version i16 = 0, coordinator_epoch i32`.
pub fn marker_batch(
    producer_id: i64,
    epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    timestamp_ms: i64,
) -> Bytes {
    let key = [0u8, 0, 0, u8::from(commit)];
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    RecordBatchBuilder::new(timestamp_ms)
        .producer(producer_id, epoch, -1)
        .attributes(TRANSACTIONAL_FLAG | CONTROL_FLAG)
        .record(Some(&key), Some(&value), &[])
        .build()
}

/// The max timestamp of the whole `batch` to go by (retention, the time index, ListOffsets):
/// the header's where it can be believed ([`BatchHeader::max_timestamp_trusted`]), else the
/// largest of its records' timestamps (a compressed batch decompressed, bounded), at least its
/// `base_timestamp`.
pub fn max_timestamp(batch: &[u8]) -> i64 {
    let Some(header) = BatchHeader::parse(batch) else {
        return -1;
    };
    if header.max_timestamp_trusted() {
        return header.max_timestamp.get();
    }
    let base = header.base_timestamp.get();
    let Some(body) = batch.get(HEADER_BYTES..header.total_bytes()) else {
        return base;
    };
    let inflated;
    let records = match header.compression() {
        0 => body,
        codec => match compression::inflate(codec, body, MAX_BATCH_BYTES as u64) {
            Ok(b) => {
                inflated = b;
                &inflated
            }
            Err(_) => return base,
        },
    };
    records::max_record_timestamp(records, header.records_count.get(), base)
        .map_or(base, |m| m.max(base))
}

/// What the log learns from a validated batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// The batch's `base_offset` field as it stands.
    pub base_offset: i64,
    /// Offset of the last record relative to the base offset.
    pub last_offset_delta: i32,
    /// Size of the whole batch in bytes, header included.
    pub total_bytes: usize,
    /// Largest record timestamp (ms) in the batch.
    pub max_timestamp: i64,
    /// Number of records.
    pub records_count: i32,
}

impl BatchInfo {
    /// `batch`: the whole batch, read only when its header's max timestamp is not to be
    /// believed.
    fn of(header: &BatchHeader, total_bytes: usize, batch: impl FnOnce() -> i64) -> BatchInfo {
        BatchInfo {
            base_offset: header.base_offset.get(),
            last_offset_delta: header.last_offset_delta.get(),
            total_bytes,
            max_timestamp: if header.max_timestamp_trusted() {
                header.max_timestamp.get()
            } else {
                batch()
            },
            records_count: header.records_count.get(),
        }
    }
}

/// Which record-count rule a batch is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CountRule {
    /// What producers send: one offset per record, at least one record.
    Produced,
    /// What a log may hold once compaction has removed records: fewer records than offsets
    /// (`records_count <= last_offset_delta + 1`), possibly none.
    Stored,
}

/// Checks length fields, magic and counts of the batch at the front of `bytes`, without the
/// CRC, by the rule for batches producers send (one record per offset). Returns its header.
pub fn check_framing(bytes: &[u8]) -> Result<&BatchHeader, BatchError> {
    check_framing_as(bytes, CountRule::Produced)
}

/// [`check_framing`] for batches read back from a log: a compacted batch may hold fewer
/// records than offsets, or none.
pub fn check_framing_stored(bytes: &[u8]) -> Result<&BatchHeader, BatchError> {
    check_framing_as(bytes, CountRule::Stored)
}

fn check_framing_as(bytes: &[u8], rule: CountRule) -> Result<&BatchHeader, BatchError> {
    let header = check_header(bytes, rule)?;
    let total = header.total_bytes();
    if bytes.len() < total {
        return Err(BatchError::Truncated {
            have: bytes.len(),
            need: total,
        });
    }
    Ok(header)
}

/// `check_framing` of the header alone: `bytes` need not hold the whole batch.
fn check_header(bytes: &[u8], rule: CountRule) -> Result<&BatchHeader, BatchError> {
    let Some(header) = BatchHeader::parse(bytes) else {
        return Err(BatchError::Truncated {
            have: bytes.len(),
            need: HEADER_BYTES,
        });
    };
    let len = header.batch_length.get();
    if len < (HEADER_BYTES - LOG_OVERHEAD) as i32 || len as usize > MAX_BATCH_BYTES {
        return Err(BatchError::BadLength(len));
    }
    if header.magic != MAGIC_V2 {
        return Err(BatchError::BadMagic(header.magic));
    }
    // Kafka's rule for batches producers send: one offset per record, at least one record;
    // compaction leaves batches with fewer records than offsets.
    let records = header.records_count.get();
    let delta = header.last_offset_delta.get();
    let bad = match rule {
        CountRule::Produced => records < 1 || delta != records - 1,
        CountRule::Stored => records < 0 || delta < 0 || delta < records - 1,
    };
    if bad {
        return Err(BatchError::BadCount {
            records,
            last_offset_delta: delta,
        });
    }
    let total = header.total_bytes();
    // An uncompressed record takes at least 7 bytes.
    if header.compression() == 0 && records as usize > (total - HEADER_BYTES) / 7 {
        return Err(BatchError::BadCount {
            records,
            last_offset_delta: delta,
        });
    }
    Ok(header)
}

/// [`validate_stored`] for one batch held in several pieces, in order (a read that spans
/// read chunks): the CRC runs over the pieces as they are, so they need not be joined.
pub fn validate_pieces(pieces: &[Bytes]) -> Result<BatchInfo, BatchError> {
    let have: usize = pieces.iter().map(Bytes::len).sum();
    let mut head = [0u8; HEADER_BYTES];
    let mut filled = 0;
    for p in pieces {
        let n = p.len().min(HEADER_BYTES - filled);
        head[filled..filled + n].copy_from_slice(&p[..n]);
        filled += n;
        if filled == HEADER_BYTES {
            break;
        }
    }
    let header = check_header(&head[..filled], CountRule::Stored)?;
    let total = header.total_bytes();
    if have < total {
        return Err(BatchError::Truncated { have, need: total });
    }
    let (mut crc, mut pos) = (0u32, 0usize);
    for p in pieces {
        let (from, to) = (CRC_START.max(pos), total.min(pos + p.len()));
        if from < to {
            crc = crc32c::crc32c_append(crc, &p[from - pos..to - pos]);
        }
        pos += p.len();
    }
    let expected = header.crc.get();
    if crc != expected {
        return Err(BatchError::ChecksumMismatch { expected, got: crc });
    }
    Ok(BatchInfo::of(header, total, || {
        let whole: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        max_timestamp(&whole[..total])
    }))
}

/// Fully validates the batch at the front of `bytes` as a producer sent it: framing, magic,
/// counts (one record per offset) and CRC-32C.
pub fn validate(bytes: &[u8]) -> Result<BatchInfo, BatchError> {
    validate_as(bytes, CountRule::Produced)
}

/// [`validate()`] for a batch read back from a log, which compaction may have left with fewer
/// records than offsets (recovery, reads).
pub fn validate_stored(bytes: &[u8]) -> Result<BatchInfo, BatchError> {
    validate_as(bytes, CountRule::Stored)
}

fn validate_as(bytes: &[u8], rule: CountRule) -> Result<BatchInfo, BatchError> {
    let header = check_framing_as(bytes, rule)?;
    let total = header.total_bytes();
    let got = crc32c::crc32c(&bytes[CRC_START..total]);
    let expected = header.crc.get();
    if got != expected {
        return Err(BatchError::ChecksumMismatch { expected, got });
    }
    Ok(BatchInfo::of(header, total, || {
        max_timestamp(&bytes[..total])
    }))
}

/// Validates every batch in `bytes` (a produce request's record set): they must tile it
/// exactly. Returns the batches' infos in order.
pub fn validate_all(bytes: &[u8]) -> Result<Vec<BatchInfo>, BatchError> {
    let mut infos = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let info = validate(&bytes[pos..])?;
        pos += info.total_bytes;
        infos.push(info);
    }
    if infos.is_empty() {
        return Err(BatchError::Truncated {
            have: 0,
            need: HEADER_BYTES,
        });
    }
    Ok(infos)
}

/// Sets base offset and partition leader epoch in place. Neither is covered by the CRC.
pub fn assign_offset(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    let (header, _) = BatchHeader::mut_from_prefix(batch).expect("caller validated the batch");
    header.base_offset.set(base_offset);
    header.partition_leader_epoch.set(leader_epoch);
}

/// Iterates over whole batches in a buffer, stopping at the first incomplete one.
pub struct Batches<'a> {
    bytes: &'a [u8],
}

impl<'a> Batches<'a> {
    /// Iterates over the batches at the front of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Batches { bytes }
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = (&'a BatchHeader, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let header = check_framing_stored(self.bytes).ok()?;
        let total = header.total_bytes();
        let (batch, rest) = self.bytes.split_at(total);
        self.bytes = rest;
        Some((header, batch))
    }
}

/// The records of a whole batch, a compressed one decompressed (at most `limit` bytes);
/// `None` if it does not decode.
pub(crate) fn decode_whole(whole: &[u8], limit: u64) -> Option<Vec<Record>> {
    let plain = compression::decompressed_batch(whole, limit).ok()?;
    decode_records(&plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch read in pieces (it spans read chunks) is validated without joining them:
    /// every split point gives the same answer as the whole, and a flipped byte in any piece
    /// is a checksum mismatch.
    #[test]
    fn pieces_validate_like_the_whole() {
        let b = RecordBatchBuilder::new(1_000)
            .record(Some(b"key"), Some(&[7u8; 300]), &[])
            .record(None, Some(b"v2"), &[])
            .build();
        let whole = validate(&b).expect("valid");
        for cut in [1, 20, 21, 22, 60, 61, 62, 200, b.len() - 1] {
            for second in [cut, (cut + 50).min(b.len())] {
                let pieces = [b.slice(..cut), b.slice(cut..second), b.slice(second..)];
                let info = validate_pieces(&pieces).expect("valid in pieces");
                assert_eq!(info.total_bytes, whole.total_bytes);
                assert_eq!(info.last_offset_delta, whole.last_offset_delta);
                let mut bad = b.to_vec();
                bad[cut.max(CRC_START)] ^= 1;
                let bad = Bytes::from(bad);
                let pieces = [bad.slice(..cut), bad.slice(cut..)];
                assert!(
                    validate_pieces(&pieces).is_err(),
                    "a flipped byte after a cut at {cut} was not detected"
                );
            }
        }
        assert!(matches!(
            validate_pieces(&[b.slice(..b.len() - 1)]),
            Err(BatchError::Truncated { .. })
        ));
    }

    #[test]
    fn builder_round_trips_and_validates() {
        let b = RecordBatchBuilder::new(1_000)
            .record(Some(b"k1"), Some(b"v1"), &[("h", b"x")])
            .record_at(1_005, None, Some(b"v2"), &[])
            .build();
        let info = validate(&b).expect("valid");
        assert_eq!(info.records_count, 2);
        assert_eq!(info.last_offset_delta, 1);
        assert_eq!(info.max_timestamp, 1_005);
        let mut m = b.to_vec();
        assign_offset(&mut m, 42, 7);
        assert!(
            validate(&m).is_ok(),
            "offset assignment must not break the CRC"
        );
        let recs = decode_records(&m).expect("decodes");
        assert_eq!(recs[1].offset, 43);
        assert_eq!(recs[1].timestamp, 1_005);
        assert_eq!(recs[0].key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(recs[0].headers[0].0, "h");
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let b = RecordBatchBuilder::new(5)
            .record(Some(b"key"), Some(b"value"), &[])
            .build();
        for i in CRC_START..b.len() {
            for bit in 0..8 {
                let mut m = b.to_vec();
                m[i] ^= 1 << bit;
                assert!(
                    validate(&m).is_err(),
                    "flip at byte {i} bit {bit} undetected"
                );
            }
        }
    }

    #[test]
    fn truncated_and_garbage_inputs_are_errors() {
        let b = RecordBatchBuilder::new(5)
            .record(None, Some(b"value"), &[])
            .build();
        for cut in 0..b.len() {
            assert!(validate(&b[..cut]).is_err());
        }
        assert!(validate(&[0u8; 100]).is_err());
        assert!(validate_all(&[]).is_err());
    }
}
