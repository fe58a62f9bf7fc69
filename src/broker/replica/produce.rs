//! Produce on a replicated partition's leader (docs/replication.md §3.4): the batches get
//! their offsets from the group's next offset (proposals in flight included) and the term as
//! leader epoch, an idempotent producer's batches are first checked against the producers'
//! state (§3.8), and the batches are queued for the driver to propose; the answer waits for
//! the entry to be written here (acks=1) or committed (acks=-1).
//!
//! The leader also proposes commands, Raft-only entries it waits for — a log start move
//! (`log_start`: DeleteRecords, remote retention) and an upload listed in the remote tier
//! (`remote`) — and runs the tiering pass they serve.
//!
//! ## Tiered storage on a replicated partition
//! (docs/tiered-storage.md, "Replicated partitions"): only the leader uploads, and the list of
//! remote segments travels in the partition's Raft log, so every replica holds the same list
//! and a new leader continues where the old one stopped.
//!
//! The leader of term T, once it has applied an entry of its own term (then every entry an
//! earlier leader could still get committed is applied here):
//! 1. deletes the objects no manifest entry lists whose upload id carries an epoch below T
//!    (what an earlier leader's cut-short or never-committed upload left) — once per term;
//! 2. uploads the oldest closed segment that ends past the remote end under an id of epoch T
//!    (`Log::upload_next_segment`), proposes a `remote` entry naming it and waits until it is
//!    committed and listed here (every replica lists it when it applies the entry:
//!    `Replica::list_remote`), then the next. Replicas cut their segments at different
//!    offsets: a new leader's first upload may begin inside the remote tier's last segment (the
//!    two overlap) or before it (the new one replaces the listed ones inside it, whose objects
//!    the leader then collects like orphans);
//! 3. moves the log start past the remote segments the whole log's retention deletes, as a
//!    committed log start move (the DeleteRecords path): every replica forgets them, then
//!    deletes their objects (deleting an object twice is no error).
//!
//! Local retention runs on each replica as before (`Replica::compact`): a segment goes only
//! once the replica's own manifest lists it, i.e. once its upload is committed.
//!
//! Why a deposed leader cannot lose data: its uploads carry its own, older epoch, and an entry
//! it proposes after a newer leader was elected is never committed; the newer leader collects
//! only epochs below its own, after applying everything committed before its term. A deposed
//! leader collecting orphans itself deletes only epochs below its own, which the newer leader
//! never writes, and everything committed with such an epoch it had applied before it
//! collected.

use std::rc::Rc;
use std::time::Instant;

use tracing::{debug, info, warn};

use super::{reintroduced, Bug, Host, Proposal, Replica, Waiter, ACKS_WAIT};
use crate::broker::errors;
use crate::broker::sync::Slot;

impl Replica {
    /// A record set checked (`origin`: for the broker's own batches — a transaction marker, a
    /// batch of an internal topic — control batches allowed, timestamps not range-checked) and
    /// proposed in its place in line, the refusal as a bare error code. (A client's Produce
    /// checks in `Partition::produce`, and `Shard::produce_one` answers a refusal with its record errors.)
    pub(crate) async fn produce_checked(
        &self,
        host: &dyn Host,
        acks: i16,
        records: bytes::Bytes,
        origin: weir_storage::batch::Origin,
    ) -> Result<(u64, u64), i16> {
        let turn = self.check_order.lock().await;
        let valid = self
            .log()
            .validate(records, origin)
            .await
            .map_err(|e| errors::storage_error_code(&e))?;
        self.produce(host, acks, valid, turn).await
    }

    /// Produce to a replicated partition on this core (docs/replication.md §3.4): refused
    /// unless this replica leads; the batches get their offsets and the term, are proposed,
    /// and the answer waits for the write (acks=1) or the commit (acks=-1).
    pub(crate) async fn produce(
        &self,
        host: &dyn Host,
        acks: i16,
        valid: weir_storage::batch::ValidBatches,
        check_turn: crate::broker::sync::FifoGuard<'_>,
    ) -> Result<(u64, u64), i16> {
        if self.failed.get() {
            return Err(errors::KAFKA_STORAGE_ERROR);
        }
        if !self.is_leader() || self.transferring() {
            return Err(errors::NOT_LEADER_OR_FOLLOWER);
        }
        // A transactional batch is an idempotent one here: its coordinator checked it
        // (`kafka::txn::verify_produce`), and its markers come through this same path.
        let idempotent = valid.has_producer();
        // Idempotent requests are checked and proposed one at a time, in the order they
        // reached this core: the place in line is taken before the check turn (held since the
        // request arrived) is given up, so a connection's pipelined requests cannot overtake
        // each other (the later one would be checked first and answered
        // OUT_OF_ORDER_SEQUENCE_NUMBER). The turn is held until this request's batches are
        // queued for proposal: the next is checked against them. The wait for the turn counts
        // against the request's ACKS_WAIT: behind a leader that cannot write, queued requests
        // time out together, not one after another.
        let started = host.now();
        let mut check_turn = Some(check_turn);
        let in_order = if idempotent {
            let place = self.idempotent_order.lock();
            check_turn = None;
            let turn = futures_lite::future::or(async { Some(place.await) }, async {
                glommio::timer::sleep(ACKS_WAIT).await;
                None
            })
            .await;
            Some(turn.ok_or(errors::REQUEST_TIMED_OUT)?)
        } else {
            // Held until the batches are queued below (no await in between).
            None
        };
        if in_order.is_some() {
            if let Some((base, last)) = self.retried_batch(host, &valid, started).await? {
                drop(in_order);
                if acks == -1 {
                    self.wait_found_committed(last).await?;
                }
                debug!(topic = %self.topic, partition = self.partition, base, last, "a retried idempotent batch: answered with the original's offsets");
                return Ok((base, last));
            }
        }
        if self.failed.get() {
            return Err(errors::KAFKA_STORAGE_ERROR);
        }
        // The driver stops at shutdown: nothing queued now would be proposed.
        if host.shut_down() {
            return Err(errors::NOT_LEADER_OR_FOLLOWER);
        }
        let term = self.term();
        let epoch = i32::try_from(term).map_err(|_| errors::NOT_LEADER_OR_FOLLOWER)?;
        let base = self.next_offset.get().unwrap_or_else(|| self.log_end());
        let mut valid = valid;
        let next = valid.assign_offsets(base, epoch);
        let batches = valid.split();
        let mut slots = Vec::with_capacity(batches.len());
        for b in batches {
            let slot = Rc::new(Slot::default());
            self.proposals.borrow_mut().push(Proposal {
                context: Vec::new(),
                data: b.to_vec(),
                term,
                slot: slot.clone(),
            });
            slots.push(slot);
        }
        self.next_offset.set(Some(next));
        host.wake_driver();
        drop(check_turn);
        // An idempotent request keeps its turn until the driver proposed its batches: the
        // next one's check then waits for exactly these to be written (`idem_index`), not
        // for a moment with nothing in flight on the partition.
        let mut last_index = 0;
        let mut refused = None;
        for s in slots {
            match s.take().await {
                Ok(index) => last_index = index,
                Err(code) => refused = Some(code),
            }
        }
        if in_order.is_some() && self.idem_term.get() == term {
            self.idem_index.set(self.idem_index.get().max(last_index));
        }
        drop(in_order);
        if let Some(code) = refused {
            return Err(code);
        }
        if acks != 0 {
            let code = self.wait_entry(last_index, term, acks == -1).await;
            if code != errors::NONE {
                return Err(code);
            }
        }
        Ok((base, next - 1))
    }

    /// An idempotent producer's batches are checked against the producers' state before
    /// they are proposed (docs/replication.md §3.8): a retry of a batch already in the log —
    /// one the old leader replicated before it died, say — gets the original's offsets
    /// (`Some`) and is not written again; an out-of-order sequence or a stale epoch gets its
    /// error. The state covers a batch once it is written here, so the check first waits
    /// until the entries it depends on are written: at a term's first check, every entry of
    /// the Raft log (what this replica received as a follower just before it was elected:
    /// checking without those answered OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to librdkafka);
    /// after that, the last idempotent batch this leader proposed (`Replica::idem_index`). Other
    /// producers' batches in flight do not hold it up. The caller holds its turn in
    /// `idempotent_order` meanwhile, so no batch of a later request is proposed in between.
    async fn retried_batch(
        &self,
        host: &dyn Host,
        valid: &weir_storage::batch::ValidBatches,
        started: Instant,
    ) -> Result<Option<(u64, u64)>, i16> {
        loop {
            if !self.is_leader() || self.transferring() {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            let term = self.term();
            if self.idem_term.get() != term {
                // A new term: the entries it holds from before may still be being written
                // (a new leader writes what it took as a follower).
                self.idem_term.set(term);
                self.idem_index
                    .set(self.raw.borrow().raft.raft_log.last_index());
            }
            if self.store.last() >= self.idem_index.get() {
                break;
            }

            if self.failed.get() {
                // Closed (its partition retired, the broker stopping) or failed: it leads
                // nothing any more.
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            let left = ACKS_WAIT
                .checked_sub(host.now().saturating_duration_since(started))
                .ok_or(errors::REQUEST_TIMED_OUT)?;
            // Each handled `Ready` may have written them (or changed the leadership).
            futures_lite::future::or(self.handled.notified(), glommio::timer::sleep(left)).await;
        }
        if reintroduced(Bug::NoIdempotentCheck) {
            return Ok(None);
        }
        match self.log().check_producers(valid) {
            Ok(found) => Ok(found),
            // A batch queued before this one may have been refused while this replica stayed
            // leader (a leadership transfer, a proposal of an older term): this one then
            // follows a batch of its producer that was never written. Kafka's leader never
            // loses an accepted batch that way, and librdkafka takes OUT_OF_ORDER after an
            // earlier failure as "not written", bumps the epoch and sends it again (a long
            // fault run with transfers wrote 120 records twice). Answered as retriable: the
            // client sends the earlier batch first, then this one.
            Err(e @ weir_storage::Error::OutOfOrderSequence { .. })
                if self
                    .dropped_at
                    .get()
                    .is_some_and(|t| host.now().saturating_duration_since(t) < ACKS_WAIT) =>
            {
                tracing::info!(topic = %self.topic, partition = self.partition, error = %e,
                    "an idempotent batch out of order after a refused proposal: retriable");
                Err(errors::NOT_LEADER_OR_FOLLOWER)
            }
            // A leader that has not heard from a majority lately may have been deposed without
            // knowing it (cut off from the others, before check-quorum steps it down): the
            // producer's batches since went to the new leader, and this replica's producer
            // state is stale. Answered as retriable, so that the client looks for the leader;
            // OUT_OF_ORDER would be fatal to it. (Found by the simulation, seed 855 of
            // `WEIR_SIM_SEEDS=5000`.)
            Err(e @ weir_storage::Error::OutOfOrderSequence { .. })
                if !self.majority_heard() && !reintroduced(Bug::StaleLeaderOutOfOrder) =>
            {
                tracing::info!(topic = %self.topic, partition = self.partition, error = %e,
                    "an idempotent batch out of order at a leader not heard from a majority lately: retriable");
                Err(errors::NOT_LEADER_OR_FOLLOWER)
            }
            Err(e) => {
                // Rare with a well-behaved client, and what a lost or duplicated record would
                // be traced back to: logged at info.
                tracing::info!(topic = %self.topic, partition = self.partition, term = self.term(), log_end = self.log_end(), error = %e, "an idempotent batch refused by the producer check");
                Err(errors::storage_error_code(&e))
            }
        }
    }

    /// A retried batch found in the log is answered, for acks=all, once the entry holding it
    /// is committed, as the original would have been — that entry, at its term: if a new
    /// leader replaces it, NOT_LEADER_OR_FOLLOWER (the client sends the batch again). Waiting
    /// for the high watermark to pass its offsets instead (as before the simulation's seed 57)
    /// could answer success for offsets that by then held another producer's records.
    async fn wait_found_committed(&self, last: u64) -> Result<(), i16> {
        if reintroduced(Bug::RetryAnsweredByWatermark) {
            return self.wait_watermark(last).await;
        }
        if last < self.store.snapshot_point().offset {
            // Compacted: only applied entries are.
            return Ok(());
        }
        let (index, slot) = self
            .store
            .entry_at(last)
            .ok_or(errors::NOT_LEADER_OR_FOLLOWER)?;
        match self.wait_entry(index, slot.term, true).await {
            errors::NONE => Ok(()),
            code => Err(code),
        }
    }

    /// The old wait of a found retry (`Bug::RetryAnsweredByWatermark`, tests only): until the
    /// log's committed offset passes `last`, whatever entry holds it by then.
    async fn wait_watermark(&self, last: u64) -> Result<(), i16> {
        let log = self.log();
        futures_lite::future::or(
            async {
                log.wait_for_data(last)
                    .await
                    .map_err(|e| errors::storage_error_code(&e))
            },
            async {
                glommio::timer::sleep(ACKS_WAIT).await;
                Err(errors::REQUEST_TIMED_OUT)
            },
        )
        .await
    }

    /// Whether a majority of the group (this replica included) answered it since raft-rs's
    /// last quorum check: a leader cut off from the others no longer is.
    fn majority_heard(&self) -> bool {
        let raw = self.raw.borrow();
        let (me, prs) = (raw.raft.id, raw.raft.prs());
        let heard = prs
            .iter()
            .filter(|(id, pr)| **id == me || pr.recent_active)
            .count();
        heard * 2 > prs.iter().count()
    }

    /// Answers the produces whose entry is written here (acks=1) or committed (acks=-1):
    /// NONE if the entry at their index is still theirs (same term), else
    /// NOT_LEADER_OR_FOLLOWER (a new leader replaced it).
    pub(crate) fn settle_waiters(&self) {
        let raw = self.raw.borrow();
        let (commit, written) = (raw.raft.raft_log.committed, raw.raft.raft_log.persisted);
        self.waiters.borrow_mut().retain(|w| {
            let reached = if w.committed { commit } else { written };
            if w.index > reached {
                return true;
            }
            let code = if raw.raft.raft_log.term(w.index).unwrap_or(0) == w.term {
                errors::NONE
            } else {
                errors::NOT_LEADER_OR_FOLLOWER
            };
            w.slot.set(code);
            false
        });
    }

    pub(crate) fn fail_waiters(&self, code: i16) {
        self.handled.notify();
        for w in self.waiters.borrow_mut().drain(..) {
            w.slot.set(code);
        }
        for p in self.proposals.borrow_mut().drain(..) {
            p.slot.set(Err(code));
        }
    }

    /// Waits until the entry at `index` of `term` is written here (`committed`: committed);
    /// NONE, or NOT_LEADER_OR_FOLLOWER if a new leader replaced it. A leader that can neither
    /// commit nor lose its leadership (never for long: check-quorum steps it down) answers
    /// like Kafka at a request's timeout.
    pub(crate) async fn wait_entry(&self, index: u64, term: u64, committed: bool) -> i16 {
        let slot = Rc::new(Slot::default());
        self.waiters.borrow_mut().push(Waiter {
            index,
            term,
            committed,
            slot: slot.clone(),
        });
        self.settle_waiters();
        futures_lite::future::or(slot.take(), async {
            glommio::timer::sleep(ACKS_WAIT).await;
            errors::REQUEST_TIMED_OUT
        })
        .await
    }
}

// ---- Commands and the tiering pass ----

impl Replica {
    /// Proposes a Raft entry with no data whose `context` is a command (`log_start`,
    /// `remote`) in `term`, and waits until it is committed: NONE, or the error
    /// (NOT_LEADER_OR_FOLLOWER if the leadership moved, REQUEST_TIMED_OUT). Every replica
    /// carries the command out when it applies the entry.
    pub(crate) async fn propose_command(
        &self,
        host: &dyn Host,
        term: u64,
        context: Vec<u8>,
    ) -> i16 {
        let proposed = Rc::new(Slot::default());
        self.proposals.borrow_mut().push(Proposal {
            context,
            data: Vec::new(),
            term,
            slot: proposed.clone(),
        });
        host.wake_driver();
        match proposed.take().await {
            Ok(index) => self.wait_entry(index, term, true).await,
            Err(code) => code,
        }
    }

    /// Waits (up to `ACKS_WAIT` after `started`) until `done` holds, looking again whenever the driver handled
    /// a `Ready` or did a round's upkeep (it carries a committed command out in the round
    /// whose `Ready` committed it: `Replica::round`); false if it never did or the replica
    /// failed.
    async fn carried_out(
        &self,
        host: &dyn Host,
        started: Instant,
        done: impl Fn() -> bool,
    ) -> bool {
        loop {
            if done() {
                return true;
            }
            if self.failed.get() {
                return false;
            }
            let Some(left) = ACKS_WAIT.checked_sub(host.now().saturating_duration_since(started))
            else {
                return false;
            };
            futures_lite::future::or(self.handled.notified(), glommio::timer::sleep(left)).await;
        }
    }

    /// DeleteRecords on this replica, its leader (docs/replication.md, "DeleteRecords on
    /// replicated partitions"): the log start move is proposed as a Raft-only entry
    /// (`log_start`), and answered once it is committed and this replica has carried it out,
    /// with the new log start (the low watermark). The followers carry it out as they apply
    /// it. `offset` -1: the high watermark.
    pub(crate) async fn delete_records(&self, host: &dyn Host, offset: i64) -> (i16, i64) {
        let log = self.log();
        let wm = log.watermarks();
        if self.failed.get() {
            return (errors::KAFKA_STORAGE_ERROR, -1);
        }
        if !self.is_leader() {
            return (errors::NOT_LEADER_OR_FOLLOWER, -1);
        }
        let target = match offset {
            -1 => wm.high_watermark,
            o if o < 0 || o as u64 > wm.high_watermark => {
                return (errors::OFFSET_OUT_OF_RANGE, wm.log_start_offset as i64)
            }
            o => o as u64,
        };
        if target <= wm.log_start_offset {
            return (errors::NONE, wm.log_start_offset as i64);
        }
        let context = super::log_start::encode(target);
        // One deadline for the commit and the carrying out, as for a produce.
        let started = host.now();
        let code = self.propose_command(host, self.term(), context).await;
        if code != errors::NONE {
            return (code, -1);
        }
        if !self
            .carried_out(host, started, || {
                log.watermarks().log_start_offset >= target
            })
            .await
        {
            let code = if self.failed.get() {
                errors::KAFKA_STORAGE_ERROR
            } else {
                errors::REQUEST_TIMED_OUT
            };
            return (code, -1);
        }
        let start = log.watermarks().log_start_offset;
        info!(topic = %self.topic, partition = self.partition, offset = target, "records deleted");
        (errors::NONE, start as i64)
    }

    /// One tiering pass (`Shard::run_tiering`): on the leader, the orphans, the uploads and
    /// the remote retention above; on every replica, local retention after it.
    pub(crate) async fn tier(&self, host: &dyn Host, now_ms: i64) {
        if let Err(e) = self.lead_tiering(host, now_ms).await {
            warn!(topic = %self.topic, partition = self.partition, error = %e, "tiering failed; will retry");
        }
        // An uploaded segment past `local.retention.*` goes at once (the driver does it).
        self.retention_due.set(Some(now_ms));
        host.wake_driver();
    }

    async fn lead_tiering(&self, host: &dyn Host, now_ms: i64) -> Result<(), String> {
        let term = self.term();
        if !self.is_leader() || self.failed.get() || self.transferring() || !self.applied_own_term()
        {
            return Ok(());
        }
        // Upload ids keep the epoch in 32 bits (leader epochs are i32 on the wire anyway).
        let epoch = u32::try_from(term).map_err(|_| format!("term {term} past 32 bits"))?;
        let log = self.log();
        if self.orphans_term.get() != term {
            let n = log
                .collect_remote_orphans(epoch)
                .await
                .map_err(|e| format!("collecting orphans: {e}"))?;
            if n > 0 {
                info!(topic = %self.topic, partition = self.partition, objects = n, term,
                    "deleted remote objects of earlier leaders that no entry lists");
            }
            self.orphans_term.set(term);
        }
        let mut covered = false;
        while self.is_leader() && self.term() == term && !host.shut_down() {
            let end = log.latest_tiered_offset().map(|last| last + 1);
            let Some(seg) = log
                .upload_next_segment(epoch)
                .await
                .map_err(|e| format!("uploading: {e}"))?
            else {
                break;
            };
            let context = super::remote::encode(&seg);
            let code = self.propose_command(host, term, context).await;
            if code != errors::NONE {
                // Uploaded again by the next pass (or the next leader); these objects are
                // orphans a later leader deletes.
                return Err(format!(
                    "the upload of the segment at {} was not committed (error {code})",
                    seg.base_offset
                ));
            }
            // The driver lists it right after the `Ready` that committed it.
            let listed = || {
                log.latest_tiered_offset()
                    .is_some_and(|last| last >= seg.next_offset - 1)
            };
            if !self.carried_out(host, host.now(), listed).await {
                return Err(format!(
                    "the committed upload of the segment at {} was not listed",
                    seg.base_offset
                ));
            }
            debug!(topic = %self.topic, partition = self.partition, base = seg.base_offset,
                next = seg.next_offset, bytes = seg.size, "segment uploaded and committed");
            // This replica cut its segments elsewhere than the leader before it: its segment
            // holding the remote end replaced the listed ones inside it.
            covered |= end.is_some_and(|end| seg.base_offset < end);
        }
        if covered {
            log.collect_remote_orphans(epoch)
                .await
                .map_err(|e| format!("collecting replaced segments: {e}"))?;
        }
        if let Some(cut) = log.remote_retention_point(now_ms) {
            let (code, start) = self.delete_records(host, cut as i64).await;
            if code != errors::NONE {
                return Err(format!("remote retention to {cut}: error {code}"));
            }
            debug!(topic = %self.topic, partition = self.partition, start, "remote retention moved the log start");
        }
        Ok(())
    }
}
