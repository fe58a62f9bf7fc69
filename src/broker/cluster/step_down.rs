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
        let (me, committed) = (raw.raft.id, raw.raft.raft_log.committed);
        let to = raw
            .raft
            .prs()
            .iter()
            .filter(|(id, pr)| **id != me && pr.recent_active && pr.matched >= committed)
            .max_by_key(|(_, pr)| pr.matched)
            .map(|(id, _)| *id);
        let Some(to) = to else {
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
