//! A broker's metadata catching up after it starts (docs/replication.md, "A restarted broker
//! catches up before answering Metadata").
//!
//! A broker that was down reads back the metadata it had applied: topics, and the partition
//! leaders of then. Answering Metadata from that would send clients to leaders that lost
//! their leadership while it was down (librdkafka does not retry a ListOffsets refused with
//! NOT_LEADER_OR_FOLLOWER). Kafka's KRaft broker stays fenced until it has replayed the
//! metadata log up to the controller's high watermark; here the node asks the metadata leader
//! for its commit index with a Raft read index (raft-rs `read_index`: the leader confirms its
//! leadership with a quorum and answers its commit index), and the requests answered from
//! the metadata (Metadata, DescribeTopicPartitions, DescribeCluster, FindCoordinator) wait
//! until this broker has applied that index.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::ReadState;
use tracing::{info, warn};

use super::Node;

/// The longest a started broker holds Metadata requests: a cluster without a metadata
/// quorum never answers the read index, and clients wait at most this long before getting
/// what this broker has.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(10);
/// How often the read index is asked again (raft-rs drops it while there is no leader, or
/// while a new leader has not committed an entry of its term).
const ASK_EVERY: Duration = Duration::from_millis(300);
/// The read index request's context (the only read index this node asks for).
pub(super) const READ_CONTEXT: &[u8] = b"weir.catch-up";

impl Node {
    /// Runs once per start: asks for the leader's commit index until it gets one, waits to
    /// have applied it, then sets `caught_up` (also when `CATCH_UP_WAIT` runs out, with a
    /// warning).
    pub(super) async fn catch_up(self: Rc<Self>, caught_up: Arc<AtomicBool>) {
        let started = Instant::now();
        let mut asked: Option<Instant> = None;
        loop {
            if let Some(target) = self.read_target.get() {
                if self.applied.get() >= target {
                    info!(
                        applied = self.applied.get(),
                        target,
                        after_ms = started.elapsed().as_millis() as u64,
                        "metadata caught up with the metadata leader"
                    );
                    break;
                }
            } else if asked.is_none_or(|t| t.elapsed() >= ASK_EVERY) {
                asked = Some(Instant::now());
                self.read_wanted.set(true);
                self.work.notify();
            }
            if started.elapsed() >= CATCH_UP_WAIT {
                warn!(
                    applied = self.applied.get(),
                    target = ?self.read_target.get(),
                    "metadata not caught up with a metadata leader within {CATCH_UP_WAIT:?}: \
                     Metadata is answered from what this broker has"
                );
                break;
            }
            let changed = self.applied_changed.borrow().clone();
            futures_lite::future::or(
                changed.wait(),
                glommio::timer::sleep(Duration::from_millis(20)),
            )
            .await;
        }
        caught_up.store(true, Ordering::Release);
    }

    /// Takes the commit index the leader answered the read index with.
    pub(super) fn note_read_states(&self, states: Vec<ReadState>) {
        for rs in states {
            if rs.request_ctx == READ_CONTEXT {
                let target = self.read_target.get().unwrap_or(0).max(rs.index);
                self.read_target.set(Some(target));
            }
        }
    }

    /// A rejoining replica of the metadata group that has caught up (`rejoin`) says so.
    pub(super) fn check_rejoined(&self) {
        let raw = self.raw.borrow();
        if self.rejoin.became_sure(&raw.raft) {
            info!(committed = raw.raft.raft_log.committed, leader_commit_first_heard = ?self.rejoin.target(),
                "metadata group: this rejoining replica has caught up with the leader; it votes again");
            self.rejoin_shared.done(&self.rejoin);
            self.rejoin.record_in_background("metadata".to_string());
        }
    }

    /// While the broker rejoins (`rejoin`): once the metadata group's replica is sure, the
    /// metadata it holds is applied, and no partition replica on any core has been unsure for
    /// `REJOIN_SETTLE` checks in a row (the cores open the partitions the metadata names a
    /// moment after it is applied), the marker is removed and the broker is whole again.
    pub(super) async fn watch_rejoin(self: Rc<Self>) {
        const REJOIN_SETTLE: u32 = 3;
        let mut settled = 0;
        while self.rejoin_shared.active() {
            glommio::timer::sleep(Duration::from_secs(1)).await;
            let committed = self.raw.borrow().raft.raft_log.committed;
            let ready = self.rejoin.is_sure()
                && self.applied.get() >= committed
                && self.rejoin_shared.unsure() == 0;
            settled = if ready { settled + 1 } else { 0 };
            if settled < REJOIN_SETTLE {
                continue;
            }
            let shared = self.rejoin_shared.clone();
            match weir_storage::io::off_reactor(move || shared.finish()).await {
                Ok(()) => info!(
                    "rejoin complete: every Raft replica on this broker has caught up; the data \
                     directory is whole again"
                ),
                Err(e) => {
                    warn!(error = %e, "removing the rejoin marker failed: retried");
                    settled = 0;
                }
            }
        }
    }
}
