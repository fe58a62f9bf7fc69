//! `weir topic ...` and `weir group ...`: an admin CLI over Kafka's Admin APIs, so it works
//! against any Kafka-protocol broker (`--bootstrap`). Human-readable tables by default,
//! `--json` for scripts. Each command runs on one glommio executor with the native client.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use crate::client::{Cluster, ClusterConfig, Connection, TopicPartition};

const CLIENT_ID: &str = "weir-admin";
const RESOURCE_TOPIC: i8 = 2;
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// Options every admin command takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The broker to talk to (any Kafka-protocol broker).
    #[arg(long, default_value = "127.0.0.1:9092", global = true)]
    pub bootstrap: String,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

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

#[derive(Debug, Clone, Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    pub command: GroupCommand,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Subcommand)]
pub enum GroupCommand {
    /// List consumer groups.
    List,
    /// A group's state, members, and committed offsets with their lag.
    Describe { group: String },
    /// Move a group's committed offsets (the group must have no active members). Shows the
    /// plan; --execute commits it, as kafka-consumer-groups.sh does.
    ResetOffsets {
        /// The consumer group.
        group: String,
        /// The topic whose offsets move.
        #[arg(long)]
        topic: String,
        /// Only this partition (default: every partition of the topic).
        #[arg(long)]
        partition: Option<i32>,
        /// To each partition's log start offset.
        #[arg(long, conflicts_with_all = ["to_latest", "to_offset"])]
        to_earliest: bool,
        /// To each partition's end (skip everything there now).
        #[arg(long, conflicts_with_all = ["to_earliest", "to_offset"])]
        to_latest: bool,
        /// To this offset (clamped to each partition's start and end).
        #[arg(long, conflicts_with_all = ["to_earliest", "to_latest"])]
        to_offset: Option<i64>,
        /// Commit the new offsets (without it: only print them).
        #[arg(long)]
        execute: bool,
    },
}

type Res<T> = Result<T, String>;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn check(code: i16, message: Option<&StrBytes>, what: &str) -> Res<()> {
    match code.err() {
        None => Ok(()),
        Some(e) => Err(match message.filter(|m| !m.is_empty()) {
            Some(m) => format!("{what}: {e:?}: {}", m.as_str()),
            None => format!("{what}: {e:?}"),
        }),
    }
}

fn kv(s: &str) -> Res<(String, String)> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("'{s}': expected KEY=VALUE"))
}

fn cerr(e: crate::client::Error) -> String {
    e.to_string()
}

async fn send<R: kafka_protocol::protocol::Request>(
    conn: &Connection,
    req: &R,
    cap: i16,
) -> Res<R::Response> {
    let version = conn.version::<R>(cap).map_err(cerr)?;
    conn.send(req, version)
        .await
        .map_err(cerr)?
        .await
        .map_err(cerr)
}

/// Prints rows as an aligned table.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(headers.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.clone()));
    }
    out
}

fn run<F, Fut>(f: F) -> Res<Value>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Res<Value>> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .name("weir-admin")
        .spawn(f)
        .map_err(|e| format!("starting the client: {e}"))?
        .join()
        .map_err(|e| format!("client executor: {e}"))?
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

/// Runs a `weir group` command; prints its result; returns the exit code.
pub fn group(args: GroupArgs) -> i32 {
    let json = args.common.json;
    let cmd = args.command.clone();
    let bootstrap = args.common.bootstrap.clone();
    finish(json, run(move || group_async(bootstrap, cmd)), |v| {
        render_group(&args.command, v)
    })
}

fn finish(json: bool, r: Res<Value>, human: impl Fn(&Value) -> String) -> i32 {
    match r {
        Ok(v) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                println!("{}", human(&v));
            }
            0
        }
        Err(e) => {
            if json {
                println!("{}", json!({ "error": e }));
            }
            eprintln!("weir: {e}");
            1
        }
    }
}

async fn connect(bootstrap: &str) -> Res<Connection> {
    Connection::connect(bootstrap, CLIENT_ID)
        .await
        .map_err(|e| format!("connecting to {bootstrap}: {e}"))
}

async fn metadata(conn: &Connection, topics: Option<Vec<String>>) -> Res<MetadataResponse> {
    let req = MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(sb(t)))))
                .collect()
        }))
        .with_allow_auto_topic_creation(false);
    send(conn, &req, 9).await
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

/// The connection to `group`'s coordinator.
async fn coordinator(conn: &Connection, group: &str) -> Res<Connection> {
    let req = FindCoordinatorRequest::default()
        .with_key(sb(group))
        .with_key_type(0);
    let resp = send(conn, &req, 3).await?;
    check(
        resp.error_code,
        resp.error_message.as_ref(),
        &format!("finding the coordinator of {group}"),
    )?;
    let addr = format!("{}:{}", resp.host.as_str(), resp.port);
    if addr == conn.addr() {
        return Ok(conn.clone());
    }
    connect(&addr).await
}

/// Committed offsets of `group` ((topic, partition) → offset), all topics.
async fn committed(coord: &Connection, group: &str) -> Res<BTreeMap<(String, i32), i64>> {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_topics(None);
    let resp = send(coord, &req, 7).await?;
    check(resp.error_code, None, &format!("offsets of {group}"))?;
    let mut out = BTreeMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            if p.error_code == 0 && p.committed_offset >= 0 {
                out.insert(
                    (t.name.as_str().to_string(), p.partition_index),
                    p.committed_offset,
                );
            }
        }
    }
    Ok(out)
}

async fn group_async(bootstrap: String, cmd: GroupCommand) -> Res<Value> {
    let conn = connect(&bootstrap).await?;
    match cmd {
        GroupCommand::List => {
            let resp = send(&conn, &ListGroupsRequest::default(), 4).await?;
            check(resp.error_code, None, "listing groups")?;
            let mut groups: Vec<Value> = resp
                .groups
                .iter()
                .map(|g| {
                    json!({
                        "group": g.group_id.as_str(),
                        "state": g.group_state.as_str(),
                        "protocol_type": g.protocol_type.as_str(),
                    })
                })
                .collect();
            groups.sort_by(|a, b| a["group"].as_str().cmp(&b["group"].as_str()));
            Ok(json!({ "groups": groups }))
        }
        GroupCommand::Describe { group } => {
            let coord = coordinator(&conn, &group).await?;
            let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(sb(&group))]);
            let resp = send(&coord, &req, 5).await?;
            let g = resp.groups.first().ok_or("empty DescribeGroups response")?;
            check(g.error_code, g.error_message.as_ref(), &group)?;
            let members: Vec<Value> = g
                .members
                .iter()
                .map(|m| {
                    json!({
                        "member_id": m.member_id.as_str(),
                        "client_id": m.client_id.as_str(),
                        "host": m.client_host.as_str(),
                    })
                })
                .collect();
            let offsets = committed(&coord, &group).await?;
            let cluster = Cluster::connect(ClusterConfig::new(bootstrap.clone()))
                .await
                .map_err(cerr)?;
            let mut parts = Vec::new();
            for ((topic, p), off) in &offsets {
                let end = cluster
                    .list_offset(&TopicPartition::new(topic.clone(), *p), -1)
                    .await
                    .ok();
                parts.push(json!({
                    "topic": topic,
                    "partition": p,
                    "committed_offset": off,
                    "end_offset": end,
                    "lag": end.map(|e| (e - off).max(0)),
                }));
            }
            Ok(json!({
                "group": group,
                "state": g.group_state.as_str(),
                "protocol_type": g.protocol_type.as_str(),
                "protocol": g.protocol_data.as_str(),
                "members": members,
                "offsets": parts,
            }))
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            partition,
            to_earliest,
            to_latest,
            to_offset,
            execute,
        } => {
            let target: i64 = match (to_earliest, to_latest, to_offset) {
                (true, _, _) => -2,
                (_, true, _) => -1,
                (_, _, Some(o)) if o >= 0 => o,
                (_, _, Some(o)) => return Err(format!("--to-offset {o}: must be >= 0")),
                _ => return Err("say where: --to-earliest, --to-latest or --to-offset N".into()),
            };
            let cluster = Cluster::connect(ClusterConfig::new(bootstrap.clone()))
                .await
                .map_err(cerr)?;
            let n = cluster.partitions(&topic).await.map_err(cerr)? as i32;
            let parts: Vec<i32> = match partition {
                Some(p) if p >= 0 && p < n => vec![p],
                Some(p) => return Err(format!("{topic} has no partition {p} ({n} partitions)")),
                None => (0..n).collect(),
            };
            let coord = coordinator(&conn, &group).await?;
            let old = committed(&coord, &group).await?;
            let mut plan = Vec::new();
            for p in &parts {
                let tp = TopicPartition::new(topic.clone(), *p);
                let start = cluster.list_offset(&tp, -2).await.map_err(cerr)?;
                let end = cluster.list_offset(&tp, -1).await.map_err(cerr)?;
                let new = match target {
                    -2 => start,
                    -1 => end,
                    o => o.clamp(start, end),
                };
                plan.push((*p, old.get(&(topic.clone(), *p)).copied(), new));
            }
            if execute {
                let req = OffsetCommitRequest::default()
                    .with_group_id(GroupId(sb(&group)))
                    .with_generation_id_or_member_epoch(-1)
                    .with_member_id(sb(""))
                    .with_retention_time_ms(-1)
                    .with_topics(vec![OffsetCommitRequestTopic::default()
                        .with_name(TopicName(sb(&topic)))
                        .with_partitions(
                            plan.iter()
                                .map(|(p, _, new)| {
                                    OffsetCommitRequestPartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(*new)
                                        .with_committed_leader_epoch(-1)
                                })
                                .collect(),
                        )]);
                let resp = send(&coord, &req, 7).await?;
                for t in &resp.topics {
                    for p in &t.partitions {
                        check(
                            p.error_code,
                            None,
                            &format!(
                                "committing {group} {topic}-{} (a group with active members cannot be reset)",
                                p.partition_index
                            ),
                        )?;
                    }
                }
            }
            let rows: Vec<Value> = plan
                .iter()
                .map(|(p, old, new)| {
                    json!({ "topic": topic, "partition": p, "old_offset": old, "new_offset": new })
                })
                .collect();
            Ok(json!({ "group": group, "executed": execute, "offsets": rows }))
        }
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
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

fn render_group(cmd: &GroupCommand, v: &Value) -> String {
    match cmd {
        GroupCommand::List => {
            let rows: Vec<Vec<String>> = v["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| vec![s(&g["group"]), s(&g["state"]), s(&g["protocol_type"])])
                .collect();
            table(&["GROUP", "STATE", "TYPE"], &rows)
        }
        GroupCommand::Describe { .. } => {
            let rows: Vec<Vec<String>> = v["offsets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    vec![
                        s(&o["topic"]),
                        s(&o["partition"]),
                        s(&o["committed_offset"]),
                        s(&o["end_offset"]),
                        s(&o["lag"]),
                    ]
                })
                .collect();
            let members = v["members"].as_array().map_or(0, Vec::len);
            format!(
                "group {} ({}, {} members)\n\n{}",
                s(&v["group"]),
                s(&v["state"]),
                members,
                table(&["TOPIC", "PARTITION", "COMMITTED", "END", "LAG"], &rows)
            )
        }
        GroupCommand::ResetOffsets { .. } => {
            let rows: Vec<Vec<String>> = v["offsets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    vec![
                        s(&o["topic"]),
                        s(&o["partition"]),
                        s(&o["old_offset"]),
                        s(&o["new_offset"]),
                    ]
                })
                .collect();
            let note = if v["executed"] == Value::Bool(true) {
                "committed"
            } else {
                "not committed: add --execute"
            };
            format!(
                "{}\n\n{note}",
                table(&["TOPIC", "PARTITION", "OLD", "NEW"], &rows)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["A", "LONGER"],
            &[
                vec!["xyz".into(), "1".into()],
                vec!["q".into(), "22".into()],
            ],
        );
        assert_eq!(t, "A    LONGER\nxyz  1\nq    22");
    }

    #[test]
    fn key_values_need_an_equals_sign() {
        assert_eq!(kv(" a = b ").unwrap(), ("a".into(), "b".into()));
        assert!(kv("nothing").is_err());
    }
}
