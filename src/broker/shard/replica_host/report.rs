//! A replicated partition's leader tells the metadata group that it leads, at which term, and
//! which replicas are in sync (`PartitionLeader`, through core 0), so that Metadata answers
//! name it; the replica asks for it through its `Host` after each `Ready` and tick.

use std::rc::Rc;
use std::time::{Duration, Instant};

use raft::StateRole;
use tracing::debug;
use weir::cluster::Record;
use weir::metadata::Metadata;

use super::ReplicaHost;
use crate::broker::replica::Replica;
use crate::broker::shard::SubmitCall;

/// How long a follower may go without holding every committed entry (or without being
/// heard from) before it leaves the in-sync replicas Metadata lists.
const ISR_LAG: Duration = Duration::from_secs(5);

impl ReplicaHost {
    /// On a leader (after each `Ready` and every tick): what the metadata should say of its
    /// partition — this replica leading at its term, and the in-sync replicas — and, if it
    /// says something else, one `PartitionLeader` record through core 0 (one at a time: the
    /// next tick looks again). A follower is in sync while it was, within the last
    /// `ISR_LAG`, seen lately by raft-rs (`recent_active`) holding every committed entry
    /// (Kafka's `replica.lag.time.max.ms` rule, so a follower a few entries behind under
    /// load does not flap in and out); a new leader starts with every replica in sync.
    pub(super) fn report_leadership(&self, g: &Rc<Replica>) {
        let Some(shard) = self.shard() else {
            return;
        };
        if g.failed.get() || shard.shutdown.is_fired() {
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
        let meta = shard.metadata();
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
            core: self.core,
            epoch: term,
            isr,
        };
        g.reporting.set(true);
        let g = g.clone();
        glommio::spawn_local(async move {
            if let Some(Err(e)) = Box::pin(shard.ask(0, SubmitCall(vec![record]))).await {
                debug!(topic = %g.topic, partition = g.partition, error = %e,
                    "reporting a partition's leader; trying again");
                glommio::timer::sleep(Duration::from_millis(200)).await;
            }
            g.reporting.set(false);
        })
        .detach();
    }
}
