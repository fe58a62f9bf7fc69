//! A partition log: the segments of one partition, their watermarks, and the operations on
//! them, one job per file:
//!
//! - `open.rs` — [`Log::open`]: loading the segments, recovering the last one (and any whose
//!   indexes cannot be trusted) after an unclean shutdown, the producers' state.
//! - `append.rs` — the write pipeline: [`Log::append`], [`Log::flush`], rolling segments, the
//!   direct writes in flight and the high watermark they move.
//! - `read.rs` — [`Log::read`], [`Log::read_available`], and the timestamp lookups.
//! - `retention.rs` — [`Log::enforce_retention`], [`Log::set_log_start_offset`].
//! - `clean.rs` — compaction: [`Log::clean`], [`Log::dirty_info`], finishing an interrupted
//!   swap on open.
//! - `markers.rs` — the small files `clean_shutdown` and `log_start_offset`.
//! - `replicate.rs` — what a replicated partition needs: epochs, assigned appends,
//!   truncation, the committed offset; `restart.rs` — [`Log::truncate_fully_and_start_at`]
//!   (a follower installing a Raft snapshot).
//! - `tiered.rs` — the remote tier (`tier/`): [`Log::attach_remote`], [`Log::tier_tick`],
//!   reads below the local log start.
//!
//! This file holds the [`Log`] itself, its state, the accessors, and closing and deleting.
//!
//! Append path: [`Log::append`] validates the batches (CRC included), takes the append
//! lock, rolls the segment if needed, assigns offsets in place, indexes and caches the
//! batches, copies them into the appender's chunk (`appender.rs`) and launches direct
//! writes; it then waits (without the lock) until its batches are written, which is when
//! the high watermark passes them.

mod append;
mod clean;
mod clean_files;
mod epochs;
mod markers;
mod open;
mod read;
mod replicate;
mod restart;
mod retention;
mod throttle;
mod tiered;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::appender::Appender;
use crate::cache::LogCache;
use crate::config::LogConfig;
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::producer_state::ProducerState;
pub use crate::producer_state::{AbortedTxn, ActiveProducer};
use crate::reader::ReadCache;
use crate::segment::Segment;
use crate::watermark::{FifoLock, Watch, Watermarks};

pub use crate::tier::{RestoredState, TierStats};
pub use append::{AppendInfo, FlushStats, FLUSH_BUCKETS};
pub use clean::{CleanOptions, CleanStats, DirtyInfo, MAP_BUDGET_BYTES};
pub use clean_files::CLEANER_CHECKPOINT_FILE;
pub use epochs::{EpochHistory, LEADER_EPOCHS_FILE};
pub use markers::{CLEAN_SHUTDOWN_FILE, LOG_START_FILE};
pub use read::ReadOutcome;

use append::WriteSlot;

/// A callback run when the high watermark moves.
type Listener = Rc<dyn Fn(Watermarks)>;

struct Inner {
    dir: PathBuf,
    vfs: Vfs,
    config: RefCell<LogConfig>,
    segments: RefCell<BTreeMap<u64, Rc<Segment>>>,
    appender: RefCell<Appender>,
    /// Orders appends (and rolls, close, delete) first-come-first-served.
    append_lock: FifoLock,
    log_start: Cell<u64>,
    log_end: Cell<u64>,
    /// The written offset: every batch below it is in the segment files.
    hw: Watch,
    flushed: Watch,
    /// What readers see (Kafka's high watermark): `hw`, or with `committed_reads` the smaller
    /// of `hw` and `committed` (`replicate.rs`). Never moves back.
    visible: Watch,
    /// `LogConfig::committed_reads`, as it was when the log was opened.
    committed_reads: bool,
    /// The committed offset `Log::set_committed` set (only read with `committed_reads`).
    committed: Cell<u64>,
    /// The leader epoch `append` stamps into the batches (`Log::set_leader_epoch`).
    leader_epoch: Cell<i32>,
    /// Where each leader epoch starts (`epochs.rs`).
    epochs: RefCell<epochs::LeaderEpochs>,
    writes: RefCell<VecDeque<WriteSlot>>,
    next_write_seq: Cell<u64>,
    partials_in_flight: Cell<usize>,
    writes_completed: Watch,
    kick_scheduled: Cell<bool>,
    sync_running: Cell<bool>,
    syncs_completed: Watch,
    flush_stats: RefCell<FlushStats>,
    failed: RefCell<Option<String>>,
    listeners: RefCell<Vec<Listener>>,
    cache: Rc<LogCache>,
    reader: ReadCache,
    closed: Cell<bool>,
    /// The log end offset at the previous retention check: unchanged means idle since then.
    idle_mark: Cell<u64>,
    /// Idempotent producers' last batches (`producer_state.rs`).
    producers: RefCell<ProducerState>,
    /// Orders changes to the set of closed segments: retention and DeleteRecords deleting
    /// them, a cleaning swapping them, close and delete.
    layout_lock: FifoLock,
    /// How far the log is cleaned (`clean.rs`).
    checkpoint: Cell<clean_files::Checkpoint>,
    /// A cleaning is running.
    cleaning: Cell<bool>,
    /// The remote tier, once a store is attached (`tiered.rs`).
    remote: RefCell<Option<Rc<tiered::Remote>>>,
}

/// One partition's log. Lives on one glommio executor (it is `!Send`).
pub struct Log {
    inner: Rc<Inner>,
}

impl Log {
    /// Bytes of write buffer (the appender's chunk) this log holds now: one chunk
    /// (`write_chunk_bytes`) while it is being appended to, none once it has been idle for
    /// a retention check (see [`Log::enforce_retention`]).
    pub fn write_buffer_bytes(&self) -> usize {
        self.inner.appender.borrow().buffer_bytes()
    }

    /// The directory this log lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The log's offsets now: start, end, high watermark and flushed offset.
    pub fn watermarks(&self) -> Watermarks {
        self.inner.watermarks()
    }

    /// Registers a callback run (on this executor) every time the high watermark moves (with
    /// `LogConfig::committed_reads`: when what is both written and committed grows).
    pub fn on_append(&self, f: impl Fn(Watermarks) + 'static) {
        self.inner.listeners.borrow_mut().push(Rc::new(f));
    }

    /// Waits until the high watermark passes `offset` (data at `offset` is readable; with
    /// `LogConfig::committed_reads`, once it is written and committed).
    pub async fn wait_for_data(&self, offset: u64) -> Result<()> {
        if self.inner.visible.wait_for(offset + 1).await {
            Ok(())
        } else {
            Err(self.inner.failure())
        }
    }

    /// Replaces the settings (e.g. a topic's retention changed). Sizes of in-memory
    /// buffers and `committed_reads` keep their old values until the log is reopened.
    pub fn set_config(&self, config: LogConfig) {
        *self.inner.config.borrow_mut() = config;
    }

    /// The settings in force.
    pub fn config(&self) -> LogConfig {
        self.inner.config.borrow().clone()
    }

    /// The fdatasyncs this log has made and how long they took.
    pub fn flush_stats(&self) -> FlushStats {
        self.inner.flush_stats.borrow().clone()
    }

    /// The idempotent producers this log remembers (Kafka's DescribeProducers), by id.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        self.inner.producers.borrow().active()
    }

    /// The aborted transactions a read_committed read of `[from, to)` meets (Fetch's
    /// `aborted_transactions`): markers at or after `from`, first records before `to`, by
    /// marker offset. Below the local log start those the remote segments' `.txnindex`
    /// objects list are added (a replica that installed a snapshot has none of its own
    /// there); an error only if such an object cannot be read.
    pub async fn aborted_transactions(&self, from: u64, to: u64) -> Result<Vec<AbortedTxn>> {
        let mut out = self.inner.producers.borrow().aborted_between(from, to);
        if from < self.inner.log_start.get() {
            tiered::add_remote_aborted(&self.inner, from, to, &mut out).await?;
        }
        Ok(out)
    }

    /// Attaches the object store that holds this log's remote segments (`tier/`), under
    /// the keys `<prefix>/...`, and loads the manifest (the remote segments this log knows):
    /// from here reads below the local start are served from the store. Touches only local
    /// files; the first [`Log::tier_tick`] deletes what a crash in the middle of an upload or
    /// a remote deletion left in the store (objects the manifest does not list).
    pub async fn attach_remote(
        &self,
        store: Rc<dyn crate::tier::ObjectStore>,
        prefix: String,
    ) -> Result<()> {
        tiered::attach(&self.inner, store, prefix).await
    }

    /// With `remote_storage` on and a store attached: the first time, deletes the objects
    /// the manifest does not list (orphans); then uploads the closed segments that are
    /// not in the store yet (oldest first, each whole and below the high watermark), then
    /// deletes the remote segments past `retention.ms` / `retention.bytes`. Returns the
    /// segments uploaded. A failure stops the tick; the next one goes on from there.
    pub async fn tier_tick(&self, now_ms: i64) -> Result<usize> {
        tiered::tick(&self.inner, now_ms).await
    }

    /// A replicated log's leader (the Raft group replicates the manifest, not the engine): uploads
    /// the oldest closed segment below the high watermark that the manifest does not reach
    /// yet, under an upload id carrying `epoch` (the leader's term), and returns it without
    /// listing it. The caller replicates it; every replica then lists it
    /// ([`Log::list_remote_segment`]). `None`: nothing to upload, no store attached, or an
    /// upload in progress. A failing store counts toward the upload backlog's bound as in
    /// [`Log::tier_tick`].
    pub async fn upload_next_segment(
        &self,
        epoch: u32,
    ) -> Result<Option<crate::tier::RemoteSegment>> {
        tiered::upload_next(&self.inner, epoch).await
    }

    /// A replicated log's replica applying a committed upload: lists `seg` in the manifest
    /// (durably) if it continues it; a segment already listed, below the remote start, or not
    /// joining the remote end changes nothing (`false`). Without a store attached (yet) the
    /// manifest file alone is changed, which attaching loads.
    pub async fn list_remote_segment(&self, seg: crate::tier::RemoteSegment) -> Result<bool> {
        tiered::list_segment(&self.inner, seg).await
    }

    /// A replicated log's leader of `epoch`, once it has applied every entry of earlier
    /// leaders: deletes the objects under the prefix that the manifest does not list, of
    /// uploads of earlier epochs only (a deposed leader's upload still running is of its own
    /// epoch, below this one, but can never be listed any more). Returns how many.
    pub async fn collect_remote_orphans(&self, epoch: u32) -> Result<usize> {
        tiered::collect_orphans_before(&self.inner, epoch).await
    }

    /// Where the whole log's retention (`retention.ms` / `retention.bytes`) would move the log
    /// start inside the remote tier (`None`: nowhere). A replicated log's leader replicates
    /// the move; [`Log::set_log_start_offset`] carries it out.
    pub fn remote_retention_point(&self, now_ms: i64) -> Option<u64> {
        tiered::retention_point(&self.inner, now_ms)
    }

    /// The manifest's bytes (`None`: no store attached): what a replicated log's leader sends
    /// with a snapshot.
    pub fn remote_manifest(&self) -> Option<Vec<u8>> {
        tiered::manifest_bytes(&self.inner)
    }

    /// Replaces the manifest (durably) with `bytes` from [`Log::remote_manifest`]: a follower
    /// installing its leader's snapshot.
    pub async fn install_remote_manifest(&self, bytes: &[u8]) -> Result<()> {
        tiered::install_manifest(&self.inner, bytes).await
    }

    /// A replicated log's follower that restarted its log at `offset`
    /// ([`Log::truncate_fully_and_start_at`], installing its leader's snapshot) takes what the
    /// remote segment ending at `offset` carries: the producers' state as of there, with the
    /// batches appended since replayed over it, and the leader epochs below it
    /// (`log/tiered/aux_state.rs`), saved as its own. `None`: no store attached, or no remote
    /// segment ends there. The log must still start at `offset` (`InvalidArgument`).
    pub async fn restore_from_remote(&self, offset: u64) -> Result<Option<RestoredState>> {
        tiered::restore_at(&self.inner, offset).await
    }

    /// The remote tier's figures (`None`: no store attached).
    pub fn tier_stats(&self) -> Option<TierStats> {
        tiered::stats(&self.inner)
    }

    /// The remote segments, oldest first.
    pub fn remote_segments(&self) -> Vec<crate::tier::RemoteSegment> {
        self.inner.remote().map_or_else(Vec::new, |r| r.segments())
    }

    /// The first offset held locally (Kafka's local log start offset, ListOffsets -4).
    pub fn local_start_offset(&self) -> u64 {
        self.inner.log_start.get()
    }

    /// The last offset in the remote tier (Kafka's ListOffsets -5, the latest tiered
    /// offset; `None` if nothing is uploaded).
    pub fn latest_tiered_offset(&self) -> Option<u64> {
        self.inner.remote()?.end().map(|e| e - 1)
    }

    /// Number of segments and their total bytes.
    pub fn size(&self) -> (usize, u64) {
        let segs = self.inner.segments.borrow();
        (
            segs.len(),
            segs.values().map(|s| s.state.borrow().size).sum(),
        )
    }

    /// Flushes, seals the active segment (truncated, indexes written), writes the
    /// clean-shutdown marker, and closes the files.
    pub async fn close(self) -> Result<()> {
        let inner = &self.inner;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        let layout = inner.layout_lock.lock().await.ok_or(Error::Closed)?;
        inner.drain_writes().await?;
        inner.flush_to(inner.hw.get()).await?;
        inner.active().seal(&inner.vfs).await?;
        inner.save_producer_state().await?;
        let marker = markers::encode_clean_shutdown(inner.log_end.get());
        inner
            .vfs
            .write_small(&inner.dir.join(CLEAN_SHUTDOWN_FILE), &marker)
            .await?;
        inner.vfs.sync_dir(&inner.dir).await?;
        inner.closed.set(true);
        inner.append_lock.close();
        inner.layout_lock.close();
        drop(layout);
        drop(permit);
        let segs: Vec<Rc<Segment>> = std::mem::take(&mut *inner.segments.borrow_mut())
            .into_values()
            .collect();
        for s in segs {
            if let Ok(s) = Rc::try_unwrap(s) {
                let _ = s.file.close().await;
            }
        }
        Ok(())
    }

    /// Closes the log without a clean-shutdown marker and removes its directory, and with a
    /// store attached every object under its prefix, once an upload in flight has ended (a
    /// store that fails leaves those objects, reported as a warning; a new log with the same
    /// prefix deletes them as orphans).
    pub async fn delete(self) -> Result<()> {
        let inner = &self.inner;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        let layout = inner.layout_lock.lock().await.ok_or(Error::Closed)?;
        let _ = inner.drain_writes().await;
        inner.closed.set(true);
        inner.append_lock.close();
        inner.layout_lock.close();
        drop(layout);
        drop(permit);
        if let Some(remote) = inner.remote() {
            // After the upload in flight, if any: its objects go with the rest instead of
            // staying in the bucket with no manifest to find them.
            if let Err(e) = tiered::delete_all(&remote).await {
                tracing::warn!(dir = %inner.dir.display(), error = %e, "remote segments of a deleted log not deleted");
            }
        }
        inner.segments.borrow_mut().clear();
        inner.vfs.remove_dir_all(&inner.dir).await
    }
}

impl Inner {
    fn remote(&self) -> Option<Rc<tiered::Remote>> {
        self.remote.borrow().clone()
    }

    /// The log's first offset: the remote tier's when it reaches below the local log.
    fn start_offset(&self) -> u64 {
        let local = self.log_start.get();
        match self.remote().and_then(|r| r.first()) {
            Some(f) if f < local => f,
            _ => local,
        }
    }

    fn watermarks(&self) -> Watermarks {
        Watermarks {
            log_start_offset: self.start_offset(),
            log_end_offset: self.log_end.get(),
            high_watermark: self.visible.get(),
            written_offset: self.hw.get(),
            committed_offset: self.committed_offset(),
            flushed_offset: self.flushed.get(),
            last_stable_offset: self.last_stable(),
        }
    }

    /// The high watermark, or the first offset of the earliest open transaction below it.
    fn last_stable(&self) -> u64 {
        let hw = self.visible.get();
        self.producers
            .borrow()
            .first_unstable(hw)
            .map_or(hw, |f| f.min(hw))
    }

    fn active(&self) -> Rc<Segment> {
        self.segments
            .borrow()
            .values()
            .next_back()
            .cloned()
            .expect("a log always has an active segment")
    }

    fn check_usable(&self) -> Result<()> {
        if self.closed.get() {
            return Err(Error::Closed);
        }
        if let Some(why) = self.failed.borrow().as_ref() {
            return Err(Error::LogFailed(why.clone()));
        }
        Ok(())
    }

    fn failure(&self) -> Error {
        match self.failed.borrow().as_ref() {
            Some(why) => Error::LogFailed(why.clone()),
            None => Error::Closed,
        }
    }

    fn fail(&self, why: String) {
        if self.failed.borrow().is_none() {
            tracing::error!(dir = %self.dir.display(), error = %why, "log failed; appends refused until it is reopened");
            *self.failed.borrow_mut() = Some(why);
        }
        self.hw.fail();
        self.visible.fail();
        self.flushed.fail();
        self.writes_completed.fail();
        self.syncs_completed.fail();
    }
}
