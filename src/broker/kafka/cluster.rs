//! DescribeLogDirs, ElectLeaders, DescribeCluster: what a single node answers (and, for
//! ElectLeaders, what a cluster does).

use crate::broker::errors;
use crate::broker::shard::{PartitionSizesCall, Shard};
use kafka_protocol::messages::*;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::*;

/// DescribeLogDirs: one log directory (`log.dirs`) with the size of each partition in it.
/// A broker answers for its own partitions: with `listeners.per.core` each core is a broker
/// (the connection's core), otherwise the process is one broker (every core's partitions).
pub(super) async fn describe_log_dirs(
    shard: &Rc<Shard>,
    d: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    use kafka_protocol::messages::describe_log_dirs_response::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };
    let mut sizes = Vec::new();
    if shard.core_endpoints.borrow().is_empty() {
        for core in 0..shard.cores {
            if let Some(s) = shard.ask(core, PartitionSizesCall).await {
                sizes.extend(s);
            }
        }
    } else {
        sizes = shard.partition_sizes();
    }
    let wanted = |t: &str, p: i32| {
        d.topics.as_ref().is_none_or(|ts| {
            ts.iter()
                .any(|w| w.topic.as_str() == t && w.partitions.contains(&p))
        })
    };
    let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for (t, p, bytes) in sizes {
        if wanted(&t, p) {
            let mut part = DescribeLogDirsPartition::default();
            part.partition_index = p;
            part.partition_size = bytes as i64;
            topics.entry(t).or_default().push(part);
        }
    }
    let mut dir = DescribeLogDirsResult::default();
    dir.log_dir = s(&shard.config.data_dir.display().to_string());
    dir.total_bytes = -1;
    dir.usable_bytes = -1;
    dir.topics = topics
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition_index);
            let mut t = DescribeLogDirsTopic::default();
            t.name = TopicName(s(&name));
            t.partitions = partitions;
            t
        })
        .collect();
    let mut r = DescribeLogDirsResponse::default();
    r.results = vec![dir];
    r
}

/// ElectLeaders. In a cluster, PREFERRED moves each partition's leadership to its preferred
/// replica (`elect_in_cluster`). On a single node every partition already has its only
/// replica as leader (ELECTION_NOT_NEEDED); unknown ones are UNKNOWN_TOPIC_OR_PARTITION. "All
/// partitions" (null) lists none, as Kafka leaves out the partitions that needed no election.
pub(super) async fn elect_leaders(
    shard: &Rc<Shard>,
    e: &ElectLeadersRequest,
) -> ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    const ELECTION_NOT_NEEDED: i16 = errors::ELECTION_NOT_NEEDED;
    let meta = shard.metadata();
    if meta.local_broker.is_some() {
        return elect_in_cluster(shard, e).await;
    }
    let mut r = ElectLeadersResponse::default();
    for t in e.topic_partitions.iter().flatten() {
        let mut tr = ReplicaElectionResult::default();
        tr.topic = t.topic.clone();
        for &p in &t.partitions {
            let mut pr = PartitionResult::default();
            pr.partition_id = p;
            match meta.owner(t.topic.as_str(), p) {
                Some(_) => {
                    pr.error_code = ELECTION_NOT_NEEDED;
                    pr.error_message = Some(s("the partition's only replica is its leader"));
                }
                None => pr.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION,
            }
            tr.partition_result.push(pr);
        }
        r.replica_election_results.push(tr);
    }
    r
}

/// ElectLeaders in a cluster. PREFERRED: each partition named (or, for null, each replicated
/// partition whose leader is not its preferred replica) is asked of its leader's broker,
/// which hands the leadership over and answers once it moved (`Shard::elect_here`;
/// docs/replication.md, "Preferred leaders"). UNCLEAN: weir never elects a replica that may
/// lack acknowledged records, so a partition with a leader needs none
/// (ELECTION_NOT_NEEDED) and one without gets ELIGIBLE_LEADERS_NOT_AVAILABLE.
async fn elect_in_cluster(shard: &Rc<Shard>, e: &ElectLeadersRequest) -> ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    let meta = shard.metadata();
    let here = meta.local_broker.unwrap_or(0);
    let asked: Vec<(String, i32)> = match &e.topic_partitions {
        Some(tps) => tps
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.to_string(), p)))
            .collect(),
        None => {
            let mut all = Vec::new();
            for (name, t) in &meta.topics {
                for (p, replicas) in t.replicas.iter().enumerate() {
                    if replicas.len() > 1 && t.brokers.get(p) != replicas.first().map(|r| &r.0) {
                        all.push((name.clone(), p as i32));
                    }
                }
            }
            all
        }
    };
    let unclean = e.election_type == 1;
    let mut codes = vec![errors::NONE; asked.len()];
    // Per leader broker: (index in `asked`, partition).
    type Indexed = Vec<(usize, (String, i32))>;
    let mut by_leader: BTreeMap<u64, Indexed> = BTreeMap::new();
    for (i, (topic, p)) in asked.iter().enumerate() {
        let Some(t) = meta.topics.get(topic) else {
            codes[i] = errors::UNKNOWN_TOPIC_OR_PARTITION;
            continue;
        };
        if usize::try_from(*p).map_or(true, |p| p >= t.owners.len()) {
            codes[i] = errors::UNKNOWN_TOPIC_OR_PARTITION;
            continue;
        }
        let leader = shard.leader_broker(topic, *p).await;
        codes[i] = match leader {
            _ if weir::metadata::Metadata::replication_factor(t) <= 1 => {
                errors::ELECTION_NOT_NEEDED
            }
            Some(_) if unclean => errors::ELECTION_NOT_NEEDED,
            None if unclean => errors::ELIGIBLE_LEADERS_NOT_AVAILABLE,
            None => errors::LEADER_NOT_AVAILABLE,
            Some(b) => {
                by_leader
                    .entry(b)
                    .or_default()
                    .push((i, (topic.clone(), *p)));
                continue;
            }
        };
    }
    for (broker, parts) in by_leader {
        let (at, parts): (Vec<usize>, Vec<(String, i32)>) = parts.into_iter().unzip();
        let n = parts.len();
        let got = if broker == here {
            shard.elect_here(parts).await
        } else {
            match shard
                .peer_call(broker, weir::protocol::peer::PeerCall::Elect { parts })
                .await
            {
                Some(weir::protocol::peer::PeerAnswer::Codes(c)) if c.len() == n => c,
                _ => vec![errors::REQUEST_TIMED_OUT; n],
            }
        };
        for (i, c) in at.into_iter().zip(got) {
            codes[i] = c;
        }
    }
    let mut r = ElectLeadersResponse::default();
    for ((topic, p), code) in asked.into_iter().zip(codes) {
        if r.replica_election_results
            .last()
            .is_none_or(|t: &ReplicaElectionResult| t.topic.as_str() != topic)
        {
            let mut tr = ReplicaElectionResult::default();
            tr.topic = s(&topic).into();
            r.replica_election_results.push(tr);
        }
        let mut pr = PartitionResult::default();
        pr.partition_id = p;
        pr.error_code = code;
        pr.error_message = match code {
            errors::PREFERRED_LEADER_NOT_AVAILABLE => Some(s(
                "the preferred replica is not in sync, or did not take the leadership over in time",
            )),
            errors::ELIGIBLE_LEADERS_NOT_AVAILABLE => Some(s(
                "weir has no unclean leader election (it would lose acknowledged records)",
            )),
            _ => None,
        };
        if let Some(tr) = r.replica_election_results.last_mut() {
            tr.partition_result.push(pr);
        }
    }
    r
}

/// DescribeCluster: the same brokers as Metadata (one per core with `listeners.per.core`).
pub(super) fn describe_cluster(shard: &Rc<Shard>, listener: usize) -> DescribeClusterResponse {
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    let endpoints = shard.brokers_with_racks(listener);
    let mut r = DescribeClusterResponse::default();
    r.endpoint_type = 1;
    r.cluster_id = s("weir");
    r.controller_id = BrokerId(shard.controller_node());
    r.cluster_authorized_operations = i32::MIN;
    r.brokers = endpoints
        .iter()
        .map(|(id, host, port, rack)| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(*id);
            b.host = s(host);
            b.port = *port;
            b.rack = rack.as_deref().map(s);
            b
        })
        .collect();
    r
}

/// DescribeQuorum: the metadata Raft group (docs/replication.md) as Kafka's
/// `__cluster_metadata` quorum, asked of its leader: voters are the brokers (`--node-id`),
/// the high watermark is the commit index, each voter's log end offset the last index the
/// leader knows it holds. weir tracks no fetch times: they are -1 ("unknown"). A standalone
/// broker has no quorum: INVALID_REQUEST with a message saying so.
pub(super) async fn describe_quorum(
    shard: &Rc<Shard>,
    d: &DescribeQuorumRequest,
    _listener: usize,
) -> DescribeQuorumResponse {
    use kafka_protocol::messages::describe_quorum_response::{
        PartitionData, ReplicaState, TopicData,
    };
    const METADATA_TOPIC: &str = "__cluster_metadata";
    let mut r = DescribeQuorumResponse::default();
    let status = shard.quorum_status().await;
    for t in &d.topics {
        let mut td = TopicData::default();
        td.topic_name = t.topic_name.clone();
        for p in &t.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition_index;
            match &status {
                _ if t.topic_name.as_str() != METADATA_TOPIC || p.partition_index != 0 => {
                    pd.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                }
                Err((code, why)) => {
                    pd.error_code = *code;
                    pd.error_message = Some(s(why));
                }
                Ok(q) => {
                    pd.leader_id = BrokerId(q.leader as i32);
                    pd.leader_epoch = q.term as i32;
                    pd.high_watermark = q.high_watermark as i64;
                    pd.current_voters = q
                        .voters
                        .iter()
                        .map(|&(id, end)| {
                            let mut v = ReplicaState::default();
                            v.replica_id = BrokerId(id as i32);
                            v.log_end_offset = end as i64;
                            v.last_fetch_timestamp = -1;
                            v.last_caught_up_timestamp = -1;
                            v
                        })
                        .collect();
                }
            }
            td.partitions.push(pd);
        }
        r.topics.push(td);
    }
    if let Err((code, why)) = &status {
        if *code == errors::INVALID_REQUEST {
            r.error_code = *code;
            r.error_message = Some(s(why));
        }
    }
    r
}
