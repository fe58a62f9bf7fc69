//! DescribeProducers (KIP-664): the idempotent producers each partition remembers, asked of
//! the partitions' owner cores, with the first offset of each producer's open transaction
//! (-1: none). Coordinator epochs are not tracked (one coordinator per transactional id, never
//! moved): -1.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::*;

use super::*;
use crate::broker::errors;
use crate::broker::shard::{DescribeProducersCall, Shard};

pub(super) async fn describe_producers(
    shard: &Rc<Shard>,
    d: &DescribeProducersRequest,
) -> DescribeProducersResponse {
    let meta = shard.metadata();
    let mut resp = DescribeProducersResponse::default();
    let mut by_owner: ByOwner<(String, i32)> = BTreeMap::new();
    for (ti, t) in d.topics.iter().enumerate() {
        let name = t.name.to_string();
        let mut tr = TopicResponse::default();
        tr.name = t.name.clone();
        for (pi, &p) in t.partition_indexes.iter().enumerate() {
            let mut pr = PartitionResponse::default();
            pr.partition_index = p;
            match super::route(shard, &meta, &name, p, -1) {
                Err(code) => pr.error_code = code,
                Ok(owner) => super::plan(&mut by_owner, owner, (name.clone(), p), (ti, pi)),
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    for ((ti, pi), r) in super::fan_out(shard, by_owner, DescribeProducersCall).await {
        let pr = &mut resp.topics[ti].partitions[pi];
        match r.unwrap_or(Err(errors::NOT_LEADER_OR_FOLLOWER)) {
            Ok(producers) => {
                pr.active_producers = producers
                    .into_iter()
                    .map(|p| {
                        let mut s = ProducerState::default();
                        s.producer_id = ProducerId(p.producer_id);
                        s.producer_epoch = i32::from(p.epoch);
                        s.last_sequence = p.last_sequence;
                        s.last_timestamp = p.last_timestamp;
                        s.coordinator_epoch = -1;
                        s.current_txn_start_offset = p.txn_start_offset;
                        s
                    })
                    .collect()
            }
            Err(code) => pr.error_code = code,
        }
    }
    resp
}
