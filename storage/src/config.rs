//! Per-log settings, named after Kafka's topic configs where one exists.

use std::time::Duration;

/// The largest `segment_bytes` the engine honours (Kafka's limit for `segment.bytes`,
/// 2^31 - 1): a segment rolls before it would pass this, whatever is configured, so that
/// every position fits the offset index's 32-bit entries with room for one batch (at most
/// `batch::MAX_BATCH_BYTES`) beyond it.
pub const SEGMENT_BYTES_MAX: u64 = i32::MAX as u64;

/// The largest file position an offset-index entry (`u32`) can hold. Recovery cuts a
/// segment at a batch that would end past it instead of indexing a wrapped position.
pub const SEGMENT_POSITION_MAX: u64 = u32::MAX as u64;

const _: () =
    assert!(SEGMENT_BYTES_MAX + crate::batch::MAX_BATCH_BYTES as u64 <= SEGMENT_POSITION_MAX);

/// How a [`crate::Log`] lays out and retains its data.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `segment.bytes`: roll to a new segment when the active one would pass this size
    /// (clamped to [`SEGMENT_BYTES_MAX`]).
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is older than this.
    pub segment_ms: Option<u64>,
    /// `retention.ms`: delete whole segments whose newest timestamp is older than this.
    pub retention_ms: Option<u64>,
    /// `retention.bytes`: delete oldest whole segments while the log is larger than this.
    pub retention_bytes: Option<u64>,
    /// `index.interval.bytes`: one offset-index entry per this many bytes of log.
    pub index_interval_bytes: u32,
    /// `max.message.bytes`: largest batch accepted by `append`.
    pub max_batch_bytes: usize,
    /// The most bytes one compressed batch from a producer may decompress to (weir's
    /// `message.max.decompressed.bytes`): the validator walks compressed records through a
    /// bounded decoder and refuses a batch past this (`batch::validate`).
    pub inflated_max_bytes: u64,
    /// `message.timestamp.type`: keep the producers' timestamps (`CreateTime`) or stamp each
    /// batch with its append time (`LogAppendTime`).
    pub timestamp_type: crate::batch::TimestampType,
    /// `message.timestamp.before.max.ms`: a producer's record may be at most this much older
    /// than the broker's clock (CreateTime).
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: at most this much newer.
    pub timestamp_after_max_ms: i64,
    /// Size of one direct write (and of the in-memory chunk appends are copied into).
    pub write_chunk_bytes: usize,
    /// How many direct writes one log keeps in flight before `append` waits.
    pub writes_in_flight: usize,
    /// Smallest step by which a segment file's preallocated (fallocated) room grows ahead of
    /// the write position; steps double with the reservation, up to the segment size. An
    /// empty log reserves nothing until its first append, then one write chunk, so idle
    /// partitions reserve little.
    pub preallocate_bytes: u64,
    /// Size of one direct read of old data.
    pub read_chunk_bytes: usize,
    /// Bytes of sequential read-ahead kept in flight for catch-up readers.
    pub read_ahead_bytes: usize,
    /// `cleanup.policy` contains `delete`: `retention.ms` and `retention.bytes` delete old
    /// segments. Without it they are ignored.
    pub cleanup_delete: bool,
    /// `cleanup.policy` contains `compact`: [`crate::Log::clean`] keeps the latest record per
    /// key (see `log/clean.rs`).
    pub cleanup_compact: bool,
    /// `min.cleanable.dirty.ratio`: a compacted log is worth cleaning once this share of its
    /// closed segments' bytes was written since its last cleaning.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a segment is cleaned only once its newest record is this old.
    pub min_compaction_lag_ms: u64,
    /// `max.compaction.lag.ms`: a log whose oldest uncleaned segment's newest record is older
    /// than this is cleaned whatever its dirty ratio.
    pub max_compaction_lag_ms: Option<u64>,
    /// `delete.retention.ms`: how long a tombstone (a record with a null value) is kept after
    /// a cleaning has removed the older records of its key, so that consumers see it.
    pub delete_retention_ms: u64,
    /// `producer.id.expiration.ms`: a producer id whose last batch was appended longer ago
    /// than this and that has no open transaction is forgotten at the next retention pass or
    /// roll; its next batch is then accepted at any sequence.
    pub producer_id_expiration_ms: u64,
    /// Replicated mode (issue 19, `docs/replication.md` §3.6): readers see only what
    /// [`crate::Log::set_committed`] declared committed (the Kafka high watermark of a
    /// replicated partition), not everything written. Off (the default), the committed offset
    /// follows the written one and nothing differs from a single-node log.
    pub committed_reads: bool,
    /// A cleaning never drops a batch: one that loses every record stays as an empty batch
    /// (no records, same offsets), so every batch keeps its place. A replicated partition's
    /// batches are its Raft log's entries, whose offsets its index table holds
    /// (`docs/replication.md`, "Compacting replicated partitions"). Off: such a batch is
    /// dropped unless it must stay (see [`crate::Log::clean`]).
    pub keep_every_batch: bool,
    /// `remote.storage.enable`: closed segments are copied to the object store attached with
    /// [`crate::Log::attach_remote`], and `retention_ms` / `retention_bytes` bound the whole
    /// log (remote and local) while `local_retention_ms` / `local_retention_bytes` bound the
    /// local copy, which is deleted only once uploaded. Without an attached store it does
    /// nothing.
    pub remote_storage: bool,
    /// `local.retention.ms` (resolved: Kafka's -2 is `retention_ms`).
    pub local_retention_ms: Option<u64>,
    /// `local.retention.bytes` (resolved: Kafka's -2 is `retention_bytes`).
    pub local_retention_bytes: Option<u64>,
    /// With `remote_storage` on: while the store fails (the last upload attempt failed),
    /// appends from clients are refused with [`crate::Error::UploadBacklog`] once the closed
    /// segments not uploaded yet hold more than this many bytes. `None`: no bound (the local
    /// disk holds everything until the store is back).
    pub remote_backlog_max_bytes: Option<u64>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: Some(7 * 24 * 3600 * 1000),
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            index_interval_bytes: 4096,
            max_batch_bytes: 8 << 20,
            inflated_max_bytes: 64 << 20,
            timestamp_type: crate::batch::TimestampType::CreateTime,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            write_chunk_bytes: 1 << 20,
            writes_in_flight: 8,
            preallocate_bytes: 8 << 20,
            read_chunk_bytes: 1 << 20,
            read_ahead_bytes: 16 << 20,
            cleanup_delete: true,
            cleanup_compact: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: None,
            delete_retention_ms: 24 * 3600 * 1000,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            committed_reads: false,
            keep_every_batch: false,
            remote_storage: false,
            local_retention_ms: None,
            local_retention_bytes: None,
            remote_backlog_max_bytes: None,
        }
    }
}

impl LogConfig {
    /// `segment.bytes` as the engine applies it: at least one byte, at most
    /// [`SEGMENT_BYTES_MAX`].
    pub fn effective_segment_bytes(&self) -> u64 {
        self.segment_bytes.clamp(1, SEGMENT_BYTES_MAX)
    }

    pub(crate) fn segment_age_limit(&self) -> Option<Duration> {
        self.segment_ms.map(Duration::from_millis)
    }
}
