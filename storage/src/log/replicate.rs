//! What a replicated partition needs of its log (issue 19, `docs/replication.md` §3): the
//! leader epoch stamped into appended batches ([`Log::set_leader_epoch`]), appends of batches
//! whose offsets are already assigned ([`Log::append_assigned`], the path of a follower and of
//! a leader's Raft entries), cutting an uncommitted suffix ([`Log::truncate_to`]) and the
//! committed offset readers stop at ([`Log::set_committed`], with `LogConfig::committed_reads`).
//!
//! `DESIGN.md` ("Replication: truncation and the committed offset") says why a truncation is
//! crash-safe step by step.

use std::rc::Rc;

use bytes::Bytes;

use super::{AppendInfo, Inner, Log};
use crate::appender::Appender;
use crate::batch::{self, BatchInfo, HEADER_BYTES};
use crate::error::{BatchError, Error, Result};
use crate::io::{align_down, align_up};
use crate::producer_state::{ProducerBatch, ProducerState, SNAPSHOT_FILE};
use crate::recovery::ScanRules;
use crate::segment::{Segment, SegmentState};

impl Log {
    /// Sets the leader epoch that later [`Log::append`]s stamp into their batches
    /// (`partition_leader_epoch`, header bytes 12..16, outside the CRC). A single-node log
    /// never calls it: its batches carry 0, as before. After a reopen it starts at the latest
    /// epoch of [`Log::leader_epochs`] (0 if none). Epochs are `i32` on the wire; a negative
    /// one, or one below the latest epoch the log holds, is refused.
    pub fn set_leader_epoch(&self, epoch: i32) -> Result<()> {
        if epoch < 0 {
            return Err(Error::InvalidArgument(format!(
                "leader epoch {epoch} is negative"
            )));
        }
        if let Some(latest) = self.inner.epochs.borrow().latest() {
            if epoch < latest {
                return Err(Error::InvalidArgument(format!(
                    "leader epoch {epoch} is below the log's latest, {latest}"
                )));
            }
        }
        self.inner.leader_epoch.set(epoch);
        Ok(())
    }

    /// The leader epoch [`Log::append`] stamps now.
    pub fn leader_epoch(&self) -> i32 {
        self.inner.leader_epoch.get()
    }

    /// Declares every offset below `offset` committed (the Kafka high watermark of a
    /// replicated partition). Only with `LogConfig::committed_reads`; then reads,
    /// [`Log::wait_for_data`], the [`Log::on_append`] callbacks and
    /// [`Log::watermarks`]`().high_watermark` stop at the smaller of it and the written offset.
    /// The committed offset never moves back: a lower `offset` changes nothing. It may run
    /// ahead of what this log has written (a leader learns a commit before its own write
    /// completes) but not past its log end. After a reopen it starts at the log start offset:
    /// the caller, which keeps the Raft state, sets it again.
    pub fn set_committed(&self, offset: u64) -> Result<()> {
        let inner = &self.inner;
        inner.check_usable()?;
        if !inner.committed_reads {
            return Err(Error::InvalidArgument(
                "set_committed on a log opened without committed_reads".into(),
            ));
        }
        if offset > inner.log_end.get() {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: inner.log_start.get(),
                log_end_offset: inner.log_end.get(),
            });
        }
        if offset > inner.committed.get() {
            inner.committed.set(offset);
            inner.advance_visible();
        }
        Ok(())
    }

    /// Appends batches whose base offsets and leader epochs are already set (what a follower
    /// receives from its leader, or a leader's own Raft entries). Each batch is checked as
    /// `append` checks it (framing, CRC; compacted batches with fewer records than offsets are
    /// accepted, as a log stores them), their offsets must follow each other without a gap
    /// and the first must be the log end offset: otherwise `InvalidBatch(OffsetGap)` and
    /// nothing is written. Idempotent producers' batches update the producers' state but are
    /// not checked against it (the leader did that). Everything else — rolls, indexes, cache,
    /// the written offset — is as for `append`; returns once the batches are written.
    pub async fn append_assigned(&self, records: Bytes) -> Result<AppendInfo> {
        let inner = &self.inner;
        inner.check_usable()?;
        let infos = validate_assigned(&records).map_err(Error::InvalidBatch)?;
        let first = infos[0].base_offset as u64;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        inner.check_usable()?;
        let end = inner.log_end.get();
        if first != end {
            return Err(Error::InvalidBatch(BatchError::OffsetGap {
                expected: end,
                got: first as i64,
            }));
        }
        let mut from_producers: Vec<(usize, ProducerBatch)> = Vec::new();
        let mut starts: Vec<(i32, u64)> = Vec::new();
        let mut latest = inner.epochs.borrow().latest().unwrap_or(0);
        let mut pos = 0usize;
        for (i, info) in infos.iter().enumerate() {
            if let Some(b) = ProducerBatch::of(&records[pos..]) {
                from_producers.push((i, b));
            }
            let epoch = batch::BatchHeader::parse(&records[pos..])
                .map_or(0, |h| h.partition_leader_epoch.get());
            if epoch < latest {
                return Err(Error::InvalidArgument(format!(
                    "batch at {} has leader epoch {epoch}, below the log's latest, {latest}",
                    info.base_offset
                )));
            }
            latest = epoch;
            starts.push((epoch, info.base_offset as u64));
            pos += info.total_bytes;
        }
        let offsets: u64 = infos.iter().map(|i| i.last_offset_delta as u64 + 1).sum();
        inner.maybe_roll(records.len() as u64, offsets).await?;
        inner.ensure_preallocated(records.len() as u64).await?;
        inner.note_epochs(&starts).await?;
        let end_offset = inner.place(records, &infos, &from_producers).await?;
        inner.schedule_kick();
        drop(permit);

        if !inner.hw.wait_for(end_offset).await {
            return Err(inner.failure());
        }
        Ok(AppendInfo {
            base_offset: first,
            last_offset: end_offset - 1,
            log_start_offset: inner.log_start.get(),
            duplicate: false,
            log_append_time_ms: -1,
        })
    }

    /// Checks the idempotent producers' batches of `valid` against the producers' state as
    /// this log has it, as [`Log::append`] does before it assigns offsets: `Ok(Some((base,
    /// last)))` when the set is a retry of a batch the log holds at those offsets (nothing is
    /// to be appended), `Ok(None)` when it may be appended at the log end, else
    /// `OutOfOrderSequence` / `InvalidProducerEpoch`. A replicated leader calls it before it
    /// proposes (its entries are appended with [`Log::append_assigned`], which does not check),
    /// once every batch it proposed earlier is written here, so the state includes them
    /// (docs/replication.md §3.8).
    pub fn check_producers(&self, valid: &batch::ValidBatches) -> Result<Option<(u64, u64)>> {
        let inner = &self.inner;
        inner.check_usable()?;
        let producers = super::append::producer_batches(valid.bytes(), valid.infos());
        inner.check_producers(valid.infos(), &producers)
    }

    /// Removes every batch at or above `offset`, which must be a batch boundary (the base
    /// offset of a batch, or the log end; an offset inside a batch is `NotBatchBoundary` and
    /// nothing changes). Truncating at the log end changes nothing. Refused
    /// (`BelowCommitted`, nothing changes) below the committed offset: without
    /// `LogConfig::committed_reads` that is the written offset, which is the log end once the
    /// writes in flight are done, so a single-node log can never lose data this way.
    ///
    /// Waits for the writes in flight, then cuts the segment holding `offset` (truncated and
    /// fdatasync'ed before anything else changes), deletes the segments after it, rebuilds the
    /// segment's indexes and the producers' state from what remains, drops the cut batches
    /// from the cache and the read-ahead, and moves the log end, written and flushed offsets
    /// back to `offset`. When it returns, no crash can bring a cut batch back; appends continue
    /// at `offset`. If a disk operation fails half-way the log fails (reopen it: recovery
    /// then finds the old log or a prefix of it, never anything else).
    pub async fn truncate_to(&self, offset: u64) -> Result<()> {
        let inner = &self.inner;
        inner.check_usable()?;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        let layout = inner.layout_lock.lock().await.ok_or(Error::Closed)?;
        inner.check_usable()?;
        inner.drain_writes().await?;
        let end = inner.log_end.get();
        if offset > end {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: inner.log_start.get(),
                log_end_offset: end,
            });
        }
        if offset == end {
            return Ok(());
        }
        let committed = inner.committed_offset();
        if offset < committed {
            return Err(Error::BelowCommitted { offset, committed });
        }
        let target = inner
            .segments
            .borrow()
            .range(..=offset)
            .next_back()
            .map(|(_, s)| s.clone())
            .ok_or(Error::OffsetOutOfRange {
                offset,
                log_start_offset: inner.log_start.get(),
                log_end_offset: end,
            })?;
        let position = inner.cut_position(&target, offset).await?;
        let r = inner.cut(&target, offset, position).await;
        if let Err(e) = &r {
            inner.fail(format!("truncation to {offset} failed: {e}"));
        }
        drop(layout);
        drop(permit);
        r
    }
}

/// Validates a record set of batches with assigned offsets: each is a valid stored batch, and
/// each starts right after the one before.
fn validate_assigned(records: &[u8]) -> std::result::Result<Vec<BatchInfo>, BatchError> {
    let mut infos: Vec<BatchInfo> = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let info = batch::validate_stored(&records[pos..])?;
        if info.base_offset < 0 {
            return Err(BatchError::OffsetGap {
                expected: 0,
                got: info.base_offset,
            });
        }
        if let Some(prev) = infos.last() {
            let expected = (prev.base_offset + i64::from(prev.last_offset_delta) + 1) as u64;
            if info.base_offset as u64 != expected {
                return Err(BatchError::OffsetGap {
                    expected,
                    got: info.base_offset,
                });
            }
        }
        pos += info.total_bytes;
        infos.push(info);
    }
    if infos.is_empty() {
        return Err(BatchError::Truncated {
            have: 0,
            need: HEADER_BYTES,
        });
    }
    Ok(infos)
}

impl Inner {
    /// The committed offset: set by `Log::set_committed` with `committed_reads`, else the
    /// written offset.
    pub(super) fn committed_offset(&self) -> u64 {
        if self.committed_reads {
            self.committed.get()
        } else {
            self.hw.get()
        }
    }

    /// The file position in `seg` of the first batch at or above `offset`; an error if a
    /// batch holds `offset` without starting there. Writes are drained: the whole segment is
    /// in its file.
    async fn cut_position(&self, seg: &Rc<Segment>, offset: u64) -> Result<u64> {
        let (size, mut pos) = {
            let st = seg.state.borrow();
            let rel = (offset - seg.base_offset).min(u64::from(u32::MAX)) as u32;
            (st.size, u64::from(st.offset_index.lookup(rel)))
        };
        while pos < size {
            let head = seg.file.read_at(pos, HEADER_BYTES).await?;
            let header = batch::check_framing_stored(&head)
                .or_else(|e| match e {
                    BatchError::Truncated { .. } => {
                        batch::BatchHeader::parse(&head).ok_or(e.clone())
                    }
                    e => Err(e),
                })
                .map_err(|reason| Error::CorruptBatch {
                    position: pos,
                    reason,
                })?;
            let base = header.base_offset.get() as u64;
            if base >= offset {
                return Ok(pos);
            }
            if header.last_offset() as u64 >= offset {
                return Err(Error::NotBatchBoundary {
                    offset,
                    batch_base_offset: base,
                });
            }
            pos += header.total_bytes() as u64;
            glommio::yield_if_needed().await;
        }
        Ok(size)
    }

    /// Cuts the log at `offset`, which starts at `position` of `target` (`truncate_to`, under
    /// both locks, writes drained).
    async fn cut(self: &Rc<Self>, target: &Rc<Segment>, offset: u64, position: u64) -> Result<()> {
        // 0. A cut inside the bytes a cleaning wrote: the compaction marker first says that
        // the cleaned bytes end at the cut and offsets resume at `offset` there — appends will
        // follow, and they must not be allowed offset gaps. (A crash after this, before the
        // truncate, finds the old bytes after the cut held to contiguity: recovery may cut
        // them, which this truncation was doing anyway.)
        if let Some(m) = super::markers::read_compacted(&self.vfs, &target.log_path).await? {
            if m.bytes > position {
                let m = super::markers::Compacted {
                    bytes: position,
                    next_offset: offset,
                };
                super::markers::write_compacted(&self.vfs, &target.log_path, m).await?;
            }
        }
        // 1. The cut itself, durable before anything else: the file (preallocated room
        // included) ends at the cut, so no crash from here on finds a cut batch in it.
        target.file.truncate(position).await?;
        target.file.fdatasync().await?;
        // 2. The segments after it. Should a crash bring any back before the directory is
        // synced, recovery deletes it: it no longer follows the cut segment.
        let later: Vec<Rc<Segment>> = {
            let mut segs = self.segments.borrow_mut();
            let bases: Vec<u64> = segs
                .range(target.base_offset + 1..)
                .map(|(b, _)| *b)
                .collect();
            bases.iter().rev().filter_map(|b| segs.remove(b)).collect()
        };
        // The cut segment's index files, if it was sealed, describe it before the cut: never
        // trusted again, as their size no longer matches the file's (`open.rs`), and it is
        // the last segment now, which recovery scans anyway.
        for seg in &later {
            self.reader.forget_segment(seg.uid);
            seg.remove_files(&self.vfs).await?;
        }
        if !later.is_empty() {
            self.vfs.sync_dir(&self.dir).await?;
        }
        // 3. In memory: the cut segment's state (indexes rebuilt by a scan of what remains),
        // the batches it held for producers, the cache and read-ahead.
        let interval = u64::from(self.config.borrow().index_interval_bytes.max(1));
        let mut scanned = Vec::new();
        if position == 0 {
            *target.state.borrow_mut() = SegmentState::empty(target.base_offset);
        } else {
            let stop =
                crate::recovery::scan_segment(target, interval, ScanRules::trusted(), &mut scanned)
                    .await?;
            let kept = target.state.borrow().size;
            if kept != position || stop.reason.is_some() {
                return Err(Error::CorruptFile {
                    path: target.log_path.clone(),
                    reason: format!(
                        "rescanning after a cut at {position} kept {kept} bytes ({:?})",
                        stop.reason
                    ),
                });
            }
        }
        self.reader.forget_segment(target.uid);
        self.cache.forget_from(offset);
        // The epochs that started in the cut part (a crash before this is written leaves
        // entries past the log end, which `open` drops).
        if self.epochs.borrow_mut().truncate_from(offset) {
            self.save_epochs().await?;
        }
        // 4. The offsets and the appender, continuing the cut segment.
        self.log_end.set(offset);
        self.hw.rewind(offset);
        // Everything below the cut is durable: earlier segments were sealed, the cut
        // segment was just fdatasync'ed.
        self.flushed.rewind(offset);
        self.flushed.advance(offset);
        self.idle_mark.set(offset);
        let tail_pos = align_down(position);
        let tail = if position > tail_pos {
            target
                .file
                .read_at(tail_pos, (position - tail_pos) as usize)
                .await?
        } else {
            Bytes::new()
        };
        if tail.len() as u64 != position - tail_pos {
            return Err(Error::CorruptFile {
                path: target.log_path.clone(),
                reason: format!("could not read back the tail block at {tail_pos}"),
            });
        }
        let config = self.config.borrow().clone();
        let prealloc = align_up(position + config.write_chunk_bytes as u64)
            .min(align_up(config.effective_segment_bytes() + (1 << 20)).max(align_up(position)));
        let prealloc = match target.file.pre_allocate(prealloc).await {
            Ok(()) => prealloc,
            Err(e) if e.is_no_space() => align_up(position),
            Err(e) => return Err(e),
        };
        *self.appender.borrow_mut() = Appender::new(
            target.file.clone(),
            target.base_offset,
            config.write_chunk_bytes,
            position,
            &tail,
            offset,
            prealloc,
        );
        // 5. The producers' state as the remaining log makes it, then saved: a snapshot
        // covering cut batches must not survive (recovery would trust it).
        let producers = self.producers_up_to(target, offset, &scanned).await?;
        *self.producers.borrow_mut() = producers;
        self.save_producer_state().await?;
        tracing::info!(dir = %self.dir.display(), offset, segments_deleted = later.len(), "log truncated");
        Ok(())
    }

    /// The producers' state of the log ending at `offset` (after the cut): the snapshot file,
    /// if it covers no more than that, with the batches after it replayed; otherwise every
    /// segment is replayed from the start. `target` is the (cut, last) segment, whose
    /// producers' batches are `scanned` already.
    async fn producers_up_to(
        &self,
        target: &Rc<Segment>,
        offset: u64,
        scanned: &[(ProducerBatch, u64, u64)],
    ) -> Result<ProducerState> {
        let snapshot = self
            .vfs
            .read_small(&self.dir.join(SNAPSHOT_FILE))
            .await?
            .and_then(|b| ProducerState::decode(&b));
        let (mut state, from) = match snapshot {
            Some((state, covers)) if covers <= offset => (state, covers),
            _ => {
                if self.producers.borrow().len() > 0 {
                    tracing::warn!(dir = %self.dir.display(), offset, "truncation below the producer-state snapshot: replaying the whole log");
                }
                (ProducerState::default(), 0)
            }
        };
        if self.producers.borrow().len() == 0 && state.len() == 0 {
            // No idempotent producer wrote here: nothing to replay.
            return Ok(state);
        }
        let earlier: Vec<Rc<Segment>> = self
            .segments
            .borrow()
            .range(..target.base_offset)
            .filter(|(_, s)| s.state.borrow().next_offset > from)
            .map(|(_, s)| s.clone())
            .collect();
        let interval = self.config.borrow().index_interval_bytes;
        for seg in earlier {
            let batches = crate::recovery::producer_batches(&seg, interval).await?;
            for (b, base, last) in batches.iter().filter(|s| s.1 >= from) {
                state.update(b, *base, *last);
            }
        }
        for (b, base, last) in scanned.iter().filter(|s| s.1 >= from && s.1 < offset) {
            state.update(b, *base, *last);
        }
        Ok(state)
    }
}
