//! The Kafka wire protocol: which APIs and versions weir speaks, request decoding, and one
//! handler per API. Handlers run on the core that owns the connection; partition work is
//! sent to the owning cores through [`Shard::call`].
//!
//! Codec: the `kafka-protocol` crate, decoding from the request's `Bytes` (so produce
//! records are zero-copy slices of the request). Fetch responses are encoded by
//! [`crate::broker::kafka::fetch_response`] so that record chunks go to the socket without a copy.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tracing::debug;

mod acls;
mod authz;
mod cluster;
mod configs;
mod consumer_groups;
mod describe;
mod epochs;
mod fetch;
mod fetch_budget;
mod fetch_response;
mod group_offsets;
mod groups;
mod metadata;
mod offsets;
mod produce;
mod producers;
mod reassign;
mod topics;
mod txn;
mod users;

use self::cluster::*;
use self::configs::*;
use self::fetch::*;
use self::metadata::*;
use self::offsets::*;
use self::produce::*;
use self::topics::*;
use crate::broker::errors;
use crate::broker::shard::{CoreCall, Shard};
use groups as group;

pub use self::authz::allowed;
pub use self::fetch::gather_fetch;

pub use weir::protocol::wire::{
    decode_request, perr, Body, LegacyProduce, ProtocolError, Request, SUPPORTED,
};

/// Partition work by owning core (one call each): the parts, and where each result goes in the
/// response (topic index, partition index).
type ByOwner<P> = BTreeMap<usize, (Vec<P>, Vec<(usize, usize)>)>;

/// Where one partition of a per-partition request goes, the planning half of `fan_out`: the
/// core here that answers for it, or the error it is answered with at once — the client's
/// `current` leader epoch fenced (`epochs::fence`; -1: none sent), NOT_LEADER_OR_FOLLOWER
/// for a partition another broker leads, UNKNOWN_TOPIC_OR_PARTITION for one not in the
/// metadata. What comes before it (topic ids to names, authorization, a request-wide error)
/// differs per request and stays in its handler.
fn route(
    shard: &Shard,
    meta: &weir::metadata::Metadata,
    topic: &str,
    partition: i32,
    current: i32,
) -> Result<usize, i16> {
    let fenced = epochs::fence(meta, topic, partition, current);
    if fenced != errors::NONE {
        return Err(fenced);
    }
    match owner(shard, meta, topic, partition) {
        Some(core) => Ok(core),
        None if meta.placed_elsewhere(topic, partition) => Err(errors::NOT_LEADER_OR_FOLLOWER),
        None => Err(errors::UNKNOWN_TOPIC_OR_PARTITION),
    }
}

/// Adds `part` to `owner`'s call, its answer going to `slot` (topic index, partition index).
fn plan<P>(by_owner: &mut ByOwner<P>, owner: usize, part: P, slot: (usize, usize)) {
    let g = by_owner.entry(owner).or_default();
    g.0.push(part);
    g.1.push(slot);
}

/// Sends each owner core its parts as one call (`make`), all at once and started in core
/// order, and hands back every slot (topic index, partition index) with its part's answer:
/// `None` for each slot of an owner that could not answer (stopping), or that answered for
/// another number of parts. The one fan-out of the per-partition requests.
async fn fan_out<P: 'static, R: 'static, C: CoreCall<Reply = Vec<R>> + 'static>(
    shard: &Rc<Shard>,
    by_owner: ByOwner<P>,
    make: impl Fn(Vec<P>) -> C,
) -> Vec<((usize, usize), Option<R>)> {
    let tasks: Vec<_> = by_owner
        .into_iter()
        .map(|(owner, (parts, slots))| {
            let (sh, call) = (shard.clone(), make(parts));
            (
                glommio::spawn_local(async move { sh.ask(owner, call).await }),
                slots,
            )
        })
        .collect();
    let mut out = Vec::new();
    for (task, slots) in tasks {
        match task.await {
            Some(answers) if answers.len() == slots.len() => {
                out.extend(slots.into_iter().zip(answers.into_iter().map(Some)))
            }
            _ => out.extend(slots.into_iter().map(|s| (s, None))),
        }
    }
    out
}

/// A response ready for the socket: pieces written in order (record chunks are shared
/// `Bytes`, not copies). `None` for produce with acks=0.
pub type Response = Option<Vec<Bytes>>;

/// Encodes header + body into one buffer with its size prefix.
pub fn encode_response<T: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, ProtocolError> {
    let header_version = key.response_header_version(version);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let size = header
        .compute_size(header_version)
        .and_then(|h| body.compute_size(version).map(|b| h + b))
        .map_err(|e| perr(format!("encoding {key:?} v{version}: {e}")))?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header
        .encode(&mut buf, header_version)
        .and_then(|_| body.encode(&mut buf, version))
        .map_err(|e| perr(format!("encoding {key:?} v{version}: {e}")))?;
    Ok(buf.freeze())
}

fn one<T: Encodable>(req: &Request, body: &T) -> Result<Response, ProtocolError> {
    Ok(Some(vec![encode_response(
        req.key,
        req.version,
        req.correlation_id,
        body,
    )?]))
}

/// Whether `name` is one of the internal topics the brokers create and keep in a cluster
/// (`__consumer_offsets`, `__transaction_state`): clients may not produce to it, create or
/// delete it, it is never auto-created, and Metadata marks it internal.
fn is_internal_topic(name: &str) -> bool {
    name == crate::broker::group::offsets::OFFSETS_TOPIC || name == crate::broker::txn::TXN_TOPIC
}

/// The core that answers for `partition` of `topic`: its owner in the metadata, or on a
/// standalone broker the core of an offsets bucket (`Shard::offsets_view`).
fn owner(
    shard: &crate::broker::shard::Shard,
    meta: &weir::metadata::Metadata,
    topic: &str,
    partition: i32,
) -> Option<usize> {
    meta.owner(topic, partition).or_else(|| {
        if topic != crate::broker::group::offsets::OFFSETS_TOPIC {
            return None;
        }
        let view = shard.offsets_view()?;
        view.owners.get(usize::try_from(partition).ok()?).copied()
    })
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Which of a core's listeners a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The shared bootstrap port (SO_REUSEPORT on every core): the whole broker.
    Bootstrap,
    /// The core's own port (listeners.per.core): the core as a broker of its own.
    Core,
}

/// Processes one request on the connection's core, counting it (and its time) in the core's
/// metrics. `listener`: the index in `listeners` of the listener the connection came in on
/// (Metadata, DescribeCluster and FindCoordinator answer with that listener's endpoints);
/// `via`: its bootstrap port or a core's own port (ListGroups answers for that broker).
pub async fn process(
    shard: Rc<Shard>,
    req: Request,
    listener: usize,
    via: Listener,
    session: Rc<weir::acl::Session>,
) -> Result<Response, ProtocolError> {
    let started = std::time::Instant::now();
    let key = req.raw_key();
    let sh = shard.clone();
    let r = match authz::gate(&shard, &req, &session) {
        Ok(Some(refused)) => Ok(refused),
        Ok(None) => process_request(shard, req, listener, via, &session).await,
        Err(e) => Err(e),
    };
    sh.metrics.request(key, started.elapsed());
    r
}

async fn process_request(
    shard: Rc<Shard>,
    req: Request,
    listener: usize,
    via: Listener,
    session: &weir::acl::Session,
) -> Result<Response, ProtocolError> {
    // ACLs: the topics or groups of a changing request the principal may not touch are taken
    // out here and answered with the error below (`authz`).
    let (allowed_body, denied) = authz::split(&shard, &req, session);
    let body = allowed_body.as_ref().unwrap_or(&req.body);
    match body {
        Body::ApiVersions(a) => {
            debug!(
                client = %a.client_software_name.as_str(),
                version = %a.client_software_version.as_str(),
                "ApiVersions"
            );
            // The streaming fetch extension is listed only for clients that ask for it by
            // name: ordinary Kafka clients see exactly Kafka's APIs.
            let mut resp = api_versions(errors::NONE, shard.config.consumer_protocol);
            if a.client_software_name.as_str() == weir::protocol::stream_fetch::CLIENT_SOFTWARE_NAME
            {
                let mut v = ApiVersion::default();
                v.api_key = weir::protocol::stream_fetch::API_KEY;
                v.min_version = weir::protocol::stream_fetch::VERSION;
                v.max_version = weir::protocol::stream_fetch::VERSION;
                resp.api_keys.push(v);
            }
            one(&req, &resp)
        }
        Body::ApiVersionsUnsupported => {
            // KIP-511: answer in v0 so any client can read the list and retry.
            let body = api_versions(errors::UNSUPPORTED_VERSION, shard.config.consumer_protocol);
            Ok(Some(vec![encode_response(
                ApiKey::ApiVersions,
                0,
                req.correlation_id,
                &body,
            )?]))
        }
        Body::Metadata(m) => {
            let asked_all = m.topics.is_none()
                || (req.version == 0 && m.topics.iter().flatten().next().is_none());
            let may_create = authz::metadata_may_create(&shard, session, m);
            let mut resp = metadata(&shard, req.version, m, listener, may_create).await;
            authz::patch_metadata(&shard, session, asked_all, &mut resp);
            one(&req, &resp)
        }
        Body::Produce(p) => produce(&shard, &req, p, session, listener).await,
        Body::LegacyProduce(p) => Ok(legacy_produce(&req, p)),
        Body::Fetch(f) => fetch(&shard, &req, f, session, listener).await,
        Body::ListOffsets(l) => {
            let mut resp = list_offsets(&shard, req.version, l).await;
            authz::patch_list_offsets(&shard, session, &mut resp);
            one(&req, &resp)
        }
        Body::OffsetForLeaderEpoch(r) => one(
            &req,
            &epochs::offset_for_leader_epoch(&shard, session, r).await,
        ),
        Body::CreateTopics(c) => {
            let mut resp = create_topics(&shard, req.version, c).await;
            authz::patch_create_topics(&mut resp, &denied);
            one(&req, &resp)
        }
        Body::DeleteTopics(d) => {
            let mut resp = delete_topics(&shard, req.version, d).await;
            authz::patch_delete_topics(&mut resp, &denied);
            one(&req, &resp)
        }
        Body::DeleteRecords(d) => {
            let mut resp = delete_records(&shard, d).await;
            if let Body::DeleteRecords(all) = &req.body {
                authz::patch_delete_records(&mut resp, all, &denied);
            }
            one(&req, &resp)
        }
        Body::DescribeLogDirs(d) => {
            let resp = describe_log_dirs(&shard, d).await;
            one(&req, &resp)
        }
        Body::ElectLeaders(e) => {
            let resp = elect_leaders(&shard, e).await;
            one(&req, &resp)
        }
        Body::DescribeQuorum(d) => {
            let resp = cluster::describe_quorum(&shard, d, listener).await;
            one(&req, &resp)
        }
        Body::DescribeCluster(_) => {
            shard.wait_metadata_current().await;
            let resp = describe_cluster(&shard, listener);
            one(&req, &resp)
        }
        Body::CreatePartitions(c) => {
            let mut resp = create_partitions(&shard, c).await;
            authz::patch_create_partitions(&mut resp, &denied);
            one(&req, &resp)
        }
        Body::DescribeConfigs(d) => {
            let mut resp = describe_configs(&shard, d);
            authz::patch_describe_configs(&shard, session, &mut resp);
            one(&req, &resp)
        }
        // server.rs hands these to the connection's streams, never here.
        Body::StreamFetch(_) => Err(perr("StreamFetch outside a connection")),
        Body::AlterConfigs(a) => {
            let mut resp = alter_configs(&shard, a).await;
            if let Body::AlterConfigs(all) = &req.body {
                let names = all
                    .resources
                    .iter()
                    .map(|r| (r.resource_type, r.resource_name.to_string()));
                authz::patch_alter_configs(&mut resp.responses, names, &denied);
            }
            one(&req, &resp)
        }
        Body::IncrementalAlterConfigs(a) => {
            let mut resp = incremental_alter_configs(&shard, a).await;
            if let Body::IncrementalAlterConfigs(all) = &req.body {
                let names = all
                    .resources
                    .iter()
                    .map(|r| (r.resource_type, r.resource_name.to_string()));
                authz::patch_incremental_alter_configs(&mut resp.responses, names, &denied);
            }
            one(&req, &resp)
        }
        Body::InitProducerId(i) => match i.transactional_id.as_ref() {
            Some(id) => one(
                &req,
                &txn::init_transactional(&shard, req.version, id.as_str(), i).await,
            ),
            None => one(&req, &init_producer_id(&shard, i)),
        },
        Body::AddPartitionsToTxn(a) => {
            one(&req, &txn::add_partitions(&shard, req.version, a).await)
        }
        Body::AddOffsetsToTxn(a) => one(&req, &txn::add_offsets(&shard, req.version, a).await),
        Body::EndTxn(e) => one(&req, &txn::end_txn(&shard, req.version, e).await),
        Body::TxnOffsetCommit(t) => {
            let mut resp = txn::txn_offset_commit(&shard, t).await;
            if let Body::TxnOffsetCommit(all) = &req.body {
                authz::patch_txn_offset_commit(&mut resp, all, &denied);
            }
            one(&req, &resp)
        }
        Body::DescribeTransactions(d) => {
            // DESCRIBE on each transactional id (Kafka's rule), else
            // TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing of it.
            let may = |id: &str| {
                authz::transactional_id(&shard, session, weir::acl::Operation::Describe, id)
            };
            one(&req, &txn::describe_transactions(&shard, d, may).await)
        }
        Body::ListTransactions(l) => {
            // Only the transactional ids the principal may DESCRIBE are listed.
            let may = |id: &str| {
                authz::transactional_id(&shard, session, weir::acl::Operation::Describe, id)
            };
            one(&req, &txn::list_transactions(&shard, l, via, may).await)
        }
        Body::FindCoordinator(f) => {
            shard.wait_metadata_current().await;
            let mut resp = group::find_coordinator(&shard, req.version, f, listener).await;
            authz::patch_find_coordinator(&shard, session, f, &mut resp);
            one(&req, &resp)
        }
        Body::JoinGroup(j) => {
            let client = group::Client {
                client_id: &req.client_id,
                host: "/127.0.0.1",
            };
            one(
                &req,
                &group::join_group(&shard, req.version, j, client).await,
            )
        }
        Body::SyncGroup(g) => one(&req, &group::sync_group(&shard, g).await),
        Body::Heartbeat(h) => one(&req, &group::heartbeat(&shard, h).await),
        Body::LeaveGroup(l) => one(&req, &group::leave_group(&shard, req.version, l).await),
        Body::OffsetCommit(c) => {
            let mut resp = group_offsets::offset_commit(&shard, c).await;
            if let Body::OffsetCommit(all) = &req.body {
                authz::patch_offset_commit(&mut resp, all, &denied);
            }
            one(&req, &resp)
        }
        Body::OffsetFetch(f) => {
            let mut resp = group_offsets::offset_fetch(&shard, req.version, f).await;
            authz::patch_offset_fetch(&shard, session, f, &mut resp);
            one(&req, &resp)
        }
        Body::DescribeGroups(d) => {
            let mut resp = group::describe_groups(&shard, req.version, d).await;
            authz::patch_describe_groups(&shard, session, &mut resp);
            one(&req, &resp)
        }
        Body::ListGroups(l) => {
            let mut resp = group::list_groups(&shard, l, via).await;
            authz::patch_list_groups(&shard, session, &mut resp);
            one(&req, &resp)
        }
        Body::ConsumerGroupHeartbeat(_) if !shard.config.consumer_protocol => {
            let mut r = ConsumerGroupHeartbeatResponse::default();
            r.error_code = errors::UNSUPPORTED_VERSION;
            r.error_message = Some(s(
                "the consumer group protocol is off: group.coordinator.rebalance.protocols=classic",
            ));
            r.member_epoch = -1;
            one(&req, &r)
        }
        Body::ConsumerGroupHeartbeat(h) => one(
            &req,
            &consumer_groups::heartbeat(&shard, h, &req.client_id, session).await,
        ),
        Body::ConsumerGroupDescribe(d) => one(
            &req,
            &consumer_groups::describe(&shard, d, |g| {
                authz::group(&shard, session, weir::acl::Operation::Describe, g)
            })
            .await,
        ),
        Body::DeleteGroups(d) => {
            let mut resp = group::delete_groups(&shard, d).await;
            authz::patch_delete_groups(&mut resp, &denied);
            one(&req, &resp)
        }
        Body::OffsetDelete(d) => {
            let mut resp = group_offsets::offset_delete(&shard, d).await;
            if let Body::OffsetDelete(all) = &req.body {
                authz::patch_offset_delete(&mut resp, all, &denied);
            }
            one(&req, &resp)
        }
        Body::DescribeProducers(d) => {
            let mut resp = producers::describe_producers(&shard, d).await;
            authz::patch_describe_producers(&shard, session, &mut resp);
            one(&req, &resp)
        }
        Body::AlterPartitionReassignments(a) => one(
            &req,
            &reassign::alter_partition_reassignments(&shard, req.version, a),
        ),
        Body::ListPartitionReassignments(l) => {
            one(&req, &reassign::list_partition_reassignments(l))
        }
        Body::AlterReplicaLogDirs(a) => one(&req, &describe::alter_replica_log_dirs(&shard, a)),
        Body::DescribeTopicPartitions(d) => {
            shard.wait_metadata_current().await;
            // Topics the principal may not DESCRIBE are left out of an "all topics" answer, and
            // named ones answered TOPIC_AUTHORIZATION_FAILED without their id (as Metadata).
            let may = |t: &str| authz::topic(&shard, session, weir::acl::Operation::Describe, t);
            one(&req, &describe::describe_topic_partitions(&shard, d, may))
        }
        Body::ListConfigResources(l) => one(
            &req,
            &describe::list_config_resources(&shard, req.version, l),
        ),
        Body::DescribeUserScramCredentials(d) => {
            one(&req, &users::describe_user_scram_credentials(&shard, d))
        }
        Body::AlterUserScramCredentials(a) => {
            one(&req, &users::alter_user_scram_credentials(&shard, a).await)
        }
        Body::DescribeAcls(d) => one(&req, &acls::describe_acls(&shard, d)),
        Body::CreateAcls(c) => one(&req, &acls::create_acls(&shard, c).await),
        Body::DeleteAcls(d) => one(&req, &acls::delete_acls(&shard, d).await),
        // On a SASL listener server.rs (`broker::sasl`) runs the exchange and these never come
        // here; on the others there is nothing to authenticate, and Kafka answers the same.
        Body::SaslHandshake(_) => {
            let mut r = SaslHandshakeResponse::default();
            r.error_code = errors::ILLEGAL_SASL_STATE;
            one(&req, &r)
        }
        Body::SaslAuthenticate(_) => {
            let mut r = SaslAuthenticateResponse::default();
            r.error_code = errors::ILLEGAL_SASL_STATE;
            r.error_message = Some(s("SaslAuthenticate on a listener without SASL"));
            one(&req, &r)
        }
    }
}

// ---- ApiVersions ----

/// The versions weir speaks; KIP-848's APIs only when `consumer_groups`
/// (`group.coordinator.rebalance.protocols` includes `consumer`), as Kafka lists them.
fn api_versions(error: i16, consumer_groups: bool) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error;
    r.api_keys = SUPPORTED
        .iter()
        .filter(|(k, _, _)| {
            consumer_groups
                || !matches!(
                    k,
                    ApiKey::ConsumerGroupHeartbeat | ApiKey::ConsumerGroupDescribe
                )
        })
        .map(|(k, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *lo;
            v.max_version = *hi;
            v
        })
        .collect();
    r.finalized_features_epoch = -1;
    r
}
