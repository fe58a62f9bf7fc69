//! Produce and InitProducerId: partitions grouped by owning core, one call per owner.

use crate::broker::errors;
use crate::broker::shard::{ProduceCall, ProducePart, Shard};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use std::collections::BTreeMap;
use std::rc::Rc;
use weir::metadata::valid_topic_name;

use super::*;

// ---- Produce ----

pub(super) async fn produce(
    shard: &Rc<Shard>,
    req: &Request,
    p: &ProduceRequest,
    session: &weir::acl::Session,
    listener: usize,
) -> Result<Response, ProtocolError> {
    let acks = p.acks;
    let valid_acks = matches!(acks, -1..=1);
    if shard.config.auto_create_topics && valid_acks {
        let meta = shard.metadata();
        let missing: Vec<String> = p
            .topic_data
            .iter()
            .filter(|_| req.version < 13) // an id names a topic that exists
            .map(|t| t.name.to_string())
            .filter(|n| !meta.topics.contains_key(n) && valid_topic_name(n))
            .filter(|n| super::authz::may_create(shard, session, n))
            .collect();
        auto_create(shard, missing).await;
    }
    let meta = shard.metadata();
    // ACLs: a transactional produce needs WRITE on its transactional id (Kafka's rule).
    let txn_denied = p.transactional_id.as_ref().is_some_and(|t| {
        !super::authz::transactional_id(shard, session, weir::acl::Operation::Write, t.as_str())
    });
    // Results in request order; partitions grouped by owning core.
    let mut results: Vec<Vec<(i32, crate::broker::shard::ProduceResult)>> = Vec::new();
    let mut names: Vec<String> = Vec::with_capacity(p.topic_data.len());
    let mut by_owner: ByOwner<ProducePart> = BTreeMap::new();
    for (ti, t) in p.topic_data.iter().enumerate() {
        // v13+ names the topic by id (KIP-516); an unknown id is UNKNOWN_TOPIC_ID.
        let (name, unknown) = if req.version >= 13 {
            match shard.topic_name(&t.topic_id) {
                Some(n) => (n, errors::NONE),
                None => (String::new(), errors::UNKNOWN_TOPIC_ID),
            }
        } else {
            (t.name.to_string(), errors::NONE)
        };
        // ACLs: WRITE on the topic, or nothing of it is written.
        let denied = unknown == errors::NONE
            && !super::authz::topic(shard, session, weir::acl::Operation::Write, &name);
        let mut row = Vec::with_capacity(t.partition_data.len());
        for (pi, pd) in t.partition_data.iter().enumerate() {
            let mut res = crate::broker::shard::ProduceResult::error(errors::NONE);
            if !valid_acks {
                res.error = errors::INVALID_REQUIRED_ACKS;
            } else if txn_denied {
                res.error = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
            } else if unknown != errors::NONE {
                res.error = unknown;
            } else if denied {
                res.error = errors::TOPIC_AUTHORIZATION_FAILED;
            } else if super::is_internal_topic(&name) {
                // Kafka's answer: only the coordinators write the internal topics.
                res.error = errors::INVALID_TOPIC_EXCEPTION;
            } else {
                match super::route(shard, &meta, &name, pd.index, -1) {
                    Err(code) => res.error = code,
                    Ok(owner) => {
                        let part = ProducePart {
                            topic: name.clone(),
                            partition: pd.index,
                            records: pd.records.clone().unwrap_or_default(),
                        };
                        super::plan(&mut by_owner, owner, part, (ti, pi));
                    }
                }
            }
            row.push((pd.index, res));
        }
        results.push(row);
        names.push(name);
    }
    // A transactional produce writes only to partitions its coordinator has in the open
    // transaction (KIP-890's verification): a record that no marker would ever close would
    // hold the partition's last stable offset forever (a "hanging transaction").
    if let Some(txn_id) = p.transactional_id.as_ref().filter(|_| !by_owner.is_empty()) {
        let refused = super::txn::verify_produce(shard, txn_id.as_str(), &by_owner).await;
        if refused != errors::NONE {
            for (_, (_, slots)) in std::mem::take(&mut by_owner) {
                for (ti, pi) in slots {
                    results[ti][pi].1.error = refused;
                }
            }
        }
    }
    // Every group starts now (remote ones are sent in order); local work runs in place.
    let make = |parts| ProduceCall { acks, parts };
    for ((ti, pi), r) in super::fan_out(shard, by_owner, make).await {
        match r {
            Some(r) => results[ti][pi].1 = r,
            None => results[ti][pi].1.error = errors::NOT_LEADER_OR_FOLLOWER,
        }
    }
    if acks == 0 {
        return Ok(None);
    }
    let mut resp = ProduceResponse::default();
    // KIP-951 (v10+): a NOT_LEADER_OR_FOLLOWER answer names the leader this broker knows,
    // with its endpoint, so the client moves there without asking for metadata first.
    let hints = req.version >= 10;
    let mut meta = None;
    let mut hinted = std::collections::BTreeSet::new();
    for ((t, row), name) in p.topic_data.iter().zip(results).zip(&names) {
        let mut tr = TopicProduceResponse::default();
        tr.name = t.name.clone();
        tr.topic_id = t.topic_id;
        for (index, r) in row {
            let mut pr = PartitionProduceResponse::default();
            pr.index = index;
            pr.error_code = r.error;
            pr.base_offset = r.base_offset;
            pr.log_append_time_ms = r.log_append_time_ms;
            pr.log_start_offset = r.log_start_offset;
            pr.error_message = r.error_message.as_deref().map(s);
            if hints && r.error == errors::NOT_LEADER_OR_FOLLOWER {
                let meta = meta.get_or_insert_with(|| shard.metadata());
                if let Some((node, epoch)) = shard.leader_hint(meta, name, index, r.raft_leader) {
                    pr.current_leader.leader_id = BrokerId(node);
                    pr.current_leader.leader_epoch = epoch;
                    hinted.insert(node);
                }
            }
            if !r.record_errors.is_empty() {
                pr.record_errors = r
                    .record_errors
                    .iter()
                    .map(|(i, why)| {
                        let mut e = produce_response::BatchIndexAndErrorMessage::default();
                        e.batch_index = *i;
                        e.batch_index_error_message = Some(s(why));
                        e
                    })
                    .collect();
            }
            tr.partition_responses.push(pr);
        }
        resp.responses.push(tr);
    }
    resp.node_endpoints = shard
        .endpoints_of(listener, &hinted)
        .into_iter()
        .map(|(id, host, port)| {
            let mut e = produce_response::NodeEndpoint::default();
            e.node_id = BrokerId(id);
            e.host = s(&host);
            e.port = port;
            e
        })
        .collect();
    one(req, &resp)
}

/// Produce v0-2 (message format v0/v1, which KIP-896 removed): advertised as Kafka 4.0 does,
/// because librdkafka decides whether the broker supports compression by looking for Produce
/// v0 (KAFKA-18659), and answered — not closed — with UNSUPPORTED_VERSION for every
/// partition, in that version's response layout (hand-written: the codec starts at v3):
/// `[name:string [index:i32 error:i16 base_offset:i64 log_append_time:i64 (v2)]]
/// throttle_time_ms:i32 (v1+)`. acks=0 gets no answer, as for any produce.
pub(super) fn legacy_produce(req: &Request, p: &LegacyProduce) -> Response {
    use bytes::BufMut;
    tracing::debug!(version = req.version, client = %req.client_id,
        "Produce v0-2 refused with UNSUPPORTED_VERSION (message format v0/v1)");
    if p.acks == 0 {
        return None;
    }
    let mut buf = bytes::BytesMut::new();
    buf.put_i32(0); // size, patched below
    buf.put_i32(req.correlation_id);
    buf.put_i32(p.topics.len() as i32);
    for (name, parts) in &p.topics {
        buf.put_i16(name.len() as i16);
        buf.put_slice(name.as_bytes());
        buf.put_i32(parts.len() as i32);
        for index in parts {
            buf.put_i32(*index);
            buf.put_i16(errors::UNSUPPORTED_VERSION);
            buf.put_i64(-1);
            if req.version >= 2 {
                buf.put_i64(-1);
            }
        }
    }
    if req.version >= 1 {
        buf.put_i32(0);
    }
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Some(vec![buf.freeze()])
}

// ---- InitProducerId ----

/// Idempotent producers (the default of kafka-python 3 and of Java clients) ask for a
/// producer id first: weir hands out ids unique across cores, brokers and restarts, and the owner of
/// each partition checks their sequence numbers (`ProducerState`). A transactional id's
/// InitProducerId goes to its coordinator instead (`kafka::txn`).
pub(super) fn init_producer_id(
    shard: &Rc<Shard>,
    i: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    if i.producer_id.0 >= 0 && i.producer_epoch >= 0 {
        r.producer_id = i.producer_id;
        r.producer_epoch = i.producer_epoch.wrapping_add(1).max(0);
    } else {
        r.producer_id = ProducerId(shard.new_producer_id());
        r.producer_epoch = 0;
    }
    r
}
