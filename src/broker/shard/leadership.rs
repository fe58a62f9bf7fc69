//! Preferred leaders of replicated partitions (docs/replication.md, "Preferred leaders"): a
//! new group's preferred replica campaigns first, and a leader that is not the preferred
//! replica hands its leadership back to it once that one has caught up (Kafka's automatic
//! preferred-leader election).

use std::time::{Duration, Instant};

use raft::StateRole;
use tracing::{debug, info};

use super::replication::Group;
use super::*;

impl Shard {
    /// Kafka's automatic preferred-leader election (`auto.leader.rebalance.enable`): a leader
    /// that is not its partition's preferred replica hands the leadership to it, once every
    /// `leader.imbalance.check.interval.seconds`, if that replica is in sync (active, holding
    /// every committed entry). raft-rs's leadership transfer sends it what it lacks, then lets
    /// it campaign at once; proposals are refused meanwhile, which producers retry. Leaders moved by a broker's failure thus
    /// go back once it has caught up, so a restarted broker leads its share again.
    pub(super) fn restore_preferred_leader(&self, g: &Group) {
        let now = Instant::now();
        if !self.config.auto_leader_rebalance || now < g.balance_at.get() {
            return;
        }
        g.balance_at
            .set(now + Duration::from_secs(self.config.leader_imbalance_check_interval_s));
        let raw = g.raw.borrow();
        if raw.raft.state != StateRole::Leader
            || raw.raft.id == g.preferred
            || raw.raft.lead_transferee.is_some()
        {
            return;
        }
        // In sync (as the in-sync replicas count it: active, holding every committed entry);
        // raft-rs sends it the rest before it hands over. (Requiring every *written* entry
        // never held under load: the entries in flight are always ahead of it.)
        let committed = raw.raft.raft_log.committed;
        let ready = raw
            .raft
            .prs()
            .get(g.preferred)
            .is_some_and(|pr| pr.recent_active && pr.matched >= committed);
        if ready {
            info!(topic = %g.topic, partition = g.partition, to = g.preferred, term = raw.raft.term,
                "handing the leadership back to the preferred replica");
            drop(raw);
            g.wake();
            g.raw.borrow_mut().transfer_leader(g.preferred);
        }
    }
}

/// A new group's preferred leader — its first replica, which placement spreads evenly over
/// the brokers (`cluster::place`), as Kafka's preferred replica — campaigns at once and on
/// each of its first ticks while no leader is known, so that it is elected before the others'
/// election timeouts: leaders land where placement put them, not where raft-rs's random
/// timeouts would (which put every leader of a topic on one broker now and then). Only from
/// follower or pre-candidate (a pre-vote costs no term); never once a leader is known.
pub(super) fn campaign_if_preferred(g: &Group) {
    let left = g.eager_ticks.get();
    if left == 0 {
        return;
    }
    let mut raw = g.raw.borrow_mut();
    let idle = matches!(
        raw.raft.state,
        StateRole::Follower | StateRole::PreCandidate
    );
    if raw.raft.leader_id != 0 || !idle {
        g.eager_ticks.set(0);
        return;
    }
    g.eager_ticks.set(left - 1);
    if let Err(e) = raw.campaign() {
        debug!(topic = %g.topic, partition = g.partition, error = %e, "campaigning");
    }
}
