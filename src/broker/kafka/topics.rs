//! CreateTopics, CreatePartitions, DeleteTopics: decoded here, done on core 0.

use super::groups as group;
use crate::broker::errors;
use crate::broker::shard::{
    CreatePartitionsCall, CreateTopicsCall, DeleteTopicsCall, NewTopic, Shard,
};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::*;
use std::rc::Rc;

use super::*;

// ---- Admin ----

pub(super) async fn create_topics(
    shard: &Rc<Shard>,
    version: i16,
    c: &CreateTopicsRequest,
) -> CreateTopicsResponse {
    let topics: Vec<NewTopic> = c
        .topics
        .iter()
        .map(|t| NewTopic {
            name: t.name.to_string(),
            partitions: if t.assignments.is_empty() {
                t.num_partitions
            } else {
                t.assignments.len() as i32
            },
            replication_factor: if t.assignments.is_empty() {
                t.replication_factor
            } else {
                1
            },
            configs: t
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
            assignments: (!t.assignments.is_empty()).then(|| {
                t.assignments
                    .iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let requested: std::collections::HashMap<String, std::collections::BTreeMap<String, String>> =
        topics
            .iter()
            .map(|t| {
                let set = t
                    .configs
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.clone()?)));
                (t.name.clone(), set.collect())
            })
            .collect();
    let (internal, topics): (Vec<NewTopic>, Vec<NewTopic>) = topics
        .into_iter()
        .partition(|t| super::is_internal_topic(&t.name));
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    let mut results = if topics.is_empty() {
        Vec::new()
    } else {
        let create = CreateTopicsCall {
            topics,
            validate_only: c.validate_only,
        };
        (shard.ask(0, create).await).unwrap_or_else(|| unanswered(names))
    };
    results.extend(internal.into_iter().map(|t| internal_topic(t.name)));
    let meta = shard.metadata();
    let mut resp = CreateTopicsResponse::default();
    for r in results {
        let mut tr = CreatableTopicResult::default();
        tr.name = TopicName(s(&r.name));
        tr.error_code = r.error;
        tr.error_message = r.message.as_deref().map(s);
        if version >= 5 {
            tr.num_partitions = r.partitions;
            tr.replication_factor = meta.topics.get(&r.name).map_or(1, |t| {
                weir::metadata::Metadata::replication_factor(t) as i16
            });
            // KIP-525: the new topic's configs, what DescribeConfigs would answer (for
            // validate_only, what the topic would have had).
            let overrides = match meta.topics.get(&r.name) {
                Some(t) if !c.validate_only => t.configs.clone(),
                _ => requested.get(&r.name).cloned().unwrap_or_default(),
            };
            tr.configs = (r.error == errors::NONE).then(|| {
                super::configs::topic_entries(shard, &overrides, |_| true)
                    .into_iter()
                    .map(|e| {
                        let mut c = CreatableTopicConfigs::default();
                        c.name = s(&e.name);
                        c.value = Some(s(&e.value));
                        c.config_source = e.source;
                        c
                    })
                    .collect()
            });
        }
        if let Some(t) = meta.topics.get(&r.name) {
            tr.topic_id = topic_uuid(&t.id);
        }
        resp.topics.push(tr);
    }
    resp
}

/// Results for topics whose admin call core 0 could not answer (shutting down): each topic
/// gets a retriable error, none is silently left out of the response.
pub(super) async fn create_partitions(
    shard: &Rc<Shard>,
    c: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let topics: Vec<crate::broker::shard::NewPartitions> = c
        .topics
        .iter()
        .map(|t| crate::broker::shard::NewPartitions {
            name: t.name.to_string(),
            count: t.count,
            assignments: t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|p| p.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    let grow = CreatePartitionsCall {
        topics,
        validate_only: c.validate_only,
    };
    let results = match shard.ask(0, grow).await {
        Some(r) if r.len() == names.len() => r,
        _ => unanswered(names),
    };
    let mut resp = CreatePartitionsResponse::default();
    for r in results {
        let mut tr = CreatePartitionsTopicResult::default();
        tr.name = TopicName(s(&r.name));
        tr.error_code = r.error;
        tr.error_message = r.message.as_deref().map(s);
        resp.results.push(tr);
    }
    resp
}

/// The answer to a client creating or deleting `__consumer_offsets` or
/// `__transaction_state`: the brokers own them (they create them for the first consumer
/// group, the first transactional producer of a cluster).
fn internal_topic(name: String) -> crate::broker::shard::TopicResult {
    let message = format!("{name} is an internal topic: the brokers create and keep it");
    crate::broker::shard::TopicResult {
        name,
        error: errors::INVALID_REQUEST,
        message: Some(message),
        partitions: -1,
    }
}

pub(super) fn unanswered(names: Vec<String>) -> Vec<crate::broker::shard::TopicResult> {
    names
        .into_iter()
        .map(|name| crate::broker::shard::TopicResult {
            name,
            error: errors::NOT_CONTROLLER,
            message: Some("the broker is shutting down".to_string()),
            partitions: -1,
        })
        .collect()
}

pub(super) async fn delete_topics(
    shard: &Rc<Shard>,
    version: i16,
    d: &DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let mut resp = DeleteTopicsResponse::default();
    // v6 names each topic by name or by id (KIP-516); an id this broker does not know is
    // UNKNOWN_TOPIC_ID, answered with that id.
    let names: Vec<String> = if version >= 6 {
        let mut names = Vec::with_capacity(d.topics.len());
        for t in &d.topics {
            match (&t.name, shard.topic_name(&t.topic_id)) {
                (Some(n), _) => names.push(n.to_string()),
                (None, Some(n)) => names.push(n),
                (None, None) => {
                    let mut tr = DeletableTopicResult::default();
                    tr.topic_id = t.topic_id;
                    tr.error_code = errors::UNKNOWN_TOPIC_ID;
                    tr.error_message = Some(s("no topic has this id"));
                    resp.responses.push(tr);
                }
            }
        }
        names
    } else {
        d.topic_names.iter().map(|n| n.to_string()).collect()
    };
    if names.is_empty() {
        return resp;
    }
    let meta = shard.metadata();
    let (internal, names): (Vec<String>, Vec<String>) =
        names.into_iter().partition(|n| super::is_internal_topic(n));
    let mut results = if names.is_empty() {
        Vec::new()
    } else {
        (shard.ask(0, DeleteTopicsCall(names.clone())).await).unwrap_or_else(|| unanswered(names))
    };
    results.extend(internal.into_iter().map(internal_topic));
    for r in results {
        if r.error == errors::NONE {
            // Committed offsets of a deleted topic go away with it.
            group::topic_deleted(shard, &r.name).await;
        }
        let mut tr = DeletableTopicResult::default();
        tr.topic_id = meta
            .topics
            .get(&r.name)
            .map(|t| topic_uuid(&t.id))
            .unwrap_or_default();
        tr.name = Some(TopicName(s(&r.name)));
        tr.error_code = r.error;
        resp.responses.push(tr);
    }
    resp
}
