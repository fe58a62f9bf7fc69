//! The Kafka wire protocol: which APIs and versions weir speaks, request decoding, and one
//! handler per API. Handlers run on the core that owns the connection; partition work is
//! sent to the owning cores through [`Shard::call`].
//!
//! Codec: the `kafka-protocol` crate, decoding from the request's `Bytes` (so produce
//! records are zero-copy slices of the request). Fetch responses are encoded by
//! [`crate::fetch_response`] so that record chunks go to the socket without a copy.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tracing::{debug, warn};

use crate::errors;
use crate::fetch_response::{self, FetchReply};
use crate::group::wire as group;
use crate::metadata::valid_topic_name;
use crate::shard::{
    ConfigChange, FetchKey, FetchPart, ListPart, NewTopic, ProducePart, Req, Resp, Shard,
};

pub use weir::wire::{decode_request, perr, Body, ProtocolError, Request, SUPPORTED};

/// Partition work grouped by owning core: the parts, and where each result goes in the
/// response (topic index, partition index).
type Groups<P> = BTreeMap<usize, (Vec<P>, Vec<(usize, usize)>)>;

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

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Processes one request on the connection's core.
/// Processes one request, counting it (and its time) in the core's metrics.
pub async fn process(shard: Rc<Shard>, req: Request) -> Result<Response, ProtocolError> {
    let started = std::time::Instant::now();
    let key = req.raw_key();
    let sh = shard.clone();
    let r = process_request(shard, req).await;
    sh.metrics.request(key, started.elapsed());
    r
}

async fn process_request(shard: Rc<Shard>, req: Request) -> Result<Response, ProtocolError> {
    match &req.body {
        Body::ApiVersions(a) => {
            debug!(
                client = %a.client_software_name.as_str(),
                version = %a.client_software_version.as_str(),
                "ApiVersions"
            );
            // The streaming fetch extension is listed only for clients that ask for it by
            // name: ordinary Kafka clients see exactly Kafka's APIs.
            let mut resp = api_versions(errors::NONE);
            if a.client_software_name.as_str() == weir::stream_fetch::CLIENT_SOFTWARE_NAME {
                let mut v = ApiVersion::default();
                v.api_key = weir::stream_fetch::API_KEY;
                v.min_version = weir::stream_fetch::VERSION;
                v.max_version = weir::stream_fetch::VERSION;
                resp.api_keys.push(v);
            }
            one(&req, &resp)
        }
        Body::ApiVersionsUnsupported => {
            // KIP-511: answer in v0 so any client can read the list and retry.
            let body = api_versions(errors::UNSUPPORTED_VERSION);
            Ok(Some(vec![encode_response(
                ApiKey::ApiVersions,
                0,
                req.correlation_id,
                &body,
            )?]))
        }
        Body::Metadata(m) => {
            let resp = metadata(&shard, req.version, m).await;
            one(&req, &resp)
        }
        Body::Produce(p) => produce(&shard, &req, p).await,
        Body::Fetch(f) => fetch(&shard, &req, f).await,
        Body::ListOffsets(l) => {
            let resp = list_offsets(&shard, req.version, l).await;
            one(&req, &resp)
        }
        Body::CreateTopics(c) => {
            let resp = create_topics(&shard, req.version, c).await;
            one(&req, &resp)
        }
        Body::DeleteTopics(d) => {
            let resp = delete_topics(&shard, req.version, d).await;
            one(&req, &resp)
        }
        Body::DeleteRecords(d) => {
            let resp = delete_records(&shard, d).await;
            one(&req, &resp)
        }
        Body::DescribeLogDirs(d) => {
            let resp = describe_log_dirs(&shard, d).await;
            one(&req, &resp)
        }
        Body::ElectLeaders(e) => {
            let resp = elect_leaders(&shard, e);
            one(&req, &resp)
        }
        Body::DescribeCluster(_) => {
            let resp = describe_cluster(&shard);
            one(&req, &resp)
        }
        Body::CreatePartitions(c) => {
            let resp = create_partitions(&shard, c).await;
            one(&req, &resp)
        }
        Body::DescribeConfigs(d) => {
            let resp = describe_configs(&shard, d);
            one(&req, &resp)
        }
        // server.rs hands these to the connection's streams, never here.
        Body::StreamFetch(_) => Err(perr("StreamFetch outside a connection")),
        Body::AlterConfigs(a) => {
            let resp = alter_configs(&shard, a).await;
            one(&req, &resp)
        }
        Body::IncrementalAlterConfigs(a) => {
            let resp = incremental_alter_configs(&shard, a).await;
            one(&req, &resp)
        }
        Body::InitProducerId(i) => one(&req, &init_producer_id(&shard, i)),
        Body::FindCoordinator(f) => one(&req, &group::find_coordinator(&shard, req.version, f)),
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
        Body::OffsetCommit(c) => one(&req, &group::offset_commit(&shard, c).await),
        Body::OffsetFetch(f) => one(&req, &group::offset_fetch(&shard, req.version, f).await),
        Body::DescribeGroups(d) => one(&req, &group::describe_groups(&shard, d).await),
        Body::ListGroups(l) => one(&req, &group::list_groups(&shard, l).await),
        Body::DeleteGroups(d) => one(&req, &group::delete_groups(&shard, d).await),
    }
}

// ---- ApiVersions ----

fn api_versions(error: i16) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error;
    r.api_keys = SUPPORTED
        .iter()
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

// ---- Metadata ----

/// Creates missing topics through core 0 (auto.create.topics.enable).
async fn auto_create(shard: &Rc<Shard>, names: Vec<String>) {
    if names.is_empty() {
        return;
    }
    let topics = names
        .into_iter()
        .map(|name| NewTopic {
            name,
            partitions: -1,
            replication_factor: -1,
            configs: Vec::new(),
        })
        .collect();
    if let Resp::Topics(results) = shard
        .call(
            0,
            Req::CreateTopics {
                topics,
                validate_only: false,
            },
        )
        .await
    {
        for r in results {
            if r.error != errors::NONE && r.error != errors::TOPIC_ALREADY_EXISTS {
                debug!(topic = %r.name, error = r.error, "auto-create failed");
            }
        }
    }
}

fn topic_uuid(hex: &str) -> uuid::Uuid {
    uuid::Uuid::try_parse(hex).unwrap_or(uuid::Uuid::nil())
}

async fn metadata(shard: &Rc<Shard>, version: i16, req: &MetadataRequest) -> MetadataResponse {
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let requested: Option<Vec<String>> = match &req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(
            t.iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
                .collect(),
        ),
    };
    let allow_auto =
        shard.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    if let (Some(names), true) = (&requested, allow_auto) {
        let meta = shard.metadata();
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !meta.topics.contains_key(*n) && valid_topic_name(n))
            .cloned()
            .collect();
        auto_create(shard, missing).await;
    }
    let meta = shard.metadata();
    let mut endpoints = shard.core_endpoints.borrow().clone();
    if endpoints.is_empty() {
        endpoints.push(shard.advertised.borrow().clone());
    }
    let mut r = MetadataResponse::default();
    r.brokers = endpoints
        .iter()
        .enumerate()
        .map(|(id, (host, port))| {
            let mut broker = MetadataResponseBroker::default();
            broker.node_id = BrokerId(id as i32);
            broker.host = s(host);
            broker.port = *port;
            broker
        })
        .collect();
    r.cluster_id = Some(s("weir"));
    r.controller_id = BrokerId(0);
    r.cluster_authorized_operations = i32::MIN;
    let names: Vec<String> = match requested {
        None => meta.topics.keys().cloned().collect(),
        Some(n) => n,
    };
    for name in names {
        let mut t = MetadataResponseTopic::default();
        t.name = Some(TopicName(s(&name)));
        t.topic_authorized_operations = i32::MIN;
        match meta.topics.get(&name) {
            None => {
                t.error_code = if valid_topic_name(&name) {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                } else {
                    errors::INVALID_TOPIC_EXCEPTION
                };
            }
            Some(tm) => {
                t.topic_id = topic_uuid(&tm.id);
                t.partitions = tm
                    .owners
                    .iter()
                    .enumerate()
                    .map(|(p, &owner)| {
                        let leader = BrokerId(shard.node_of(owner));
                        let mut mp = MetadataResponsePartition::default();
                        mp.partition_index = p as i32;
                        mp.leader_id = leader;
                        mp.leader_epoch = 0;
                        mp.replica_nodes = vec![leader];
                        mp.isr_nodes = vec![leader];
                        mp
                    })
                    .collect();
            }
        }
        r.topics.push(t);
    }
    r
}

// ---- Produce ----

async fn produce(
    shard: &Rc<Shard>,
    req: &Request,
    p: &ProduceRequest,
) -> Result<Response, ProtocolError> {
    let acks = p.acks;
    let valid_acks = matches!(acks, -1..=1);
    if shard.config.auto_create_topics && valid_acks {
        let meta = shard.metadata();
        let missing: Vec<String> = p
            .topic_data
            .iter()
            .map(|t| t.name.to_string())
            .filter(|n| !meta.topics.contains_key(n) && valid_topic_name(n))
            .collect();
        auto_create(shard, missing).await;
    }
    let meta = shard.metadata();
    // Results in request order; partitions grouped by owning core.
    let mut results: Vec<Vec<(i32, crate::shard::ProduceResult)>> = Vec::new();
    let mut groups: Groups<ProducePart> = BTreeMap::new();
    for (ti, t) in p.topic_data.iter().enumerate() {
        let name = t.name.to_string();
        let mut row = Vec::with_capacity(t.partition_data.len());
        for (pi, pd) in t.partition_data.iter().enumerate() {
            let mut res = crate::shard::ProduceResult {
                error: errors::NONE,
                base_offset: -1,
                log_start_offset: -1,
            };
            if !valid_acks {
                res.error = errors::INVALID_REQUIRED_ACKS;
            } else {
                match meta.owner(&name, pd.index) {
                    None => res.error = errors::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(owner) => {
                        let g = groups.entry(owner).or_default();
                        g.0.push(ProducePart {
                            topic: name.clone(),
                            partition: pd.index,
                            records: pd.records.clone().unwrap_or_default(),
                        });
                        g.1.push((ti, pi));
                    }
                }
            }
            row.push((pd.index, res));
        }
        results.push(row);
    }
    // Every group starts now (remote ones are sent in order); local work runs in place.
    let mut tasks = Vec::new();
    for (owner, (parts, slots)) in groups {
        let sh = shard.clone();
        let task =
            glommio::spawn_local(async move { sh.call(owner, Req::Produce { acks, parts }).await });
        tasks.push((task, slots));
    }
    for (task, slots) in tasks {
        match task.await {
            Resp::Produce(rs) => {
                for (r, (ti, pi)) in rs.into_iter().zip(slots) {
                    results[ti][pi].1 = r;
                }
            }
            _ => {
                for (ti, pi) in slots {
                    results[ti][pi].1.error = errors::NOT_LEADER_OR_FOLLOWER;
                }
            }
        }
    }
    if acks == 0 {
        return Ok(None);
    }
    let mut resp = ProduceResponse::default();
    for (t, row) in p.topic_data.iter().zip(results) {
        let mut tr = TopicProduceResponse::default();
        tr.name = t.name.clone();
        for (index, r) in row {
            let mut pr = PartitionProduceResponse::default();
            pr.index = index;
            pr.error_code = r.error;
            pr.base_offset = r.base_offset;
            pr.log_append_time_ms = -1;
            pr.log_start_offset = r.log_start_offset;
            tr.partition_responses.push(pr);
        }
        resp.responses.push(tr);
    }
    one(req, &resp)
}

// ---- Fetch ----

async fn fetch(
    shard: &Rc<Shard>,
    req: &Request,
    f: &FetchRequest,
) -> Result<Response, ProtocolError> {
    let replies = gather_fetch(shard, f).await;
    let body = fetch_response::encode(req.version, req.correlation_id, &replies);
    Ok(Some(body))
}

/// Reads what a fetch asks for from the owning cores, parking (in their wheels) until
/// `min_bytes` are there or `max_wait_ms` passes: the per-partition results, by topic.
/// Also the data path of streaming fetch (`streaming.rs`).
pub async fn gather_fetch(shard: &Rc<Shard>, f: &FetchRequest) -> Vec<FetchReply> {
    let meta = shard.metadata();
    // (topic index, partition index) of every part, grouped by owner.
    let mut replies: Vec<FetchReply> = Vec::new();
    let mut groups: Groups<FetchPart> = BTreeMap::new();
    for (ti, t) in f.topics.iter().enumerate() {
        let name = t.topic.to_string();
        let mut reply = FetchReply {
            topic: name.clone(),
            partitions: Vec::with_capacity(t.partitions.len()),
        };
        for (pi, fp) in t.partitions.iter().enumerate() {
            let mut r = crate::shard::FetchResult {
                error: errors::NONE,
                high_watermark: -1,
                log_start_offset: -1,
                chunks: Vec::new(),
            };
            match meta.owner(&name, fp.partition) {
                None => r.error = errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(owner) => {
                    let g = groups.entry(owner).or_default();
                    g.0.push(FetchPart {
                        topic: name.clone(),
                        partition: fp.partition,
                        offset: fp.fetch_offset,
                        max_bytes: fp.partition_max_bytes,
                    });
                    g.1.push((ti, pi));
                }
            }
            reply.partitions.push((fp.partition, r));
        }
        replies.push(reply);
    }
    // A request for unknown partitions is answered at once.
    let any_error = replies
        .iter()
        .any(|t| t.partitions.iter().any(|(_, r)| r.error != errors::NONE));
    let max_wait_ms = if any_error { 0 } else { f.max_wait_ms };
    let id = shard.next_fetch_id();
    let key = FetchKey { from: shard.id, id };
    let n_groups = groups.len();
    if n_groups == 1 {
        let (owner, (parts, slots)) = groups.into_iter().next().expect("one group");
        let resp = if owner == shard.id {
            Resp::Fetch(
                shard
                    .fetch_local(None, f.min_bytes, max_wait_ms, f.max_bytes, &parts)
                    .await,
            )
        } else {
            shard
                .call(
                    owner,
                    Req::Fetch {
                        key,
                        min_bytes: f.min_bytes,
                        max_wait_ms,
                        max_bytes: f.max_bytes,
                        parts,
                    },
                )
                .await
        };
        place(&mut replies, resp, slots);
    } else if n_groups > 1 {
        // Ask every owning core at once; as soon as the replies so far hold min_bytes, tell
        // the cores still waiting to answer now (no polling).
        let (tx, rx) = glommio::channels::local_channel::new_bounded(n_groups);
        let tx = Rc::new(tx);
        let mut pending: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        for (owner, (parts, slots)) in groups {
            pending.insert(owner, slots);
            let sh = shard.clone();
            let tx = tx.clone();
            let (min_bytes, max_bytes) = (f.min_bytes, f.max_bytes);
            glommio::spawn_local(async move {
                let resp = sh
                    .call(
                        owner,
                        Req::Fetch {
                            key,
                            min_bytes,
                            max_wait_ms,
                            max_bytes,
                            parts,
                        },
                    )
                    .await;
                let _ = tx.send((owner, resp)).await;
            })
            .detach();
        }
        drop(tx);
        let mut total = 0usize;
        let mut woke = false;
        while !pending.is_empty() {
            let Some((owner, resp)) = rx.recv().await else {
                break;
            };
            let slots = pending.remove(&owner).unwrap_or_default();
            let (got, errored) = place(&mut replies, resp, slots);
            total += got;
            if !woke && (total as i64 >= i64::from(f.min_bytes) || errored) {
                woke = true;
                for &other in pending.keys() {
                    let sh = shard.clone();
                    glommio::spawn_local(async move {
                        sh.call(other, Req::FetchWake(key)).await;
                    })
                    .detach();
                }
            }
        }
    }
    // max_bytes is for the whole response: each owner core filled up to it on its own.
    crate::fetch_budget::enforce(&mut replies, f.max_bytes);
    replies
}

/// Puts an owner core's fetch results in their places; returns (bytes, any error). A core
/// that could not answer (shutting down) gives its partitions NOT_LEADER_OR_FOLLOWER, which
/// clients retry after a metadata refresh — never NONE with no data and -1 watermarks.
fn place(replies: &mut [FetchReply], resp: Resp, slots: Vec<(usize, usize)>) -> (usize, bool) {
    match resp {
        Resp::Fetch(rs) if rs.len() == slots.len() => {
            let bytes = rs.iter().map(|r| r.bytes()).sum();
            let errored = rs.iter().any(|r| r.error != errors::NONE);
            for (r, (ti, pi)) in rs.into_iter().zip(slots) {
                replies[ti].partitions[pi].1 = r;
            }
            (bytes, errored)
        }
        _ => {
            for (ti, pi) in slots {
                replies[ti].partitions[pi].1.error = errors::NOT_LEADER_OR_FOLLOWER;
            }
            (0, true)
        }
    }
}

// ---- ListOffsets ----

async fn list_offsets(
    shard: &Rc<Shard>,
    version: i16,
    l: &ListOffsetsRequest,
) -> ListOffsetsResponse {
    let meta = shard.metadata();
    let mut resp = ListOffsetsResponse::default();
    let mut groups: Groups<ListPart> = BTreeMap::new();
    for (ti, t) in l.topics.iter().enumerate() {
        let name = t.name.to_string();
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.offset = -1;
            pr.timestamp = -1;
            if version >= 4 {
                pr.leader_epoch = 0;
            }
            match meta.owner(&name, p.partition_index) {
                None => pr.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(owner) => {
                    let g = groups.entry(owner).or_default();
                    g.0.push(ListPart {
                        topic: name.clone(),
                        partition: p.partition_index,
                        timestamp: p.timestamp,
                    });
                    g.1.push((ti, pi));
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    for (owner, (parts, slots)) in groups {
        match shard.call(owner, Req::ListOffsets(parts)).await {
            Resp::ListOffsets(rs) if rs.len() == slots.len() => {
                for (r, (ti, pi)) in rs.into_iter().zip(slots) {
                    let pr = &mut resp.topics[ti].partitions[pi];
                    pr.error_code = r.error;
                    pr.offset = r.offset;
                    pr.timestamp = r.timestamp;
                }
            }
            // The owner could not answer (shutting down): a retriable error, not NONE
            // with -1 offsets.
            _ => {
                for (ti, pi) in slots {
                    resp.topics[ti].partitions[pi].error_code = errors::NOT_LEADER_OR_FOLLOWER;
                }
            }
        }
    }
    resp
}

// ---- DeleteRecords, DescribeCluster ----

async fn delete_records(shard: &Rc<Shard>, d: &DeleteRecordsRequest) -> DeleteRecordsResponse {
    use kafka_protocol::messages::delete_records_response::{
        DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
    };
    let meta = shard.metadata();
    let mut resp = DeleteRecordsResponse::default();
    let mut groups: Groups<crate::shard::DeletePart> = BTreeMap::new();
    for (ti, t) in d.topics.iter().enumerate() {
        let name = t.name.to_string();
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for (pi, p) in t.partitions.iter().enumerate() {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            match meta.owner(&name, p.partition_index) {
                None => pr.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(owner) => {
                    let g = groups.entry(owner).or_default();
                    g.0.push(crate::shard::DeletePart {
                        topic: name.clone(),
                        partition: p.partition_index,
                        offset: p.offset,
                    });
                    g.1.push((ti, pi));
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    for (owner, (parts, slots)) in groups {
        match shard.call(owner, Req::DeleteRecords(parts)).await {
            Resp::LowWatermarks(rs) if rs.len() == slots.len() => {
                for ((error, low), (ti, pi)) in rs.into_iter().zip(slots) {
                    let pr = &mut resp.topics[ti].partitions[pi];
                    pr.error_code = error;
                    pr.low_watermark = low;
                }
            }
            _ => {
                for (ti, pi) in slots {
                    resp.topics[ti].partitions[pi].error_code = errors::NOT_LEADER_OR_FOLLOWER;
                }
            }
        }
    }
    resp
}

/// DescribeLogDirs: one log directory (`log.dirs`) with the size of each partition in it.
/// A broker answers for its own partitions: with `listeners.per.core` each core is a broker
/// (the connection's core), otherwise the process is one broker (every core's partitions).
async fn describe_log_dirs(
    shard: &Rc<Shard>,
    d: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    use kafka_protocol::messages::describe_log_dirs_response::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };
    let mut sizes = Vec::new();
    if shard.core_endpoints.borrow().is_empty() {
        for core in 0..shard.cores {
            if let Resp::PartitionSizes(s) = shard.call(core, Req::PartitionSizes).await {
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

/// ElectLeaders on a single node: every partition already has its only replica as leader
/// (ELECTION_NOT_NEEDED); unknown ones are UNKNOWN_TOPIC_OR_PARTITION. "All partitions"
/// (null) lists none, as Kafka leaves out the partitions that needed no election.
fn elect_leaders(shard: &Rc<Shard>, e: &ElectLeadersRequest) -> ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    const ELECTION_NOT_NEEDED: i16 = 84;
    let meta = shard.metadata();
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

/// DescribeCluster: the same brokers as Metadata (one per core with `listeners.per.core`).
fn describe_cluster(shard: &Rc<Shard>) -> DescribeClusterResponse {
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    let mut endpoints = shard.core_endpoints.borrow().clone();
    if endpoints.is_empty() {
        endpoints.push(shard.advertised.borrow().clone());
    }
    let mut r = DescribeClusterResponse::default();
    r.endpoint_type = 1;
    r.cluster_id = s("weir");
    r.controller_id = BrokerId(0);
    r.cluster_authorized_operations = i32::MIN;
    r.brokers = endpoints
        .iter()
        .enumerate()
        .map(|(id, (host, port))| {
            let mut b = DescribeClusterBroker::default();
            b.broker_id = BrokerId(id as i32);
            b.host = s(host);
            b.port = *port;
            b
        })
        .collect();
    r
}

// ---- Admin ----

async fn create_topics(
    shard: &Rc<Shard>,
    version: i16,
    c: &CreateTopicsRequest,
) -> CreateTopicsResponse {
    let topics: Vec<NewTopic> = c
        .topics
        .iter()
        .map(|t| NewTopic {
            name: t.name.to_string(),
            partitions: if t.assignments.is_empty() {
                t.num_partitions
            } else {
                t.assignments.len() as i32
            },
            replication_factor: if t.assignments.is_empty() {
                t.replication_factor
            } else {
                1
            },
            configs: t
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
        })
        .collect();
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    let results = match shard
        .call(
            0,
            Req::CreateTopics {
                topics,
                validate_only: c.validate_only,
            },
        )
        .await
    {
        Resp::Topics(r) => r,
        _ => unanswered(names),
    };
    let meta = shard.metadata();
    let mut resp = CreateTopicsResponse::default();
    for r in results {
        let mut tr = CreatableTopicResult::default();
        tr.name = TopicName(s(&r.name));
        tr.error_code = r.error;
        tr.error_message = r.message.as_deref().map(s);
        if version >= 5 {
            tr.num_partitions = r.partitions;
            tr.replication_factor = 1;
            tr.configs = Some(Vec::new());
        }
        if let Some(t) = meta.topics.get(&r.name) {
            tr.topic_id = topic_uuid(&t.id);
        }
        resp.topics.push(tr);
    }
    resp
}

/// Results for topics whose admin call core 0 could not answer (shutting down): each topic
/// gets a retriable error, none is silently left out of the response.
async fn create_partitions(
    shard: &Rc<Shard>,
    c: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let topics: Vec<crate::shard::NewPartitions> = c
        .topics
        .iter()
        .map(|t| crate::shard::NewPartitions {
            name: t.name.to_string(),
            count: t.count,
            assignments: t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|p| p.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    let results = match shard
        .call(
            0,
            Req::CreatePartitions {
                topics,
                validate_only: c.validate_only,
            },
        )
        .await
    {
        Resp::Topics(r) if r.len() == names.len() => r,
        _ => unanswered(names),
    };
    let mut resp = CreatePartitionsResponse::default();
    for r in results {
        let mut tr = CreatePartitionsTopicResult::default();
        tr.name = TopicName(s(&r.name));
        tr.error_code = r.error;
        tr.error_message = r.message.as_deref().map(s);
        resp.results.push(tr);
    }
    resp
}

fn unanswered(names: Vec<String>) -> Vec<crate::shard::TopicResult> {
    names
        .into_iter()
        .map(|name| crate::shard::TopicResult {
            name,
            error: errors::NOT_CONTROLLER,
            message: Some("the broker is shutting down".to_string()),
            partitions: -1,
        })
        .collect()
}

async fn delete_topics(
    shard: &Rc<Shard>,
    version: i16,
    d: &DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let names: Vec<String> = if version >= 6 {
        d.topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
            .collect()
    } else {
        d.topic_names.iter().map(|n| n.to_string()).collect()
    };
    let results = match shard.call(0, Req::DeleteTopics(names.clone())).await {
        Resp::Topics(r) => r,
        _ => unanswered(names),
    };
    let mut resp = DeleteTopicsResponse::default();
    for r in results {
        if r.error == errors::NONE {
            // Committed offsets of a deleted topic go away with it.
            group::topic_deleted(shard, &r.name).await;
        }
        let mut tr = DeletableTopicResult::default();
        tr.name = Some(TopicName(s(&r.name)));
        tr.error_code = r.error;
        resp.responses.push(tr);
    }
    resp
}

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

fn describe_configs(shard: &Rc<Shard>, d: &DescribeConfigsRequest) -> DescribeConfigsResponse {
    let meta = shard.metadata();
    let mut resp = DescribeConfigsResponse::default();
    for res in &d.resources {
        let mut out = DescribeConfigsResult::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        let wanted = |k: &str| {
            res.configuration_keys
                .as_ref()
                .is_none_or(|ks| ks.iter().any(|w| w.as_str() == k))
        };
        let entry = |name: &str, value: String, source: i8| {
            let mut e = DescribeConfigsResourceResult::default();
            e.name = s(name);
            e.value = Some(s(&value));
            e.read_only = false;
            e.config_source = source;
            e.is_sensitive = false;
            e
        };
        match res.resource_type {
            RESOURCE_TOPIC => match meta.topics.get(res.resource_name.as_str()) {
                None => {
                    out.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION;
                    out.error_message = Some(s("unknown topic"));
                }
                Some(t) => {
                    for (key, broker_key) in crate::config::TOPIC_CONFIGS {
                        if !wanted(key) {
                            continue;
                        }
                        // A default the operator set on the broker (file, flag or env) is
                        // STATIC_BROKER_CONFIG, as Kafka reports it; a built-in one DEFAULT.
                        let raw = &shard.config.raw;
                        let set_on_broker = raw.contains_key(*broker_key)
                            || (*key == "retention.ms" && raw.contains_key("log.retention.hours"));
                        let (value, source) = match t.configs.get(*key) {
                            Some(v) => (v.clone(), SOURCE_TOPIC),
                            None => (
                                shard.config.topic_default(key).unwrap_or_default(),
                                if set_on_broker {
                                    SOURCE_STATIC_BROKER
                                } else {
                                    SOURCE_DEFAULT
                                },
                            ),
                        };
                        out.configs.push(entry(key, value, source));
                    }
                    // Kafka configs weir stores but does not act on: reported as set.
                    for (key, value) in &t.configs {
                        let acted_on = crate::config::TOPIC_CONFIGS.iter().any(|(k, _)| k == key);
                        if !acted_on && wanted(key) {
                            out.configs.push(entry(key, value.clone(), SOURCE_TOPIC));
                        }
                    }
                }
            },
            RESOURCE_BROKER => {
                let c = &shard.config;
                for setting in crate::config::SETTINGS {
                    if !wanted(setting.name) {
                        continue;
                    }
                    let source = if c.raw.contains_key(setting.name) {
                        SOURCE_STATIC_BROKER
                    } else {
                        SOURCE_DEFAULT
                    };
                    let mut e = entry(
                        setting.name,
                        c.value_of(setting.name).unwrap_or_default(),
                        source,
                    );
                    // Static: changed by restarting with a new file, flag or variable.
                    e.read_only = true;
                    if d.include_documentation {
                        let unit = match setting.unit {
                            "" => String::new(),
                            u => format!(" (unit: {u})"),
                        };
                        e.documentation = Some(s(&format!("{}{unit}", setting.doc)));
                    }
                    out.configs.push(e);
                }
            }
            other => {
                out.error_code = errors::INVALID_REQUEST;
                out.error_message = Some(s(&format!("resource type {other} is not supported")));
            }
        }
        resp.results.push(out);
    }
    if resp.results.iter().any(|r| r.error_code != errors::NONE) {
        warn!(resources = d.resources.len(), "DescribeConfigs with errors");
    }
    resp
}

/// A config change: (key, `Some(value)` to set, `None` to delete).
type ConfigOp = (String, Option<String>);

/// A resource of an (Incremental)AlterConfigs request: its type, name, and the config
/// changes it asks for, or why they are refused (error code, message).
type AlterResource = (i8, StrBytes, Result<Vec<ConfigOp>, (i16, String)>);

/// One resource's outcome in an (Incremental)AlterConfigs response.
struct AlterOutcome {
    resource_type: i8,
    name: StrBytes,
    error: i16,
    message: Option<String>,
}

/// Refuses resources named twice (as Kafka does) and resources that are not topics, sends
/// the topic changes to core 0, and merges its answers, in request order, with the refused.
async fn alter_topic_configs(
    shard: &Rc<Shard>,
    resources: Vec<AlterResource>,
    replace_all: bool,
    validate_only: bool,
) -> Vec<AlterOutcome> {
    let mut named: HashMap<(i8, String), usize> = HashMap::new();
    for (t, name, _) in &resources {
        *named.entry((*t, name.to_string())).or_insert(0) += 1;
    }
    let resources: Vec<_> = resources
        .into_iter()
        .map(|(t, name, ops)| {
            let topic = name.to_string();
            let change = if named[&(t, topic.clone())] > 1 {
                Err((
                    errors::INVALID_REQUEST,
                    format!("resource '{topic}' named more than once"),
                ))
            } else if let Some(e) = not_alterable(t, &topic) {
                Err(e)
            } else {
                ops.map(|ops| ConfigChange {
                    topic,
                    replace_all,
                    ops,
                })
            };
            (t, name, change)
        })
        .collect();
    let changes: Vec<ConfigChange> = resources
        .iter()
        .filter_map(|(_, _, c)| c.as_ref().ok().cloned())
        .collect();
    let mut results = if changes.is_empty() {
        Vec::new()
    } else {
        match shard
            .call(
                0,
                Req::AlterConfigs {
                    changes,
                    validate_only,
                },
            )
            .await
        {
            Resp::Topics(r) => r,
            _ => Vec::new(),
        }
    }
    .into_iter();
    resources
        .into_iter()
        .map(|(resource_type, name, c)| {
            let (error, message) = match c {
                Err((code, why)) => (code, Some(why)),
                Ok(_) => match results.next() {
                    Some(r) => (r.error, r.message),
                    None => (errors::UNKNOWN_SERVER_ERROR, Some("no answer".to_string())),
                },
            };
            if error != errors::NONE {
                warn!(resource = %name, error, message = message.as_deref().unwrap_or(""),
                    "config change refused");
            }
            AlterOutcome {
                resource_type,
                name,
                error,
                message,
            }
        })
        .collect()
}

/// Why a resource that is not a topic cannot be altered; `None` for topics.
fn not_alterable(resource_type: i8, name: &str) -> Option<(i16, String)> {
    match resource_type {
        RESOURCE_TOPIC if valid_topic_name(name) => None,
        RESOURCE_TOPIC => Some((
            errors::INVALID_TOPIC_EXCEPTION,
            format!("invalid topic name '{name}'"),
        )),
        RESOURCE_BROKER => Some((
            errors::INVALID_REQUEST,
            "broker settings are static in weir: set them in the config file, a flag or \
             the environment (docs/configuration.md) and restart"
                .to_string(),
        )),
        other => Some((
            errors::INVALID_REQUEST,
            format!("resource type {other} is not supported"),
        )),
    }
}

/// AlterConfigs: each topic's overrides become exactly the configs given (Kafka semantics:
/// a config not named goes back to the broker default).
async fn alter_configs(shard: &Rc<Shard>, a: &AlterConfigsRequest) -> AlterConfigsResponse {
    let resources = a
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            (r.resource_type, r.resource_name.clone(), Ok(ops))
        })
        .collect();
    let mut resp = AlterConfigsResponse::default();
    for o in alter_topic_configs(shard, resources, true, a.validate_only).await {
        let mut r = alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = o.resource_type;
        r.resource_name = o.name;
        r.error_code = o.error;
        r.error_message = o.message.as_deref().map(s);
        resp.responses.push(r);
    }
    resp
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// IncrementalAlterConfigs: SET and DELETE change only the configs named. APPEND and
/// SUBTRACT apply to list-valued configs, which no weir topic config is.
async fn incremental_alter_configs(
    shard: &Rc<Shard>,
    a: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let resources = a
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| match c.config_operation {
                    OP_SET => Ok((
                        c.name.to_string(),
                        Some(c.value.as_ref().map(|v| v.to_string()).unwrap_or_default()),
                    )),
                    OP_DELETE => Ok((c.name.to_string(), None)),
                    op => Err((
                        errors::INVALID_REQUEST,
                        format!(
                            "operation {op} (APPEND=2, SUBTRACT=3) on '{}': not a list config",
                            c.name.as_str()
                        ),
                    )),
                })
                .collect();
            (r.resource_type, r.resource_name.clone(), ops)
        })
        .collect();
    let mut resp = IncrementalAlterConfigsResponse::default();
    for o in alter_topic_configs(shard, resources, false, a.validate_only).await {
        let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
        r.resource_type = o.resource_type;
        r.resource_name = o.name;
        r.error_code = o.error;
        r.error_message = o.message.as_deref().map(s);
        resp.responses.push(r);
    }
    resp
}

// ---- InitProducerId ----

/// Idempotent producers (the default of kafka-python 3 and of Java clients) ask for a
/// producer id first. weir hands out unique ids and accepts their batches; it does not
/// deduplicate retried batches by sequence number (yet). Transactions are not supported.
fn init_producer_id(shard: &Rc<Shard>, i: &InitProducerIdRequest) -> InitProducerIdResponse {
    let mut r = InitProducerIdResponse::default();
    if i.transactional_id.is_some() {
        // Transactions do not exist yet: say so (a fatal "unsupported" for every client),
        // not an authorization failure that sends users looking at ACLs.
        tracing::info!(client = ?i.transactional_id.as_deref().map(|t| t.as_str()),
            "transactional InitProducerId refused: weir does not support transactions yet");
        r.error_code = errors::UNSUPPORTED_VERSION;
        r.producer_id = ProducerId(-1);
        r.producer_epoch = -1;
        return r;
    }
    if i.producer_id.0 >= 0 && i.producer_epoch >= 0 {
        r.producer_id = i.producer_id;
        r.producer_epoch = i.producer_epoch.wrapping_add(1).max(0);
    } else {
        r.producer_id = ProducerId(shard.new_producer_id());
        r.producer_epoch = 0;
    }
    r
}
