//! Consumer groups in a cluster: their committed offsets live in the replicated internal
//! topic `__consumer_offsets` (one partition per offsets bucket, replication factor up to 3),
//! as in Kafka, so a group survives the loss of its coordinator's broker.
//!
//! A group's coordinator is the leader of its bucket's partition, on the core holding that
//! replica (`Shard::group_core`, FindCoordinator through `Shard::group_coordinator`). The
//! group coordinator of that core (`group::Coordinator`) reaches the partition through
//! [`OffsetsReplicas`]: it asks whether this core leads the partition at a term whose first
//! entry is committed, replays the partition when it takes over, and proposes each commit as
//! a record batch answered once a majority has it (acks=all). The topic is created by the
//! first FindCoordinator for a group that finds it missing (`ensure_offsets_topic`).

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use raft::StateRole;
use weir_storage::Log;

use super::*;
use crate::broker::errors;
use crate::broker::group::offsets::{bucket_of, OffsetsReplica, BUCKETS, OFFSETS_TOPIC};

/// How long a new leader of a bucket waits for its partition's committed reads to reach
/// what it holds before it replays it (answered COORDINATOR_LOAD_IN_PROGRESS after that).
const LOAD_WAIT: Duration = Duration::from_secs(5);

/// The `__consumer_offsets` replicas on one core, for that core's group coordinator.
pub(super) struct OffsetsReplicas {
    pub(super) shard: Weak<Shard>,
}

/// A replicated partition's log, held through its partition.
struct PartitionLog(Rc<Partition>);

impl Deref for PartitionLog {
    type Target = Log;
    fn deref(&self) -> &Log {
        &self.0.log
    }
}

impl OffsetsReplicas {
    fn group(&self, bucket: usize) -> Option<Rc<replication::Group>> {
        self.shard
            .upgrade()?
            .replica_group(OFFSETS_TOPIC, i32::try_from(bucket).ok()?)
    }
}

impl OffsetsReplica for OffsetsReplicas {
    fn serving_term(&self, bucket: usize) -> Option<u64> {
        let g = self.group(bucket)?;
        if g.failed.get() {
            return None;
        }
        let raw = g.raw.borrow();
        let log = &raw.raft.raft_log;
        (raw.raft.state == StateRole::Leader && log.term(log.committed).ok()? == raw.raft.term)
            .then_some(raw.raft.term)
    }

    fn leads(&self, bucket: usize) -> bool {
        self.group(bucket)
            .is_some_and(|g| !g.failed.get() && g.is_leader())
    }

    fn log(
        &self,
        bucket: usize,
    ) -> Pin<Box<dyn Future<Output = Option<Rc<dyn Deref<Target = Log>>>>>> {
        let group = self.group(bucket);
        Box::pin(async move {
            let g = group?;
            // The leader's term entry is committed, so is everything before it; the log's
            // committed reads follow the Raft commit one `Ready` later. Nothing else writes
            // this partition meanwhile (the coordinator loads before it commits).
            let deadline = Instant::now() + LOAD_WAIT;
            loop {
                let w = g.part.log.watermarks();
                if w.high_watermark >= w.log_end_offset {
                    break;
                }
                if Instant::now() > deadline || !g.is_leader() {
                    return None;
                }
                glommio::timer::sleep(Duration::from_millis(5)).await;
            }
            Some(Rc::new(PartitionLog(g.part.clone())) as Rc<dyn Deref<Target = Log>>)
        })
    }

    fn append(
        &self,
        bucket: usize,
        term: u64,
        batch: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<(), i16>>>> {
        let shard = self.shard.upgrade();
        let group = self.group(bucket);
        Box::pin(async move {
            let (Some(shard), Some(g)) = (shard, group) else {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            };
            // A store loaded under an older term never writes in a newer one.
            if g.term() != term || !g.is_leader() {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            shard.produce_replicated(g, -1, batch).await.map(|_| ())
        })
    }
}

impl Shard {
    /// The core of this broker that coordinates `group`: standalone, its bucket's core; in
    /// a cluster, the core holding this broker's replica of the bucket's `__consumer_offsets`
    /// partition (any core, if it holds none: that core answers NOT_COORDINATOR).
    pub fn group_core(&self, group: &str) -> usize {
        let standalone = crate::broker::group::Coordinator::core_of(group, self.cores);
        let meta = self.metadata();
        let (Some(here), Some(t)) = (meta.local_broker, meta.topics.get(OFFSETS_TOPIC)) else {
            return standalone;
        };
        let p = bucket_of(group);
        t.replicas
            .get(p)
            .and_then(|r| r.iter().find(|(b, _)| *b == here))
            .map(|&(_, c)| c)
            .or_else(|| (t.brokers.get(p) == Some(&here)).then(|| t.owners[p]))
            .filter(|&c| c < self.cores)
            .unwrap_or(standalone)
    }

    /// In a cluster, the coordinator of consumer group `group` for a client on `listener`:
    /// the leader of the group's `__consumer_offsets` partition, on its core, or the error
    /// to answer (COORDINATOR_NOT_AVAILABLE while the topic is being created, or no leader
    /// is known). `None` on a standalone broker.
    ///
    /// A broker holding a replica asks it who leads (its Raft group hears of a new leader
    /// at once); the metadata's leader is the fallback. The metadata can lag, on a broker just
    /// restarted most of all, and a coordinator named from it would answer NOT_COORDINATOR,
    /// which librdkafka's admin client does not survive (issue 5040).
    pub async fn group_coordinator(
        self: &Rc<Self>,
        group: &str,
        listener: usize,
    ) -> Option<Result<(i32, String, i32), i16>> {
        let meta = self.metadata();
        let here = meta.local_broker?;
        let Some(t) = meta.topics.get(OFFSETS_TOPIC) else {
            return Some(Err(errors::COORDINATOR_NOT_AVAILABLE));
        };
        let p = bucket_of(group);
        if p >= t.owners.len() {
            return Some(Err(errors::COORDINATOR_NOT_AVAILABLE));
        }
        let replicas = t.replicas.get(p).cloned().unwrap_or_default();
        let node = match replicas.iter().find(|(b, _)| *b == here) {
            Some(&(_, core)) if core < self.cores => {
                let leader = match self
                    .call(
                        core,
                        Req::ReplicaLeader(OFFSETS_TOPIC.to_string(), p as i32),
                    )
                    .await
                {
                    Resp::Leader(b) => b,
                    _ => 0,
                };
                match replicas.iter().find(|(b, _)| *b == leader) {
                    Some(&(b, c)) => self.node_at(&meta, b, c),
                    None => return Some(Err(errors::COORDINATOR_NOT_AVAILABLE)),
                }
            }
            _ => self.leader_node(&meta, t, p),
        };
        Some(
            self.brokers(listener)
                .into_iter()
                .find(|(n, _, _)| *n == node)
                .ok_or(errors::COORDINATOR_NOT_AVAILABLE),
        )
    }

    /// In a cluster without `__consumer_offsets` yet: creates it (through core 0 and the
    /// metadata leader), once at a time per core. Its replication factor is 3, or the
    /// number of voters if fewer (Kafka's `offsets.topic.replication.factor`); while fewer
    /// brokers have registered the creation fails and the next FindCoordinator tries again.
    pub fn ensure_offsets_topic(self: &Rc<Self>) {
        let meta = self.metadata();
        if meta.local_broker.is_none()
            || meta.topics.contains_key(OFFSETS_TOPIC)
            || self.creating_offsets_topic.replace(true)
        {
            return;
        }
        let shard = self.clone();
        let rf = self.config.voters.len().clamp(1, 3) as i16;
        glommio::spawn_local(async move {
            let topic = NewTopic {
                name: OFFSETS_TOPIC.to_string(),
                partitions: BUCKETS as i32,
                replication_factor: rf,
                configs: vec![
                    // Never deleted by retention (compaction skips replicated partitions).
                    ("cleanup.policy".into(), Some("compact".into())),
                    ("segment.bytes".into(), Some((16 << 20).to_string())),
                ],
            };
            let r = shard
                .call(
                    0,
                    Req::CreateTopics {
                        topics: vec![topic],
                        validate_only: false,
                    },
                )
                .await;
            match r {
                Resp::Topics(r) if r.iter().all(|t| t.error == errors::NONE) => {
                    tracing::info!(
                        replication_factor = rf,
                        partitions = BUCKETS,
                        "created {OFFSETS_TOPIC}"
                    )
                }
                Resp::Topics(r) => tracing::debug!(?r, "creating {OFFSETS_TOPIC}: not yet"),
                _ => {}
            }
            shard.creating_offsets_topic.set(false);
        })
        .detach();
    }
}
