//! The write pipeline: [`Log::append`] and [`Log::flush`], and what they drive — rolling the
//! active segment, preallocation, the appender's chunk (`appender.rs`), the direct writes in
//! flight and their completions, which move the high watermark, and group commit.
//!
//! Appends are ordered by the append lock (a FIFO, `watermark.rs`). Under it an append checks
//! the idempotent producers' sequences, rolls if the batches would overflow the segment,
//! preallocates, assigns offsets in place, indexes and caches the batches and copies them into
//! the chunk. A full chunk is written at once (up to `writes_in_flight` writes in flight);
//! whatever is left is written by a "kick" once the tasks ready now have run, when nothing is
//! in flight (write combining). Writes complete in submission order; each completion moves the
//! high watermark past the batches its bytes finish, and the append returns when the
//! watermark passes its own. `DESIGN.md` ("Writing") has the whole story.

use std::rc::Rc;

use bytes::Bytes;

use super::{Inner, Listener, Log};
use crate::appender::{Appender, WriteOp};
use crate::batch::{self, ValidBatches};
use crate::error::{Error, Result};
use crate::io::align_up;
use crate::producer_state::{Check, ProducerBatch, SNAPSHOT_FILE};
use crate::segment::{segment_path, Segment};

/// Offsets assigned to one `append`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub base_offset: u64,
    /// Offset of the last record appended.
    pub last_offset: u64,
    /// Log start offset at the time of the append (Kafka returns it in produce responses).
    pub log_start_offset: u64,
    /// The batch was a retry of an idempotent producer's batch already in the log: nothing
    /// was written, the offsets are the original ones.
    pub duplicate: bool,
    /// The append time the batches were stamped with on a `LogAppendTime` log, else -1.
    pub log_append_time_ms: i64,
}

/// One direct write in flight (or done, waiting for the writes before it).
pub(super) struct WriteSlot {
    seq: u64,
    covered_offset: u64,
    covered_pos: u64,
    segment_base: u64,
    partial: bool,
    done: bool,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Upper bounds (seconds) of the flush latency buckets in `FlushStats::buckets`.
pub const FLUSH_BUCKETS: [f64; 10] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1,
];

/// Flushes (fdatasync) of one log: a count, their total time, and a latency histogram
/// (`buckets[i]`: flushes that took at most `FLUSH_BUCKETS[i]`, not cumulative).
#[derive(Debug, Clone, Default)]
pub struct FlushStats {
    /// Number of fdatasyncs.
    pub count: u64,
    /// Their total time, in seconds.
    pub seconds: f64,
    /// `buckets[i]`: fdatasyncs that took at most `FLUSH_BUCKETS[i]` seconds (and more than
    /// `FLUSH_BUCKETS[i - 1]`); slower ones are only in `count` and `seconds`.
    pub buckets: [u64; FLUSH_BUCKETS.len()],
}

impl FlushStats {
    fn record(&mut self, took: std::time::Duration) {
        let s = took.as_secs_f64();
        self.count += 1;
        self.seconds += s;
        if let Some(i) = FLUSH_BUCKETS.iter().position(|&b| s <= b) {
            self.buckets[i] += 1;
        }
    }
}

impl Log {
    /// Appends one or more v2 record batches the program itself wrote (transaction markers,
    /// internal logs: control batches allowed, timestamps taken as they are). They are checked
    /// as [`Log::append_produced`] checks a producer's, but for those two rules. Assigns base
    /// offsets in place, and stamps the leader epoch [`Log::set_leader_epoch`] set (0 unless
    /// set). Returns once the data has been written to the segment file (it survives a crash
    /// of the process); see [`Log::flush`] for power loss.
    pub async fn append(&self, records: Bytes) -> Result<AppendInfo> {
        self.append_from(records, batch::Origin::Internal).await
    }

    /// Appends a producer's record set: every batch and every record is checked as Kafka's log
    /// validator does, by this log's config (`batch::validate`: counts, offsets, lengths,
    /// timestamps, keys on a compacted log, bounded decompression), and nothing is written if
    /// one fails. The check runs in this append's place in line, so a connection's pipelined
    /// appends keep their order however long each takes to check.
    pub async fn append_produced(&self, records: Bytes) -> Result<AppendInfo> {
        self.append_from(records, batch::Origin::Client).await
    }

    async fn append_from(&self, records: Bytes, origin: batch::Origin) -> Result<AppendInfo> {
        let inner = &self.inner;
        inner.check_usable()?;
        // The place in line is taken now, in this call's first poll.
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        inner.check_usable()?;
        let valid = self.validate(records, origin).await?;
        self.append_locked(permit, valid).await
    }

    /// Checks a record set by this log's config without appending it (a replicated partition's
    /// leader checks before it proposes): [`Log::append_valid`] appends the result. A client's
    /// is refused past the upload backlog's bound ([`Error::UploadBacklog`]).
    pub async fn validate(&self, records: Bytes, origin: batch::Origin) -> Result<ValidBatches> {
        if origin == batch::Origin::Client {
            super::tiered::check_backlog(&self.inner)?;
        }
        let rules = batch::Rules::of(&self.inner.config.borrow(), origin, now_ms());
        batch::validate::check(records, &rules).await
    }

    /// Appends a record set [`Log::validate`] checked (see [`Log::append`]).
    pub async fn append_valid(&self, valid: ValidBatches) -> Result<AppendInfo> {
        let inner = &self.inner;
        inner.check_usable()?;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        inner.check_usable()?;
        self.append_locked(permit, valid).await
    }

    async fn append_locked(
        &self,
        permit: crate::watermark::FifoGuard<'_>,
        valid: ValidBatches,
    ) -> Result<AppendInfo> {
        let inner = &self.inner;
        let log_append_time_ms = valid.log_append_time_ms();
        let mut valid = valid;
        let from_producers = producer_batches(valid.bytes(), valid.infos());
        // Idempotent producers: sequence checks and retries, under the append lock.
        if let Some((base_offset, last_offset)) =
            inner.check_producers(valid.infos(), &from_producers)?
        {
            drop(permit);
            // The original may still be on its way to the disk.
            if !inner.hw.wait_for(last_offset + 1).await {
                return Err(inner.failure());
            }
            return Ok(AppendInfo {
                base_offset,
                last_offset,
                log_start_offset: inner.log_start.get(),
                duplicate: true,
                log_append_time_ms: -1,
            });
        }
        let bytes = valid.bytes().len() as u64;
        inner.maybe_roll(bytes, valid.offsets()).await?;
        inner.ensure_preallocated(bytes).await?;

        // Assign offsets (and the leader epoch) in place.
        let base_offset = inner.log_end.get();
        let epoch = inner.leader_epoch.get();
        valid.assign_offsets(base_offset, epoch);
        let (records, infos) = valid.into_parts();
        inner.note_epochs(&[(epoch, base_offset)]).await?;
        let end_offset = inner
            .place(records.freeze(), &infos, &from_producers)
            .await?;
        inner.schedule_kick();
        drop(permit);

        if !inner.hw.wait_for(end_offset).await {
            return Err(inner.failure());
        }
        Ok(AppendInfo {
            base_offset,
            last_offset: end_offset - 1,
            log_start_offset: inner.log_start.get(),
            duplicate: false,
            log_append_time_ms,
        })
    }

    /// Makes every batch appended before this call durable (fdatasync). Concurrent calls
    /// share one fdatasync (group commit). Returns the flushed offset.
    pub async fn flush(&self) -> Result<u64> {
        self.inner.flush_to(self.inner.hw.get()).await
    }
}

impl Inner {
    /// Puts batches whose offsets are assigned (continuing the log end) into the log, under
    /// the append lock, after `maybe_roll` and `ensure_preallocated`: records them in the
    /// producers' state (`producer_batches`: index into `infos` and the batch's producer
    /// fields) and the segment's indexes, caches them, moves the log end and copies them into
    /// the appender's chunk. Returns the new log end offset.
    pub(super) async fn place(
        self: &Rc<Self>,
        records: Bytes,
        infos: &[batch::BatchInfo],
        producer_batches: &[(usize, ProducerBatch)],
    ) -> Result<u64> {
        let base_offset = self.log_end.get();
        let segment = self.active();
        let mut offset = base_offset;
        let mut pos = 0usize;
        let start_file_pos = segment.state.borrow().size;
        let mut producer_batches = producer_batches.iter().peekable();
        for (i, info) in infos.iter().enumerate() {
            let last = offset + info.last_offset_delta as u64;
            if let Some((_, b)) = producer_batches.next_if(|(j, _)| *j == i) {
                self.producers.borrow_mut().update(b, offset, last);
            }
            segment.record_batch(
                start_file_pos + pos as u64,
                info.total_bytes as u64,
                offset,
                last,
                info.max_timestamp,
            );
            self.cache
                .insert(offset, last + 1, records.slice(pos..pos + info.total_bytes));
            offset = last + 1;
            pos += info.total_bytes;
        }
        {
            let mut st = segment.state.borrow_mut();
            st.first_append_ms.get_or_insert_with(now_ms);
        }
        let end_offset = offset;
        self.log_end.set(end_offset);
        let file_end = self.appender.borrow().end_pos() + records.len() as u64;
        self.appender.borrow_mut().mark(file_end, end_offset);
        self.copy_in(&records).await?;
        Ok(end_offset)
    }

    /// Rolls to a new segment if the batches would overflow the active one: its size, or
    /// the 32-bit offsets relative to its base that the indexes hold.
    pub(super) async fn maybe_roll(
        self: &Rc<Self>,
        incoming_bytes: u64,
        incoming_offsets: u64,
    ) -> Result<()> {
        let limit = self.config.borrow().effective_segment_bytes();
        let active = self.active();
        let (size, next) = {
            let st = active.state.borrow();
            (st.size, st.next_offset)
        };
        let offsets_after = next - active.base_offset + incoming_offsets;
        if size > 0 && (size + incoming_bytes > limit || offsets_after > u64::from(u32::MAX)) {
            self.roll().await?;
        }
        Ok(())
    }

    /// Makes sure the file is preallocated past the chunk the next `incoming` bytes land in.
    pub(super) async fn ensure_preallocated(&self, incoming: u64) -> Result<()> {
        let (need, have, file) = {
            let a = self.appender.borrow();
            let need = align_up(a.end_pos() + incoming).max(a.chunk_end());
            (need, a.preallocated_to, a.file.clone())
        };
        if need <= have {
            return Ok(());
        }
        // ext4's fallocate waits for every direct write in flight on the file, so each call
        // drains the write queue: grow by at least `preallocate_bytes` (8 MiB), doubling
        // (hot logs extend rarely, cold ones stay small), up to the segment size.
        let (step, segment_bytes) = {
            let c = self.config.borrow();
            (
                c.preallocate_bytes.max(1 << 20),
                c.effective_segment_bytes(),
            )
        };
        let cap = align_up(segment_bytes + (1 << 20));
        // A log's first reservation is the chunk it writes into (created and opened logs
        // reserve nothing: thousands of idle partitions cost no disk); then steps.
        let target = if have == 0 {
            need
        } else {
            align_up(need.max((need + step).max(have * 2).min(cap)))
        };
        file.pre_allocate(target).await?;
        self.appender.borrow_mut().preallocated_to = target;
        Ok(())
    }

    /// Copies appended bytes into the appender, launching a write for every chunk that fills.
    async fn copy_in(self: &Rc<Self>, data: &[u8]) -> Result<()> {
        let mut rest = data;
        while !rest.is_empty() {
            let n = self.appender.borrow_mut().copy(rest);
            rest = &rest[n..];
            if self.appender.borrow().is_full() {
                let max = self.config.borrow().writes_in_flight.max(1);
                loop {
                    self.check_usable()?;
                    if self.partials_in_flight.get() == 0 && self.writes.borrow().len() < max {
                        break;
                    }
                    let seen = self.writes_completed.get();
                    self.writes_completed.wait_for(seen + 1).await;
                }
                let op = self.appender.borrow_mut().take_full();
                self.launch(op);
            }
        }
        Ok(())
    }

    /// Arranges for [`Inner::kick`] to run once the tasks that are ready now have run: appenders
    /// woken by a completed write (or arriving together) fill the chunk first, so their data
    /// goes out in full chunks instead of a partial write that full chunks would wait for.
    pub(super) fn schedule_kick(self: &Rc<Self>) {
        if self.kick_scheduled.replace(true) {
            return;
        }
        let inner = self.clone();
        glommio::spawn_local(async move {
            futures_lite::future::yield_now().await;
            inner.kick_scheduled.set(false);
            inner.kick();
        })
        .detach();
    }

    /// Writes whatever is waiting in the chunk, if nothing is in flight.
    fn kick(self: &Rc<Self>) {
        if self.failed.borrow().is_some() || !self.writes.borrow().is_empty() {
            return;
        }
        let op = self.appender.borrow_mut().take_partial();
        if let Some(op) = op {
            self.launch(op);
        }
    }

    fn launch(self: &Rc<Self>, op: WriteOp) {
        let seq = self.next_write_seq.get();
        self.next_write_seq.set(seq + 1);
        let file = {
            let a = self.appender.borrow();
            self.writes.borrow_mut().push_back(WriteSlot {
                seq,
                covered_offset: op.covered_offset,
                covered_pos: op.covered_pos,
                segment_base: a.segment_base,
                partial: op.partial,
                done: false,
            });
            a.file.clone()
        };
        if op.partial {
            self.partials_in_flight
                .set(self.partials_in_flight.get() + 1);
        }
        let inner = self.clone();
        glommio::spawn_local(async move {
            let r = file.write_at(op.buf, op.pos).await;
            inner.write_done(seq, r.map(|_| ()));
        })
        .detach();
    }

    fn write_done(self: &Rc<Self>, seq: u64, result: Result<()>) {
        if let Err(e) = result {
            self.fail(e.to_string());
        }
        let advanced = {
            let mut writes = self.writes.borrow_mut();
            if let Some(slot) = writes.iter_mut().find(|s| s.seq == seq) {
                slot.done = true;
                if slot.partial {
                    self.partials_in_flight
                        .set(self.partials_in_flight.get() - 1);
                }
            }
            let mut advanced = None;
            while writes.front().is_some_and(|s| s.done) {
                let s = writes.pop_front().expect("front exists");
                advanced = Some((s.covered_offset, s.covered_pos, s.segment_base));
            }
            advanced
        };
        self.writes_completed
            .advance(self.writes_completed.get() + 1);
        if self.failed.borrow().is_some() {
            return;
        }
        if let Some((offset, pos, segment_base)) = advanced {
            if let Some(seg) = self.segments.borrow().get(&segment_base) {
                let mut st = seg.state.borrow_mut();
                st.visible_size = st.visible_size.max(pos);
            }
            if offset > self.hw.get() {
                self.hw.advance(offset);
                self.advance_visible();
            }
        }
        self.schedule_kick();
    }

    /// Moves what readers see up to the written offset (capped at the committed offset with
    /// `committed_reads`) and tells the listeners if it moved.
    pub(super) fn advance_visible(&self) {
        let to = if self.committed_reads {
            self.hw.get().min(self.committed.get())
        } else {
            self.hw.get()
        };
        if to > self.visible.get() {
            self.visible.advance(to);
            self.producers.borrow_mut().settle(to);
            let wm = self.watermarks();
            let listeners: Vec<Listener> = self.listeners.borrow().clone();
            for l in listeners {
                l(wm);
            }
        }
    }

    /// Waits until every appended byte is written.
    pub(super) async fn drain_writes(self: &Rc<Self>) -> Result<()> {
        loop {
            self.check_usable()?;
            self.kick();
            let idle = self.writes.borrow().is_empty() && !self.appender.borrow().has_unsubmitted();
            if idle {
                return Ok(());
            }
            let seen = self.writes_completed.get();
            self.writes_completed.wait_for(seen + 1).await;
        }
    }

    /// Seals the active segment and starts a new one at the log end offset. Caller holds
    /// the append lock.
    pub(super) async fn roll(self: &Rc<Self>) -> Result<()> {
        self.drain_writes().await?;
        let old = self.active();
        old.seal(&self.vfs).await?;
        // Sealing fdatasync'ed everything written so far.
        self.flushed.advance(self.hw.get());
        let base = self.log_end.get();
        let path = segment_path(&self.dir, base);
        let config = self.config.borrow().clone();
        let marker = super::markers::compacted_path(&path);
        if self.vfs.exists(&marker) {
            // Left by a cleaned segment a truncation deleted: the new segment was not
            // cleaned, and recovery must not allow offset gaps in it.
            self.vfs.remove(&marker).await?;
            self.vfs.sync_dir(&self.dir).await?;
        }
        let file = self.vfs.open(&path, true).await?;
        if file.file_size().await? > 0 {
            // A file from a crashed earlier incarnation of this segment: its bytes must not
            // be appended into (recovery would take stale batches that happen to continue
            // the offsets as data). Empty it durably before the new segment is used.
            tracing::warn!(path = %path.display(), "a stale segment file exists at the roll offset; emptying it");
            file.truncate(0).await?;
            file.fdatasync().await?;
        }
        // The first chunk's room only; appends grow it in steps (`ensure_preallocated`).
        let prealloc = align_up(config.write_chunk_bytes as u64)
            .min(align_up(config.effective_segment_bytes() + (1 << 20)));
        file.pre_allocate(prealloc).await?;
        self.vfs.sync_dir(&self.dir).await?;
        let seg = Rc::new(Segment::new(
            base,
            file.clone(),
            path,
            config.index_interval_bytes,
        ));
        self.segments.borrow_mut().insert(base, seg);
        *self.appender.borrow_mut() =
            Appender::new(file, base, config.write_chunk_bytes, 0, &[], base, prealloc);
        // Recovery scans only the active segment: the producers up to its base come from here.
        let written = self.save_producer_state().await?;
        super::tiered::keep_producers_at_end(self, &old, written);
        tracing::debug!(dir = %self.dir.display(), base, "rolled to a new segment");
        Ok(())
    }

    /// Checks the idempotent producers' batches of a record set (`batches`: index into
    /// `infos` and the batch's producer fields) against the state. `Some(offsets)`: the set
    /// is a retry of a batch already in the log at those offsets.
    pub(super) fn check_producers(
        &self,
        infos: &[batch::BatchInfo],
        batches: &[(usize, ProducerBatch)],
    ) -> Result<Option<(u64, u64)>> {
        if batches.is_empty() {
            return Ok(None);
        }
        let state = self.producers.borrow();
        // The offsets each batch would get.
        let mut starts = Vec::with_capacity(infos.len());
        let mut next = self.log_end.get();
        for info in infos {
            starts.push(next);
            next += info.last_offset_delta as u64 + 1;
        }
        // A record set with several batches of one producer: each is checked against the
        // state as the earlier ones would leave it.
        let mut scratch = (batches.len() > 1).then(|| state.clone());
        for (i, b) in batches {
            let check = scratch.as_ref().unwrap_or(&state).check(b)?;
            if let Check::Duplicate {
                base_offset,
                last_offset,
            } = check
            {
                return Ok(Some((base_offset, last_offset)));
            }
            if let Some(sc) = scratch.as_mut() {
                sc.update(
                    b,
                    starts[*i],
                    starts[*i] + infos[*i].last_offset_delta as u64,
                );
            }
        }
        Ok(None)
    }

    /// Writes (and returns) the producer-state snapshot up to the log end, under the append
    /// lock; nothing when no idempotent producer wrote here and none exists.
    pub(super) async fn save_producer_state(&self) -> Result<Option<Bytes>> {
        let path = self.dir.join(SNAPSHOT_FILE);
        if self.producers.borrow().len() == 0 && !self.vfs.exists(&path) {
            return Ok(None);
        }
        {
            let mut producers = self.producers.borrow_mut();
            producers.forget_aborted_before(self.start_offset());
            let max_age = self.config.borrow().producer_id_expiration_ms;
            producers.expire(now_ms(), max_age);
        }
        let bytes = self.producers.borrow().encode(self.log_end.get());
        self.vfs.write_small(&path, &bytes).await?;
        Ok(Some(Bytes::from(bytes)))
    }

    pub(super) async fn flush_to(&self, target: u64) -> Result<u64> {
        loop {
            if self.flushed.get() >= target {
                return Ok(self.flushed.get());
            }
            self.check_usable()?;
            if self.sync_running.get() {
                let seen = self.syncs_completed.get();
                self.syncs_completed.wait_for(seen + 1).await;
                continue;
            }
            self.sync_running.set(true);
            let covered = self.hw.get();
            let file = self.appender.borrow().file.clone();
            let started = std::time::Instant::now();
            let r = file.fdatasync().await;
            self.flush_stats.borrow_mut().record(started.elapsed());
            self.sync_running.set(false);
            match r {
                Ok(()) => self.flushed.advance(covered),
                Err(e) => self.fail(e.to_string()),
            }
            self.syncs_completed.advance(self.syncs_completed.get() + 1);
        }
    }
}

/// The idempotent producers' batches of a validated record set: each one's index in `infos`
/// and its producer fields (from the headers).
pub(super) fn producer_batches(
    records: &[u8],
    infos: &[batch::BatchInfo],
) -> Vec<(usize, ProducerBatch)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    for (i, info) in infos.iter().enumerate() {
        if let Some(b) = ProducerBatch::of(&records[pos..]) {
            out.push((i, b));
        }
        pos += info.total_bytes;
    }
    out
}
