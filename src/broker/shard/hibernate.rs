//! Hibernating partition groups (docs/replication.md, "Hibernating partition groups"; TiKV's
//! Hibernate Region, CockroachDB's quiescence): a group with nothing to replicate stops
//! ticking on every replica, so an idle broker with thousands of partitions does not spend a
//! core on heartbeats.
//!
//! - **Going to sleep** (the leader, at a tick): it is leading with no transfer under way,
//!   nothing queued, nothing waiting, every entry committed and applied, and every follower
//!   holds the whole log — for `IDLE_TICKS` ticks in a row, and every follower answered lately.
//!   It then sends one last heartbeat marked `QUIET` (carrying the commit index) and stops
//!   ticking. A follower that steps such a heartbeat from its leader of the current term, and
//!   holds every entry as committed, stops ticking too.
//! - **Waking** (`Group::wake`): a proposal; any message but a heartbeat answer (an append, a
//!   vote, an unmarked heartbeat from a leader that woke); a peer broker with a replica of
//!   the group going down or coming back (`cluster::liveness`, `Shard::peer_changed`: a
//!   follower whose leader went silent then elects a new one as Raft would, a second later
//!   than without hibernation); and `QUIET_MAX` after it fell asleep, whatever happened,
//!   so that a wake-up missed for any reason costs at most that long.
//!
//! Not ticking never breaks Raft's safety, only its liveness: a sleeping group elects no one
//! and steps no leader down until something wakes it. While asleep, a leader still reports its
//! in-sync replicas and checks its preferred leader every `replication::HOUSEKEEPING_TICKS`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use raft::prelude::{Message, MessageType};
use raft::StateRole;
use tracing::debug;

use super::replication::Group;
use super::*;

/// The context of the heartbeat a leader sends as its group falls asleep (partition groups
/// use no read index, so no other heartbeat carries a context).
pub(super) const QUIET: &[u8] = b"weir:hibernate";
/// Ticks a leader stays idle before its group falls asleep.
const IDLE_TICKS: u32 = 10;
/// The longest a group sleeps without anything waking it.
const QUIET_MAX: Duration = Duration::from_secs(20);

impl Group {
    /// Whether the group sleeps (not ticked).
    pub(super) fn asleep(&self) -> bool {
        self.quiet_since.get().is_some()
    }

    /// Wakes the group: ticked again, its election clock from zero (a follower woken because
    /// its leader's broker went silent campaigns after a full election timeout).
    pub(super) fn wake(&self) {
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
    pub(super) fn maybe_sleep(&self) {
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
    pub(super) fn still_asleep(&self) -> bool {
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

impl Shard {
    /// Core 0: a peer broker was taken to be down or up again (`cluster::liveness`): every
    /// core wakes its sleeping groups with a replica on it.
    pub fn peer_changed(self: &Rc<Self>, peer: u64) {
        self.wake_groups_of(peer);
        for core in (0..self.cores).filter(|&c| c != self.id) {
            let shard = self.clone();
            glommio::spawn_local(async move {
                shard.call(core, Req::WakeGroupsOf(peer)).await;
            })
            .detach();
        }
    }

    /// Wakes this core's sleeping groups with a replica on broker `peer`.
    pub(super) fn wake_groups_of(&self, peer: u64) {
        let mut woken = 0usize;
        for g in self.replicas.borrow().values() {
            if g.asleep() && g.raw.borrow().raft.prs().iter().any(|(id, _)| *id == peer) {
                g.wake();
                woken += 1;
            }
        }
        if woken > 0 {
            debug!(
                peer,
                woken, "woke the sleeping groups with a replica on a peer"
            );
            self.replica_work.notify();
        }
    }
}
