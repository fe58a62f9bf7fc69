//! A partition log: the segments of one partition, their watermarks, and the append, flush,
//! read, retention and recovery operations on them.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use crate::cache::BatchCache;
use crate::config::LogConfig;
use crate::error::Result;
use crate::watermark::Watermarks;

/// Offsets assigned to one `append`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub base_offset: u64,
    /// Offset of the last record appended.
    pub last_offset: u64,
    /// Log start offset at the time of the append (Kafka returns it in produce responses).
    pub log_start_offset: u64,
}

/// Whole batches returned by [`Log::read`], as one or more zero-copy chunks.
#[derive(Debug, Clone, Default)]
pub struct ReadOutcome {
    /// Concatenated, these are whole record batches in offset order.
    pub chunks: Vec<Bytes>,
    /// Watermarks when the read was served.
    pub watermarks: Watermarks,
}

impl ReadOutcome {
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(Bytes::is_empty)
    }
    /// Iterates over the batches (header and bytes).
    pub fn batches(&self) -> impl Iterator<Item = (&crate::batch::BatchHeader, &[u8])> {
        self.chunks.iter().flat_map(|c| crate::batch::Batches::new(c))
    }
}

/// One partition's log. Lives on one glommio executor.
pub struct Log {
    _dir: PathBuf,
}

impl Log {
    /// Opens (creating if needed) the log in `dir` with a private cache.
    pub async fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        Self::open_with_cache(dir, config, BatchCache::new(64 << 20)).await
    }

    /// Opens the log in `dir`, serving recent data from `cache` (shared by the logs of a core).
    pub async fn open_with_cache(dir: impl AsRef<Path>, config: LogConfig, cache: Rc<BatchCache>) -> Result<Log> {
        let _ = (config, cache);
        todo!("{}", dir.as_ref().display())
    }

    /// Appends one or more v2 record batches (a produce request's record set). Assigns base
    /// offsets in place. Returns once the data has been written to the segment file.
    pub async fn append(&self, records: Bytes) -> Result<AppendInfo> {
        let _ = records;
        todo!()
    }

    /// Makes every batch appended before this call durable (fdatasync). Concurrent calls
    /// share one fdatasync. Returns the flushed offset.
    pub async fn flush(&self) -> Result<u64> {
        todo!()
    }

    /// Returns whole batches starting with the batch that contains `offset`, up to
    /// `max_bytes` (at least one batch if any is available). Empty at the high watermark.
    pub async fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadOutcome> {
        let _ = (offset, max_bytes);
        todo!()
    }

    pub fn watermarks(&self) -> Watermarks {
        todo!()
    }

    /// Registers a callback run (on this executor) every time the high watermark moves.
    pub fn on_append(&self, f: impl Fn(Watermarks) + 'static) {
        let _ = f;
        todo!()
    }

    /// Waits until the high watermark passes `offset` (data at `offset` is readable).
    pub async fn wait_for_data(&self, offset: u64) -> Result<()> {
        let _ = offset;
        todo!()
    }

    /// First offset whose batch has a max timestamp `>= timestamp_ms`, with that timestamp;
    /// `None` if every batch is older.
    pub async fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(u64, i64)>> {
        let _ = timestamp_ms;
        todo!()
    }

    /// Applies `retention.ms` / `retention.bytes` and `segment.ms`: deletes whole old segments
    /// (moving the log start offset) and rolls an aged active segment. Returns the number of
    /// segments deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize> {
        let _ = now_ms;
        todo!()
    }

    /// Deletes all records below `offset` that lie in whole segments and sets the log start
    /// offset to `offset` (Kafka's DeleteRecords).
    pub async fn set_log_start_offset(&self, offset: u64) -> Result<()> {
        let _ = offset;
        todo!()
    }

    /// Replaces the settings (e.g. a topic's retention changed); applied from the next append.
    pub fn set_config(&self, config: LogConfig) {
        let _ = config;
        todo!()
    }

    /// Number of segments and their total bytes.
    pub fn size(&self) -> (usize, u64) {
        todo!()
    }

    /// Flushes, writes the indexes and the clean-shutdown marker, and closes the files.
    pub async fn close(self) -> Result<()> {
        todo!()
    }

    /// Closes the log and removes its directory.
    pub async fn delete(self) -> Result<()> {
        todo!()
    }
}
