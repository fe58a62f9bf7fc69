//! A replica's upkeep between `Ready`s, run by its driver: retention and committed cuts move
//! its Raft snapshot point before the log drops anything below it (`compact`, `cut`); committed
//! uploads are listed in its remote tier (`list_remote`); entries evicted from the cache that
//! a lagging follower needs are read back from the segments (`serve_fetches`); an idle group
//! sleeps.
//!
//! ## Hibernating partition groups
//! (docs/replication.md, "Hibernating partition groups"; TiKV's Hibernate Region,
//! CockroachDB's quiescence): a group with nothing to replicate stops ticking on every
//! replica, so an idle broker with thousands of partitions does not spend a core on
//! heartbeats.
//!
//! - **Going to sleep** (the leader, at a tick): it is leading with no transfer under way,
//!   nothing queued, nothing waiting, every entry committed and applied, and every follower
//!   holds the whole log — for `IDLE_TICKS` ticks in a row, and every follower answered lately.
//!   It then sends one last heartbeat marked `QUIET` (carrying the commit index) and stops
//!   ticking. A follower that steps such a heartbeat from its leader of the current term, and
//!   holds every entry as committed, stops ticking too.
//! - **Waking** (`Replica::wake`): a proposal; any message but a heartbeat answer (an append, a
//!   vote, an unmarked heartbeat from a leader that woke); a peer broker with a replica of
//!   the group going down or coming back (`peer::liveness`, `ReplicaHost::peer_changed`: a
//!   follower whose leader went silent then elects a new one as Raft would, a second later
//!   than without hibernation); and `QUIET_MAX` after it fell asleep, whatever happened,
//!   so that a wake-up missed for any reason costs at most that long.
//!
//! Not ticking never breaks Raft's safety, only its liveness: a sleeping group elects no one
//! and steps no leader down until something wakes it. While asleep, a leader still reports its
//! in-sync replicas and checks its preferred leader every `shard::replica_host::HOUSEKEEPING_TICKS`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use raft::prelude::{Entry, Message, MessageType};
use raft::StateRole;
use tracing::debug;

use super::Replica;

/// Most bytes of entries read back for one fetch request (raft-rs sends at most
/// `max_size_per_msg` per message anyway).
const FETCH_BYTES: usize = 1 << 20;
/// The context of the heartbeat a leader sends as its group falls asleep (partition groups
/// use no read index, so no other heartbeat carries a context).
const QUIET: &[u8] = b"weir:hibernate";
/// Ticks a leader stays idle before its group falls asleep.
const IDLE_TICKS: u32 = 10;
/// The longest a group sleeps without anything waking it.
const QUIET_MAX: Duration = Duration::from_secs(20);

impl Replica {
    /// Retention on a replicated partition: the replica moves its Raft snapshot point to the
    /// last applied entry ending where retention would move the log start, saves it in
    /// `raft_state`, forgets the entries below it, and only then lets retention delete the
    /// segments below the point. A crash in between leaves the log starting below the point,
    /// which a restart reads past (docs/replication.md, "Retention on replicated
    /// partitions"). Each replica does this on its own, as Raft lets every member compact
    /// below its commit.
    pub(crate) async fn compact(&self, now_ms: i64) -> Result<(), String> {
        let log = self.log();
        if let Some(start) = log.retention_point(now_ms) {
            self.move_snapshot_point(start).await?;
        }
        let limit = self.store.snapshot_point().offset;
        match log.enforce_retention_below(now_ms, limit).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(topic = %self.topic, partition = self.partition, segments = n, below = limit, "retention deleted segments")
            }
            Err(e) => return Err(format!("retention: {e}")),
        }
        Ok(())
    }

    /// Moves the replica's Raft snapshot point to the last applied entry ending at or below
    /// `offset` (if that is past the current one): saved in `raft_state` first, then the
    /// index table forgets the entries up to it. The log's start may then move up to the
    /// point's offset; a crash before it does leaves a log starting below its point, which a
    /// restart reads past.
    async fn move_snapshot_point(&self, offset: u64) -> Result<(), String> {
        if let Some(point) = self.store.compaction_point(offset) {
            let mut next = self.saved.borrow().clone();
            next.snapshot = point;
            next.commit = next.commit.max(point.index);
            next.save(&self.dir).await?;
            *self.saved.borrow_mut() = next;
            self.store.compact(point)?;
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
    pub(crate) async fn cut(&self, offset: u64) -> Result<(), String> {
        let log = self.log();
        let wm = log.watermarks();
        if offset <= wm.log_start_offset {
            return Ok(());
        }
        // Never past the committed offset (the cut was committed after everything below it:
        // this only guards the log against a wrong entry).
        let start = offset.min(wm.high_watermark);
        self.move_snapshot_point(start).await?;
        log.set_log_start_offset(start)
            .await
            .map_err(|e| format!("moving the log start to {start}: {e}"))?;
        self.store.set_remote_manifest(log.remote_manifest());
        tracing::info!(topic = %self.topic, partition = self.partition, start, "log start moved (committed cut)");
        Ok(())
    }

    /// Lists the committed uploads (`Replica::remote_due`) in this replica's remote tier, in
    /// order, durably; then the snapshot a lagging follower may be sent carries the manifest.
    pub(crate) async fn list_remote(&self) -> Result<(), String> {
        let due = std::mem::take(&mut *self.remote_due.borrow_mut());
        let log = self.log();
        for seg in due {
            let listed = log.list_remote_segment(seg).await.map_err(|e| {
                format!(
                    "listing the uploaded segment at {} in the remote tier: {e}",
                    seg.base_offset
                )
            })?;
            if listed {
                tracing::debug!(topic = %self.topic, partition = self.partition, base = seg.base_offset,
                    next = seg.next_offset, "uploaded segment listed (committed)");
            }
        }
        self.store.set_remote_manifest(log.remote_manifest());
        Ok(())
    }

    /// Reads back from the segments the entries raft-rs asked for to send to a lagging
    /// follower (evicted from the cache), then lets it send them.
    pub(crate) async fn serve_fetches(&self) -> Result<(), String> {
        for req in self.store.take_requests() {
            let mut entries = Vec::new();
            let mut at = self.store.start_of(req.low);
            let mut bytes = 0usize;
            let mut index = req.low;
            while index < req.high && bytes < FETCH_BYTES {
                let read = self
                    .log()
                    .read_written(at, 1, FETCH_BYTES)
                    .await
                    .map_err(|e| format!("reading entries back at offset {at}: {e}"))?;
                if read.is_empty() {
                    break;
                }
                for (h, b) in read.batches() {
                    // Raft-only entries between the batches come from the index table.
                    while let Some(e) = self.store.raft_only(index) {
                        entries.push(e);
                        index += 1;
                    }
                    let Some(slot) = self.store.slot(index).filter(|_| index < req.high) else {
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
            debug!(topic = %self.topic, partition = self.partition, low = req.low,
                entries = entries.len(), cached = ?self.store.cached(), "entries read back for a follower");
            self.store.fetched(entries);
            self.raw.borrow_mut().on_entries_fetched(req.context);
        }
        Ok(())
    }

    /// Whether the group sleeps (not ticked).
    pub fn asleep(&self) -> bool {
        self.quiet_since.get().is_some()
    }

    /// Wakes the group: ticked again, its election clock from zero (a follower woken because
    /// its leader's broker went silent campaigns after a full election timeout).
    pub(crate) fn wake(&self) {
        self.idle_ticks.set(0);
        if self.quiet_since.take().is_some() {
            self.raw.borrow_mut().raft.election_elapsed = 0;
            debug!(topic = %self.topic, partition = self.partition, "partition group awake");
        }
    }

    /// Before `m` is stepped: whether it wakes the group (anything but a heartbeat answer or
    /// a marked heartbeat), and, for a marked heartbeat, that it may put a follower to sleep
    /// once stepped (`after_quiet_heartbeat`).
    pub(super) fn wakes_on(m: &Message) -> bool {
        match m.get_msg_type() {
            MessageType::MsgHeartbeatResponse => false,
            MessageType::MsgHeartbeat => &m.context[..] != QUIET,
            _ => true,
        }
    }

    /// After a marked heartbeat was stepped: the follower sleeps if it came from its leader
    /// of the current term and every entry it holds is committed.
    pub(super) fn after_quiet_heartbeat(&self, from: u64, term: u64) {
        let mut raw = self.raw.borrow_mut();
        let r = &raw.raft;
        if r.state == StateRole::Follower
            && r.leader_id == from
            && r.term == term
            && r.raft_log.committed == r.raft_log.last_index()
        {
            raw.raft.election_elapsed = 0;
            drop(raw);
            self.quiet_since.set(Some(Instant::now()));
            self.idle_ticks.set(0);
        }
    }

    /// At a leader's tick: counts the idle ticks and, after `IDLE_TICKS` of them with every
    /// follower lately heard from, sends the marked heartbeat and falls asleep.
    pub(crate) fn maybe_sleep(&self) {
        if self.asleep() {
            return;
        }
        let mut raw = self.raw.borrow_mut();
        let r = &raw.raft;
        let last = r.raft_log.last_index();
        let idle = r.state == StateRole::Leader
            && r.lead_transferee.is_none()
            && self.proposals.borrow().is_empty()
            && self.waiters.borrow().is_empty()
            && self.retention_due.get().is_none()
            && self.cut_due.get().is_none()
            && self.remote_due.borrow().is_empty()
            && r.raft_log.committed == last
            && r.raft_log.applied >= last
            && r.prs()
                .iter()
                .all(|(id, pr)| *id == r.id || pr.matched == last);
        if !idle {
            self.idle_ticks.set(0);
            return;
        }
        let n = self.idle_ticks.get().saturating_add(1);
        self.idle_ticks.set(n);
        // raft-rs clears `recent_active` at each quorum check and sets it again on the next
        // answer: not yet heard from since is no reason to start counting again.
        let heard = r
            .prs()
            .iter()
            .all(|(id, pr)| *id == r.id || pr.recent_active);
        if n < IDLE_TICKS || !heard || raw.has_ready() {
            return;
        }
        raw.raft.ping();
        for m in raw.raft.msgs.iter_mut() {
            if m.get_msg_type() == MessageType::MsgHeartbeat {
                m.context = bytes::Bytes::from_static(QUIET);
            }
        }
        drop(raw);
        self.quiet_since.set(Some(Instant::now()));
        debug!(topic = %self.topic, partition = self.partition, "partition group asleep");
    }

    /// At a tick while asleep: wakes the group after `QUIET_MAX`; true while it still sleeps.
    pub(crate) fn still_asleep(&self) -> bool {
        match self.quiet_since.get() {
            Some(since) if since.elapsed() >= QUIET_MAX => {
                self.wake();
                false
            }
            Some(_) => true,
            None => false,
        }
    }
}
