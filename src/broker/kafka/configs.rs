//! DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics and the broker.

use crate::broker::errors;
use crate::broker::group::offsets::OFFSETS_TOPIC;
use crate::broker::shard::{AlterConfigsCall, ConfigChange, Shard};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::rc::Rc;
use tracing::warn;
use weir::metadata::valid_topic_name;

use super::*;

pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_BROKER: i8 = 4;
pub(super) const SOURCE_TOPIC: i8 = 1;
pub(super) const SOURCE_STATIC_BROKER: i8 = 4;
pub(super) const SOURCE_DEFAULT: i8 = 5;

pub(super) fn describe_configs(
    shard: &Rc<Shard>,
    d: &DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let meta = shard.metadata();
    let mut resp = DescribeConfigsResponse::default();
    // Built-in defaults, for the DEFAULT_CONFIG synonym of every broker setting.
    let defaults = weir::config::BrokerConfig::default();
    let synonyms = |list: Vec<(String, String, i8)>| {
        list.into_iter()
            .map(|(name, value, source)| {
                let mut syn = DescribeConfigsSynonym::default();
                syn.name = s(&name);
                syn.value = Some(s(&value));
                syn.source = source;
                syn
            })
            .collect::<Vec<_>>()
    };
    let offsets_view = shard.offsets_view();
    for res in &d.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        let wanted = |k: &str| {
            res.configuration_keys
                .as_ref()
                .is_none_or(|ks| ks.iter().any(|w| w.as_str() == k))
        };
        let entry = |name: &str, value: String, source: i8| {
            let mut e = DescribeConfigsResourceResult::default();
            e.name = s(name);
            e.value = Some(s(&value));
            e.read_only = false;
            e.config_source = source;
            // Version 0 says "not set" with a flag (encoded only at v0; Kafka derived it
            // from the source the same way).
            e.is_default = source == SOURCE_DEFAULT;
            e.config_type = weir::config::config_type(name) as i8;
            e.is_sensitive = false;
            e
        };
        match res.resource_type {
            RESOURCE_TOPIC => match meta.topics.get(res.resource_name.as_str()).or(
                // A standalone broker's `__consumer_offsets` (`Shard::offsets_view`).
                offsets_view
                    .as_ref()
                    .filter(|_| res.resource_name.as_str() == OFFSETS_TOPIC),
            ) {
                None => {
                    out.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                    out.error_message = Some(s("unknown topic"));
                }
                Some(t) => {
                    for c in topic_entries(shard, &t.configs, wanted) {
                        let mut e = entry(&c.name, c.value, c.source);
                        if d.include_synonyms {
                            e.synonyms = synonyms(c.synonyms);
                        }
                        out.configs.push(e);
                    }
                }
            },
            RESOURCE_BROKER => {
                let c = &shard.config;
                for setting in weir::config::SETTINGS {
                    if !wanted(setting.name) {
                        continue;
                    }
                    let source = if c.raw.contains_key(setting.name) {
                        SOURCE_STATIC_BROKER
                    } else {
                        SOURCE_DEFAULT
                    };
                    let value = c.value_of(setting.name).unwrap_or_default();
                    let mut e = entry(setting.name, value.clone(), source);
                    if d.include_synonyms {
                        let mut list = Vec::new();
                        if source == SOURCE_STATIC_BROKER {
                            list.push((setting.name.to_string(), value, SOURCE_STATIC_BROKER));
                        }
                        let default = defaults.value_of(setting.name).unwrap_or_default();
                        list.push((setting.name.to_string(), default, SOURCE_DEFAULT));
                        e.synonyms = synonyms(list);
                    }
                    // Static: changed by restarting with a new file, flag or variable.
                    e.read_only = true;
                    if d.include_documentation {
                        let unit = match setting.unit {
                            "" => String::new(),
                            u => format!(" (unit: {u})"),
                        };
                        e.documentation = Some(s(&format!("{}{unit}", setting.doc)));
                    }
                    out.configs.push(e);
                }
            }
            other => {
                out.error_code = errors::INVALID_REQUEST;
                out.error_message = Some(s(&format!("resource type {other} is not supported")));
            }
        }
        resp.results.push(out);
    }
    if resp.results.iter().any(|r| r.error_code != errors::NONE) {
        warn!(resources = d.resources.len(), "DescribeConfigs with errors");
    }
    resp
}

/// One topic config as DescribeConfigs and CreateTopics (v5+, KIP-525) report it.
pub(super) struct TopicEntry {
    pub name: String,
    pub value: String,
    pub source: i8,
    /// Where the value comes from, most specific first, as Kafka lists synonyms when asked
    /// (kafka-configs --describe asks): the topic's own value, then the broker setting behind
    /// it if the operator set one, then the built-in default.
    pub synonyms: Vec<(String, String, i8)>,
}

/// Every config of a topic whose overrides are `configs`: the ones weir acts on (with their
/// broker defaults where not overridden), then the Kafka configs it stores but does not act
/// on, reported as set.
pub(super) fn topic_entries(
    shard: &Shard,
    configs: &std::collections::BTreeMap<String, String>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<TopicEntry> {
    let defaults = weir::config::BrokerConfig::default();
    let raw = &shard.config.raw;
    let mut out = Vec::new();
    for (key, broker_key) in weir::config::TOPIC_CONFIGS {
        if !wanted(key) {
            continue;
        }
        // A default the operator set on the broker (file, flag or env) is
        // STATIC_BROKER_CONFIG, as Kafka reports it; a built-in one DEFAULT.
        let on_broker = if raw.contains_key(*broker_key) {
            Some(*broker_key)
        } else if *key == "retention.ms" && raw.contains_key("log.retention.hours") {
            Some("log.retention.hours")
        } else {
            None
        };
        let (value, source) = match configs.get(*key) {
            Some(v) => (v.clone(), SOURCE_TOPIC),
            None => (
                shard.config.topic_default(key).unwrap_or_default(),
                if on_broker.is_some() {
                    SOURCE_STATIC_BROKER
                } else {
                    SOURCE_DEFAULT
                },
            ),
        };
        let mut synonyms = Vec::new();
        if source == SOURCE_TOPIC {
            synonyms.push((key.to_string(), value.clone(), SOURCE_TOPIC));
        }
        if let Some(name) = on_broker {
            let v = raw.get(name).cloned().unwrap_or_default();
            synonyms.push((name.to_string(), v, SOURCE_STATIC_BROKER));
        }
        let default = defaults.topic_default(key).unwrap_or_default();
        synonyms.push((broker_key.to_string(), default, SOURCE_DEFAULT));
        out.push(TopicEntry {
            name: key.to_string(),
            value,
            source,
            synonyms,
        });
    }
    for (key, value) in configs {
        let acted_on = weir::config::TOPIC_CONFIGS.iter().any(|(k, _)| k == key);
        if !acted_on && wanted(key) {
            out.push(TopicEntry {
                name: key.clone(),
                value: value.clone(),
                source: SOURCE_TOPIC,
                synonyms: vec![(key.clone(), value.clone(), SOURCE_TOPIC)],
            });
        }
    }
    out
}

/// A config change: (key, `Some(value)` to set, `None` to delete).
pub(super) type ConfigOp = (String, Option<String>);

/// A resource of an (Incremental)AlterConfigs request: its type, name, and the config
/// changes it asks for, or why they are refused (error code, message).
pub(super) type AlterResource = (i8, StrBytes, Result<Vec<ConfigOp>, (i16, String)>);

/// One resource's outcome in an (Incremental)AlterConfigs response.
pub(super) struct AlterOutcome {
    resource_type: i8,
    name: StrBytes,
    error: i16,
    message: Option<String>,
}

/// Refuses resources named twice (as Kafka does) and resources that are not topics, sends
/// the topic changes to core 0, and merges its answers, in request order, with the refused.
pub(super) async fn alter_topic_configs(
    shard: &Rc<Shard>,
    resources: Vec<AlterResource>,
    replace_all: bool,
    validate_only: bool,
) -> Vec<AlterOutcome> {
    let mut named: HashMap<(i8, String), usize> = HashMap::new();
    for (t, name, _) in &resources {
        *named.entry((*t, name.to_string())).or_insert(0) += 1;
    }
    let resources: Vec<_> = resources
        .into_iter()
        .map(|(t, name, ops)| {
            let topic = name.to_string();
            let change = if named[&(t, topic.clone())] > 1 {
                Err((
                    errors::INVALID_REQUEST,
                    format!("resource '{topic}' named more than once"),
                ))
            } else if let Some(e) = not_alterable(t, &topic) {
                Err(e)
            } else {
                ops.map(|ops| ConfigChange {
                    topic,
                    replace_all,
                    ops,
                })
            };
            (t, name, change)
        })
        .collect();
    let changes: Vec<ConfigChange> = resources
        .iter()
        .filter_map(|(_, _, c)| c.as_ref().ok().cloned())
        .collect();
    let mut results = if changes.is_empty() {
        Vec::new()
    } else {
        let alter = AlterConfigsCall {
            changes,
            validate_only,
        };
        (shard.ask(0, alter).await).unwrap_or_default()
    }
    .into_iter();
    resources
        .into_iter()
        .map(|(resource_type, name, c)| {
            let (error, message) = match c {
                Err((code, why)) => (code, Some(why)),
                Ok(_) => match results.next() {
                    Some(r) => (r.error, r.message),
                    None => (errors::UNKNOWN_SERVER_ERROR, Some("no answer".to_string())),
                },
            };
            if error != errors::NONE {
                warn!(resource = %name, error, message = message.as_deref().unwrap_or(""),
                    "config change refused");
            }
            AlterOutcome {
                resource_type,
                name,
                error,
                message,
            }
        })
        .collect()
}

/// Why a resource that is not a topic cannot be altered; `None` for topics.
pub(super) fn not_alterable(resource_type: i8, name: &str) -> Option<(i16, String)> {
    match resource_type {
        RESOURCE_TOPIC if valid_topic_name(name) => None,
        RESOURCE_TOPIC => Some((
            errors::INVALID_TOPIC_EXCEPTION,
            format!("invalid topic name '{name}'"),
        )),
        RESOURCE_BROKER => Some((
            errors::INVALID_REQUEST,
            "broker settings are static in weir: set them in the config file, a flag or \
             the environment (docs/configuration.md) and restart"
                .to_string(),
        )),
        other => Some((
            errors::INVALID_REQUEST,
            format!("resource type {other} is not supported"),
        )),
    }
}

/// AlterConfigs: each topic's overrides become exactly the configs given (Kafka semantics:
/// a config not named goes back to the broker default).
pub(super) async fn alter_configs(
    shard: &Rc<Shard>,
    a: &AlterConfigsRequest,
) -> AlterConfigsResponse {
    let resources = a
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            (r.resource_type, r.resource_name.clone(), Ok(ops))
        })
        .collect();
    let mut resp = AlterConfigsResponse::default();
    for o in alter_topic_configs(shard, resources, true, a.validate_only).await {
        let mut r = alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = o.resource_type;
        r.resource_name = o.name;
        r.error_code = o.error;
        r.error_message = o.message.as_deref().map(s);
        resp.responses.push(r);
    }
    resp
}

pub(super) const OP_SET: i8 = 0;
pub(super) const OP_DELETE: i8 = 1;

pub(super) const OP_APPEND: i8 = 2;
pub(super) const OP_SUBTRACT: i8 = 3;

/// Topic configs whose value is a comma-separated list (Kafka's `ConfigDef.Type.LIST`): the
/// ones APPEND and SUBTRACT apply to.
const LIST_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
];

/// APPEND (add the items not there yet) or SUBTRACT (remove the items) `value`'s items to or
/// from the topic's value of `name` now (its override, else the broker default).
fn list_op(shard: &Shard, topic: &str, name: &str, op: i8, value: &str) -> String {
    let current = shard
        .metadata()
        .topics
        .get(topic)
        .and_then(|t| t.configs.get(name).cloned())
        .or_else(|| shard.config.topic_default(name))
        .unwrap_or_default();
    let mut items: Vec<String> = current
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .collect();
    for v in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let at = items.iter().position(|i| i == v);
        match (op, at) {
            (OP_APPEND, None) => items.push(v.to_string()),
            (OP_SUBTRACT, Some(k)) => {
                items.remove(k);
            }
            _ => {}
        }
    }
    items.join(",")
}

/// IncrementalAlterConfigs: SET and DELETE change only the configs named; APPEND and SUBTRACT
/// add items to or remove them from a list-valued config (`cleanup.policy`, ...), starting from
/// the topic's current value.
pub(super) async fn incremental_alter_configs(
    shard: &Rc<Shard>,
    a: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let resources = a
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| match c.config_operation {
                    OP_SET => Ok((
                        c.name.to_string(),
                        Some(c.value.as_ref().map(|v| v.to_string()).unwrap_or_default()),
                    )),
                    OP_DELETE => Ok((c.name.to_string(), None)),
                    op @ (OP_APPEND | OP_SUBTRACT) if LIST_CONFIGS.contains(&c.name.as_str()) => {
                        let value = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                        Ok((
                            c.name.to_string(),
                            Some(list_op(
                                shard,
                                r.resource_name.as_str(),
                                c.name.as_str(),
                                op,
                                &value,
                            )),
                        ))
                    }
                    op => Err((
                        errors::INVALID_REQUEST,
                        format!(
                            "operation {op} (APPEND=2, SUBTRACT=3) on '{}': not a list config",
                            c.name.as_str()
                        ),
                    )),
                })
                .collect();
            (r.resource_type, r.resource_name.clone(), ops)
        })
        .collect();
    let mut resp = IncrementalAlterConfigsResponse::default();
    for o in alter_topic_configs(shard, resources, false, a.validate_only).await {
        let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = o.resource_type;
        r.resource_name = o.name;
        r.error_code = o.error;
        r.error_message = o.message.as_deref().map(s);
        resp.responses.push(r);
    }
    resp
}
