//! Errors are values: I/O errors carry the operation, path and position; corrupt bytes and bad
//! caller input have their own kinds. Nothing in the engine panics on bad bytes.

use std::path::PathBuf;

/// The engine's `Result`: [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a storage operation can fail with. [`Error::is_storage_error`] tells the disk's
/// failures from the caller's; [`Error::is_no_space`] a full disk.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what was being done and where.
    Io {
        /// What was being done ("write", "fdatasync", "open", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The file position, when the operation has one.
        position: Option<u64>,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Bytes that do not form a valid record batch (bad magic, length or CRC).
    CorruptBatch {
        /// Position of the batch in its segment file.
        position: u64,
        /// What is wrong with it.
        reason: BatchError,
    },
    /// An index or metadata file that fails its own checks.
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Input rejected before anything was written (e.g. an invalid batch from a producer).
    InvalidBatch(BatchError),
    /// Batches whose records break the log validator's rules (`batch::validate`): nothing was
    /// written.
    InvalidRecords {
        /// Which rule: a record's structure or key, or a timestamp.
        kind: Invalid,
        /// What is wrong, for the producer.
        message: String,
        /// The records at fault: index in the record set and why (at most
        /// [`crate::batch::validate::RECORD_ERRORS_MAX`]).
        record_errors: Vec<(i32, String)>,
    },
    /// A batch larger than the log accepts (`max_batch_bytes`).
    BatchTooLarge {
        /// The batch's size in bytes.
        size: usize,
        /// The largest accepted.
        max: usize,
    },
    /// The requested offset is outside `[log_start_offset, log_end_offset]`.
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The log's first offset.
        log_start_offset: u64,
        /// The offset after the log's last.
        log_end_offset: u64,
    },
    /// An idempotent producer's batch does not follow its previous one (Kafka's
    /// OUT_OF_ORDER_SEQUENCE_NUMBER).
    OutOfOrderSequence {
        /// The producer.
        producer_id: i64,
        /// The first sequence number that would follow.
        expected: i32,
        /// The batch's first sequence number.
        got: i32,
    },
    /// A batch from an older epoch of its producer id (Kafka's INVALID_PRODUCER_EPOCH).
    InvalidProducerEpoch {
        /// The producer.
        producer_id: i64,
        /// The batch's epoch.
        epoch: i16,
        /// The producer's current epoch.
        current: i16,
    },
    /// A truncation below the committed offset (`Log::truncate_to`): committed data is never
    /// cut. Nothing was changed.
    BelowCommitted {
        /// The offset asked for.
        offset: u64,
        /// The committed offset.
        committed: u64,
    },
    /// A truncation point inside a batch (`Log::truncate_to` cuts whole batches only).
    /// Nothing was changed.
    NotBatchBoundary {
        /// The offset asked for.
        offset: u64,
        /// The base offset of the batch that holds it.
        batch_base_offset: u64,
    },
    /// A call the log's mode or state does not allow (e.g. `Log::set_committed` without
    /// `LogConfig::committed_reads`).
    InvalidArgument(String),
    /// An earlier write failed; the log refuses further appends until it is reopened.
    LogFailed(String),
    /// The object store of the remote tier failed or holds bad data (`tier`): a failed
    /// request, a missing object the manifest lists, or bytes that fail their CRC.
    Remote(String),
    /// An append from a client refused while the object store fails and the closed segments
    /// waiting for upload exceed `LogConfig::remote_backlog_max_bytes`: the local disk is
    /// not filled without bound. Nothing was written; the same append succeeds once an upload
    /// does.
    UploadBacklog {
        /// Bytes of closed segments not uploaded yet.
        pending: u64,
        /// The bound.
        max: u64,
    },
    /// The log was closed.
    Closed,
}

/// Which of the log validator's rules a record set breaks (Kafka's INVALID_RECORD and
/// INVALID_TIMESTAMP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// A batch's header or records lie, or a record lacks the key a compacted topic needs.
    Record,
    /// A timestamp outside the topic's bounds, or a timestamp type a producer may not set.
    Timestamp,
}

/// Why bytes are not a valid v2 record batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchError {
    /// Fewer bytes than a batch header, or than the header's length says.
    Truncated {
        /// Bytes there are.
        have: usize,
        /// Bytes the batch needs.
        need: usize,
    },
    /// `batch_length` is smaller than the header or absurdly large.
    BadLength(i32),
    /// The magic byte is not 2.
    BadMagic(i8),
    /// CRC-32C over attributes..end does not match the header.
    ChecksumMismatch {
        /// The CRC the header holds.
        expected: u32,
        /// The CRC of the bytes.
        got: u32,
    },
    /// `records_count` or `last_offset_delta` are inconsistent.
    BadCount {
        /// The header's `records_count`.
        records: i32,
        /// The header's `last_offset_delta`.
        last_offset_delta: i32,
    },
    /// The batch's base offset does not follow the previous batch.
    OffsetGap {
        /// The offset after the previous batch.
        expected: u64,
        /// The batch's base offset.
        got: i64,
    },
    /// The batch's leader epoch is not the one the log's leader-epoch list gives for its
    /// offset (found by recovery: the epoch is outside the CRC).
    EpochMismatch {
        /// The epoch the list gives.
        expected: i32,
        /// The batch's `partition_leader_epoch`.
        got: i32,
    },
    /// The compression codec (`attributes & 7`) is none of Kafka's (5-7).
    UnknownCodec(u8),
    /// The compressed records do not decode.
    Undecodable(String),
    /// The batch would end past the largest file position a segment's offset index can
    /// address ([`SEGMENT_POSITION_MAX`](crate::config::SEGMENT_POSITION_MAX)).
    PastSegmentLimit {
        /// The file position the batch would end at.
        end: u64,
    },
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchError::Truncated { have, need } => {
                write!(f, "truncated batch: {have} bytes, need {need}")
            }
            BatchError::BadLength(l) => write!(f, "bad batch length {l}"),
            BatchError::BadMagic(m) => write!(f, "unsupported magic {m} (need 2)"),
            BatchError::ChecksumMismatch { expected, got } => {
                write!(f, "crc32c mismatch: header says {expected:#010x}, data has {got:#010x}")
            }
            BatchError::BadCount {
                records,
                last_offset_delta,
            } => write!(
                f,
                "inconsistent counts: records_count {records}, last_offset_delta {last_offset_delta}"
            ),
            BatchError::OffsetGap { expected, got } => {
                write!(f, "base offset {got} does not follow {expected}")
            }
            BatchError::EpochMismatch { expected, got } => {
                write!(f, "leader epoch {got} where the log has {expected}")
            }
            BatchError::UnknownCodec(c) => write!(f, "unknown compression codec {c}"),
            BatchError::Undecodable(why) => write!(f, "compressed records do not decode: {why}"),
            BatchError::PastSegmentLimit { end } => write!(
                f,
                "batch would end at file position {end}, past what a segment index addresses"
            ),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io {
                op,
                path,
                position,
                source,
            } => match position {
                Some(p) => write!(f, "{op} {} at {p}: {source}", path.display()),
                None => write!(f, "{op} {}: {source}", path.display()),
            },
            Error::CorruptBatch { position, reason } => {
                write!(f, "corrupt batch at file position {position}: {reason}")
            }
            Error::CorruptFile { path, reason } => {
                write!(f, "corrupt file {}: {reason}", path.display())
            }
            Error::InvalidBatch(reason) => write!(f, "invalid record batch: {reason}"),
            Error::InvalidRecords { message, .. } => write!(f, "invalid records: {message}"),
            Error::BatchTooLarge { size, max } => {
                write!(f, "record batch of {size} bytes exceeds the limit of {max}")
            }
            Error::OutOfOrderSequence {
                producer_id,
                expected,
                got,
            } => write!(
                f,
                "producer {producer_id}: sequence {got} out of order (expected {expected})"
            ),
            Error::InvalidProducerEpoch {
                producer_id,
                epoch,
                current,
            } => write!(
                f,
                "producer {producer_id}: epoch {epoch} is older than its current epoch {current}"
            ),
            Error::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "offset {offset} out of range [{log_start_offset}, {log_end_offset}]"
            ),
            Error::BelowCommitted { offset, committed } => write!(
                f,
                "cannot truncate to {offset}: below the committed offset {committed}"
            ),
            Error::NotBatchBoundary {
                offset,
                batch_base_offset,
            } => write!(
                f,
                "cannot truncate to {offset}: inside the batch at {batch_base_offset}"
            ),
            Error::InvalidArgument(why) => write!(f, "invalid call: {why}"),
            Error::LogFailed(why) => write!(f, "log failed after an earlier I/O error: {why}"),
            Error::Remote(why) => write!(f, "remote storage: {why}"),
            Error::UploadBacklog { pending, max } => write!(
                f,
                "the object store of the remote tier is failing and {pending} bytes of closed \
                 segments wait for upload (the bound is {max}): appends are refused until an \
                 upload succeeds"
            ),
            Error::Closed => write!(f, "log is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
        position: Option<u64>,
        source: impl Into<std::io::Error>,
    ) -> Error {
        Error::Io {
            op,
            path: path.into(),
            position,
            source: source.into(),
        }
    }

    /// True for errors that mean the disk failed (Kafka's KAFKA_STORAGE_ERROR).
    pub fn is_storage_error(&self) -> bool {
        matches!(
            self,
            Error::Io { .. }
                | Error::LogFailed(_)
                | Error::CorruptFile { .. }
                | Error::CorruptBatch { .. }
                | Error::Remote(_)
        )
    }

    /// True when the disk is full (ENOSPC): the caller may retry once space is freed.
    pub fn is_no_space(&self) -> bool {
        match self {
            // glommio's errors arrive re-wrapped, without the raw errno but with its kind.
            Error::Io { source, .. } => {
                source.raw_os_error() == Some(28)
                    || source.kind() == std::io::ErrorKind::StorageFull
            }
            Error::LogFailed(why) => why.contains("No space left"),
            _ => false,
        }
    }
}
