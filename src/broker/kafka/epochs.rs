//! Leader epochs on the wire (KIP-320, docs/replication.md "Leader epochs on the wire"):
//! OffsetForLeaderEpoch, and the fencing of requests that name the leader epoch their client
//! knows (Fetch v9+, ListOffsets v4+, OffsetForLeaderEpoch).

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use weir::acl::{Operation, Session};
use weir::metadata::Metadata;

use super::ByOwner;
use crate::broker::errors;
use crate::broker::shard::{EpochEndsCall, EpochPart, Shard};

/// A client's `current_leader_epoch` against this broker's epoch of the partition (the one
/// its Metadata answers name): FENCED_LEADER_EPOCH if the client's is older (its metadata is
/// stale), UNKNOWN_LEADER_EPOCH if newer (this broker's is), NONE when they agree, when the
/// client sent none (-1) or when the partition is unknown (answered as such elsewhere).
pub(super) fn fence(meta: &Metadata, topic: &str, partition: i32, current: i32) -> i16 {
    match meta.partition_epoch(topic, partition) {
        Some(epoch) if current >= 0 && current < epoch => errors::FENCED_LEADER_EPOCH,
        Some(epoch) if current > epoch => errors::UNKNOWN_LEADER_EPOCH,
        _ => errors::NONE,
    }
}

/// OffsetForLeaderEpoch v2-4: for each partition, the largest epoch at most the one asked and
/// where it ends in the leader's log. A consumer whose position lies past that end has read
/// records the log no longer holds (which Raft's committed reads never let happen here).
pub(super) async fn offset_for_leader_epoch(
    shard: &Rc<Shard>,
    session: &Session,
    r: &OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let meta = shard.metadata();
    let mut resp = OffsetForLeaderEpochResponse::default();
    let mut by_owner: ByOwner<EpochPart> = BTreeMap::new();
    for (ti, t) in r.topics.iter().enumerate() {
        let name = t.topic.to_string();
        let allowed = super::authz::topic(shard, session, Operation::Describe, &name);
        let mut tr = OffsetForLeaderTopicResult::default();
        tr.topic = t.topic.clone();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = EpochEndOffset::default();
            pr.partition = p.partition;
            pr.leader_epoch = -1;
            pr.end_offset = -1;
            match super::route(shard, &meta, &name, p.partition, p.current_leader_epoch) {
                _ if !allowed => pr.error_code = errors::TOPIC_AUTHORIZATION_FAILED,
                Err(code) => pr.error_code = code,
                Ok(owner) => {
                    let part = EpochPart {
                        topic: name.clone(),
                        partition: p.partition,
                        epoch: p.leader_epoch,
                    };
                    super::plan(&mut by_owner, owner, part, (ti, pi));
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    for ((ti, pi), a) in super::fan_out(shard, by_owner, EpochEndsCall).await {
        let pr = &mut resp.topics[ti].partitions[pi];
        match a {
            Some(a) => {
                pr.error_code = a.error;
                pr.leader_epoch = a.epoch;
                pr.end_offset = a.end_offset;
            }
            // The owner could not answer (shutting down): retriable.
            None => pr.error_code = errors::NOT_LEADER_OR_FOLLOWER,
        }
    }
    resp
}
