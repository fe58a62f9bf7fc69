//! Restarting a log empty at an offset ([`Log::truncate_fully_and_start_at`], Kafka's
//! `truncateFullyAndStartAt`): what a replicated partition's follower does when it installs a
//! Raft snapshot because it fell behind its leader's log start — retention on the leader
//! deleted what it lacks (docs/replication.md, "Installing a snapshot"). Everything the log
//! holds goes, and it continues at the offset, as if every record below it had been deleted.
//!
//! `DESIGN.md` ("Restarting a log at an offset") says why every crash point is safe.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::clean_files::{Checkpoint, CLEANER_CHECKPOINT_FILE};
use super::epochs::{LeaderEpochs, LEADER_EPOCHS_FILE};
use super::markers::{self, LOG_START_FILE};
use super::{Inner, Listener, Log};
use crate::appender::Appender;
use crate::error::{Error, Result};
use crate::io::align_up;
use crate::producer_state::{ProducerState, SNAPSHOT_FILE};
use crate::segment::{segment_path, Segment};

impl Log {
    /// Deletes every batch the log holds and restarts it empty at `offset`: log start, log
    /// end, written, flushed and committed offsets all become `offset`; the leader-epoch list,
    /// the idempotent producers' state, the cleaner checkpoint, the batch cache and the
    /// read-ahead are emptied, and the epoch [`Log::append`] stamps is 0 again. Appends (`append_assigned`) continue at `offset`. Any offset
    /// is allowed, below the old log end or past it.
    ///
    /// Only for a log opened with `LogConfig::committed_reads` (a replicated one; a single-node
    /// log has no use for throwing its data away): otherwise `InvalidArgument`. Committed data
    /// the log holds (`[log start, committed)`) must lie below `offset`, or the call is refused
    /// with `BelowCommitted` and nothing changes: a snapshot never un-commits anything. (A
    /// freshly opened log has nothing committed: its committed offset is its log start.)
    ///
    /// Order on disk: every segment is deleted oldest first, then the files derived from the
    /// old batches (producer-state snapshot, leader-epoch list, cleaner checkpoint, compaction
    /// markers), the directory fsync'ed; then `log_start_offset` is written and the new
    /// segment created at `offset`, the directory fsync'ed. A crash part-way leaves a log that
    /// opens as some of the old segments (a suffix, as retention leaves) or as an empty log;
    /// calling this again on it finishes the job. If a disk step fails, the log fails (reopen
    /// it and call again).
    pub async fn truncate_fully_and_start_at(&self, offset: u64) -> Result<()> {
        let inner = &self.inner;
        inner.check_usable()?;
        if !inner.committed_reads {
            return Err(Error::InvalidArgument(
                "truncate_fully_and_start_at on a log opened without committed_reads".into(),
            ));
        }
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        let layout = inner.layout_lock.lock().await.ok_or(Error::Closed)?;
        inner.check_usable()?;
        if inner.cleaning.get() {
            return Err(Error::InvalidArgument(
                "truncate_fully_and_start_at while a cleaning runs".into(),
            ));
        }
        inner.drain_writes().await?;
        let committed = inner.committed.get();
        if offset < committed && committed > inner.log_start.get() {
            return Err(Error::BelowCommitted { offset, committed });
        }
        let r = inner.restart_at(offset).await;
        if let Err(e) = &r {
            inner.fail(format!("restarting the log at {offset} failed: {e}"));
        }
        drop(layout);
        drop(permit);
        r
    }
}

impl Inner {
    /// `truncate_fully_and_start_at` under both locks, writes drained.
    async fn restart_at(&self, offset: u64) -> Result<()> {
        // 1. The old segments, oldest first: a crash in between leaves a suffix of them, a
        // valid log (recovery deletes any that no longer follow the one before).
        let old: Vec<Rc<Segment>> = self.segments.borrow().values().cloned().collect();
        for seg in &old {
            self.reader.forget_segment(seg.uid);
            seg.remove_files(&self.vfs).await?;
        }
        // Files that describe the old batches: each is rebuilt or ignored by `open` if a
        // crash leaves it beside fewer segments, and none may describe the new log.
        for seg in &old {
            self.vfs
                .remove(&markers::compacted_path(&seg.log_path))
                .await?;
        }
        for name in [SNAPSHOT_FILE, LEADER_EPOCHS_FILE, CLEANER_CHECKPOINT_FILE] {
            self.vfs.remove(&self.dir.join(name)).await?;
        }
        self.vfs.sync_dir(&self.dir).await?;
        // 2. The new start, then the new segment. A crash between the two: no segment, and
        // `open` creates the first one at the persisted log start — this one.
        self.vfs
            .write_small(
                &self.dir.join(LOG_START_FILE),
                &markers::encode_log_start(offset),
            )
            .await?;
        let path = segment_path(&self.dir, offset);
        let config = self.config.borrow().clone();
        let file = self.vfs.open(&path, true).await?;
        let prealloc = align_up(config.write_chunk_bytes as u64)
            .min(align_up(config.effective_segment_bytes() + (1 << 20)));
        file.pre_allocate(prealloc).await?;
        self.vfs.sync_dir(&self.dir).await?;
        // 3. In memory, with no await in between: readers never see a log without segments.
        let seg = Rc::new(Segment::new(
            offset,
            file.clone(),
            path,
            config.index_interval_bytes,
        ));
        *self.segments.borrow_mut() = BTreeMap::from([(offset, seg)]);
        *self.appender.borrow_mut() = Appender::new(
            file,
            offset,
            config.write_chunk_bytes,
            0,
            &[],
            offset,
            prealloc,
        );
        self.cache.forget_from(0);
        self.log_start.set(offset);
        self.log_end.set(offset);
        self.idle_mark.set(offset);
        let visible_before = self.visible.get();
        for w in [&self.hw, &self.flushed, &self.visible] {
            w.rewind(offset);
            w.advance(offset);
        }
        self.committed.set(offset);
        *self.epochs.borrow_mut() = LeaderEpochs::default();
        // As after a reopen: the latest epoch of the (empty) list, none.
        self.leader_epoch.set(0);
        *self.producers.borrow_mut() = ProducerState::default();
        self.checkpoint.set(Checkpoint {
            offset,
            tombstones_due_ms: None,
        });
        drop(old);
        if visible_before != offset {
            // Parked readers look again (`advance` woke those whose offset is reached).
            let wm = self.watermarks();
            let listeners: Vec<Listener> = self.listeners.borrow().clone();
            for l in listeners {
                l(wm);
            }
        }
        tracing::info!(dir = %self.dir.display(), offset, "log restarted empty at an offset");
        Ok(())
    }
}
