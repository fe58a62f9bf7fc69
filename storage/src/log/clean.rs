//! Compaction (`cleanup.policy=compact`): [`Log::clean`] keeps the latest record of every key
//! in the log's closed segments, the way Kafka's log cleaner does.
//!
//! One cleaning:
//! 1. The cleanable range is the closed segments from the log's first one up to the first
//!    that is not readable in full yet, or whose newest record is younger than
//!    `min.compaction.lag.ms`. The active segment is never cleaned.
//! 2. The part of that range written since the previous cleaning (from the checkpoint,
//!    `cleaner_checkpoint`, to the range's end) is the dirty part. A key map is built over it:
//!    key -> offset of its latest record. (Bounded: past [`MAP_BUDGET_BYTES`] of keys the
//!    range ends at that segment; the next cleaning goes on from there.)
//! 3. The whole range (clean part and dirty part) is rewritten in groups of consecutive
//!    segments whose sizes sum to at most `segment.bytes` (so small segments merge). A record
//!    is dropped when the map holds a later offset for its key; a tombstone (null value) is
//!    dropped when it was already in the clean part, so a cleaning has already removed the
//!    older records of its key, and its batch is older than `delete.retention.ms`. Records
//!    without a key, control batches, and compressed batches the caller gave no codec for are
//!    kept as they are; the records of aborted transactions are removed (and are never a
//!    key's latest in the map). The cleanable range ends before the last stable offset: an
//!    open transaction's records are not touched until it ends. A batch keeps its base offset, last offset delta, timestamps and
//!    producer fields; a batch that loses records is rebuilt around the survivors' bytes
//!    (they are deltas from the base, so they are copied unchanged) with a new CRC, and
//!    recompressed with its codec. A batch that loses all of them is dropped, except a
//!    group's last batch and an idempotent producer's last batch, which stay as empty batches
//!    (no records) so that the segment still ends where the next one begins and the
//!    producer's state can be rebuilt from the log; with `LogConfig::keep_every_batch` (a
//!    replicated log, whose batches are Raft entries) every such batch stays empty.
//! 4. Each group is swapped in crash-safely: its new file is written as
//!    `<base>.log.cleaned` and fdatasync'ed; renamed to `<base>.log.swap` (the commit point,
//!    made durable by a directory sync); the old segments' files are removed; the swap file
//!    is renamed to `<base>.log`; its indexes are written. `Log::open` finishes a swap a crash
//!    interrupted (`complete_swaps`) and deletes `.cleaned` files, so a crash at any step
//!    leaves either the old segments or the new one, never a mix.
//!
//! Offsets are never reassigned: after a cleaning a log may skip offsets (between batches, and
//! inside a rebuilt batch), as a compacted Kafka log does, and consumers step over them.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::clean_files::{
    remove_segment_files, with_suffix, Checkpoint, SegmentBatches, SegmentWriter, CLEANED_SUFFIX,
    CLEANER_CHECKPOINT_FILE, SWAP_SUFFIX,
};
use super::markers::{write_compacted, Compacted};
use super::throttle::Throttle;
use super::{Inner, Log};
use crate::batch::records::{raw_records, rebuild_batch};
use crate::batch::{BatchHeader, COMPRESSION_MASK, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::segment::{segment_path, Segment, SegmentState};

/// Bytes of keys one cleaning's key map may hold.
pub const MAP_BUDGET_BYTES: usize = 64 << 20;

/// How [`Log::clean`] runs.
#[derive(Clone, Copy, Default)]
pub struct CleanOptions {
    /// Caps the bytes the cleaning reads and writes per second (Kafka's
    /// `log.cleaner.io.max.bytes.per.second`): a cleaning then sleeps between batches so that
    /// it leaves the device (and the core) to appends and reads. `None`: no cap.
    pub io_bytes_per_second: Option<u64>,
}

/// How much of a compacted log a cleaning would rewrite, and whether it is due.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DirtyInfo {
    /// Bytes of cleanable closed segments cleaned by an earlier cleaning.
    pub clean_bytes: u64,
    /// Bytes of cleanable closed segments written since.
    pub dirty_bytes: u64,
    /// `dirty_bytes / (clean_bytes + dirty_bytes)`; 0 for nothing cleanable.
    pub ratio: f64,
    /// A cleaning is due: the ratio reached `min.cleanable.dirty.ratio`, the oldest dirty
    /// segment passed `max.compaction.lag.ms`, or a kept tombstone's `delete.retention.ms`
    /// has run out.
    pub due: bool,
}

/// What one [`Log::clean`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments rewritten, and the segments they became.
    pub segments_before: usize,
    /// Segments after the cleaning (merged groups).
    pub segments_after: usize,
    /// Bytes of the rewritten segments before and after.
    pub bytes_before: u64,
    /// See `bytes_before`.
    pub bytes_after: u64,
    /// Records dropped because a later record has their key.
    pub records_removed: u64,
    /// Tombstones dropped after `delete.retention.ms`.
    pub tombstones_removed: u64,
    /// Compressed batches left whole (no codec given, or it failed).
    pub batches_kept_compressed: u64,
    /// The log is clean up to here (the checkpoint).
    pub cleaned_to: u64,
    /// Bytes read and written, as counted against [`CleanOptions::io_bytes_per_second`].
    pub io_bytes: u64,
    /// How many times the I/O cap made the cleaning sleep (0 without a cap).
    pub io_sleeps: u64,
}

impl Log {
    /// How dirty the log is: what a cleaner compares logs by (see [`DirtyInfo`]). Nothing is
    /// cleanable unless `cleanup_compact` is set.
    pub fn dirty_info(&self, now_ms: i64) -> DirtyInfo {
        let inner = &self.inner;
        let config = inner.config.borrow().clone();
        if !config.cleanup_compact {
            return DirtyInfo::default();
        }
        let range = inner.cleanable_range(now_ms, &config);
        let first_dirty = inner.checkpoint.get().offset;
        let (mut clean, mut dirty) = (0u64, 0u64);
        let mut oldest_dirty_ts = None;
        for s in &range {
            let st = s.state.borrow();
            if s.base_offset >= first_dirty {
                dirty += st.size;
                oldest_dirty_ts.get_or_insert(st.max_timestamp);
            } else {
                clean += st.size;
            }
        }
        let ratio = if clean + dirty == 0 {
            0.0
        } else {
            dirty as f64 / (clean + dirty) as f64
        };
        let lagging = config
            .max_compaction_lag_ms
            .zip(oldest_dirty_ts)
            .is_some_and(|(lag, ts)| ts < now_ms - lag as i64);
        let tombstones = !range.is_empty()
            && inner
                .checkpoint
                .get()
                .tombstones_due_ms
                .is_some_and(|t| t <= now_ms);
        DirtyInfo {
            clean_bytes: clean,
            dirty_bytes: dirty,
            ratio,
            due: (dirty > 0 && (ratio >= config.min_cleanable_dirty_ratio || lagging))
                || tombstones,
        }
    }

    /// Cleans the log once (see the module docs), whether or not [`Log::dirty_info`] says it
    /// is due; does nothing unless `cleanup_compact` is set. Compressed batches are
    /// decompressed (bounded by `LogConfig::inflated_max_bytes`; one that passes it, or does
    /// not decode, is kept whole) and rewritten in their codec. Appends and reads go on meanwhile: only closed segments are
    /// rewritten, and readers holding an old segment finish reading it.
    pub async fn clean(&self, now_ms: i64, options: &CleanOptions) -> Result<CleanStats> {
        let inner = &self.inner;
        inner.check_usable()?;
        let config = inner.config.borrow().clone();
        let mut stats = CleanStats::default();
        if !config.cleanup_compact || inner.cleaning.replace(true) {
            return Ok(stats);
        }
        let result = inner.clean(now_ms, &config, options, &mut stats).await;
        inner.cleaning.set(false);
        result.map(|()| stats)
    }
}

/// One batch's verdict.
enum Kept {
    Whole,
    Rebuilt(Bytes),
    Dropped,
}

impl Inner {
    /// The closed segments a cleaning may rewrite, oldest first (step 1 of the module docs).
    fn cleanable_range(&self, now_ms: i64, config: &crate::LogConfig) -> Vec<Rc<Segment>> {
        // Never past an open transaction: whether its records stay is not known yet.
        let stable = self.last_stable();
        let segs = self.segments.borrow();
        let closed = segs.len().saturating_sub(1);
        segs.values()
            .take(closed)
            .take_while(|s| {
                let st = s.state.borrow();
                st.visible_size == st.size
                    && st.next_offset <= stable
                    && st.max_timestamp <= now_ms - config.min_compaction_lag_ms as i64
            })
            .cloned()
            .collect()
    }

    async fn clean(
        &self,
        now_ms: i64,
        config: &crate::LogConfig,
        options: &CleanOptions,
        stats: &mut CleanStats,
    ) -> Result<()> {
        let mut throttle = Throttle::new(options.io_bytes_per_second);
        let result = self.clean_with(now_ms, config, &mut throttle, stats).await;
        stats.io_bytes = throttle.bytes;
        stats.io_sleeps = throttle.sleeps;
        result
    }

    async fn clean_with(
        &self,
        now_ms: i64,
        config: &crate::LogConfig,
        throttle: &mut Throttle,
        stats: &mut CleanStats,
    ) -> Result<()> {
        let mut range = self.cleanable_range(now_ms, config);
        let Some(last) = range.last() else {
            return Ok(());
        };
        let mut end = last.state.borrow().next_offset;
        let first_dirty = self.checkpoint.get().offset.max(range[0].base_offset);

        // Aborted transactions' records are removed, and never count as a key's latest.
        let mut aborted: HashMap<i64, Vec<(u64, u64)>> = HashMap::new();
        for a in self.producers.borrow().aborted_between(0, end) {
            aborted
                .entry(a.producer_id)
                .or_default()
                .push((a.first_offset, a.last_offset));
        }
        // The key map over the dirty part.
        let mut map: HashMap<Bytes, u64> = HashMap::new();
        let mut map_bytes = 0usize;
        for (i, seg) in range.iter().enumerate() {
            if seg.base_offset < first_dirty {
                continue;
            }
            let mut batches = SegmentBatches::new(seg);
            while let Some(b) = batches.next().await? {
                throttle.account(b.len()).await;
                let header = header_of(&b);
                if header.is_control() || is_aborted(&aborted, &header) {
                    continue;
                }
                let Some(body) = records_body(&b, &header, config.inflated_max_bytes).await else {
                    continue;
                };
                let base = header.base_offset.get() as u64;
                for r in raw_records(&body, header.records_count.get()).unwrap_or_default() {
                    if let Some(k) = r.key {
                        let offset = base + r.offset_delta.max(0) as u64;
                        if map.insert(Bytes::copy_from_slice(k), offset).is_none() {
                            map_bytes += k.len() + 48;
                        }
                    }
                }
            }
            if map_bytes > MAP_BUDGET_BYTES && i + 1 < range.len() {
                // The map is full: clean up to here, the rest next time.
                end = seg.state.borrow().next_offset;
                range.truncate(i + 1);
                break;
            }
        }

        let producers = self.producers.borrow().last_offsets();
        let interval = config.index_interval_bytes;
        let mut tombstones_due: Option<i64> = None;
        let ctx = Filter {
            map: &map,
            aborted: &aborted,
            producers: &producers,
            first_dirty,
            tombstone_horizon: now_ms.saturating_sub(config.delete_retention_ms as i64),
            keep_every_batch: config.keep_every_batch,
            inflated_max_bytes: config.inflated_max_bytes,
        };
        for group in groups(&range, config.effective_segment_bytes()) {
            self.check_usable()?;
            let (before, after, due) = self
                .clean_group(group, &ctx, interval, stats, throttle)
                .await?;
            stats.segments_before += group.len();
            stats.segments_after += usize::from(after > 0);
            stats.bytes_before += before;
            stats.bytes_after += after;
            if let Some(d) = due {
                tombstones_due = Some(tombstones_due.map_or(d, |t: i64| t.min(d)));
            }
        }
        let checkpoint = Checkpoint {
            offset: end,
            tombstones_due_ms: tombstones_due.map(|t| t + config.delete_retention_ms as i64),
        };
        self.vfs
            .write_small(
                &self.dir.join(CLEANER_CHECKPOINT_FILE),
                &checkpoint.encode(),
            )
            .await?;
        self.checkpoint.set(checkpoint);
        stats.cleaned_to = end;
        tracing::debug!(dir = %self.dir.display(), ?stats, "log cleaned");
        Ok(())
    }

    /// Rewrites one group of segments into one and swaps it in. Returns the bytes before and
    /// after, and the oldest kept tombstone's batch timestamp.
    async fn clean_group(
        &self,
        group: &[Rc<Segment>],
        ctx: &Filter<'_>,
        interval: u32,
        stats: &mut CleanStats,
        throttle: &mut Throttle,
    ) -> Result<(u64, u64, Option<i64>)> {
        let base = group[0].base_offset;
        let final_path = segment_path(&self.dir, base);
        let cleaned_path = with_suffix(&final_path, CLEANED_SUFFIX);
        let swap_path = with_suffix(&final_path, SWAP_SUFFIX);
        self.vfs.remove(&cleaned_path).await?;
        let file = self.vfs.open(&cleaned_path, true).await?;
        let before: u64 = group.iter().map(|s| s.state.borrow().size).sum();
        let mut out = SegmentWriter::new(file.clone());
        let mut state = SegmentState::empty(base);
        let mut oldest_tombstone: Option<i64> = None;
        for (si, seg) in group.iter().enumerate() {
            let last_seg = si + 1 == group.len();
            let seg_end = seg.state.borrow().next_offset;
            let mut batches = SegmentBatches::new(seg);
            while let Some(b) = batches.next().await? {
                throttle.account(b.len()).await;
                let header = header_of(&b);
                let is_group_last = last_seg && header.last_offset() as u64 + 1 == seg_end;
                let body = records_body(&b, &header, ctx.inflated_max_bytes).await;
                let kept = ctx.filter(body, &header, is_group_last, stats, &mut oldest_tombstone);
                let bytes = match kept {
                    Kept::Whole => b,
                    Kept::Rebuilt(nb) => nb,
                    Kept::Dropped => continue,
                };
                let h = header_of(&bytes);
                Segment::record_into(
                    &mut state,
                    base,
                    u64::from(interval.max(1)),
                    out.position(),
                    bytes.len() as u64,
                    h.base_offset.get() as u64,
                    h.last_offset() as u64,
                    h.max_timestamp.get(),
                );
                throttle.account(bytes.len()).await;
                out.push(&bytes).await?;
            }
        }
        let after = out.finish().await?;
        let _ = file.close().await;

        // The swap. Retention or a close may have changed the segments meanwhile: then this
        // group's work is dropped.
        let _permit = self.layout_lock.lock().await.ok_or(Error::Closed)?;
        let intact = {
            let segs = self.segments.borrow();
            group
                .iter()
                .all(|g| segs.get(&g.base_offset).is_some_and(|s| Rc::ptr_eq(s, g)))
        };
        if !intact || self.check_usable().is_err() {
            self.vfs.remove(&cleaned_path).await?;
            return Err(Error::Closed);
        }
        self.vfs.rename(&cleaned_path, &swap_path).await?;
        self.vfs.sync_dir(&self.dir).await?;
        // Committed: from here on, open() finishes the swap if this does not.
        for seg in group {
            remove_segment_files(&self.vfs, &self.dir, seg.base_offset).await?;
        }
        // The marker that lets recovery accept this segment's offset gaps, durable before
        // the segment takes its name (until then open() redoes this from the swap file).
        let marker = Compacted {
            bytes: after,
            next_offset: state.next_offset,
        };
        write_compacted(&self.vfs, &final_path, marker).await?;
        self.vfs.rename(&swap_path, &final_path).await?;
        self.vfs.sync_dir(&self.dir).await?;
        let file = self.vfs.open(&final_path, false).await?;
        let new = Rc::new(Segment::with_state(base, file, final_path, interval, state));
        new.seal(&self.vfs).await?;
        {
            let mut segs = self.segments.borrow_mut();
            for seg in group {
                segs.remove(&seg.base_offset);
            }
            segs.insert(base, new);
        }
        for seg in group {
            self.reader.forget_segment(seg.uid);
        }
        let group_end = group[group.len() - 1].state.borrow().next_offset;
        self.cache.forget_below(group_end);
        Ok((before, after, oldest_tombstone))
    }
}

/// Whether `header` is a data batch of an aborted transaction.
fn is_aborted(aborted: &HashMap<i64, Vec<(u64, u64)>>, header: &BatchHeader) -> bool {
    if header.attributes.get() & crate::batch::TRANSACTIONAL_FLAG == 0 || header.is_control() {
        return false;
    }
    let base = header.base_offset.get() as u64;
    aborted
        .get(&header.producer_id.get())
        .is_some_and(|ranges| ranges.iter().any(|&(f, l)| f <= base && base <= l))
}

/// What a cleaning keeps (step 3 of the module docs).
struct Filter<'a> {
    map: &'a HashMap<Bytes, u64>,
    /// Aborted transactions by producer id: (first offset, marker offset).
    aborted: &'a HashMap<i64, Vec<(u64, u64)>>,
    producers: &'a HashMap<i64, u64>,
    first_dirty: u64,
    /// Tombstones in batches older than this (ms) may go.
    tombstone_horizon: i64,
    /// `LogConfig::keep_every_batch`: no batch is dropped.
    keep_every_batch: bool,
    /// `LogConfig::inflated_max_bytes`: a compressed batch larger than this is kept whole.
    inflated_max_bytes: u64,
}

impl Filter<'_> {
    /// `body`: the batch's records section, decompressed (`None`: it does not decode).
    fn filter(
        &self,
        body: Option<Bytes>,
        header: &BatchHeader,
        is_group_last: bool,
        stats: &mut CleanStats,
        oldest_tombstone: &mut Option<i64>,
    ) -> Kept {
        if header.is_control() {
            return Kept::Whole;
        }
        let codec = header.compression();
        let Some(body) = body else {
            stats.batches_kept_compressed += 1;
            return Kept::Whole;
        };
        let count = header.records_count.get();
        let Some(records) = raw_records(&body, count) else {
            return Kept::Whole; // not decodable: kept as it is, never guessed at
        };
        let base = header.base_offset.get() as u64;
        let max_ts = header.max_timestamp.get();
        let aborted = is_aborted(self.aborted, header);
        let mut kept = BytesMut::new();
        let mut n = 0i32;
        for r in &records {
            let offset = base + r.offset_delta.max(0) as u64;
            let superseded = r
                .key
                .and_then(|k| self.map.get(k))
                .is_some_and(|&latest| latest > offset);
            if superseded || aborted {
                stats.records_removed += 1;
                continue;
            }
            if r.tombstone && r.key.is_some() {
                if offset < self.first_dirty && max_ts < self.tombstone_horizon {
                    stats.tombstones_removed += 1;
                    continue;
                }
                *oldest_tombstone = Some(oldest_tombstone.map_or(max_ts, |t| t.min(max_ts)));
            }
            kept.extend_from_slice(r.bytes);
            n += 1;
        }
        if n == count {
            return Kept::Whole;
        }
        let producers_last = header.producer_id.get() >= 0
            && self.producers.get(&header.producer_id.get())
                == Some(&(header.last_offset() as u64));
        let attributes = header.attributes.get();
        if n == 0 {
            if !(is_group_last || producers_last || self.keep_every_batch) {
                return Kept::Dropped;
            }
            // An empty batch holds its offsets (and its producer's sequence) in place.
            return Kept::Rebuilt(rebuild_batch(
                header,
                attributes & !COMPRESSION_MASK,
                0,
                &[],
            ));
        }
        if codec == 0 {
            return Kept::Rebuilt(rebuild_batch(header, attributes, n, &kept));
        }
        match crate::batch::compression::compress(codec, &kept) {
            Ok(z) => Kept::Rebuilt(rebuild_batch(header, attributes, n, &z)),
            _ => {
                stats.batches_kept_compressed += 1;
                Kept::Whole
            }
        }
    }
}

/// The batch's records section, decompressed if need be, at most `limit` bytes of it;
/// `None` if it does not decode or inflates past the limit (it is then kept whole). A long
/// decompression lets the core's other tasks run between its slices.
async fn records_body(b: &Bytes, header: &BatchHeader, limit: u64) -> Option<Bytes> {
    let raw = b.slice(HEADER_BYTES..);
    let codec = header.compression();
    if codec == 0 {
        return Some(raw);
    }
    let mut inflater = crate::batch::compression::Inflater::new(codec, &raw, limit).ok()?;
    let mut out = Vec::with_capacity(raw.len().saturating_mul(4).min(limit as usize));
    let mut chunk = vec![0u8; 256 << 10];
    loop {
        match inflater.read_some(&mut chunk) {
            Ok(0) => return Some(Bytes::from(out)),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) => {
                tracing::warn!(base_offset = header.base_offset.get(), error = %e, "cleaner: a compressed batch is kept whole");
                return None;
            }
        }
        glommio::yield_if_needed().await;
    }
}

fn header_of(b: &[u8]) -> BatchHeader {
    *BatchHeader::parse(b).expect("SegmentBatches yields whole batches")
}

/// Consecutive segments whose sizes sum to at most `max_bytes` (a segment larger than that
/// is a group of its own), and whose offsets fit one segment's 32-bit relative offsets.
fn groups(range: &[Rc<Segment>], max_bytes: u64) -> Vec<&[Rc<Segment>]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, s) in range.iter().enumerate() {
        let (size, next) = {
            let st = s.state.borrow();
            (st.size, st.next_offset)
        };
        let fits =
            bytes + size <= max_bytes && next - range[start].base_offset <= u64::from(u32::MAX);
        if i > start && !fits {
            out.push(&range[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < range.len() {
        out.push(&range[start..]);
    }
    out
}
