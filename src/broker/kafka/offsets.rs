//! ListOffsets and DeleteRecords, answered by the partitions' owner cores.

use crate::broker::errors;
use crate::broker::shard::{DeleteRecordsCall, ListOffsetsCall, ListPart, Shard};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::*;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::*;

// ---- ListOffsets ----

pub(super) async fn list_offsets(
    shard: &Rc<Shard>,
    version: i16,
    l: &ListOffsetsRequest,
) -> ListOffsetsResponse {
    let meta = shard.metadata();
    let mut resp = ListOffsetsResponse::default();
    let mut by_owner: ByOwner<ListPart> = BTreeMap::new();
    for (ti, t) in l.topics.iter().enumerate() {
        let name = t.name.to_string();
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.offset = -1;
            pr.timestamp = -1;
            pr.leader_epoch = -1;
            let current = p.current_leader_epoch;
            match super::route(shard, &meta, &name, p.partition_index, current) {
                Err(code) => pr.error_code = code,
                Ok(owner) => {
                    let part = ListPart {
                        topic: name.clone(),
                        partition: p.partition_index,
                        timestamp: p.timestamp,
                        committed: l.isolation_level == 1,
                    };
                    super::plan(&mut by_owner, owner, part, (ti, pi));
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    for ((ti, pi), r) in fan_out(shard, by_owner, ListOffsetsCall).await {
        let pr = &mut resp.topics[ti].partitions[pi];
        match r {
            Some(r) => {
                pr.error_code = r.error;
                pr.offset = r.offset;
                pr.timestamp = r.timestamp;
                // v4+ only: the codec refuses to encode a field its version lacks.
                if version >= 4 {
                    pr.leader_epoch = r.leader_epoch;
                }
            }
            // The owner could not answer (shutting down): a retriable error, not NONE
            // with -1 offsets.
            None => pr.error_code = errors::NOT_LEADER_OR_FOLLOWER,
        }
    }
    if version == 0 {
        old_style_offsets(l, &mut resp);
    }
    resp
}

/// Version 0 (before KIP-79; Burrow 1.2, sarama before Kafka 0.10.1) answers a list of up
/// to `max_num_offsets` offsets instead of one offset and its timestamp. weir lists the one
/// offset a v1 request would get: the log end for LATEST (-1), the log start for EARLIEST
/// (-2), else the first offset whose record is at or after the timestamp; none if there is
/// none or the client asked for none. (Kafka 3.x listed, for a timestamp, the base offsets of
/// the segments older than it, and for LATEST the log end followed by them; every client
/// seen asks for one offset of LATEST or EARLIEST.)
fn old_style_offsets(l: &ListOffsetsRequest, resp: &mut ListOffsetsResponse) {
    for (t, tr) in l.topics.iter().zip(resp.topics.iter_mut()) {
        for (p, pr) in t.partitions.iter().zip(tr.partitions.iter_mut()) {
            if pr.error_code == errors::NONE && pr.offset >= 0 && p.max_num_offsets > 0 {
                pr.old_style_offsets = vec![pr.offset];
            }
        }
    }
}

// ---- DeleteRecords, DescribeCluster ----

pub(super) async fn delete_records(
    shard: &Rc<Shard>,
    d: &DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    use kafka_protocol::messages::delete_records_response::{
        DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
    };
    let meta = shard.metadata();
    let mut resp = DeleteRecordsResponse::default();
    let mut by_owner: ByOwner<crate::broker::shard::DeletePart> = BTreeMap::new();
    for (ti, t) in d.topics.iter().enumerate() {
        let name = t.name.to_string();
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            match super::route(shard, &meta, &name, p.partition_index, -1) {
                Err(code) => pr.error_code = code,
                Ok(owner) => {
                    let part = crate::broker::shard::DeletePart {
                        topic: name.clone(),
                        partition: p.partition_index,
                        offset: p.offset,
                    };
                    super::plan(&mut by_owner, owner, part, (ti, pi));
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    for ((ti, pi), r) in fan_out(shard, by_owner, DeleteRecordsCall).await {
        let pr = &mut resp.topics[ti].partitions[pi];
        match r {
            Some((error, low)) => {
                pr.error_code = error;
                pr.low_watermark = low;
            }
            None => pr.error_code = errors::NOT_LEADER_OR_FOLLOWER,
        }
    }
    resp
}
