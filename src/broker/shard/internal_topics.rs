//! The coordinators in a cluster: consumer groups' committed offsets and the transaction
//! coordinator's state live in replicated internal topics, `__consumer_offsets` and
//! `__transaction_state` (one partition per bucket, replication factor up to 3), as in Kafka,
//! so a group or a transactional id survives the loss of its coordinator's broker.
//!
//! The coordinator of a group (transactional id) is the leader of its bucket's partition, on
//! the core holding that replica (`Shard::group_core`, `Shard::txn_core`; FindCoordinator
//! through `Shard::group_coordinator`, `Shard::txn_coordinator`). The coordinators of that
//! core (`group::Coordinator`, `shard::txn`) reach the partitions through [`BucketReplicas`]:
//! they ask whether this core leads a partition at a term whose first entry is committed,
//! replay the partition when they take over, and propose each change as a record batch
//! answered once a majority has it (acks=all). A topic is created by the first
//! FindCoordinator that finds it missing (`ensure_internal_topic`).

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
use crate::broker::group::offsets::{self as offsets, BucketReplica, OFFSETS_TOPIC};
use crate::broker::txn::{self, TXN_TOPIC};

/// How long a new leader of a bucket waits for its partition's committed reads to reach
/// what it holds before it replays it (answered COORDINATOR_LOAD_IN_PROGRESS after that).
const LOAD_WAIT: Duration = Duration::from_secs(5);

/// The replicas of one internal topic's partitions on one core, for that core's coordinator.
pub(super) struct BucketReplicas {
    pub(super) shard: Weak<Shard>,
    /// `__consumer_offsets` or `__transaction_state`.
    pub(super) topic: &'static str,
}

/// A replicated partition's log, held through its partition.
struct PartitionLog(Rc<dyn crate::broker::replica::OwnsLog>);

impl Deref for PartitionLog {
    type Target = Log;
    fn deref(&self) -> &Log {
        self.0.log()
    }
}

impl BucketReplicas {
    fn replica(&self, bucket: usize) -> Option<Rc<crate::broker::replica::Replica>> {
        self.shard
            .upgrade()?
            .replica(self.topic, i32::try_from(bucket).ok()?)
    }
}

impl BucketReplica for BucketReplicas {
    fn compaction_min_bytes(&self) -> u64 {
        self.shard
            .upgrade()
            .map_or(crate::broker::group::offsets::COMPACTION_MIN_BYTES, |s| {
                s.config.internal_topics_compaction_min_bytes
            })
    }

    fn serving_term(&self, bucket: usize) -> Option<u64> {
        let g = self.replica(bucket)?;
        if g.failed.get() {
            return None;
        }
        let raw = g.raw.borrow();
        let log = &raw.raft.raft_log;
        (raw.raft.state == StateRole::Leader && log.term(log.committed).ok()? == raw.raft.term)
            .then_some(raw.raft.term)
    }

    fn leads(&self, bucket: usize) -> bool {
        self.replica(bucket)
            .is_some_and(|g| !g.failed.get() && g.is_leader())
    }

    fn log(
        &self,
        bucket: usize,
    ) -> Pin<Box<dyn Future<Output = Option<Rc<dyn Deref<Target = Log>>>>>> {
        let group = self.replica(bucket);
        Box::pin(async move {
            let g = group?;
            // The leader's term entry is committed, so is everything before it; the log's
            // committed reads follow the Raft commit one `Ready` later. Nothing else writes
            // this partition meanwhile (the coordinator loads before it writes).
            let deadline = Instant::now() + LOAD_WAIT;
            loop {
                let w = g.log().watermarks();
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
        let group = self.replica(bucket);
        Box::pin(async move {
            let (Some(shard), Some(g)) = (shard, group) else {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            };
            // A store loaded under an older term never writes in a newer one.
            if g.term() != term || !g.is_leader() {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            g.produce_checked(
                &shard.replica_host,
                -1,
                batch,
                weir_storage::batch::Origin::Internal,
            )
            .await
            .map(|_| ())
        })
    }
}

/// The topic id clients are given for `__consumer_offsets` on a standalone broker
/// ([`Shard::offsets_view`]): fixed, as the topic is never created or deleted there.
pub const OFFSETS_VIEW_ID: &str = "5f5f636f6e73756d65725f6f66667365";

impl Shard {
    /// On a standalone broker, `__consumer_offsets` as clients see it. It is not a topic of
    /// the metadata there (its partitions are the group coordinators' own bucket logs, one
    /// per bucket, bucket `b` on core `b % cores`), but Metadata lists it, and Fetch and
    /// ListOffsets read the buckets in Kafka's format (`group::offsets::kafka_view`), so
    /// tools that consume it (Burrow, Kafka's `OffsetsMessageFormatter`) find it as on Kafka.
    /// `None` in a cluster, where it is a replicated topic of the metadata.
    pub fn offsets_view(&self) -> Option<weir::metadata::TopicMeta> {
        let meta = self.metadata();
        if meta.local_broker.is_some() || meta.topics.contains_key(OFFSETS_TOPIC) {
            return None;
        }
        let mut configs = std::collections::BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        Some(weir::metadata::TopicMeta {
            id: OFFSETS_VIEW_ID.to_string(),
            owners: (0..offsets::BUCKETS)
                .map(|b| b % self.cores.max(1))
                .collect(),
            configs,
            brokers: Vec::new(),
            replicas: Vec::new(),
            leader_epochs: Vec::new(),
            isr: Vec::new(),
        })
    }

    /// On a standalone broker, the offsets bucket behind `partition` of `__consumer_offsets`
    /// when this core owns it: `Some(None)` when nothing was committed to it yet (an empty
    /// partition). `None` for any other topic, and in a cluster.
    pub(super) fn offsets_bucket(
        &self,
        topic: &str,
        partition: i32,
    ) -> Option<Option<Rc<offsets::OffsetStore>>> {
        if topic != OFFSETS_TOPIC || self.offsets_view().is_none() {
            return None;
        }
        let bucket = usize::try_from(partition).ok()?;
        if bucket >= offsets::BUCKETS || bucket % self.cores.max(1) != self.id {
            return None;
        }
        let groups = self.groups.borrow().clone()?;
        Some(groups.bucket_store(bucket))
    }

    /// The core of this broker that coordinates `group`: standalone, its bucket's core; in
    /// a cluster, the core holding this broker's replica of the bucket's `__consumer_offsets`
    /// partition (any core, if it holds none: that core answers NOT_COORDINATOR).
    pub fn group_core(&self, group: &str) -> usize {
        let standalone = crate::broker::group::Coordinator::core_of(group, self.cores);
        self.bucket_core(OFFSETS_TOPIC, offsets::bucket_of(group))
            .unwrap_or(standalone)
    }

    /// The core of this broker that coordinates transactional id `txn_id`: standalone, its
    /// bucket's core; in a cluster, the core holding this broker's replica of the bucket's
    /// `__transaction_state` partition (any core, if it holds none: that core answers
    /// NOT_COORDINATOR).
    pub fn txn_core(&self, txn_id: &str) -> usize {
        self.bucket_core(TXN_TOPIC, txn::bucket_of(txn_id))
            .unwrap_or_else(|| txn::core_of(txn_id, self.cores))
    }

    /// In a cluster, the core holding this broker's replica of partition `p` of the internal
    /// topic `topic`.
    fn bucket_core(&self, topic: &str, p: usize) -> Option<usize> {
        let meta = self.metadata();
        let (Some(here), Some(t)) = (meta.local_broker, meta.topics.get(topic)) else {
            return None;
        };
        t.replicas
            .get(p)
            .and_then(|r| r.iter().find(|(b, _)| *b == here))
            .map(|&(_, c)| c)
            .or_else(|| (t.brokers.get(p) == Some(&here)).then(|| t.owners[p]))
            .filter(|&c| c < self.cores)
    }

    /// In a cluster, the coordinator of consumer group `group` for a client on `listener`:
    /// the leader of the group's `__consumer_offsets` partition, on its core, or the error
    /// to answer (COORDINATOR_NOT_AVAILABLE while the topic is being created, or no leader
    /// is known). `None` on a standalone broker.
    pub async fn group_coordinator(
        self: &Rc<Self>,
        group: &str,
        listener: usize,
    ) -> Option<Result<(i32, String, i32), i16>> {
        self.bucket_coordinator(OFFSETS_TOPIC, offsets::bucket_of(group), listener)
            .await
    }

    /// In a cluster, the transaction coordinator of `txn_id` for a client on `listener`: the
    /// leader of its `__transaction_state` partition, on its core, or the error to answer (as
    /// [`Shard::group_coordinator`]). `None` on a standalone broker.
    pub async fn txn_coordinator(
        self: &Rc<Self>,
        txn_id: &str,
        listener: usize,
    ) -> Option<Result<(i32, String, i32), i16>> {
        self.bucket_coordinator(TXN_TOPIC, txn::bucket_of(txn_id), listener)
            .await
    }

    /// The leader of partition `p` of the internal topic `topic`, as a node for a client on
    /// `listener`.
    ///
    /// A broker holding a replica asks it who leads (its Raft group hears of a new leader
    /// at once); the metadata's leader is the fallback. The metadata can lag, on a broker just
    /// restarted most of all, and a coordinator named from it would answer NOT_COORDINATOR,
    /// which librdkafka's admin client does not survive (issue 5040).
    async fn bucket_coordinator(
        self: &Rc<Self>,
        topic: &'static str,
        p: usize,
        listener: usize,
    ) -> Option<Result<(i32, String, i32), i16>> {
        let meta = self.metadata();
        meta.local_broker?;
        let Some(t) = meta.topics.get(topic) else {
            return Some(Err(errors::COORDINATOR_NOT_AVAILABLE));
        };
        if p >= t.owners.len() {
            return Some(Err(errors::COORDINATOR_NOT_AVAILABLE));
        }
        // Who leads, as this broker's replica knows it, else as the metadata says.
        let Some(leader) = self.leader_broker(topic, p as i32).await else {
            return Some(Err(errors::COORDINATOR_NOT_AVAILABLE));
        };
        let core = t
            .replicas
            .get(p)
            .and_then(|r| r.iter().find(|(b, _)| *b == leader))
            .map(|&(_, c)| c)
            .or_else(|| (t.brokers.get(p) == Some(&leader)).then(|| t.owners[p]));
        let Some(core) = core else {
            return Some(Err(errors::COORDINATOR_NOT_AVAILABLE));
        };
        let node = self.node_at(&meta, leader, core);
        Some(
            self.brokers(listener)
                .into_iter()
                .find(|(n, _, _)| *n == node)
                .ok_or(errors::COORDINATOR_NOT_AVAILABLE),
        )
    }

    /// In a cluster without the internal topic `name` (`__consumer_offsets` or
    /// `__transaction_state`) yet: creates it (through core 0 and the metadata leader), once
    /// at a time per core: one partition per bucket (16 each), replication factor 3, or the
    /// number of voters if fewer (Kafka's `offsets.topic.replication.factor` and
    /// `transaction.state.log.replication.factor`); while fewer brokers have registered the
    /// creation fails and the next FindCoordinator tries again.
    pub fn ensure_internal_topic(self: &Rc<Self>, name: &'static str) {
        let meta = self.metadata();
        if meta.local_broker.is_none()
            || meta.topics.contains_key(name)
            || !self.creating_internal_topics.borrow_mut().insert(name)
        {
            return;
        }
        let partitions = if name == TXN_TOPIC {
            txn::BUCKETS
        } else {
            offsets::BUCKETS
        };
        let shard = self.clone();
        let rf = self.config.voters.len().clamp(1, 3) as i16;
        glommio::spawn_local(async move {
            let topic = NewTopic {
                name: name.to_string(),
                partitions: partitions as i32,
                replication_factor: rf,
                configs: vec![
                    // Never deleted by retention; the log cleaner leaves these partitions to
                    // their stores' own compaction (shard/cleaner.rs).
                    ("cleanup.policy".into(), Some("compact".into())),
                    ("segment.bytes".into(), Some((16 << 20).to_string())),
                ],
                assignments: None,
            };
            let create = CreateTopicsCall {
                topics: vec![topic],
                validate_only: false,
            };
            match shard.ask(0, create).await {
                Some(r) if r.iter().all(|t| t.error == errors::NONE) => {
                    tracing::info!(replication_factor = rf, partitions, "created {name}")
                }
                Some(r) => tracing::debug!(?r, "creating {name}: not yet"),
                None => {}
            }
            shard.creating_internal_topics.borrow_mut().remove(name);
        })
        .detach();
    }
}
