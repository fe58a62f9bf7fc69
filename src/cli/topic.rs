//! `weir topic ...`: create, list, describe, delete, alter-config, add-partitions,
//! delete-records, over Kafka's Admin APIs.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use serde_json::{json, Value};

use crate::client::{Cluster, ClusterConfig, TopicPartition};

use super::admin::*;

#[derive(Debug, Clone, Args)]
pub struct TopicArgs {
    #[command(subcommand)]
    pub command: TopicCommand,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Partitions (-1: the broker's num.partitions).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        partitions: i32,
        /// Replication factor (-1: the broker's default).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        replication_factor: i16,
        /// A topic config, e.g. --config retention.ms=3600000 (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// List topics with their partition counts.
    List,
    /// Partitions (leader, start and end offsets) and configs of a topic.
    Describe { name: String },
    /// Delete a topic.
    Delete { name: String },
    /// Grow a topic to COUNT partitions (CreatePartitions).
    AddPartitions { name: String, count: i32 },
    /// Delete the records of one partition below OFFSET (DeleteRecords; -1: all of them).
    DeleteRecords {
        name: String,
        #[arg(long, default_value_t = 0)]
        partition: i32,
        #[arg(long, allow_hyphen_values = true)]
        before: i64,
    },
    /// Change a topic's configs (IncrementalAlterConfigs): --set k=v, --delete k.
    AlterConfig {
        name: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
}

/// Runs a `weir topic` command; prints its result; returns the exit code.
pub fn topic(args: TopicArgs) -> i32 {
    let json = args.common.json;
    let cmd = args.command.clone();
    let bootstrap = args.common.bootstrap.clone();
    finish(json, run(move || topic_async(bootstrap, cmd)), |v| {
        render_topic(&args.command, v)
    })
}

async fn topic_async(bootstrap: String, cmd: TopicCommand) -> Res<Value> {
    let conn = connect(&bootstrap).await?;
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let configs = configs.iter().map(|c| kv(c)).collect::<Res<Vec<_>>>()?;
            let req = CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(sb(&name)))
                    .with_num_partitions(partitions)
                    .with_replication_factor(replication_factor)
                    .with_configs(
                        configs
                            .iter()
                            .map(|(k, v)| {
                                CreatableTopicConfig::default()
                                    .with_name(sb(k))
                                    .with_value(Some(sb(v)))
                            })
                            .collect(),
                    )]);
            let resp = send(&conn, &req, 5).await?;
            let t = resp.topics.first().ok_or("empty CreateTopics response")?;
            check(
                t.error_code,
                t.error_message.as_ref(),
                &format!("creating {name}"),
            )?;
            Ok(json!({ "created": name, "partitions": t.num_partitions }))
        }
        TopicCommand::List => {
            let md = metadata(&conn, None).await?;
            let mut topics: Vec<Value> = md
                .topics
                .iter()
                .filter_map(|t| {
                    let name = t.name.as_ref()?.as_str().to_string();
                    Some(json!({
                        "name": name,
                        "partitions": t.partitions.len(),
                        "internal": t.is_internal,
                    }))
                })
                .collect();
            topics.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            Ok(json!({ "topics": topics }))
        }
        TopicCommand::Describe { name } => {
            let md = metadata(&conn, Some(vec![name.clone()])).await?;
            let t = md.topics.first().ok_or("empty Metadata response")?;
            check(t.error_code, None, &name)?;
            let cluster = Cluster::connect(ClusterConfig::new(bootstrap.clone()))
                .await
                .map_err(cerr)?;
            let mut parts = Vec::new();
            let mut ps: Vec<_> = t.partitions.iter().collect();
            ps.sort_by_key(|p| p.partition_index);
            for p in ps {
                let tp = TopicPartition::new(name.clone(), p.partition_index);
                let start = cluster.list_offset(&tp, -2).await.map_err(cerr)?;
                let end = cluster.list_offset(&tp, -1).await.map_err(cerr)?;
                parts.push(json!({
                    "partition": p.partition_index,
                    "leader": p.leader_id.0,
                    "replicas": p.replica_nodes.iter().map(|r| r.0).collect::<Vec<_>>(),
                    "start_offset": start,
                    "end_offset": end,
                }));
            }
            let req = DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(sb(&name))
                    .with_configuration_keys(None),
            ]);
            let resp = send(&conn, &req, 4).await?;
            let r = resp
                .results
                .first()
                .ok_or("empty DescribeConfigs response")?;
            check(r.error_code, r.error_message.as_ref(), &name)?;
            let configs: BTreeMap<String, Value> = r
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.as_str().to_string(),
                        json!({
                            "value": c.value.as_ref().map(|v| v.as_str().to_string()),
                            "source": config_source(c.config_source),
                        }),
                    )
                })
                .collect();
            Ok(json!({ "name": name, "partitions": parts, "configs": configs }))
        }
        TopicCommand::Delete { name } => {
            let req = DeleteTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topic_names(vec![TopicName(sb(&name))]);
            let resp = send(&conn, &req, 5).await?;
            let t = resp
                .responses
                .first()
                .ok_or("empty DeleteTopics response")?;
            check(
                t.error_code,
                t.error_message.as_ref(),
                &format!("deleting {name}"),
            )?;
            Ok(json!({ "deleted": name }))
        }
        TopicCommand::AddPartitions { name, count } => {
            let req = CreatePartitionsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![
                    kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(TopicName(sb(&name)))
                        .with_count(count)
                        .with_assignments(None),
                ]);
            let resp = send(&conn, &req, 3).await?;
            let r = resp
                .results
                .first()
                .ok_or("empty CreatePartitions response")?;
            check(
                r.error_code,
                r.error_message.as_ref(),
                &format!("adding partitions to {name}"),
            )?;
            Ok(json!({ "topic": name, "partitions": count }))
        }
        TopicCommand::DeleteRecords {
            name,
            partition,
            before,
        } => {
            use kafka_protocol::messages::delete_records_request::{
                DeleteRecordsPartition, DeleteRecordsTopic,
            };
            let req = DeleteRecordsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(TopicName(sb(&name)))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(partition)
                        .with_offset(before)])]);
            let resp = send(&conn, &req, 2).await?;
            let p = resp
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .ok_or("empty DeleteRecords response")?;
            check(
                p.error_code,
                None,
                &format!("deleting records of {name}-{partition}"),
            )?;
            Ok(json!({ "topic": name, "partition": partition, "low_watermark": p.low_watermark }))
        }
        TopicCommand::AlterConfig { name, set, delete } => {
            if set.is_empty() && delete.is_empty() {
                return Err("nothing to change: give --set KEY=VALUE or --delete KEY".into());
            }
            let mut ops = Vec::new();
            for s in &set {
                let (k, v) = kv(s)?;
                ops.push(
                    AlterableConfig::default()
                        .with_name(sb(&k))
                        .with_config_operation(OP_SET)
                        .with_value(Some(sb(&v))),
                );
            }
            for k in &delete {
                ops.push(
                    AlterableConfig::default()
                        .with_name(sb(k))
                        .with_config_operation(OP_DELETE),
                );
            }
            let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(sb(&name))
                    .with_configs(ops),
            ]);
            let resp = send(&conn, &req, 1).await?;
            let r = resp.responses.first().ok_or("empty response")?;
            check(
                r.error_code,
                r.error_message.as_ref(),
                &format!("altering {name}"),
            )?;
            Ok(json!({ "altered": name, "set": set, "deleted": delete }))
        }
    }
}

fn config_source(s: i8) -> &'static str {
    match s {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

fn render_topic(cmd: &TopicCommand, v: &Value) -> String {
    match cmd {
        TopicCommand::Create { .. } => format!(
            "created topic {} ({} partitions)",
            s(&v["created"]),
            s(&v["partitions"])
        ),
        TopicCommand::Delete { .. } => format!("deleted topic {}", s(&v["deleted"])),
        TopicCommand::AlterConfig { .. } => format!("altered the configs of {}", s(&v["altered"])),
        TopicCommand::AddPartitions { .. } => format!(
            "topic {} now has {} partitions",
            s(&v["topic"]),
            s(&v["partitions"])
        ),
        TopicCommand::DeleteRecords { .. } => format!(
            "{}-{}: records below {} deleted",
            s(&v["topic"]),
            s(&v["partition"]),
            s(&v["low_watermark"])
        ),
        TopicCommand::List => {
            let rows: Vec<Vec<String>> = v["topics"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| vec![s(&t["name"]), s(&t["partitions"])])
                .collect();
            table(&["TOPIC", "PARTITIONS"], &rows)
        }
        TopicCommand::Describe { .. } => {
            let parts: Vec<Vec<String>> = v["partitions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    vec![
                        s(&p["partition"]),
                        s(&p["leader"]),
                        s(&p["start_offset"]),
                        s(&p["end_offset"]),
                    ]
                })
                .collect();
            let configs: Vec<Vec<String>> = v["configs"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, c)| vec![k.clone(), s(&c["value"]), s(&c["source"])])
                .collect();
            format!(
                "topic {}\n\n{}\n\n{}",
                s(&v["name"]),
                table(&["PARTITION", "LEADER", "START", "END"], &parts),
                table(&["CONFIG", "VALUE", "SOURCE"], &configs)
            )
        }
    }
}
