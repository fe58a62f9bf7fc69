//! The messages cores send each other over the request and reply meshes. Everything here
//! is `Send` data: topic names, `bytes::Bytes` record chunks, `Arc<Metadata>` snapshots.

use std::sync::Arc;

use bytes::Bytes;

use crate::broker::group::service::{GroupReq, GroupResp};
use weir::metadata::Metadata;

// ---- Messages between cores -------------------------------------------------------------

#[derive(Debug)]
pub struct ProducePart {
    pub topic: String,
    pub partition: i32,
    pub records: Bytes,
}

#[derive(Debug, Clone, Default)]
pub struct ProduceResult {
    pub error: i16,
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// The append time stamped on the batch (a `LogAppendTime` topic), else -1.
    pub log_append_time_ms: i64,
    /// Produce v8+ (KIP-467): why the record set was refused.
    pub error_message: Option<String>,
    /// Produce v8+ (KIP-467): the records that made the batch fail, by index in the
    /// partition's record set, with why; the client fails the others of the batch with
    /// INVALID_DIFFERENT_RECORD and may retry them.
    pub record_errors: Vec<(i32, String)>,
    /// NOT_LEADER_OR_FOLLOWER from a replicated partition's group: the leader its Raft group
    /// knows (broker id, 0 if none) and the term — newer than the metadata for a moment after
    /// a leader change (the Produce answer's KIP-951 hint, `Shard::leader_hint`).
    pub raft_leader: Option<(u64, u64)>,
}

impl ProduceResult {
    /// A partition's answer with only an error code.
    pub fn error(error: i16) -> ProduceResult {
        ProduceResult {
            error,
            base_offset: -1,
            log_start_offset: -1,
            log_append_time_ms: -1,
            error_message: None,
            record_errors: Vec::new(),
            raft_leader: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct FetchPart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
    /// isolation_level=read_committed: stop at the last stable offset and list the aborted
    /// transactions read.
    pub committed: bool,
    /// Fetch v11+ from a consumer (KIP-392): its `client.rack` ("" when it gave none). A
    /// follower answers such a fetch from its own log; a leader may name a replica in that
    /// rack instead (`replica.selector.class`). `None`: older fetches, leaders only.
    pub rack: Option<std::sync::Arc<str>>,
}

#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    pub error: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// read_committed: (producer id, first offset) of each aborted transaction the records
    /// cover; the client skips those producers' records up to their abort markers.
    pub aborted: Vec<(i64, i64)>,
    pub chunks: Vec<Bytes>,
    /// KIP-392: the node the consumer should fetch this partition from instead (no records
    /// then); `None` is -1 on the wire.
    pub preferred_read_replica: Option<i32>,
}

impl FetchResult {
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

#[derive(Debug, Clone)]
pub struct ListPart {
    pub topic: String,
    pub partition: i32,
    pub timestamp: i64,
    /// isolation_level=read_committed: LATEST is the last stable offset.
    pub committed: bool,
}

/// OffsetForLeaderEpoch for one partition: where `epoch` ends.
#[derive(Debug, Clone)]
pub struct EpochPart {
    pub topic: String,
    pub partition: i32,
    pub epoch: i32,
}

/// The answer for an [`EpochPart`]: Kafka's `EpochEndOffset` (-1, -1 when the epoch is above
/// every epoch the log knows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    pub error: i16,
    pub epoch: i32,
    pub end_offset: i64,
}

/// DeleteRecords for one partition: delete everything below `offset` (-1: the high
/// watermark).
#[derive(Debug, Clone)]
pub struct DeletePart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// An idempotent producer of a partition (DescribeProducers): its id and epoch, the last
/// sequence and the max timestamp of its last batch (-1 when that batch is no longer
/// readable).
#[derive(Debug, Clone, Copy)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_sequence: i32,
    /// The first offset of its open transaction, -1 if none.
    pub txn_start_offset: i64,
    pub last_timestamp: i64,
}

#[derive(Debug, Clone, Copy)]
pub struct ListResult {
    pub error: i16,
    pub offset: i64,
    pub timestamp: i64,
    /// The leader epoch of the batch holding `offset` (ListOffsets v4+, KIP-320); -1 if
    /// unknown.
    pub leader_epoch: i32,
}

#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, Option<String>)>,
    /// CreateTopics' explicit assignment: the replicas (node ids, the preferred leader first)
    /// of each partition. Followed in a cluster; a single broker places the partitions itself.
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// CreatePartitions for one topic: the new total count, and optionally the broker (node id)
/// of each new partition.
#[derive(Debug, Clone)]
pub struct NewPartitions {
    pub name: String,
    pub count: i32,
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// A change to one topic's config overrides (AlterConfigs / IncrementalAlterConfigs).
#[derive(Debug, Clone)]
pub struct ConfigChange {
    pub topic: String,
    /// AlterConfigs replaces the whole override set with the SETs given; incremental
    /// changes only the keys named.
    pub replace_all: bool,
    /// (key, `Some(value)` to set, `None` to delete the override).
    pub ops: Vec<(String, Option<String>)>,
}

/// A change to one user's SCRAM credential (AlterUserScramCredentials), checked in form.
#[derive(Debug, Clone)]
pub struct UserChange {
    pub user: String,
    pub mechanism: weir::sasl::Mechanism,
    /// The new credential, or `None` to delete this mechanism's credential.
    pub credential: Option<weir::sasl::ScramCredential>,
}

#[derive(Debug, Clone)]
pub struct TopicResult {
    pub name: String,
    pub error: i16,
    pub message: Option<String>,
    pub partitions: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FetchKey {
    pub from: usize,
    pub id: u64,
}

/// A transaction request, sent to the core of the transactional id.
#[derive(Debug)]
pub enum TxnReq {
    Init {
        txn_id: String,
        timeout_ms: i32,
        producer_id: i64,
        epoch: i16,
    },
    AddPartitions {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        parts: Vec<(String, i32)>,
    },
    AddOffsets {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        group: String,
    },
    End {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    },
    /// A transactional produce: are these partitions in the producer's open transaction?
    Verify {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        parts: Vec<(String, i32)>,
    },
    /// DescribeTransactions / ListTransactions: the ids this core coordinates.
    Describe,
}

/// The answer to a [`TxnReq`].
#[derive(Debug)]
pub enum TxnResp {
    Init {
        error: i16,
        producer_id: i64,
        epoch: i16,
    },
    /// Per partition of an AddPartitions.
    Codes(Vec<i16>),
    Code(i16),
    Described(Vec<(String, crate::broker::txn::TxnMeta)>),
}

#[derive(Debug)]
pub enum Req {
    /// ElectLeaders (PREFERRED) for these partitions of the receiving core's replicas
    /// (`ReplicaHost::elect`). Answered `Resp::Codes`.
    Elect(Vec<(String, i32)>),
    /// Transaction markers to append (and flush) on these partitions of the receiving core.
    Markers {
        producer_id: i64,
        epoch: i16,
        commit: bool,
        parts: Vec<(String, i32)>,
    },
    /// A transaction request, to the core of its transactional id.
    Txn(TxnReq),
    Produce {
        acks: i16,
        parts: Vec<ProducePart>,
    },
    Fetch {
        key: FetchKey,
        min_bytes: i32,
        max_wait_ms: i32,
        max_bytes: i32,
        parts: Vec<FetchPart>,
    },
    /// The requesting core has enough data from other cores: answer the parked fetch now.
    FetchWake(FetchKey),
    ListOffsets(Vec<ListPart>),
    /// → the owner: OffsetForLeaderEpoch.
    EpochEnds(Vec<EpochPart>),
    /// → the owner: DeleteRecords; answered with (error, new low watermark) per partition.
    DeleteRecords(Vec<DeletePart>),
    /// Core 0 → others: a new metadata snapshot; reply once local logs match it.
    Apply(Arc<Metadata>),
    /// → core 0.
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    /// → core 0.
    DeleteTopics(Vec<String>),
    /// → core 0.
    CreatePartitions {
        topics: Vec<NewPartitions>,
        validate_only: bool,
    },
    /// → core 0: per-topic config overrides.
    AlterConfigs {
        changes: Vec<ConfigChange>,
        validate_only: bool,
    },
    /// → core 0: SASL users' credentials.
    AlterUsers(Vec<UserChange>),
    /// → core 0: store these ACLs (checked in form).
    CreateAcls(Vec<weir::acl::AclBinding>),
    /// → core 0: delete the ACLs each filter matches.
    DeleteAcls(Vec<weir::acl::AclFilter>),
    /// → the core owning the group (`Coordinator::core_of`).
    Group(GroupReq),
    /// This core's figures for the metrics endpoint.
    Metrics,
    /// This core's partitions and their sizes (DescribeLogDirs).
    PartitionSizes,
    /// → the owner: the active idempotent producers of each (topic, partition).
    DescribeProducers(Vec<(String, i32)>),
    /// → core 0: partition Raft messages to send to these brokers.
    RaftOut(Vec<(u64, weir::protocol::peer::PartitionMessage)>),
    /// Core 0 → the replica's core: partition Raft messages from peers.
    RaftIn(Vec<weir::protocol::peer::PartitionMessage>),
    /// Core 0 → every core: a peer broker went down or came back; the sleeping partition
    /// groups with a replica on it wake (`hibernate`).
    WakeReplicasOf {
        peer: u64,
        up: bool,
    },
    /// Core 0 → the core a peer's core link is for: the connection, its hello read.
    PeerLink {
        fd: std::os::fd::OwnedFd,
        addr: Option<std::net::SocketAddr>,
    },
    /// → core 0: metadata records to submit to the metadata group (a partition leader);
    /// answered `Stored`.
    Submit(Vec<weir::cluster::Record>),
    /// → the replica's core: the leader (broker id, 0 for none) its Raft group knows of;
    /// answered `Leader`.
    ReplicaLeader {
        topic: String,
        partition: i32,
    },
    /// → core 0: the metadata quorum (`Shard::quorum_status`); answered `Quorum`.
    Quorum,
    /// → core 0: a transaction request for broker `to`; answered `PeerAnswer`.
    PeerCall {
        to: u64,
        call: crate::broker::peer::call::PeerCall,
    },
}

#[derive(Debug)]
pub enum Resp {
    Quorum(Result<crate::broker::peer::call::QuorumStatus, (i16, String)>),
    Produce(Vec<ProduceResult>),
    Fetch(Vec<FetchResult>),
    ListOffsets(Vec<ListResult>),
    EpochEnds(Vec<EpochEnd>),
    /// (error, low watermark) per partition of a `Req::DeleteRecords`.
    LowWatermarks(Vec<(i16, i64)>),
    Topics(Vec<TopicResult>),
    /// (user, error code, message) per user of a `Req::AlterUsers`.
    Users(Vec<(String, i16, Option<String>)>),
    /// Reply to `Req::CreateAcls`: saved and applied, or why not.
    Stored(Result<(), String>),
    /// Reply to `Req::DeleteAcls`: the ACLs each filter deleted (each ACL once, to the first
    /// filter that matched it), or why nothing was.
    AclsDeleted(Result<Vec<Vec<weir::acl::AclBinding>>, String>),
    Group(GroupResp),
    Txn(TxnResp),
    /// Per partition of a `Req::Markers`: its error code.
    Codes(Vec<i16>),
    /// Reply to `Req::Apply`: the partitions this core could not open.
    Applied(Vec<OpenFailure>),
    Metrics(Box<crate::broker::metrics::CoreSnapshot>),
    PartitionSizes(Vec<(String, i32, u64)>),
    /// Per partition of a `Req::DescribeProducers`: its producers, or an error code.
    Producers(Vec<Result<Vec<ProducerInfo>, i16>>),
    Leader(u64),
    /// Reply to `Req::PeerCall`: the other broker's answer (`None`: none in time).
    PeerAnswer(Option<crate::broker::peer::call::PeerAnswer>),
    Done,
}

/// A partition log that a core could not open when applying metadata.
#[derive(Debug, Clone)]
pub struct OpenFailure {
    pub topic: String,
    pub partition: i32,
    pub core: usize,
    pub error: String,
}

/// Envelope on the request mesh: (from core, call id, request).
pub type ReqMsg = (usize, u64, Req);
/// Envelope on the reply mesh: (call id, reply).
pub type RespMsg = (u64, Resp);
