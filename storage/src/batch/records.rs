//! Records inside v2 batches: decoding them ([`decode_records`], [`RawRecord`] for the raw
//! slices compaction filters), building uncompressed batches ([`RecordBatchBuilder`]), and
//! rebuilding a stored batch with some of its records left out ([`rebuild_batch`]).
//!
//! Record layout (varints are zigzag, as Kafka's):
//!
//! ```text
//! length varint | attributes i8 | timestamp_delta varlong | offset_delta varint |
//! key_length varint | key | value_length varint | value | header_count varint | headers
//! ```
//!
//! A record's offset and timestamp are deltas from its batch's base offset and base
//! timestamp, so a batch rebuilt with the same base offset and base timestamp keeps its
//! surviving records' bytes exactly as they were.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    check_framing_stored, BatchHeader, COMPRESSION_MASK, CONTROL_FLAG, CRC_START, HEADER_BYTES,
    LOG_OVERHEAD, MAGIC_V2, TRANSACTIONAL_FLAG,
};
/// One decoded record (uncompressed batches only); used by tests, examples and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its offset (the batch's base offset plus its offset delta).
    pub offset: i64,
    /// Its timestamp in ms (the batch's base timestamp plus its timestamp delta).
    pub timestamp: i64,
    /// Its key; `None` for a null key.
    pub key: Option<Bytes>,
    /// Its value; `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// Its headers, in order: name and value (`None` for a null value).
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Decodes the records of an uncompressed batch. Returns `None` for compressed batches or
/// malformed records.
pub fn decode_records(batch: &[u8]) -> Option<Vec<Record>> {
    let header = check_framing_stored(batch).ok()?;
    if header.compression() != 0 {
        return None;
    }
    let base_offset = header.base_offset.get();
    let base_ts = header.base_timestamp.get();
    // A LogAppendTime batch's records all carry its append time, its max timestamp.
    let append_time = header
        .is_log_append_time()
        .then(|| header.max_timestamp.get());
    let mut buf = &batch[HEADER_BYTES..header.total_bytes()];
    // A record takes at least 7 bytes: never reserve more than the bytes can hold.
    let plausible = (header.records_count.get().max(0) as usize).min(buf.len() / 7);
    let mut out = Vec::with_capacity(plausible);
    for _ in 0..header.records_count.get() {
        let len = read_varint(&mut buf)?;
        if len < 0 || len as usize > buf.len() {
            return None;
        }
        let (mut rec, rest) = buf.split_at(len as usize);
        buf = rest;
        let _attributes = *rec.first()?;
        rec = &rec[1..];
        let ts_delta = read_varlong(&mut rec)?;
        let offset_delta = read_varint(&mut rec)?;
        let key = read_bytes(&mut rec)?;
        let value = read_bytes(&mut rec)?;
        let n_headers = read_varint(&mut rec)?;
        let mut headers = Vec::new();
        for _ in 0..n_headers.max(0) {
            let k = read_bytes(&mut rec)??;
            let v = read_bytes(&mut rec)?;
            // Kafka reads header keys as UTF-8 with replacement, never refusing them.
            headers.push((String::from_utf8_lossy(&k).into_owned(), v));
        }
        out.push(Record {
            offset: base_offset.checked_add(i64::from(offset_delta))?,
            timestamp: match append_time {
                Some(t) => t,
                None => base_ts.checked_add(ts_delta)?,
            },
            key,
            value,
            headers,
        });
    }
    Some(out)
}

/// The largest record timestamp of an (uncompressed) records section of `count` records
/// relative to `base_timestamp`; `None` if a record does not decode.
pub fn max_record_timestamp(mut body: &[u8], count: i32, base_timestamp: i64) -> Option<i64> {
    let mut max = None;
    for _ in 0..count.max(0) {
        let len = read_varint(&mut body)?;
        if len < 0 || len as usize > body.len() {
            return None;
        }
        let (rec, rest) = body.split_at(len as usize);
        body = rest;
        let mut rec = rec.get(1..)?; // attributes
        let ts = base_timestamp.checked_add(read_varlong(&mut rec)?)?;
        max = Some(max.map_or(ts, |m: i64| m.max(ts)));
    }
    max
}

fn read_varlong(buf: &mut &[u8]) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..70).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}

fn read_varint(buf: &mut &[u8]) -> Option<i32> {
    read_varlong(buf).and_then(|v| i32::try_from(v).ok())
}

fn read_bytes(buf: &mut &[u8]) -> Option<Option<Bytes>> {
    read_slice(buf).map(|b| b.map(Bytes::copy_from_slice))
}

fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// Builds uncompressed v2 batches: for tests, examples, benchmarks and the native client.
pub struct RecordBatchBuilder {
    base_timestamp: i64,
    max_timestamp: i64,
    attributes: i16,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    count: i32,
    /// The offset delta of the next record (`count` unless offsets were left out).
    next_delta: i32,
    /// At least this last offset delta (a batch covering offsets past its last record).
    last_delta: i32,
    records: BytesMut,
}

impl RecordBatchBuilder {
    /// A builder whose records are stamped relative to `base_timestamp` (ms since epoch).
    pub fn new(base_timestamp: i64) -> Self {
        RecordBatchBuilder {
            base_timestamp,
            max_timestamp: base_timestamp,
            attributes: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            count: 0,
            next_delta: 0,
            last_delta: 0,
            records: BytesMut::new(),
        }
    }

    /// Stamps the batch as an idempotent producer's: its id, epoch and the sequence number
    /// of its first record.
    pub fn producer(mut self, producer_id: i64, epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the transactional and control bits (`TRANSACTIONAL_FLAG`, `CONTROL_FLAG`).
    pub fn attributes(mut self, bits: i16) -> Self {
        self.attributes |= bits & (TRANSACTIONAL_FLAG | CONTROL_FLAG);
        self
    }

    /// Compresses the records with `codec` (1 gzip, 2 snappy, 3 lz4, 4 zstd) when the batch
    /// is built.
    pub fn compression(mut self, codec: u8) -> Self {
        self.attributes =
            (self.attributes & !COMPRESSION_MASK) | (i16::from(codec) & COMPRESSION_MASK);
        self
    }

    /// Leaves offsets out: the next record gets offset delta `delta` (ignored unless it is
    /// past the delta the next record would get), as a compacted batch holds its records.
    pub fn next_offset_delta(mut self, delta: i32) -> Self {
        self.next_delta = self.next_delta.max(delta);
        self
    }

    /// Makes the batch cover offsets up to `delta` past its base even where its last record
    /// is before that (as compaction leaves a batch whose last records were removed, and
    /// consumers move past it to the offset after its last offset delta).
    pub fn last_offset_delta(mut self, delta: i32) -> Self {
        self.last_delta = self.last_delta.max(delta);
        self
    }

    /// Adds a record stamped with the base timestamp.
    pub fn record(
        self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) -> Self {
        let ts = self.base_timestamp;
        self.record_at(ts, key, value, headers)
    }

    /// Adds a record stamped with `timestamp` (ms).
    pub fn record_at(
        mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) -> Self {
        let mut body = BytesMut::new();
        body.put_u8(0);
        put_varlong(&mut body, timestamp - self.base_timestamp);
        put_varlong(&mut body, i64::from(self.next_delta));
        for field in [key, value] {
            match field {
                Some(b) => {
                    put_varlong(&mut body, b.len() as i64);
                    body.put_slice(b);
                }
                None => put_varlong(&mut body, -1),
            }
        }
        put_varlong(&mut body, headers.len() as i64);
        for (k, v) in headers {
            put_varlong(&mut body, k.len() as i64);
            body.put_slice(k.as_bytes());
            put_varlong(&mut body, v.len() as i64);
            body.put_slice(v);
        }
        put_varlong(&mut self.records, body.len() as i64);
        self.records.put_slice(&body);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        self.last_delta = self.last_delta.max(self.next_delta);
        self.next_delta += 1;
        self.count += 1;
        self
    }

    /// Number of records added so far.
    pub fn len(&self) -> i32 {
        self.count
    }

    /// True if no record was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded batch, base offset 0, CRC filled in.
    ///
    /// Panics if the codec set by [`RecordBatchBuilder::compression`] is unknown.
    pub fn build(self) -> Bytes {
        let codec = (self.attributes & COMPRESSION_MASK) as u8;
        let compressed;
        let body: &[u8] = if codec == 0 {
            &self.records
        } else {
            compressed = super::compression::compress(codec, &self.records)
                .unwrap_or_else(|e| panic!("RecordBatchBuilder: {e}"));
            &compressed
        };
        let mut out = BytesMut::with_capacity(HEADER_BYTES + body.len());
        let batch_length = (HEADER_BYTES - LOG_OVERHEAD + body.len()) as i32;
        out.put_i64(0);
        out.put_i32(batch_length);
        out.put_i32(-1);
        out.put_i8(MAGIC_V2);
        out.put_u32(0);
        out.put_i16(self.attributes);
        out.put_i32(self.last_delta);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.count);
        out.put_slice(body);
        let crc = crc32c::crc32c(&out[CRC_START..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }
}

/// One record of a batch as raw bytes, for filtering without re-encoding.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    /// The record's offset relative to its batch's base offset.
    pub offset_delta: i32,
    /// Its key; `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// True for a null value (a tombstone).
    pub tombstone: bool,
    /// The whole record as stored, length prefix included.
    pub bytes: &'a [u8],
}

/// Splits an (uncompressed) records section into its records. `None` if a record is
/// malformed or the section holds other than `count` records.
pub fn raw_records(mut body: &[u8], count: i32) -> Option<Vec<RawRecord<'_>>> {
    let mut out = Vec::with_capacity((count.max(0) as usize).min(body.len() / 7));
    for _ in 0..count.max(0) {
        let all = body;
        let len = read_varint(&mut body)?;
        if len < 0 || len as usize > body.len() {
            return None;
        }
        let prefix = all.len() - body.len();
        let (mut rec, rest) = body.split_at(len as usize);
        let bytes = &all[..prefix + len as usize];
        body = rest;
        rec = rec.get(1..)?; // attributes
        read_varlong(&mut rec)?; // timestamp delta
        let offset_delta = read_varint(&mut rec)?;
        let key = read_slice(&mut rec)?;
        let value = read_slice(&mut rec)?;
        out.push(RawRecord {
            offset_delta,
            key,
            tombstone: value.is_none(),
            bytes,
        });
    }
    body.is_empty().then_some(out)
}

fn read_slice<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = read_varint(buf)?;
    if len < 0 {
        return Some(None);
    }
    let len = len as usize;
    if len > buf.len() {
        return None;
    }
    let (b, rest) = buf.split_at(len);
    *buf = rest;
    Some(Some(b))
}

/// A stored batch rebuilt around a new records section: `body` (already compressed if
/// `attributes` says so) holding `records_count` records. Every other header field —
/// base offset, last offset delta, timestamps, producer id, epoch and base sequence — is
/// `original`'s, so the batch keeps its place in the log and its producer's sequence range;
/// the length and CRC are computed anew.
pub fn rebuild_batch(
    original: &BatchHeader,
    attributes: i16,
    records_count: i32,
    body: &[u8],
) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_BYTES + body.len());
    out.put_i64(original.base_offset.get());
    out.put_i32((HEADER_BYTES - LOG_OVERHEAD + body.len()) as i32);
    out.put_i32(original.partition_leader_epoch.get());
    out.put_i8(MAGIC_V2);
    out.put_u32(0);
    out.put_i16(attributes);
    out.put_i32(original.last_offset_delta.get());
    out.put_i64(original.base_timestamp.get());
    out.put_i64(original.max_timestamp.get());
    out.put_i64(original.producer_id.get());
    out.put_i16(original.producer_epoch.get());
    out.put_i32(original.base_sequence.get());
    out.put_i32(records_count);
    out.put_slice(body);
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}
