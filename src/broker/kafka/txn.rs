//! The transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn and EndTxn go to the core of the transactional id (`Shard::txn_core`: its
//! bucket's core, in a cluster the core holding this broker's replica of its
//! `__transaction_state` partition), whose coordinator (`shard::txn`) serves them; TxnOffsetCommit goes to the group's core (its
//! offsets stay pending until the transaction's marker); DescribeTransactions and
//! ListTransactions ask the coordinators.

use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::groups::call as group_call;
use super::Listener;
use crate::broker::errors;
use crate::broker::group::coordinator::CommitPart;
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::peer::call::{PeerAnswer, PeerCall};
use crate::broker::shard::{ProducePart, Shard, TxnCall, TxnReq, TxnResp};
use crate::broker::txn::TxnMeta;

/// Clients older than KIP-588 know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.
fn fenced_for(code: i16, version: i16, fenced_since: i16) -> i16 {
    if code == errors::PRODUCER_FENCED && version < fenced_since {
        errors::INVALID_PRODUCER_EPOCH
    } else {
        code
    }
}

async fn call(shard: &Rc<Shard>, txn_id: &str, req: TxnReq) -> Option<TxnResp> {
    shard.ask(shard.txn_core(txn_id), TxnCall(req)).await
}

/// Checks a transactional produce against its coordinator: every partition must be in the
/// producer's open transaction, with its producer id and epoch (read from the first batch).
/// NONE, or the code every partition of the request gets: INVALID_PRODUCER_EPOCH for another
/// epoch (Produce predates PRODUCER_FENCED in librdkafka's handling: 47 is fatal there),
/// INVALID_TXN_STATE otherwise.
pub(super) async fn verify_produce(
    shard: &Rc<Shard>,
    txn_id: &str,
    by_owner: &super::ByOwner<ProducePart>,
) -> i16 {
    let parts: Vec<(String, i32)> = by_owner
        .values()
        .flat_map(|(parts, _)| parts.iter().map(|p| (p.topic.clone(), p.partition)))
        .collect();
    let first = by_owner
        .values()
        .flat_map(|(parts, _)| parts.iter())
        .find_map(|p| weir_storage::batch::BatchHeader::parse(&p.records));
    let Some(h) = first else {
        return errors::NONE; // no records: the owner answers CORRUPT_MESSAGE
    };
    let (producer_id, epoch) = (h.producer_id.get(), h.producer_epoch.get());
    let txn_id = txn_id.to_owned();
    // In a cluster the coordinator may be on another broker: asked there (a `PeerCall`).
    let here = shard.metadata().local_broker;
    let coordinator = match here {
        Some(_) => shard.txn_coordinator_broker(&txn_id).await,
        None => None,
    };
    let code = match coordinator {
        None if here.is_some() => None, // no coordinator known yet: retried
        Some(b) if Some(b) != here => {
            let call = PeerCall::Verify {
                txn_id,
                producer_id,
                epoch,
                parts,
            };
            match shard.peer_call(b, call).await {
                Some(PeerAnswer::Code(c)) => Some(c),
                _ => None,
            }
        }
        _ => {
            let req = TxnReq::Verify {
                txn_id: txn_id.clone(),
                producer_id,
                epoch,
                parts,
            };
            match call(shard, &txn_id, req).await {
                Some(TxnResp::Code(c)) => Some(c),
                _ => None,
            }
        }
    };
    match code {
        Some(errors::PRODUCER_FENCED) => errors::INVALID_PRODUCER_EPOCH,
        // The coordinator could not be asked (it moved, is loading, is out of reach): the
        // produce is answered with an error clients retry (Kafka's verification does the
        // same; librdkafka fails the batch on a coordinator error code in a Produce).
        Some(
            errors::NOT_COORDINATOR
            | errors::COORDINATOR_LOAD_IN_PROGRESS
            | errors::COORDINATOR_NOT_AVAILABLE,
        )
        | None => errors::NOT_ENOUGH_REPLICAS,
        Some(c) => c,
    }
}

/// InitProducerId with a transactional id.
pub(super) async fn init_transactional(
    shard: &Rc<Shard>,
    version: i16,
    txn_id: &str,
    i: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    let req = TxnReq::Init {
        txn_id: txn_id.to_owned(),
        timeout_ms: i.transaction_timeout_ms,
        producer_id: i.producer_id.0,
        epoch: i.producer_epoch,
    };
    let (error, producer_id, epoch) = match call(shard, txn_id, req).await {
        Some(TxnResp::Init {
            error,
            producer_id,
            epoch,
        }) => (error, producer_id, epoch),
        _ => (errors::COORDINATOR_NOT_AVAILABLE, -1, -1),
    };
    r.error_code = fenced_for(error, version, 4);
    r.producer_id = ProducerId(producer_id);
    r.producer_epoch = epoch;
    r
}

pub(super) async fn add_partitions(
    shard: &Rc<Shard>,
    version: i16,
    a: &AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let txn_id = a.v3_and_below_transactional_id.to_string();
    let parts: Vec<(String, i32)> = a
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), *p)))
        .collect();
    let n = parts.len();
    let req = TxnReq::AddPartitions {
        txn_id: txn_id.clone(),
        producer_id: a.v3_and_below_producer_id.0,
        epoch: a.v3_and_below_producer_epoch,
        parts,
    };
    let codes = match call(shard, &txn_id, req).await {
        Some(TxnResp::Codes(c)) if c.len() == n => c,
        _ => vec![errors::COORDINATOR_NOT_AVAILABLE; n],
    };
    let mut codes = codes.into_iter().map(|c| fenced_for(c, version, 2));
    let mut r = AddPartitionsToTxnResponse::default();
    r.results_by_topic_v3_and_below = a
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let mut tr = AddPartitionsToTxnTopicResult::default();
            tr.name = t.name.clone();
            tr.results_by_partition = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = *p;
                    pr.partition_error_code = codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR);
                    pr
                })
                .collect();
            tr
        })
        .collect();
    r
}

pub(super) async fn add_offsets(
    shard: &Rc<Shard>,
    version: i16,
    a: &AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let txn_id = a.transactional_id.to_string();
    let req = TxnReq::AddOffsets {
        txn_id: txn_id.clone(),
        producer_id: a.producer_id.0,
        epoch: a.producer_epoch,
        group: a.group_id.to_string(),
    };
    let mut r = AddOffsetsToTxnResponse::default();
    r.error_code = match call(shard, &txn_id, req).await {
        Some(TxnResp::Code(c)) => fenced_for(c, version, 2),
        _ => errors::COORDINATOR_NOT_AVAILABLE,
    };
    r
}

pub(super) async fn end_txn(shard: &Rc<Shard>, version: i16, e: &EndTxnRequest) -> EndTxnResponse {
    let txn_id = e.transactional_id.to_string();
    let req = TxnReq::End {
        txn_id: txn_id.clone(),
        producer_id: e.producer_id.0,
        epoch: e.producer_epoch,
        commit: e.committed,
    };
    let mut r = EndTxnResponse::default();
    r.error_code = match call(shard, &txn_id, req).await {
        Some(TxnResp::Code(c)) => fenced_for(c, version, 2),
        _ => errors::COORDINATOR_NOT_AVAILABLE,
    };
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    r
}

pub(super) async fn txn_offset_commit(
    shard: &Rc<Shard>,
    t: &TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let group = t.group_id.to_string();
    let parts: Vec<CommitPart> = t
        .topics
        .iter()
        .flat_map(|tp| {
            tp.partitions.iter().map(|p| CommitPart {
                topic: tp.name.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
            })
        })
        .collect();
    let n = parts.len();
    let req = GroupReq::TxnCommit {
        group: group.clone(),
        producer_id: t.producer_id.0,
        generation: t.generation_id,
        member: t.member_id.to_string(),
        instance: t.group_instance_id.as_ref().map(|s| s.to_string()),
        parts,
    };
    let codes = match group_call(shard, &group, req).await {
        GroupResp::Commit(c) if c.len() == n => c,
        GroupResp::Code(c) => vec![c; n],
        _ => vec![errors::UNKNOWN_SERVER_ERROR; n],
    };
    let mut codes = codes.into_iter();
    let mut r = TxnOffsetCommitResponse::default();
    r.topics = t
        .topics
        .iter()
        .map(|tp| {
            let mut tr = TxnOffsetCommitResponseTopic::default();
            tr.name = tp.name.clone();
            tr.partitions = tp
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = TxnOffsetCommitResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR);
                    pr
                })
                .collect();
            tr
        })
        .collect();
    r
}

/// Every transactional id of every coordinator, with its state.
async fn all_states(shard: &Rc<Shard>) -> Vec<(String, TxnMeta)> {
    states_of(shard, 0..shard.cores).await
}

async fn states_of(shard: &Rc<Shard>, cores: std::ops::Range<usize>) -> Vec<(String, TxnMeta)> {
    let mut out = Vec::new();
    for core in cores {
        if let Some(TxnResp::Described(states)) = shard.ask(core, TxnCall(TxnReq::Describe)).await {
            out.extend(states);
        }
    }
    out
}

pub(super) async fn describe_transactions(
    shard: &Rc<Shard>,
    d: &DescribeTransactionsRequest,
    may_describe: impl Fn(&str) -> bool,
) -> DescribeTransactionsResponse {
    let states = all_states(shard).await;
    let mut r = DescribeTransactionsResponse::default();
    r.transaction_states = d
        .transactional_ids
        .iter()
        .map(|id| {
            let mut s = TransactionState::default();
            s.transactional_id = id.clone();
            if !may_describe(id.as_str()) {
                s.error_code = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
                return s;
            }
            match states.iter().find(|(k, _)| k.as_str() == id.as_str()) {
                None => s.error_code = errors::TRANSACTIONAL_ID_NOT_FOUND,
                Some((_, m)) => {
                    s.transaction_state = StrBytes::from_static_str(m.state.name());
                    s.transaction_timeout_ms = m.timeout_ms;
                    s.transaction_start_time_ms = m.start_ms;
                    s.producer_id = ProducerId(m.producer_id);
                    s.producer_epoch = m.epoch;
                    let mut topics: Vec<TopicData> = Vec::new();
                    for (t, p) in &m.partitions {
                        match topics.last_mut() {
                            Some(last) if last.topic.as_str() == t => last.partitions.push(*p),
                            _ => {
                                let mut td = TopicData::default();
                                td.topic = TopicName(StrBytes::from_string(t.clone()));
                                td.partitions = vec![*p];
                                topics.push(td);
                            }
                        }
                    }
                    s.topics = topics;
                }
            }
            s
        })
        .collect();
    r
}

/// On the bootstrap port: every transaction of the broker. On a core's own port (that core is
/// advertised as a broker of its own): only those that core coordinates, as a Kafka broker
/// lists only its own — `kafka-transactions list` asks every broker and concatenates the
/// answers, so listing all of them everywhere would show each once per core.
pub(super) async fn list_transactions(
    shard: &Rc<Shard>,
    l: &ListTransactionsRequest,
    via: Listener,
    may_describe: impl Fn(&str) -> bool,
) -> ListTransactionsResponse {
    const KNOWN: [&str; 6] = [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
    ];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut r = ListTransactionsResponse::default();
    r.unknown_state_filters = l
        .state_filters
        .iter()
        .filter(|f| !KNOWN.contains(&f.as_str()))
        .cloned()
        .collect();
    let cores = match via {
        Listener::Core => shard.id..shard.id + 1,
        Listener::Bootstrap => 0..shard.cores,
    };
    r.transaction_states = states_of(shard, cores)
        .await
        .into_iter()
        .filter(|(id, m)| {
            may_describe(id)
                && (l.state_filters.is_empty()
                    || l.state_filters.iter().any(|f| f.as_str() == m.state.name()))
                && (l.producer_id_filters.is_empty()
                    || l.producer_id_filters.iter().any(|p| p.0 == m.producer_id))
                && (l.duration_filter < 0
                    || (m.start_ms >= 0 && now - m.start_ms >= l.duration_filter))
        })
        .map(|(id, m)| {
            let mut s = ListedState::default();
            s.transactional_id = TransactionalId(StrBytes::from_string(id));
            s.producer_id = ProducerId(m.producer_id);
            s.transaction_state = StrBytes::from_static_str(m.state.name());
            s
        })
        .collect();
    r
}
