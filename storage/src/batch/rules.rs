//! What a record set is checked against (Kafka's log validator settings), shared by the
//! validator (`validate.rs`) and its record walk (`record_walk.rs`).

use crate::error::{Error, Invalid};

/// Record errors listed in one refusal at most (the count says how many there were).
pub const RECORD_ERRORS_MAX: usize = 1000;

/// Kafka's `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// Records keep the producer's timestamps.
    #[default]
    CreateTime,
    /// Every batch is stamped with the time the log appended it.
    LogAppendTime,
}

/// Who wrote the record set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A producer: held to every rule.
    Client,
    /// The broker itself (transaction markers, its internal logs): control batches allowed,
    /// timestamps not range-checked.
    Internal,
}

/// What a record set is checked against.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Who wrote it.
    pub origin: Origin,
    /// The time now (ms): the append time, and what timestamps are checked against.
    pub now_ms: i64,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: how far in the past a record's timestamp may be.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far in the future.
    pub timestamp_after_max_ms: i64,
    /// Every record must have a key (a compacted topic).
    pub keys_required: bool,
    /// The largest batch, in bytes (`max.message.bytes`).
    pub max_batch_bytes: usize,
    /// The most bytes a compressed batch may inflate to.
    pub inflated_max_bytes: u64,
}

impl Rules {
    /// The rules of a log with `config`, for a record set from `origin`, at `now_ms`.
    pub fn of(config: &crate::LogConfig, origin: Origin, now_ms: i64) -> Rules {
        Rules {
            origin,
            now_ms,
            timestamp_type: config.timestamp_type,
            timestamp_before_max_ms: config.timestamp_before_max_ms,
            timestamp_after_max_ms: config.timestamp_after_max_ms,
            keys_required: config.cleanup_compact,
            max_batch_bytes: config.max_batch_bytes,
            inflated_max_bytes: config.inflated_max_bytes,
        }
    }
}

/// An `InvalidRecords` refusal of kind `Record`, without record errors.
pub(super) fn invalid(message: String) -> Error {
    Error::InvalidRecords {
        kind: Invalid::Record,
        message,
        record_errors: Vec::new(),
    }
}
