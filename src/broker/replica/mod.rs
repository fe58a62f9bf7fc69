//! A partition replicated across brokers (docs/replication.md §3, step 3): this broker's
//! [`Replica`] of it — a raft-rs `RawNode` over the partition's log, on the core that owns the
//! partition — and the pieces it is built from: the per-partition Raft state file (`state`),
//! the side log of Raft-only entries (`side`), the Raft log as raft-rs sees it, rebuilt from the
//! segment files and the side log (`rebuild`, `storage`), the snapshot a follower behind its
//! leader's log start installs (`snapshot`, `install`), the entry that moves every replica's
//! log start (`log_start`, DeleteRecords) and the one that lists an uploaded segment in every
//! replica's remote tier (`remote`, tiered storage). Its messages cross between brokers as
//! `weir::protocol::peer::PartitionMessage` (frame kind 4).
//!
//! A replica does its own Raft work — stepping messages, writing a `Ready` (`ready`), installing
//! a snapshot, moving its snapshot point for retention and cuts, reading entries back for a
//! lagging follower (`upkeep`), sleeping when idle (`hibernate`) — and reaches the rest of the
//! broker only through its [`Host`]: the messages it sends, the leadership it reports, the
//! broker's stopping and rejoining. The shard's `ReplicaHost` (`shard::replica_host`) is the host on a running
//! broker: it opens replicas, drives them on its core's clock, routes their messages and serves
//! produce through them.
//!
//! What is built and what is not: docs/replication.md §8, "Known limits and open questions".

mod install;
pub mod log_start;
mod produce;
mod ready;
pub mod rebuild;
pub mod remote;
pub mod side;
pub mod snapshot;
pub mod state;
pub mod storage;
mod upkeep;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft::prelude::{ConfState, HardState, Message};
use raft::{RawNode, StateRole};
use tracing::{info, warn};
use weir_storage::Log;

use crate::broker::sync::Slot;
use side::{SideEntry, SideLog};
use state::RaftState;
use storage::ReplicaStorage;

/// The partition groups' Raft clock, in ticks of the driver (`shard::replica_host::TICK`).
const ELECTION_TICKS: usize = 10;
const HEARTBEAT_TICKS: usize = 2;
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
/// Longest a produce waits for its entry to be written (acks=1) or committed (acks=-1).
pub const ACKS_WAIT: Duration = Duration::from_secs(30);

/// Replication bugs fixed once, each put back on purpose by the simulation's own test
/// (`broker::sim::each_reintroduced_bug_is_caught`) to show that it catches it. Only tests set
/// one: elsewhere `reintroduced` is always false.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bug {
    /// A replicated partition's leader proposes an idempotent batch without checking it
    /// against its producers' state (a retry of a batch already written is written twice).
    NoIdempotentCheck,
    /// A follower appends a new leader's entries without cutting its conflicting suffix.
    NoSuffixCut,
    /// The side log's crash order (4562588): a side entry written before the batches it
    /// follows are flushed, and side entries past the segments' end (a power loss kept them,
    /// lost the batches) stop the group at open instead of being cut.
    SideLogCrashOrder,
    /// Entries are acknowledged before they are flushed.
    AckBeforeFlush,
    /// A leader cut off from the others (deposed, not knowing it yet) answers a batch that
    /// follows ones the new leader wrote OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to the client.
    StaleLeaderOutOfOrder,
    /// A retried batch found in the log answered (acks=all) once the high watermark passes
    /// its offsets, whatever entry holds them by then.
    RetryAnsweredByWatermark,
}

#[cfg(test)]
thread_local! {
    pub(crate) static REINTRODUCED: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Whether the test running on this thread put `bug` back (never outside tests).
#[inline(always)]
fn reintroduced(bug: Bug) -> bool {
    #[cfg(test)]
    return REINTRODUCED.with(|b| b.get() == Some(bug));
    #[cfg(not(test))]
    {
        let _ = bug;
        false
    }
}

/// What a replica needs of its partition: the log (the partition's other state — parked
/// fetches, metrics — is the shard's).
pub trait OwnsLog {
    fn log(&self) -> &Log;
}

/// Which replica `Replica::open` opens, and how it starts.
pub struct Opening<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub topic_id: &'a str,
    /// The group's members (broker ids), and this broker's.
    pub voters: Vec<u64>,
    pub here: u64,
    /// The broker's standing after a lost data directory (`raft::rejoin`).
    pub rejoin: &'a crate::broker::raft::rejoin::Shared,
    pub now: Instant,
    /// raft-rs draws each election timeout at random, between one and two election
    /// timeouts; the simulation fixes it at one (its clocks drift instead), so that its seed
    /// alone decides a run.
    pub random_timeouts: bool,
}

/// What a replica asks of the broker it runs in (the shard on a running broker; a simulated
/// broker in a test). Called between a replica's own steps, never while it holds a borrow.
pub trait Host {
    /// Sends messages of `r`'s group to the other replicas (each names its broker in `to`).
    fn send(&self, r: &Replica, msgs: Vec<Message>);
    /// After each `Ready` (and each tick): a leader reports its leadership and its in-sync
    /// replicas where the broker keeps them (the metadata group).
    fn report(&self, r: &Rc<Replica>);
    /// `r` was just elected leader.
    fn became_leader(&self, r: &Replica);
    /// Whether the broker is stopping: a leadership offered to it now is declined.
    fn stopping(&self) -> bool;
    /// Whether the broker shut down (its driver stopped: nothing queued now is proposed).
    fn shut_down(&self) -> bool;
    /// `replica.hibernate`: idle groups stop ticking.
    fn hibernate(&self) -> bool;
    /// A replica rejoining after a lost data directory caught up with its leader.
    fn rejoined(&self, r: &Replica);
    /// Something new for the driver to do on `r`'s core (a snapshot reported sent).
    fn wake_driver(&self);
    /// The clock the replica's timeouts and periodic saves read (the wall clock on a
    /// broker; the simulation's own, so that a seed replays exactly). Hibernation still reads
    /// the wall clock (the simulation runs without it).
    fn now(&self) -> Instant;
}

/// A produce waiting for its batch's entry: written by the leader (acks=1) or committed
/// (acks=-1). Answered with an error code (NONE when done).
pub(crate) struct Waiter {
    pub(crate) index: u64,
    pub(crate) term: u64,
    pub(crate) committed: bool,
    pub(crate) slot: Rc<Slot<i16>>,
}

/// An entry queued for the driver to propose: a batch (`data`, the term stamped in it) or a
/// log start move (`context`, no data), its term, and where to say at which index it landed.
pub(crate) struct Proposal {
    pub(crate) context: Vec<u8>,
    pub(crate) data: Vec<u8>,
    pub(crate) term: u64,
    pub(crate) slot: Rc<Slot<Result<u64, i16>>>,
}

/// This broker's replica of one replicated partition: its Raft group (raft-rs `RawNode` over
/// the partition's log), what it has saved, and what waits on it.
pub struct Replica {
    pub topic: String,
    pub partition: i32,
    pub topic_id: String,
    pub(crate) part: Rc<dyn OwnsLog>,
    pub(crate) dir: PathBuf,
    pub(crate) raw: RefCell<RawNode<ReplicaStorage>>,
    pub(crate) store: ReplicaStorage,
    pub(crate) side: RefCell<Option<SideLog>>,
    /// What `raft_state` holds now.
    pub(crate) saved: RefCell<RaftState>,
    pub(crate) saved_at: Cell<Instant>,
    /// Set by the retention task (its clock): the driver applies retention to this replica
    /// between `Ready`s (`Replica::compact`), so the `raft_state` writes never interleave.
    pub(crate) retention_due: Cell<Option<i64>>,
    /// The offset a committed cut lets this replica drop its log below (`Replica::cut`,
    /// between `Ready`s like retention): an internal topic's cut record, or a log start move
    /// (DeleteRecords).
    pub(crate) cut_due: Cell<Option<u64>>,
    /// Committed uploads to the remote tier, for the driver to list (`Replica::list_remote`).
    pub(crate) remote_due: RefCell<Vec<weir_storage::tier::RemoteSegment>>,
    /// On the leader: the term it collected the remote orphans in (`Replica::tier`).
    pub(crate) orphans_term: Cell<u64>,
    /// Ticks left in which this replica, the preferred leader of a new group, campaigns as
    /// long as no leader is known (`shard::replica_host::leadership::campaign_if_preferred`).
    pub(crate) eager_ticks: Cell<u32>,
    /// Its standing while the broker rejoins after a lost data directory (`raft::rejoin`).
    pub(crate) rejoin: crate::broker::raft::rejoin::Rejoin,
    /// The preferred leader (the first replica of the placement), and when this replica,
    /// leading, next checks whether to hand the leadership back to it
    /// (`ReplicaHost::restore_preferred_leader`).
    pub(crate) preferred: u64,
    pub(crate) balance_at: Cell<Instant>,
    /// When a queued batch was last refused (`step_and_propose`): an idempotent batch that
    /// then fails its sequence check may follow it (`Replica::retried_batch`).
    pub(crate) dropped_at: Cell<Option<Instant>>,
    pub(crate) inbox: RefCell<Vec<Message>>,
    pub(crate) proposals: RefCell<Vec<Proposal>>,
    /// On the leader: the offset the next produced batch gets (proposals in flight included);
    /// `None`: to be taken from the log's last entry.
    pub(crate) next_offset: Cell<Option<u64>>,
    /// Produce requests are checked (`Log::validate` may yield) and queued in arrival order.
    pub(crate) check_order: crate::broker::sync::FifoLock,
    /// Idempotent produces pass their producer check one at a time, in arrival order (a
    /// connection's pipelined requests must be checked and proposed in the order sent).
    pub(crate) idempotent_order: crate::broker::sync::FifoLock,
    /// On the leader: the Raft index the producers' state must be written up to before the
    /// next idempotent batch is checked (`Replica::retried_batch`), and the term it is for. At
    /// the first check of a term it is the Raft log's end (entries taken as a follower); then
    /// the index of the last idempotent batch proposed.
    pub(crate) idem_index: Cell<u64>,
    pub(crate) idem_term: Cell<u64>,
    pub(crate) waiters: RefCell<Vec<Waiter>>,
    /// The leader this replica knows (broker id; 0: none), and whether a report of its
    /// leadership to the metadata group is under way.
    pub(crate) leader: Cell<u64>,
    pub(crate) reporting: Cell<bool>,
    /// On the leader: when each replica last held every committed entry, and the term that
    /// bookkeeping is for (the in-sync replicas, `report_leadership`).
    pub(crate) caught_up: RefCell<HashMap<u64, Instant>>,
    pub(crate) isr_term: Cell<u64>,
    pub(crate) failed: Cell<bool>,
    /// Since when the group sleeps (not ticked), and the leader's idle ticks in a row before
    /// it goes to sleep (`hibernate`).
    pub(crate) quiet_since: Cell<Option<Instant>>,
    pub(crate) idle_ticks: Cell<u32>,
    /// Fired after each `Ready` is handled, after a round's upkeep (an upload listed,
    /// retention, a cut) and when the replica fails: an idempotent produce waiting for its
    /// producers' entries to be written, and a leader waiting for its committed command to be
    /// carried out (`carried_out`), look again.
    /// Every waiter is woken (a `Pulse`): a retried idempotent batch, a DeleteRecords and the
    /// tiering task may wait at once.
    pub(crate) handled: crate::broker::sync::Pulse,
}

impl Replica {
    /// Whether a round between ticks has anything to do for this group: a message or a
    /// proposal queued, entries to read back, a `Ready`, a retention or cut due. A round
    /// woken by one group's work drives only the groups that have some (with thousands of
    /// groups, driving every one each time a message arrived cost most of an idle broker's
    /// CPU).
    pub(crate) fn has_work(&self) -> bool {
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
    pub(crate) fn transferring(&self) -> bool {
        self.raw.borrow().raft.lead_transferee.is_some()
    }

    pub(crate) fn term(&self) -> u64 {
        self.raw.borrow().raft.term
    }

    /// The offset after the last entry written here.
    pub(crate) fn log_end(&self) -> u64 {
        self.store.log_end()
    }

    /// The partition's log.
    pub fn log(&self) -> &Log {
        self.part.log()
    }

    /// `topic-partition`, for log lines (formatted only when a line is written).
    pub(crate) fn name(&self) -> impl std::fmt::Display + '_ {
        Named(&self.topic, self.partition)
    }

    /// On a leader: it has applied an entry of its own term (the empty entry it appended on
    /// election), hence every entry an earlier leader could still get committed, and listed
    /// every upload among them.
    pub(crate) fn applied_own_term(&self) -> bool {
        let raw = self.raw.borrow();
        let raft_log = &raw.raft.raft_log;
        raft_log.term(raft_log.applied).ok() == Some(raw.raft.term)
            && self.remote_due.borrow().is_empty()
    }

    /// Opens this broker's replica of a partition (`o` says which, and of which group), whose
    /// log `part` holds open: reads back `raft_state`, the side log and the batches, redoes an
    /// install a crash interrupted, and rebuilds raft-rs's log.
    pub async fn open(part: Rc<dyn OwnsLog>, o: Opening<'_>) -> Result<Replica, String> {
        let Opening {
            topic,
            partition,
            topic_id,
            voters,
            here,
            rejoin,
            now,
            random_timeouts,
        } = o;
        let log = part.log();
        let dir = log.dir().to_path_buf();
        let d = dir.clone();
        let (state, side, install) = weir_storage::io::off_reactor(move || {
            let state = RaftState::load_sync(&d)?;
            let side = SideLog::open_sync(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            let install = snapshot::load_install_sync(&d)?;
            Ok::<_, String>((state, side, install))
        })
        .await?;
        let mut state = state.unwrap_or_default();
        state.voters = voters.clone();
        let (side, state) = install::redo_install(log, &dir, side, state, install).await?;
        let snap = state.snapshot;
        let wm = log.watermarks();
        // (DeleteRecords may move the log start inside the first segment, past the point:
        // the entries from the point on are still stored, and the Raft log reads them.)
        if log.stored_start() > snap.offset {
            return Err(format!(
                "the log's segments start at {} but the Raft snapshot point is at offset {}: \
                 retention removed entries the Raft log still holds",
                log.stored_start(),
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
        let mut rebuild = rebuild::Rebuild::new(snap, &side_entries);
        let (mut n, mut last_term) = (0usize, 0u64);
        let mut at = snap.offset;
        loop {
            let read = log
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
        if let (Some(index), true) = (beyond, reintroduced(Bug::SideLogCrashOrder)) {
            return Err(format!(
                "side log entries from index {index} past the segments' end"
            ));
        }
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
            log.set_committed(storage.end_of(applied))
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
            // raft-rs draws each election timeout from [min, max): one value when fixed.
            max_election_tick: if random_timeouts {
                0
            } else {
                ELECTION_TICKS + 1
            },
            ..Default::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        let raw = RawNode::new(
            &config,
            storage.clone(),
            &crate::broker::raft::raft_logger(),
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
        let rejoin = rejoin.open(dir.join(crate::broker::raft::rejoin::REJOINED));
        storage.set_remote_manifest(log.remote_manifest());
        Ok(Replica {
            topic: topic.to_string(),
            partition,
            topic_id: topic_id.to_string(),
            part,
            dir,
            raw: RefCell::new(raw),
            store: storage,
            side: RefCell::new(Some(side)),
            saved: RefCell::new(state),
            saved_at: Cell::new(now),
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
            handled: Default::default(),
            retention_due: Cell::new(None),
            cut_due: Cell::new(pending_cut),
            remote_due: RefCell::new(pending_uploads),
            orphans_term: Cell::new(0),
            preferred: voters.first().copied().unwrap_or(here),
            balance_at: Cell::new(now),
            dropped_at: Cell::new(None),
            eager_ticks: Cell::new(if fresh && voters.first() == Some(&here) {
                EAGER_TICKS
            } else {
                0
            }),
            rejoin,
        })
    }
}

/// A partition named in log lines.
struct Named<'a>(&'a str, i32);

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}
