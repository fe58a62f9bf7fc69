//! The newer describe/list APIs Kafka 4.x tools call, answered from the core's metadata
//! snapshot: DescribeTopicPartitions (KIP-966: what `kafka-topics.sh --describe` uses from
//! Kafka 3.8 on, paginated), ListConfigResources (KIP-1142: the resources that have configs),
//! and AlterReplicaLogDirs (moving a replica between log dirs: weir has one log dir, so only
//! "move to where it is" succeeds).

use std::rc::Rc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::*;

use super::metadata::topic_uuid;
use super::*;
use crate::broker::errors;
use crate::broker::shard::Shard;
use weir::metadata::valid_topic_name;

/// Kafka's `ConfigResource.Type` codes.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

pub(super) fn describe_topic_partitions(
    shard: &Rc<Shard>,
    req: &DescribeTopicPartitionsRequest,
    may_describe: impl Fn(&str) -> bool,
) -> DescribeTopicPartitionsResponse {
    let meta = shard.metadata();
    // A standalone broker's `__consumer_offsets` (`Shard::offsets_view`), as Metadata lists it.
    let view = shard.offsets_view();
    let view_name = crate::broker::group::offsets::OFFSETS_TOPIC;
    // Kafka answers topics in name order; an empty list means every topic (that the
    // principal may describe: the others are not paged over either).
    let mut names: Vec<String> = if req.topics.is_empty() {
        meta.topics
            .keys()
            .map(String::as_str)
            .chain(view.as_ref().map(|_| view_name))
            .filter(|n| may_describe(n))
            .map(str::to_string)
            .collect()
    } else {
        req.topics.iter().map(|t| t.name.to_string()).collect()
    };
    names.sort();
    names.dedup();
    let (first_topic, first_partition) = match &req.cursor {
        Some(c) => (c.topic_name.to_string(), c.partition_index.max(0)),
        None => (String::new(), 0),
    };
    let mut budget = if req.response_partition_limit > 0 {
        req.response_partition_limit as usize
    } else {
        2000 // Kafka's default max.request.partition.size.limit
    };
    let mut r = DescribeTopicPartitionsResponse::default();
    for name in names.into_iter().filter(|n| *n >= first_topic) {
        let mut t = DescribeTopicPartitionsResponseTopic::default();
        t.name = Some(TopicName(s(&name)));
        t.topic_authorized_operations = i32::MIN;
        if !may_describe(&name) {
            t.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
            r.topics.push(t);
            continue;
        }
        let in_view = view.as_ref().filter(|_| name == view_name);
        let Some(tm) = meta.topics.get(&name).or(in_view) else {
            t.error_code = if valid_topic_name(&name) {
                errors::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                errors::INVALID_TOPIC_EXCEPTION
            };
            r.topics.push(t);
            continue;
        };
        t.topic_id = topic_uuid(&tm.id);
        t.is_internal = super::is_internal_topic(&name);
        let start = if name == first_topic {
            first_partition as usize
        } else {
            0
        };
        for p in (0..tm.owners.len()).skip(start) {
            if budget == 0 {
                let mut c = Cursor::default();
                c.topic_name = TopicName(s(&name));
                c.partition_index = p as i32;
                r.next_cursor = Some(c);
                break;
            }
            budget -= 1;
            let leader = BrokerId(shard.leader_node(&meta, tm, p));
            let mut mp = DescribeTopicPartitionsResponsePartition::default();
            mp.partition_index = p as i32;
            mp.leader_id = leader;
            mp.leader_epoch = match in_view {
                Some(_) => -1,
                None => weir::metadata::Metadata::leader_epoch(tm, p) as i32,
            };
            mp.replica_nodes = shard
                .replica_nodes(&meta, tm, p)
                .into_iter()
                .map(BrokerId)
                .collect();
            mp.isr_nodes = shard
                .isr_nodes(&meta, tm, p)
                .into_iter()
                .map(BrokerId)
                .collect();
            mp.eligible_leader_replicas = Some(Vec::new());
            mp.last_known_elr = Some(Vec::new());
            t.partitions.push(mp);
        }
        r.topics.push(t);
        if r.next_cursor.is_some() {
            break;
        }
    }
    r
}

pub(super) fn list_config_resources(
    shard: &Rc<Shard>,
    version: i16,
    req: &ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    // v0 was ListClientMetricsResources: client-metrics resources only, of which weir has none.
    let wants = |ty: i8| {
        version >= 1 && (req.resource_types.is_empty() || req.resource_types.contains(&ty))
    };
    let mut r = ListConfigResourcesResponse::default();
    if wants(TOPIC) {
        for name in shard.metadata().topics.keys() {
            let mut c = ConfigResource::default();
            c.resource_name = s(name);
            c.resource_type = TOPIC;
            r.config_resources.push(c);
        }
    }
    if wants(BROKER) {
        let nodes = shard.core_endpoints.borrow().first().map_or(1, Vec::len);
        for id in 0..nodes {
            let mut c = ConfigResource::default();
            c.resource_name = s(&id.to_string());
            c.resource_type = BROKER;
            r.config_resources.push(c);
        }
    }
    r
}

pub(super) fn alter_replica_log_dirs(
    shard: &Rc<Shard>,
    req: &AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let meta = shard.metadata();
    let data_dir = &shard.config.data_dir;
    let same_dir = |path: &str| {
        let p = std::path::Path::new(path);
        p == data_dir.as_path() || p.canonicalize().ok() == data_dir.canonicalize().ok()
    };
    // The node this connection talks to: this core's broker id with per-core listeners.
    let me = shard.node_of(shard.id);
    let mut r = AlterReplicaLogDirsResponse::default();
    for dir in &req.dirs {
        let here = same_dir(dir.path.as_str());
        for t in &dir.topics {
            let mut tr = AlterReplicaLogDirTopicResult::default();
            tr.topic_name = t.name.clone();
            for &p in &t.partitions {
                let mut pr = AlterReplicaLogDirPartitionResult::default();
                pr.partition_index = p;
                pr.error_code = match meta.owner(t.name.as_str(), p) {
                    None => errors::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(owner) if shard.node_of(owner) != me => errors::REPLICA_NOT_AVAILABLE,
                    // One log dir: the replica is there already.
                    Some(_) if here => errors::NONE,
                    Some(_) => errors::LOG_DIR_NOT_FOUND,
                };
                tr.partitions.push(pr);
            }
            r.results.push(tr);
        }
    }
    r
}
