//! A coordinator in a cluster taking over and handing over groups: its buckets are
//! partitions of the replicated `__consumer_offsets`, and which groups it coordinates follows
//! the leadership of those partitions (docs/replication.md, "Consumer groups in a cluster").

use std::cell::RefCell;
use std::rc::Rc;

use super::coordinator::*;

impl Coordinator {
    /// Makes this a cluster's coordinator: its buckets are `__consumer_offsets` partitions.
    /// Groups restored from local stores at open are dropped: in a cluster they come from
    /// the partitions this core leads.
    pub fn set_replica(&self, replica: Rc<dyn super::offsets::BucketReplica>) {
        self.offsets.set_replica(replica);
        self.forget_groups(|_| true);
    }

    /// Before a request for `group`: in a cluster, loads the group's bucket if this core
    /// has just become the leader of its partition, replacing the group state it kept for
    /// that bucket under an older term by the groups stored in the partition (restored
    /// Stable, as they were when their last generation completed: `persist.rs`). An error is
    /// the request's answer.
    pub async fn prepare(&self, group: &str) -> Result<(), i16> {
        if self.offsets.load(group).await? {
            let bucket = super::offsets::bucket_of(group);
            self.forget_groups(|g| super::offsets::bucket_of(g) == bucket);
            self.restore_groups(|b| b == bucket);
        }
        if self.offsets.is_cluster() && !self.offsets.owns(group) {
            return Err(self.offsets.not_serving(group));
        }
        Ok(())
    }

    /// Drops the groups `which` picks, answering their members' waiting JoinGroup and
    /// SyncGroup with NOT_COORDINATOR (they find the coordinator again).
    pub(super) fn forget_groups(&self, which: impl Fn(&str) -> bool) {
        // Consumer-protocol groups too: the new coordinator restores them from the bucket's
        // log (`persist.rs`), and their members find it there.
        self.consumer.forget(&which);
        let gone: Vec<(String, Rc<RefCell<Group>>)> = {
            let mut groups = self.groups.borrow_mut();
            let ids: Vec<String> = groups.keys().filter(|g| which(g)).cloned().collect();
            ids.into_iter()
                .filter_map(|id| groups.remove(&id).map(|g| (id, g)))
                .collect()
        };
        for (id, group) in gone {
            let g = group.borrow();
            for m in g.members.values() {
                if let Some(w) = &m.join_waiter {
                    w.set(JoinResponse {
                        error: codes::NOT_COORDINATOR,
                        generation_id: -1,
                        ..Default::default()
                    });
                }
                if let Some(w) = &m.sync_waiter {
                    w.set(SyncResponse {
                        error: codes::NOT_COORDINATOR,
                        ..Default::default()
                    });
                }
            }
            tracing::info!(group = %id, members = g.members.len(), "no longer coordinating this group here");
        }
    }

    /// In a cluster, drops the groups of the buckets whose partition this core no longer
    /// leads (standalone, a core owns its groups for good). Called every tick.
    pub(super) fn drop_lost_groups(&self) {
        if self.offsets.is_cluster() {
            self.forget_groups(|g| !self.offsets.owns(g));
        }
    }
}
