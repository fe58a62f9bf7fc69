//! One segment: `<base offset, 20 digits>.log` with its offset and time indexes.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::io::{IoFile, Vfs};
use crate::offset_index::{OffsetIndex, SegmentSummary, TimeIndex};
use crate::Result;

pub(crate) fn log_name(base_offset: u64) -> String {
    format!("{base_offset:020}.log")
}

/// Parses `<20 digits>.log` into its base offset.
pub(crate) fn parse_log_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// What changes as a segment grows.
#[derive(Debug, Clone)]
pub(crate) struct SegmentState {
    /// Logical bytes of batches assigned to this segment (appended, maybe not yet written).
    pub size: u64,
    /// Bytes of batches whose writes have completed: readers may read up to here.
    pub visible_size: u64,
    /// Offset after the last batch assigned to this segment.
    pub next_offset: u64,
    pub max_timestamp: i64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    bytes_since_index: u64,
    /// The newest max timestamp (and the batch that raised it) not yet in the time index.
    pending_time: Option<(i64, u32)>,
    /// Wall-clock time of the first append into this segment since it was opened.
    pub first_append_ms: Option<i64>,
}

pub(crate) struct Segment {
    pub base_offset: u64,
    /// Unique per `Segment` made on this thread: a segment compaction rewrites keeps its
    /// base offset but not its uid, so nothing cached for the old file is taken for the new.
    pub uid: u64,
    pub file: IoFile,
    pub log_path: PathBuf,
    pub state: RefCell<SegmentState>,
    /// The producer-state snapshot as of this segment's end, taken when the log rolled past
    /// it (in memory only; with remote storage on): what its upload carries
    /// (`log/tiered/aux_state.rs`), dropped once it is uploaded. `None` for a segment closed
    /// before this process opened it.
    /// (The offset it covers, its bytes.)
    pub producers_at_end: RefCell<Option<(u64, Bytes)>>,
    index_interval_bytes: u64,
}

impl SegmentState {
    pub(crate) fn empty(base_offset: u64) -> SegmentState {
        SegmentState {
            size: 0,
            visible_size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index: 0,
            pending_time: None,
            first_append_ms: None,
        }
    }
}

impl Segment {
    pub(crate) fn new(
        base_offset: u64,
        file: IoFile,
        log_path: PathBuf,
        index_interval_bytes: u32,
    ) -> Segment {
        thread_local!(static NEXT_UID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
        let uid = NEXT_UID.with(|n| n.replace(n.get() + 1));
        Segment {
            base_offset,
            uid,
            file,
            log_path,
            state: RefCell::new(SegmentState::empty(base_offset)),
            producers_at_end: RefCell::new(None),
            index_interval_bytes: u64::from(index_interval_bytes.max(1)),
        }
    }

    pub(crate) fn from_parts(
        base_offset: u64,
        file: IoFile,
        log_path: PathBuf,
        index_interval_bytes: u32,
        summary: SegmentSummary,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
    ) -> Segment {
        let s = Segment::new(base_offset, file, log_path, index_interval_bytes);
        {
            let mut st = s.state.borrow_mut();
            st.size = summary.segment_bytes;
            st.visible_size = summary.segment_bytes;
            st.next_offset = summary.next_offset;
            st.max_timestamp = summary.max_timestamp;
            st.offset_index = offset_index;
            st.time_index = time_index;
            st.bytes_since_index = 0;
        }
        s
    }

    /// A segment of `file` whose batches were recorded into `state` as it was written (by
    /// compaction, `log/clean.rs`).
    pub(crate) fn with_state(
        base_offset: u64,
        file: IoFile,
        log_path: PathBuf,
        index_interval_bytes: u32,
        mut state: SegmentState,
    ) -> Segment {
        let s = Segment::new(base_offset, file, log_path, index_interval_bytes);
        state.visible_size = state.size;
        *s.state.borrow_mut() = state;
        s
    }

    pub(crate) fn index_path(&self) -> PathBuf {
        self.log_path.with_extension("index")
    }

    pub(crate) fn time_index_path(&self) -> PathBuf {
        self.log_path.with_extension("timeindex")
    }

    /// Records a batch assigned to this segment at `position`.
    pub(crate) fn record_batch(
        &self,
        position: u64,
        total_bytes: u64,
        base_offset: u64,
        last_offset: u64,
        max_ts: i64,
    ) {
        let mut st = self.state.borrow_mut();
        Self::record_into(
            &mut st,
            self.base_offset,
            self.index_interval_bytes,
            position,
            total_bytes,
            base_offset,
            last_offset,
            max_ts,
        );
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one call site per caller; a struct would only rename them"
    )]
    pub(crate) fn record_into(
        st: &mut SegmentState,
        segment_base: u64,
        interval: u64,
        position: u64,
        total_bytes: u64,
        base_offset: u64,
        last_offset: u64,
        max_ts: i64,
    ) {
        assert_eq!(position, st.size, "batches are appended contiguously");
        // Contiguous as appended; a compacted segment may skip offsets between batches.
        assert!(base_offset >= st.next_offset, "offsets only go up");
        let rel = (base_offset - segment_base) as u32;
        let index_here = st.offset_index.is_empty() || st.bytes_since_index >= interval;
        if index_here {
            // The roll rule and recovery keep every segment within SEGMENT_BYTES_MAX.
            debug_assert!(position <= crate::config::SEGMENT_BYTES_MAX);
            st.offset_index.push(rel, position as u32);
            st.bytes_since_index = 0;
        }
        st.bytes_since_index += total_bytes;
        if max_ts > st.max_timestamp {
            st.pending_time = Some((max_ts, rel));
            st.max_timestamp = max_ts;
        }
        // At most one time-index entry per offset-index entry (per `index.interval.bytes`,
        // Kafka's rule), not one per batch: the newest (max timestamp, batch that raised it)
        // since the last entry. Every entry stays true, so a lookup that scans forward from
        // the last entry below its target still finds the first batch reaching it.
        if index_here {
            if let Some((ts, r)) = st.pending_time.take() {
                st.time_index.push(ts, r);
            }
        }
        st.size = position + total_bytes;
        st.next_offset = last_offset + 1;
    }

    pub(crate) fn summary(&self) -> SegmentSummary {
        let st = self.state.borrow();
        SegmentSummary {
            base_offset: self.base_offset,
            segment_bytes: st.size,
            next_offset: st.next_offset,
            max_timestamp: st.max_timestamp,
        }
    }

    /// Truncates the file to its logical size and writes both indexes durably. After this,
    /// the indexes describe the segment and are trusted on the next open.
    pub(crate) async fn seal(&self, vfs: &Vfs) -> Result<()> {
        let summary = self.summary();
        self.file.truncate(summary.segment_bytes).await?;
        self.file.fdatasync().await?;
        let (oi, ti) = {
            let st = self.state.borrow();
            (
                st.offset_index.encode(&summary),
                st.time_index.encode(&summary),
            )
        };
        vfs.write_small(&self.index_path(), &oi).await?;
        vfs.write_small(&self.time_index_path(), &ti).await?;
        Ok(())
    }

    pub(crate) async fn remove_files(&self, vfs: &Vfs) -> Result<()> {
        vfs.remove(&self.log_path).await?;
        vfs.remove(&self.index_path()).await?;
        vfs.remove(&self.time_index_path()).await
    }
}

pub(crate) fn segment_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(log_name(base_offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(log_name(42), "00000000000000000042.log");
        assert_eq!(parse_log_name(&log_name(42)), Some(42));
        assert_eq!(parse_log_name("42.log"), None);
        assert_eq!(parse_log_name("0000000000000000004x.log"), None);
        assert_eq!(parse_log_name("00000000000000000042.index"), None);
    }
}
