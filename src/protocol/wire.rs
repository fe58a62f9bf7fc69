//! Request decoding: one Kafka request frame (without its size prefix) to a typed request.
//!
//! Pure and synchronous, with no broker state, so that it lives in the library crate where
//! the fuzz target `request_frames` (fuzz/) can feed it arbitrary bytes; the broker
//! (`kafka.rs`) re-exports it.

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Decodable;

/// (api key, min version, max version) — only what weir really implements, and only
/// versions the codec decodes: `tests::advertised_versions_decode` checks each range against
/// the codec's, and tests/broker_wire.rs sends every advertised pair. kafka-protocol follows
/// Kafka 4's message definitions, which dropped the versions KIP-896 removed; weir's copy
/// (vendor/kafka-protocol/WEIR-PATCH.md) speaks again the ones that need no record-format
/// conversion and that Kafka 3.9 still served — ListOffsets v0, CreateTopics v0-1,
/// DeleteTopics v0, DescribeConfigs v0, OffsetCommit v0-1, OffsetFetch v0 — for older
/// clients (Burrow 1.2, sarama before 1.x's Kafka 1.1 mode, kafka-go 0.2; docs/protocol.md).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    // v0-2 are advertised as Kafka 4.0 does (KAFKA-18659: librdkafka turns compression off
    // when Produce v0 is missing) and answered with UNSUPPORTED_VERSION (`LegacyProduce`).
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 0, 10),
    // KIP-320: consumers check their position after a leader change (docs/replication.md,
    // "Leader epochs on the wire").
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 0, 7),
    (ApiKey::DeleteTopics, 0, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::DescribeConfigs, 0, 4),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 0, 9),
    (ApiKey::OffsetFetch, 0, 9),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::ListConfigResources, 0, 1),
    // The metadata Raft group of a cluster (docs/replication.md), as KRaft's
    // `__cluster_metadata` quorum: kafka-metadata-quorum, Admin.describeMetadataQuorum.
    (ApiKey::DescribeQuorum, 0, 2),
    // SASL (docs/security.md): the handshake names the mechanism; after v1 SaslAuthenticate
    // carries its tokens (v1+ tells the session lifetime, KIP-368), after v0 they come as raw
    // frames (before KIP-152). librdkafka enables SASL only when v0 is advertised.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // ACLs (docs/security.md): stored in the metadata, enforced with `authorizer.class.name`.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    // Transactions (docs/transactions.md). AddPartitionsToTxn v4+ is the brokers' batched
    // form and EndTxn v5 / TxnOffsetCommit v5 / AddOffsetsToTxn v4 are KIP-890's
    // transaction.version 2, which weir does not advertise: clients use the classic flow.
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 4),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
];

/// Produce versions advertised but not served (message format v0/v1, removed by KIP-896):
/// decoded by hand (`decode_legacy_produce`) and answered with UNSUPPORTED_VERSION.
pub const LEGACY_PRODUCE_MAX: i16 = 2;

pub fn supported(key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// Why a connection must be closed.
#[derive(Debug)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A decoded request, ready to be processed.
pub struct Request {
    pub key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    /// The client's `client.id` from the request header.
    pub client_id: String,
    pub body: Body,
}

pub enum Body {
    Produce(ProduceRequest),
    /// Produce v0-2: advertised (KAFKA-18659) but refused; what the error answer must name.
    LegacyProduce(LegacyProduce),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    Metadata(MetadataRequest),
    ApiVersions(ApiVersionsRequest),
    /// An ApiVersions request of a version we do not speak: answered with
    /// UNSUPPORTED_VERSION and our version list (KIP-511).
    ApiVersionsUnsupported,
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    CreatePartitions(CreatePartitionsRequest),
    DeleteRecords(DeleteRecordsRequest),
    DescribeCluster(DescribeClusterRequest),
    DescribeQuorum(DescribeQuorumRequest),
    DescribeLogDirs(DescribeLogDirsRequest),
    ElectLeaders(ElectLeadersRequest),
    DescribeConfigs(DescribeConfigsRequest),
    InitProducerId(InitProducerIdRequest),
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest),
    /// weir's streaming fetch extension (API key `stream_fetch::API_KEY`).
    StreamFetch(crate::protocol::stream_fetch::StreamOp),
    AlterConfigs(AlterConfigsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    OffsetDelete(OffsetDeleteRequest),
    DescribeProducers(DescribeProducersRequest),
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(ListPartitionReassignmentsRequest),
    AlterReplicaLogDirs(AlterReplicaLogDirsRequest),
    DescribeTopicPartitions(DescribeTopicPartitionsRequest),
    ListConfigResources(ListConfigResourcesRequest),
    SaslHandshake(SaslHandshakeRequest),
    SaslAuthenticate(SaslAuthenticateRequest),
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    DescribeAcls(DescribeAclsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    EndTxn(EndTxnRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    DescribeTransactions(DescribeTransactionsRequest),
    ListTransactions(ListTransactionsRequest),
}

impl Request {
    /// The API key on the wire: `key` for Kafka's APIs, `stream_fetch::API_KEY` for the
    /// streaming fetch extension (whose `key` is `ApiKey::Fetch`, the API it extends).
    pub fn raw_key(&self) -> i16 {
        match self.body {
            Body::StreamFetch(_) => crate::protocol::stream_fetch::API_KEY,
            _ => self.key as i16,
        }
    }
}

/// The parts of a Produce v0-2 request its UNSUPPORTED_VERSION answer names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyProduce {
    pub acks: i16,
    /// (topic, partitions), in request order.
    pub topics: Vec<(String, Vec<i32>)>,
}

/// Produce v0-2 body: acks:i16 timeout:i32 [name:string [index:i32 records:bytes]].
fn decode_legacy_produce(frame: &mut Bytes) -> Result<LegacyProduce, ProtocolError> {
    use bytes::Buf;
    fn need(frame: &Bytes, n: usize) -> Result<(), ProtocolError> {
        if frame.remaining() < n {
            Err(perr("malformed request body: Produce v0-2 truncated"))
        } else {
            Ok(())
        }
    }
    fn count(frame: &mut Bytes, each: usize) -> Result<usize, ProtocolError> {
        need(frame, 4)?;
        let n = frame.get_i32();
        // Every element takes at least `each` bytes: a count the frame cannot hold is refused
        // before anything is reserved.
        if n < 0 || (n as usize).saturating_mul(each) > frame.remaining() {
            return Err(perr(format!("malformed request body: array of {n}")));
        }
        Ok(n as usize)
    }
    need(frame, 6)?;
    let acks = frame.get_i16();
    let _timeout_ms = frame.get_i32();
    let n_topics = count(frame, 6)?;
    let mut topics = Vec::with_capacity(n_topics);
    for _ in 0..n_topics {
        need(frame, 2)?;
        let len = frame.get_i16();
        if len < 0 {
            return Err(perr("malformed request body: null topic name"));
        }
        need(frame, len as usize)?;
        let name = String::from_utf8_lossy(&frame.split_to(len as usize)).into_owned();
        let n_parts = count(frame, 8)?;
        let mut parts = Vec::with_capacity(n_parts);
        for _ in 0..n_parts {
            need(frame, 8)?;
            parts.push(frame.get_i32());
            let size = frame.get_i32();
            if size > 0 {
                need(frame, size as usize)?;
                frame.advance(size as usize);
            }
        }
        topics.push((name, parts));
    }
    Ok(LegacyProduce { acks, topics })
}

pub fn perr(msg: impl Into<String>) -> ProtocolError {
    ProtocolError(msg.into())
}

/// The streaming fetch extension: request header v1 (key, version, correlation id,
/// client id), then a `StreamOp`.
fn decode_stream_fetch(
    mut frame: Bytes,
    version: i16,
    correlation_id: i32,
) -> Result<Request, ProtocolError> {
    use bytes::Buf;
    if version != crate::protocol::stream_fetch::VERSION {
        return Err(perr(format!(
            "unsupported version {version} of StreamFetch (weir speaks 0)"
        )));
    }
    frame.advance(8);
    if frame.remaining() < 2 {
        return Err(perr("StreamFetch: truncated client id"));
    }
    let n = frame.get_i16();
    let client_id = if n < 0 {
        String::new()
    } else {
        if frame.remaining() < n as usize {
            return Err(perr("StreamFetch: truncated client id"));
        }
        String::from_utf8_lossy(&frame.split_to(n as usize)).into_owned()
    };
    let op =
        crate::protocol::stream_fetch::StreamOp::decode(frame).map_err(|e| perr(e.to_string()))?;
    Ok(Request {
        key: ApiKey::Fetch,
        version,
        correlation_id,
        client_id,
        body: Body::StreamFetch(op),
    })
}

/// Decodes one request frame (without its 4-byte size prefix). Synchronous and cheap: runs
/// in the connection's read loop, so requests are decoded in arrival order.
pub fn decode_request(mut frame: Bytes) -> Result<Request, ProtocolError> {
    if frame.len() < 8 {
        return Err(perr(format!(
            "frame of {} bytes is too short for a request header",
            frame.len()
        )));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    if raw_key == crate::protocol::stream_fetch::API_KEY {
        return decode_stream_fetch(frame, version, correlation_id);
    }
    let key = ApiKey::try_from(raw_key).map_err(|_| perr(format!("unknown api key {raw_key}")))?;
    let Some((lo, hi)) = supported(key) else {
        return Err(perr(format!(
            "unsupported api {key:?} (key {raw_key}) v{version}"
        )));
    };
    if version < lo || version > hi {
        if key == ApiKey::ApiVersions {
            return Ok(Request {
                key,
                version,
                correlation_id,
                client_id: String::new(),
                body: Body::ApiVersionsUnsupported,
            });
        }
        return Err(perr(format!(
            "unsupported version {version} of {key:?} (weir speaks {lo}..={hi})"
        )));
    }
    let header_version = key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| perr(format!("bad request header: {e}")))?;
    debug_assert_eq!(header.correlation_id, correlation_id);
    let body = match key {
        ApiKey::Produce if version <= LEGACY_PRODUCE_MAX => {
            Body::LegacyProduce(decode_legacy_produce(&mut frame)?)
        }
        ApiKey::Produce => Body::Produce(decode(&mut frame, version)?),
        ApiKey::Fetch => Body::Fetch(decode(&mut frame, version)?),
        ApiKey::ListOffsets => Body::ListOffsets(decode(&mut frame, version)?),
        ApiKey::OffsetForLeaderEpoch => Body::OffsetForLeaderEpoch(decode(&mut frame, version)?),
        ApiKey::Metadata => Body::Metadata(decode(&mut frame, version)?),
        ApiKey::ApiVersions => Body::ApiVersions(decode(&mut frame, version)?),
        ApiKey::CreateTopics => Body::CreateTopics(decode(&mut frame, version)?),
        ApiKey::DeleteTopics => Body::DeleteTopics(decode(&mut frame, version)?),
        ApiKey::CreatePartitions => Body::CreatePartitions(decode(&mut frame, version)?),
        ApiKey::DeleteRecords => Body::DeleteRecords(decode(&mut frame, version)?),
        ApiKey::DescribeCluster => Body::DescribeCluster(decode(&mut frame, version)?),
        ApiKey::DescribeQuorum => Body::DescribeQuorum(decode(&mut frame, version)?),
        ApiKey::DescribeLogDirs => Body::DescribeLogDirs(decode(&mut frame, version)?),
        ApiKey::ElectLeaders => Body::ElectLeaders(decode(&mut frame, version)?),
        ApiKey::DescribeConfigs => Body::DescribeConfigs(decode(&mut frame, version)?),
        ApiKey::InitProducerId => Body::InitProducerId(decode(&mut frame, version)?),
        ApiKey::AddPartitionsToTxn => Body::AddPartitionsToTxn(decode(&mut frame, version)?),
        ApiKey::AddOffsetsToTxn => Body::AddOffsetsToTxn(decode(&mut frame, version)?),
        ApiKey::EndTxn => Body::EndTxn(decode(&mut frame, version)?),
        ApiKey::TxnOffsetCommit => Body::TxnOffsetCommit(decode(&mut frame, version)?),
        ApiKey::DescribeTransactions => Body::DescribeTransactions(decode(&mut frame, version)?),
        ApiKey::ListTransactions => Body::ListTransactions(decode(&mut frame, version)?),
        ApiKey::FindCoordinator => Body::FindCoordinator(decode(&mut frame, version)?),
        ApiKey::JoinGroup => Body::JoinGroup(decode(&mut frame, version)?),
        ApiKey::SyncGroup => Body::SyncGroup(decode(&mut frame, version)?),
        ApiKey::Heartbeat => Body::Heartbeat(decode(&mut frame, version)?),
        ApiKey::LeaveGroup => Body::LeaveGroup(decode(&mut frame, version)?),
        ApiKey::OffsetCommit => Body::OffsetCommit(decode(&mut frame, version)?),
        ApiKey::OffsetFetch => Body::OffsetFetch(decode(&mut frame, version)?),
        ApiKey::DescribeGroups => Body::DescribeGroups(decode(&mut frame, version)?),
        ApiKey::ListGroups => Body::ListGroups(decode(&mut frame, version)?),
        ApiKey::DeleteGroups => Body::DeleteGroups(decode(&mut frame, version)?),
        ApiKey::ConsumerGroupHeartbeat => {
            Body::ConsumerGroupHeartbeat(decode(&mut frame, version)?)
        }
        ApiKey::ConsumerGroupDescribe => Body::ConsumerGroupDescribe(decode(&mut frame, version)?),
        ApiKey::AlterConfigs => Body::AlterConfigs(decode(&mut frame, version)?),
        ApiKey::IncrementalAlterConfigs => {
            Body::IncrementalAlterConfigs(decode(&mut frame, version)?)
        }
        ApiKey::OffsetDelete => Body::OffsetDelete(decode(&mut frame, version)?),
        ApiKey::DescribeProducers => Body::DescribeProducers(decode(&mut frame, version)?),
        ApiKey::AlterPartitionReassignments => {
            Body::AlterPartitionReassignments(decode(&mut frame, version)?)
        }
        ApiKey::ListPartitionReassignments => {
            Body::ListPartitionReassignments(decode(&mut frame, version)?)
        }
        ApiKey::AlterReplicaLogDirs => Body::AlterReplicaLogDirs(decode(&mut frame, version)?),
        ApiKey::DescribeTopicPartitions => {
            Body::DescribeTopicPartitions(decode(&mut frame, version)?)
        }
        ApiKey::ListConfigResources => Body::ListConfigResources(decode(&mut frame, version)?),
        ApiKey::SaslHandshake => Body::SaslHandshake(decode(&mut frame, version)?),
        ApiKey::SaslAuthenticate => Body::SaslAuthenticate(decode(&mut frame, version)?),
        ApiKey::DescribeUserScramCredentials => {
            Body::DescribeUserScramCredentials(decode(&mut frame, version)?)
        }
        ApiKey::AlterUserScramCredentials => {
            Body::AlterUserScramCredentials(decode(&mut frame, version)?)
        }
        ApiKey::DescribeAcls => Body::DescribeAcls(decode(&mut frame, version)?),
        ApiKey::CreateAcls => Body::CreateAcls(decode(&mut frame, version)?),
        ApiKey::DeleteAcls => Body::DeleteAcls(decode(&mut frame, version)?),
        _ => return Err(perr(format!("unsupported api {key:?}"))),
    };
    Ok(Request {
        key,
        version,
        correlation_id,
        client_id: header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        body,
    })
}

fn decode<T: Decodable>(frame: &mut Bytes, version: i16) -> Result<T, ProtocolError> {
    T::decode(frame, version).map_err(|e| perr(format!("malformed request body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::{Message, VersionRange};

    fn codec_range(key: ApiKey) -> (VersionRange, VersionRange) {
        macro_rules! r {
            ($req:ty, $resp:ty) => {
                (<$req>::VERSIONS, <$resp>::VERSIONS)
            };
        }
        match key {
            ApiKey::Produce => r!(ProduceRequest, ProduceResponse),
            ApiKey::Fetch => r!(FetchRequest, FetchResponse),
            ApiKey::ListOffsets => r!(ListOffsetsRequest, ListOffsetsResponse),
            ApiKey::OffsetForLeaderEpoch => {
                r!(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse)
            }
            ApiKey::Metadata => r!(MetadataRequest, MetadataResponse),
            ApiKey::ApiVersions => r!(ApiVersionsRequest, ApiVersionsResponse),
            ApiKey::CreateTopics => r!(CreateTopicsRequest, CreateTopicsResponse),
            ApiKey::DeleteTopics => r!(DeleteTopicsRequest, DeleteTopicsResponse),
            ApiKey::DescribeConfigs => r!(DescribeConfigsRequest, DescribeConfigsResponse),
            ApiKey::InitProducerId => r!(InitProducerIdRequest, InitProducerIdResponse),
            ApiKey::AddPartitionsToTxn => {
                r!(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse)
            }
            ApiKey::AddOffsetsToTxn => r!(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
            ApiKey::EndTxn => r!(EndTxnRequest, EndTxnResponse),
            ApiKey::TxnOffsetCommit => r!(TxnOffsetCommitRequest, TxnOffsetCommitResponse),
            ApiKey::DescribeTransactions => {
                r!(DescribeTransactionsRequest, DescribeTransactionsResponse)
            }
            ApiKey::ListTransactions => r!(ListTransactionsRequest, ListTransactionsResponse),
            ApiKey::FindCoordinator => r!(FindCoordinatorRequest, FindCoordinatorResponse),
            ApiKey::JoinGroup => r!(JoinGroupRequest, JoinGroupResponse),
            ApiKey::SyncGroup => r!(SyncGroupRequest, SyncGroupResponse),
            ApiKey::Heartbeat => r!(HeartbeatRequest, HeartbeatResponse),
            ApiKey::LeaveGroup => r!(LeaveGroupRequest, LeaveGroupResponse),
            ApiKey::OffsetCommit => r!(OffsetCommitRequest, OffsetCommitResponse),
            ApiKey::OffsetFetch => r!(OffsetFetchRequest, OffsetFetchResponse),
            ApiKey::DescribeGroups => r!(DescribeGroupsRequest, DescribeGroupsResponse),
            ApiKey::ListGroups => r!(ListGroupsRequest, ListGroupsResponse),
            ApiKey::ConsumerGroupHeartbeat => {
                r!(
                    ConsumerGroupHeartbeatRequest,
                    ConsumerGroupHeartbeatResponse
                )
            }
            ApiKey::ConsumerGroupDescribe => {
                r!(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse)
            }
            ApiKey::DeleteGroups => r!(DeleteGroupsRequest, DeleteGroupsResponse),
            ApiKey::CreatePartitions => r!(CreatePartitionsRequest, CreatePartitionsResponse),
            ApiKey::DeleteRecords => r!(DeleteRecordsRequest, DeleteRecordsResponse),
            ApiKey::DescribeCluster => r!(DescribeClusterRequest, DescribeClusterResponse),
            ApiKey::DescribeQuorum => r!(DescribeQuorumRequest, DescribeQuorumResponse),
            ApiKey::DescribeLogDirs => r!(DescribeLogDirsRequest, DescribeLogDirsResponse),
            ApiKey::ElectLeaders => r!(ElectLeadersRequest, ElectLeadersResponse),
            ApiKey::AlterConfigs => r!(AlterConfigsRequest, AlterConfigsResponse),
            ApiKey::IncrementalAlterConfigs => {
                r!(
                    IncrementalAlterConfigsRequest,
                    IncrementalAlterConfigsResponse
                )
            }
            ApiKey::OffsetDelete => r!(OffsetDeleteRequest, OffsetDeleteResponse),
            ApiKey::DescribeProducers => r!(DescribeProducersRequest, DescribeProducersResponse),
            ApiKey::AlterPartitionReassignments => r!(
                AlterPartitionReassignmentsRequest,
                AlterPartitionReassignmentsResponse
            ),
            ApiKey::ListPartitionReassignments => r!(
                ListPartitionReassignmentsRequest,
                ListPartitionReassignmentsResponse
            ),
            ApiKey::AlterReplicaLogDirs => {
                r!(AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse)
            }
            ApiKey::DescribeTopicPartitions => {
                r!(
                    DescribeTopicPartitionsRequest,
                    DescribeTopicPartitionsResponse
                )
            }
            ApiKey::ListConfigResources => {
                r!(ListConfigResourcesRequest, ListConfigResourcesResponse)
            }
            ApiKey::SaslHandshake => r!(SaslHandshakeRequest, SaslHandshakeResponse),
            ApiKey::SaslAuthenticate => r!(SaslAuthenticateRequest, SaslAuthenticateResponse),
            ApiKey::DescribeUserScramCredentials => r!(
                DescribeUserScramCredentialsRequest,
                DescribeUserScramCredentialsResponse
            ),
            ApiKey::AlterUserScramCredentials => r!(
                AlterUserScramCredentialsRequest,
                AlterUserScramCredentialsResponse
            ),
            ApiKey::DescribeAcls => r!(DescribeAclsRequest, DescribeAclsResponse),
            ApiKey::CreateAcls => r!(CreateAclsRequest, CreateAclsResponse),
            ApiKey::DeleteAcls => r!(DeleteAclsRequest, DeleteAclsResponse),
            other => panic!("{other:?} is advertised but has no codec range here"),
        }
    }

    /// docs/protocol.md's table is the advertised one: same APIs, keys and version ranges.
    #[test]
    fn protocol_doc_matches_the_table() {
        let doc = include_str!("../../docs/protocol.md");
        let rows: Vec<(String, i16, i16, i16)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let key: i16 = cells.get(2)?.parse().ok()?;
                let (lo, hi) = cells.get(3)?.split_once('–')?;
                Some((
                    cells[1].to_string(),
                    key,
                    lo.parse().ok()?,
                    hi.parse().ok()?,
                ))
            })
            .collect();
        assert_eq!(
            rows.len(),
            SUPPORTED.len(),
            "docs/protocol.md rows: {rows:?}"
        );
        for &(key, lo, hi) in SUPPORTED {
            let want = (format!("{key:?}"), key as i16, lo, hi);
            assert!(
                rows.contains(&want),
                "docs/protocol.md has no row {want:?} (rows: {rows:?})"
            );
        }
    }

    /// ApiVersions must not promise what the decoder refuses: a client that picks an
    /// advertised version got its connection closed (CreateTopics v0-1, DeleteTopics v0,
    /// DescribeConfigs v0, OffsetCommit v0-1 and OffsetFetch v0 were advertised although the
    /// codec, following Kafka 4.0, no longer decodes them).
    #[test]
    fn advertised_versions_decode() {
        for &(key, lo, hi) in SUPPORTED {
            let (req, resp) = codec_range(key);
            for v in lo..=hi {
                if key == ApiKey::Produce && v <= LEGACY_PRODUCE_MAX {
                    continue; // answered by hand (`LegacyProduce`)
                }
                assert!(
                    req.min <= v && v <= req.max && resp.min <= v && v <= resp.max,
                    "{key:?} v{v} is advertised but the codec speaks requests {req}, responses {resp}"
                );
            }
        }
    }
}
