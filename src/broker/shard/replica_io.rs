//! Replicated partitions, the traffic of their groups (see `replication` for the groups
//! themselves): produce on the leader (`Shard::produce_replicated`: offsets from the group's
//! next offset, proposals in flight included, the term stamped, the batches queued for the
//! driver to propose; acks=1 answered once the leader wrote them, acks=-1 once committed),
//! the leader's announcement to the metadata group (`PartitionLeader`), and the entries read
//! back from the segments for a lagging follower (`serve_fetches`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft::prelude::Entry;
use raft::StateRole;
use tracing::debug;
use weir::cluster::Record;

use super::replication::{Group, Proposal, Waiter};
use super::*;
use crate::broker::errors;
use crate::broker::sync::Slot;

/// Most bytes of entries read back for one fetch request (raft-rs sends at most
/// `max_size_per_msg` per message anyway).
const FETCH_BYTES: usize = 1 << 20;
/// How long a follower may go without holding every committed entry (or without being
/// heard from) before it leaves the in-sync replicas Metadata lists.
const ISR_LAG: Duration = Duration::from_secs(5);

/// Longest a produce waits for its entry to be written (acks=1) or committed (acks=-1).
pub(super) const ACKS_WAIT: Duration = Duration::from_secs(30);

impl Shard {
    /// On a leader (after each `Ready` and every tick): what the metadata should say of its
    /// partition — this replica leading at its term, and the in-sync replicas — and, if it
    /// says something else, one `PartitionLeader` record through core 0 (one at a time: the
    /// next tick looks again). A follower is in sync while it was, within the last
    /// `ISR_LAG`, seen lately by raft-rs (`recent_active`) holding every committed entry
    /// (Kafka's `replica.lag.time.max.ms` rule, so a follower a few entries behind under
    /// load does not flap in and out); a new leader starts with every replica in sync.
    pub(super) fn report_leadership(self: &Rc<Self>, g: &Rc<Group>) {
        if g.failed.get() || self.shutdown.is_fired() {
            return;
        }
        let now = Instant::now();
        let (term, isr) = {
            let raw = g.raw.borrow();
            if raw.raft.state != StateRole::Leader {
                return;
            }
            let term = raw.raft.term;
            let mut seen = g.caught_up.borrow_mut();
            if g.isr_term.replace(term) != term {
                seen.clear();
                for (id, _) in raw.raft.prs().iter() {
                    seen.insert(*id, now);
                }
            }
            let committed = raw.raft.raft_log.committed;
            let me = raw.raft.id;
            // (A sleeping leader's `recent_active` stays as it was when it fell asleep: a
            // follower's broker going silent since would have woken it.)
            for (id, pr) in raw.raft.prs().iter() {
                if *id == me || (pr.recent_active && pr.matched >= committed) {
                    seen.insert(*id, now);
                }
            }
            let mut isr: Vec<u64> = seen
                .iter()
                .filter(|(_, at)| now.duration_since(**at) <= ISR_LAG)
                .map(|(id, _)| *id)
                .collect();
            isr.sort_unstable();
            (term, isr)
        };
        if g.reporting.get() {
            return;
        }
        let meta = self.metadata();
        let Some(here) = meta.local_broker else {
            return;
        };
        let p = g.partition as usize;
        let up_to_date = meta.topics.get(&g.topic).is_some_and(|t| {
            Metadata::leader_epoch(t, p) == term
                && t.brokers.get(p) == Some(&here)
                && t.isr.get(p) == Some(&isr)
        });
        if up_to_date {
            return;
        }
        let record = Record::PartitionLeader {
            topic: g.topic.clone(),
            topic_id: g.topic_id.clone(),
            partition: p,
            broker: here,
            core: self.id,
            epoch: term,
            isr,
        };
        g.reporting.set(true);
        let (shard, g) = (self.clone(), g.clone());
        glommio::spawn_local(async move {
            if let Resp::Stored(Err(e)) = Box::pin(shard.call(0, Req::Submit(vec![record]))).await {
                debug!(topic = %g.topic, partition = g.partition, error = %e,
                    "reporting a partition's leader; trying again");
                glommio::timer::sleep(Duration::from_millis(200)).await;
            }
            g.reporting.set(false);
        })
        .detach();
    }

    /// Core 0: submits metadata records another core asked for (a partition leader).
    pub(super) async fn submit_for_core(
        self: &Rc<Self>,
        records: Vec<Record>,
    ) -> Result<(), String> {
        let node = self
            .cluster_node()
            .ok_or("the metadata group is not running yet")?;
        node.submit(records, Duration::from_secs(10))
            .await
            .map(|_| ())
    }

    /// A record set the broker itself wrote (a transaction marker, a batch of an internal
    /// topic), proposed in the same order and after the same check as a producer's (for the
    /// broker's own batches: control batches allowed, timestamps not range-checked).
    pub(super) async fn produce_replicated_internal(
        &self,
        g: Rc<Group>,
        acks: i16,
        records: bytes::Bytes,
    ) -> Result<(u64, u64), i16> {
        let order = g.clone();
        let turn = order.check_order.lock().await;
        let valid = g
            .part
            .log
            .validate(records, weir_storage::batch::Origin::Internal)
            .await
            .map_err(|e| errors::storage_error_code(&e))?;
        self.produce_replicated(g, acks, valid, turn).await
    }

    /// Produce to a replicated partition on this core (docs/replication.md §3.4): refused
    /// unless this replica leads; the batches get their offsets and the term, are proposed,
    /// and the answer waits for the write (acks=1) or the commit (acks=-1).
    pub(super) async fn produce_replicated(
        &self,
        g: Rc<Group>,
        acks: i16,
        valid: weir_storage::batch::ValidBatches,
        check_turn: crate::broker::sync::FifoGuard<'_>,
    ) -> Result<(u64, u64), i16> {
        if g.failed.get() {
            return Err(errors::KAFKA_STORAGE_ERROR);
        }
        if !g.is_leader() || g.transferring() {
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
        let started = Instant::now();
        let mut check_turn = Some(check_turn);
        let in_order = if idempotent {
            let place = g.idempotent_order.lock();
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
            if let Some((base, last)) = self.retried_batch(&g, &valid, started).await? {
                drop(in_order);
                if acks == -1 {
                    self.wait_committed(&g, last).await?;
                }
                debug!(topic = %g.topic, partition = g.partition, base, last, "a retried idempotent batch: answered with the original's offsets");
                return Ok((base, last));
            }
        }
        if g.failed.get() {
            return Err(errors::KAFKA_STORAGE_ERROR);
        }
        // The driver stops at shutdown: nothing queued now would be proposed.
        if self.shutdown.is_fired() {
            return Err(errors::NOT_LEADER_OR_FOLLOWER);
        }
        let term = g.term();
        let epoch = i32::try_from(term).map_err(|_| errors::NOT_LEADER_OR_FOLLOWER)?;
        let base = g.next_offset.get().unwrap_or_else(|| g.log_end());
        let mut next = base;
        let infos = valid.infos().to_vec();
        let mut slots = Vec::with_capacity(infos.len());
        for (info, mut b) in infos.iter().zip(valid.split()) {
            weir_storage::batch::assign_offset(&mut b, next as i64, epoch);
            next += info.last_offset_delta as u64 + 1;
            let slot = Rc::new(Slot::default());
            g.proposals.borrow_mut().push(Proposal {
                context: Vec::new(),
                data: b.to_vec(),
                term,
                slot: slot.clone(),
            });
            slots.push(slot);
        }
        g.next_offset.set(Some(next));
        self.replica_work.notify();
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
        if in_order.is_some() && g.idem_term.get() == term {
            g.idem_index.set(g.idem_index.get().max(last_index));
        }
        drop(in_order);
        if let Some(code) = refused {
            return Err(code);
        }
        if acks != 0 {
            let code = g.wait_entry(last_index, term, acks == -1).await;
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
    /// after that, the last idempotent batch this leader proposed (`Group::idem_index`). Other
    /// producers' batches in flight do not hold it up. The caller holds its turn in
    /// `idempotent_order` meanwhile, so no batch of a later request is proposed in between.
    async fn retried_batch(
        &self,
        g: &Group,
        valid: &weir_storage::batch::ValidBatches,
        started: Instant,
    ) -> Result<Option<(u64, u64)>, i16> {
        loop {
            if !g.is_leader() || g.transferring() {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            let term = g.term();
            if g.idem_term.get() != term {
                // A new term: the entries it holds from before may still be being written
                // (a new leader writes what it took as a follower).
                g.idem_term.set(term);
                g.idem_index.set(g.raw.borrow().raft.raft_log.last_index());
            }
            if g.store.last() >= g.idem_index.get() {
                break;
            }
            if started.elapsed() > ACKS_WAIT {
                return Err(errors::REQUEST_TIMED_OUT);
            }
            glommio::timer::sleep(Duration::from_micros(200)).await;
        }
        match g.part.log.check_producers(valid) {
            Ok(found) => Ok(found),
            // A batch queued before this one may have been refused while this replica stayed
            // leader (a leadership transfer, a proposal of an older term): this one then
            // follows a batch of its producer that was never written. Kafka's leader never
            // loses an accepted batch that way, and librdkafka takes OUT_OF_ORDER after an
            // earlier failure as "not written", bumps the epoch and sends it again (a long
            // fault run with transfers wrote 120 records twice). Answered as retriable: the
            // client sends the earlier batch first, then this one.
            Err(e @ weir_storage::Error::OutOfOrderSequence { .. })
                if g.dropped_at.get().is_some_and(|t| t.elapsed() < ACKS_WAIT) =>
            {
                tracing::info!(topic = %g.topic, partition = g.partition, error = %e,
                    "an idempotent batch out of order after a refused proposal: retriable");
                Err(errors::NOT_LEADER_OR_FOLLOWER)
            }
            Err(e) => {
                // Rare with a well-behaved client, and what a lost or duplicated record would
                // be traced back to: logged at info.
                tracing::info!(topic = %g.topic, partition = g.partition, term = g.term(), log_end = g.log_end(), error = %e, "an idempotent batch refused by the producer check");
                Err(errors::storage_error_code(&e))
            }
        }
    }

    /// Waits until the log's committed offset passes `last` (a retried batch found in the
    /// log is answered, for acks=all, once committed, as the original would have been).
    async fn wait_committed(&self, g: &Group, last: u64) -> Result<(), i16> {
        let log = &g.part.log;
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

    /// Retention on a replicated partition: the replica moves its Raft snapshot point to the
    /// last applied entry ending where retention would move the log start, saves it in
    /// `raft_state`, forgets the entries below it, and only then lets retention delete the
    /// segments below the point. A crash in between leaves the log starting below the point,
    /// which a restart reads past (docs/replication.md, "Retention on replicated
    /// partitions"). Each replica does this on its own, as Raft lets every member compact
    /// below its commit.
    pub(super) async fn compact_replica(&self, g: &Group, now_ms: i64) -> Result<(), String> {
        let log = &g.part.log;
        if let Some(start) = log.retention_point(now_ms) {
            self.move_snapshot_point(g, start).await?;
        }
        let limit = g.store.snapshot_point().offset;
        match log.enforce_retention_below(now_ms, limit).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(topic = %g.topic, partition = g.partition, segments = n, below = limit, "retention deleted segments")
            }
            Err(e) => return Err(format!("retention: {e}")),
        }
        Ok(())
    }

    /// One round of a group's work: tick (when due), step what arrived, propose what was
    /// produced, serve lagging followers' reads, handle its `Ready`, apply retention.
    pub(super) async fn drive_group(self: &Rc<Self>, g: &Rc<Group>, tick: bool) {
        if tick {
            g.rejoin.hold_election(&mut g.raw.borrow_mut().raft);
            g.raw.borrow_mut().tick();
            if self.config.replica_hibernate {
                g.maybe_sleep();
            }
            self.report_leadership(g);
            super::leadership::campaign_if_preferred(g);
            self.restore_preferred_leader(g);
        }
        self.step_and_propose(g);
        let mut res = self.serve_fetches(g).await;
        if res.is_ok() && g.raw.borrow().has_ready() {
            res = self.handle_ready(g).await;
        }
        // Uploads are listed before retention runs: local retention deletes only below the
        // remote end, and the snapshot point moves past an upload's entry only once it is.
        if res.is_ok() && !g.remote_due.borrow().is_empty() {
            res = self.list_remote(g).await;
        }
        if let Some(now_ms) = g.retention_due.take().filter(|_| res.is_ok()) {
            res = self.compact_replica(g, now_ms).await;
        }
        if let Some(offset) = g.cut_due.take().filter(|_| res.is_ok()) {
            res = self.cut_replica(g, offset).await;
        }
        if let Err(e) = res {
            // The replica's files cannot be written or disagree with what it was sent: it
            // must not go on voting or acknowledging.
            tracing::error!(topic = %g.topic, partition = g.partition, error = %e,
                "partition Raft group stopped on this broker");
            g.failed.set(true);
            g.fail_waiters(errors::KAFKA_STORAGE_ERROR);
        }
        glommio::yield_if_needed().await;
    }

    /// Moves the replica's Raft snapshot point to the last applied entry ending at or below
    /// `offset` (if that is past the current one): saved in `raft_state` first, then the
    /// index table forgets the entries up to it. The log's start may then move up to the
    /// point's offset; a crash before it does leaves a log starting below its point, which a
    /// restart reads past.
    async fn move_snapshot_point(&self, g: &Group, offset: u64) -> Result<(), String> {
        if let Some(point) = g.store.compaction_point(offset) {
            let mut next = g.saved.borrow().clone();
            next.snapshot = point;
            next.commit = next.commit.max(point.index);
            next.save(&g.dir).await?;
            *g.saved.borrow_mut() = next;
            g.store.compact(point)?;
        }
        Ok(())
    }

    /// A committed cut: an internal topic's cut record (its leader compacted the bucket
    /// store: docs/replication.md, "Compacting the internal topics") or a log start move
    /// (DeleteRecords, "DeleteRecords on replicated partitions"). Like retention, the snapshot
    /// point moves to the last applied entry ending at or below `offset` and is saved first;
    /// then the log start moves to `offset` (whole segments below it are deleted; the batch
    /// holding it stays stored, and the Raft log still reads it from the point). Every replica
    /// does it when it applies the cut, so all drop the same prefix; a replica that never does
    /// (it was down, its log was installed past it) only keeps more.
    pub(super) async fn cut_replica(&self, g: &Group, offset: u64) -> Result<(), String> {
        let log = &g.part.log;
        let wm = log.watermarks();
        if offset <= wm.log_start_offset {
            return Ok(());
        }
        // Never past the committed offset (the cut was committed after everything below it:
        // this only guards the log against a wrong entry).
        let start = offset.min(wm.high_watermark);
        self.move_snapshot_point(g, start).await?;
        log.set_log_start_offset(start)
            .await
            .map_err(|e| format!("moving the log start to {start}: {e}"))?;
        g.store.set_remote_manifest(log.remote_manifest());
        tracing::info!(topic = %g.topic, partition = g.partition, start, "log start moved (committed cut)");
        Ok(())
    }

    /// Lists the committed uploads (`Group::remote_due`) in this replica's remote tier, in
    /// order, durably; then the snapshot a lagging follower may be sent carries the manifest.
    pub(super) async fn list_remote(&self, g: &Group) -> Result<(), String> {
        let due = std::mem::take(&mut *g.remote_due.borrow_mut());
        let log = &g.part.log;
        for seg in due {
            let listed = log.list_remote_segment(seg).await.map_err(|e| {
                format!(
                    "listing the uploaded segment at {} in the remote tier: {e}",
                    seg.base_offset
                )
            })?;
            if listed {
                tracing::debug!(topic = %g.topic, partition = g.partition, base = seg.base_offset,
                    next = seg.next_offset, "uploaded segment listed (committed)");
            }
        }
        g.store.set_remote_manifest(log.remote_manifest());
        Ok(())
    }

    /// Reads back from the segments the entries raft-rs asked for to send to a lagging
    /// follower (evicted from the cache), then lets it send them.
    pub(super) async fn serve_fetches(&self, g: &Group) -> Result<(), String> {
        for req in g.store.take_requests() {
            let mut entries = Vec::new();
            let mut at = g.store.start_of(req.low);
            let mut bytes = 0usize;
            let mut index = req.low;
            while index < req.high && bytes < FETCH_BYTES {
                let read = g
                    .part
                    .log
                    .read_written(at, 1, FETCH_BYTES)
                    .await
                    .map_err(|e| format!("reading entries back at offset {at}: {e}"))?;
                if read.is_empty() {
                    break;
                }
                for (h, b) in read.batches() {
                    // Raft-only entries between the batches come from the index table.
                    while let Some(e) = g.store.raft_only(index) {
                        entries.push(e);
                        index += 1;
                    }
                    let Some(slot) = g.store.slot(index).filter(|_| index < req.high) else {
                        break;
                    };
                    if h.base_offset.get() as u64 != slot.start {
                        return Err(format!(
                            "entry {index} starts at offset {}, the segments have a batch at {}",
                            slot.start,
                            h.base_offset.get()
                        ));
                    }
                    entries.push(Entry {
                        index,
                        term: slot.term,
                        data: Bytes::copy_from_slice(b),
                        ..Default::default()
                    });
                    bytes += b.len();
                    at = slot.end;
                    index += 1;
                }
            }
            debug!(topic = %g.topic, partition = g.partition, low = req.low,
                entries = entries.len(), cached = ?g.store.cached(), "entries read back for a follower");
            g.store.fetched(entries);
            g.raw.borrow_mut().on_entries_fetched(req.context);
        }
        Ok(())
    }
}

impl Group {
    /// Waits until the entry at `index` of `term` is written here (`committed`: committed);
    /// NONE, or NOT_LEADER_OR_FOLLOWER if a new leader replaced it. A leader that can neither
    /// commit nor lose its leadership (never for long: check-quorum steps it down) answers
    /// like Kafka at a request's timeout.
    pub(super) async fn wait_entry(&self, index: u64, term: u64, committed: bool) -> i16 {
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

    /// Notes the cuts among the entries just committed, for the driver to drop the log below
    /// them (`Shard::cut_replica`), and the uploads to list in the remote tier
    /// (`replica::remote`, `Shard::list_remote`): on any partition a log start move (DeleteRecords,
    /// `replica::log_start`); on an internal topic's (`__consumer_offsets`,
    /// `__transaction_state`) a cut record (a bucket store's compaction ends with one,
    /// `group::offsets::Backing::rewrite`).
    pub(super) fn note_cuts(&self, committed: &[Entry]) {
        let internal = self.topic == crate::broker::group::offsets::OFFSETS_TOPIC
            || self.topic == crate::broker::txn::TXN_TOPIC;
        for e in committed {
            if e.data.is_empty() {
                if let Some(seg) = crate::broker::replica::remote::decode(&e.context) {
                    self.remote_due.borrow_mut().push(seg);
                    continue;
                }
            }
            let below = if e.data.is_empty() {
                crate::broker::replica::log_start::decode(&e.context)
            } else if internal {
                crate::broker::group::offsets::cut_below(&e.data)
            } else {
                None
            };
            if let Some(below) = below {
                let due = self.cut_due.get().map_or(below, |c| c.max(below));
                self.cut_due.set(Some(due));
            }
        }
    }
}
