//! Produce on a replicated partition's leader (docs/replication.md §3.4): the batches get
//! their offsets from the group's next offset (proposals in flight included) and the term as
//! leader epoch, an idempotent producer's batches are first checked against the producers'
//! state (§3.8), and the batches are queued for the driver to propose; the answer waits for
//! the entry to be written here (acks=1) or committed (acks=-1).

use std::rc::Rc;
use std::time::Instant;

use tracing::debug;

use super::{reintroduced, Bug, Host, Proposal, Replica, Waiter, ACKS_WAIT};
use crate::broker::errors;
use crate::broker::sync::Slot;

impl Replica {
    /// A record set checked (`origin`: for the broker's own batches — a transaction marker, a
    /// batch of an internal topic — control batches allowed, timestamps not range-checked) and
    /// proposed in its place in line, the refusal as a bare error code. (A client's Produce
    /// checks in `Shard::produce_one`, which answers a refusal with its record errors.)
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
        let mut next = base;
        let infos = valid.infos().to_vec();
        let mut slots = Vec::with_capacity(infos.len());
        for (info, mut b) in infos.iter().zip(valid.split()) {
            weir_storage::batch::assign_offset(&mut b, next as i64, epoch);
            next += info.last_offset_delta as u64 + 1;
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
