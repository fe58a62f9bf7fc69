//! Kafka's log validator: what a record set must be before a log takes it, checked in one pass
//! over its bytes — framing, magic and CRC-32C of each batch, then every record: lengths,
//! varints, sequential offset deltas, key and header lengths, timestamps — compressed batches
//! through a bounded streaming decoder (`compression.rs`), never inflated whole.
//!
//! The pass also finds what the log needs to know of each batch: its true max timestamp
//! (computed from the records; a header that disagrees — sarama writes -1 — is rewritten, CRC
//! included, as Kafka does), and, on a `LogAppendTime` topic, stamps it with the append time.
//! The records are read by `record_walk.rs`. The result is a [`ValidBatches`], the only thing
//! `Log::append_valid` takes: a record set is never walked twice.
//!
//! What is refused, and with which error (`error::Error`):
//! - bytes that are not a batch — length, magic, CRC, an unknown codec, a compressed body that
//!   does not decode: [`Error::InvalidBatch`] (Kafka's CORRUPT_MESSAGE);
//! - a batch whose header or records lie — counts, offset deltas, lengths, varints, headers,
//!   more inflated bytes than [`Rules::inflated_max_bytes`], a control or a producer-less
//!   transactional batch from a client, a key missing on a compacted topic:
//!   [`Error::InvalidRecords`] of kind [`Invalid::Record`] (INVALID_RECORD);
//! - a timestamp outside `message.timestamp.before/after.max.ms`, or the `LogAppendTime` bit
//!   from a client: kind [`Invalid::Timestamp`] (INVALID_TIMESTAMP);
//! - a batch larger than `max_batch_bytes`: [`Error::BatchTooLarge`] (MESSAGE_TOO_LARGE).
//!
//! Nothing of a refused record set is written.

use bytes::{Bytes, BytesMut};
use zerocopy::FromBytes;

use super::record_walk::RecordWalk;
use super::rules::invalid;
use super::{
    check_framing, BatchHeader, BatchInfo, CRC_START, HEADER_BYTES, TIMESTAMP_TYPE_LOG_APPEND,
    TRANSACTIONAL_FLAG,
};
use crate::error::{BatchError, Error, Invalid};

pub use super::rules::{Origin, Rules, TimestampType, RECORD_ERRORS_MAX};

/// A record set that passed [`check`], with what the log needs of each batch. Its bytes are
/// the input's with any header rewritten (max timestamp, append time).
#[derive(Debug)]
pub struct ValidBatches {
    bytes: BytesMut,
    infos: Vec<BatchInfo>,
    log_append_time_ms: i64,
}

impl ValidBatches {
    /// The batches, whole, in order.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// What each batch is, in order.
    pub fn infos(&self) -> &[BatchInfo] {
        &self.infos
    }

    /// The append time the batches were stamped with (`LogAppendTime`), else -1.
    pub fn log_append_time_ms(&self) -> i64 {
        self.log_append_time_ms
    }

    /// True if any batch carries a producer id (idempotent or transactional).
    pub fn has_producer(&self) -> bool {
        let mut pos = 0;
        self.infos.iter().any(|i| {
            let at = pos;
            pos += i.total_bytes;
            BatchHeader::parse(&self.bytes[at..]).is_some_and(|h| h.producer_id.get() >= 0)
        })
    }

    /// How many offsets the batches take.
    pub fn offsets(&self) -> u64 {
        self.infos
            .iter()
            .map(|i| i.last_offset_delta as u64 + 1)
            .sum()
    }

    /// Gives the batches their offsets from `base` on, and the leader epoch, in place (neither
    /// is covered by the CRC); returns the offset after the last. The one place a log's
    /// offsets are handed out: a log's own append ([`crate::Log::append`]) and a replicated
    /// partition's leader (which proposes the batches) both call it.
    pub fn assign_offsets(&mut self, base: u64, leader_epoch: i32) -> u64 {
        let mut next = base;
        let mut pos = 0usize;
        for info in &self.infos {
            super::assign_offset(&mut self.bytes[pos..], next as i64, leader_epoch);
            next += info.last_offset_delta as u64 + 1;
            pos += info.total_bytes;
        }
        next
    }

    /// The batches, each as its own buffer.
    pub fn split(self) -> Vec<BytesMut> {
        let mut rest = self.bytes;
        self.infos
            .iter()
            .map(|i| rest.split_to(i.total_bytes))
            .collect()
    }

    pub(crate) fn into_parts(self) -> (BytesMut, Vec<BatchInfo>) {
        (self.bytes, self.infos)
    }
}

/// Where a long walk may let other tasks run: [`check`] calls it between slices of records
/// (and around the walk of a compressed batch, which holds a decoder's memory).
#[allow(async_fn_in_trait)]
pub trait Pause {
    /// Called between slices of a walk; `walked`: the bytes of records the batch's walk has
    /// read so far.
    async fn pause(&mut self, walked: u64);
    /// Called before a compressed batch's walk; [`Pause::inflated`] after it.
    async fn inflating(&mut self);
    /// The compressed batch's walk is over.
    fn inflated(&mut self);
}

/// Never pauses: for callers outside an executor (tests, fuzzing, tools).
pub struct NoPause;

impl Pause for NoPause {
    async fn pause(&mut self, _walked: u64) {}
    async fn inflating(&mut self) {}
    fn inflated(&mut self) {}
}

/// Yields to the executor's other tasks when the walk used up its time slice; past
/// [`LONG_WALK_BYTES`] of one batch (a batch inflating far beyond its size: a bomb, or close
/// to one) after every slice, through the reactor, so that the other clients of the core wait
/// for one slice at most, not for glommio's 10 ms preemption slice. Walks one compressed batch
/// at a time per thread: a decoder's window is held across the yields, so concurrent walks
/// would multiply it.
#[derive(Default)]
pub struct YieldPause {
    turn: Option<crate::watermark::FifoGuard<'static>>,
}

thread_local! {
    /// One compressed batch's walk at a time on this thread (see [`YieldPause`]).
    static INFLATE_TURN: &'static crate::watermark::FifoLock =
        Box::leak(Box::default());
}

/// Bytes of one batch's records after which [`YieldPause`] yields after every slice. A
/// producer's batch rarely holds more than 1 MiB of records (librdkafka's `batch.size`).
pub const LONG_WALK_BYTES: u64 = 1 << 20;

impl Pause for YieldPause {
    async fn pause(&mut self, walked: u64) {
        if walked > LONG_WALK_BYTES {
            // A timer, not `yield_now`: the task runs again only after the reactor has been
            // polled, so new requests on the core's sockets are seen and served first.
            glommio::timer::sleep(std::time::Duration::from_micros(1)).await;
        } else {
            glommio::yield_if_needed().await;
        }
    }

    async fn inflating(&mut self) {
        let lock = INFLATE_TURN.with(|l| *l);
        self.turn = lock.lock().await;
    }

    fn inflated(&mut self) {
        self.turn = None;
    }
}

/// Checks a record set (see the module docs) on an executor, yielding between slices.
pub async fn check(records: Bytes, rules: &Rules) -> Result<ValidBatches, Error> {
    check_with(records, rules, &mut YieldPause::default()).await
}

/// [`check`] outside an executor: the walk never yields.
pub fn check_blocking(records: Bytes, rules: &Rules) -> Result<ValidBatches, Error> {
    futures_lite::future::block_on(check_with(records, rules, &mut NoPause))
}

/// Bytes of records walked between two calls of [`Pause::pause`].
const SLICE_BYTES: u64 = 256 << 10;

/// [`check`] with the caller's [`Pause`].
pub async fn check_with(
    records: Bytes,
    rules: &Rules,
    pause: &mut impl Pause,
) -> Result<ValidBatches, Error> {
    if records.is_empty() {
        return Err(Error::InvalidBatch(BatchError::Truncated {
            have: 0,
            need: HEADER_BYTES,
        }));
    }
    let mut infos = Vec::new();
    let mut patches = Vec::new();
    let mut pos = 0;
    // Records before this batch: the index record errors are reported at.
    let mut record_index = 0i32;
    while pos < records.len() {
        let at = &records[pos..];
        let header = check_header(at, rules)?;
        let total = header.total_bytes();
        let batch = &at[..total];
        let compressed = header.compression() != 0;
        let mut walk = RecordWalk::new(batch, header, rules, record_index)?;
        if compressed {
            pause.inflating().await;
        }
        let walked = loop {
            match walk.step(SLICE_BYTES) {
                Ok(true) => pause.pause(walk.walked()).await,
                Ok(false) => break walk.finish(),
                Err(e) => break Err(e),
            }
        };
        if compressed {
            pause.inflated();
        }
        let max_timestamp = walked?;
        let attributes = header.attributes.get();
        let (want_attributes, want_max) = match rules.timestamp_type {
            TimestampType::LogAppendTime if rules.origin == Origin::Client => {
                (attributes | TIMESTAMP_TYPE_LOG_APPEND, rules.now_ms)
            }
            _ => (attributes, max_timestamp),
        };
        if want_attributes != attributes || want_max != header.max_timestamp.get() {
            patches.push((pos, want_attributes, want_max));
        }
        infos.push(BatchInfo {
            base_offset: header.base_offset.get(),
            last_offset_delta: header.last_offset_delta.get(),
            total_bytes: total,
            max_timestamp: want_max,
            records_count: header.records_count.get(),
        });
        record_index = record_index.saturating_add(header.records_count.get());
        pos += total;
    }
    let mut bytes = records
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    for (pos, attributes, max_timestamp) in patches {
        set_timestamps(&mut bytes[pos..], attributes, max_timestamp);
    }
    let stamped =
        rules.timestamp_type == TimestampType::LogAppendTime && rules.origin == Origin::Client;
    Ok(ValidBatches {
        bytes,
        infos,
        log_append_time_ms: if stamped { rules.now_ms } else { -1 },
    })
}

/// The batch-level rules: framing, CRC, size, codec, the flags a client may set.
fn check_header<'a>(at: &'a [u8], rules: &Rules) -> Result<&'a BatchHeader, Error> {
    let header = check_framing(at).map_err(|e| match e {
        BatchError::BadCount {
            records,
            last_offset_delta,
        } => invalid(format!(
            "inconsistent batch: records_count {records}, last_offset_delta {last_offset_delta}"
        )),
        other => Error::InvalidBatch(other),
    })?;
    let total = header.total_bytes();
    if total > rules.max_batch_bytes {
        return Err(Error::BatchTooLarge {
            size: total,
            max: rules.max_batch_bytes,
        });
    }
    let got = crc32c::crc32c(&at[CRC_START..total]);
    let expected = header.crc.get();
    if got != expected {
        return Err(Error::InvalidBatch(BatchError::ChecksumMismatch {
            expected,
            got,
        }));
    }
    let codec = header.compression();
    if super::compression::Codec::from_id(codec).is_none() {
        return Err(Error::InvalidBatch(BatchError::UnknownCodec(codec)));
    }
    let attributes = header.attributes.get();
    let producer_id = header.producer_id.get();
    if attributes & TRANSACTIONAL_FLAG != 0 && producer_id < 0 {
        return Err(invalid(
            "a transactional batch without a producer id".into(),
        ));
    }
    if rules.origin == Origin::Client {
        if header.is_control() {
            return Err(invalid("clients may not write control records".into()));
        }
        if producer_id >= 0 && header.base_sequence.get() < 0 {
            return Err(invalid(format!(
                "invalid sequence number {} in a batch of producer {producer_id}",
                header.base_sequence.get()
            )));
        }
        if attributes & TIMESTAMP_TYPE_LOG_APPEND != 0 {
            return Err(Error::InvalidRecords {
                kind: Invalid::Timestamp,
                message: "producers may not set the timestamp type to LogAppendTime".into(),
                record_errors: Vec::new(),
            });
        }
    }
    if header.is_control() && header.compression() != 0 {
        return Err(invalid("a compressed control batch".into()));
    }
    Ok(header)
}

/// Sets a batch's attributes and max timestamp and mends its CRC without reading the records:
/// both fields lie in the first bytes the CRC covers, and CRC-32C is linear, so the new CRC is
/// the old one plus the change of those bytes shifted over the rest
/// (`crc(P'R) = crc(PR) ^ shift(crc(P) ^ crc(P'), |R|)`).
pub fn set_timestamps(batch: &mut [u8], attributes: i16, max_timestamp: i64) {
    const PREFIX_END: usize = 43; // attributes (21..23) .. max_timestamp (35..43)
    let total = BatchHeader::parse(batch).map_or(0, |h| h.total_bytes());
    assert!(
        total >= HEADER_BYTES && batch.len() >= total,
        "set_timestamps on a batch that was not checked"
    );
    let before = crc32c::crc32c(&batch[CRC_START..PREFIX_END]);
    let (header, _) = BatchHeader::mut_from_prefix(batch).expect("checked above");
    header.attributes.set(attributes);
    header.max_timestamp.set(max_timestamp);
    let old_crc = header.crc.get();
    let after = crc32c::crc32c(&batch[CRC_START..PREFIX_END]);
    let crc = old_crc ^ crc32c::crc32c_combine(before ^ after, 0, total - PREFIX_END);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}
