//! One batch's records read as Kafka's `DefaultRecord` reads them, a slice at a time, from the
//! batch's own bytes or through a bounded decoder (`compression.rs`): the per-record half of
//! the log validator (`validate.rs`), which drives it and yields between slices.

use super::compression::{InflateError, Inflater};
use super::rules::{invalid, Origin, Rules, TimestampType, RECORD_ERRORS_MAX};
use super::{BatchHeader, HEADER_BYTES};
use crate::error::{BatchError, Error, Invalid};

/// Reads one batch's records, a slice at a time ([`RecordWalk::step`]): from the batch's own
/// bytes, or through a bounded decoder for a compressed one.
pub(super) struct RecordWalk<'a> {
    source: Source<'a>,
    rules: &'a Rules,
    base_timestamp: i64,
    count: i32,
    /// Records read so far (the next one's expected offset delta).
    read: i32,
    /// Records before this batch in the record set.
    index_base: i32,
    max_timestamp: i64,
    errors: Vec<(i32, String)>,
    errors_total: usize,
    timestamp_errors: bool,
    /// The record being read, when a slice ended inside it.
    current: Option<InRecord>,
}

/// Where the walk is inside a record: its fixed fields are read, `stage` is next, after
/// `skip` more bytes of the field before it. A slice may end anywhere in a skip, so a record
/// of one huge value (a compression bomb) is walked in slices like any other.
struct InRecord {
    length: i32,
    /// Where the record ends (`Source::consumed` then).
    end: u64,
    timestamp: i64,
    keyless: bool,
    skip: u64,
    stage: Stage,
    /// Headers still to read (`Stage::HeaderKey`, `Stage::HeaderValue`).
    headers_left: i32,
}

#[derive(Clone, Copy)]
enum Stage {
    Key,
    Value,
    HeaderCount,
    HeaderKey,
    HeaderValue,
    End,
}

impl<'a> RecordWalk<'a> {
    pub(super) fn new(
        batch: &'a [u8],
        header: &BatchHeader,
        rules: &'a Rules,
        index_base: i32,
    ) -> Result<RecordWalk<'a>, Error> {
        let body = &batch[HEADER_BYTES..];
        let source = match header.compression() {
            0 => Source::Slice { data: body, pos: 0 },
            codec => {
                let inflater = Inflater::new(codec, body, rules.inflated_max_bytes)
                    .map_err(|e| inflate_error(e, rules))?;
                Source::Stream(Box::new(Stream {
                    inflater,
                    buf: vec![0u8; STREAM_BUF_BYTES].into_boxed_slice(),
                    pos: 0,
                    len: 0,
                    consumed: 0,
                }))
            }
        };
        Ok(RecordWalk {
            source,
            rules,
            base_timestamp: header.base_timestamp.get(),
            count: header.records_count.get(),
            read: 0,
            index_base,
            max_timestamp: -1,
            errors: Vec::new(),
            errors_total: 0,
            timestamp_errors: false,
            current: None,
        })
    }

    /// Bytes of records read so far (inflated, for a compressed batch).
    pub(super) fn walked(&self) -> u64 {
        self.source.consumed()
    }

    /// Reads records until `slice_bytes` more were consumed or all were read, stopping inside
    /// a record if need be. `Ok(true)`: more to read.
    pub(super) fn step(&mut self, slice_bytes: u64) -> Result<bool, Error> {
        let stop_at = self.source.consumed() + slice_bytes;
        while self.read < self.count {
            match self.record(stop_at) {
                Ok(true) => {}
                Ok(false) => return Ok(true),
                Err(e) => return Err(self.fail(e)),
            }
            self.read += 1;
            if self.source.consumed() >= stop_at && self.read < self.count {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// After the last record: the records must end where the batch does. Returns the max
    /// timestamp of the records.
    pub(super) fn finish(mut self) -> Result<i64, Error> {
        match self.source.at_end() {
            Ok(true) => {}
            Ok(false) => {
                return Err(invalid(format!(
                    "bytes left after the batch's {} records (records_count is wrong)",
                    self.count
                )))
            }
            Err(e) => return Err(self.fail(e)),
        }
        if !self.errors.is_empty() {
            let kind = if self.timestamp_errors {
                Invalid::Timestamp
            } else {
                Invalid::Record
            };
            let message = format!(
                "{} of the batch's records refused, the first: {}",
                self.errors_total, self.errors[0].1
            );
            return Err(Error::InvalidRecords {
                kind,
                message,
                record_errors: self.errors,
            });
        }
        Ok(self.max_timestamp)
    }

    fn fail(&self, e: Stop) -> Error {
        match e {
            Stop::End => invalid(format!(
                "the batch ends inside record {} of {} (a length or records_count is wrong)",
                self.read, self.count
            )),
            Stop::Bad(why) => invalid(format!("record {}: {why}", self.read)),
            Stop::Inflate(e) => inflate_error(e, self.rules),
        }
    }

    fn record_error(&mut self, timestamp: bool, why: String) {
        self.timestamp_errors |= timestamp;
        self.errors_total += 1;
        if self.errors.len() < RECORD_ERRORS_MAX {
            self.errors
                .push((self.index_base.saturating_add(self.read), why));
        }
    }

    /// Reads (on with) one record (Kafka's `DefaultRecord`), up to `stop_at` bytes consumed:
    /// `length varint | attributes i8 | timestamp_delta varlong | offset_delta varint |
    /// key_length varint | key | value_length varint | value | header_count varint |
    /// [header_key_length varint | header_key | header_value_length varint | header_value]`.
    /// `Ok(true)`: the record is done; `Ok(false)`: the slice ended inside it.
    fn record(&mut self, stop_at: u64) -> Result<bool, Stop> {
        let mut r = match self.current.take() {
            Some(r) => r,
            None => self.record_start()?,
        };
        let src = &mut self.source;
        loop {
            if r.skip > 0 {
                let now = src.consumed();
                let n = r.skip.min(stop_at.saturating_sub(now).max(1));
                src.skip(n)?;
                r.skip -= n;
                if r.skip > 0 {
                    self.current = Some(r);
                    return Ok(false);
                }
            }
            match r.stage {
                Stage::Key => {
                    let n = src.varint()?;
                    r.keyless = n < 0;
                    r.skip = field_bytes(src, n, r.end, "key")?;
                    r.stage = Stage::Value;
                }
                Stage::Value => {
                    let n = src.varint()?;
                    r.skip = field_bytes(src, n, r.end, "value")?;
                    r.stage = Stage::HeaderCount;
                }
                Stage::HeaderCount => {
                    r.headers_left = src.varint()?;
                    if r.headers_left < 0 {
                        return Err(Stop::Bad(format!("header count {}", r.headers_left)));
                    }
                    r.stage = Stage::HeaderKey;
                }
                Stage::HeaderKey if r.headers_left == 0 => r.stage = Stage::End,
                Stage::HeaderKey => {
                    let n = src.varint()?;
                    if n < 0 {
                        return Err(Stop::Bad(format!("header key length {n}")));
                    }
                    r.skip = field_bytes(src, n, r.end, "header key")?;
                    r.stage = Stage::HeaderValue;
                }
                Stage::HeaderValue => {
                    let n = src.varint()?;
                    r.skip = field_bytes(src, n, r.end, "header value")?;
                    r.headers_left -= 1;
                    r.stage = Stage::HeaderKey;
                }
                Stage::End => break,
            }
        }
        let read_to = src.consumed();
        if read_to != r.end {
            return Err(Stop::Bad(format!(
                "record length {}, but its fields take {}",
                r.length,
                r.length as u64 + read_to - r.end
            )));
        }
        self.record_done(&r);
        Ok(true)
    }

    /// A record's fixed fields, up to its key.
    fn record_start(&mut self) -> Result<InRecord, Stop> {
        let src = &mut self.source;
        let length = src.varint()?;
        if length < 1 {
            return Err(Stop::Bad(format!("record length {length}")));
        }
        let end = src.consumed() + length as u64;
        src.byte()?; // attributes: unused in v2
        let timestamp_delta = src.varlong()?;
        let offset_delta = src.varint()?;
        if offset_delta != self.read {
            return Err(Stop::Bad(format!(
                "offset delta {offset_delta} where {} was due",
                self.read
            )));
        }
        let Some(timestamp) = self.base_timestamp.checked_add(timestamp_delta) else {
            return Err(Stop::Bad(format!(
                "timestamp delta {timestamp_delta} overflows"
            )));
        };
        Ok(InRecord {
            length,
            end,
            timestamp,
            keyless: false,
            skip: 0,
            stage: Stage::Key,
            headers_left: 0,
        })
    }

    /// A whole record was read: its timestamp and key against the rules.
    fn record_done(&mut self, r: &InRecord) {
        let timestamp = r.timestamp;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        if r.keyless && self.rules.keys_required {
            self.record_error(
                false,
                "Compacted topic cannot accept message without key".into(),
            );
        }
        let rules = self.rules;
        if rules.origin == Origin::Client
            && rules.timestamp_type == TimestampType::CreateTime
            && timestamp != -1
            && (rules.now_ms.saturating_sub(timestamp) > rules.timestamp_before_max_ms
                || timestamp.saturating_sub(rules.now_ms) > rules.timestamp_after_max_ms)
        {
            let why = format!(
                "Timestamp {timestamp} of the record is out of range: it must be within [{}, {}]",
                rules.now_ms.saturating_sub(rules.timestamp_before_max_ms),
                rules.now_ms.saturating_add(rules.timestamp_after_max_ms)
            );
            self.record_error(true, why);
        }
    }
}

/// The bytes of a length-prefixed field of `length` (-1: null) that must end by `end`.
fn field_bytes(src: &Source<'_>, length: i32, end: u64, what: &str) -> Result<u64, Stop> {
    if length < -1 {
        return Err(Stop::Bad(format!("{what} length {length}")));
    }
    let n = length.max(0) as u64;
    if src.consumed() + n > end {
        return Err(Stop::Bad(format!(
            "{what} length {length} runs past the record's end"
        )));
    }
    Ok(n)
}

fn inflate_error(e: InflateError, rules: &Rules) -> Error {
    match e {
        InflateError::TooLarge { .. } => invalid(format!(
            "the batch decompresses to more than {} bytes (message.max.decompressed.bytes)",
            rules.inflated_max_bytes
        )),
        InflateError::UnknownCodec(c) => Error::InvalidBatch(BatchError::UnknownCodec(c)),
        InflateError::Corrupt { codec, reason } => Error::InvalidBatch(BatchError::Undecodable(
            format!("{}: {reason}", codec.name()),
        )),
    }
}

/// Why a walk stopped inside a record.
enum Stop {
    /// The bytes ran out.
    End,
    /// A field is invalid.
    Bad(String),
    /// The decoder failed or passed its limit.
    Inflate(InflateError),
}

/// A compressed batch's decoder writes into this much at a time (zeroed once per batch: small).
const STREAM_BUF_BYTES: usize = 16 << 10;

enum Source<'a> {
    Slice { data: &'a [u8], pos: usize },
    Stream(Box<Stream<'a>>),
}

struct Stream<'a> {
    inflater: Inflater<'a>,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    /// Bytes consumed before `buf[0]`.
    consumed: u64,
}

impl Stream<'_> {
    /// Refills the buffer; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, Stop> {
        self.consumed += self.len as u64;
        self.pos = 0;
        self.len = self
            .inflater
            .read_some(&mut self.buf)
            .map_err(Stop::Inflate)?;
        Ok(self.len > 0)
    }
}

impl Source<'_> {
    fn consumed(&self) -> u64 {
        match self {
            Source::Slice { pos, .. } => *pos as u64,
            Source::Stream(s) => s.consumed + s.pos as u64,
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, Stop> {
        match self {
            Source::Slice { data, pos } => {
                let b = *data.get(*pos).ok_or(Stop::End)?;
                *pos += 1;
                Ok(b)
            }
            Source::Stream(s) => {
                if s.pos == s.len && !s.fill()? {
                    return Err(Stop::End);
                }
                let b = s.buf[s.pos];
                s.pos += 1;
                Ok(b)
            }
        }
    }

    fn skip(&mut self, mut n: u64) -> Result<(), Stop> {
        match self {
            Source::Slice { data, pos } => {
                if n > (data.len() - *pos) as u64 {
                    return Err(Stop::End);
                }
                *pos += n as usize;
                Ok(())
            }
            Source::Stream(s) => {
                while n > 0 {
                    if s.pos == s.len && !s.fill()? {
                        return Err(Stop::End);
                    }
                    let k = n.min((s.len - s.pos) as u64);
                    s.pos += k as usize;
                    n -= k;
                }
                Ok(())
            }
        }
    }

    fn at_end(&mut self) -> Result<bool, Stop> {
        match self {
            Source::Slice { data, pos } => Ok(*pos == data.len()),
            Source::Stream(s) => Ok(s.pos == s.len && !s.fill()?),
        }
    }

    /// A zigzag varlong of at most 10 bytes.
    fn varlong(&mut self) -> Result<i64, Stop> {
        let mut raw = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            raw |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    break;
                }
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        Err(Stop::Bad("a varlong longer than 10 bytes".into()))
    }

    /// A zigzag varint of at most 5 bytes that fits 32 bits.
    fn varint(&mut self) -> Result<i32, Stop> {
        let mut raw = 0u32;
        for shift in (0..35).step_by(7) {
            let b = self.byte()?;
            if shift == 28 && b > 0x0f {
                return Err(Stop::Bad("a varint past 32 bits".into()));
            }
            raw |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32));
            }
        }
        Err(Stop::Bad("a varint longer than 5 bytes".into()))
    }
}
