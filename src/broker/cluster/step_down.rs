//! Controlled shutdown of the metadata group's leadership (docs/replication.md, "Controlled
//! shutdown"): a stopping broker hands it to a voter in sync and declines it from then on
//! (`Node::run` drops `MsgTimeoutNow` once `stopping` is set).

use raft::StateRole;
use tracing::info;

use super::Node;

/// Where a stopping broker's leadership of a Raft group is (`Node::step_down`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handover {
    /// This broker does not lead the group.
    NotLeader,
    /// Handed to a replica in sync, which is taking over.
    Moving,
    /// No replica is in sync to take it: kept until the broker stops.
    NoSuccessor,
}

impl Node {
    /// Controlled shutdown (`Shard::step_down`): from now on this broker declines the
    /// leadership; if it leads, it hands it to a voter in sync (active, holding every
    /// committed entry), the one furthest ahead.
    pub fn step_down(&self) -> Handover {
        self.stopping.set(true);
        let mut raw = self.raw.borrow_mut();
        if raw.raft.state != StateRole::Leader {
            return Handover::NotLeader;
        }
        if raw.raft.lead_transferee.is_some() {
            return Handover::Moving;
        }
        let Some(to) = successor(&raw.raft, None) else {
            return Handover::NoSuccessor;
        };
        info!(
            to,
            term = raw.raft.term,
            "stopping: handing the metadata leadership over"
        );
        raw.transfer_leader(to);
        drop(raw);
        self.work.notify();
        Handover::Moving
    }
}

/// Whom a stopping leader hands a group to: a follower in sync (active, holding every
/// committed entry) — `preferred` if it is one, else the one furthest ahead; `None` when no
/// follower is in sync. raft-rs sends it what it still lacks before it lets it campaign.
pub fn successor<T: raft::Storage>(r: &raft::Raft<T>, preferred: Option<u64>) -> Option<u64> {
    let (me, committed) = (r.id, r.raft_log.committed);
    let in_sync = || {
        r.prs()
            .iter()
            .filter(move |(id, pr)| **id != me && pr.recent_active && pr.matched >= committed)
    };
    if let Some(p) = preferred.filter(|p| in_sync().any(|(id, _)| id == p)) {
        return Some(p);
    }
    in_sync()
        .max_by_key(|(_, pr)| pr.matched)
        .map(|(id, _)| *id)
}
