//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455) on a node that keeps
//! one replica of each partition and never moves partitions between its cores.
//!
//! A partition's only replica is the broker that leads it in Metadata: the core owning it
//! with `listeners.per.core` (node id = core), else node 0. Reassigning a partition to
//! exactly that replica is already done (NONE, nothing changes); any other list is refused
//! per partition with a message saying why, and a cancellation (a null replica list) finds
//! no reassignment in progress. So no reassignment is ever in progress, and the list is
//! always empty.
//!
//! Moving a partition to another core's broker id is refused, not done: the old core would
//! have to close the log (answering its parked fetches and in-flight appends) before the new
//! one opens it, with the metadata switch between the two made crash-safe — a protocol weir
//! does not have.

use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::*;

use super::*;
use crate::broker::errors;
use crate::broker::shard::Shard;

pub(super) fn alter_partition_reassignments(
    shard: &Rc<Shard>,
    version: i16,
    req: &AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let meta = shard.metadata();
    let brokers = shard.brokers(0).len() as i32;
    let mut r = AlterPartitionReassignmentsResponse::default();
    if version >= 1 {
        r.allow_replication_factor_change = req.allow_replication_factor_change;
    }
    for t in &req.topics {
        let mut tr = ReassignableTopicResponse::default();
        tr.name = t.name.clone();
        for p in &t.partitions {
            let mut pr = ReassignablePartitionResponse::default();
            pr.partition_index = p.partition_index;
            let (code, message) = match meta.owner(t.name.as_str(), p.partition_index) {
                None => (
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    "the topic or partition does not exist".to_string(),
                ),
                Some(owner) => check(
                    p.replicas.as_deref(),
                    shard.node_of(owner),
                    brokers,
                    version >= 1 && !req.allow_replication_factor_change,
                ),
            };
            pr.error_code = code;
            pr.error_message = (code != errors::NONE).then(|| s(&message));
            tr.partitions.push(pr);
        }
        r.responses.push(tr);
    }
    r
}

/// The answer for one partition whose only replica is `leader`, among brokers
/// `0..brokers`. `strict_rf`: v1 without `allow_replication_factor_change` (KIP-860).
fn check(
    replicas: Option<&[BrokerId]>,
    leader: i32,
    brokers: i32,
    strict_rf: bool,
) -> (i16, String) {
    let Some(replicas) = replicas else {
        return (
            errors::NO_REASSIGNMENT_IN_PROGRESS,
            "no reassignment is in progress for this partition".into(),
        );
    };
    let ids: Vec<i32> = replicas.iter().map(|b| b.0).collect();
    if ids.is_empty() {
        return (
            errors::INVALID_REPLICA_ASSIGNMENT,
            "the replica list is empty".into(),
        );
    }
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != ids.len() {
        return (
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!("the replica list {ids:?} names a broker twice"),
        );
    }
    if let Some(b) = ids.iter().find(|&&b| b < 0 || b >= brokers) {
        return (
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!(
                "broker {b} does not exist (the brokers are 0..{})",
                brokers - 1
            ),
        );
    }
    if ids.len() != 1 {
        let why = if strict_rf {
            "the replication factor would change from 1 and allow_replication_factor_change is false"
        } else {
            "weir keeps one replica of each partition"
        };
        return (
            errors::INVALID_REPLICATION_FACTOR,
            format!("{} replicas {ids:?}: {why}", ids.len()),
        );
    }
    if ids[0] == leader {
        return (errors::NONE, String::new());
    }
    (
        errors::INVALID_REPLICA_ASSIGNMENT,
        format!(
            "the partition's replica is broker {leader}; weir does not move partitions between \
             brokers (its cores)"
        ),
    )
}

/// No reassignment is ever in progress: the list is empty, for every topic asked (Kafka
/// also leaves out topics it does not know).
pub(super) fn list_partition_reassignments(
    _req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    ListPartitionReassignmentsResponse::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[i32]) -> Vec<BrokerId> {
        v.iter().map(|&b| BrokerId(b)).collect()
    }

    #[test]
    fn only_the_current_replica_is_accepted() {
        assert_eq!(check(Some(&ids(&[1])), 1, 2, false).0, errors::NONE);
        assert_eq!(
            check(Some(&ids(&[0])), 1, 2, false).0,
            errors::INVALID_REPLICA_ASSIGNMENT
        );
        assert_eq!(
            check(Some(&ids(&[5])), 0, 2, false).0,
            errors::INVALID_REPLICA_ASSIGNMENT
        );
        assert_eq!(
            check(Some(&ids(&[])), 0, 2, false).0,
            errors::INVALID_REPLICA_ASSIGNMENT
        );
        assert_eq!(
            check(Some(&ids(&[0, 0])), 0, 2, false).0,
            errors::INVALID_REPLICA_ASSIGNMENT
        );
        assert_eq!(
            check(Some(&ids(&[0, 1])), 0, 2, true).0,
            errors::INVALID_REPLICATION_FACTOR
        );
        assert_eq!(
            check(None, 0, 2, false).0,
            errors::NO_REASSIGNMENT_IN_PROGRESS
        );
    }
}
