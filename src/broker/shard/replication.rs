//! Replicated partitions on their owning core (docs/replication.md §3-§6, step 3): each
//! replica of a partition of replication factor above 1 runs a raft-rs `RawNode` (a
//! `Group`) on the core holding that replica, on every replica broker; one driver task per
//! core ticks all its groups and handles their `Ready`s.
//!
//! The Raft log is the partition's segment files: an entry is one record batch (offsets
//! assigned and `partition_leader_epoch` = the term, by the leader before proposing), written
//! by `Log::append_assigned` on the leader and the followers alike; the new leader's empty
//! entry goes to the side log (`replica::side`); a follower's conflicting suffix is cut by
//! `Log::truncate_to`. term and vote are saved in `raft_state` (`replica::state`, on the
//! blocking pool) before the messages that depend on them leave. raft-rs reads its log
//! through `replica::storage::ReplicaStorage` (an index table of every entry and a bounded
//! cache of recent ones), filled at open from the segments (`replica::store::rebuild`), kept
//! in step by every persisted `Ready`; entries evicted from the cache that a lagging follower
//! needs are read back from the segments (`serve_fetches`); one behind the leader's log start
//! installs a snapshot (`install`).
//!
//! The log is opened with `committed_reads`: consumers read up to the Raft commit only
//! (`Log::set_committed`, moved on every `Ready` that commits). Produce on the leader, the
//! messages' way between brokers and the leader's announcement to the metadata group are in
//! `replica_io`.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::future::or;
use raft::prelude::{ConfState, HardState, Message, MessageType};
use raft::{RawNode, StateRole};
use tracing::{debug, info, warn};

use super::*;
use crate::broker::errors;
use crate::broker::replica::side::{self, SideEntry, SideLog};
use crate::broker::replica::state::RaftState;
use crate::broker::replica::storage::ReplicaStorage;
use crate::broker::replica::store;
use crate::broker::sync::Slot;

/// The partition groups' clock: like the metadata group's (docs/replication.md §6).
const TICK: Duration = Duration::from_millis(100);
const ELECTION_TICKS: usize = 10;
const HEARTBEAT_TICKS: usize = 2;
/// How often (in ticks) a sleeping leader (`hibernate`) reports its in-sync replicas and
/// checks its preferred leader.
const HOUSEKEEPING_TICKS: u64 = 10;
/// How many ticks the preferred replica of a new group campaigns (before the others' first
/// election timeout, `ELECTION_TICKS` to twice that).
const EAGER_TICKS: u32 = 8;
/// How much of the log is read back per read when a replica opens.
const REBUILD_READ_BYTES: usize = 4 << 20;
/// Applied entries' bytes each replica keeps cached for its followers; older ones are read
/// back from the segments when a follower needs them.
const CACHE_BYTES: usize = 4 << 20;
/// How often a moving commit index is saved in `raft_state` (term and vote are saved at
/// once, before anything depends on them; the commit may lag: it is re-learned).
const COMMIT_SAVE_EVERY: Duration = Duration::from_secs(1);

/// A produce waiting for its batch's entry: written by the leader (acks=1) or committed
/// (acks=-1). Answered with an error code (NONE when done).
pub(super) struct Waiter {
    pub(super) index: u64,
    pub(super) term: u64,
    pub(super) committed: bool,
    pub(super) slot: Rc<Slot<i16>>,
}

/// An entry queued for the driver to propose: a batch (`data`, the term stamped in it) or a
/// log start move (`context`, no data), its term, and where to say at which index it landed.
pub(super) struct Proposal {
    pub(super) context: Vec<u8>,
    pub(super) data: Vec<u8>,
    pub(super) term: u64,
    pub(super) slot: Rc<Slot<Result<u64, i16>>>,
}

/// One replica's Raft group.
pub struct Group {
    pub topic: String,
    pub partition: i32,
    pub topic_id: String,
    pub(super) part: Rc<Partition>,
    pub(super) dir: PathBuf,
    pub(super) raw: RefCell<RawNode<ReplicaStorage>>,
    pub(super) store: ReplicaStorage,
    pub(super) side: RefCell<Option<SideLog>>,
    /// What `raft_state` holds now.
    pub(super) saved: RefCell<RaftState>,
    pub(super) saved_at: Cell<Instant>,
    /// Set by the retention task (its clock): the driver applies retention to this replica
    /// between `Ready`s (`Shard::compact_replica`), so the `raft_state` writes never interleave.
    pub(super) retention_due: Cell<Option<i64>>,
    /// The offset a committed cut lets this replica drop its log below (`Shard::cut_replica`,
    /// between `Ready`s like retention): an internal topic's cut record, or a log start move
    /// (DeleteRecords).
    pub(super) cut_due: Cell<Option<u64>>,
    /// Committed uploads to the remote tier, for the driver to list (`Shard::list_remote`).
    pub(super) remote_due: RefCell<Vec<weir_storage::tier::RemoteSegment>>,
    /// On the leader: the term it collected the remote orphans in (`Shard::tier_replica`).
    pub(super) orphans_term: Cell<u64>,
    /// Ticks left in which this replica, the preferred leader of a new group, campaigns as
    /// long as no leader is known (`Shard::campaign_if_preferred`).
    pub(super) eager_ticks: Cell<u32>,
    /// Its standing while the broker rejoins after a lost data directory (`cluster::rejoin`).
    pub(super) rejoin: crate::broker::cluster::rejoin::Rejoin,
    /// The preferred leader (the first replica of the placement), and when this replica,
    /// leading, next checks whether to hand the leadership back to it
    /// (`Shard::restore_preferred_leader`).
    pub(super) preferred: u64,
    pub(super) balance_at: Cell<Instant>,
    /// When a queued batch was last refused (`step_and_propose`): an idempotent batch that
    /// then fails its sequence check may follow it (`Shard::retried_batch`).
    pub(super) dropped_at: Cell<Option<Instant>>,
    pub(super) inbox: RefCell<Vec<Message>>,
    pub(super) proposals: RefCell<Vec<Proposal>>,
    /// On the leader: the offset the next produced batch gets (proposals in flight included);
    /// `None`: to be taken from the log's last entry.
    pub(super) next_offset: Cell<Option<u64>>,
    /// Produce requests are checked (`Log::validate` may yield) and queued in arrival order.
    pub(super) check_order: crate::broker::sync::FifoLock,
    /// Idempotent produces pass their producer check one at a time, in arrival order (a
    /// connection's pipelined requests must be checked and proposed in the order sent).
    pub(super) idempotent_order: crate::broker::sync::FifoLock,
    /// On the leader: the Raft index the producers' state must be written up to before the
    /// next idempotent batch is checked (`Shard::retried_batch`), and the term it is for. At
    /// the first check of a term it is the Raft log's end (entries taken as a follower); then
    /// the index of the last idempotent batch proposed.
    pub(super) idem_index: Cell<u64>,
    pub(super) idem_term: Cell<u64>,
    pub(super) waiters: RefCell<Vec<Waiter>>,
    /// The leader this replica knows (broker id; 0: none), and whether a report of its
    /// leadership to the metadata group is under way.
    pub(super) leader: Cell<u64>,
    pub(super) reporting: Cell<bool>,
    /// On the leader: when each replica last held every committed entry, and the term that
    /// bookkeeping is for (the in-sync replicas, `report_leadership`).
    pub(super) caught_up: RefCell<HashMap<u64, Instant>>,
    pub(super) isr_term: Cell<u64>,
    pub(super) failed: Cell<bool>,
    /// Since when the group sleeps (not ticked), and the leader's idle ticks in a row before
    /// it goes to sleep (`hibernate`).
    pub(super) quiet_since: Cell<Option<Instant>>,
    pub(super) idle_ticks: Cell<u32>,
}

impl Group {
    /// Whether a round between ticks has anything to do for this group: a message or a
    /// proposal queued, entries to read back, a `Ready`, a retention or cut due. A round
    /// woken by one group's work drives only the groups that have some (with thousands of
    /// groups, driving every one each time a message arrived cost most of an idle broker's
    /// CPU).
    pub(super) fn has_work(&self) -> bool {
        !self.inbox.borrow().is_empty()
            || !self.proposals.borrow().is_empty()
            || self.retention_due.get().is_some()
            || self.cut_due.get().is_some()
            || !self.remote_due.borrow().is_empty()
            || self.store.has_requests()
            || self.raw.borrow().has_ready()
    }

    pub fn is_leader(&self) -> bool {
        self.raw.borrow().raft.state == StateRole::Leader
    }

    /// A leader handing its leadership over (raft-rs refuses proposals meanwhile).
    pub(super) fn transferring(&self) -> bool {
        self.raw.borrow().raft.lead_transferee.is_some()
    }

    pub(super) fn term(&self) -> u64 {
        self.raw.borrow().raft.term
    }

    /// The offset after the last entry written here.
    pub(super) fn log_end(&self) -> u64 {
        self.store.log_end()
    }

    /// Answers the produces whose entry is written here (acks=1) or committed (acks=-1):
    /// NONE if the entry at their index is still theirs (same term), else
    /// NOT_LEADER_OR_FOLLOWER (a new leader replaced it).
    pub(super) fn settle_waiters(&self) {
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

    pub(super) fn fail_waiters(&self, code: i16) {
        for w in self.waiters.borrow_mut().drain(..) {
            w.slot.set(code);
        }
        for p in self.proposals.borrow_mut().drain(..) {
            p.slot.set(Err(code));
        }
    }
}

impl Shard {
    /// The group of a replicated partition whose replica is on this core.
    pub(super) fn replica_group(&self, topic: &str, partition: i32) -> Option<Rc<Group>> {
        self.replicas
            .borrow()
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// Starts the Raft group of this core's replica of `topic`-`partition` (its log is open):
    /// reads back `raft_state`, the side log and the batches, and rebuilds raft-rs's log.
    pub(super) async fn open_group(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        voters: Vec<u64>,
    ) -> Result<(), String> {
        let here = self
            .metadata()
            .local_broker
            .ok_or("a replicated partition on a standalone broker")?;
        let part = self
            .partition(topic, partition)
            .ok_or("the replica's log is not open")?;
        let dir = part.log.dir().to_path_buf();
        let d = dir.clone();
        let (state, side, install) = weir_storage::io::off_reactor(move || {
            let state = RaftState::load_sync(&d)?;
            let side = SideLog::open_sync(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            let install = crate::broker::replica::snapshot::load_install_sync(&d)?;
            Ok::<_, String>((state, side, install))
        })
        .await?;
        let mut state = state.unwrap_or_default();
        state.voters = voters.clone();
        let (side, state) = self
            .redo_install(&part.log, &dir, side, state, install)
            .await?;
        let snap = state.snapshot;
        let wm = part.log.watermarks();
        // (DeleteRecords may move the log start inside the first segment, past the point:
        // the entries from the point on are still stored, and the Raft log reads them.)
        if part.log.stored_start() > snap.offset {
            return Err(format!(
                "the log's segments start at {} but the Raft snapshot point is at offset {}: \
                 retention removed entries the Raft log still holds",
                part.log.stored_start(),
                snap.offset
            ));
        }
        // Entries are fed to the storage as they are rebuilt: only those above the saved
        // commit, and the newest that fit the cache, stay in memory.
        let storage = ReplicaStorage::new(
            HardState::default(),
            ConfState::from((voters.clone(), vec![])),
            snap,
            Vec::new(),
            state.commit,
            CACHE_BYTES,
        )?;
        let side_entries: Vec<SideEntry> = side.entries.iter().map(|(e, _)| e.clone()).collect();
        let mut rebuild = store::Rebuild::new(snap, &side_entries);
        let (mut n, mut last_term) = (0usize, 0u64);
        let mut at = snap.offset;
        loop {
            let read = part
                .log
                .read_written(at, 1, REBUILD_READ_BYTES)
                .await
                .map_err(|e| format!("reading the log back at {at}: {e}"))?;
            let Some(next) = read.next_offset() else {
                break;
            };
            for (_, b) in read.batches() {
                let entries = rebuild.batch(Bytes::copy_from_slice(b))?;
                n += entries.len();
                last_term = entries.last().map_or(last_term, |e| e.term);
                storage.append(&entries)?;
            }
            at = next;
            glommio::yield_if_needed().await;
        }
        let (entries, beyond) = rebuild.finish()?;
        let mut side = side;
        if let Some(index) = beyond {
            warn!(
                topic,
                partition,
                index,
                "cutting side log entries past the segments' end (an interrupted truncation)"
            );
            side = weir_storage::io::off_reactor(move || side.truncate_sync(index).map(|()| side))
                .await
                .map_err(|e| format!("cutting the side log: {e}"))?;
        }
        n += entries.len();
        last_term = entries.last().map_or(last_term, |e| e.term);
        storage.append(&entries)?;
        let last = storage.last();
        let end = storage.log_end();
        let hs = HardState {
            term: state.term.max(last_term),
            vote: state.vote,
            commit: state.commit.min(last),
            ..Default::default()
        };
        let applied = hs.commit; // the log holds it; the first round redoes its commands
        let fresh = state.term == 0 && last == 0 && snap.index == 0;
        let (pending_cut, pending_uploads) =
            side::commands_to_redo(&side_entries, applied, wm.log_start_offset);
        storage.set_hard_state(hs);
        // (After a compaction the log is committed at least to the snapshot point.)
        if applied > snap.index || snap.offset > 0 {
            part.log
                .set_committed(storage.end_of(applied))
                .map_err(|e| format!("restoring the committed offset: {e}"))?;
        }
        let config = raft::Config {
            id: here,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            applied,
            ..Default::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        let raw = RawNode::new(
            &config,
            storage.clone(),
            &crate::broker::cluster::raft_logger(),
        )
        .map_err(|e| e.to_string())?;
        info!(
            topic,
            partition,
            entries = n,
            last_index = last,
            log_end = end,
            term = state.term,
            "partition Raft group starting"
        );
        let rejoin =
            (self.rejoin.borrow()).open(dir.join(crate::broker::cluster::rejoin::REJOINED));
        storage.set_remote_manifest(part.log.remote_manifest());
        let group = Rc::new(Group {
            topic: topic.to_string(),
            partition,
            topic_id: part.topic_id.clone(),
            part,
            dir,
            raw: RefCell::new(raw),
            store: storage,
            side: RefCell::new(Some(side)),
            saved: RefCell::new(state),
            saved_at: Cell::new(Instant::now()),
            inbox: RefCell::new(Vec::new()),
            proposals: RefCell::new(Vec::new()),
            next_offset: Cell::new(None),
            check_order: Default::default(),
            idempotent_order: Default::default(),
            idem_index: Cell::new(0),
            idem_term: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
            leader: Cell::new(0),
            reporting: Cell::new(false),
            caught_up: RefCell::new(HashMap::new()),
            isr_term: Cell::new(0),
            failed: Cell::new(false),
            quiet_since: Cell::new(None),
            idle_ticks: Cell::new(0),
            retention_due: Cell::new(None),
            cut_due: Cell::new(pending_cut),
            remote_due: RefCell::new(pending_uploads),
            orphans_term: Cell::new(0),
            preferred: voters.first().copied().unwrap_or(here),
            balance_at: Cell::new(Instant::now()),
            dropped_at: Cell::new(None),
            eager_ticks: Cell::new(if fresh && voters.first() == Some(&here) {
                EAGER_TICKS
            } else {
                0
            }),
            rejoin,
        });
        self.replicas
            .borrow_mut()
            .insert((topic.to_string(), partition), group);
        if !self.replica_driver.replace(true) {
            glommio::spawn_local(self.clone().drive_replicas()).detach();
        }
        self.replica_work.notify();
        Ok(())
    }

    /// The driver of this core's groups: every `TICK` drives each group once (`drive_group`),
    /// one group at a time; a round woken by work arriving drives the groups that have some
    /// (`Group::has_work`).
    async fn drive_replicas(self: Rc<Self>) {
        let mut next_tick = Instant::now() + TICK;
        let mut ticks = 0u64;
        loop {
            let now = Instant::now();
            if now < next_tick {
                or(
                    self.replica_work.notified(),
                    glommio::timer::sleep(next_tick - now),
                )
                .await;
            }
            if self.shutdown.is_fired() {
                self.fail_all_waiters();
                return;
            }
            let tick = Instant::now() >= next_tick;
            if tick {
                next_tick = Instant::now() + TICK;
            }
            // One group after another. Driving them concurrently was measured (docs/bench.md,
            // "Groups driven concurrently"): full-speed throughput did not move, so the simpler
            // order stays until a mixed load shows a need.
            let groups: Vec<Rc<Group>> = self.replicas.borrow().values().cloned().collect();
            if tick {
                ticks += 1;
            }
            let housekeeping = tick && ticks.is_multiple_of(HOUSEKEEPING_TICKS);
            for g in groups.iter().filter(|g| !g.failed.get()) {
                // A sleeping group is not ticked (`hibernate`); its leader still reports its
                // in-sync replicas and checks its preferred leader now and then.
                let asleep = tick && g.still_asleep();
                if asleep && housekeeping {
                    self.report_leadership(g);
                    self.restore_preferred_leader(g);
                }
                let tick = tick && !asleep;
                if tick || g.has_work() {
                    self.drive_group(g, tick).await;
                }
            }
        }
    }

    pub(super) fn step_and_propose(&self, g: &Group) {
        let msgs = std::mem::take(&mut *g.inbox.borrow_mut());
        for mut m in msgs {
            if self.declines(g, &mut m) {
                continue;
            }
            let quiet = !Group::wakes_on(&m);
            let (from, term) = (m.from, m.term);
            let marked = m.get_msg_type() == MessageType::MsgHeartbeat && quiet;
            if !quiet {
                g.wake();
            }
            let stepped = g.raw.borrow_mut().step(m);
            match stepped {
                Err(e) => {
                    debug!(topic = %g.topic, partition = g.partition, error = %e, "stepping a Raft message")
                }
                Ok(()) if marked && self.config.replica_hibernate => {
                    g.after_quiet_heartbeat(from, term)
                }
                Ok(()) => {}
            }
        }
        self.check_rejoined(g);
        let props = std::mem::take(&mut *g.proposals.borrow_mut());
        if !props.is_empty() {
            g.wake();
        }
        for Proposal {
            context,
            data,
            term,
            slot,
        } in props
        {
            let mut raw = g.raw.borrow_mut();
            if raw.raft.state != StateRole::Leader || raw.raft.term != term {
                slot.set(Err(errors::NOT_LEADER_OR_FOLLOWER));
                g.next_offset.set(None);
                g.dropped_at.set(Some(Instant::now()));
                continue;
            }
            match raw.propose(context, data) {
                Ok(()) => slot.set(Ok(raw.raft.raft_log.last_index())),
                Err(e) => {
                    debug!(topic = %g.topic, partition = g.partition, error = %e, "proposal dropped");
                    slot.set(Err(errors::NOT_LEADER_OR_FOLLOWER));
                    g.next_offset.set(None);
                    g.dropped_at.set(Some(Instant::now()));
                }
            }
        }
    }

    pub(super) async fn handle_ready(self: &Rc<Self>, g: &Rc<Group>) -> Result<(), String> {
        let mut rd = g.raw.borrow_mut().ready();
        if let Some(ss) = rd.ss() {
            let (leader, role) = (ss.leader_id, ss.raft_state);
            if leader != g.leader.get() || role != StateRole::Leader {
                // Any change of leader: proposals and offsets of the old term are void.
                g.next_offset.set(None);
                if role != StateRole::Leader {
                    g.fail_waiters(errors::NOT_LEADER_OR_FOLLOWER);
                }
            }
            if leader != g.leader.get() {
                info!(topic = %g.topic, partition = g.partition, leader, term = g.term(),
                    "partition leader changed");
                if role == StateRole::Leader {
                    self.new_leader_waits_to_rebalance(g);
                }
            }
            g.leader.set(leader);
        }
        let mut snapshots_sent = Vec::new();
        self.send_noting_snapshots(g, rd.take_messages(), &mut snapshots_sent);
        if !rd.snapshot().is_empty() {
            self.install_snapshot(g, rd.snapshot()).await?;
        }
        let mut committed = rd.take_committed_entries();
        self.persist_entries(g, rd.take_entries()).await?;
        if rd.must_sync() || !rd.persisted_messages().is_empty() {
            // Entries written above are fdatasync'ed before any follower acknowledges them
            // (replica.flush=sync, the design's default) and before a saved commit covers
            // them.
            g.part
                .log
                .flush()
                .await
                .map_err(|e| format!("flush: {e}"))?;
        }
        if let Some(hs) = rd.hs().cloned() {
            let must_save = {
                let s = g.saved.borrow();
                hs.term != s.term || hs.vote != s.vote
            };
            if must_save {
                let mut next = g.saved.borrow().clone();
                next.term = hs.term;
                next.vote = hs.vote;
                next.commit = hs.commit.max(next.snapshot.index);
                next.save(&g.dir).await?;
                *g.saved.borrow_mut() = next;
            }
            g.store.set_hard_state(hs);
        }
        self.send_noting_snapshots(g, rd.take_persisted_messages(), &mut snapshots_sent);
        let mut light = g.raw.borrow_mut().advance(rd);
        self.send_noting_snapshots(g, light.take_messages(), &mut snapshots_sent);
        committed.extend(light.take_committed_entries());
        g.raw.borrow_mut().advance_apply();
        self.report_snapshots(g, snapshots_sent);
        g.note_cuts(&committed);
        self.after_ready(g, committed.last().map(|e| e.index));
        // The commit is saved now and then: a restart then keeps only the entries after it
        // in memory (everything after the saved commit must stay cached until applied).
        let commit = g.raw.borrow().raft.raft_log.committed;
        if commit > g.saved.borrow().commit && g.saved_at.get().elapsed() >= COMMIT_SAVE_EVERY {
            let mut next = g.saved.borrow().clone();
            next.commit = commit;
            next.save(&g.dir).await?;
            *g.saved.borrow_mut() = next;
            g.saved_at.set(Instant::now());
        }
        Ok(())
    }

    /// After a `Ready`: the committed offset moves to the end of the last committed entry;
    /// produces whose entry is written (acks=1) or committed (acks=-1) are answered; a
    /// leader reports itself and its in-sync replicas to the metadata group.
    fn after_ready(self: &Rc<Self>, g: &Rc<Group>, committed: Option<u64>) {
        let commit = g.raw.borrow().raft.raft_log.committed;
        if committed.is_some() || commit > g.store.snapshot_point().index {
            let end = g.store.end_of(commit);
            let end = end.min(g.part.log.watermarks().log_end_offset);
            if let Err(e) = g.part.log.set_committed(end) {
                warn!(topic = %g.topic, partition = g.partition, error = %e, "set_committed");
            }
        }
        g.store.set_applied(g.raw.borrow().raft.raft_log.applied);
        g.settle_waiters();
        self.report_leadership(g);
    }
}
