//! `weir group ...`: list, describe, reset-offsets, delete-offsets, over Kafka's group APIs.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::*;
use serde_json::{json, Value};

use crate::client::{Cluster, ClusterConfig, Connection, TopicPartition};

use super::admin::*;

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
    /// Delete a group's committed offsets of a topic (OffsetDelete, as
    /// kafka-consumer-groups.sh --delete-offsets): refused for a topic an active member
    /// subscribes to.
    DeleteOffsets {
        /// The consumer group.
        group: String,
        /// The topic whose offsets go.
        #[arg(long)]
        topic: String,
        /// Only this partition (default: every partition of the topic).
        #[arg(long)]
        partition: Option<i32>,
    },
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
        GroupCommand::DeleteOffsets {
            group,
            topic,
            partition,
        } => {
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
            let req = OffsetDeleteRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_topics(vec![OffsetDeleteRequestTopic::default()
                    .with_name(TopicName(sb(&topic)))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|&p| {
                                OffsetDeleteRequestPartition::default().with_partition_index(p)
                            })
                            .collect(),
                    )]);
            let resp = send(&coord, &req, 0).await?;
            check(
                resp.error_code,
                None,
                &format!("deleting offsets of {group} (a group with members of another kind than a consumer group cannot)"),
            )?;
            let mut rows = Vec::new();
            for t in &resp.topics {
                for p in &t.partitions {
                    let error = p.error_code.err().map(|e| format!("{e:?}"));
                    rows.push(json!({
                        "topic": t.name.as_str(),
                        "partition": p.partition_index,
                        "error": error,
                    }));
                }
            }
            if let Some(failed) = rows.iter().find(|r| !r["error"].is_null()) {
                return Err(format!(
                    "deleting offsets of {group} {topic}-{}: {} (an active member subscribes to the topic?)",
                    failed["partition"], s(&failed["error"])
                ));
            }
            Ok(json!({ "group": group, "offsets": rows }))
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
        GroupCommand::DeleteOffsets { .. } => {
            let rows: Vec<Vec<String>> = v["offsets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| vec![s(&o["topic"]), s(&o["partition"])])
                .collect();
            format!(
                "{}\n\ncommitted offsets of {} deleted",
                table(&["TOPIC", "PARTITION"], &rows),
                s(&v["group"])
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
