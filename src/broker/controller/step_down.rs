//! Controlled shutdown of the metadata group's leadership (docs/replication.md, "Controlled
//! shutdown"): a stopping broker hands it to a voter in sync and declines it from then on
//! (`Node::run` drops `MsgTimeoutNow` once `stopping` is set).

use raft::StateRole;
use tracing::info;

use super::Node;
use crate::broker::raft::{successor, Handover};

impl Node {
    /// Controlled shutdown (`ReplicaHost::step_down`): from now on this broker declines the
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
