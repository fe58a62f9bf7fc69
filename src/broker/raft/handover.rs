//! Controlled shutdown's handover of a Raft group's leadership (docs/replication.md,
//! "Controlled shutdown"), for the metadata group and the partition groups alike.

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
