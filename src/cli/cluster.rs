//! `weir cluster describe`: a cluster's brokers (node ids, endpoint, rack), its metadata
//! quorum (leader, epoch, each voter's lag) and how its partitions spread over the brokers
//! (leaders, replicas, partitions under-replicated or without a leader). Built on Kafka's
//! Admin APIs — DescribeCluster, DescribeQuorum, Metadata — so a KRaft Kafka answers too.

use std::collections::{BTreeMap, BTreeSet};

use clap::{Args, Subcommand};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::*;
use serde_json::{json, Value};

use super::admin::*;
use crate::cluster::NODE_ID_STRIDE;

#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ClusterCommand {
    /// Brokers, the metadata quorum, and leaders and replicas per broker.
    Describe,
}

/// Runs a `weir cluster` command; prints its result; returns the exit code.
pub fn cluster(args: ClusterArgs) -> i32 {
    let bootstrap = args.common.bootstrap.clone();
    match args.command {
        ClusterCommand::Describe => {
            finish(args.common.json, run(move || describe(bootstrap)), render)
        }
    }
}

/// The metadata quorum as DescribeQuorum gives it: (leader, epoch, high watermark, each
/// voter's (id, log end)); `None` where there is none (a standalone broker).
async fn quorum(conn: &crate::client::Connection) -> Res<Option<Value>> {
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(sb("__cluster_metadata")))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let resp = send(conn, &req, 1).await?;
    let Some(p) = resp.topics.first().and_then(|t| t.partitions.first()) else {
        return Ok(None);
    };
    if resp.error_code != 0 || p.error_code != 0 {
        return Ok(None);
    }
    let voters: Vec<Value> = p
        .current_voters
        .iter()
        .map(|v| json!({ "id": v.replica_id.0, "log_end": v.log_end_offset }))
        .collect();
    Ok(Some(json!({
        "leader": p.leader_id.0,
        "epoch": p.leader_epoch,
        "high_watermark": p.high_watermark,
        "voters": voters,
    })))
}

async fn describe(bootstrap: String) -> Res<Value> {
    let conn = connect(&bootstrap).await?;
    let dc = send(&conn, &DescribeClusterRequest::default(), 1).await?;
    check(dc.error_code, dc.error_message.as_ref(), "DescribeCluster")?;
    let quorum = quorum(&conn).await?;
    let md = metadata(&conn, None).await?;
    let voters: BTreeMap<i64, i64> = quorum
        .as_ref()
        .and_then(|q| q["voters"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| Some((v["id"].as_i64()?, v["log_end"].as_i64()?)))
        .collect();
    // A weir broker with per-core listeners shows one node per core (broker * stride + core).
    let broker_of = |node: i32| -> i64 {
        let n = i64::from(node);
        let b = n / i64::from(NODE_ID_STRIDE);
        if n >= i64::from(NODE_ID_STRIDE) && voters.contains_key(&b) {
            b
        } else {
            n
        }
    };
    let mut brokers: BTreeMap<i64, Value> = BTreeMap::new();
    for b in &dc.brokers {
        let id = broker_of(b.broker_id.0);
        let e = brokers.entry(id).or_insert_with(|| {
            json!({
                "broker": id,
                "nodes": [],
                "endpoints": [],
                "rack": b.rack.as_ref().map(|r| r.as_str().to_string()),
                "voter": voters.contains_key(&id),
                "log_end": voters.get(&id),
                "leaders": 0,
                "replicas": 0,
            })
        });
        if let Some(nodes) = e["nodes"].as_array_mut() {
            nodes.push(json!(b.broker_id.0));
        }
        if let Some(endpoints) = e["endpoints"].as_array_mut() {
            endpoints.push(json!(format!("{}:{}", b.host.as_str(), b.port)));
        }
    }
    let (mut total, mut under, mut offline) = (0usize, Vec::new(), Vec::new());
    for t in &md.topics {
        let Some(name) = t.name.as_ref().map(|n| n.as_str().to_string()) else {
            continue;
        };
        for p in &t.partitions {
            total += 1;
            let tp = format!("{name}-{}", p.partition_index);
            if p.leader_id.0 < 0 {
                offline.push(tp.clone());
            } else if let Some(b) = brokers.get_mut(&broker_of(p.leader_id.0)) {
                b["leaders"] = json!(b["leaders"].as_u64().unwrap_or(0) + 1);
            }
            let replicas: BTreeSet<i64> = p.replica_nodes.iter().map(|r| broker_of(r.0)).collect();
            for r in &replicas {
                if let Some(b) = brokers.get_mut(r) {
                    b["replicas"] = json!(b["replicas"].as_u64().unwrap_or(0) + 1);
                }
            }
            if p.isr_nodes.len() < p.replica_nodes.len() {
                under.push(tp);
            }
        }
    }
    Ok(json!({
        "cluster_id": dc.cluster_id.as_str(),
        "controller": dc.controller_id.0,
        "quorum": quorum,
        "brokers": brokers.into_values().collect::<Vec<_>>(),
        "partitions": total,
        "under_replicated": under,
        "without_leader": offline,
    }))
}

fn render(v: &Value) -> String {
    let brokers = v["brokers"].as_array().cloned().unwrap_or_default();
    let hw = v["quorum"]["high_watermark"].as_i64();
    let mut out = if v["quorum"].is_null() {
        format!(
            "cluster {}: no metadata quorum (a standalone broker), {} advertised nodes",
            s(&v["cluster_id"]),
            brokers.len()
        )
    } else {
        format!(
            "cluster {}: {} brokers; metadata quorum leader {}, epoch {}, high watermark {}",
            s(&v["cluster_id"]),
            brokers.len(),
            s(&v["quorum"]["leader"]),
            s(&v["quorum"]["epoch"]),
            s(&v["quorum"]["high_watermark"])
        )
    };
    let rows: Vec<Vec<String>> = brokers
        .iter()
        .map(|b| {
            let strings = |k: &str| -> Vec<String> {
                b[k].as_array()
                    .map(|n| n.iter().map(s).collect())
                    .unwrap_or_default()
            };
            let nodes = strings("nodes");
            let lag = match (b["log_end"].as_i64(), hw) {
                (Some(end), Some(hw)) => (hw - end).max(0).to_string(),
                _ => "-".into(),
            };
            vec![
                s(&b["broker"]),
                nodes.join(","),
                strings("endpoints").join(","),
                s(&b["rack"]),
                if b["voter"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                }
                .into(),
                lag,
                s(&b["leaders"]),
                s(&b["replicas"]),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&table(
        &[
            "BROKER",
            "NODES",
            "ENDPOINTS",
            "RACK",
            "VOTER",
            "LAG",
            "LEADERS",
            "REPLICAS",
        ],
        &rows,
    ));
    let list = |k: &str| -> String {
        let names: Vec<String> = v[k]
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(" ")
        }
    };
    out.push_str(&format!(
        "\n{} partitions; under-replicated: {}; without a leader: {}",
        s(&v["partitions"]),
        list("under_replicated"),
        list("without_leader")
    ));
    out
}
