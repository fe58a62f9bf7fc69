//! The checks of topic admin requests against a metadata snapshot (`admin`, standalone and in
//! a cluster alike): a new topic's partition count and config overrides, a topic's overrides
//! after an AlterConfigs.

use super::*;
use crate::broker::errors;
use weir::config::apply_topic_config;
use weir::metadata::{valid_topic_name, Metadata, TopicMeta};

/// A new topic that passed the checks: its partition count, replication factor and config
/// overrides.
pub(super) type CheckedTopic = (i32, usize, std::collections::BTreeMap<String, String>);

/// `max.partitions`: whether `adding` more partition replicas, beside `earlier` ones taken
/// by the same request, fit what this broker (in a cluster: the registered brokers together)
/// may hold; POLICY_VIOLATION and why if not. Each partition costs a directory, a file
/// descriptor and, once written, a reservation of disk: a request for 100,000 of them must
/// not be taken on faith (nor 1,000 auto-created topics of 100 each).
pub(super) fn check_partition_room(
    config: &BrokerConfig,
    meta: &Metadata,
    earlier: usize,
    adding: usize,
) -> Result<(), (i16, String)> {
    let hosted: usize = meta
        .topics
        .values()
        .map(|t| {
            t.replicas
                .iter()
                .map(|r| r.len().max(1))
                .sum::<usize>()
                .max(t.owners.len())
        })
        .sum::<usize>()
        .saturating_add(earlier);
    let brokers = if meta.local_broker.is_some() {
        meta.brokers.len().max(1)
    } else {
        1
    };
    let limit = config.max_partitions.saturating_mul(brokers);
    if hosted.saturating_add(adding) > limit {
        return Err((
            errors::POLICY_VIOLATION,
            format!(
                "{adding} more partition replicas would make {} (max.partitions: {} per \
                 broker, {brokers} broker(s))",
                hosted + adding,
                config.max_partitions
            ),
        ));
    }
    Ok(())
}

/// The partitions a new topic asks for (-1: `num.partitions`).
pub(super) fn partition_count(config: &BrokerConfig, t: &NewTopic) -> i32 {
    if t.partitions == -1 {
        config.num_partitions as i32
    } else {
        t.partitions
    }
}

/// CreateTopics' checks of one topic against `meta`: its partition count (-1: the
/// default), its replication factor (-1: `default.replication.factor` in a cluster, 1 on
/// a single broker; at most the registered brokers), room for its partitions beside the
/// `earlier` partition replicas of the request, and its config overrides, or the error code
/// and message.
pub(super) fn check_new_topic(
    config: &BrokerConfig,
    meta: &Metadata,
    earlier: usize,
    t: &NewTopic,
) -> Result<CheckedTopic, (i16, String)> {
    let count = partition_count(config, t);
    let mut configs = std::collections::BTreeMap::new();
    let mut probe = config.log_config(&configs);
    let mut bad_config = None;
    for (k, v) in &t.configs {
        let Some(v) = v else { continue };
        match apply_topic_config(&mut probe, k, v) {
            Ok(()) => {
                configs.insert(k.clone(), v.clone());
            }
            Err(e) => bad_config = Some(e),
        }
    }
    if bad_config.is_none() {
        bad_config = check_remote_storage(config, &probe).err();
    }
    let cluster = meta.local_broker.is_some();
    let rf = match t.replication_factor {
        // An explicit assignment in a cluster: as many replicas as it names.
        _ if cluster && t.assignments.is_some() => t
            .assignments
            .iter()
            .flatten()
            .next()
            .map_or(0, |a| a.len() as i32),
        -1 if cluster => i32::from(config.default_replication_factor),
        -1 => 1,
        n => i32::from(n),
    };
    // The brokers replicas can go to: the registered ones (this one at least).
    let brokers = if cluster {
        meta.brokers.len().max(1)
    } else {
        1
    };
    if !valid_topic_name(&t.name) {
        Err((
            errors::INVALID_TOPIC_EXCEPTION,
            format!("invalid topic name '{}'", t.name),
        ))
    } else if meta.topics.contains_key(&t.name) {
        Err((
            errors::TOPIC_ALREADY_EXISTS,
            format!("topic '{}' already exists", t.name),
        ))
    } else if count <= 0 || count > 100_000 {
        Err((
            errors::INVALID_PARTITIONS,
            format!("invalid partition count {count}"),
        ))
    } else if rf <= 0 || rf as usize > brokers {
        Err((
            errors::INVALID_REPLICATION_FACTOR,
            if cluster {
                format!(
                    "replication factor {rf} is not available: {brokers} brokers are \
                     registered"
                )
            } else {
                format!("replication factor {rf} is not available: this is a single broker")
            },
        ))
    } else if let Some(e) = bad_config {
        Err((errors::INVALID_CONFIG, e))
    } else {
        check_partition_room(config, meta, earlier, count as usize * rf as usize)?;
        Ok((count, rf as usize, configs))
    }
}

/// A topic's config overrides after `c`, checked like CreateTopics' (values trimmed).
pub(super) fn altered_configs(
    config: &BrokerConfig,
    t: &TopicMeta,
    c: &ConfigChange,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut configs = if c.replace_all {
        std::collections::BTreeMap::new()
    } else {
        t.configs.clone()
    };
    for (k, v) in &c.ops {
        match v {
            Some(v) => configs.insert(k.clone(), v.trim().to_string()),
            None => configs.remove(k),
        };
    }
    let mut probe = config.log_config(&std::collections::BTreeMap::new());
    match configs
        .iter()
        .find_map(|(k, v)| apply_topic_config(&mut probe, k, v).err())
    {
        Some(e) => Err(e),
        None => check_remote_storage(config, &probe).map(|()| configs),
    }
}

/// `remote.storage.enable=true` needs tiered storage on in the broker and a topic that
/// is not compacted (Kafka's rule).
fn check_remote_storage(config: &BrokerConfig, c: &weir_storage::LogConfig) -> Result<(), String> {
    if !c.remote_storage {
        Ok(())
    } else if config.remote_storage().is_none() {
        Err("Tiered Storage functionality is disabled in the broker \
             (remote.log.storage.system.enable=false). Topic cannot be configured with \
             remote log storage."
            .into())
    } else if c.cleanup_compact {
        Err("Remote log storage is unsupported for the compacted topics".into())
    } else {
        Ok(())
    }
}
