//! Metadata: topics, partitions and their leaders (one broker per core with
//! `listeners.per.core`), and topic auto-creation.

use crate::broker::errors;
use crate::broker::group::offsets::OFFSETS_TOPIC;
use crate::broker::shard::{CreateTopicsCall, NewTopic, Shard};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use std::rc::Rc;
use tracing::debug;
use weir::metadata::valid_topic_name;

use super::*;

// ---- Metadata ----

/// Creates missing topics through core 0 (auto.create.topics.enable).
pub(super) async fn auto_create(shard: &Rc<Shard>, names: Vec<String>) {
    if names.is_empty() {
        return;
    }
    // `__consumer_offsets` and `__transaction_state` are never auto-created as plain topics:
    // the brokers create them.
    let topics = names
        .into_iter()
        .filter(|n| !super::is_internal_topic(n))
        .map(|name| NewTopic {
            name,
            partitions: -1,
            replication_factor: -1,
            configs: Vec::new(),
            assignments: None,
        })
        .collect();
    let create = CreateTopicsCall {
        topics,
        validate_only: false,
    };
    if let Some(results) = shard.ask(0, create).await {
        for r in results {
            if r.error != errors::NONE && r.error != errors::TOPIC_ALREADY_EXISTS {
                debug!(topic = %r.name, error = r.error, "auto-create failed");
            }
        }
    }
}

pub(super) fn topic_uuid(hex: &str) -> uuid::Uuid {
    uuid::Uuid::try_parse(hex).unwrap_or(uuid::Uuid::nil())
}

pub(super) async fn metadata(
    shard: &Rc<Shard>,
    version: i16,
    req: &MetadataRequest,
    listener: usize,
    may_create: bool,
) -> MetadataResponse {
    // A broker just started in a cluster answers once its metadata is the leader's.
    shard.wait_metadata_current().await;
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    // v10+ may name a topic by its id instead (KIP-516; the Java admin client's
    // describeTopics(TopicCollection.ofTopicIds(..)) sends an id with a null or empty name):
    // a known id is answered as its name is, an unknown one with UNKNOWN_TOPIC_ID.
    let mut unknown_ids = Vec::new();
    let requested: Option<Vec<String>> = match &req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(
            t.iter()
                .filter_map(|t| match &t.name {
                    Some(n) if !n.is_empty() || t.topic_id.is_nil() => Some(n.to_string()),
                    _ if !t.topic_id.is_nil() => shard.topic_name(&t.topic_id).or_else(|| {
                        unknown_ids.push(t.topic_id);
                        None
                    }),
                    _ => None,
                })
                .collect(),
        ),
    };
    let allow_auto = may_create
        && shard.config.auto_create_topics
        && (version < 4 || req.allow_auto_topic_creation);
    if let (Some(names), true) = (&requested, allow_auto) {
        let meta = shard.metadata();
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !meta.topics.contains_key(*n) && valid_topic_name(n))
            .cloned()
            .collect();
        auto_create(shard, missing).await;
    }
    let meta = shard.metadata();
    // The endpoints of the listener the client came in on: SSL clients get SSL ports.
    let endpoints = shard.brokers_with_racks(listener);
    let mut r = MetadataResponse::default();
    r.brokers = endpoints
        .iter()
        .map(|(id, host, port, rack)| {
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(*id);
            broker.host = s(host);
            broker.port = *port;
            broker.rack = rack.as_deref().map(s);
            broker
        })
        .collect();
    r.cluster_id = Some(s("weir"));
    r.controller_id = BrokerId(shard.controller_node());
    r.cluster_authorized_operations = i32::MIN;
    // A standalone broker's `__consumer_offsets`: listed as Kafka lists it, read from the
    // group coordinators' buckets (`Shard::offsets_view`).
    let offsets_view = shard.offsets_view();
    let names: Vec<String> = match requested {
        None => {
            let mut all: Vec<String> = meta.topics.keys().cloned().collect();
            if offsets_view.is_some() {
                all.push(OFFSETS_TOPIC.to_string());
                all.sort();
            }
            all
        }
        Some(n) => n,
    };
    for name in names {
        let mut t = MetadataResponseTopic::default();
        t.name = Some(TopicName(s(&name)));
        t.topic_authorized_operations = i32::MIN;
        let view = offsets_view.as_ref().filter(|_| name == OFFSETS_TOPIC);
        match meta.topics.get(&name).or(view) {
            None => {
                t.error_code = if valid_topic_name(&name) {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                } else {
                    errors::INVALID_TOPIC_EXCEPTION
                };
            }
            Some(tm) => {
                t.topic_id = topic_uuid(&tm.id);
                t.is_internal = super::is_internal_topic(&name);
                t.partitions = (0..tm.owners.len())
                    .map(|p| {
                        let leader = BrokerId(shard.leader_node(&meta, tm, p));
                        let mut mp = MetadataResponsePartition::default();
                        mp.partition_index = p as i32;
                        mp.leader_id = leader;
                        // The view's partitions have no leader epoch (none to fence with).
                        mp.leader_epoch = match view {
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
                        mp
                    })
                    .collect();
            }
        }
        r.topics.push(t);
    }
    for id in unknown_ids {
        let mut t = MetadataResponseTopic::default();
        t.topic_id = id;
        t.error_code = errors::UNKNOWN_TOPIC_ID;
        t.topic_authorized_operations = i32::MIN;
        r.topics.push(t);
    }
    r
}
